"""The online softmax: a softmax-weighted average kept as a small state, and merged.

:func:`~attncore.softmax` normalises a whole row of scores at once. A softmax-weighted
average of values, ``softmax(s) @ v``, can also be summarised, for any subset of the keys,
by three numbers per query row (well, two numbers and one vector):

* ``max``: the largest score ``m`` seen so far,
* ``sum``: the denominator ``l = sum_j exp(s_j - m)`` relative to that maximum,
* ``out``: the *unnormalised* output ``o = sum_j exp(s_j - m) v_j``, shape ``(d_v,)``.

Two such states, for two disjoint sets of keys, merge into the state of their union by
rescaling both to the larger maximum (:func:`merge_softmax_states`); the answer is ``o / l``
(:func:`finalize_softmax_state`). This is the online softmax of Milakov & Gimelshein
(2018). The reference :func:`~attncore.scaled_dot_product_attention` computes one state
over all keys and finalises it (dividing ``n_q x d_v`` numbers instead of ``n_q x n_k``);
:func:`~attncore.tiled_attention` merges the state of one key block at a time
(FlashAttention, Dao et al., 2022).

Which states are possible
-------------------------
A state is what :func:`softmax_state` returns for some scores and values, or a merge of
such states. The public functions refuse anything else with a ``ValueError`` naming the
part at fault, on NumPy and torch alike, rather than compute a number from it:

* ``max`` is a real number, or ``-inf`` for a row that saw no admissible key; never NaN
  or ``+inf``;
* ``sum`` and ``out`` are finite, and ``sum >= 0``;
* a row with ``max = -inf`` saw no key: its ``sum`` is 0 and its ``out`` is zeros;
* a row with a finite ``max`` has ``sum >= 1``: the key that attains the maximum adds
  ``exp(m - m) = 1`` to it (merging keeps this exactly: the factor of the state with the
  larger maximum is exactly 1, and the other term is ``>= 0``).

An attention sink (gpt-oss: one logit ``s`` per head, a key of score ``s`` and value 0)
is one more state, ``(s, 1, 0)``, merged in exactly once (:func:`add_sink_to_state`): the
log-sum-exp gains the term ``exp(s)`` and the output none.

All functions take NumPy arrays or torch tensors (computed on the tensors' device).
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np

from ._backend import (
    backend_of,
    check_all_finite,
    check_flag,
    check_floating,
    check_min_rank,
    check_same_dtype,
    shape_of,
)

__all__ = ["SoftmaxState", "add_sink_to_state", "finalize_softmax_state",
           "merge_softmax_states", "softmax_state"]


class SoftmaxState(NamedTuple):
    """What a softmax-weighted average over a set of keys needs to remember, per query row.

    The empty state ``(-inf, 0, 0)`` is the identity of :func:`merge_softmax_states`. All
    three arrays share one library, device and floating dtype.

    Only the states some scores produce are accepted by the functions that take one: a
    row with ``max = -inf`` saw no key, so its ``sum`` is 0 and its ``out`` zeros; a row
    with a finite ``max`` has ``sum >= 1`` (the key that attains the maximum adds
    ``exp(0) = 1``); ``max`` is never NaN or ``+inf``, ``sum`` and ``out`` are finite.
    Anything else is a ``ValueError`` naming the part and the row, on NumPy and torch.

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
           empty_rows: bool = True, out_factor: Any = None) -> SoftmaxState:
    """``empty_rows=False`` promises that every row has a finite score (no mask, or only
    the causal one, and no overflow), so the row maximum needs no guard against -inf.
    ``out_factor`` (shaped like ``scores``) multiplies the weights of the output only, not
    of the sum: attention dropout (the weights are normalised before they are dropped)."""
    xp = _xp(scores)
    if m is None:
        m = _row_max(scores)
    shift = _finite_or_zero(m) if empty_rows else m
    if overwrite:
        scores -= shift
        p = xp.exp(scores, out=scores)
    else:
        p = xp.exp(scores - shift)
    return SoftmaxState(m, _row_sum(p), (p if out_factor is None else p * out_factor) @ v)


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


def _add_sink(state: SoftmaxState, sink: Any) -> SoftmaxState:
    """The state merged with the sink's state ``(sink, 1, 0)``: a key of score ``sink``
    and value zero. ``sink`` broadcasts against ``state.max``. Out of place (autograd)."""
    xp = _xp(state.max)
    m = xp.maximum(state.max, sink)            # finite: the sink is a finite score
    alpha = xp.exp(state.max - m)              # 0 for a row that saw no key
    return SoftmaxState(m, alpha * state.sum + xp.exp(sink - m), alpha * state.out)


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
    # The states no scores can produce (module docstring): a row that saw no key with a
    # sum or an output, a row that saw one with a sum below the 1 its maximum adds.
    empty = xp.isneginf(state.max)
    bad = empty & (state.sum != 0)
    if _any(bad):
        row = _first(bad)
        raise ValueError(f"{name}.sum: expected 0 where {name}.max is -inf (a row that saw "
                         f"no key has an empty sum), got {float(state.sum[row]):g} at "
                         f"index {row}")
    bad = empty & (state.out != 0)
    if _any(bad):
        row = _first(bad)
        raise ValueError(f"{name}.out: expected zeros where {name}.max is -inf (a row that "
                         f"saw no key has no output), got {float(state.out[row]):g} at "
                         f"index {row}")
    bad = ~empty & (state.sum < 1)
    if _any(bad):
        row = _first(bad)
        raise ValueError(f"{name}.sum: expected a sum >= 1 where {name}.max is finite (the "
                         f"key that attains the maximum adds exp(0) = 1), got "
                         f"{float(state.sum[row]):g} at index {row}")
    return backend


def _first(bad: Any) -> tuple[int, ...]:
    """The index of the first True entry of ``bad`` (NumPy or torch), for a message."""
    found = np.argwhere(bad)[0] if isinstance(bad, np.ndarray) else \
        sys.modules["torch"].argwhere(bad)[0].tolist()
    return tuple(int(i) for i in found)


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
        non-finite sums, non-finite outputs, and the states no scores can produce: a
        row with ``max = -inf`` and a non-zero ``sum`` or ``out``, or a finite ``max``
        with ``sum < 1`` (see :class:`SoftmaxState`).
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


def add_sink_to_state(state: SoftmaxState, sink: Any) -> SoftmaxState:
    """The state with an attention sink added: one more key, of score ``sink``, value 0.

    The sink's own state is ``(sink, 1, 0)`` (one key: its maximum is its score, its
    sum ``exp(0) = 1``, its output ``1 * 0``), so this is
    ``merge_softmax_states(state, (sink, 1, 0))``: with ``m = max(m_a, sink)`` ::

        max = m,   sum = exp(m_a - m) l_a + exp(sink - m),   out = exp(m_a - m) o_a

    and the log-sum-exp becomes ``log(exp(lse) + exp(sink))``. Merging stays exact as
    long as the sink is added once, to any one of the states merged (the merge is
    associative and commutative): ``add_sink_to_state(merge(a, b), s) ==
    merge(add_sink_to_state(a, s), b)``. A row that saw no key becomes ``(sink, 1, 0)``,
    and finalises to zeros.

    Parameters
    ----------
    state : SoftmaxState
        ``max`` and ``sum`` of shape ``(..., n_q, 1)``, ``out`` of shape ``(..., n_q, d_v)``.
    sink : numpy.ndarray or torch.Tensor
        The sink logits, of ``state``'s library, device and dtype, finite: 0-d (one for
        every row), or with as many axes as ``state.max``, each of size 1 or equal to
        that of ``state.max`` (``(1, H, 1, 1)`` for one logit per head of
        ``(batch, H, n_q, 1)``). Nothing is broadcast beyond ``state.max``'s shape.

    Returns
    -------
    SoftmaxState
        A new state, shapes as ``state``; on torch differentiable with respect to both.

    Raises
    ------
    TypeError
        ``state`` is not a :class:`SoftmaxState`; mixed libraries or dtypes.
    ValueError
        A malformed or impossible state (as :func:`merge_softmax_states`), a ``sink`` of
        another shape or with NaN or infinity.
    """
    _check_state("state", state)
    backend_of(**{"state.max": state.max, "sink": sink})
    check_floating("sink", sink)
    check_same_dtype(**{"state.max": state.max, "sink": sink})
    ms, ss = shape_of(state.max), shape_of(sink)
    if ss and (len(ss) != len(ms) or any(a not in (1, b) for a, b in zip(ss, ms))):
        raise ValueError(f"sink: expected shape () or one that broadcasts to state.max's "
                         f"{ms} with as many axes (each of size 1 or equal), got {ss}")
    check_all_finite(sink=sink)
    return _add_sink(state, sink)


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

    Raises
    ------
    TypeError
        ``state`` is not a :class:`SoftmaxState`, mixed libraries or dtypes.
    ValueError
        As :func:`merge_softmax_states`: a malformed or impossible state (for instance
        ``max = -inf`` with ``sum = 3``, which no scores produce) is refused, not divided.
    """
    _check_state("state", state)
    return _finalize(state)


def _log_sum_exp(state: SoftmaxState) -> Any:
    """``m + log l`` per row, ``(..., n_q, 1)``: the log of the softmax's denominator, so
    that ``exp(s - lse)`` is the attention weight. ``-inf`` (``log 0``) for a row with no
    admissible key. (``state.max`` and ``state.sum`` are left intact by the in-place
    finalisation, so this may run before or after it.)"""
    xp = _xp(state.sum)
    nonempty = state.sum > 0
    safe = xp.where(nonempty, state.sum, xp.ones_like(state.sum))
    return xp.where(nonempty, state.max + xp.log(safe), xp.full_like(state.max, -np.inf))
