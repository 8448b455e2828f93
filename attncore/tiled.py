"""Tiled ("flash") attention: exact attention, one block of keys at a time, with an online softmax.

The reference :func:`attncore.attention.scaled_dot_product_attention` builds the whole
``(n_q, n_k)`` score matrix. For long sequences that matrix is the memory cost of attention
(``n_q * n_k`` numbers per head). This module computes the *same* result while holding only
``(n_q, block_size)`` scores at a time.

The trick is that a softmax-weighted average can be summarised, for any subset of the keys, by
three numbers per query row (well, two numbers and one vector):

* ``max``: the largest score ``m`` seen so far,
* ``sum``: the denominator ``l = sum_j exp(s_j - m)`` relative to that maximum,
* ``out``: the *unnormalised* output ``o = sum_j exp(s_j - m) v_j``, shape ``(d_v,)``.

Two such states, for two disjoint sets of keys, merge into the state of their union by rescaling
both to the larger maximum (:func:`merge_softmax_states`); the answer is ``o / l``
(:func:`finalize_softmax_state`). :func:`tiled_attention` walks the keys in blocks and merges the
state of each block into a running state: that is the online softmax of Milakov & Gimelshein
(2018), as used by FlashAttention (Dao et al., 2022).

All functions take NumPy arrays or torch tensors (computed on the tensors' device). For float16
and bfloat16 tensors the running state is kept in float32 and the output cast back at the end.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np

from ._backend import NUMPY, backend_of, check_attention_inputs, dtype_name, shape_of

__all__ = [
    "SoftmaxState",
    "finalize_softmax_state",
    "merge_softmax_states",
    "softmax_state",
    "tiled_attention",
]


class SoftmaxState(NamedTuple):
    """What a softmax-weighted average over a set of keys needs to remember, per query row.

    max : ``(..., n_q, 1)``  the row maximum ``m`` of the scores seen (``-inf`` if none)
    sum : ``(..., n_q, 1)``  ``l = sum_j exp(s_j - m)`` (0 if no key seen)
    out : ``(..., n_q, d_v)`` ``o = sum_j exp(s_j - m) v_j``, not yet divided by ``l``

    The empty state ``(-inf, 0, 0)`` is the identity of :func:`merge_softmax_states`.
    """

    max: Any
    sum: Any
    out: Any


# --- small helpers that hide the few spelling differences between NumPy and torch ----------

def _xp(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return np
    import torch

    return torch


def _row_max(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.max(axis=-1, keepdims=True)
    return x.amax(dim=-1, keepdim=True)


def _row_sum(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.sum(axis=-1, keepdims=True)
    return x.sum(dim=-1, keepdim=True)


def _finite_or_zero(m: Any) -> Any:
    """The shift used for exponentials: ``m`` itself, or 0 where ``m = -inf`` (no key yet).

    Shifting a row whose scores are all ``-inf`` by 0 gives ``exp(-inf) = 0`` everywhere,
    where shifting by ``m = -inf`` would give ``-inf - (-inf) = NaN``.
    """
    xp = _xp(m)
    return xp.where(xp.isfinite(m), m, xp.zeros_like(m))


def _check_block_max(m: Any) -> None:
    xp = _xp(m)
    if bool((xp.isnan(m) | xp.isposinf(m)).any()):
        raise ValueError(f"scores: expected finite scores q @ k^T * scale, got NaN or +inf "
                         f"(the product overflowed dtype {dtype_name(m)}); use a wider dtype "
                         f"or smaller inputs")


# --- the online-softmax state ------------------------------------------------------------

def softmax_state(scores: Any, v: Any, *, overwrite_scores: bool = False) -> SoftmaxState:
    """The state of one block of keys: ``(max, sum, out)`` from its scores and values.

    scores : ``(..., n_q, b)`` floating; ``-inf`` marks a masked key (probability 0).
    v      : ``(..., b, d_v)`` the values of those ``b`` keys, same dtype.
    overwrite_scores : reuse ``scores``' memory for the exponentials (``scores`` is then
        destroyed); tiled attention does this with its own temporary block of scores.

    Returns a :class:`SoftmaxState` with ``max (..., n_q, 1)``, ``sum (..., n_q, 1)`` and
    ``out (..., n_q, d_v)``. ``finalize_softmax_state(softmax_state(s, v))`` equals
    ``softmax(s) @ v``.
    """
    xp = _xp(scores)
    m = _row_max(scores)
    _check_block_max(m)
    if overwrite_scores:
        scores -= _finite_or_zero(m)
        p = xp.exp(scores, out=scores)
    else:
        p = xp.exp(scores - _finite_or_zero(m))
    return SoftmaxState(m, _row_sum(p), p @ v)


def merge_softmax_states(a: SoftmaxState, b: SoftmaxState, *,
                         into_a: bool = False) -> SoftmaxState:
    """The state of the union of two disjoint sets of keys, from the states of each.

    With ``m = max(m_a, m_b)``, ``alpha = exp(m_a - m)`` and ``beta = exp(m_b - m)``::

        max = m,   sum = alpha * l_a + beta * l_b,   out = alpha * o_a + beta * o_b

    Both factors are at most 1 (no overflow), and the one belonging to the larger maximum is
    exactly 1. Shapes as in :class:`SoftmaxState`; the states must share library, device and
    dtype. The merge is associative and commutative, with identity ``(-inf, 0, 0)``.

    into_a : write the result into ``a``'s arrays (which may be views into a larger state) and
        return ``a``, instead of allocating new arrays. ``b.out`` is overwritten too.
    """
    xp = _xp(a.max)
    m = xp.maximum(a.max, b.max)
    shift = _finite_or_zero(m)
    alpha = xp.exp(a.max - shift)
    beta = xp.exp(b.max - shift)
    if not into_a:
        return SoftmaxState(m, alpha * a.sum + beta * b.sum, alpha * a.out + beta * b.out)
    a.sum[...] = alpha * a.sum + beta * b.sum
    out_a, out_b = a.out, b.out          # in-place arithmetic on the arrays themselves
    out_a *= alpha
    out_b *= beta
    out_a += out_b
    a.max[...] = m
    return a


def finalize_softmax_state(state: SoftmaxState) -> Any:
    """The attention output ``out / sum``, shape ``(..., n_q, d_v)``.

    A row that saw no admissible key (``sum = 0``) is returned as zeros, as
    :func:`~attncore.attention.scaled_dot_product_attention` does for fully masked rows.
    """
    xp = _xp(state.out)
    nonempty = state.sum > 0
    denominator = xp.where(nonempty, state.sum, xp.ones_like(state.sum))
    return xp.where(nonempty, state.out / denominator, xp.zeros_like(state.out))


def _empty_state(batch: tuple[int, ...], n_q: int, d_v: int, like: Any, dtype: Any) -> SoftmaxState:
    if isinstance(like, np.ndarray):
        return SoftmaxState(np.full(batch + (n_q, 1), -np.inf, dtype=dtype),
                            np.zeros(batch + (n_q, 1), dtype=dtype),
                            np.zeros(batch + (n_q, d_v), dtype=dtype))
    import torch

    kw = {"dtype": dtype, "device": like.device}
    return SoftmaxState(torch.full(batch + (n_q, 1), float("-inf"), **kw),
                        torch.zeros(batch + (n_q, 1), **kw),
                        torch.zeros(batch + (n_q, d_v), **kw))


# --- tiled attention ---------------------------------------------------------------------

def _check_block_size(block_size: Any) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral) \
            or block_size < 1:
        raise ValueError(f"block_size: expected a positive integer (keys per block), "
                         f"got {block_size!r}")
    return int(block_size)


def tiled_attention(q: Any, k: Any, v: Any, *, block_size: int = 128, mask: Any = None,
                    causal: bool = False, scale: float | None = None) -> Any:
    """Scaled dot-product attention computed one block of keys at a time.

    Same inputs, checks and result as :func:`attncore.attention.scaled_dot_product_attention`
    (without ``return_weights``: the point is never to form the weights):

    q : ``(..., n_q, d_k)``,  k : ``(..., n_k, d_k)``,  v : ``(..., n_k, d_v)``, one floating
    dtype, one library (NumPy or torch, on any device).
    mask : boolean, broadcastable to ``(..., n_q, n_k)``, ``True`` = may attend.
    causal : forbid key ``j > i`` for query ``i`` (top-left aligned, like the reference).
    scale : multiplies the scores, default ``1 / sqrt(d_k)``.
    block_size : keys per block, a positive integer; it need not divide ``n_k``.

    Returns ``(..., n_q, d_v)``, same dtype, library and device as ``q``. Rows with every key
    masked are zeros.

    Memory: besides the inputs and the output, one ``(..., n_q, block_size)`` block of scores
    (overwritten by its exponentials), the scaled queries, and the running state (two
    ``(..., n_q, 1)`` columns and a ``(..., n_q, d_v)`` accumulator) with the block's own
    ``(..., n_q, d_v)`` output: ``O(n_q * (block_size + d_k + d_v))`` per batch entry instead of
    the reference's ``O(n_q * n_k)``. With ``causal=True``, the query rows that a key block
    cannot reach (``i < j0``) are skipped, which halves the work for square inputs.
    """
    backend = backend_of(q=q, k=k, v=v, mask=mask)
    q_shape, n_q, n_k = check_attention_inputs(q, k, v, mask=mask, scale=scale)
    block_size = _check_block_size(block_size)
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1])
    batch, d_v = q_shape[:-2], shape_of(v)[-1]

    if backend == NUMPY:
        work_dtype = q.dtype
        allowed = None if mask is None else np.broadcast_to(mask, batch + (n_q, n_k))
        rows = np.arange(n_q).reshape(n_q, 1)
        cols = np.arange(n_k)
        qs = q * np.asarray(scale, dtype=q.dtype)
        kt = np.swapaxes(k, -1, -2)
    else:
        import torch

        low = q.dtype in (torch.float16, torch.bfloat16)
        work_dtype = torch.float32 if low else q.dtype
        allowed = None if mask is None else mask.expand(*batch, n_q, n_k)
        rows = torch.arange(n_q, device=q.device).reshape(n_q, 1)
        cols = torch.arange(n_k, device=q.device)
        qs = q.to(work_dtype) * scale
        kt = k.to(work_dtype).transpose(-1, -2)
        v = v.to(work_dtype)

    state = _empty_state(batch, n_q, d_v, q, work_dtype)
    for j0 in range(0, n_k, block_size):
        j1 = min(j0 + block_size, n_k)
        # Causal: query i sees keys j <= i, so rows i < j0 get nothing from this block (or
        # from any later one): skip them.
        r0 = j0 if causal else 0
        if r0 >= n_q:
            break
        scores = qs[..., r0:, :] @ kt[..., j0:j1]                 # (..., n_q - r0, b)
        keep = None
        if allowed is not None:
            keep = allowed[..., r0:, j0:j1]
        if causal:
            tri = rows[r0:] >= cols[j0:j1]
            keep = tri if keep is None else keep & tri
        if keep is not None:
            scores = _xp(scores).where(keep, scores, _neg_inf_like(scores))
        # Merge this block's state into the running state of rows r0: (views, updated in
        # place). The scores are our own temporary, so the exponentials may overwrite them.
        block = softmax_state(scores, v[..., j0:j1, :], overwrite_scores=True)
        rows_seen = SoftmaxState(*(x[..., r0:, :] for x in state))
        merge_softmax_states(rows_seen, block, into_a=True)
        del scores, block, keep         # free this block before the next one is allocated
    out = finalize_softmax_state(state)
    return out if backend == NUMPY else out.to(q.dtype)


def _neg_inf_like(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return np.asarray(-np.inf, dtype=x.dtype)
    return x.new_tensor(float("-inf"))
