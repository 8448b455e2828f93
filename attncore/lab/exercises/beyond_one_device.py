"""Checkers for the exercises of chapter 12, beyond one device and beyond softmax.

Each checker recomputes what it compares with: the bytes from the chapter's counting
formulas (which the chapter checks against bytes counted in real runs), the load
imbalance by counting the causal blocks chunk by chunk, and the variance of the random
features from the formula the chapter proves. Hints point at the method, never at the
number.
"""

from __future__ import annotations

import math

from . import Verdict, exercise, real_answer

# ex-beyond-bytes: one attention layer's forward pass, sharded over P ranks.
BYTES_P, BYTES_N, BYTES_HEADS, BYTES_D, BYTES_PER_NUMBER = 8, 131_072, 32, 128, 2
GIB = 2**30

# ex-beyond-balance: the causal ring on P ranks.
BALANCE_P = 8

# ex-beyond-variance: q, k, scale and the number of features.
VARIANCE_Q, VARIANCE_K, VARIANCE_SCALE, VARIANCE_M = (1.0, 0.0), (0.5, 0.5), 1.0, 64


def _ring_bytes(p: int, n: int, heads: int, d: int, b: int) -> int:
    # P - 1 hops, each carrying this rank's keys and values, n/P rows of heads * d
    return (p - 1) * (n // p) * heads * 2 * d * b


def _ulysses_bytes(p: int, n: int, heads: int, d: int, b: int) -> int:
    # four all-to-alls (q, k, v, out), each sending all but 1/P of a shard
    return 4 * (p - 1) * (n // p) * heads * d * b // p


@exercise("ex-beyond-bytes")
def bytes_per_rank(ring_gib, ulysses_gib) -> Verdict:
    """GiB each rank sends in one forward pass: ring, then Ulysses."""
    ring = real_answer("my_ring_gib", ring_gib)
    uly = real_answer("my_ulysses_gib", ulysses_gib)
    args = (BYTES_P, BYTES_N, BYTES_HEADS, BYTES_D, BYTES_PER_NUMBER)
    want = (_ring_bytes(*args) / GIB, _ulysses_bytes(*args) / GIB)
    ok = [abs(x - w) <= 1e-3 * w for x, w in zip((ring, uly), want)]
    details = (f"ring: {'right' if ok[0] else 'not yet'}",
               f"Ulysses: {'right' if ok[1] else 'not yet'}")
    if all(ok):
        return Verdict(True, "The ring sends P / 2 times as much as Ulysses.", details)
    return Verdict(False, "count what leaves one rank: the ring sends its keys and values "
                          "P - 1 times; Ulysses sends all but 1/P of q, k, v and the "
                          "output once each. Two bytes per bfloat16 number.", details)


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


@exercise("ex-beyond-variance")
def variance(var) -> Verdict:
    """The variance of the m-feature estimate of exp(s q . k)."""
    var = real_answer("my_variance", var)
    s, m = VARIANCE_SCALE, VARIANCE_M
    qk = sum(a * b for a, b in zip(VARIANCE_Q, VARIANCE_K))
    sq = sum((a + b) ** 2 for a, b in zip(VARIANCE_Q, VARIANCE_K))
    want = math.exp(2 * s * qk) * (math.exp(s * sq) - 1) / m
    if abs(var - want) <= 1e-3 * want:
        return Verdict(True, "The variance grows like exp(s |q + k|^2): large, aligned "
                             "queries and keys need many features.")
    if abs(var - want * m) <= 1e-3 * want * m:
        return Verdict(False, "that is the variance of one feature; the estimate averages "
                              "m of them.")
    return Verdict(False, "use E[exp(w . x)] = exp(|x|^2 / 2) for the second moment of one "
                          "feature, then subtract the square of its mean and divide by m.")
