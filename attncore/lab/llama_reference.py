"""transformers' ``LlamaForCausalLM`` holding a GGUF file's weights: the reference that
:class:`attncore.pretrained.SmolLM2` is tested and timed against.

Every step is someone else's code than attncore's: the configuration by transformers'
table of GGUF keys (``GGUF_CONFIG_MAPPING``), the tensor names by llama.cpp's own map
(``gguf.get_tensor_name_map``), the query and key rows by transformers' un-permutation
(``LlamaTensorProcessor``), every tensor dequantized by ``gguf``, the forward pass by
transformers' Llama modeling code. That is what ``from_pretrained(folder,
gguf_file=...)`` does too, but that path takes about 75 s of CPU time on a 2-core machine
(it parses the file twice and builds llama.cpp's name map once per tensor); this takes a
few seconds. (The two give the same weights, checked once by hand when this was written:
every tensor of layer 0 equal, bit for bit.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["transformers_llama"]


def transformers_llama(gguf_model: Any) -> Any:
    """A float32 ``transformers.LlamaForCausalLM`` on the CPU, in eval mode, holding the
    weights of ``gguf_model`` (an open file, :class:`attncore.pretrained.GGUFModel`, such
    as ``SmolLM2.gguf``).

    Raises
    ------
    ValueError
        A file whose architecture is not ``"llama"``.
    """
    import gguf
    import torch
    import transformers
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    file = gguf_model
    arch = file.field("general.architecture")
    if arch != "llama":
        raise ValueError(f"gguf_model: expected the architecture 'llama', got {arch!r}")
    settings = {hf: file.field(f"llama.{key}") for key, hf in
                GGUF_CONFIG_MAPPING["llama"].items() if file.field(f"llama.{key}") is not None}
    config = transformers.LlamaConfig(**settings,
                                      tie_word_embeddings="output.weight" not in file.tensors)
    with torch.device("meta"):                   # no random initialisation to overwrite
        model = transformers.LlamaForCausalLM(config)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    processor = LlamaTensorProcessor(config=config.to_dict())
    state = {}
    for hf_name in model.state_dict():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        stem, suffix = hf_name.rsplit(".", 1)
        gguf_name = f"{names.get_name(stem)}.{suffix}"
        weights = processor.process(file.dequantize(gguf_name), gguf_name).weights
        state[hf_name] = torch.from_numpy(np.array(weights, dtype=np.float32))
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # RoPE's frequencies, a buffer computed when the module is made: made again on the CPU
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)
    meta = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if t.is_meta]
    if meta:
        raise RuntimeError(f"transformers_llama: left on the meta device: {meta[:5]}")
    return model.eval()
