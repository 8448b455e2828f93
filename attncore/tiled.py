"""Tiled ("flash") attention: exact attention, one block of keys at a time, with an online softmax.

The reference :func:`~attncore.scaled_dot_product_attention` builds the whole
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
and bfloat16 inputs the running state is kept in float32 and the output cast back at the end.
On torch, :func:`tiled_attention` is differentiable: its backward pass recomputes the scores
one key block at a time from the row statistics ``m + log l`` that the forward pass keeps, so
training through it needs no ``(n_q, n_k)`` array either. ``return_lse=True`` hands that
statistic to the caller, for :func:`attncore.tiled_attention_backward`, which runs the same
block-wise backward pass (:func:`_tiled_backward`, one code for NumPy and torch).
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import Any, NamedTuple

import numpy as np

from ._backend import (
    NUMPY,
    backend_of,
    check_all_finite,
    check_attention_inputs,
    check_flag,
    check_floating,
    check_min_rank,
    check_same_dtype,
    check_size,
    group_heads,
    shape_of,
    ungroup_heads,
    under_vmap,
)
from ._guard import attention_guard, is_low_precision
from .dropout import check_dropout

__all__ = [
    "SoftmaxState",
    "finalize_softmax_state",
    "merge_softmax_states",
    "softmax_state",
    "tiled_attention",
]


class SoftmaxState(NamedTuple):
    """What a softmax-weighted average over a set of keys needs to remember, per query row.

    The empty state ``(-inf, 0, 0)`` is the identity of :func:`merge_softmax_states`. All
    three arrays share one library, device and floating dtype.

    Attributes
    ----------
    max : array, shape ``(..., n_q, 1)``
        The row maximum ``m`` of the scores seen (``-inf`` if no admissible key was seen).
    sum : array, shape ``(..., n_q, 1)``
        ``l = sum_j exp(s_j - m)``, 0 if no admissible key was seen.
    out : array, shape ``(..., n_q, d_v)``
        ``o = sum_j exp(s_j - m) v_j``, not yet divided by ``l``.
    """

    max: Any
    sum: Any
    out: Any


# --- small helpers that hide the few spelling differences between NumPy and torch ----------

def _xp(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return np
    return sys.modules["torch"]


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


def _any(x: Any) -> bool:
    return bool(x.any())


# --- the online-softmax state: the arithmetic, unchecked (attncore's own callers) ---------

def _state(scores: Any, v: Any, m: Any = None, overwrite: bool = False,
           empty_rows: bool = True) -> SoftmaxState:
    """``empty_rows=False`` promises that every row has a finite score (no mask, or only
    the causal one, and no overflow), so the row maximum needs no guard against -inf."""
    xp = _xp(scores)
    if m is None:
        m = _row_max(scores)
    shift = _finite_or_zero(m) if empty_rows else m
    if overwrite:
        scores -= shift
        p = xp.exp(scores, out=scores)
    else:
        p = xp.exp(scores - shift)
    return SoftmaxState(m, _row_sum(p), p @ v)


def _merge(a: SoftmaxState, b: SoftmaxState, into_a: bool = False) -> SoftmaxState:
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


def _finalize(state: SoftmaxState, in_place: bool = False, empty_rows: bool = True) -> Any:
    """``out / sum``, zeros where ``sum = 0``. ``in_place`` divides ``state.out`` itself
    (attncore's own temporary state): a row with ``sum = 0`` saw only ``exp(-inf) = 0``
    weights, so its ``out`` is zeros already and is left alone."""
    if in_place:
        if isinstance(state.out, np.ndarray):
            if not empty_rows:                 # every sum is >= 1 (its largest term is 1)
                return np.divide(state.out, state.sum, out=state.out)
            return np.divide(state.out, state.sum, out=state.out, where=state.sum > 0)
        torch = sys.modules["torch"]
        return state.out.div_(torch.where(state.sum > 0, state.sum, 1.0))
    xp = _xp(state.out)
    nonempty = state.sum > 0
    denominator = xp.where(nonempty, state.sum, xp.ones_like(state.sum))
    return xp.where(nonempty, state.out / denominator, xp.zeros_like(state.out))


def _empty_state(batch: tuple[int, ...], n_q: int, d_v: int, like: Any) -> SoftmaxState:
    if isinstance(like, np.ndarray):
        return SoftmaxState(np.full(batch + (n_q, 1), -np.inf, dtype=like.dtype),
                            np.zeros(batch + (n_q, 1), dtype=like.dtype),
                            np.zeros(batch + (n_q, d_v), dtype=like.dtype))
    torch = sys.modules["torch"]
    kw = {"dtype": like.dtype, "device": like.device}
    return SoftmaxState(torch.full(batch + (n_q, 1), float("-inf"), **kw),
                        torch.zeros(batch + (n_q, 1), **kw),
                        torch.zeros(batch + (n_q, d_v), **kw))


# --- the online-softmax state: the public, checked functions -------------------------------

def _check_state(name: str, state: Any) -> str:
    """Validate one state; return its backend."""
    if not isinstance(state, SoftmaxState):
        raise TypeError(f"{name}: expected a SoftmaxState(max, sum, out), got "
                        f"{type(state).__name__}")
    parts = {f"{name}.max": state.max, f"{name}.sum": state.sum, f"{name}.out": state.out}
    backend = backend_of(**parts)
    for part, x in parts.items():
        check_floating(part, x)
        check_min_rank(part, x, 2, "(..., n_q, 1)" if part[-3:] != "out" else
                       "(..., n_q, d_v)")
    check_same_dtype(**parts)
    ms, ls, os_ = shape_of(state.max), shape_of(state.sum), shape_of(state.out)
    if ms[-1] != 1 or ls != ms or os_[:-1] != ms[:-1]:
        raise ValueError(f"{name}: expected max and sum of shape (..., n_q, 1) and out of "
                         f"shape (..., n_q, d_v), got max {ms}, sum {ls}, out {os_}")
    xp = _xp(state.max)
    if _any(xp.isnan(state.max) | xp.isposinf(state.max)):
        raise ValueError(f"{name}.max: expected finite row maxima, or -inf for a row that "
                         f"saw no key, got NaN or +inf")
    if _any(~xp.isfinite(state.sum) | (state.sum < 0)):
        raise ValueError(f"{name}.sum: expected finite sums >= 0, got a negative or "
                         f"non-finite entry")
    check_all_finite(**{f"{name}.out": state.out})
    return backend


def softmax_state(scores: Any, v: Any, *, overwrite_scores: bool = False) -> SoftmaxState:
    """The state of one block of keys: ``(max, sum, out)`` from its scores and values.

    Parameters
    ----------
    scores : numpy.ndarray or torch.Tensor, shape ``(..., n_q, b)``, floating
        The scores of ``n_q`` queries against ``b`` keys. ``-inf`` marks a masked key
        (probability 0); NaN and ``+inf`` are rejected.
    v : numpy.ndarray or torch.Tensor, shape ``(..., b, d_v)``
        The values of those ``b`` keys: same library, dtype and batch shape ``...``.
    overwrite_scores : bool, default False
        Reuse ``scores``' memory for the exponentials (``scores`` is then destroyed);
        tiled attention does this with its own temporary block of scores.

    Returns
    -------
    SoftmaxState
        ``max`` and ``sum`` of shape ``(..., n_q, 1)``, ``out`` of shape ``(..., n_q, d_v)``,
        same dtype as ``scores``. ``finalize_softmax_state(softmax_state(s, v))`` equals
        ``softmax(s) @ v``. With ``b = 0`` keys the result is the empty state
        ``(-inf, 0, 0)``.

    Raises
    ------
    TypeError
        Mixed libraries, a non-floating or mismatched dtype, a non-bool flag.
    ValueError
        Ranks below 2, different ``b`` or batch shapes, NaN or ``+inf`` in ``scores``, a
        non-finite value in ``v``.
    """
    backend_of(scores=scores, v=v)
    check_floating("scores", scores)
    check_floating("v", v)
    check_min_rank("scores", scores, 2, "(..., n_q, b)")
    check_min_rank("v", v, 2, "(..., b, d_v)")
    check_same_dtype(scores=scores, v=v)
    overwrite_scores = check_flag("overwrite_scores", overwrite_scores)
    ss, vs = shape_of(scores), shape_of(v)
    if ss[-1] != vs[-2]:
        raise ValueError(f"scores and v must have the same number of keys b: scores has "
                         f"shape {ss} (b={ss[-1]}), v has shape {vs} (b={vs[-2]})")
    if ss[:-2] != vs[:-2]:
        raise ValueError(f"scores and v must have the same batch shape (...): got scores "
                         f"{ss}, v {vs}")
    check_all_finite(v=v)
    if ss[-1] == 0:
        return _empty_state(ss[:-2], ss[-2], vs[-1], scores)
    m = _row_max(scores)
    xp = _xp(m)
    if _any(xp.isnan(m) | xp.isposinf(m)):
        # A row's maximum is NaN or +inf exactly when the row holds one.
        raise ValueError("scores: expected finite scores, or -inf for a masked key, got "
                         "NaN or +inf")
    return _state(scores, v, m, overwrite_scores)


def merge_softmax_states(a: SoftmaxState, b: SoftmaxState, *,
                         into_a: bool = False) -> SoftmaxState:
    """The state of the union of two disjoint sets of keys, from the states of each.

    With ``m = max(m_a, m_b)``, ``alpha = exp(m_a - m)`` and ``beta = exp(m_b - m)``::

        max = m,   sum = alpha * l_a + beta * l_b,   out = alpha * o_a + beta * o_b

    Both factors are at most 1 (no overflow), and the one belonging to the larger maximum is
    exactly 1. The merge is associative and commutative, with identity ``(-inf, 0, 0)``.

    Parameters
    ----------
    a, b : SoftmaxState
        States of the same query rows: ``max`` and ``sum`` of shape ``(..., n_q, 1)``,
        ``out`` of shape ``(..., n_q, d_v)``, equal in both (nothing is broadcast), one
        library, device and dtype.
    into_a : bool, default False
        Write the result into ``a``'s arrays (which may be views into a larger state) and
        return ``a``, instead of allocating new arrays. ``b.out`` is overwritten too.

    Returns
    -------
    SoftmaxState
        The merged state, shapes as ``a``.

    Raises
    ------
    TypeError
        ``a`` or ``b`` is not a :class:`SoftmaxState`, mixed libraries or dtypes.
    ValueError
        Malformed states, states of different shapes, NaN or ``+inf`` maxima, negative or
        non-finite sums, non-finite outputs.
    """
    _check_state("a", a)
    _check_state("b", b)
    backend_of(**{"a.max": a.max, "b.max": b.max})     # one library and device for both
    check_same_dtype(**{"a.max": a.max, "b.max": b.max})
    if shape_of(a.max) != shape_of(b.max) or shape_of(a.out) != shape_of(b.out):
        raise ValueError(f"a and b: expected states of the same query rows and value width "
                         f"(nothing is broadcast), got a.max {shape_of(a.max)}, a.out "
                         f"{shape_of(a.out)} and b.max {shape_of(b.max)}, b.out "
                         f"{shape_of(b.out)}")
    into_a = check_flag("into_a", into_a)
    return _merge(a, b, into_a)


def finalize_softmax_state(state: SoftmaxState) -> Any:
    """The attention output ``out / sum`` of a state.

    Parameters
    ----------
    state : SoftmaxState
        ``max`` and ``sum`` of shape ``(..., n_q, 1)``, ``out`` of shape ``(..., n_q, d_v)``.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_v)``
        Same library, device and dtype as ``state.out``. A row that saw no admissible key
        (``sum = 0``) is zeros, as
        :func:`~attncore.scaled_dot_product_attention` returns for fully masked
        rows.
    """
    _check_state("state", state)
    return _finalize(state)


# --- tiled attention ---------------------------------------------------------------------

def tiled_attention(q: Any, k: Any, v: Any, *, block_size: int = 512, mask: Any = None,
                    causal: bool = False, scale: Any = None, enable_gqa: bool = False,
                    return_lse: bool = False, dropout_p: float = 0.0,
                    generator: Any = None) -> Any:
    """Scaled dot-product attention computed one block of keys at a time.

    Same inputs, checks and result as :func:`~attncore.scaled_dot_product_attention`
    (without ``return_weights``: the point is never to form the weights).

    Parameters
    ----------
    q : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_k)``, floating
    k : same library and dtype, shape ``(..., n_k, d_k)``
    v : same library and dtype, shape ``(..., n_k, d_v)``
    block_size : int, default 512
        Keys per block, a positive integer; it need not divide ``n_k``.
    mask : boolean array broadcastable to ``(..., n_q, n_k)``, optional
        ``True`` = may attend; the same rules as the reference (at most 2 dimensions, or
        one per axis of the scores).
    causal : bool, default False
        Forbid key ``j > i`` for query ``i`` (top-left aligned, like the reference).
    scale : real scalar, optional
        Multiplies the scores; default ``1 / sqrt(d_k)``.
    enable_gqa : bool, default False
        Grouped-query attention: ``k`` and ``v`` may have fewer heads (axis -3) than ``q``,
        a divisor of its number of heads, as in the reference; no key or value is copied.
    return_lse : bool, default False
        Also return the row log-sum-exp of the scores, which the backward pass needs
        (:func:`~attncore.tiled_attention_backward`).
    dropout_p : real number in ``[0, 1)``, default 0.0
        Checked as in the reference; only 0 is supported (see Raises).
    generator : numpy.random.Generator or torch.Generator, optional
        Checked as in the reference.

    Returns
    -------
    out : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_v)``
        Same dtype, library and device as ``q``. Rows with every key masked, and every
        row when ``n_k = 0``, are zeros.
    lse : numpy.ndarray or torch.Tensor, shape ``(..., n_q)``
        Only if ``return_lse``: ``lse_i = log sum_j exp(s_ij) = m_i + log l_i`` over the
        admissible keys of row ``i`` (``s = scale * q @ k^T``), so that the attention
        weights are ``exp(s_ij - lse_i)``. ``-inf`` for a row with no admissible key (the
        logarithm of an empty sum). Same library and device as ``q``; float32 for float16
        and bfloat16 inputs (the precision of the running state), else ``q``'s dtype. It
        carries no gradient.

    Raises
    ------
    TypeError, ValueError
        As the reference, and for a ``block_size`` that is not a positive integer.
    NotImplementedError
        ``dropout_p > 0``: the backward pass recomputes each block's weights, and it
        would have to draw exactly the forward pass's dropout mask again; rather than
        store an ``(n_q, n_k)`` mask (the memory tiling avoids) or give a result that
        differs from :func:`~attncore.scaled_dot_product_attention` with the same
        generator, tiled attention refuses dropout. Use the reference for training with
        attention dropout.
        Under ``torch.func.vmap`` (the block loop updates its running state in place);
        ``tiled_attention`` takes any number of leading batch axes, so call it on the
        batched tensors directly.

    Notes
    -----
    Memory: besides the inputs and the output, one ``(..., n_q, block_size)`` block of
    scores (overwritten by its exponentials), the scaled queries, and the running state (two
    ``(..., n_q, 1)`` columns and a ``(..., n_q, d_v)`` accumulator) with the block's own
    ``(..., n_q, d_v)`` output: ``O(n_q * (block_size + d_k + d_v))`` per batch entry
    instead of the reference's ``O(n_q * n_k)``. With ``causal=True``, the query rows that a
    key block cannot reach (``i < j0``) are skipped, which halves the work for square inputs.

    Autograd (torch): when an input requires a gradient, the forward pass also keeps the
    row statistic ``m + log l`` (``(..., n_q, 1)``), and the backward pass recomputes each
    block's scores and probabilities from it, with the same memory bound: the gradients
    equal those of the reference.
    """
    shape = check_attention_inputs(q, k, v, mask=mask, causal=causal, scale=scale,
                                   enable_gqa=enable_gqa)
    block_size = check_size("block_size", block_size)
    return_lse = check_flag("return_lse", return_lse)
    if check_dropout(dropout_p, generator, shape.backend, like=q) is not None:
        raise NotImplementedError(
            f"tiled_attention: dropout_p={float(dropout_p)!r} is not supported (its backward "
            f"pass recomputes the weights block by block and would need the same dropout "
            f"mask again); use scaled_dot_product_attention(..., dropout_p=...) for "
            f"attention dropout")
    if shape.group > 1:
        # Grouped-query attention: the same loop on grouped views of the same arrays
        # (group_heads), after the value checks in the caller's terms.
        attention_guard(q, k, v, shape)
        q, k, v, mask, grouped = group_heads(q, k, v, mask, shape)
        result = tiled_attention(q, k, v, block_size=block_size, mask=mask,
                                 causal=grouped.causal, scale=grouped.scale,
                                 return_lse=return_lse)
        if not return_lse:
            return ungroup_heads(result, shape)
        out, lse = result
        return ungroup_heads(out, shape), lse.reshape(shape.batch + (shape.n_q,))
    if shape.backend == NUMPY:
        qw, kw, vw = (x.astype(np.float32) for x in (q, k, v)) if is_low_precision(q) \
            else (q, k, v)
        guard = attention_guard(qw, kw, vw, shape)
        if guard.v_factor is not None:
            vw = vw / guard.v_factor
        # (as in the reference: s - max may overflow to -inf only when the guard had to
        # check the scores one by one, and exp(-inf) = 0 is then the right weight)
        with np.errstate(over="ignore") if not guard.certified else nullcontext():
            state = _tiled_state(qw * np.asarray(shape.scale, dtype=qw.dtype),
                                 np.swapaxes(kw, -1, -2), vw, mask, shape, block_size)
        out = _finalize(state, in_place=True)
        if guard.v_factor is not None:
            out *= guard.v_factor
        out = out.astype(q.dtype, copy=False)
        return (out, _log_sum_exp(state)[..., 0]) if return_lse else out
    out, lse = _tiled_torch(q, k, v, mask, shape, block_size)
    return (out, lse[..., 0]) if return_lse else out


def _tiled_state(qs: Any, kt: Any, v: Any, mask: Any, shape: Any,
                 block_size: int) -> SoftmaxState:
    """The running state over all key blocks. ``qs`` is ``scale * q``, ``kt`` is ``k^T``,
    all in the working dtype; the mask is the caller's (not combined with causal)."""
    batch, n_q, n_k, causal = shape.batch, shape.n_q, shape.n_k, shape.causal
    xp = _xp(qs)
    allowed, rows, cols, neg_inf = _block_setup(qs, mask, shape)
    state = _empty_state(batch, n_q, shape_of(v)[-1], qs)
    for j0 in range(0, n_k, block_size):
        j1 = min(j0 + block_size, n_k)
        # Causal: query i sees keys j <= i, so rows i < j0 get nothing from this block (or
        # from any later one): skip them.
        r0 = j0 if causal else 0
        if r0 >= n_q:
            break
        scores = qs[..., r0:, :] @ kt[..., j0:j1]                 # (..., n_q - r0, b)
        keep = _block_mask(allowed, causal, rows, cols, r0, j0, j1)
        if keep is not None:
            scores = xp.where(keep, scores, neg_inf)
        # Merge this block's state into the running state of rows r0: (views, updated in
        # place). The scores are our own temporary, so the exponentials may overwrite them.
        block = _state(scores, v[..., j0:j1, :], overwrite=True)
        rows_seen = SoftmaxState(*(x[..., r0:, :] for x in state))
        _merge(rows_seen, block, into_a=True)
        del scores, block, keep         # free this block before the next one is allocated
    return state


def _block_setup(like: Any, mask: Any, shape: Any) -> tuple[Any, Any, Any, Any]:
    """What both block loops (forward and backward) index into: the caller's mask as a
    full-shape view (or None), the row and column numbers for the causal test, and -inf
    in ``like``'s library and dtype."""
    batch, n_q, n_k = shape.batch, shape.n_q, shape.n_k
    if isinstance(like, np.ndarray):
        allowed = None if mask is None else np.broadcast_to(mask, batch + (n_q, n_k))
        return (allowed, np.arange(n_q).reshape(n_q, 1), np.arange(n_k),
                np.asarray(-np.inf, dtype=like.dtype))
    torch = sys.modules["torch"]
    allowed = None if mask is None else mask.expand(*batch, n_q, n_k)
    return (allowed, torch.arange(n_q, device=like.device).reshape(n_q, 1),
            torch.arange(n_k, device=like.device), like.new_tensor(float("-inf")))


def _block_mask(allowed: Any, causal: bool, rows: Any, cols: Any, r0: int, j0: int,
                j1: int) -> Any:
    keep = None if allowed is None else allowed[..., r0:, j0:j1]
    if causal:
        tri = rows[r0:] >= cols[j0:j1]
        keep = tri if keep is None else keep & tri
    return keep


# --- tiled attention on torch, with its backward pass ----------------------------------------

def _tiled_torch(q: Any, k: Any, v: Any, mask: Any, shape: Any,
                 block_size: int) -> tuple[Any, Any]:
    """``(out, lse)``, lse of shape ``(..., n_q, 1)`` in the working dtype."""
    import torch

    if under_vmap(q, k, v, mask):
        raise NotImplementedError(
            "tiled_attention: torch.func.vmap is not supported (the block loop updates its "
            "running state in place); tiled_attention takes any number of leading batch "
            "axes, so call it on the batched tensors directly, or use "
            "scaled_dot_product_attention, which supports vmap")
    guard = attention_guard(q, k, v, shape)
    work = torch.float32 if is_low_precision(q) else q.dtype
    qw, kw, vw = q.to(work), k.to(work), v.to(work)     # no copies unless the dtype changes
    if guard.v_factor is not None:
        vw = vw / guard.v_factor
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = _tiled_function().apply(qw, kw, vw, mask, shape, block_size)
    else:
        state = _tiled_state(qw * shape.scale, kw.transpose(-1, -2), vw, mask, shape,
                             block_size)
        out = _finalize(state, in_place=True)
        lse = _log_sum_exp(state)
    if guard.v_factor is not None:
        out = out * guard.v_factor
    return out.to(q.dtype), lse


def _log_sum_exp(state: SoftmaxState) -> Any:
    """``m + log l`` per row, ``(..., n_q, 1)``: the log of the softmax's denominator, so
    that ``exp(s - lse)`` is the attention weight. ``-inf`` (``log 0``) for a row with no
    admissible key. (``state.max`` and ``state.sum`` are left intact by the in-place
    finalisation, so this may run before or after it.)"""
    xp = _xp(state.sum)
    nonempty = state.sum > 0
    safe = xp.where(nonempty, state.sum, xp.ones_like(state.sum))
    return xp.where(nonempty, state.max + xp.log(safe), xp.full_like(state.max, -np.inf))


def _transpose(x: Any) -> Any:
    """The last two axes swapped (a view): ``x^T`` of every matrix in the batch."""
    return np.swapaxes(x, -1, -2) if isinstance(x, np.ndarray) else x.transpose(-1, -2)


def _tiled_backward(q: Any, k: Any, v: Any, mask: Any, shape: Any, block_size: int,
                    out: Any, lse: Any, grad_out: Any) -> tuple[Any, Any, Any, Any, Any]:
    """Gradients of attention with respect to ``q, k, v``, one key block at a time.

    FlashAttention's backward pass, for NumPy arrays and torch tensors alike (no autograd:
    torch callers run it with gradients off). All arrays are in the working dtype; ``lse``
    is ``(..., n_q, 1)``, ``-inf`` for a row with no admissible key; the mask is the
    caller's (not combined with causal). Per key block ``b``, with ``S_b = scale Q K_b^T``
    recomputed (masked entries ``-inf``)::

        P_b  = exp(S_b - lse)                the weights A of the block
        dV_b = P_b^T dO                      dP_b = dO V_b^T
        dS_b = P_b * (dP_b - D)              D = rowsum(dO * O), computed once
        dQ  += dS_b K_b                      dK_b = dS_b^T Q        (times scale, once)

    Returns ``dq, dk, dv`` and two row sums ``(..., n_q, 1)`` that cost no extra pass
    over the blocks: the weights' sum (1 for a row with keys, 0 without, when ``lse``
    belongs to these inputs) and ``dS``'s sum (0, as the softmax Jacobian sends constant
    vectors to 0, when ``out`` belongs to them too); the public function checks them.
    Memory: the gradients, ``scale * q``, and two ``(..., n_q, block_size)`` blocks.
    """
    xp = _xp(q)
    n_q, n_k, causal, scale = shape.n_q, shape.n_k, shape.causal, shape.scale
    allowed, rows, cols, neg_inf = _block_setup(q, mask, shape)
    d = _row_sum(grad_out * out)                 # D_i = dO_i . O_i = rowsum(dA * A)_i
    shift = _finite_or_zero(lse)                 # empty row: exp(-inf - 0) = 0, not NaN
    qs = q * scale                             # (a Python float keeps q's dtype)
    dq, dk, dv = xp.zeros_like(q), xp.zeros_like(k), xp.zeros_like(v)
    weight_sums, ds_sums = xp.zeros_like(d), xp.zeros_like(d)
    for j0 in range(0, n_k, block_size):
        j1 = min(j0 + block_size, n_k)
        r0 = j0 if causal else 0                 # causal: rows i < j0 see no key here
        if r0 >= n_q:
            break
        kb, vb, go = k[..., j0:j1, :], v[..., j0:j1, :], grad_out[..., r0:, :]
        s = qs[..., r0:, :] @ _transpose(kb)     # recomputed scores (..., n_q - r0, b)
        keep = _block_mask(allowed, causal, rows, cols, r0, j0, j1)
        if keep is not None:
            s = xp.where(keep, s, neg_inf)
        s -= shift[..., r0:, :]
        p = xp.exp(s, out=s)                     # P_b, in the scores' memory
        dv[..., j0:j1, :] += _transpose(p) @ go  # dV_b = P_b^T dO
        ds = go @ _transpose(vb)                 # dP_b = dO V_b^T
        ds -= d[..., r0:, :]
        ds *= p                                  # dS_b = P_b * (dP_b - D), in place
        dq[..., r0:, :] += ds @ kb
        dk[..., j0:j1, :] += _transpose(ds) @ q[..., r0:, :]
        weight_sums[..., r0:, :] += _row_sum(p)
        ds_sums[..., r0:, :] += _row_sum(ds)
        del s, p, ds, keep               # free this block before the next is allocated
    dq *= scale                          # S = scale Q K^T: the scale enters dQ and dK once
    dk *= scale
    return dq, dk, dv, weight_sums, ds_sums


_FUNCTION = None


def _tiled_function() -> Any:
    """The ``torch.autograd.Function`` of tiled attention, defined on first use so that
    importing attncore does not import torch."""
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION
    import torch

    class TiledAttentionFunction(torch.autograd.Function):
        """Tiled attention with a block-wise backward pass (inputs in the working dtype)."""

        @staticmethod
        def forward(q, k, v, mask, shape, block_size):
            state = _tiled_state(q * shape.scale, k.transpose(-1, -2), v, mask, shape,
                                 block_size)
            lse = _log_sum_exp(state)          # before the division overwrites out
            return _finalize(state, in_place=True), lse

        @staticmethod
        def setup_context(ctx, inputs, output):
            q, k, v, mask, shape, block_size = inputs
            out, lse = output
            ctx.save_for_backward(q, k, v, mask, out, lse)
            ctx.shape, ctx.block_size = shape, block_size
            ctx.mark_non_differentiable(lse)

        @staticmethod
        def backward(ctx, grad_out, _grad_lse):
            q, k, v, mask, out, lse = ctx.saved_tensors
            dq, dk, dv, _, _ = _tiled_backward(q, k, v, mask, ctx.shape, ctx.block_size,
                                               out, lse, grad_out)
            return (dq if ctx.needs_input_grad[0] else None,
                    dk if ctx.needs_input_grad[1] else None,
                    dv if ctx.needs_input_grad[2] else None, None, None, None)

    _FUNCTION = TiledAttentionFunction
    return _FUNCTION
