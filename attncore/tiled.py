"""Tiled ("flash") attention: exact attention, one block of keys at a time, with an online softmax.

The reference :func:`~attncore.scaled_dot_product_attention` builds the whole
``(n_q, n_k)`` score matrix. For long sequences that matrix is the memory cost of attention
(``n_q * n_k`` numbers per head). This module computes the *same* result while holding only
``(n_q, block_size)`` scores at a time.

It keeps, per query row, the online-softmax state of :mod:`attncore.online_softmax`
(``max``, ``sum`` and the unnormalised ``out``), walks the keys in blocks, and merges the
state of each block into a running state: the online softmax of Milakov & Gimelshein
(2018), as used by FlashAttention (Dao et al., 2022). (:class:`SoftmaxState` and its
functions are importable from here too, where chapter 7 meets them.)

It takes NumPy arrays or torch tensors (computed on the tensors' device). For float16
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
    check_attention_inputs,
    check_flag,
    check_size,
    group_heads,
    shape_of,
    ungroup_heads,
)
from ._guard import attention_guard, is_low_precision
from .dropout import BlockDropout, Dropout, block_dropout, block_keep, check_dropout
from .masks import check_window
from .online_softmax import (
    SoftmaxState,
    _empty_state,
    _finalize,
    _finite_or_zero,
    _log_sum_exp,
    _merge,
    _row_sum,
    _state,
    _xp,
    finalize_softmax_state,
    merge_softmax_states,
    softmax_state,
)
from .sinks import check_sinks, group_sinks

__all__ = ["TiledWork", "tiled_attention", "tiled_attention_work"]

# (re-exported: chapter 7 imports the online softmax from here, beside the loop that uses it)
_REEXPORTED = (SoftmaxState, finalize_softmax_state, merge_softmax_states, softmax_state)


# --- tiled attention ---------------------------------------------------------------------

def tiled_attention(q: Any, k: Any, v: Any, *, block_size: int = 512, mask: Any = None,
                    causal: bool = False, scale: Any = None, enable_gqa: bool = False,
                    return_lse: bool = False, dropout_p: float = 0.0,
                    generator: Any = None, window: int | None = None,
                    sinks: Any = None) -> Any:
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
        Attention dropout with PyTorch's semantics, as in the reference: each weight is
        zeroed with probability ``dropout_p`` and the rest scaled by ``1 / (1 - p)``
        (``0`` changes nothing, bit for bit). The mask is not drawn entry by entry from
        the generator: one seed is, and weight ``(b, i, j)`` is kept when a hash of the
        seed and its position clears ``p`` (:func:`attncore.dropout.block_keep`), so that
        the backward pass drops the same weights again, block by block, without storing
        an ``(n_q, n_k)`` mask. Each weight is still kept with probability ``1 - p``;
        the same generator state gives the same result, though not the reference's mask.
        ``lse`` is that of the weights before dropout.
    generator : numpy.random.Generator or torch.Generator, optional
        The source of the seed, matching the inputs' library (as in the reference).
    window : int, optional
        A sliding window, as in the reference: query ``i`` sees keys
        ``i - window < j <= i`` (needs ``causal=True``). Each key block ``[j0, j1)`` is
        then computed only for the query rows that can see it, ``j0 <= i < j1 - 1 +
        window``: the work is about ``n_q * (window + block_size)`` scores instead of
        ``n_q * n_k / 2`` (:func:`tiled_attention_work` counts them).
    sinks : numpy.ndarray or torch.Tensor, shape ``()`` or ``(H,)``, optional
        Attention sinks, as in the reference (one logit per head, ``H = q.shape[-3]``).
        The running state starts as the sink's own state ``(s_h, 1, 0)`` instead of the
        empty one, so every block merges into it exactly (:func:`add_sink_to_state`);
        ``lse`` includes the sink's term. Differentiable on torch.

    Returns
    -------
    out : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_v)``
        Same dtype, library and device as ``q``. Rows with every key masked, and every
        row when ``n_k = 0``, are zeros.
    lse : numpy.ndarray or torch.Tensor, shape ``(..., n_q)``
        Only if ``return_lse``: ``lse_i = log sum_j exp(s_ij) = m_i + log l_i`` over the
        admissible keys of row ``i`` (``s = scale * q @ k^T``), so that the attention
        weights are ``exp(s_ij - lse_i)``. ``-inf`` for a row with no admissible key (the
        logarithm of an empty sum). With ``sinks`` the sink's term is in the sum,
        ``log(exp(s_h) + sum_j exp(s_ij))``, finite in every row. Same library and
        device as ``q``; float32 for float16
        and bfloat16 inputs (the precision of the running state), else ``q``'s dtype. It
        carries no gradient.

    Raises
    ------
    TypeError, ValueError
        As the reference (``window`` and ``sinks`` included), and for a ``block_size``
        that is not a positive integer.

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
    equal those of the reference. Beyond the first derivative: a backward pass with
    ``create_graph=True`` (double backward, ``gradgradcheck``) differentiates the same
    block loop written out of place, and so do ``torch.func.vmap``, ``grad``,
    ``jacrev``, ``jvp``, ``jacfwd`` and forward-mode AD, which trace it like any torch
    code; the values equal the reference's, but autograd keeps each block for the
    backward pass, so these have the reference's memory, not tiling's. (Under ``vmap``
    the values are not checked for NaN or overflow, as in the reference.)
    """
    shape = check_attention_inputs(q, k, v, mask=mask, causal=causal, scale=scale,
                                   enable_gqa=enable_gqa)
    block_size = check_size("block_size", block_size)
    return_lse = check_flag("return_lse", return_lse)
    found = check_dropout(dropout_p, generator, shape.backend, like=q)
    shape = shape._replace(window=check_window(window, shape.causal))
    if sinks is not None:
        sinks = check_sinks(sinks, q, shape.batch)
    return _tiled(q, k, v, mask, shape, block_size, return_lse, found, sinks)


def _tiled(q: Any, k: Any, v: Any, mask: Any, shape: Any, block_size: int,
           return_lse: bool, found: Dropout | None, sinks: Any) -> Any:
    """:func:`tiled_attention` after its checks (``sinks`` shaped by
    :func:`~attncore.sinks.check_sinks`, ``found`` the checked dropout or None)."""
    if shape.group > 1:
        # Grouped-query attention: the same loop on grouped views of the same arrays
        # (group_heads), after the value checks in the caller's terms.
        attention_guard(q, k, v, shape)
        q, k, v, mask, grouped = group_heads(q, k, v, mask, shape)
        if sinks is not None:
            sinks = group_sinks(sinks, shape.group)
        result = _tiled(q, k, v, mask, grouped, block_size, return_lse, found, sinks)
        if not return_lse:
            return ungroup_heads(result, shape)
        out, lse = result
        return ungroup_heads(out, shape), lse.reshape(shape.batch + (shape.n_q,))
    # The dropout mask is a function of a seed and the position (one draw from the
    # generator), so that the backward pass can drop the same weights again, block by block.
    drop = None if found is None else block_dropout(found, q)
    if shape.backend == NUMPY:
        qw, kw, vw = (x.astype(np.float32) for x in (q, k, v)) if is_low_precision(q) \
            else (q, k, v)
        guard = attention_guard(qw, kw, vw, shape)
        if guard.v_factor is not None:
            vw = vw / guard.v_factor
        if sinks is not None:
            sinks = sinks.astype(qw.dtype, copy=False)
        # (as in the reference: s - max may overflow to -inf only when the guard had to
        # check the scores one by one, and exp(-inf) = 0 is then the right weight)
        with np.errstate(over="ignore") if not guard.certified else nullcontext():
            state = _tiled_state(qw * np.asarray(shape.scale, dtype=qw.dtype),
                                 np.swapaxes(kw, -1, -2), vw, mask, shape, block_size, drop,
                                 sinks)
        out = _finalize(state, in_place=True)
        if guard.v_factor is not None:
            out *= guard.v_factor
        out = out.astype(q.dtype, copy=False)
        return (out, _log_sum_exp(state)[..., 0]) if return_lse else out
    out, lse = _tiled_torch(q, k, v, mask, shape, block_size, drop, sinks)
    return (out, lse[..., 0]) if return_lse else out


def _block_plan(n_q: int, n_k: int, block_size: int, causal: bool,
                window: int | None) -> Any:
    """The blocks the loops compute: ``(j0, j1, r0, r1)`` for each key block ``[j0, j1)``
    that some query sees, with the query rows ``[r0, r1)`` that may see it.

    Causal: query ``i`` sees keys ``j <= i``, so rows ``i < j0`` get nothing from this
    block (or from any later one). A window of ``W`` adds ``j > i - W``: rows
    ``i >= j1 - 1 + W`` get nothing from it either. Every other row may."""
    for j0 in range(0, n_k, block_size):
        j1 = min(j0 + block_size, n_k)
        r0 = j0 if causal else 0
        if r0 >= n_q:
            return
        r1 = n_q if window is None else min(n_q, j1 - 1 + window)
        yield j0, j1, r0, r1


class TiledWork(NamedTuple):
    """What :func:`tiled_attention` computes for one ``(n_q, n_k)`` problem (per batch
    entry and head).

    Attributes
    ----------
    key_blocks : int
        Key blocks visited (each one matrix product of its rows of queries by its keys).
    score_entries : int
        Scores computed, ``sum (r1 - r0) * (j1 - j0)`` over the blocks.
    dense_entries : int
        ``n_q * n_k``: what the reference computes.
    """

    key_blocks: int
    score_entries: int
    dense_entries: int


def tiled_attention_work(n_q: int, n_k: int, *, block_size: int = 512,
                         causal: bool = False, window: int | None = None) -> TiledWork:
    """The blocks and scores :func:`tiled_attention` computes, read from the plan its
    loops follow (forward, and the block-wise backward pass).

    For each key block ``[j0, j1)`` the loops compute the scores of the query rows that
    may see one of its keys only: all rows; with ``causal``, rows ``i >= j0``; with a
    ``window`` ``W``, also ``i < j1 - 1 + W``. So causal attention computes about half
    of the ``n_q * n_k`` scores, and a window about ``n_q * (W + block_size)``, however
    long the sequence: linear in ``n``, not quadratic.

    Parameters
    ----------
    n_q, n_k : int
        Numbers of queries and keys, ``>= 0``.
    block_size : int, default 512
        As in :func:`tiled_attention`.
    causal : bool, default False
    window : int, optional
        As in :func:`tiled_attention` (needs ``causal=True``).

    Returns
    -------
    TiledWork
        ``(key_blocks, score_entries, dense_entries)``.

    Raises
    ------
    TypeError, ValueError
        Sizes that are not integers (``n_q``, ``n_k`` non-negative, ``block_size`` and
        ``window`` positive), a flag that is not a bool, a window without ``causal``.

    Examples
    --------
    >>> import attncore as ac
    >>> ac.tiled_attention_work(1024, 1024, block_size=128, causal=True)
    TiledWork(key_blocks=8, score_entries=589824, dense_entries=1048576)
    >>> ac.tiled_attention_work(1024, 1024, block_size=128, causal=True, window=128)
    TiledWork(key_blocks=8, score_entries=244864, dense_entries=1048576)
    """
    n_q, n_k = check_size("n_q", n_q, minimum=0), check_size("n_k", n_k, minimum=0)
    block_size = check_size("block_size", block_size)
    causal = check_flag("causal", causal)
    window = check_window(window, causal)
    blocks = entries = 0
    for j0, j1, r0, r1 in _block_plan(n_q, n_k, block_size, causal, window):
        blocks += 1
        entries += (r1 - r0) * (j1 - j0)
    return TiledWork(blocks, entries, n_q * n_k)


def _start_state(batch: tuple[int, ...], n_q: int, d_v: int, like: Any,
                 sinks: Any) -> SoftmaxState:
    """The running state before the first key block: empty, or the sink's ``(s, 1, 0)``
    (a key of score ``s`` and value 0; :func:`~attncore.add_sink_to_state`)."""
    state = _empty_state(batch, n_q, d_v, like)
    if sinks is not None:
        state.max[...] = sinks
        state.sum[...] = 1
    return state


def _tiled_state(qs: Any, kt: Any, v: Any, mask: Any, shape: Any,
                 block_size: int, drop: BlockDropout | None = None,
                 sinks: Any = None) -> SoftmaxState:
    """The running state over all key blocks. ``qs`` is ``scale * q``, ``kt`` is ``k^T``,
    all in the working dtype; the mask is the caller's (not combined with causal). With
    ``drop``, each block's weights are dropped in the output (not in the sum); with
    ``sinks``, the state starts from the sink's."""
    batch, n_q, n_k, causal = shape.batch, shape.n_q, shape.n_k, shape.causal
    xp = _xp(qs)
    allowed, rows, cols, neg_inf = _block_setup(qs, mask, shape)
    state = _start_state(batch, n_q, shape_of(v)[-1], qs, sinks)
    for j0, j1, r0, r1 in _block_plan(n_q, n_k, block_size, causal, shape.window):
        scores = qs[..., r0:r1, :] @ kt[..., j0:j1]               # (..., r1 - r0, b)
        keep = _block_mask(allowed, causal, rows, cols, r0, j0, j1, r1, shape.window)
        if keep is not None:
            scores = xp.where(keep, scores, neg_inf)
        # Merge this block's state into the running state of rows r0:r1 (views, updated
        # in place). The scores are our own temporary, so the exponentials may overwrite
        # them.
        factor = None if drop is None else \
            block_keep(drop, qs, batch, n_q, n_k, r0, j0, j1, r1)
        block = _state(scores, v[..., j0:j1, :], overwrite=True, out_factor=factor)
        rows_seen = SoftmaxState(*(x[..., r0:r1, :] for x in state))
        _merge(rows_seen, block, into_a=True)
        del scores, block, keep, factor  # free this block before the next is allocated
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
                j1: int, r1: int | None = None, window: int | None = None) -> Any:
    """Which scores of the block (rows ``r0:r1``, keys ``j0:j1``) are admissible, or None
    for all."""
    keep = None if allowed is None else allowed[..., r0:r1, j0:j1]
    if causal:
        i, j = rows[r0:r1], cols[j0:j1]
        tri = i >= j
        if window is not None:
            tri = tri & (i - j < window)
        keep = tri if keep is None else keep & tri
    return keep


# --- tiled attention on torch, with its backward pass ----------------------------------------

def _tiled_torch(q: Any, k: Any, v: Any, mask: Any, shape: Any,
                 block_size: int, drop: BlockDropout | None = None,
                 sinks: Any = None) -> tuple[Any, Any]:
    """``(out, lse)``, lse of shape ``(..., n_q, 1)`` in the working dtype."""
    import torch

    guard = attention_guard(q, k, v, shape)
    work = torch.float32 if is_low_precision(q) else q.dtype
    qw, kw, vw = q.to(work), k.to(work), v.to(work)     # no copies unless the dtype changes
    sw = None if sinks is None else sinks.to(work)
    if guard.v_factor is not None:
        vw = vw / guard.v_factor
    if guard.vmapped or guard.transformed:
        # torch.func (vmap, grad, jacrev, jvp, jacfwd) and forward-mode AD: the same
        # block loop without in-place updates, which the transforms differentiate and
        # batch like any other torch code
        out, lse = _tiled_out_of_place(qw, kw, vw, mask, shape, block_size, drop, sw)
        lse = lse.detach()
    elif torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or
                                      v.requires_grad or
                                      (sinks is not None and sinks.requires_grad)):
        out, lse = _tiled_function().apply(qw, kw, vw, mask, shape, block_size, drop, sw)
    else:
        state = _tiled_state(qw * shape.scale, kw.transpose(-1, -2), vw, mask, shape,
                             block_size, drop, sw)
        out = _finalize(state, in_place=True)
        lse = _log_sum_exp(state)
    if guard.v_factor is not None:
        out = out * guard.v_factor
    return out.to(q.dtype), lse


def _tiled_out_of_place(q: Any, k: Any, v: Any, mask: Any, shape: Any,
                        block_size: int, drop: BlockDropout | None = None,
                        sinks: Any = None) -> tuple[Any, Any]:
    """``(out, lse)`` by the block loop of :func:`_tiled_state`, every step out of place.

    For torch's transforms and for a second derivative: plain differentiable operations
    (``where`` keeps every unused branch finite, so no gradient is NaN). Each block's
    scores are still formed one at a time, but autograd keeps what it needs of each for
    the backward pass, so this path has the reference's memory, not tiling's.
    """
    import torch

    batch, n_q, n_k, d_v = shape.batch, shape.n_q, shape.n_k, shape_of(v)[-1]
    allowed, rows, cols, neg_inf = _block_setup(q, mask, shape)
    qs, kt = q * shape.scale, k.transpose(-1, -2)
    if sinks is None:
        m = q.new_full(batch + (n_q, 1), float("-inf"))
        total = q.new_zeros(batch + (n_q, 1))
    else:
        # the sink's state (s, 1, 0): m = s exactly, so exp(s - m) = 1 (written so that
        # the sink's logit stays in the graph, through m)
        m = sinks.expand(batch + (n_q, 1))
        total = torch.exp(sinks - m)
    acc = q.new_zeros(batch + (n_q, d_v))
    for j0 in range(0, n_k, block_size):
        j1 = min(j0 + block_size, n_k)
        s = qs @ kt[..., j0:j1]
        keep = _block_mask(allowed, shape.causal, rows, cols, 0, j0, j1, None,
                           shape.window)
        if keep is not None:
            s = torch.where(keep, s, neg_inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp(m - shift)                   # 0 while no key was seen
        p = torch.exp(s - shift)
        total = alpha * total + p.sum(dim=-1, keepdim=True)
        if drop is not None:
            p_out = p * block_keep(drop, q, batch, n_q, n_k, 0, j0, j1)
        else:
            p_out = p
        acc = alpha * acc + p_out @ v[..., j0:j1, :]
        m = m_new
    seen = total > 0
    safe = torch.where(seen, total, torch.ones_like(total))
    out = torch.where(seen, acc / safe, torch.zeros_like(acc))
    lse = torch.where(seen, m + torch.log(safe), torch.full_like(m, float("-inf")))
    return out, lse


def _transpose(x: Any) -> Any:
    """The last two axes swapped (a view): ``x^T`` of every matrix in the batch."""
    return np.swapaxes(x, -1, -2) if isinstance(x, np.ndarray) else x.transpose(-1, -2)


def _tiled_backward(q: Any, k: Any, v: Any, mask: Any, shape: Any, block_size: int,
                    out: Any, lse: Any, grad_out: Any,
                    drop: BlockDropout | None = None) -> tuple[Any, Any, Any, Any, Any]:
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

    With ``drop`` (the forward pass's dropout, factor ``Z_b``: ``1/(1-p)`` or 0), the output
    was ``(P * Z) V``: ``dV_b = (P_b * Z_b)^T dO`` and ``dS_b = P_b * (dP_b * Z_b - D)``;
    ``D = rowsum(dO * O)`` is still ``rowsum(P * dP * Z)``.
    """
    xp = _xp(q)
    n_q, n_k, causal, scale = shape.n_q, shape.n_k, shape.causal, shape.scale
    allowed, rows, cols, neg_inf = _block_setup(q, mask, shape)
    d = _row_sum(grad_out * out)                 # D_i = dO_i . O_i = rowsum(dA * A)_i
    shift = _finite_or_zero(lse)                 # empty row: exp(-inf - 0) = 0, not NaN
    qs = q * scale                             # (a Python float keeps q's dtype)
    dq, dk, dv = xp.zeros_like(q), xp.zeros_like(k), xp.zeros_like(v)
    weight_sums, ds_sums = xp.zeros_like(d), xp.zeros_like(d)
    # causal: rows i < j0 see no key of block [j0, j1), nor with a window rows i >=
    # j1 - 1 + window (_block_plan)
    for j0, j1, r0, r1 in _block_plan(n_q, n_k, block_size, causal, shape.window):
        kb, vb, go = k[..., j0:j1, :], v[..., j0:j1, :], grad_out[..., r0:r1, :]
        s = qs[..., r0:r1, :] @ _transpose(kb)   # recomputed scores (..., r1 - r0, b)
        keep = _block_mask(allowed, causal, rows, cols, r0, j0, j1, r1, shape.window)
        if keep is not None:
            s = xp.where(keep, s, neg_inf)
        s -= shift[..., r0:r1, :]
        p = xp.exp(s, out=s)                     # P_b, in the scores' memory
        z = None if drop is None else \
            block_keep(drop, q, shape.batch, n_q, n_k, r0, j0, j1, r1)
        dv[..., j0:j1, :] += _transpose(p if z is None else p * z) @ go   # dV_b = P_b^T dO
        ds = go @ _transpose(vb)                 # dP_b = dO V_b^T
        if z is not None:
            ds *= z
        ds -= d[..., r0:r1, :]
        ds *= p                                  # dS_b = P_b * (dP_b - D), in place
        dq[..., r0:r1, :] += ds @ kb
        dk[..., j0:j1, :] += _transpose(ds) @ q[..., r0:r1, :]
        weight_sums[..., r0:r1, :] += _row_sum(p)
        ds_sums[..., r0:r1, :] += _row_sum(ds)
        del s, p, ds, keep, z            # free this block before the next is allocated
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
        def forward(q, k, v, mask, shape, block_size, drop, sinks):
            state = _tiled_state(q * shape.scale, k.transpose(-1, -2), v, mask, shape,
                                 block_size, drop, sinks)
            lse = _log_sum_exp(state)          # before the division overwrites out
            return _finalize(state, in_place=True), lse

        @staticmethod
        def setup_context(ctx, inputs, output):
            q, k, v, mask, shape, block_size, drop, sinks = inputs
            out, lse = output
            ctx.save_for_backward(q, k, v, mask, out, lse, sinks)
            ctx.shape, ctx.block_size, ctx.drop = shape, block_size, drop
            ctx.mark_non_differentiable(lse)

        @staticmethod
        def backward(ctx, grad_out, _grad_lse):
            q, k, v, mask, out, lse, sinks = ctx.saved_tensors
            if torch.is_grad_enabled():
                # create_graph=True: the gradient must itself be differentiable. The block
                # loop below updates in place, so differentiate the out-of-place loop
                # instead (a second derivative has the reference's memory).
                return _differentiable_backward(ctx, q, k, v, mask, grad_out, sinks)
            # (lse includes the sink's term, so exp(S - lse) are the weights with it)
            dq, dk, dv, _, _ = _tiled_backward(q, k, v, mask, ctx.shape, ctx.block_size,
                                               out, lse, grad_out, ctx.drop)
            d_sinks = None
            if sinks is not None and ctx.needs_input_grad[7]:
                d_sinks = _sink_gradient(sinks, lse, out, grad_out)
            return (dq if ctx.needs_input_grad[0] else None,
                    dk if ctx.needs_input_grad[1] else None,
                    dv if ctx.needs_input_grad[2] else None, None, None, None, None,
                    d_sinks)

    _FUNCTION = TiledAttentionFunction
    return _FUNCTION


def _sink_gradient(sinks: Any, lse: Any, out: Any, grad_out: Any) -> Any:
    """The gradient of the sink logits: the sink is a key with score ``s`` and value 0,
    so ``dP_sink = dO . 0 = 0`` and ``dS_sink = P_sink (0 - D) = -exp(s - lse) D`` per
    row, with ``D = rowsum(dO * O)``; summed over the rows (and batch axes) that share
    the logit."""
    d = _row_sum(grad_out * out)
    return (-(sinks - lse).exp() * d).sum_to_size(sinks.shape)


def _differentiable_backward(ctx: Any, q: Any, k: Any, v: Any, mask: Any,
                             grad_out: Any, sinks: Any = None) -> tuple[Any, ...]:
    """The backward pass of tiled attention as a function autograd can differentiate
    again (for ``create_graph=True``, double backward, ``gradgradcheck``)."""
    import torch

    inputs = (q, k, v, sinks)
    needs = list(ctx.needs_input_grad[:3]) + [sinks is not None and
                                              ctx.needs_input_grad[7]]
    wanted = [x for x, need in zip(inputs, needs) if need]
    with torch.enable_grad():
        out, _ = _tiled_out_of_place(q, k, v, mask, ctx.shape, ctx.block_size, ctx.drop,
                                     sinks)
        grads = iter(torch.autograd.grad(out, wanted, grad_out, create_graph=True,
                                         allow_unused=True))
    found = [next(grads) if need else None for need in needs]
    found = [torch.zeros_like(x) if need and g is None else g
             for x, need, g in zip(inputs, needs, found)]
    return (*found[:3], None, None, None, None, found[3])

