"""Checkers for the exercises of chapter 4 (scaled dot-product attention, end to end).

Each checker computes what it compares with from first principles (the attention formula,
the cost of a matrix product), so no answer is stored here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..view_figures import matmul_flops
from . import Verdict, exercise

# GPT-3's published sizes (Brown et al., 2020): data of the exercise, not its answer.
GPT3_D_MODEL = 12288
GPT3_HEADS = 96


def _attention_by_formula(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(q k^T / sqrt(d_k)) v, written out: the definition the chapter states."""
    scores = q @ k.T / math.sqrt(q.shape[1])
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights @ v


@exercise("ex-sdpa-by-hand")
def third_output(y3: Any) -> Verdict:
    """y_3 for Q = K = V = (0, 1, 2)^T, to four decimals."""
    x = np.arange(3.0)[:, None]
    truth = _attention_by_formula(x, x, x)[2, 0]
    try:
        value = float(y3)
    except (TypeError, ValueError):
        return Verdict(False, f"expected one number, got {y3!r}")
    if abs(value - truth) < 5e-5:
        return Verdict(True, "The largest key takes most of the weight, so y_3 is close "
                             "to the largest value.")
    if not x.min() <= value <= x.max():
        return Verdict(False, f"{value} is outside [0, 2], the range of the values; an "
                              "average of the values cannot leave it.")
    return Verdict(False, f"{value} is not y_3 to four decimals. Check the scores of query "
                          "3, then their exponentials and the row sum.")


def _gpt3_costs(n: int) -> tuple[int, int]:
    """FLOPs of one GPT-3 layer at context n: (four projections, Q K^T and A V)."""
    d_head = GPT3_D_MODEL // GPT3_HEADS
    projections = 4 * matmul_flops(n, GPT3_D_MODEL, GPT3_D_MODEL)
    quadratic = GPT3_HEADS * (matmul_flops(n, d_head, n) + matmul_flops(n, n, d_head))
    return projections, quadratic


@exercise("ex-sdpa-crossing")
def crossing_length(n: Any) -> Verdict:
    """The context length at which the quadratic part costs as much as the projections."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        return Verdict(False, f"expected a whole number of tokens, got {n!r}")
    projections, quadratic = _gpt3_costs(int(n))
    if projections == quadratic:
        return Verdict(True, "At this length the two costs are equal; beyond it the "
                             "quadratic part dominates.")
    return Verdict(False, f"at N = {int(n)} the quadratic part costs "
                          f"{quadratic / projections:.3f} times the projections; set the two "
                          "costs equal and solve for N.")


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


@exercise("ex-sdpa-your-attention")
def your_attention(fn: Any) -> Verdict:
    """A reader-written ``my_attention(q, k, v, mask=None, causal=False)``, put through the
    course's property suite (:func:`attncore.testing.check_attention`)."""
    from ...testing import check_attention

    if not callable(fn):
        return Verdict(False, f"expected a function my_attention(q, k, v, mask=None, "
                              f"causal=False), got {type(fn).__name__}")
    report = check_attention(fn)
    if report.passed:
        checked = sum(r.passed for r in report.results)       # (dropout: not declared)
        return Verdict(True, f"your function has all {checked} properties the "
                             "course checks, including agreement with PyTorch's attention.")
    failed = report.failed
    return Verdict(False, f"{len(failed)} of the properties failed ({', '.join(failed)}). "
                          "print(ac.testing.check_attention(my_attention)) shows the small "
                          "input each one failed on.")
