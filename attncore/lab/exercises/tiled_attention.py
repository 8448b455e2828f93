"""Checkers for the exercises of chapter 7, tiled (flash) attention.

Each checker recomputes what it compares with: the merge with
:func:`attncore.tiled.merge_softmax_states`, the memory budget from the peak-memory formula
``b n (n + d)`` in exact integer arithmetic, the float16 sum by adding in float16. Hints point
at the method, never at the number.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ...tiled import SoftmaxState, finalize_softmax_state, merge_softmax_states
from . import Verdict, exercise, real_answer

# ex-tiled-merge: the two states of the exercise, and the rounding it asks for.
MERGE_A = dict(max=2.0, sum=1.5, out=(3.0, 0.0))
MERGE_B = dict(max=3.0, sum=1.2, out=(0.0, 2.4))
MERGE_TOLERANCE = 1e-4          # "rounded to four decimals"

# ex-tiled-budget: one float16 head, d = 128, 16 GiB.
BUDGET_BYTES = 16 * 2**30
BUDGET_D = 128
BUDGET_BYTES_PER_NUMBER = 2


def _state(spec: dict) -> SoftmaxState:
    return SoftmaxState(np.array([[spec["max"]]]), np.array([[spec["sum"]]]),
                        np.array([spec["out"]]))


@exercise("ex-tiled-merge")
def merge_by_hand(m, l, o, z) -> Verdict:
    """The merged state (m, l, o) of blocks A and B, and the output o / l."""
    merged = merge_softmax_states(_state(MERGE_A), _state(MERGE_B))
    want_o = merged.out[0]
    want_z = finalize_softmax_state(merged)[0]
    m, l = real_answer("m_merged", m), real_answer("l_merged", l)
    o = np.asarray(o, dtype=float).reshape(-1)
    z = np.asarray(z, dtype=float).reshape(-1)
    if o.shape != want_o.shape or z.shape != want_z.shape:
        return Verdict(False, f"o and z are vectors of {want_o.size} numbers, like the blocks' "
                              f"o; got {o.size} and {z.size}.")
    parts = {
        "m": abs(m - merged.max[0, 0]) <= MERGE_TOLERANCE,
        "l": abs(l - merged.sum[0, 0]) <= MERGE_TOLERANCE,
        "o": bool(np.all(np.abs(o - want_o) <= MERGE_TOLERANCE)),
        "o / l": bool(np.all(np.abs(z - want_z) <= MERGE_TOLERANCE)),
    }
    details = tuple(f"{name}: {'right' if ok else 'not yet'}" for name, ok in parts.items())
    if all(parts.values()):
        return Verdict(True, "Block A's state was measured from a maximum that turned out "
                             "not to be the largest, so it shrinks by alpha.", details)
    if not parts["m"]:
        return Verdict(False, "the merged maximum is the maximum over the union of the keys.",
                       details)
    return Verdict(False, "bring both states to the common maximum: multiply each one's sum "
                          "and output by e^(its max - the merged max), then add.", details)


def naive_peak_bytes(n: int, d: int = BUDGET_D,
                     bytes_per_number: int = BUDGET_BYTES_PER_NUMBER) -> int:
    """``b n (n + d)``: the chapter's peak memory of naive attention, one head."""
    return bytes_per_number * n * (n + d)


def largest_fitting_n(budget: int = BUDGET_BYTES, d: int = BUDGET_D,
                      bytes_per_number: int = BUDGET_BYTES_PER_NUMBER) -> int:
    """The largest n with ``b n (n + d) <= budget``, in exact integer arithmetic."""
    # n^2 + d n - budget / b <= 0; the positive root, floored, then checked exactly
    n = (math.isqrt(d * d + 4 * (budget // bytes_per_number)) - d) // 2
    while naive_peak_bytes(n + 1, d, bytes_per_number) <= budget:
        n += 1
    while naive_peak_bytes(n, d, bytes_per_number) > budget:
        n -= 1
    return n


@exercise("ex-tiled-budget")
def memory_budget(n) -> Verdict:
    """The largest sequence length whose naive attention (one float16 head, d = 128)
    fits in 16 GiB."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        return Verdict(False, f"Enter N as an integer (a number of tokens), got {n!r}")
    n = int(n)
    answer = largest_fitting_n()
    if n == answer:
        return Verdict(True, "The score matrix is almost all of it: n^2 dominates d n.")
    if naive_peak_bytes(n) > BUDGET_BYTES:
        return Verdict(False, f"at N = {n:,} the formula asks for "
                              f"{naive_peak_bytes(n) / 2**30:.3f} GiB, more than 16 GiB.")
    return Verdict(False, f"N = {n:,} fits, but so does a longer sequence: find the largest "
                          "N that fits (solve the quadratic, round down, check).")


def float16_stall() -> float:
    """The value at which a float16 running sum of ones stops growing, found by adding."""
    total, one = np.float16(0), np.float16(1)
    while np.float16(total + one) != total:
        total = np.float16(total + one)
    return float(total)


@exercise("ex-tiled-fp16-stall")
def fp16_stall(value) -> Verdict:
    """Where a float16 running sum of terms equal to 1 stops growing."""
    value = real_answer("my_stall", value)
    answer = float16_stall()
    if value == answer:
        return Verdict(True, "From there on the gap between neighbouring float16 numbers is "
                             "2, and x + 1 rounds back to x (ties go to the even neighbour).")
    if value >= np.finfo(np.float16).max:
        return Verdict(False, "that is where float16 overflows; the sum stops growing long "
                              "before. Add ones in np.float16 and watch.")
    if value > answer:
        return Verdict(False, f"{value:g} is never reached: the sum stops growing earlier. "
                              "When does x + 1 round back to x?")
    return Verdict(False, f"{value:g} + 1 is still a float16 number, so the sum keeps "
                          "growing there.")
