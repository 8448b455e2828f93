"""Attention written by hand, once correctly and with six classic mistakes, for testing
:func:`attncore.testing.check_attention` (each mistake must be caught, by the right name)."""

from __future__ import annotations

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
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def correct_with_weights(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
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
    scores = q @ kt / np.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def inverted_mask(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)                 # the mistake: True = hide
    if causal:
        scores = np.where(_tri(*scores.shape[-2:]), scores, -np.inf)
    return _softmax_rows(scores) @ v


def mask_after_softmax(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    w = _softmax_rows(scores)
    allowed = _allowed(mask, causal, *scores.shape[-2:])
    if allowed is not None:
        w = w * allowed                                          # the mistake: too late
    return w @ v, w


def causal_sees_next(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:], shift=1)  # the mistake: j <= i + 1
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def causal_misses_itself(q, k, v, mask=None, causal=False):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    allowed = _allowed(mask, causal, *scores.shape[-2:], shift=-1)  # the mistake: j < i
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return _softmax_rows(scores) @ v


def online_softmax_without_rescale(q, k, v, mask=None, causal=False, block_size=16):
    n_q, n_k = q.shape[-2], k.shape[-2]
    allowed = _allowed(mask, causal, n_q, n_k)
    if allowed is not None:
        allowed = np.broadcast_to(allowed, q.shape[:-2] + (n_q, n_k))
    m = np.full(q.shape[:-1] + (1,), -np.inf)
    l = np.zeros(q.shape[:-1] + (1,))
    o = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for j0 in range(0, n_k, block_size):
        s = q @ np.swapaxes(k[..., j0:j0 + block_size, :], -1, -2) / np.sqrt(q.shape[-1])
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
