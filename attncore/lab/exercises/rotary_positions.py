"""Checkers for the exercises of the rotary-positions chapter (RoPE, ALiBi, longer contexts)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import Verdict, exercise, real_answer

# ex-rope-alibi-reach: ALiBi's slopes for H heads, m_h = 2^(-8h/H), h = 1..H; a key d
# positions back gets exp(-m_h d) times the weight of the query's own key when the content
# scores are equal.
ALIBI_HEADS, REACH_DISTANCE, REACH_SHARE = 8, 512, 0.01


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi's slopes ``2 ** (-8 h / heads)`` for ``h = 1 .. heads``, steepest first."""
    return 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)


@exercise("ex-rope-alibi-reach")
def alibi_reach(heads, reach) -> Verdict:
    """How many of 8 ALiBi heads give a key 512 back at least 1% of the own key's weight, and
    the farthest whole distance at which the shallowest head still does."""
    heads, reach = real_answer("my_heads", heads), real_answer("my_reach", reach)
    slopes = alibi_slopes(ALIBI_HEADS)
    share = np.exp(-slopes * REACH_DISTANCE)
    want_heads = int((share >= REACH_SHARE).sum())
    # the largest whole d with exp(-m d) >= 1%: d <= ln(100) / m
    want_reach = math.floor(math.log(1 / REACH_SHARE) / slopes[-1])
    details = []
    if heads != want_heads:
        details.append("my_heads: a head sees the key when exp(-m_h * 512) >= 0.01, that is "
                       "m_h <= ln(100) / 512; count the slopes that small.")
    if reach != want_reach:
        details.append("my_reach: solve exp(-d / 256) >= 0.01 for d and take the largest "
                       "whole number of positions that satisfies it (not rounded up).")
    if details:
        return Verdict(False, "not every part is right yet.", tuple(details))
    return Verdict(True, "The steepest head forgets a key within ten positions, the "
                         "shallowest ones keep a thousand in view: ALiBi's heads split the "
                         "distances between them.")


# ex-rope-convert: a layer of H heads trained with the interleaved convention (pairs 2i, 2i+1
# of every head), to be run by code that pairs i with i + d/2 (attncore.rope).
CONVERT_D_MODEL, CONVERT_HEADS, CONVERT_N = 16, 2, 7


def _rope_interleaved(x, positions):
    """RoPE with neighbouring pairs (2i, 2i + 1) of the last axis, as Meta's LLaMA code."""
    from ...positions import position_frequencies

    angles = np.asarray(positions, dtype=np.float64)[:, None] \
        * position_frequencies(x.shape[-1])
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


def _interleaved_layer(p, x):
    from ...attention import scaled_dot_product_attention
    from ...multihead import merge_heads, split_heads

    pos = np.arange(x.shape[-2])
    q, k, v = (split_heads(x @ w + b, p.num_heads) for w, b in
               ((p.w_q, p.b_q), (p.w_k, p.b_k), (p.w_v, p.b_v)))
    z = scaled_dot_product_attention(_rope_interleaved(q, pos), _rope_interleaved(k, pos), v,
                                     causal=True)
    return merge_heads(z) @ p.w_o + p.b_o


@exercise("ex-rope-convert")
def convert(convert_columns) -> Verdict:
    """The reader's ``convert_columns(w, num_heads)``: ``w`` with its last axis reordered,
    head by head, so that a checkpoint of the interleaved convention runs with ``ac.rope``."""
    from dataclasses import replace

    from ...multihead import init_multihead
    from ...positions import rope_multi_head_attention

    if not callable(convert_columns):
        return Verdict(False, "expected a function convert_columns(w, num_heads), got "
                              f"{type(convert_columns).__name__}")
    rng = np.random.default_rng(11)
    p = init_multihead(CONVERT_D_MODEL, CONVERT_HEADS, seed=12)
    p = replace(p, **{name: rng.standard_normal(CONVERT_D_MODEL)
                      for name in ("b_q", "b_k", "b_v", "b_o")})
    x = rng.standard_normal((CONVERT_N, CONVERT_D_MODEL))
    want = _interleaved_layer(p, x)
    new = {}
    for name in ("w_q", "w_k", "b_q", "b_k"):
        value = np.asarray(convert_columns(getattr(p, name).copy(), CONVERT_HEADS))
        if value.shape != getattr(p, name).shape:
            return Verdict(False, f"convert_columns changed the shape of {name} from "
                                  f"{getattr(p, name).shape} to {value.shape}; it only "
                                  f"reorders the last axis.")
        new[name] = value
    got = rope_multi_head_attention(replace(p, **new), x, causal=True)
    gap = float(np.abs(got - want).max())
    if gap < 1e-10:
        return Verdict(True, "The converted layer gives the checkpoint's outputs: the same "
                             "scores in every head, the same weights, and values and output "
                             "projection untouched.")
    return Verdict(False, f"the converted layer's outputs differ from the checkpoint's by up "
                          f"to {gap:.2g}. Reorder within each head of width d: the features "
                          f"a pair of the interleaved convention rotates together must land "
                          f"where ac.rope rotates them together.")


@exercise("ex-rope-your-rope")
def your_rope(fn: Any) -> Verdict:
    """A reader-written ``my_rope(x, positions, base=10000.0)``, put through
    :func:`attncore.testing.check_rope`."""
    from ...testing import check_rope
    from .scaled_dot_product_attention import verdict_from_report

    if not callable(fn):
        return Verdict(False, f"expected a function my_rope(x, positions, base=10000.0), "
                              f"got {type(fn).__name__}")
    return verdict_from_report(check_rope(fn),
                               "from attncore.testing import check_rope; "
                               "print(check_rope(my_rope))", "Your RoPE")
