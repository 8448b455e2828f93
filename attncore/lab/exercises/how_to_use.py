"""Checker for the exercise of chapter 0 (how to use this book), which shows how checks work."""

from __future__ import annotations

import numpy as np

from ...attention import scaled_dot_product_attention
from . import Verdict, exercise


@exercise("ex-how-to-use-shape")
def output_shape(shape) -> Verdict:
    """The shape of attention's output for q (6, 8), k (10, 8), v (10, 3)."""
    expected = scaled_dot_product_attention(np.zeros((6, 8)), np.zeros((10, 8)),
                                            np.zeros((10, 3))).shape
    try:
        got = tuple(int(s) for s in shape)
    except TypeError:
        return Verdict(False, f"expected a tuple of integers, got {shape!r}")
    if got == expected:
        return Verdict(True, "One output row per query, as wide as a value row.")
    if len(got) != len(expected):
        return Verdict(False, f"{got} has {len(got)} axes; the output is a matrix.")
    return Verdict(False, "count the rows (one per query?) and the columns (which "
                          "matrix's rows does each output row average?).")
