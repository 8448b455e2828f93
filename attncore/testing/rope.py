"""A conformance check for rotary position embeddings (RoPE) you write yourself.

:func:`check_rope` runs a RoPE function you wrote on small inputs it has not seen and
reports property by property what holds and the smallest input on which something fails,
without printing the right answer. Here it checks attncore's own::

    >>> import attncore as ac
    >>> from attncore.testing import check_rope
    >>> check_rope(ac.rope).passed
    True

**The calling convention.** Your function is called as ``fn(x, positions)`` or
``fn(x, positions, base=b)``, with

* ``x`` of shape ``(..., n, d)``, ``d`` even: no batch axis, one or two; float64 for most
  properties, float32 too for ``preserves_dtype`` and ``inputs_unchanged``;
* ``positions`` a NumPy integer array of shape ``(n,)``: the position of each row, not
  always ``0 .. n - 1``;
* ``base`` a float, 10000.0 when not passed.

It must return an array of the shape and dtype of ``x`` in :func:`attncore.rope`'s
convention: the row at position ``m`` has its features paired as ``(i, i + d/2)``
("rotate-half"), and pair ``i`` is turned by the angle ``m * base ** (-2i / d)``
counter-clockwise: ``(a, b) -> (a cos t - b sin t, a sin t + b cos t)``. It must leave its
arguments unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .runner import with_properties
from .report import CheckReport
from .runner import Failure, call, expect_array, group_same_errors, run_properties, \
    with_dtype_hint

__all__ = ["PROPERTIES", "RopeCheck", "check_rope"]

PROPERTIES = {
    "output_shape": "returns finite values of the shape of x, for x without a batch axis, "
                    "with one and with two",
    "preserves_dtype": "float32 inputs give a float32 output (float64 ones float64), with "
                       "the same numbers to float32's precision",
    "inputs_unchanged": "leaves x and positions as they were",
    "keeps_norms": "every row keeps its length: each pair of features is rotated, not "
                   "stretched",
    "position_zero": "a row at position 0 is returned unchanged",
    "uses_positions": "each row is turned by the angle of its own position as given, "
                      "not by its index in x",
    "pairing": "feature i is paired with feature i + d/2 (rotate-half, attncore.rope's "
               "convention): a row whose only nonzero features are i and i + d/2 keeps "
               "every other feature at zero",
    "frequencies": "pair i turns by base ** (-2i / d) radians per position, "
                   "counter-clockwise",
    "relative_scores": "the dot product of a rotated query at position m and a rotated "
                       "key at position n depends on m - n only",
    "uses_base": "a base other than 10000 changes the angles as it should",
    "matches_reference": "agrees with attncore.rope for several widths, positions, bases "
                         "and batch shapes",
}
"""The properties :func:`check_rope` checks, by name, with what each one asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(x, positions, base=10000.0)"


@dataclass(frozen=True)
class RopeCheck(CheckReport):
    """The report of :func:`check_rope`: one result per property of :data:`PROPERTIES`
    (see :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_rope"


def check_rope(fn: Callable[..., Any], *, seed: int = 0) -> RopeCheck:
    """Run the course's RoPE properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(x, positions, base=10000.0) -> rotated x``; see the calling convention in
        this module's description.
    seed : int, default 0
        Seed of the random inputs.

    Returns
    -------
    RopeCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary. Where one error makes several
        properties fail, the first of them reports it and the others point to it.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_rope`` itself. Whatever ``fn`` raises is reported as a
        failure of the property that called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable RoPE function, got {type(fn).__name__}")
    seed = check_size("seed", seed, minimum=0)
    report = run_properties("check_rope", fn, PROPERTIES, _Runner(fn, seed))
    return RopeCheck(report.function, group_same_errors(report.results))


# --- a reference, with the classic mistakes as switches -----------------------------------

def rotate(x: np.ndarray, positions: np.ndarray, base: float = 10000.0, *,
           pairing: str = "half", shift: int = 0, exponent: str = "2i/d",
           sign: int = 1, use_base: bool = True) -> np.ndarray:
    """RoPE in float64, right by default, wrong in one named way: ``pairing="interleaved"``
    pairs ``(2i, 2i + 1)``; ``shift`` adds to every position; ``exponent="i/d"`` uses
    ``base ** (-i / d)``; ``sign=-1`` turns the other way; ``use_base=False`` ignores
    ``base`` (uses 10000)."""
    d = x.shape[-1]
    b = base if use_base else 10000.0
    i = np.arange(d // 2, dtype=np.float64)
    freqs = b ** (-(i if exponent == "i/d" else 2 * i) / d)
    angles = (np.asarray(positions, np.float64) + shift)[:, None] * freqs * sign
    cos, sin = np.cos(angles), np.sin(angles)
    if pairing == "interleaved":
        a, c = x[..., 0::2], x[..., 1::2]
        out = np.empty(x.shape)
        out[..., 0::2], out[..., 1::2] = a * cos - c * sin, a * sin + c * cos
        return out
    a, c = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - c * sin, a * sin + c * cos], axis=-1)


MISTAKES = {
    "features are paired as (2i, 2i + 1) (the interleaved convention), not as "
    "(i, i + d/2)": {"pairing": "interleaved"},
    "every position is one too large": {"shift": 1},
    "every position is one too small": {"shift": -1},
    "the frequencies are base ** (-i / d), one per feature instead of one per pair": {
        "exponent": "i/d"},
    "the pairs turn clockwise (the sine's sign is swapped)": {"sign": -1},
    "the base is ignored (10000 whatever base is passed)": {"use_base": False},
}


def diagnose(out: np.ndarray, x: np.ndarray, positions: np.ndarray,
             base: float = 10000.0) -> str:
    """``"; it equals a RoPE in which <mistake>"`` if ``out`` is one of the classic
    mistakes' outputs, else ``""``."""
    for words, switch in MISTAKES.items():
        if "use_base" in switch and base == 10000.0:
            continue
        wrong = rotate(x, positions, base, **switch)
        if np.allclose(out, wrong, rtol=1e-6, atol=1e-9):
            return f"; it equals a RoPE in which {words}"
    if np.allclose(out, rotate(x, np.arange(x.shape[-2]), base), rtol=1e-6, atol=1e-9):
        return "; it equals a RoPE of positions 0 .. n - 1, the given positions ignored"
    return ""


class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, seed):
        self.fn, self.seed = fn, seed

    def inputs(self, batch, n, d, offset, dtype="float64"):
        rng = np.random.default_rng([self.seed, offset])
        x = rng.standard_normal(batch + (n, d)).astype(dtype)
        positions = rng.permutation(3 * n)[:n].astype(np.int64)
        positions[0] = max(1, positions[0])                  # no position-0 row first
        return x, positions

    def describe(self, x, positions, base=None, note=""):
        text = f"x {x.shape}"
        if x.dtype != np.float64:
            text += f" of dtype {x.dtype}"
        text += f", positions {positions.tolist()}"
        if base is not None:
            text += f", base={base:g}"
        return text + (f", {note}" if note else "") + f" (seed {self.seed})"

    def run(self, x, positions, base=None, *, note=""):
        where = self.describe(x, positions, base, note)
        kwargs = {} if base is None else {"base": base}
        got = call(self.fn, (x.copy(), positions.copy()), kwargs, where=where,
                   signature=SIGNATURE)
        try:
            return expect_array(got, name="the result", shape=x.shape, dtype=str(x.dtype),
                                where=where)
        except Failure as failure:
            raise with_dtype_hint(failure) from None

    def fail_unless_close(self, out, ref, what, x, positions, base=None, note=""):
        ok = np.abs(out - ref) <= 1e-6 * (1 + np.abs(ref))
        if not ok.all():
            row = tuple(int(i) for i in np.argwhere(~ok.all(axis=-1))[0])
            raise Failure(f"{what} (row {row}, max error {np.abs(out - ref).max():.3g})"
                          + diagnose(out, x, positions, 10000.0 if base is None else base),
                          self.describe(x, positions, base, note))

    def output_shape(self):
        for batch, n, d in (((), 3, 4), ((2,), 4, 6), ((2, 3), 3, 8)):
            self.run(*self.inputs(batch, n, d, offset=1))

    def preserves_dtype(self):
        x, positions = self.inputs((2,), 4, 8, offset=2)
        self.run(x, positions)
        low = x.astype(np.float32)
        out = self.run(low, positions)
        wide = self.run(low.astype(np.float64), positions)
        if not (np.abs(out - wide) <= 1e-5 * (1 + np.abs(wide))).all():
            raise Failure(f"float32 inputs gave a result that differs from the float64 one "
                          f"by {np.abs(out - wide).max():.3g}, more than float32's "
                          f"rounding", self.describe(low, positions))

    def inputs_unchanged(self):
        for dtype in ("float64", "float32"):
            x, positions = self.inputs((2,), 4, 6, offset=3, dtype=dtype)
            given = x.copy(), positions.copy()
            where = self.describe(x, positions)
            call(self.fn, given, where=where, signature=SIGNATURE)
            for name, a, b in (("x", x, given[0]), ("positions", positions, given[1])):
                if not np.array_equal(a, b):
                    raise Failure(f"the function changed its argument {name} in place",
                                  where)

    def keeps_norms(self):
        x, positions = self.inputs((2,), 5, 8, offset=4)
        out = self.run(x, positions)
        before, after = np.linalg.norm(x, axis=-1), np.linalg.norm(out, axis=-1)
        ok = np.abs(after - before) <= 1e-9 * (1 + before)
        if not ok.all():
            row = tuple(int(i) for i in np.argwhere(~ok)[0])
            raise Failure(f"row {row} changed its length from {before[row]:.4g} to "
                          f"{after[row]:.4g}: a rotation keeps lengths",
                          self.describe(x, positions))

    def position_zero(self):
        x, _ = self.inputs((), 3, 6, offset=5)
        positions = np.zeros(3, np.int64)
        out = self.run(x, positions)
        if not np.allclose(out, x, rtol=1e-9, atol=1e-12):
            row = int(np.argwhere(~np.isclose(out, x, rtol=1e-9, atol=1e-12).all(-1))[0, 0])
            raise Failure(f"row {row}, at position 0, changed"
                          + diagnose(out, x, positions), self.describe(x, positions))

    def uses_positions(self):
        x, positions = self.inputs((), 4, 6, offset=6)
        out = self.run(x, positions)
        for r in range(4):
            alone = self.run(x[r:r + 1], positions[r:r + 1],
                             note=f"row {r} alone")
            if not np.allclose(out[r], alone[0], rtol=1e-9, atol=1e-12):
                raise Failure(f"row {r} gives another result alone, at the same position "
                              f"{positions[r]}: rows are turned by their index in x, not "
                              f"by their position" + diagnose(out, x, positions),
                              self.describe(x, positions))
        if self.frequencies_hold(x, positions, out):
            self.fail_unless_close(out, rotate(x, positions),
                                   "a row is not turned by the angle of its position", x,
                                   positions)

    def frequencies_hold(self, x, positions, out):
        """Whether ``out`` is right up to a wrong frequency (that is ``frequencies``'
        finding); used so that ``uses_positions`` reports only position mistakes."""
        for words, switch in MISTAKES.items():
            if ("exponent" in switch or "sign" in switch or "pairing" in switch) and \
                    np.allclose(out, rotate(x, positions, **switch), rtol=1e-6, atol=1e-9):
                return False
        return True

    def pairing(self):
        d = 8
        for i in range(d // 2):
            x = np.zeros((1, d))
            x[0, i], x[0, i + d // 2] = 1.0, 0.5
            positions = np.array([3])
            out = self.run(x, positions, note=f"only features {i} and {i + d // 2} nonzero")
            others = np.ones(d, bool)
            others[[i, i + d // 2]] = False
            stray = others & (np.abs(out[0]) > 1e-9)
            if stray.any():
                j = int(np.argwhere(stray)[0, 0])
                raise Failure(f"feature {j} became nonzero: feature {i} is not paired "
                              f"with feature {i + d // 2} (rotate-half)"
                              + diagnose(out, x, positions),
                              self.describe(x, positions,
                                            note=f"only features {i} and {i + d // 2} "
                                                 f"nonzero"))

    def frequencies(self):
        d = 8
        x = np.zeros((1, d))
        x[0, :d // 2] = 1.0                                   # every pair at (1, 0)
        positions = np.array([1])
        out = self.run(x, positions, note="every pair (1, 0), at position 1")
        where = self.describe(x, positions, note="every pair (1, 0), at position 1")
        for i in range(d // 2):
            a, b = out[0, i], out[0, i + d // 2]
            want = 10000.0 ** (-2 * i / d)
            if abs(a - math.cos(want)) > 1e-9 or abs(b - math.sin(want)) > 1e-9:
                raise Failure(f"pair {i} (features {i} and {i + d // 2}) does not turn by "
                              f"base ** (-2i / d) radians, counter-clockwise, from "
                              f"position 0 to 1" + diagnose(out, x, positions), where)

    def relative_scores(self):
        rng = np.random.default_rng([self.seed, 7])
        q, k = rng.standard_normal((2, 1, 8))
        for m, n in ((5, 2), (9, 3)):
            scores = []
            for shift in (0, 4, 11):
                pm, pn = np.array([m + shift]), np.array([n + shift])
                rq = self.run(q, pm, note=f"a query at position {m + shift}")
                rk = self.run(k, pn, note=f"a key at position {n + shift}")
                scores.append(float(rq[0] @ rk[0]))
            if max(scores) - min(scores) > 1e-9 * (1 + max(map(abs, scores))):
                raise Failure(f"the score of a query at position m and a key at position "
                              f"n changes when both move by the same offset (m - n = "
                              f"{m - n}, offsets 0, 4 and 11)",
                              f"q and k of shape (1, 8) (seed {self.seed})")

    def uses_base(self):
        x, positions = self.inputs((), 4, 8, offset=8)
        default = self.run(x, positions)
        for base in (500.0, 10.0):
            out = self.run(x, positions, base)
            if np.allclose(out, default, rtol=1e-9, atol=1e-12):
                raise Failure(f"base={base:g} gives the same result as the default base "
                              f"10000: the base is ignored",
                              self.describe(x, positions, base))
            if np.allclose(default, rotate(x, positions), rtol=1e-6, atol=1e-9):
                # (right at the default base: then a wrong result here is the base's)
                self.fail_unless_close(out, rotate(x, positions, base),
                                       f"with base={base:g}, a row is not turned by "
                                       f"position * base ** (-2i / d)", x, positions, base)

    def matches_reference(self):
        from ..positions import rope

        cases = [((), 5, 8, None, 10), ((2,), 4, 6, 500.0, 11), ((2, 3), 3, 16, None, 12),
                 ((), 6, 2, 100.0, 13), ((3,), 7, 12, 10000.0, 14)]
        for batch, n, d, base, offset in cases:
            x, positions = self.inputs(batch, n, d, offset=offset)
            out = self.run(x, positions, base)
            ref = rope(x, positions, base=10000.0 if base is None else base)
            self.fail_unless_close(out, ref, "differs from attncore.rope", x, positions,
                                   base)
