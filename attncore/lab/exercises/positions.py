"""Checkers for the exercises of the positions chapter (order, learned and sinusoidal positions)."""

from __future__ import annotations

import itertools

import numpy as np

from ...positions import sinusoidal_positions
from . import Verdict, exercise


def half_layout(pe: np.ndarray) -> np.ndarray:
    """The sinusoidal encoding ``(..., d)`` laid out as all its sines, then all its cosines.

    Feature ``i`` holds ``sin(p omega_i)`` and feature ``i + d/2`` holds ``cos(p omega_i)``,
    for ``i < d/2``: the same numbers as :func:`attncore.positions.sinusoidal_positions`,
    whose pairs are interleaved, in another order. Returns an array of ``pe``'s shape.
    """
    d = pe.shape[-1]
    return pe[..., np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])]


@exercise("ex-positions-offset-matrix")
def offset_matrix(offset_matrix) -> Verdict:
    """The reader's ``offset_matrix(k, d)``: a ``(d, d)`` matrix ``T`` with
    ``PE'[p + k] = PE'[p] @ T`` for every position ``p``, where ``PE'`` is the sinusoidal
    encoding (base 10000) with its sines first and its cosines after them
    (:func:`half_layout`)."""
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
            interleaved = sinusoidal_positions(n + k, d)
            pe = half_layout(interleaved)
            gap = float(np.abs(pe[:n] @ t - pe[k:]).max())
            if not gap < 1e-9:
                # PE'[p] @ T landed k places the wrong way, in the other layout, or nowhere
                if k and np.abs(pe[k:] @ t - pe[:n]).max() < 1e-9:
                    hint = ("it moves every position k places back instead of forward: "
                            "check the sign of the sine terms")
                elif d > 2 and np.abs(interleaved[:n] @ t - interleaved[k:]).max() < 1e-9:
                    hint = ("that matrix is for the interleaved layout of "
                            "ac.sinusoidal_positions; here the sine and the cosine of one "
                            "frequency are not neighbours")
                else:
                    hint = ("work out where the sine and the cosine of frequency i sit, "
                            "and which entries of T mix those two features only")
                return Verdict(False, f"PE'[p] @ offset_matrix({k}, {d}) differs from "
                                      f"PE'[p + {k}] by up to {gap:.2g}; {hint}.")
    return Verdict(True, "One matrix per offset, the same for every position: each "
                         "frequency's (sin, cos) pair is rotated wherever its two features "
                         "sit.")


# ex-positions-which-targets: each task gives position i of a sequence of distinct tokens a
# target (None: no target there).
def _largest(tokens, i):
    return max(tokens)


def _first(tokens, i):
    return tokens[0] if i >= 1 else None


def _next_in_order(tokens, i):
    larger = [t for t in tokens if t > tokens[i]]
    return min(larger) if larger else min(tokens)


def _one_after(tokens, i):
    return tokens[i + 1] if i + 1 < len(tokens) else None


TARGET_TASKS = {"a": _largest, "b": _first, "c": _next_in_order, "d": _one_after}


def _needs_no_positions(task, n: int = 4, vocab: int = 6) -> bool:
    """Whether ``task``'s target at position i is a function of the token there and of the set
    of tokens (cor-positions-set): every order of every set of ``n`` of ``vocab`` tokens that
    puts the same token at i must give it the same target."""
    for chosen in itertools.combinations(range(vocab), n):
        seen: dict[int, set] = {}
        for order in itertools.permutations(chosen):
            for i in range(n):
                target = task(order, i)
                if target is not None:
                    seen.setdefault(order[i], set()).add(target)
        if any(len(targets) > 1 for targets in seen.values()):
            return False
    return True


@exercise("ex-positions-which-targets")
def which_targets(tasks) -> Verdict:
    """The set of task letters whose targets a model without positions can predict exactly."""
    if isinstance(tasks, str):
        tasks = [tasks]
    try:
        chosen = {str(t).strip().lower().strip("()") for t in tasks}
    except TypeError:
        return Verdict(False, f'expected a set of letters such as {{"a"}}, got {tasks!r}')
    unknown = sorted(chosen - set(TARGET_TASKS))
    if unknown:
        return Verdict(False, f"the tasks are a, b, c and d; {unknown} is not one of them.")
    solvable = {name for name, task in TARGET_TASKS.items() if _needs_no_positions(task)}
    if chosen == solvable:
        return Verdict(True, "Those targets depend only on the token at i and on the set of "
                             "tokens; the others change when the same tokens come in "
                             "another order, and a model without positions can only guess "
                             "them.")
    return Verdict(False, "for each task, look for two orders of the same tokens that put "
                          "the same token at position i but give it different targets; if "
                          "there are such orders, the task needs positions.")


def _sinusoidal_failure(fn) -> str | None:
    """The first property of the sinusoidal encoding that the reader's
    ``my_sinusoidal(n, d, base=10000.0)`` breaks, in words with the small input, or None.
    Compares with :func:`attncore.sinusoidal_positions` only through properties, so that
    no message holds a value of the table."""
    def table(n, d, base=None):
        where = f"my_sinusoidal({n}, {d}{'' if base is None else f', base={base:g}'})"
        try:
            pe = fn(n, d) if base is None else fn(n, d, base=base)
        except Exception as err:                         # reported, not raised
            raise _Broken(f"{where} raised {type(err).__name__}: {err}") from None
        if pe is None:
            raise _Broken(f"{where} returned None (does the function end with return?)")
        arr = np.asarray(pe.detach().cpu() if hasattr(pe, "detach") else pe)
        if arr.shape != (n, d):
            raise _Broken(f"shape: {where} has shape {arr.shape}, expected one row per "
                          f"position and one column per feature, (n, d) = ({n}, {d})")
        if not np.issubdtype(arr.dtype, np.floating) or not np.isfinite(arr).all():
            raise _Broken(f"shape: {where} should hold finite floating-point numbers, got "
                          f"dtype {arr.dtype}")
        return arr.astype(np.float64)

    try:
        for n, d in ((5, 4), (1, 2), (7, 10)):
            table(n, d)
        pe = table(6, 8)
        even, odd = pe[0, 0::2], pe[0, 1::2]
        if np.abs(even).max() > 1e-12 or np.abs(odd - 1).max() > 1e-12:
            if np.allclose(pe[:5], sinusoidal_positions(6, 8)[1:], atol=1e-9):
                return ("position_zero: the rows of my_sinusoidal(6, 8) are the positions "
                        "1, 2, ..., 6; the first row is position 0")
            return ("sin_even_cos_odd: at position 0 a sine is 0 and a cosine 1, and "
                    "row 0 of my_sinusoidal(6, 8) does not have the sines on the even "
                    "features 0, 2, 4, ... and the cosines on the odd ones")
        radius = pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2
        if np.abs(radius - 1).max() > 1e-9:
            return ("pairs: in my_sinusoidal(6, 8) a pair of features (2i, 2i + 1) is "
                    "not a sine and a cosine of one angle (sin^2 + cos^2 is not 1)")
        freqs = sinusoidal_positions(2, 8)[1]                  # (for its angles only)
        want = np.arctan2(freqs[0::2], freqs[1::2])
        got = np.arctan2(pe[1, 0::2], pe[1, 1::2])
        bad = np.flatnonzero(np.abs(np.angle(np.exp(1j * (got - want)))) > 1e-9)
        if bad.size:
            return (f"frequencies: in my_sinusoidal(6, 8), pair {int(bad[0])} (features "
                    f"{2 * int(bad[0])}, {2 * int(bad[0]) + 1}) does not turn by "
                    f"omega_i = base^(-2i/d) radians from one position to the next")
        pe = table(12, 6)
        for k in (1, 3):
            dots = np.einsum("pd,pd->p", pe[:-k], pe[k:])
            if np.ptp(dots) > 1e-9:
                return (f"relative: in my_sinusoidal(12, 6), PE(p) . PE(p + {k}) changes "
                        f"with p, so an offset is not one rotation for every position")
        for base in (100.0, 10000.0):
            for n, d in ((9, 6), (4, 12)):
                pe = table(n, d, base)
                if np.abs(pe - sinusoidal_positions(n, d, base=base)).max() > 1e-9:
                    return (f"base: my_sinusoidal({n}, {d}, base={base:g}) does not use "
                            f"the frequencies omega_i = base^(-2i/d) of that base")
    except _Broken as broken:
        return str(broken)
    return None


class _Broken(Exception):
    """The reader's function could not be called or returned no table."""


@exercise("ex-positions-your-sinusoidal")
def your_sinusoidal(fn) -> Verdict:
    """The reader's ``my_sinusoidal(n, d, base=10000.0)``, checked property by property:
    the table's shape, sines on the even features and cosines on the odd ones, each pair one
    angle, the frequencies, the relative-position property, the base."""
    if not callable(fn):
        return Verdict(False, f"expected a function my_sinusoidal(n, d, base=10000.0), got "
                              f"{type(fn).__name__}")
    failure = _sinusoidal_failure(fn)
    if failure is None:
        return Verdict(True, "The table has the shape, the sines and cosines, the "
                             "frequencies and the base of the definition, and an offset "
                             "moves every position by the same rotation.")
    return Verdict(False, failure + ".")
