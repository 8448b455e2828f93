"""Checkers for the exercises of chapter 9, the backward pass of attention.

Each checker recomputes what it compares with: the gradients of the worked row by torch
autograd (:func:`attncore.lab.autograd_reference.attention_autograd`, no formula of the
chapter), the gradients a backward pass without the row-sum term gets wrong by running such
a pass against :func:`attncore.attention_backward`, and the flops of the causal tiled
backward pass by walking its block loop; the reader's own tiled backward pass goes through
:func:`attncore.testing.check_attention_backward`. Hints point at the method, never at the
number.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ...backward import attention_backward
from ..autograd_reference import attention_autograd
from . import Verdict, exercise

# ex-backward-one-row: one query, three keys, scale 1.
ONE_ROW = dict(q=[[math.log(2.0), 0.0]],
               k=[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]],
               v=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
               d_out=[[1.0, -1.0]], scale=1.0)
ONE_ROW_TOLERANCE = 1e-4

# ex-backward-causal-flops: one head, n queries and keys, blocks of B keys, width d.
CAUSAL = dict(n=4096, block_size=128, d=64)
GRADIENT_NAMES = ("dq", "dk", "dv")


def _vector(name: str, value, size: int) -> np.ndarray:
    x = np.asarray(value, dtype=float).reshape(-1)
    if x.size != size:
        raise ValueError(f"{name} should hold {size} numbers, got {x.size}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} should hold finite numbers")
    return x


def one_row_gradients():
    """``(d_s, d_q)`` of the worked row, by torch autograd."""
    data = {n: np.array(x) for n, x in ONE_ROW.items() if n != "scale"}
    ref = attention_autograd(data["q"], data["k"], data["v"], data["d_out"],
                             scale=ONE_ROW["scale"])
    return ref.d_s[0], ref.d_q[0]


@exercise("ex-backward-one-row")
def one_row(ds, dq) -> Verdict:
    """The gradient of the scores and of the query for one row, by hand."""
    want_ds, want_dq = one_row_gradients()
    ds = _vector("my_ds", ds, want_ds.size)
    dq = _vector("my_dq", dq, want_dq.size)
    parts = {"dS": bool(np.abs(ds - want_ds).max() <= ONE_ROW_TOLERANCE),
             "dq": bool(np.abs(dq - want_dq).max() <= ONE_ROW_TOLERANCE)}
    details = tuple(f"{name}: {'right' if ok else 'not yet'}" for name, ok in parts.items())
    if all(parts.values()):
        return Verdict(True, "The entries of dS sum to 0, as every row of dS does.", details)
    if not parts["dS"] and abs(ds.sum()) > ONE_ROW_TOLERANCE:
        return Verdict(False, "the entries of your dS do not sum to 0, and a row of dS "
                              "always does: check the row-sum term D = sum_j A_j dA_j.",
                       details)
    if not parts["dS"]:
        return Verdict(False, "find A = softmax(s) first (the exponentials of the scores "
                              "are simple numbers here), then dA_j = dO . v_j.", details)
    return Verdict(False, "dq = scale * sum_j dS_j k_j, a combination of the key rows; "
                          "here the scale is 1.", details)


def wrong_gradients_without_row_sum(seed: int = 0) -> set[str]:
    """Which of dq, dk, dv a backward pass with ``dS = A * dA`` gets wrong, by running it."""
    rng = np.random.default_rng(seed)
    q, k, v, d_out = (rng.standard_normal((5, 3)) for _ in range(4))
    scale = 1 / math.sqrt(3)
    a = np.exp(scale * q @ k.T)
    a /= a.sum(axis=1, keepdims=True)
    ds = a * (d_out @ v.T)                               # the row-sum term forgotten
    buggy = {"dq": scale * ds @ k, "dk": scale * ds.T @ q, "dv": a.T @ d_out}
    right = dict(zip(GRADIENT_NAMES, attention_backward(q, k, v, d_out)))
    return {n for n in GRADIENT_NAMES if np.abs(buggy[n] - right[n]).max() > 1e-9}


@exercise("ex-backward-missing-term")
def missing_term(names) -> Verdict:
    """The gradients that come out wrong when the row-sum term is forgotten."""
    if isinstance(names, str):
        names = [names]
    given = {str(n).strip().lower() for n in names}
    unknown = given - set(GRADIENT_NAMES)
    if unknown:
        return Verdict(False, f"name the gradients as {', '.join(GRADIENT_NAMES)}; got "
                              f"{', '.join(sorted(unknown))}.")
    want = wrong_gradients_without_row_sum()
    if given == want:
        return Verdict(True, "Only what is computed from dS goes wrong; dV is computed "
                             "before the softmax's Jacobian enters.")
    if given > want:
        return Verdict(False, "one of the gradients you named does not depend on dS: "
                              "follow each formula back to what it is computed from.")
    return Verdict(False, "a gradient computed from dS is missing from your answer.")


def causal_tiled_backward_flops(n: int = CAUSAL["n"], block_size: int = CAUSAL["block_size"],
                                d: int = CAUSAL["d"]) -> int:
    """Matrix-product flops of the causal tiled backward pass, block by block: for the key
    block starting at ``j0`` only the query rows ``i >= j0`` take part, in five products of
    ``2 * rows * b * d`` flops each (``d_k = d_v = d``)."""
    total = 0
    for j0 in range(0, n, block_size):
        b = min(block_size, n - j0)
        rows = n - j0
        total += 5 * 2 * rows * b * d
    return total


@exercise("ex-backward-causal-flops")
def causal_flops(flops) -> Verdict:
    """The matrix-product flops of the causal tiled backward pass at the exercise's size."""
    if isinstance(flops, bool) or not isinstance(flops, numbers.Real) or \
            not math.isfinite(flops):
        return Verdict(False, f"enter a number of flops, got {flops!r}")
    want = causal_tiled_backward_flops()
    n, d = CAUSAL["n"], CAUSAL["d"]
    if flops == want:
        return Verdict(True, f"That is {want / (10 * d * n * n):.4f} of the non-causal "
                             "count: a little more than half, for the diagonal blocks.")
    if flops == 10 * d * n * n:
        return Verdict(False, "that is the count without causal masking: with "
                              "causal=True the loop skips the query rows above each block.")
    if flops == 5 * d * n * n:
        return Verdict(False, "close: exactly half misses the diagonal blocks, whose rows "
                              "are all multiplied although some of their pairs are masked.")
    return Verdict(False, "sum over the key blocks: the block starting at key j0 meets "
                          "n - j0 query rows, in five products of 2 * rows * B * d flops.")


@exercise("ex-backward-tiled")
def tiled_backward(fn) -> Verdict:
    """A reader-written ``my_attention_backward(q, k, v, d_out, causal=False)``, put
    through :func:`attncore.testing.check_attention_backward` (autograd as the reference)."""
    from ...testing import check_attention_backward

    if not callable(fn):
        return Verdict(False, f"expected a function my_attention_backward(q, k, v, d_out, "
                              f"causal=False), got {type(fn).__name__}")
    report = check_attention_backward(fn)
    if report.passed:
        return Verdict(True, f"Your backward pass has all {len(report.results)} properties "
                             "the course checks, including agreement with torch's "
                             "autograd, causal or not.")
    failed = report.failed
    return Verdict(False, f"{len(failed)} of the properties failed ({', '.join(failed)}). "
                          "print(ac.testing.check_attention_backward(my_attention_backward)) "
                          "shows the small input each one failed on.")
