"""Chapter 19's small language models with and without gated attention and QK-norm.

Three models of one configuration (:data:`HEAD_OPTIONS_CONFIG`, the capstone's form at a
smaller size), trained on the same batches from the same seed, differ only in their
attention sub-layers: ``"plain"``, ``"gated"`` (a sigmoid gate on each head's output,
:class:`~attncore.TransformerBlockParams`'s ``w_gate``) and ``"qk-norm"`` (RMSNorm of every
head's queries and keys). ``scripts/train_head_options.py`` trains them and writes the
checkpoints that ship next to this module (``head_options_<name>.safetensors``, float32);
:func:`load_variant` reads one, :func:`score_statistics` measures its attention.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..language_model import LanguageModel, init_language_model
from ..layers import layer_norm, rms_norm
from ..multihead import split_heads
from ..transformer import transformer_block
from .language import LMConfig, corpus, load_checkpoint

__all__ = ["HEAD_OPTIONS_CONFIG", "VARIANTS", "checkpoint_path", "init_variant",
           "load_variant", "score_statistics"]

HEAD_OPTIONS_CONFIG = LMConfig(d_model=32, num_heads=2, d_ff=128, num_layers=2, seq_len=64,
                               batch_size=16, steps=600, lr=3e-3, warmup_steps=30, seed=0)
"""The configuration of the three shipped models: heads of width 16, two layers."""

VARIANTS = {"plain": (False, False), "gated": (True, False), "qk-norm": (False, True)}
"""Each model's name and its options ``(gate, qk_norm)``."""


def checkpoint_path(name: str) -> Path:
    """The shipped file of the model ``name`` (one of :data:`VARIANTS`)."""
    if name not in VARIANTS:
        raise ValueError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    return Path(__file__).with_name(f"head_options_{name}.safetensors")


def init_variant(name: str, config: LMConfig = HEAD_OPTIONS_CONFIG) -> LanguageModel:
    """The untrained float64 torch model ``name`` (its tensors requiring grad): the same
    seeded weights in every variant, the options' weights drawn after them."""
    import torch

    gate, qk_norm = VARIANTS[checkpoint_path(name).stem[len("head_options_"):]]
    c = config
    tok, _, _ = corpus()
    model = init_language_model(tok.vocab_size, c.d_model, c.num_heads, c.d_ff,
                                c.num_layers, c.seq_len, gate=gate, qk_norm=qk_norm,
                                seed=c.seed, dtype=torch.float64, backend="torch")
    for t in model.tensors():
        t.requires_grad_()
    return model


def load_variant(name: str) -> tuple[LanguageModel, list[float]]:
    """The shipped model ``name`` (torch, CPU, float64) and its training losses."""
    model, _, losses = load_checkpoint(checkpoint_path(name))
    return model, losses


def score_statistics(model: LanguageModel, ids: Any) -> list[dict[str, float]]:
    """What the attention of each layer does on the windows ``ids``, ``(batch, n)``.

    Returns one dict per layer: ``"max_score"``, the largest ``|q . k| / sqrt(d_head)``
    over heads, windows and the (causal) pairs; ``"bound"``, QK-norm's bound
    ``sqrt(d_head) max|g_q| max|g_k|`` on it (``nan`` without QK-norm); and
    ``"first_key"``, the mean attention weight that queries from position 8 on give to
    position 0 (the first token, where attention sinks form).
    """
    import torch

    with torch.no_grad():
        x = torch.as_tensor(np.asarray(ids))
        n = x.shape[-1]
        h = model.tok_emb[x] + model.pos_emb[:n]
        out = []
        for block in model.blocks:
            a = block.attn
            hn = (rms_norm(h, block.ln1_weight, block.eps) if block.norm == "rms" else
                  layer_norm(h, block.ln1_weight, block.ln1_bias, block.eps))
            q = split_heads(hn @ a.w_q + (0 if a.b_q is None else a.b_q), a.num_heads)
            k = split_heads(hn @ a.w_k + (0 if a.b_k is None else a.b_k), a.num_heads)
            bound = math.nan
            if block.qk_norm:
                q = rms_norm(q, block.q_norm_weight, block.eps)
                k = rms_norm(k, block.k_norm_weight, block.eps)
                bound = math.sqrt(a.d_head) * float(block.q_norm_weight.abs().max()) * \
                    float(block.k_norm_weight.abs().max())
            scores = q @ k.transpose(-1, -2) / math.sqrt(a.d_head)
            later = torch.ones(n, n, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(later, -math.inf)
            weights = scores.softmax(-1)
            out.append({"max_score": float(scores.masked_fill(later, 0).abs().max()),
                        "bound": bound,
                        "first_key": float(weights[..., 8:, 0].mean())})
            h = transformer_block(block, h, causal=True)
    return out
