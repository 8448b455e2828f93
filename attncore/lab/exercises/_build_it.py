"""What the checkers of the "build-it" exercises share: a function the learner wrote is run
on fresh inputs, property by property, and the verdict names the properties that fail and
the small input each failed on, never the expected output.

A checker writes its properties as functions that return normally when the property holds
and raise :class:`~attncore.testing.runner.Failure` (what went wrong, on which input) when
it does not; :func:`invoke` calls the learner's function and turns anything it does wrong
(raise, take other arguments, return another type, shape or dtype, NaN) into such a
failure; :func:`judge` runs the properties into a :class:`Verdict`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

import numpy as np

from ...testing.runner import Failure, call, expect_array
from . import Verdict

__all__ = ["Failure", "describe", "invoke", "judge"]


def describe(**arrays: np.ndarray) -> str:
    """The input in words: ``q (4,), keys (6, 4)`` (and the dtype where not float64)."""
    parts = []
    for name, a in arrays.items():
        text = f"{name} {tuple(a.shape)}"
        if a.dtype != np.float64:
            text += f" {a.dtype}"
        parts.append(text)
    return ", ".join(parts)


def invoke(fn: Callable[..., Any], args: tuple, *, signature: str, shape: tuple[int, ...],
           dtype: str | None = None, where: str = "") -> np.ndarray:
    """``fn(*args)`` on copies of ``args``, checked to return finite numbers of ``shape``
    (and ``dtype``); anything else is a :class:`Failure` in one sentence."""
    where = where or describe(**{f"argument {i + 1}": a for i, a in enumerate(args)})
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")            # the learner's own warnings
        result = call(fn, tuple(np.array(a, subok=True) for a in args), where=where,
                      signature=signature)
    return expect_array(result, name="the result", shape=shape, dtype=dtype, where=where)


def judge(fn: Any, signature: str, properties: Mapping[str, Callable[[], None]]) -> Verdict:
    """Run ``properties`` (name -> check) on ``fn`` and say which fail, and on what."""
    if not callable(fn):
        return Verdict(False, f"expected a function {signature}, got {type(fn).__name__}; "
                              f"replace the line `= None` with a def.")
    failed, seen = [], {}                          # what went wrong -> first property
    for name, check in properties.items():
        try:
            check()
        except Failure as failure:
            first = seen.setdefault(failure.detail, name)
            if first != name:                      # one mistake, reported once
                failed.append(f"{name}: the same error as under {first}")
            else:
                failed.append(f"{name}: {failure.detail}"
                              + (f", on {failure.input}" if failure.input else ""))
    if not failed:
        return Verdict(True, f"Your function has all {len(properties)} properties checked "
                             f"({', '.join(properties)}).")
    names = [line.split(":")[0] for line in failed]
    return Verdict(False, f"{len(failed)} of the {len(properties)} properties failed "
                          f"({', '.join(names)}):", tuple(failed))
