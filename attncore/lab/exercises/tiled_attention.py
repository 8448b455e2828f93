"""Checkers for the exercises of chapter 7, tiled (flash) attention.

Each checker recomputes what it compares with: the merge with
:func:`attncore.tiled.merge_softmax_states`, the masked block loop with the reference
:func:`attncore.attention.scaled_dot_product_attention`, the memory budget from the
peak-memory formula ``b h n (n + d)`` in exact integer arithmetic, the float16 sum by adding
in float16. Hints point
at the method, never at the number.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ...attention import scaled_dot_product_attention
from ...tiled import SoftmaxState, finalize_softmax_state, merge_softmax_states
from . import Verdict, exercise, real_answer

# ex-tiled-merge: the two states of the exercise, and the rounding it asks for.
MERGE_A = dict(max=2.0, sum=1.5, out=(3.0, 0.0))
MERGE_B = dict(max=3.0, sum=1.2, out=(0.0, 2.4))
MERGE_TOLERANCE = 1e-4          # "rounded to four decimals"

# ex-tiled-budget: float16 heads of d = 128, a sequence of 32,768 tokens, 80 GiB: the
# formula inverted for the number of heads rather than solved for the length.
BUDGET_BYTES = 80 * 2**30
BUDGET_D = 128
BUDGET_BYTES_PER_NUMBER = 2
BUDGET_TOKENS = 32_768


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


def largest_fitting_heads(budget: int = BUDGET_BYTES, n: int = BUDGET_TOKENS,
                          d: int = BUDGET_D,
                          bytes_per_number: int = BUDGET_BYTES_PER_NUMBER) -> int:
    """The largest h with ``b h n (n + d) <= budget``, in exact integer arithmetic."""
    return budget // naive_peak_bytes(n, d, bytes_per_number)


@exercise("ex-tiled-budget")
def memory_budget(heads) -> Verdict:
    """The most float16 heads (d = 128) whose naive attention over 32,768 tokens fits in
    80 GiB at once."""
    if isinstance(heads, bool) or not isinstance(heads, numbers.Integral):
        return Verdict(False, f"Enter h as an integer (a number of heads), got {heads!r}")
    heads = int(heads)
    answer = largest_fitting_heads()
    per_head = naive_peak_bytes(BUDGET_TOKENS)
    if heads == answer:
        return Verdict(True, "Each head needs its own n x n scores: the budget divides by "
                             "the heads, the length stays.")
    if heads * per_head > BUDGET_BYTES:
        return Verdict(False, f"{heads} heads ask for {heads * per_head / 2**30:.2f} GiB, "
                              "more than 80 GiB: round down, a head is not divisible.")
    return Verdict(False, f"{heads} heads fit, but so do more: the memory is linear in h, so "
                          "divide the budget by one head's peak and round down.")


STALL_KEYS = 6000
"""How many keys the float16-stall exercise adds."""


def float16_stall() -> float:
    """The value at which a float16 running sum of ones stops growing, found by adding."""
    total, one = np.float16(0), np.float16(1)
    while np.float16(total + one) != total:
        total = np.float16(total + one)
    return float(total)


@exercise("ex-tiled-fp16-stall")
def fp16_stall(value) -> Verdict:
    """The fraction of the true sum that a float16 running sum of 6,000 ones holds."""
    value = real_answer("my_fraction", value)
    answer = float16_stall() / STALL_KEYS
    if abs(value - answer) < 1e-3:
        return Verdict(True, "The sum stops growing long before the last key: from there on "
                             "the gap between neighbouring float16 numbers is 2, and x + 1 "
                             "rounds back to x (ties go to the even neighbour).")
    if abs(value - 1) < 1e-3:
        return Verdict(False, "that is the exact sum; in float16 the running sum stops "
                              "growing before the last key. Add ones in np.float16 and watch.")
    if value > 1:
        return Verdict(False, "a sum of positive terms that stops growing cannot end above "
                              "the true sum.")
    if value <= 0:
        return Verdict(False, "the first 1,000 additions are exact, so the fraction is "
                              "positive.")
    return Verdict(False, "not quite: find the value where x + 1 == x in np.float16, then "
                          "divide by the number of keys.")

def _masked_block_cases() -> list[tuple[str, dict]]:
    """Seeded inputs for ex-tiled-masked-block: one query whose first block of keys is
    masked, one that sees no key, one that sees only the last key, and random rows."""
    rng = np.random.default_rng(11)
    n_q, n_k, d = 6, 21, 8
    q, k = rng.standard_normal((n_q, d)), rng.standard_normal((n_k, d))
    v = rng.standard_normal((n_k, 3))
    mask = rng.random((n_q, n_k)) > 0.3
    mask[0, :8] = False             # left padding: the first two blocks of 4 are masked
    mask[1] = False                 # a query that may see nothing
    mask[2] = False
    mask[2, -1] = True              # only the last key, in a short last block
    shapes = f"q {q.shape}, k {k.shape}, v {v.shape}, mask {mask.shape}"
    return [(f"{shapes}, blocks of {b}", dict(q=q, k=k, v=v, mask=mask, block_size=b))
            for b in (4, 5, 21)]


@exercise("ex-tiled-masked-block")
def masked_block(fn) -> Verdict:
    """The reader's block loop with a mask, against the reference on seeded inputs."""
    if not callable(fn):
        return Verdict(False, "expected a function my_masked_tiled(q, k, v, mask, "
                              f"block_size), got {type(fn).__name__}")
    for name, case in _masked_block_cases():
        want = scaled_dot_product_attention(case["q"], case["k"], case["v"], mask=case["mask"])
        with np.errstate(all="ignore"):
            try:
                got = fn(**{key: (a.copy() if isinstance(a, np.ndarray) else a)
                            for key, a in case.items()})
            except Exception as err:             # the reader's code: report, do not crash
                return Verdict(False, f"calling my_masked_tiled with {name} raised "
                                      f"{type(err).__name__}: {err}")
            got = np.asarray(got, dtype=float)
        if got.shape != want.shape:
            return Verdict(False, f"expected one output row per query, shape {want.shape}, "
                                  f"got {got.shape} ({name})")
        bad = ~np.isclose(got, want, rtol=1e-10, atol=1e-12).all(axis=1)
        if bad[0]:
            return Verdict(False, f"the query whose first keys are all masked is wrong "
                                  f"({name}): follow its running state through its first "
                                  "block.")
        if bad.any() and np.flatnonzero(bad).tolist() == [1]:
            return Verdict(False, "every row is right except the query that may see no "
                                  "key: its output should be zeros, as the reference "
                                  "returns, not 0 / 0.")
        if bad.any():
            return Verdict(False, f"rows {np.flatnonzero(bad).tolist()} differ from "
                                  f"scaled_dot_product_attention with the mask ({name}); "
                                  "check the mask and the rescaling by alpha.")
    return Verdict(True, "A block of masked keys leaves the state empty, whatever block it "
                         "is, and a query with no key gets zeros.")
