"""Checkers for the exercises of the positions chapter (order, learned and sinusoidal positions)."""

from __future__ import annotations

import itertools

import numpy as np

from ...positions import sinusoidal_positions
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
