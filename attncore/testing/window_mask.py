"""A conformance check for a sliding-window mask with sink tokens that you write yourself.

:func:`check_window_mask` runs a function that builds the mask of a causal sliding window
with sink tokens (chapter 18) on many small sizes, and reports, property by property, what
holds and on the smallest input where something fails, without printing the right mask.
Here it checks attncore's own mask::

    >>> import attncore as ac
    >>> from attncore.testing import check_window_mask
    >>> def mask(n, window, sinks):
    ...     return ac.sliding_window_mask(n, n, window, sink_tokens=sinks)
    >>> check_window_mask(mask).passed
    True

**The calling convention.** Your function is called as ``fn(n, window, sinks)`` with
Python integers ``n >= 1`` (queries and keys, at positions ``0..n-1``), ``window >= 1``
and ``sinks >= 0``, and returns a boolean NumPy array (or torch tensor) of shape
``(n, n)``, ``True`` where query ``i`` may attend to key ``j``: when ``j <= i`` and
either ``i - window < j`` (the window: position ``i`` and the ``window - 1`` before it)
or ``j < sinks`` (the first ``sinks`` positions, seen by every later query).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport
from .runner import Failure, call, run_properties, to_numpy, with_properties

__all__ = ["PROPERTIES", "check_window_mask"]

PROPERTIES = {
    "returns_boolean_mask": "returns a boolean array of shape (n, n)",
    "causal": "no query sees a later key, sink tokens included",
    "sees_itself": "every query sees its own position",
    "window_width": "without sinks, query i sees exactly the keys i - window + 1 .. i "
                    "(fewer near the start), for windows from 1 to beyond n",
    "sink_columns": "with sinks, every query i sees the first sinks positions up to i, "
                    "however far back they lie",
    "nothing_else": "no other key is admitted: the mask equals the definition for every "
                    "small n, window and sinks",
}
"""The properties :func:`check_window_mask` checks, by name, with what each one asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(n, window, sinks) -> bool array (n, n)"


def check_window_mask(fn: Callable[..., Any], *, max_n: int = 9) -> CheckReport:
    """Run the window-mask properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(n, window, sinks) -> mask``; see the calling convention in this module's
        description.
    max_n : int, default 9
        The largest ``n`` tried; every ``1 <= n <= max_n``, ``1 <= window <= n + 1`` and
        ``0 <= sinks <= n`` is tried, smallest first, and the first failure reported.

    Returns
    -------
    CheckReport
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary; it names the smallest failing
        ``(n, window, sinks)`` and a query and key, never the right mask.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_window_mask`` itself (``fn`` not callable, ``max_n``
        below 3). Whatever ``fn`` raises is reported as a failure of the property that
        called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable (n, window, sinks) -> mask, got "
                        f"{type(fn).__name__}")
    max_n = check_size("max_n", max_n, minimum=3)
    return run_properties("check_window_mask", fn, PROPERTIES, _Runner(fn, max_n))


def _definition(n: int, window: int, sinks: int) -> np.ndarray:
    """The mask of the definition, written out pair by pair (the check's own)."""
    return np.array([[j <= i and (i - window < j or j < sinks) for j in range(n)]
                     for i in range(n)], dtype=bool)


def _where(n, window, sinks):
    return f"n = {n}, window = {window}, sinks = {sinks}"


class _Runner:
    """Builds the sizes and runs the properties (one method per property)."""

    def __init__(self, fn, max_n):
        self.fn, self.max_n = fn, max_n
        self._masks: dict[tuple[int, int, int], np.ndarray] = {}

    def mask(self, n, window, sinks):
        """``fn``'s mask as a checked boolean NumPy array; any problem is a Failure."""
        key = (n, window, sinks)
        if key in self._masks:
            return self._masks[key]
        where = _where(*key)
        with np.errstate(all="ignore"):      # the learner's warnings: reported below
            got = to_numpy(call(self.fn, key, where=where, signature=SIGNATURE))
        if got is None:
            raise Failure("expected a boolean array of shape "
                          f"{(n, n)}, got None (does the function end with a return "
                          f"statement?)", where)
        if not isinstance(got, np.ndarray):
            raise Failure(f"expected a boolean NumPy array of shape {(n, n)}, got "
                          f"{type(got).__name__}", where)
        if got.shape != (n, n):
            raise Failure(f"expected shape {(n, n)}, got {got.shape}", where)
        if got.dtype != np.bool_:
            raise Failure(f"expected dtype bool (True = may attend), got {got.dtype}; "
                          f"compare positions to get booleans", where)
        self._masks[key] = got
        return got

    def sizes(self, sinks=None):
        """Every (n, window, sinks), smallest n first."""
        for n in range(1, self.max_n + 1):
            for window in range(1, n + 2):
                for s in (range(0, n + 1) if sinks is None else sinks(n)):
                    yield n, window, s

    @staticmethod
    def pair(cells):
        i, j = (int(x) for x in np.argwhere(cells)[0])
        return f"query {i}, key {j}"

    # --- the properties ------------------------------------------------------------

    def returns_boolean_mask(self):
        for key in ((1, 1, 0), (6, 3, 1), (5, 9, 2)):
            self.mask(*key)

    def causal(self):
        for n, window, sinks in self.sizes():
            got = self.mask(n, window, sinks)
            later = got & ~np.tri(n, dtype=bool)
            if later.any():
                raise Failure(f"{self.pair(later)} is admitted, a key after its query "
                              f"(a sink token too must come no later than the query)",
                              _where(n, window, sinks))

    def sees_itself(self):
        for n, window, sinks in self.sizes():
            got = self.mask(n, window, sinks)
            if not got.diagonal().all():
                i = int(np.argmin(got.diagonal()))
                raise Failure(f"query {i} does not see its own key", _where(n, window,
                                                                           sinks))

    def window_width(self):
        for n, window, sinks in self.sizes(sinks=lambda n: (0,)):
            got = self.mask(n, window, sinks)
            want = _definition(n, window, 0)
            if (got != want).any():
                rows = np.flatnonzero((got != want).any(axis=1))
                i = int(rows[0])
                seen, expected = int(got[i].sum()), int(want[i].sum())
                raise Failure(f"query {i} sees {seen} keys, where a window of "
                              f"{window} lets it see {'more' if expected > seen else 'fewer'}"
                              f" (is the window off by one?)", _where(n, window, 0))

    def sink_columns(self):
        for n, window, sinks in self.sizes(sinks=lambda n: range(1, n + 1)):
            got = self.mask(n, window, sinks)
            want = _definition(n, window, sinks)
            missing = want & ~got
            missing[:, sinks:] = False
            if missing.any():
                raise Failure(f"{self.pair(missing)} is a sink position the query "
                              f"should see, and it is not admitted",
                              _where(n, window, sinks))

    def nothing_else(self):
        for n, window, sinks in self.sizes():
            got = self.mask(n, window, sinks)
            extra = got & ~_definition(n, window, sinks)
            if extra.any():
                raise Failure(f"{self.pair(extra)} is admitted, but it is neither in the "
                              f"query's window nor a sink token", _where(n, window, sinks))
            missing = _definition(n, window, sinks) & ~got
            if missing.any():
                raise Failure(f"{self.pair(missing)} is not admitted, but the query "
                              f"should see it", _where(n, window, sinks))
