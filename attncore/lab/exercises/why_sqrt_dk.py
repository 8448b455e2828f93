"""Checkers for the exercises of chapter 2, why attention divides by sqrt(d_k).

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

# Exercise ex-sqrt-dk-general-moments: the setting of the exercise.
# (none of the settings the chapter's table prints before it)
GENERAL = dict(d_k=32, mean_q=Fraction(1, 2), var_q=Fraction(4), mean_k=Fraction(-2),
               var_k=Fraction(1))

# Exercise ex-sqrt-dk-gpt2-init: GPT-2 XL's width, GPT-2's weight standard deviation.
GPT2_D_MODEL, GPT2_HEADS, GPT2_STD = 1600, 25, 0.02
GPT2_REL_TOLERANCE = 0.05


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

@exercise("ex-sqrt-dk-general-moments")
def general_moments(mean, var, second_moment) -> Verdict:
    """E[q.k], var(q.k) and E[(q.k)^2] for the exercise's means and variances."""
    truth = dot_product_moments(**GENERAL)
    hints = {
        "E[q.k]": "the mean of a sum is the sum of the means, and q_i, k_i are "
                  "independent.",
        "var(q.k)": "the terms are uncorrelated; each is a product of independent "
                    "variables with nonzero means (three terms).",
        "E[(q.k)^2]": "the second moment is the variance plus the squared mean.",
    }
    parts = {"E[q.k]": (mean, truth.mean), "var(q.k)": (var, truth.var),
             "E[(q.k)^2]": (second_moment, truth.second_moment)}
    details, all_right = [], True
    for name, (yours, exact) in parts.items():
        right = math.isclose(real_answer(name, yours), float(exact), rel_tol=1e-9, abs_tol=1e-9)
        all_right &= right
        details.append(f"{name}: right" if right else f"{name}: not yet; {hints[name]}")
    if all_right:
        return Verdict(True, "All three moments agree with the general theorem.",
                       tuple(details))
    return Verdict(False, "Some of the three moments differ from the general theorem.",
                   tuple(details))


# --------------------------------------------------------------------------------------------

def gpt2_scaled_score_variance() -> float:
    """Variance of q.k / sqrt(d_k) at GPT-2 XL's initialisation, from the theorem.

    With layer-normalised tokens (|x|^2 = d_model) and independent N(0, std^2) weights, a
    query or key component has variance d_model std^2, and the theorem gives the scores.
    """
    d_k = GPT2_D_MODEL // GPT2_HEADS
    component_var = GPT2_D_MODEL * GPT2_STD ** 2
    return dot_product_moments(d_k, var_q=component_var, var_k=component_var).var / d_k


@exercise("ex-sqrt-dk-gpt2-init")
def gpt2_init(scaled_score_var) -> Verdict:
    """The variance of the scaled scores at GPT-2 XL's initialisation."""
    yours = real_answer("the variance", scaled_score_var)
    truth = gpt2_scaled_score_variance()
    if math.isclose(yours, truth, rel_tol=GPT2_REL_TOLERANCE):
        return Verdict(True, "The scale removes d_k; the initialisation sets the constant.")
    if math.isclose(yours, 1.0, rel_tol=GPT2_REL_TOLERANCE):
        return Verdict(False, "A variance of 1 is what a square Glorot initialisation gives; "
                              "GPT-2 draws its weights with a fixed standard deviation instead.")
    return Verdict(False, "First find the variance of one query component, a sum of "
                          "d_model terms x_m W_mj, then apply the theorem to q . k and "
                          "divide by d_k.")
