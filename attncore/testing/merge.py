"""A conformance check for merging two partial attention results, ring attention's step.

Ring attention (chapter 14) and the tiled kernels (chapters 8 and 15) compute attention
over a block of keys at a time and keep, for each query, the block's output and the
log-sum-exp of its scores. :func:`check_merge` runs a function you wrote that merges two
such partials over disjoint key blocks into the partial over their union, and reports,
property by property, what holds and on which small input something fails, without
printing the right answer. Here it catches a merge that averages the two outputs and
keeps the larger log-sum-exp::

    >>> import numpy as np
    >>> from attncore.testing import check_merge
    >>> def average(out_a, lse_a, out_b, lse_b):
    ...     return (out_a + out_b) / 2, np.maximum(lse_a, lse_b)
    >>> check_merge(average).failed[:2]
    ['union_of_blocks', 'order_free']

**The calling convention.** Your function is called as ``fn(out_a, lse_a, out_b, lse_b)``
with ``out_a``, ``out_b`` of shape ``(n_q, d_v)`` (attention over key blocks A and B,
each row normalised over its own block) and ``lse_a``, ``lse_b`` of shape ``(n_q,)``
(each query's log-sum-exp over its block, :math:`\\log \\sum_{j} e^{s_j}`), and returns
the pair ``(out, lse)`` for the keys of A and B together, of the same shapes and of the
inputs' dtype (float64 for most properties, float32 for ``preserves_dtype``), leaving its
arguments unchanged. A query none of whose keys is in a block (a block wholly masked for
it) has there ``lse = -inf`` and an output row of zeros; the merge must then return the
other block's row, and for a query with no key in either block zeros and ``-inf``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport
from .runner import Failure, call, expect_array, run_properties, with_properties

__all__ = ["PROPERTIES", "check_merge"]

PROPERTIES = {
    "returns_pair": "returns a pair (out, lse) of finite arrays of shapes (n_q, d_v) and "
                    "(n_q,)",
    "inputs_unchanged": "leaves out_a, lse_a, out_b and lse_b as they were",
    "union_of_blocks": "the merge of the partials over two disjoint key blocks is "
                       "attention over all their keys, output and log-sum-exp, for "
                       "blocks of equal and of very unequal size and score",
    "order_free": "merging (a, b) and (b, a) gives the same result, and merging three "
                  "blocks in either grouping gives attention over all three",
    "preserves_dtype": "float32 inputs give float32 outputs, float64 ones float64, and "
                       "the same numbers to the precision of the dtype",
    "large_scores": "scores far beyond the range of exp (log-sum-exps near 1000; "
                    "float64's exp overflows above 709) give finite, right results",
    "empty_block": "a query none of whose keys is in one block (lse = -inf, output row "
                   "0) gets the other block's row, not NaN; with no key in either, "
                   "zeros and -inf",
}
"""The properties :func:`check_merge` checks, by name, with what each one asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(out_a, lse_a, out_b, lse_b) -> (out, lse)"


def check_merge(fn: Callable[..., Any], *, seed: int = 0,
                atol: float = 1e-10) -> CheckReport:
    """Run the merge properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(out_a, lse_a, out_b, lse_b) -> (out, lse)``; see the calling convention in
        this module's description.
    seed : int, default 0
        Seed of the random inputs.
    atol : float, default 1e-10
        Absolute tolerance of every float64 comparison (float32's is 1e-4).

    Returns
    -------
    CheckReport
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary; it never contains the right
        answer's values.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_merge`` itself (``fn`` not callable, a negative seed,
        a tolerance that is not positive). Whatever ``fn`` raises is reported as a
        failure of the property that called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable (out_a, lse_a, out_b, lse_b) -> "
                        f"(out, lse), got {type(fn).__name__}")
    seed = check_size("seed", seed, minimum=0)
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol > 0:
        raise ValueError(f"atol: expected a positive number, got {atol!r}")
    return run_properties("check_merge", fn, PROPERTIES, _Runner(fn, seed, float(atol)))


def _partial(scores: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Attention over one block of keys and each row's log-sum-exp; a row whose scores
    are all -inf (no key of the block) gets zeros and -inf."""
    m = scores.max(axis=-1, keepdims=True)
    safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(scores - safe)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, safe[..., 0] + np.log(total[..., 0]), -np.inf)
    out = np.where(total > 0, (e @ v) / np.where(total > 0, total, 1.0), 0.0)
    return out, lse


class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, seed, atol):
        self.fn, self.seed, self.atol = fn, seed, atol

    def scores(self, n_q=4, n_k=7, d_v=3, offset=0, spread=1.0):
        rng = np.random.default_rng([self.seed, offset])
        return rng.standard_normal((n_q, n_k)) * spread, rng.standard_normal((n_k, d_v))

    def describe(self, s, cut, note=""):
        n_q, n_k = s.shape
        text = (f"{n_q} queries, keys 0..{cut - 1} in block a and {cut}..{n_k - 1} in "
                f"block b")
        return text + (f", {note}" if note else "") + f" (seed {self.seed})"

    def run(self, out_a, lse_a, out_b, lse_b, where, dtype="float64", finite_lse=True):
        args = tuple(np.array(x, dtype=dtype) for x in (out_a, lse_a, out_b, lse_b))
        with np.errstate(all="ignore"):      # the learner's warnings: reported below
            result = call(self.fn, args, where=where, signature=SIGNATURE)
        if not isinstance(result, tuple) or len(result) != 2:
            raise Failure(f"expected a pair (out, lse), got {type(result).__name__}"
                          + (f" of length {len(result)}" if isinstance(result, tuple)
                             else ""), where)
        out = expect_array(result[0], name="out", shape=out_a.shape, dtype=dtype,
                           where=where)
        lse = expect_array(result[1], name="lse", shape=lse_a.shape, dtype=dtype,
                           where=where, finite=finite_lse)
        if not finite_lse and np.isnan(lse).any():
            raise Failure("lse: expected numbers or -inf, got NaN", where)
        return out.astype(np.float64), lse.astype(np.float64)

    def split(self, s, v, cut):
        return _partial(s[:, :cut], v[:cut]) + _partial(s[:, cut:], v[cut:])

    def expect_union(self, s, v, cut, note="", dtype="float64", atol=None):
        atol = self.atol if atol is None else atol
        where = self.describe(s, cut, note + (f", dtype {dtype}" if dtype != "float64"
                                              else ""))
        out, lse = self.run(*self.split(s, v, cut), where, dtype)
        want_out, want_lse = _partial(s, v)
        if not np.allclose(lse, want_lse, rtol=0, atol=atol * max(1, np.abs(want_lse).max())):
            raise Failure("lse is not the log-sum-exp over both blocks' keys: the sums "
                          "of exponentials add, so combine the two log-sum-exps as "
                          "a log of a sum", where)
        if not np.allclose(out, want_out, rtol=0, atol=atol):
            raise Failure("out is not attention over both blocks' keys: each block's "
                          "rows must be weighted by that block's share of the total "
                          "sum of exponentials", where)

    # --- the properties ------------------------------------------------------------

    def returns_pair(self):
        s, v = self.scores()
        self.run(*self.split(s, v, 3), self.describe(s, 3))

    def preserves_dtype(self):
        s, v = self.scores(offset=1)
        for dtype, atol in (("float64", self.atol), ("float32", 1e-4)):
            self.expect_union(s, v, 3, dtype=dtype, atol=atol)

    def inputs_unchanged(self):
        s, v = self.scores(offset=2)
        given = tuple(np.array(x) for x in self.split(s, v, 3))
        kept = tuple(x.copy() for x in given)
        with np.errstate(all="ignore"):      # the learner's warnings: reported below
            call(self.fn, given, where=self.describe(s, 3), signature=SIGNATURE)
        for name, before, after in zip(("out_a", "lse_a", "out_b", "lse_b"), kept, given):
            if not np.array_equal(before, after):
                raise Failure(f"the function changed its argument {name} in place; "
                              f"return new arrays instead", self.describe(s, 3))

    def union_of_blocks(self):
        s, v = self.scores(n_q=3, n_k=6, offset=3)
        self.expect_union(s, v, 3, "blocks of equal size")
        s, v = self.scores(n_q=3, n_k=8, offset=4)
        self.expect_union(s, v, 1, "one key against seven")
        s, v = self.scores(n_q=3, n_k=6, offset=5, spread=4.0)
        s[:, 3:] += 5.0                      # block b scores far higher than block a
        self.expect_union(s, v, 3, "block b's scores 5 higher")

    def order_free(self):
        s, v = self.scores(n_q=3, n_k=9, offset=6, spread=2.0)
        out_a, lse_a, out_b, lse_b = self.split(s, v, 4)
        where = self.describe(s, 4, "a and b swapped")
        ab = self.run(out_a, lse_a, out_b, lse_b, where)
        ba = self.run(out_b, lse_b, out_a, lse_a, where)
        if not all(np.allclose(x, y, rtol=0, atol=self.atol) for x, y in zip(ab, ba)):
            raise Failure("merging (a, b) and (b, a) gives different results", where)
        parts = [_partial(s[:, c], v[c]) for c in (slice(0, 3), slice(3, 6), slice(6, 9))]
        where = "3 queries, keys 0..2, 3..5 and 6..8 in three blocks, merged as " \
                f"(a, (b, c)) and ((a, b), c) (seed {self.seed})"
        left = self.run(*self.run(*parts[0], *parts[1], where), *parts[2], where)
        right = self.run(*parts[0], *self.run(*parts[1], *parts[2], where), where)
        want_out, want_lse = _partial(s, v)
        for got in (left, right):
            if not (np.allclose(got[0], want_out, rtol=0, atol=self.atol)
                    and np.allclose(got[1], want_lse, rtol=0, atol=self.atol * 10)):
                raise Failure("merging three blocks is not attention over all three "
                              "in every grouping", where)

    def large_scores(self):
        s, v = self.scores(n_q=3, n_k=6, offset=7)
        s = s * 5 + 990.0                                   # log-sum-exps near 1000
        self.expect_union(s, v, 2, "every score near 990", atol=self.atol * 1e3)

    def empty_block(self):
        s, v = self.scores(n_q=4, n_k=6, offset=8)
        s[0, 3:] = -np.inf                      # query 0: no key in block b
        s[1, :3] = -np.inf                      # query 1: no key in block a
        s[2, :] = -np.inf                       # query 2: no key at all
        where = self.describe(s, 3, "query 0 has no key in block b, query 1 none in "
                                    "block a, query 2 none in either")
        out, lse = self.run(*self.split(s, v, 3), where, finite_lse=False)
        want_out, want_lse = _partial(s, v)
        for row in (0, 1, 3):
            if not (np.allclose(out[row], want_out[row], rtol=0, atol=self.atol)
                    and np.isclose(lse[row], want_lse[row], rtol=0, atol=self.atol)):
                raise Failure(f"query {row} is wrong: a block where a query has no key "
                              f"(lse = -inf) must add nothing to it", where)
        if not (np.all(out[2] == 0) and lse[2] == -np.inf):
            raise Failure("query 2, with no key in either block, should get an output "
                          "row of zeros and lse = -inf", where)
