"""Scaled dot-product attention, with masks, on NumPy arrays and torch tensors.

    Attention(Q, K, V) = softmax(Q K^T * scale) V,     scale = 1 / sqrt(d_k) by default.

The NumPy function is the readable reference: three lines of algebra plus masking. The torch
function computes the same thing; when the attention weights are not requested it calls
``torch.nn.functional.scaled_dot_product_attention``, which on a GPU dispatches to fused
(FlashAttention-style) kernels, and then applies attncore's rule for fully masked rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    backend_of,
    check_finite,
    check_floating,
    check_min_rank,
    check_same_dtype,
    is_bool,
    shape_of,
    dtype_name,
)
from .softmax import softmax


def scaled_dot_product_attention(q: Any, k: Any, v: Any, *, mask: Any = None,
                                 causal: bool = False, scale: float | None = None,
                                 return_weights: bool = False) -> Any:
    """Softmax-weighted average of the value rows, one distribution per query.

    Parameters
    ----------
    q : array ``(..., n_q, d_k)``
        Queries, one per row.
    k : array ``(..., n_k, d_k)``
        Keys, one per row; same ``d_k`` as ``q``.
    v : array ``(..., n_k, d_v)``
        Values, one per key.
    mask : boolean array broadcastable to ``(..., n_q, n_k)``, optional
        ``True`` means "query i may attend to key j". Broadcasting may add leading axes
        of size 1 but may not enlarge the batch shape of ``q``.
    causal : bool
        Also forbid key ``j > i`` for query ``i`` (top-left aligned, as in PyTorch:
        ``tril(ones(n_q, n_k))``). Combined with ``mask`` by logical AND.
    scale : float, optional
        Multiplies the scores; defaults to ``1 / sqrt(d_k)``.
    return_weights : bool
        Also return the attention weights.

    ``q``, ``k`` and ``v`` must share one library, one device, one floating dtype, and the
    same leading (batch) shape ``...``; attncore does not broadcast batch axes silently.

    Returns
    -------
    out : array ``(..., n_q, d_v)``, same dtype, library and device as ``q``
    weights : array ``(..., n_q, n_k)``, only if ``return_weights``; each row sums to 1.

    A query row whose keys are **all** masked has no distribution to average with. attncore
    returns **zeros** for that row of ``out`` and of ``weights``, never NaN.

    Raises
    ------
    TypeError
        Mixed NumPy/torch inputs, a non-floating or mismatched dtype, a non-boolean mask.
    ValueError
        Rank below 2, ``d_k`` of ``q`` and ``k`` differ, ``n_k`` of ``k`` and ``v`` differ,
        batch shapes differ, a mask that does not broadcast, a non-finite input or scale.
    """
    backend = backend_of(q=q, k=k, v=v, mask=mask)
    q_shape, n_q, n_k = check_attention_inputs(q, k, v, mask=mask, scale=scale)
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1])
    if backend == NUMPY:
        return _attention_numpy(q, k, v, mask, causal, float(scale), return_weights)
    return _attention_torch(q, k, v, mask, causal, float(scale), return_weights)


def check_attention_inputs(q: Any, k: Any, v: Any, *, mask: Any = None,
                           scale: float | None = None) -> tuple[tuple[int, ...], int, int]:
    """Validate the inputs of an attention call; return ``(q.shape, n_q, n_k)``.

    Shared by every attention variant in attncore so that all of them reject the same bad
    input with the same message.
    """
    for name, x, layout in (("q", q, "(..., n_q, d_k)"), ("k", k, "(..., n_k, d_k)"),
                            ("v", v, "(..., n_k, d_v)")):
        check_floating(name, x)
        check_min_rank(name, x, 2, layout)
    check_same_dtype(q=q, k=k, v=v)
    qs, ks, vs = shape_of(q), shape_of(k), shape_of(v)
    if qs[-1] != ks[-1]:
        raise ValueError(f"q and k must have the same d_k (last axis): q has shape {qs} "
                         f"(d_k={qs[-1]}), k has shape {ks} (d_k={ks[-1]})")
    if ks[-2] != vs[-2]:
        raise ValueError(f"k and v must have the same n_k (one value per key): k has shape "
                         f"{ks} (n_k={ks[-2]}), v has shape {vs} (n_k={vs[-2]})")
    if not qs[:-2] == ks[:-2] == vs[:-2]:
        raise ValueError(f"q, k and v must have the same batch shape (...): got q {qs}, "
                         f"k {ks}, v {vs}")
    n_q, n_k = qs[-2], ks[-2]
    if mask is not None:
        if not is_bool(mask):
            raise TypeError(f"mask: expected a boolean array (True = may attend), "
                            f"got dtype {dtype_name(mask)}")
        target = qs[:-2] + (n_q, n_k)
        try:
            joint = np.broadcast_shapes(shape_of(mask), target)
        except ValueError:
            joint = None
        if joint != target:
            raise ValueError(f"mask: expected a shape broadcastable to (..., n_q, n_k) = "
                             f"{target}, got {shape_of(mask)}")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"scale: expected a finite real number, got {scale!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_finite(name, x)
    return qs, n_q, n_k


def causal_mask(n_q: int, n_k: int, *, like: Any = None) -> Any:
    """Boolean ``(n_q, n_k)`` mask, True on and below the diagonal: query i sees keys 0..i.

    Returned as a NumPy array, or as a torch tensor on ``like``'s device when ``like`` is a
    tensor.
    """
    if like is None or isinstance(like, np.ndarray):
        return np.tril(np.ones((n_q, n_k), dtype=bool))
    import torch

    return torch.ones(n_q, n_k, dtype=torch.bool, device=like.device).tril()


def combined_mask(mask: Any, causal: bool, n_q: int, n_k: int, like: Any) -> Any:
    """The mask actually applied: ``mask AND causal``, or None if neither is set."""
    if not causal:
        return mask
    tri = causal_mask(n_q, n_k, like=like)
    return tri if mask is None else mask & tri


def _attention_numpy(q, k, v, mask, causal, scale, return_weights):
    # The score matrix is the one big array (n_q x n_k per head), so every step below either
    # avoids a pass over it or works on it in place. Scaling q (n_q x d_k numbers) instead of
    # the scores gives the same product with a much smaller multiplication.
    scores = (q * np.asarray(scale, dtype=q.dtype)) @ np.swapaxes(k, -1, -2)
    allowed = combined_mask(mask, causal, q.shape[-2], k.shape[-2], q)
    if allowed is not None:
        np.copyto(scores, np.asarray(-np.inf, dtype=q.dtype), where=~allowed)
    # attncore.softmax's stable softmax along the keys, in place: shift each row by its
    # maximum, exponentiate, sum. (NaN or +inf in a row makes its maximum NaN or +inf.)
    row_max = scores.max(axis=-1, keepdims=True)
    if np.isnan(row_max).any() or np.isposinf(row_max).any():
        raise ValueError(f"x: expected no NaN or +inf logits, got some (dtype {scores.dtype})")
    row_max[np.isneginf(row_max)] = 0      # fully masked row: shift by 0; exp(-inf) = 0
    scores -= row_max
    np.exp(scores, out=scores)             # unnormalised weights
    total = scores.sum(axis=-1, keepdims=True)
    nonempty = total > 0                   # False only for fully masked rows: they stay 0
    if return_weights:
        weights = np.divide(scores, total, out=scores, where=nonempty)
        return weights @ v, weights
    # Without the weights, divide the (n_q, d_v) output instead of the (n_q, n_k) weights:
    # (E / total) @ V = (E @ V) / total, with n_k / d_v times fewer divisions.
    out = scores @ v
    return np.divide(out, total, out=out, where=nonempty)


def _attention_torch(q, k, v, mask, causal, scale, return_weights):
    import torch
    import torch.nn.functional as F

    allowed = combined_mask(mask, causal, q.shape[-2], k.shape[-2], q)
    if return_weights:
        scores = (q @ k.transpose(-1, -2)) * scale
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = softmax(scores, axis=-1)
        return weights @ v, weights
    if mask is None:
        # Only causal (or nothing): every row keeps key 0, so no row is empty, and the
        # is_causal flag lets PyTorch pick its fastest kernel.
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    # PyTorch's kernels disagree on empty rows (NaN on some, zeros on others); attncore's
    # rule is zeros, so impose it explicitly.
    empty = ~allowed.any(dim=-1, keepdim=True)
    return out.masked_fill(empty, 0.0)
