"""A conformance check for a softmax you write yourself.

:func:`check_softmax` runs the course's softmax properties on any function that computes a
softmax along one axis, and reports, property by property, what holds and on which small
input something fails, without printing the right answer. Here it checks attncore's own::

    >>> import attncore as ac
    >>> from attncore.testing import check_softmax
    >>> check_softmax(ac.softmax).passed
    True

**The calling convention.** Your function is called as ``fn(x)`` and as ``fn(x, axis=a)``,
with ``x`` a NumPy array of dtype float64 or float32, of 1 to 3 axes (batch axes before the
one that sums to one, or after it), and ``a`` one of its axes, negative or not. It must
return a NumPy array of the shape and dtype of ``x``, whose entries along ``axis`` are in
``[0, 1]`` and sum to one, and leave ``x`` unchanged. An entry of ``-inf`` (a masked score)
gets weight exactly 0; a slice whose entries are **all** ``-inf`` has nothing to normalise,
and the course's convention (attncore's) is a slice of zeros there, never NaN. ``x`` holds no
NaN and no ``+inf``.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport
from .runner import Failure, Skip, call, expect_array, run_properties, with_properties

__all__ = ["PROPERTIES", "SoftmaxCheck", "check_softmax"]

PROPERTIES = {
    "output_shape": "returns a NumPy array of finite numbers of the input's shape, for "
                    "1-D, 2-D and 3-D inputs",
    "preserves_dtype": "float32 input gives float32 output and float64 input float64, and "
                       "the float32 result equals the function's own float64 result to "
                       "1e-5",
    "sums_to_one": "entries are in [0, 1] and sum to 1 (to 1e-6) along the axis given "
                   "(axis=-1 by default, and every other axis, negative or not), also "
                   "on square inputs, where a sum along the wrong axis still broadcasts",
    "matches_reference": "agrees with attncore.softmax along every axis, for 1-D, 2-D and "
                         "3-D inputs",
    "shift_invariance": "adding a constant to every entry of a slice (a different constant "
                        "per slice) changes nothing",
    "large_inputs": "entries far beyond the range of exp (up to 1000 in size, or all "
                    "near 800 or -800; float64's exp overflows above 709 and underflows "
                    "below -745) give finite weights, correct to 1e-3",
    "masked_entries": "-inf entries get weight exactly 0, and the other entries the softmax "
                      "of the finite ones alone",
    "all_masked_slices": "a slice whose entries are all -inf gives zeros (not NaN), and the "
                         "other slices are unaffected",
    "inputs_unchanged": "leaves x as it was, finite or with -inf entries, in float64 and "
                        "float32",
    "float64_precision": "float64 inputs are computed in float64: agreement with "
                         "attncore.softmax to 1e-12 (float32 arithmetic errs by about 1e-7)",
}
"""The properties :func:`check_softmax` checks, by name, with what each one asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(x, axis=-1)"


@dataclass(frozen=True)
class SoftmaxCheck(CheckReport):
    """The report of :func:`check_softmax`: one result per property of
    :data:`~attncore.testing.softmax.PROPERTIES` (see
    :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_softmax"


def check_softmax(fn: Callable[..., Any], *, seed: int = 0) -> SoftmaxCheck:
    """Run the course's softmax properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(x, axis=-1) -> p``, NumPy in and NumPy out: ``x`` of any shape ``(...)`` with
        at least one axis, float64 or float32; ``p`` of the same shape and dtype, summing
        to one along ``axis`` (see the calling convention in this module's description).
    seed : int, default 0
        Seed of the random inputs.

    Returns
    -------
    SoftmaxCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`~attncore.testing.softmax.PROPERTIES`) and a printable summary that names,
        for each failure, what went wrong and the small input it went wrong on, never the
        right output.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_softmax`` itself. Whatever ``fn`` raises is reported as a
        failure of the property that called it, not raised.

    Examples
    --------
    >>> import numpy as np
    >>> from attncore.testing import check_softmax
    >>> def no_max(x, axis=-1):
    ...     e = np.exp(x)
    ...     return e / e.sum(axis=axis, keepdims=True)
    >>> check_softmax(no_max).failed
    ['large_inputs', 'all_masked_slices']
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable softmax function fn(x, axis=-1), got "
                        f"{type(fn).__name__}")
    seed = check_size("seed", seed, minimum=0)
    runner = _Runner(fn, seed)
    for name in PROPERTIES:                  # each property knows its name (see call)
        setattr(runner, name, functools.partial(runner.run, name))
    report = run_properties("check_softmax", fn, PROPERTIES, runner)
    return SoftmaxCheck(report.function, report.results)


def _reference(x: np.ndarray, axis: int = -1) -> np.ndarray:
    from ..softmax import softmax

    with np.errstate(all="ignore"):              # (exp of -1000 underflows, harmlessly)
        return softmax(x, axis=axis)


# The shapes and axes every property runs through, smallest first, so that a failure is
# reported on the smallest input that shows it.
_CASES = (((5,), -1), ((3, 4), -1), ((4, 4), -1), ((4, 4), 0), ((3, 4), 0),
          ((2, 3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), -2))


class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, seed):
        self.fn, self.seed = fn, seed
        self.current, self.raised = "", {}           # error text -> first property

    def run(self, name):
        self.current = name
        getattr(type(self), name)(self)

    def invoke(self, x, kwargs, where):
        """``fn(x, **kwargs)``; an error it raised before, under another property, is
        reported once: the later properties are skipped with a pointer to the first."""
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")            # a learner's overflow warnings
            try:
                return call(self.fn, (x,), kwargs, where=where, signature=SIGNATURE)
            except Failure as failure:
                first = self.raised.setdefault(failure.detail, self.current)
                if first != self.current:
                    raise Skip(f"not checked: the function raised the same error as "
                               f"under {first}") from None
                raise

    # --- inputs and calls ------------------------------------------------------------

    def logits(self, shape, offset=0, spread=2.0, dtype="float64"):
        rng = np.random.default_rng([self.seed, offset])
        return (rng.standard_normal(shape) * spread).astype(dtype)

    def describe(self, x, axis, note=""):
        text = f"x of shape {x.shape}"
        if x.dtype != np.float64:
            text += f" and dtype {x.dtype}"
        text += f", axis={axis}" if axis is not None else " (axis left to its default)"
        return text + (f", {note}" if note else "") + f" (seed {self.seed})"

    def call(self, x, axis=-1, *, note="", dtype=None, finite=True):
        """``fn``'s result on a copy of ``x``, checked to be an array of ``x``'s shape;
        ``axis=-1`` is passed by leaving it to its default."""
        where = self.describe(x, axis if axis != -1 else None, note)
        kwargs = {} if axis == -1 else {"axis": axis}
        result = self.invoke(x.copy(), kwargs, where)
        p = expect_array(result, name="the result", shape=x.shape, dtype=dtype, where=where,
                         finite=finite)
        return p.astype(np.float64), where

    @staticmethod
    def first(bad):
        return tuple(int(i) for i in np.argwhere(bad)[0])

    def compare(self, p, x, axis, where, tol, what="attncore.softmax"):
        expected = _reference(x.astype(np.float64), axis)
        error = np.abs(p - expected)
        bad = error > tol
        if bad.any():
            raise Failure(f"differs from {what} at entry {self.first(bad)} by "
                          f"{error.max():.3g} (tolerance {tol:g})", where)

    # --- the properties ----------------------------------------------------------------

    def output_shape(self):
        for i, (shape, axis) in enumerate(_CASES):
            x = self.logits(shape, offset=i)
            self.call(x, axis)

    def preserves_dtype(self):
        for dtype in ("float64", "float32"):
            for i, (shape, axis) in enumerate(_CASES[:6]):
                x = self.logits(shape, offset=20 + i, dtype=dtype)
                try:
                    p, where = self.call(x, axis, dtype=dtype)
                except Failure as failure:
                    if "expected dtype" not in failure.detail:
                        raise
                    raise Failure(failure.detail + "; one float64 array or NumPy float64 "
                                  "number in the arithmetic (np.asarray(x, dtype=float), "
                                  "np.float64(...)) turns a float32 result into float64",
                                  failure.input) from None
                if dtype == "float32":
                    wide, _ = self.call(x.astype(np.float64), axis)
                    error = np.abs(p - wide)
                    if (error > 1e-5).any():
                        raise Failure(f"float32 input gave entry {self.first(error > 1e-5)} "
                                      f"that differs from the function's own float64 "
                                      f"result by {error.max():.3g} (tolerance 1e-05)", where)

    def sums_to_one(self):
        for i, (shape, axis) in enumerate(_CASES):
            x = self.logits(shape, offset=40 + i)
            p, where = self.call(x, axis)
            if (p < 0).any() or (p > 1).any():
                bad = (p < 0) | (p > 1)
                raise Failure(f"entry {self.first(bad)} is {p[bad][0]:.3g}, outside "
                              f"[0, 1]", where)
            total = p.sum(axis=axis)
            bad = np.abs(total - 1) > 1e-6
            if bad.any():
                slice_ = self.first(bad)
                raise Failure(f"the slice at {slice_} (the other axes' indices) sums to "
                              f"{total[slice_]:.6g} along axis {axis}, expected 1", where)

    def matches_reference(self):
        for i, (shape, axis) in enumerate(_CASES):
            x = self.logits(shape, offset=60 + i)
            p, where = self.call(x, axis)
            self.compare(p, x, axis, where, 1e-6)

    def shift_invariance(self):
        for i, (shape, axis) in enumerate(_CASES[1:6]):
            x = self.logits(shape, offset=80 + i)
            shape1 = list(shape)
            shape1[axis] = 1
            shifts = np.linspace(-30.0, 30.0, int(np.prod(shape1))).reshape(shape1)
            p, _ = self.call(x, axis)
            shifted = x + shifts
            q, where = self.call(shifted, axis, note="each slice shifted by a constant "
                                                     "from -30 to 30")
            error = np.abs(p - q)
            if (error > 1e-6).any():
                raise Failure(f"shifting the slices changed entry "
                              f"{self.first(error > 1e-6)} by {error.max():.3g}", where)

    def large_inputs(self):
        for i, (shape, axis) in enumerate(_CASES[:6]):
            x = self.logits(shape, offset=100 + i)
            for scale, shift, note in ((300.0, 0.0, "entries up to about 1000 in size"),
                                       (1.0, 800.0, "every entry near 800"),
                                       (1.0, -800.0, "every entry near -800")):
                big = x * scale + shift
                p, where = self.call(big, axis, note=note)
                self.compare(p, big, axis, where, 1e-3)

    def masked_entries(self):
        for i, (shape, axis) in enumerate(_CASES[1:6]):
            x = self.logits(shape, offset=120 + i)
            rng = np.random.default_rng([self.seed, 140 + i])
            masked = rng.random(shape) < 0.4
            np.moveaxis(masked, axis, -1)[..., 0] = False   # (a view of masked)
            x = np.where(masked, -np.inf, x)           # index 0 of each slice stays finite
            p, where = self.call(x, axis, note="with -inf entries")
            if (p[masked] != 0).any():
                raise Failure(f"an entry of -inf got weight "
                              f"{np.abs(p[masked]).max():.3g}, expected exactly 0", where)
            self.compare(p, x, axis, where, 1e-6)

    def all_masked_slices(self):
        for i, (shape, axis) in enumerate(_CASES[1:6]):
            x = self.logits(shape, offset=160 + i)
            first = (0,) * (x.ndim - 1)
            np.moveaxis(x, axis, -1)[first] = -np.inf     # the first slice: all -inf
            p, where = self.call(x, axis, note="the first slice all -inf", finite=False)
            if not np.isfinite(p).all():
                raise Failure(f"the result holds NaN or infinity at "
                              f"{self.first(~np.isfinite(p))}; a slice of all -inf should "
                              f"give zeros", where)
            if (np.moveaxis(p, axis, -1)[first] != 0).any():
                raise Failure("the slice of all -inf did not give zeros", where)
            self.compare(p, x, axis, where, 1e-6)

    def inputs_unchanged(self):
        for dtype in ("float64", "float32"):
            for i, (shape, axis) in enumerate(_CASES[1:6]):
                x = self.logits(shape, offset=180 + i, dtype=dtype)
                if i % 2:
                    x[(0,) * x.ndim] = -np.inf
                given = x.copy()
                where = self.describe(x, axis if axis != -1 else None)
                kwargs = {} if axis == -1 else {"axis": axis}
                self.invoke(given, kwargs, where)
                if not np.array_equal(given, x):
                    raise Failure("fn changed its argument x in place", where)

    def float64_precision(self):
        for i, (shape, axis) in enumerate(_CASES[:6]):
            x = self.logits(shape, offset=200 + i)
            p, where = self.call(x, axis)
            error = np.abs(p - _reference(x, axis))
            if (error > 1e-12).any():
                raise Failure(f"entry {self.first(error > 1e-12)} differs from "
                              f"attncore.softmax by {error.max():.3g}, where float64 "
                              f"arithmetic errs by about 1e-16: float64 inputs are not "
                              f"computed in float64", where)

