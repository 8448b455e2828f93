"""Checkers for the exercises of chapter 14, beyond one device and beyond softmax.

Each checker recomputes what it compares with: the reader's merge of two partial
attention results, put through :func:`attncore.testing.check_merge`; the load imbalance by counting the causal
blocks chunk by chunk, the bytes of ring attention and Ulysses with grouped-query attention
by counting what each rank sends, and the variance of antithetic random features from
the moments of a Gaussian. Hints point at the method, never at the number.
"""

from __future__ import annotations

import math
from typing import Any

from . import Verdict, exercise, real_answer, report_verdict

# ex-beyond-gqa-bytes: query heads, key/value heads, ranks (the width, the length and
# the bytes per number cancel in the ratio, and are given only to count with)
GQA_HEADS, GQA_KV_HEADS, GQA_P, GQA_N, GQA_D, GQA_B = 32, 8, 8, 4096, 128, 2

# ex-beyond-balance: the causal ring on P ranks.
BALANCE_P = 8

# ex-beyond-antithetic: q, k, scale and the number of features (m / 2 antithetic pairs).
VARIANCE_Q, VARIANCE_K, VARIANCE_SCALE, VARIANCE_M = (1.0, 0.0), (0.5, 0.5), 1.0, 64


def _ring_bytes(p: int, n: int, kv_heads: int, d: int, b: int) -> int:
    # P - 1 hops, each carrying this rank's keys and values, n/P rows of kv_heads * d
    return (p - 1) * (n // p) * kv_heads * 2 * d * b


def _ulysses_bytes(p: int, n: int, heads: int, kv_heads: int, d: int, b: int) -> float:
    # four all-to-alls (q and out with all heads, k and v with the key/value heads), each
    # sending all but 1/P of a rank's shard
    return (p - 1) / p * (n // p) * (2 * heads + 2 * kv_heads) * d * b


@exercise("ex-beyond-gqa-bytes")
def gqa_bytes(ratio) -> Verdict:
    """B_ring / B_Ulysses per rank for grouped-query attention."""
    ratio = real_answer("my_ratio", ratio)
    ring = _ring_bytes(GQA_P, GQA_N, GQA_KV_HEADS, GQA_D, GQA_B)
    want = ring / _ulysses_bytes(GQA_P, GQA_N, GQA_HEADS, GQA_KV_HEADS, GQA_D, GQA_B)
    if abs(ratio - want) <= 1e-3 * want:
        return Verdict(True, "fewer key/value heads shrink all of the ring's traffic and "
                             "only part of Ulysses'.")
    if abs(ratio - GQA_P / 2) <= 1e-9:
        return Verdict(False, "that is the ratio with as many key/value heads as query "
                              "heads; here keys and values are smaller.")
    if abs(ratio - ring / _ulysses_bytes(GQA_P, GQA_N, GQA_HEADS, GQA_HEADS,
                                         GQA_D, GQA_B)) <= 1e-3:
        return Verdict(False, "Ulysses exchanges keys and values with the key/value heads "
                              "only.")
    return Verdict(False, "count what leaves one rank: the ring sends its keys and values "
                          "P - 1 times; Ulysses sends all but 1/P of each of the four "
                          "tensors it exchanges, each with its own number of heads.")


def _causal_scores(chunks: list[int]) -> int:
    """Query-key pairs of whole chunk blocks a rank computes under a causal mask, in
    chunks of 1: chunk a meets chunks 0..a."""
    return sum(a + 1 for a in chunks)


@exercise("ex-beyond-balance")
def balance(ratio) -> Verdict:
    """Busiest contiguous rank's scores over a zigzag rank's."""
    ratio = real_answer("my_ratio", ratio)
    p = BALANCE_P
    # contiguous: chunk length 2 (in units of zigzag chunks), so a block is 4 units
    busiest = 4 * _causal_scores([p - 1])
    zigzag = _causal_scores([0, 2 * p - 1])
    want = busiest / zigzag
    if abs(ratio - want) <= 1e-3:
        return Verdict(True, "Zigzag takes the busiest rank's excess and spreads it.")
    if abs(ratio - p) <= 1e-9 or abs(ratio - 2 * p / (p + 1)) <= 1e-3:
        return Verdict(False, "count scores, not blocks: a zigzag block is a quarter of a "
                              "contiguous one.")
    return Verdict(False, "count the scores each rank computes in units of (n / 2P)^2: "
                          "a contiguous block is four of them.")


@exercise("ex-beyond-antithetic")
def antithetic_variance(var) -> Verdict:
    """The variance of the m-feature estimate of exp(s q . k) with the features drawn in
    m / 2 antithetic pairs (w, -w): each pair averages to C cosh(sqrt(s) w . (q + k)), and
    Var cosh(aZ) = (e^(a^2) - 1)^2 / 2 for Z standard normal."""
    var = real_answer("my_variance", var)
    s, m = VARIANCE_SCALE, VARIANCE_M
    qk = sum(a * b for a, b in zip(VARIANCE_Q, VARIANCE_K))
    sq = sum((a + b) ** 2 for a, b in zip(VARIANCE_Q, VARIANCE_K))
    c2 = math.exp(2 * s * qk - s * sq)
    pair = c2 * (math.exp(s * sq) - 1) ** 2 / 2          # variance of one pair's mean
    want = pair / (m // 2)
    independent = math.exp(2 * s * qk) * (math.exp(s * sq) - 1) / m
    if abs(var - want) <= 1e-3 * want:
        return Verdict(True, "pairing removes the odd part of exp(sqrt(s) w . (q + k)), "
                             "which helps little where the variance is large.")
    if abs(var - independent) <= 1e-3 * independent:
        return Verdict(False, "that is the variance of m independent features; the two "
                              "features of a pair are not independent.")
    if abs(var - pair) <= 1e-3 * pair or abs(var - 2 * want) <= 1e-3 * 2 * want:
        return Verdict(False, "the estimate averages m / 2 independent pairs.")
    return Verdict(False, "average the two products of a pair first: it is a hyperbolic "
                          "cosine of a Gaussian; use E[exp(t Z)] = exp(t^2 / 2) for its "
                          "mean and its square.")


@exercise("ex-beyond-merge")
def merge(fn: Any) -> Verdict:
    """A reader-written ``my_merge(out_a, lse_a, out_b, lse_b)``, put through
    :func:`attncore.testing.check_merge` on fresh blocks of keys."""
    from ...testing import check_merge

    if not callable(fn):
        return Verdict(False, f"expected a function my_merge(out_a, lse_a, out_b, lse_b): "
                              f"replace the line my_merge = None with a def, got "
                              f"{type(fn).__name__}")
    return report_verdict(check_merge(fn),
                          "Your merge is attention over the union of the blocks, in "
                          "any order, with huge scores and with empty blocks.",
                          call="ac.testing.check_merge(my_merge)")
