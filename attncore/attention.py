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

from ._backend import NUMPY, backend_of, check_attention_inputs, dtype_name
from .softmax import softmax
from .tiled import finalize_softmax_state, softmax_state

__all__ = ["causal_mask", "check_attention_inputs", "combined_mask",
           "scaled_dot_product_attention"]


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


def _overflow_error(dtype: str) -> ValueError:
    # q, k and v were checked finite, so a NaN or +inf score can only come from overflow.
    return ValueError(f"scores: expected finite scores q @ k^T * scale, got NaN or +inf (the "
                      f"product overflowed dtype {dtype}); use a wider dtype or smaller inputs")


def _attention_numpy(q, k, v, mask, causal, scale, return_weights):
    # Scaling q (n_q x d_k numbers) rather than the scores (n_q x n_k) is the same product
    # with far fewer multiplications; the score matrix is the one large array, so it is then
    # masked and exponentiated in place.
    with np.errstate(over="ignore"):     # an overflow is reported below, as an error
        scores = (q * np.asarray(scale, dtype=q.dtype)) @ np.swapaxes(k, -1, -2)
    allowed = combined_mask(mask, causal, q.shape[-2], k.shape[-2], q)
    if allowed is not None:
        np.copyto(scores, np.asarray(-np.inf, dtype=q.dtype), where=~allowed)
    if return_weights:
        try:
            weights = softmax(scores, axis=-1)     # fully masked rows come back as zeros
        except ValueError:
            raise _overflow_error(dtype_name(q)) from None
        return weights @ v, weights
    # Without the weights the division can wait: softmax(S) V = (exp(S - m) V) / l, where m is
    # the row maximum and l the row sum of exp(S - m); that divides n_q x d_v numbers instead
    # of n_q x n_k. The triple (m, l, exp(S - m) V) is the online-softmax state that tiled
    # attention keeps per block of keys; here the one block holds every key.
    state = softmax_state(scores, v, overwrite_scores=True)
    del scores         # free the n_q x n_k array before the (small) division allocates
    return finalize_softmax_state(state)


def _attention_torch(q, k, v, mask, causal, scale, return_weights):
    import torch
    import torch.nn.functional as F

    allowed = combined_mask(mask, causal, q.shape[-2], k.shape[-2], q)
    if return_weights:
        scores = (q @ k.transpose(-1, -2)) * scale
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        try:
            weights = softmax(scores, axis=-1)
        except ValueError:
            raise _overflow_error(dtype_name(q)) from None
        return weights @ v, weights
    if mask is None:
        # Only causal (or nothing): every row keeps key 0, so no row is empty, and the
        # is_causal flag lets PyTorch pick its fastest kernel.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
        # PyTorch's kernels have disagreed on empty rows (NaN in some versions and kernels,
        # zeros in others); attncore's rule is zeros, so impose it explicitly.
        out = out.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    # The fused kernel never shows us the scores; a non-finite output is how an overflow in
    # them shows (one (n_q, d_v)-sized check, read back once).
    if out.numel() and not bool(torch.isfinite(out.amax()) & torch.isfinite(out.amin())):
        raise _overflow_error(dtype_name(q))
    return out
