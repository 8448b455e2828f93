"""Checkers for the exercises of the positions chapter (sinusoids and RoPE)."""

from __future__ import annotations

import numpy as np

from ...positions import position_frequencies, sinusoidal_positions
from . import Verdict, exercise


@exercise("ex-positions-offset-matrix")
def offset_matrix(offset_matrix) -> Verdict:
    """The reader's ``offset_matrix(k, d)``: a ``(d, d)`` matrix ``T`` with
    ``PE[p + k] = PE[p] @ T`` for every position ``p`` (sinusoidal, base 10000)."""
    if not callable(offset_matrix):
        return Verdict(False, f"expected a function offset_matrix(k, d), got "
                              f"{type(offset_matrix).__name__}")
    n = 50
    for d in (2, 8, 16):
        for k in (0, 1, 3, 25):
            t = np.asarray(offset_matrix(k, d), dtype=np.float64)
            if t.shape != (d, d):
                return Verdict(False, f"offset_matrix({k}, {d}) has shape {t.shape}; T maps "
                                      f"a row of width d to a row of width d.")
            pe = sinusoidal_positions(n + k, d)
            gap = float(np.abs(pe[:n] @ t - pe[k:]).max())
            if not gap < 1e-9:
                # PE[p] @ T landed k places the wrong way, or nowhere in particular
                wrong_way = k and np.abs(pe[k:] @ t - pe[:n]).max() < 1e-9
                hint = ("it moves every position k places back instead of forward: check "
                        "the sign of the sine terms" if wrong_way else
                        "work out one (sin, cos) pair on paper with the angle-addition "
                        "formulas, then place one 2 x 2 block per frequency")
                return Verdict(False, f"PE[p] @ offset_matrix({k}, {d}) differs from "
                                      f"PE[p + {k}] by up to {gap:.2g}; {hint}.")
    return Verdict(True, "One block-diagonal matrix per offset, the same for every "
                         "position: an offset is a rotation of each (sin, cos) pair.")


# ex-positions-ntk-base: a head width and a stretch other than the chapter's own example
# (d_head = 128, s = 4), so that the chapter's printed base does not answer it
NTK_D, NTK_BASE, NTK_STRETCH = 64, 10000.0, 8.0


@exercise("ex-positions-ntk-base")
def ntk_base(new_base) -> Verdict:
    """The base with which RoPE's slowest pair (d = 64) turns 8 times as slowly as with
    base 10000, so that 8 times as many positions span the same largest angle."""
    d, base, stretch = NTK_D, NTK_BASE, NTK_STRETCH
    try:
        new_base = float(new_base)
    except (TypeError, ValueError):
        return Verdict(False, f"expected a number, got {new_base!r}")
    if not np.isfinite(new_base) or new_base <= 1:
        return Verdict(False, "a RoPE base is a finite number greater than 1.")
    slowest_old = position_frequencies(d, base=base)[-1]
    slowest_new = position_frequencies(d, base=new_base)[-1]
    ratio = slowest_old / slowest_new
    if abs(ratio / stretch - 1) < 1e-3:
        fastest = position_frequencies(d, base=new_base)[0]
        return Verdict(True, f"The slowest pair now turns {ratio:.3f} times as slowly, "
                             f"while the fastest still turns {fastest:.0f} radian per "
                             f"position: a new base stretches the slow pairs, not the fast.")
    return Verdict(False, f"with this base the slowest pair turns {ratio:.3f} times as "
                          f"slowly as with base 10000, not {stretch:.0f} times; its "
                          f"frequency is base ** (-(d - 2) / d), not base ** -1.")
