"""Learned sparse attention (DeepSeek-V3.2): an indexer picks ``top_k`` keys per query,
and attention is exact on those.

A softmax over ``n`` keys usually puts nearly all of its weight on a few of them. DeepSeek
Sparse Attention (DeepSeek-AI, 2025) lets a cheap **indexer** score every key for every
query, keeps the ``top_k`` best-scored keys of each query (2048 of up to 128K), and runs
ordinary softmax attention on those alone: the main attention then costs ``O(n top_k)``
instead of ``O(n^2)``, while the indexer, still quadratic, is a few small heads in low
precision.

* :func:`indexer_scores`        -- the "lightning indexer": ``I_ts = sum_j w_tj
  ReLU(q^I_tj . k^I_s)`` with a few heads ``j`` of small width, one key vector per token
  shared by all heads
* :func:`topk_sparse_attention` -- the top ``top_k`` keys of each query by any given
  scores, then exact attention on them. It equals
  :func:`~attncore.scaled_dot_product_attention` with a mask that lets each query see
  exactly its chosen keys (``return_indices=True`` gives them).

Ties between index scores are broken towards the earlier key (a stable sort), on NumPy and
torch alike, so both choose the same keys.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._backend import (
    backend_of,
    check_all_finite,
    check_attention_inputs,
    check_floating,
    check_flag,
    check_min_rank,
    check_same_dtype,
    check_size,
    shape_of,
    under_vmap,
)
from ._guard import attention_guard, is_low_precision

__all__ = ["indexer_scores", "topk_sparse_attention"]


def _check_index_scores(index_scores: Any, q: Any, batch: tuple[int, ...], n_q: int,
                        n_k: int) -> None:
    """Floating scores broadcastable to ``batch + (n_q, n_k)`` without enlarging it, with at
    most 2 axes or one per axis of the scores (the rule of a mask), finite."""
    backend_of(q=q, index_scores=index_scores)
    check_floating("index_scores", index_scores)
    target = batch + (n_q, n_k)
    ss = shape_of(index_scores)
    try:
        joint = np.broadcast_shapes(ss, target)
    except ValueError:
        joint = None
    if joint != target or (2 < len(ss) < len(target) and any(x != 1 for x in ss[:-2])) \
            or len(ss) < 2:
        raise ValueError(f"index_scores: expected shape (n_q, n_k) = {(n_q, n_k)}, or one "
                         f"axis per axis of the scores {target} (each of size 1 or equal, "
                         f"e.g. 1 for the heads: the indexer is shared by all heads), got "
                         f"{ss}")
    if not under_vmap(index_scores):
        check_all_finite(index_scores=index_scores)


def topk_sparse_attention(q: Any, k: Any, v: Any, index_scores: Any, top_k: int, *,
                          causal: bool = False, scale: Any = None,
                          return_indices: bool = False) -> Any:
    """Attention of each query on the ``top_k`` keys its index scores rank highest.

    For query ``i``, the keys ``J_i`` with the ``top_k`` largest ``index_scores[..., i,
    :]`` (among the admissible ones, ``j <= i`` with ``causal``) are chosen, and ::

        out_i = sum_{j in J_i} softmax_j(scale q_i . k_j) v_j      (over J_i only).

    Parameters
    ----------
    q : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_k)``
    k : same library and dtype, shape ``(..., n_k, d_k)``
    v : same library and dtype, shape ``(..., n_k, d_v)``
    index_scores : array, shape broadcastable to ``(..., n_q, n_k)``
        How much each query wants each key (e.g. :func:`indexer_scores`, or the
        attention scores themselves); only their order counts. The rule of a mask: 2
        axes ``(n_q, n_k)``, or one per axis of the scores, each of size 1 or equal (a
        heads axis of size 1: one choice for all the heads of a token, as in
        DeepSeek-V3.2). Any floating dtype of the same library; finite.
    top_k : int
        Keys per query, ``1 <= top_k <= n_k``.
    causal : bool, default False
        Choose among keys ``j <= i`` only (top-left aligned, as ``causal=True`` of the
        attention functions). A query ``i < top_k - 1`` has fewer admissible keys than
        ``top_k``: it attends to all ``i + 1``.
    scale : real scalar, optional
        Multiplies the scores ``q . k``; default ``1 / sqrt(d_k)``.
    return_indices : bool, default False
        Also return the chosen keys.

    Returns
    -------
    out : array, shape ``(..., n_q, d_v)``
        Same library, device and dtype as ``q``; differentiable on torch (with respect
        to ``q``, ``k`` and ``v``; the choice itself is not differentiable).
    indices : int64 array, shape ``(..., n_q, top_k)``
        Only with ``return_indices``: the chosen keys of each query, best first; ``-1``
        in the slots a causal query has no admissible key for.

    Raises
    ------
    TypeError
        As attention (mixed libraries, dtypes), non-floating index scores, a ``top_k``
        that is not an integer.
    ValueError
        As attention; index scores of a shape that does not fit or with NaN or infinity;
        ``top_k`` below 1 or above ``n_k``.

    Notes
    -----
    The keys and values of the chosen keys are gathered, ``(..., n_q, top_k, d)``: the
    work of the attention itself is ``O(n_q top_k d)``. Choosing costs a sort of each
    row of index scores, ``O(n_q n_k log n_k)`` comparisons (an indexer's scores exist
    for every pair anyway).

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> q = np.zeros((1, 2)); k = np.zeros((3, 2)); v = np.array([[1.0], [2.0], [6.0]])
    >>> out, idx = ac.topk_sparse_attention(q, k, v, np.array([[0.1, 0.5, 0.9]]), 2,
    ...                                     return_indices=True)
    >>> idx, out                 # keys 2 and 1, equal weights: the mean of 6 and 2
    (array([[2, 1]]), array([[4.]]))
    """
    shape = check_attention_inputs(q, k, v, causal=causal, scale=scale)
    return_indices = check_flag("return_indices", return_indices)
    top_k = check_size("top_k", top_k)
    if top_k > shape.n_k:
        raise ValueError(f"top_k: expected at most the number of keys n_k = {shape.n_k}, "
                         f"got {top_k}")
    _check_index_scores(index_scores, q, shape.batch, shape.n_q, shape.n_k)
    guard = attention_guard(q, k, v, shape)
    batch, n_q, n_k = shape.batch, shape.n_q, shape.n_k
    numpy = isinstance(q, np.ndarray)
    xp = np if numpy else sys.modules["torch"]
    rows = np.arange(n_q).reshape(n_q, 1)
    cols = np.arange(n_k)
    allowed = (cols <= rows) if shape.causal else None

    # choose: a stable sort, best first (ties: the earlier key), inadmissible keys last
    if numpy:
        ranked = index_scores if allowed is None else \
            np.where(allowed, index_scores, -np.inf)
        order = np.argsort(-ranked, axis=-1, kind="stable")[..., :top_k]
        order = np.broadcast_to(order, batch + (n_q, top_k))
    else:
        torch = xp
        ranked = index_scores if allowed is None else torch.where(
            torch.as_tensor(allowed, device=q.device), index_scores,
            index_scores.new_tensor(float("-inf")))
        order = torch.sort(ranked.detach(), dim=-1, descending=True,
                           stable=True).indices[..., :top_k]
        order = order.expand(batch + (n_q, top_k))
    # with causal, query i < top_k - 1 has only i + 1 admissible keys
    valid = None
    if allowed is not None and top_k > 1:
        valid = order <= (rows if numpy else xp.as_tensor(rows, device=q.device))

    work = is_low_precision(q)
    qw, kw, vw = q, k, v
    if work:
        qw, kw, vw = ((x.astype(np.float32) if numpy else x.float()) for x in (q, k, v))
    if guard.v_factor is not None:
        vw = vw / guard.v_factor
    k_sel, v_sel = _gather(kw, order), _gather(vw, order)        # (..., n_q, top_k, d)
    scores = (qw[..., :, None, :] * k_sel).sum(-1) * shape.scale  # (..., n_q, top_k)
    if valid is not None:
        scores = xp.where(valid, scores, xp.full_like(scores, -np.inf))
    m = scores.max(axis=-1, keepdims=True) if numpy else scores.amax(dim=-1, keepdim=True)
    p = xp.exp(scores - m)        # m is finite: every row has an admissible key
    p = p / p.sum(-1, keepdims=True) if numpy else p / p.sum(-1, keepdim=True)
    out = (p[..., :, None, :] @ v_sel)[..., 0, :]
    if guard.v_factor is not None:
        out = out * guard.v_factor
    out = out.astype(q.dtype, copy=False) if numpy else out.to(q.dtype)
    if not return_indices:
        return out
    if numpy:
        indices = np.array(order, dtype=np.int64)
        if valid is not None:
            indices[~valid] = -1
    else:
        indices = order.clone()
        if valid is not None:
            indices = indices.masked_fill(~valid, -1)
    return out, indices


def _gather(x: Any, order: Any) -> Any:
    """``x[..., order[..., i, t], :]`` for every query ``i`` and slot ``t``:
    ``(..., n_k, d)`` and ``(..., n_q, top_k)`` give ``(..., n_q, top_k, d)``."""
    if isinstance(x, np.ndarray):
        return np.take_along_axis(x[..., None, :, :], order[..., None], axis=-2)
    batch, n_q, top_k = tuple(order.shape[:-2]), order.shape[-2], order.shape[-1]
    n_k, d = x.shape[-2], x.shape[-1]
    source = x[..., None, :, :].expand(batch + (n_q, n_k, d))
    return source.gather(-2, order[..., None].expand(batch + (n_q, top_k, d)))


def indexer_scores(q_index: Any, k_index: Any, weights: Any) -> Any:
    """The index scores of DeepSeek-V3.2's lightning indexer.

    ::

        I_ts = sum_j weights_tj * ReLU(q_index_tj . k_index_s)

    ``H_I`` small heads ``j`` (a handful, of width ``d_I`` such as 64 or 128) each
    score every key with a ReLU of a dot product, and a per-query weight ``w_tj``
    (itself a projection of the query's token) mixes the heads. The key side has one
    vector per token, shared by the heads (as in multi-query attention), so the indexer's
    cache is one small vector per token. The ReLU, not a softmax, keeps it cheap: the
    scores only need to rank the keys (:func:`topk_sparse_attention`).

    Parameters
    ----------
    q_index : numpy.ndarray or torch.Tensor, shape ``(..., n_q, H_I, d_I)``
        The indexer's queries, ``H_I`` heads per token.
    k_index : same library and dtype, shape ``(..., n_k, d_I)``
        The indexer's keys, one per token, same leading shape ``...``.
    weights : same library and dtype, shape ``(..., n_q, H_I)``
        Each query's weight of each indexer head.

    Returns
    -------
    array, shape ``(..., n_q, n_k)``
        Same library, device and dtype; differentiable on torch.

    Raises
    ------
    TypeError
        Mixed libraries or dtypes, a non-floating dtype.
    ValueError
        Shapes that do not match, NaN or infinity.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> q_i = np.array([[[1.0, 0.0], [0.0, 1.0]]])       # 1 query, 2 heads of width 2
    >>> k_i = np.array([[2.0, -1.0], [-1.0, 3.0]])       # 2 keys
    >>> ac.indexer_scores(q_i, k_i, np.array([[1.0, 0.5]]))
    array([[2. , 1.5]])
    """
    backend_of(q_index=q_index, k_index=k_index, weights=weights)
    for name, x, rank, layout in (("q_index", q_index, 3, "(..., n_q, H_I, d_I)"),
                                  ("k_index", k_index, 2, "(..., n_k, d_I)"),
                                  ("weights", weights, 2, "(..., n_q, H_I)")):
        check_floating(name, x)
        check_min_rank(name, x, rank, layout)
    check_same_dtype(q_index=q_index, k_index=k_index, weights=weights)
    qs, ks, ws = shape_of(q_index), shape_of(k_index), shape_of(weights)
    if not (qs[:-3] == ks[:-2] == ws[:-2]) or qs[-1] != ks[-1] or ws[-2:] != qs[-3:-1]:
        raise ValueError(f"q_index, k_index, weights: expected shapes (..., n_q, H_I, d_I), "
                         f"(..., n_k, d_I) and (..., n_q, H_I) with one leading shape, got "
                         f"{qs}, {ks} and {ws}")
    if not under_vmap(q_index, k_index, weights):
        check_all_finite(q_index=q_index, k_index=k_index, weights=weights)
    xp = np if isinstance(q_index, np.ndarray) else sys.modules["torch"]
    dots = xp.einsum("...qhd,...kd->...qhk", q_index, k_index)      # (..., n_q, H_I, n_k)
    relu = xp.maximum(dots, xp.zeros_like(dots)) if xp is np else dots.clamp(min=0)
    return xp.einsum("...qhk,...qh->...qk", relu, weights)
