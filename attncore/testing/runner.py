"""What every conformance check shares: calling the learner's function safely, reading what
it returned, and running the properties into a :class:`~attncore.testing.report.CheckReport`.

A check is a module of this package with a ``PROPERTIES`` dict (name -> what it asserts) and
one method per property on an object that builds the inputs; :func:`run_properties` runs
them in order. Inside a property, :class:`Failure` says that it does not hold (how, and on
which input), :class:`Skip` that it does not apply. :func:`call` and :func:`expect_array`
turn whatever the learner's function does (raise, take other arguments, return another
type, shape or dtype, NaN) into one sentence naming what was expected, never a traceback
from inside the check.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Mapping

import numpy as np

from .report import CheckReport, PropertyResult

__all__ = ["Failure", "Skip", "call", "expect_array", "function_name", "run_properties",
           "to_numpy", "dtype_name", "group_same_errors", "with_dtype_hint",
           "with_properties"]


class Failure(Exception):
    """A property does not hold: ``detail`` says how, ``input`` on what."""

    def __init__(self, detail: str, input: str = ""):
        super().__init__(detail)
        self.detail, self.input = detail, input


class Skip(Exception):
    """A property does not apply to this function (the message says why)."""


def function_name(fn: Any) -> str:
    """A readable name for ``fn`` (a function, a partial, a callable object)."""
    if isinstance(fn, functools.partial):
        return f"partial({function_name(fn.func)}, ...)"
    return getattr(fn, "__name__", type(fn).__name__)


def dtype_name(x: Any) -> str | None:
    """``x``'s dtype as a NumPy-style name (``"float32"``), or None if it has none."""
    dtype = getattr(x, "dtype", None)
    return None if dtype is None else str(dtype).replace("torch.", "")


def to_numpy(x: Any) -> Any:
    """A torch tensor as a NumPy array (anything else as it is)."""
    if x is None or isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return x


def call(fn: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any] | None = None, *,
         where: str, signature: str) -> Any:
    """``fn(*args, **kwargs)``, with anything it raises turned into a :class:`Failure`.

    ``signature`` is the calling convention in words (``"fn(x, axis=-1)"``), named when
    ``fn`` takes other arguments; ``where`` describes the input, for the report.
    """
    try:
        return fn(*args, **dict(kwargs or {}))
    except Exception as err:                                   # reported, not raised
        if isinstance(err, TypeError) and ("argument" in str(err) or "keyword" in str(err)):
            raise Failure(f"the function takes other arguments than the check passes: "
                          f"expected {signature}; calling it raised TypeError: {err}",
                          where) from None
        raise Failure(f"the function raised {type(err).__name__}: {err}", where) from None


def expect_array(value: Any, *, name: str, shape: tuple[int, ...], dtype: str | None,
                 where: str, finite: bool = True) -> np.ndarray:
    """``value`` as a NumPy array, or a :class:`Failure` naming what was expected.

    Checks, in this order, that it is an array (NumPy, or a torch tensor), that it has
    ``shape``, that its dtype is ``dtype`` (None: any floating dtype), and, with ``finite``,
    that it holds no NaN or infinity.
    """
    if value is None:
        raise Failure(f"{name}: expected an array of shape {shape}, got None (does the "
                      f"function end with a return statement?)", where)
    arr = to_numpy(value)
    if not isinstance(arr, np.ndarray):
        raise Failure(f"{name}: expected a NumPy array of shape {shape}, got "
                      f"{type(value).__name__}", where)
    if arr.shape != tuple(shape):
        raise Failure(f"{name}: expected shape {tuple(shape)}, got {arr.shape}", where)
    if dtype is not None and dtype_name(arr) != dtype:
        raise Failure(f"{name}: expected dtype {dtype} (the inputs' dtype), got "
                      f"{dtype_name(arr)}", where)
    if dtype is None and not np.issubdtype(arr.dtype, np.floating):
        raise Failure(f"{name}: expected floating-point numbers, got dtype {arr.dtype}",
                      where)
    if finite and not np.isfinite(arr).all():
        raise Failure(f"{name}: expected finite numbers, got NaN or infinity at "
                      f"{tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])}", where)
    return arr


# Why float32 inputs most often come back as float64, and what to do, for the reports.
DTYPE_HINT = ("; under NumPy 2 one NumPy float64 number in the arithmetic (np.sqrt(d), "
              "np.float64(...), a float64 array) turns float32 results into float64: "
              "use a Python float (math.sqrt(d)) or convert the result with "
              ".astype(x.dtype)")


def with_dtype_hint(failure: Failure) -> Failure:
    """``failure`` with :data:`DTYPE_HINT` added if it reports float32 inputs that gave a
    float64 result."""
    if re.search(r"expected dtype float32.*got float64", failure.detail):
        return Failure(failure.detail + DTYPE_HINT, failure.input)
    return failure


def group_same_errors(results: tuple[PropertyResult, ...]) -> tuple[PropertyResult, ...]:
    """The results, with every failure that repeats an earlier one's exception (the same
    type and message up to its numbers) replaced by a pointer to that first one, so that
    one bug reads as one cause."""
    first: dict[str, str] = {}
    out = []
    for r in results:
        key = _error_key(r.detail) if r.status == "failed" else None
        if key is not None and key in first:
            r = PropertyResult(r.name, "failed",
                               f"fails with the same error as {first[key]} (fix that "
                               f"first)", "")
        elif key is not None:
            first[key] = r.name
        out.append(r)
    return tuple(out)


def _error_key(detail: str) -> str | None:
    """An exception's report without its numbers (shapes, sizes), or None if ``detail``
    reports no exception."""
    match = re.search(r"raised (\w+): (.*)", detail, re.S)
    if match is None:
        return None
    return match.group(1) + ":" + re.sub(r"\d+", "#", match.group(2))


def with_properties(doc: str | None, properties: Mapping[str, str]) -> str | None:
    """A check module's docstring followed by its properties, in the order they are checked,
    each with what it asserts (for the API page); None stays None (``python -OO``)."""
    if doc is None:
        return None
    return doc + "\n**The properties**, in the order they are checked:\n\n" + "\n".join(
        f"``{name}``\n    {claim[0].upper()}{claim[1:]}." for name, claim in properties.items())


def run_properties(check: str, fn: Callable[..., Any], properties: Mapping[str, str],
                   runner: Any) -> CheckReport:
    """Run ``runner.<name>()`` for every name of ``properties``, in order, into a report.

    A property method returns normally when it holds, raises :class:`Failure` when it does
    not and :class:`Skip` when it does not apply.
    """
    results = []
    for name in properties:
        try:
            getattr(runner, name)()
        except Skip as skip:
            results.append(PropertyResult(name, "skipped", str(skip)))
        except Failure as failure:
            results.append(PropertyResult(name, "failed", failure.detail, failure.input))
        else:
            results.append(PropertyResult(name, "passed"))
    return CheckReport(function_name(fn), tuple(results), check)
