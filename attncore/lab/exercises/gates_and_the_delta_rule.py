"""Checkers for the exercises of chapter 19, gates and the delta rule.

Each checker recomputes what it compares with: the reader's step of the gated delta rule,
put through :func:`attncore.testing.check_delta_step`; the delta rule's implicit forgetting from
the expected projection ``E[I - k k^T] = (1 - 1/d) I``, the break-even length of a hybrid
from the sizes of its states and of its KV cache, and a layer with one gate per key
channel from its recurrence, written out here, on seeded random inputs. Hints point at
the method, never at the number.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import Verdict, exercise, real_answer, report_verdict

# ex-delta-forgetting: the width of the memory, and the fraction of the mean left.
FORGET_D, FORGET_FRACTION = 16, 0.5

# ex-delta-break-even: Qwen3-Next-80B-A3B's published sizes (config.json).
LINEAR_LAYERS, LINEAR_VALUE_HEADS, LINEAR_D_K, LINEAR_D_V = 36, 32, 128, 128
ATTENTION_LAYERS, ATTENTION_KV_HEADS, ATTENTION_HEAD_DIM = 12, 2, 256

# ex-delta-channel-gate: the random inputs it is checked on.
CHANNEL_SEEDS, CHANNEL_N, CHANNEL_D_K, CHANNEL_D_V = (0, 1, 2), 9, 5, 3


@exercise("ex-delta-forgetting")
def forgetting(writes) -> Verdict:
    """The number of writes after which the mean reading of an old key is half its value:
    each write multiplies it by E[I - k k^T] = (1 - 1/d) I."""
    writes = real_answer("my_writes", writes)
    factor = 1 - 1 / FORGET_D
    want = math.log(FORGET_FRACTION) / math.log(factor)
    if abs(writes - want) <= 0.01:
        return Verdict(True, "a pair's reading halves in about d ln 2 writes: the delta "
                             "rule keeps a window of recent pairs about as wide as "
                             "the memory.")
    if abs(writes - FORGET_D * math.log(2)) <= 0.01:
        return Verdict(False, "that is the large-d approximation; compute it for this d.")
    if abs(writes - round(want)) < 1e-9 or abs(writes - math.ceil(want)) < 1e-9:
        return Verdict(False, "give m as a real number, to two decimals.")
    return Verdict(False, "take the expectation of one factor I - k k^T over the key, "
                          "then of the product of m independent factors.")


def _state_numbers() -> int:
    return LINEAR_LAYERS * LINEAR_VALUE_HEADS * LINEAR_D_K * LINEAR_D_V


def _cache_numbers_per_token(kv_heads: int = ATTENTION_KV_HEADS) -> int:
    return ATTENTION_LAYERS * 2 * kv_heads * ATTENTION_HEAD_DIM


@exercise("ex-delta-break-even")
def break_even(tokens) -> Verdict:
    """Context length at which the attention layers' KV cache holds as many numbers as
    all the delta-rule layers' states."""
    tokens = real_answer("my_tokens", tokens)
    want = _state_numbers() / _cache_numbers_per_token()
    if abs(tokens - want) <= 0.5:
        return Verdict(True, "past a couple of thousand tokens the cache is what fills "
                             "the memory, even at a quarter of the layers.")
    if abs(tokens - 2 * want) <= 1 or abs(tokens - want / 2) <= 1:
        return Verdict(False, "count keys and values both, once each.")
    if abs(tokens - _state_numbers() / _cache_numbers_per_token(16)) <= 1:
        return Verdict(False, "grouped-query attention caches the key/value heads only.")
    return Verdict(False, "count the state numbers of all 36 recurrent layers, and the "
                          "cache numbers one token adds in all 12 attention layers.")


def _channel_gated_reference(q, k, v, alpha, beta) -> np.ndarray:
    """S_t = S_{t-1} Diag(alpha_t)(I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t,
    with the matrices written out."""
    s = np.zeros((v.shape[1], k.shape[1]))
    out = []
    for t in range(len(q)):
        eye = np.eye(k.shape[1])
        s = s @ np.diag(alpha[t]) @ (eye - beta[t] * np.outer(k[t], k[t])) + \
            beta[t] * np.outer(v[t], k[t])
        out.append(s @ q[t])
    return np.array(out)


def _channel_inputs(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((CHANNEL_N, CHANNEL_D_K))
    k = rng.standard_normal((CHANNEL_N, CHANNEL_D_K))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    v = rng.standard_normal((CHANNEL_N, CHANNEL_D_V))
    alpha = rng.uniform(0.2, 1.0, (CHANNEL_N, CHANNEL_D_K))
    beta = rng.uniform(0.0, 1.0, CHANNEL_N)
    return q, k, v, alpha, beta


@exercise("ex-delta-channel-gate")
def channel_gate(fn: Any) -> Verdict:
    """A function (q, k, v, alpha, beta) -> outputs of the delta rule with one gate per
    key channel, checked against its recurrence and, with equal channels, against
    ac.gated_delta_rule."""
    from attncore import gated_delta_rule

    if not callable(fn):
        return Verdict(False, "my_channel_gated should be a function: replace the line "
                              "with a def.")
    for seed in CHANNEL_SEEDS:
        q, k, v, alpha, beta = _channel_inputs(seed)
        got = np.asarray(fn(q, k, v, alpha, beta), dtype=float)
        if got.shape != (CHANNEL_N, CHANNEL_D_V):
            return Verdict(False, f"expected outputs of shape (n, d_v) = "
                                  f"{(CHANNEL_N, CHANNEL_D_V)}, got {got.shape}.")
        if np.abs(got - _channel_gated_reference(q, k, v, alpha, beta)).max() > 1e-9:
            g = alpha[:, 0]
            same = np.asarray(fn(q, k, v, np.repeat(g[:, None], CHANNEL_D_K, 1), beta),
                              dtype=float)
            if np.abs(same - gated_delta_rule(q, k, v, g, beta)).max() < 1e-9:
                return Verdict(False, "right with equal channels, so the order is off: "
                                      "the gate scales the old memory before the write "
                                      "reads it.")
            return Verdict(False, "S Diag(alpha) scales the columns of S, one per key "
                                  "channel; then read S k_t and write the correction.")
    return Verdict(True, "each channel of the key now forgets at its own rate.")


@exercise("ex-delta-step")
def delta_step(fn: Any) -> Verdict:
    """A reader-written ``my_delta_step(S, q, k, v, g, beta)``, put through
    :func:`attncore.testing.check_delta_step` on fresh inputs."""
    from ...testing import check_delta_step

    if not callable(fn):
        return Verdict(False, f"expected a function my_delta_step(S, q, k, v, g, beta): "
                              f"replace the line my_delta_step = None with a def, got "
                              f"{type(fn).__name__}")
    return report_verdict(check_delta_step(fn),
                          "Your step gates the old memory, reads it along k, writes "
                          "the correction, and does so for every head at once.",
                          call="ac.testing.check_delta_step(my_delta_step)")
