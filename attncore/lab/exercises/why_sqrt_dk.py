"""Checkers for the exercises of chapter 2, why attention divides by sqrt(d_k), and of its
going-further page.

Each checker recomputes what it compares with, from the chapter's formulas and instruments
(:mod:`attncore.lab.scaling`), and its hints point at the method, never at the number.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from ...softmax import softmax
from ..scaling import dot_product_moments, score_gradient_norms, softmax_jacobian
from . import Verdict, exercise, real_answer

# Exercise ex-sqrt-dk-threshold: the d_k scanned, the fraction of gradient that counts.
# (steps of 64, finer than the chapter's table, which therefore does not answer it)
THRESHOLD_D_K = tuple(range(64, 1025, 64))
THRESHOLD_FRACTION = 0.02

# Exercise ex-sqrt-dk-two-keys: the fraction of the largest gradient, and the tolerance.
TWO_KEYS_FRACTION = 0.01
TWO_KEYS_TOLERANCE = 0.01

# Exercise ex-sqrt-dk-mean-dominates: the setting of the exercise (going-further page).
DOMINATES = dict(mean_q=Fraction(1, 2), var_q=Fraction(4), mean_k=Fraction(-2),
                 var_k=Fraction(1))

# Exercise ex-sqrt-dk-kdim: nn.MultiheadAttention for cross-attention from a narrower
# encoder (queries of width EMBED, keys and values of width KDIM), and the tolerance.
KDIM_EMBED, KDIM_HEADS, KDIM = 768, 12, 384
KDIM_REL_TOLERANCE = 0.05


# --------------------------------------------------------------------------------------------

def gradient_ratio(d_k: int) -> float:
    """Median gradient reaching the scores, unscaled over scaled (default sizes and seed)."""
    return (score_gradient_norms(d_k, scaling="none").logits_median
            / score_gradient_norms(d_k, scaling="sqrt").logits_median)


@exercise("ex-sqrt-dk-threshold")
def threshold(d_k) -> Verdict:
    """The smallest d_k = 64 j at which unscaled rows pass < 2% of the scaled gradient."""
    if isinstance(d_k, bool) or not isinstance(d_k, numbers.Integral):
        return Verdict(False, f"Enter d_k as an integer, got {d_k!r}")
    d_k = int(d_k)
    if d_k not in THRESHOLD_D_K:
        return Verdict(False, f"The exercise scans d_k = 64, 128, 192, ..., 1024; {d_k} is "
                              "not one of them")
    ratios: dict[int, float] = {}
    for d in THRESHOLD_D_K:            # ascending: stop at the first d_k below the line
        ratios[d] = gradient_ratio(d)
        if ratios[d] < THRESHOLD_FRACTION:
            break
    answer = max(ratios)
    if d_k not in ratios:
        ratios[d_k] = gradient_ratio(d_k)
    if d_k == answer:
        return Verdict(True, f"d_k = {d_k} is the first where a typical unscaled row passes "
                             f"less than {THRESHOLD_FRACTION:.0%} of the gradient that the "
                             "scaled row passes.")
    if d_k < answer:
        return Verdict(False, f"At d_k = {d_k} the unscaled row still passes "
                              f"{ratios[d_k]:.1%} of the scaled gradient; look further.")
    return Verdict(False, f"At d_k = {d_k} the ratio is {ratios[d_k]:.2%}, below "
                          f"{THRESHOLD_FRACTION:.0%}, but "
                          "is it the first d_k where that happens?")


# --------------------------------------------------------------------------------------------

def two_key_gradient_fraction(gap: float) -> float:
    """||J||_2 of the softmax of the scores (0, gap), as a fraction of its value at gap 0."""
    def norm_j(g: float) -> float:
        p = softmax(np.array([0.0, g]))
        return float(np.linalg.eigvalsh(softmax_jacobian(p)).max())

    return norm_j(gap) / norm_j(0.0)


def two_key_gap() -> float:
    """The gap at which two_key_gradient_fraction falls to TWO_KEYS_FRACTION (bisection)."""
    lo, hi = 0.0, 50.0          # the fraction falls monotonically from 1 towards 0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if two_key_gradient_fraction(mid) > TWO_KEYS_FRACTION else (lo, mid)
    return (lo + hi) / 2


@exercise("ex-sqrt-dk-two-keys")
def two_keys(gap) -> Verdict:
    """The score gap at which a two-key softmax passes 1% of its largest gradient."""
    gap = real_answer("the gap", gap)
    if gap < 0:
        return Verdict(False, "The gap is the larger score minus the smaller one: use a "
                              "number >= 0.")
    truth = two_key_gap()
    if abs(gap - truth) <= TWO_KEYS_TOLERANCE:
        return Verdict(True, "A gap that unscaled scores reach easily at moderate d_k.")
    passed = two_key_gradient_fraction(gap)
    side = "more" if passed > TWO_KEYS_FRACTION else "less"
    return Verdict(False, f"At a gap of {gap:g} the softmax passes {passed:.3%} of its "
                          f"largest gradient, {side} than 1% (the answer must be within "
                          f"{TWO_KEYS_TOLERANCE} of the exact gap).")


# --------------------------------------------------------------------------------------------

def mean_dominates_d_k() -> int:
    """The smallest d_k at which the squared mean of q.k exceeds its variance (exactly)."""
    d_k = 1
    while True:
        m = dot_product_moments(d_k, **DOMINATES)
        if m.mean ** 2 > m.var:
            return d_k
        d_k += 1


@exercise("ex-sqrt-dk-mean-dominates")
def mean_dominates(d_k) -> Verdict:
    """The smallest d_k from which (E[q.k])^2 > var(q.k), for the exercise's components."""
    if isinstance(d_k, bool) or not isinstance(d_k, numbers.Integral):
        return Verdict(False, f"Enter d_k as an integer, got {d_k!r}")
    d_k = int(d_k)
    if d_k < 1:
        return Verdict(False, "d_k counts components: 1 or more.")
    truth = mean_dominates_d_k()
    if d_k == truth:
        return Verdict(True, "From there on the offset d_k mu_q mu_k outgrows the spread: "
                             "the squared mean grows like d_k^2, the variance like d_k.")
    m = dot_product_moments(d_k, **DOMINATES)
    where = "still at most" if m.mean ** 2 <= m.var else "already above"
    return Verdict(False, f"at d_k = {d_k} the squared mean is {float(m.mean ** 2):g} and the "
                          f"variance {float(m.var):g}: the squared mean is {where} the "
                          "variance. The variance of each term q_i k_i has three parts when "
                          "the means are not zero.")


# --------------------------------------------------------------------------------------------

def kdim_scaled_score_variance() -> float:
    """Variance of q.k / sqrt(d_k) when nn.MultiheadAttention(KDIM_EMBED, KDIM_HEADS,
    kdim=KDIM, vdim=KDIM) starts training, queries and keys layer-normalised.

    With kdim != embed_dim PyTorch keeps separate q_proj_weight (embed, embed) and
    k_proj_weight (embed, kdim) and draws each with xavier_uniform_: variance
    2 / (fan_in + fan_out). A component is a sum over the input's width n of x_m W_mj with
    |x|^2 = n, so it has variance n var(W); the theorem multiplies the two.
    """
    import torch

    layer = torch.nn.MultiheadAttention(KDIM_EMBED, KDIM_HEADS, kdim=KDIM, vdim=KDIM)
    variances = []
    for weight in (layer.q_proj_weight, layer.k_proj_weight):
        fan_out, fan_in = weight.shape             # (out, in), as nn.Linear stores it
        variances.append(fan_in * 2.0 / (fan_in + fan_out))
    d_k = KDIM_EMBED // KDIM_HEADS
    return float(dot_product_moments(d_k, var_q=variances[0], var_k=variances[1]).var) / d_k


@exercise("ex-sqrt-dk-kdim")
def kdim(scaled_score_var) -> Verdict:
    """The variance of the scaled scores of nn.MultiheadAttention(768, 12, kdim=384)."""
    yours = real_answer("the variance", scaled_score_var)
    truth = kdim_scaled_score_variance()
    if math.isclose(yours, truth, rel_tol=KDIM_REL_TOLERANCE):
        return Verdict(True, "Glorot's rule gives each matrix the variance of its own shape, "
                             "and the keys' narrower input keeps less of it.")
    if math.isclose(yours, 1.0, rel_tol=KDIM_REL_TOLERANCE) or \
            math.isclose(yours, 0.25, rel_tol=KDIM_REL_TOLERANCE):
        return Verdict(False, "that is the value of a square or a stacked in-projection; here "
                              "the query and key matrices have shapes of their own.")
    return Verdict(False, "find the variance of one entry of each matrix from its shape "
                          "(fan-in and fan-out), then that of one query and one key component "
                          "(each a sum over its own input width), then apply the theorem.")


# --- build it: a stable softmax --------------------------------------------------------------

@exercise("ex-sqrt-dk-stable-softmax")
def stable_softmax(fn) -> Verdict:
    """A reader-written ``my_softmax(x, axis=-1)``, put through the course's softmax
    properties (:func:`attncore.testing.check_softmax`)."""
    from ...testing import check_softmax

    if not callable(fn):
        return Verdict(False, f"expected a function my_softmax(x, axis=-1), got "
                              f"{type(fn).__name__}; replace the line `= None` with a def.")
    report = check_softmax(fn)
    if report.passed:
        return Verdict(True, f"Your softmax has all {len(report.results)} properties the "
                             "course checks: finite at any scale, zeros for an all -inf "
                             "slice, the dtype kept, along every axis.")
    failed = report.failed
    return Verdict(False, f"{len(failed)} of the {len(report.results)} properties failed "
                          f"({', '.join(failed)}). print(check_softmax(my_softmax)) shows "
                          "what went wrong and the small input it went wrong on.")
