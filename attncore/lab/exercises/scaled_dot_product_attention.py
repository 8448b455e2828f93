"""Checkers for the exercises of chapter 4 (scaled dot-product attention, end to end).

Each checker computes what it compares with from first principles (the definition of a Gram
matrix, the attention formula, the course's property suite), so no answer is stored here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import Verdict, exercise

# ex-sdpa-tied-scores: four candidate 3 x 3 score matrices, each asked "which d_k, if any,
# lets tied projections (W_Q = W_K) produce it?". Data of the exercise, not its answer.
TIED_CANDIDATES = (
    [[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 2.0]],
    [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 2.0]],
    [[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0]],
)


def tied_width(scores: Any) -> int | None:
    """The smallest d_k for which tied projections give these (unscaled) scores QQ^T: the
    rank of the matrix if it is a Gram matrix (symmetric, positive semidefinite), else None."""
    s = np.asarray(scores, dtype=float)
    if not np.allclose(s, s.T, rtol=0, atol=1e-12):
        return None
    eigenvalues = np.linalg.eigvalsh(s)
    if eigenvalues.min() < -1e-12:
        return None
    return int((eigenvalues > 1e-12).sum())


@exercise("ex-sdpa-tied-scores")
def tied_scores(widths: Any) -> Verdict:
    """For each candidate matrix, the smallest d_k with which W_Q = W_K produces it, or None."""
    try:
        widths = list(widths)
    except TypeError:
        return Verdict(False, f"expected a list of four entries, got {widths!r}")
    if len(widths) != len(TIED_CANDIDATES):
        return Verdict(False, f"expected {len(TIED_CANDIDATES)} entries, one per matrix, "
                              f"got {len(widths)}")
    details, right = [], True
    for name, yours, scores in zip("abcd", widths, TIED_CANDIDATES):
        truth = tied_width(scores)
        ok = yours is None if truth is None else (
            not isinstance(yours, bool) and isinstance(yours, (int, np.integer))
            and int(yours) == truth)
        right &= ok
        if ok:
            details.append(f"({name}) right")
        elif truth is None:
            details.append(f"({name}) not yet: check every property a tied score matrix "
                           "must have, not only one of them.")
        elif yours is None:
            details.append(f"({name}) not yet: this one can be written as Q Q^T; look for "
                           "its factor.")
        else:
            details.append(f"({name}) not yet: the width d_k must be at least the rank of "
                           "Q Q^T, and the rank is enough.")
    if right:
        return Verdict(True, "A tied score matrix is exactly a Gram matrix: symmetric, "
                             "positive semidefinite, of rank at most d_k.", tuple(details))
    return Verdict(False, "some of the four are not right yet.", tuple(details))


def _as_matrix(answer: Any, shape: tuple[int, int], what: str) -> np.ndarray | str:
    try:
        m = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return f"expected a {shape[0]} x {shape[1]} matrix for {what}, got {answer!r}"
    if m.shape != shape:
        return f"expected a {shape[0]} x {shape[1]} matrix for {what}, got shape {m.shape}"
    if not np.all(np.isfinite(m)):
        return f"{what} has entries that are not finite numbers"
    return m


@exercise("ex-sdpa-prefer-other")
def prefer_each_other(x: Any, w_q: Any, w_k: Any) -> Verdict:
    """Two tokens in R^2 (rows of x) and W_Q != W_K such that each token gives more attention
    weight to the other than to itself (a12 > a11 and a21 > a22): the mutual preference that
    tied projections forbid. One token preferring another is possible with W_Q = W_K too."""
    parts = [_as_matrix(x, (2, 2), "x (one token per row)"),
             _as_matrix(w_q, (2, 2), "W_Q"), _as_matrix(w_k, (2, 2), "W_K")]
    problems = [p for p in parts if isinstance(p, str)]
    if problems:
        return Verdict(False, problems[0])
    x, w_q, w_k = parts
    q, k = x @ w_q, x @ w_k
    weights = np.exp(q @ k.T / math.sqrt(2))
    weights /= weights.sum(axis=1, keepdims=True)
    if np.array_equal(w_q, w_k):
        return Verdict(False, "the exercise asks for W_K different from W_Q: the point is "
                              "what separate projections allow.")
    first = weights[0, 1] > weights[0, 0]
    second = weights[1, 0] > weights[1, 1]
    said = (f"token 1 gives {weights[0, 1]:.3f} to token 2 and {weights[0, 0]:.3f} to "
            f"itself; token 2 gives {weights[1, 0]:.3f} to token 1 and {weights[1, 1]:.3f} "
            "to itself")
    if first and second:
        return Verdict(True, f"each token prefers the other: {said}.")
    if first or second:
        return Verdict(False, f"only one token prefers the other ({said}); that much is "
                              "possible with W_Q = W_K too. Make both queries point more "
                              "towards the other token's key than towards their own.")
    return Verdict(False, f"neither token prefers the other ({said}); make each query point "
                          "more towards the other token's key than towards its own.")


def verdict_from_report(report: Any, check_call: str, what: str) -> Verdict:
    """A :class:`Verdict` from a conformance check's report: the failing properties by name,
    one line per cause (an error that makes several properties fail is one cause, named
    with the others it breaks), and ``check_call``, the line that prints the whole report.
    The report's lines name properties and small inputs, never the right output."""
    if report.passed:
        checked = sum(r.passed for r in report.results)
        return Verdict(True, f"{what} has all {checked} properties the course checks.")
    failed = [r for r in report.results if r.status == "failed"]
    causes = [r for r in failed if not r.detail.startswith("fails with the same error")]
    names = ", ".join(r.name for r in failed)
    if len(causes) == 1 and len(failed) > 1:
        head = f"one cause makes {len(failed)} properties fail ({names})."
    else:
        head = f"{len(failed)} of the properties failed ({names})."
    details = []
    for r in causes[:3]:
        also = [f.name for f in failed
                if f.detail.startswith(f"fails with the same error as {r.name} ")]
        line = f"{r.name}: {r.detail}"
        if also:
            line += f" (the same error breaks {', '.join(also)})"
        details.append(line)
    if len(causes) > 3:
        details.append(f"and {len(causes) - 3} more.")
    details.append(f"The small input each one failed on: {check_call}")
    return Verdict(False, head, tuple(details))


@exercise("ex-sdpa-your-attention")
def your_attention(fn: Any) -> Verdict:
    """A reader-written ``my_attention(q, k, v, mask=None, causal=False)``, put through the
    course's property suite (:func:`attncore.testing.check_attention`)."""
    from ...testing import check_attention

    if not callable(fn):
        return Verdict(False, f"expected a function my_attention(q, k, v, mask=None, "
                              f"causal=False), got {type(fn).__name__}")
    verdict = verdict_from_report(
        check_attention(fn),
        "from attncore.testing import check_attention; "
        "print(check_attention(my_attention))", "Your function")
    if verdict.correct:
        return Verdict(True, verdict.message[:-1] + ", including agreement with "
                                                    "PyTorch's attention.")
    return verdict
