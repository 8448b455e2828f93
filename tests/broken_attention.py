"""Attention written by hand, once correctly and with the mistakes a learner makes, for
testing :func:`attncore.testing.check_attention` (each mistake must be caught, by the right
name). Every function here keeps its inputs' dtype (``/ math.sqrt(d)``: under NumPy 2 a
NumPy float64 scalar such as ``np.sqrt(d)`` would turn float32 scores into float64), except
the one whose mistake that is."""

from __future__ import annotations

import math

import numpy as np


def _tri(n_q, n_k, shift=0):
    return np.tri(n_q, n_k, shift, dtype=bool)


def _softmax_rows(scores):
    m = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(m), m, 0))
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _allowed(mask, causal, n_q, n_k, shift=0):
    if not causal:
        return mask
    tri = _tri(n_q, n_k, shift)
    return tri if mask is None else mask & tri


def correct(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def correct_with_weights(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    w = _softmax_rows(scores)
    return w @ v, w


def scale_by_d(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / q.shape[-1]            # the mistake: d, not sqrt(d)
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def reshape_not_transpose(q, k, v, mask=None, causal=False):
    kt = k.reshape(k.shape[:-2] + (k.shape[-1], k.shape[-2]))   # the mistake: not swapaxes
    scores = q @ kt / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def inverted_mask(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)                 # the mistake: True = hide
    if causal:
        scores = np.where(_tri(*scores.shape[-2:]), scores, -np.inf)
    return _softmax_rows(scores) @ v


def mask_after_softmax(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    w = _softmax_rows(scores)
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        w = w * allowed                                          # the mistake: too late
    return w @ v, w


def causal_sees_next(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:], shift=1)  # the mistake: j <= i + 1
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def causal_misses_itself(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:], shift=-1)  # the mistake: j < i
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def online_softmax_without_rescale(q, k, v, mask=None, causal=False, block_size=16):
    n_q, n_k = q.shape[-2], k.shape[-2]
    allowed = _allowed(mask, causal, n_q, n_k)
    if allowed is not None:
        allowed = np.broadcast_to(allowed, q.shape[:-2] + (n_q, n_k))
    m = np.full(q.shape[:-1] + (1,), -np.inf, dtype=q.dtype)
    l = np.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    o = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for j0 in range(0, n_k, block_size):
        s = q @ np.swapaxes(k[..., j0:j0 + block_size, :], -1, -2) / math.sqrt(q.shape[-1])
        if allowed is not None:
            s = np.where(allowed[..., j0:j0 + block_size], s, -np.inf)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        shift = np.where(np.isfinite(m_new), m_new, 0)
        alpha = np.exp(np.where(np.isfinite(m), m - shift, -np.inf))
        p = np.exp(s - shift)
        l = alpha * l + p.sum(axis=-1, keepdims=True)
        o = o + p @ v[..., j0:j0 + block_size, :]               # the mistake: no alpha * o
        m = m_new
    return np.divide(o, l, out=np.zeros_like(o), where=l > 0)


# --- mistakes that hide on square inputs, on float64, or behind one flag (issue 29) -------

def causal_bottom_right(q, k, v, mask=None, causal=False):
    """The causal mask of a decoder's new tokens against a cache, tril(ones, k=n_k - n_q):
    the same as the course's top-left one when n_q == n_k, and only then."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    n_q, n_k = scores.shape[-2:]
    allowed = _allowed(mask, causal, n_q, n_k, shift=n_k - n_q)      # the mistake
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def causal_shifted_when_not_square(q, k, v, mask=None, causal=False):
    """Right on square inputs; one key too many (j <= i + 1) when n_q != n_k."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    n_q, n_k = scores.shape[-2:]
    allowed = _allowed(mask, causal, n_q, n_k, shift=int(n_q != n_k))   # the mistake
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def float32_answered_in_float64(q, k, v, mask=None, causal=False):
    """Right numbers, wrong dtype: ``np.sqrt(d)`` is a NumPy float64 scalar, which under
    NumPy 2 promotes float32 scores (and so the output) to float64."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])        # the mistake
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def mutates_under_causal(q, k, v, mask=None, causal=False):
    """Scales q in place, but only on the causal branch."""
    if causal:
        q /= math.sqrt(q.shape[-1])                                   # the mistake
        scores = q @ np.swapaxes(k, -1, -2)
    else:
        scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def mutates_without_mask(q, k, v, mask=None, causal=False):
    """Without a mask, centres v in place (and adds its mean back to the output)."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
        return _softmax_rows(scores) @ v
    mean = v.mean(axis=-2, keepdims=True)
    v -= mean                                                        # the mistake
    return _softmax_rows(scores) @ v + mean


def wrong_axis_when_square(q, k, v):
    """Takes no mask and no causal keyword; normalises over the queries (axis -2) when the
    score matrix is square: a transpose mixed up in a way only square inputs let through."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    square = scores.shape[-1] == scores.shape[-2]
    if square:
        scores = np.swapaxes(scores, -1, -2)                         # the mistake
    w = _softmax_rows(scores)
    return (np.swapaxes(w, -1, -2) if square else w) @ v


def wrong_when_d_v_above_3(q, k, v, mask=None, causal=False):
    """Forms the output column by column, for the three columns of a worked example."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    w = _softmax_rows(scores)
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for c in range(min(3, v.shape[-1])):                             # the mistake: 3
        out[..., c] = (w @ v[..., c:c + 1])[..., 0]
    return out


def zeros_when_more_queries_than_keys(q, k, v, mask=None, causal=False):
    """Returns zeros when n_q > n_k (say, from a guard written for a KV cache)."""
    if q.shape[-2] > k.shape[-2]:                                   # the mistake
        return np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    return correct(q, k, v, mask, causal)


# --- five more a learner could write ---------------------------------------------------

def scale_by_sqrt_d_v(q, k, v, mask=None, causal=False):
    """Scales by the width of the values: right whenever d_v == d_k."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(v.shape[-1])     # the mistake
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def causal_upper_triangle(q, k, v, mask=None, causal=False):
    """Builds the causal mask with triu: query i sees keys i.., the future."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        tri = np.triu(np.ones(scores.shape[-2:], dtype=bool))        # the mistake
        mask = tri if mask is None else mask & tri
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return _softmax_rows(scores) @ v


def multiplies_scores_by_mask(q, k, v, mask=None, causal=False):
    """Masks by multiplying the scores by 0, not by setting them to -inf: a masked key
    still gets weight exp(0) / sum."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = scores * allowed                                    # the mistake
    return _softmax_rows(scores) @ v


def causal_replaces_mask(q, k, v, mask=None, causal=False):
    """With causal=True, the causal mask replaces the caller's instead of joining it."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        mask = _tri(*scores.shape[-2:])                              # the mistake
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return _softmax_rows(scores) @ v


def computes_float32_in_float16(q, k, v, mask=None, causal=False):
    """Casts float32 inputs to float16 to halve the memory, and the output back: float32
    in, float32 out, but three significant digits."""
    if q.dtype != np.float32:
        return correct(q, k, v, mask, causal)
    q, k, v = (x.astype(np.float16) for x in (q, k, v))              # the mistake
    return correct(q, k, v, mask, causal).astype(np.float32)


def float16_answered_in_float32(q, k, v, mask=None, causal=False):
    """Claims half precision, but answers float16 inputs in float32."""
    dtype = np.float32 if q.dtype == np.float16 else q.dtype          # the mistake
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    return correct(q, k, v, mask, causal)


# --- three an outside attack found check_attention passing (issue 37) -------------------------

def softmax_without_max_subtraction(q, k, v, mask=None, causal=False):
    """exp of the raw scores: the same numbers while they are small, inf / inf = NaN once
    a score passes about 709 (float64's exp overflows)."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores)                                           # the mistake
        total = e.sum(axis=-1, keepdims=True)
        return np.divide(e, total, out=np.zeros_like(e), where=total > 0) @ v


def computes_in_float32(q, k, v, mask=None, causal=False):
    """Computes float64 inputs in float32 and casts the output back: float64 in, float64
    out, but seven significant digits."""
    dtype = q.dtype
    q, k, v = (x.astype(np.float32) for x in (q, k, v))              # the mistake
    return correct(q, k, v, mask, causal).astype(dtype)


def dropout_without_rescaling(q, k, v, mask=None, causal=False, dropout_p=0.0):
    """Drops each weight with probability dropout_p but does not divide the others by
    1 - dropout_p: every output's expectation shrinks by 1 - dropout_p."""
    out, w = correct_with_weights(q, k, v, mask, causal)
    if dropout_p == 0:
        return out
    keep = np.random.default_rng().random(w.shape) >= dropout_p
    return (w * keep) @ v                                            # the mistake


def dropout_correct(q, k, v, mask=None, causal=False, dropout_p=0.0):
    """Dropout on the weights, rescaled: what the mistake above should be."""
    out, w = correct_with_weights(q, k, v, mask, causal)
    if dropout_p == 0:
        return out
    keep = np.random.default_rng().random(w.shape) >= dropout_p
    return (w * keep / (1 - dropout_p)) @ v


def transpose_with_dot_t(q, k, v, mask=None, causal=False):
    """``k.T``, right for one sequence only: on batched inputs it reverses every axis, and
    the product raises (one bug that every property runs into)."""
    scores = q @ k.T / math.sqrt(q.shape[-1])                         # the mistake
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v
