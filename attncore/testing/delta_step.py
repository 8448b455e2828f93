"""A conformance check for one step of the gated delta rule that you write yourself.

:func:`check_delta_step` runs a function that writes one token into a delta-rule memory,
and reports, property by property, what holds and on which small input something fails,
without printing the right answer. Here it checks attncore's own step::

    >>> import attncore as ac
    >>> from attncore.testing import check_delta_step
    >>> check_delta_step(ac.gated_delta_rule_step).passed
    True

**The calling convention.** Your function is called as ``fn(S, q, k, v, g, beta)`` and
returns the pair ``(o, S_new)`` of

.. math:: S_{new} = g\\, S\\, (I - \\beta\\, k k^\\top) + \\beta\\, v k^\\top, \\qquad
          o = S_{new}\\, q ,

with ``S`` of shape ``(*batch, d_v, d_k)`` (the memory as a map from keys to values),
``q`` and ``k`` of shape ``(*batch, d_k)`` (``k`` of unit length), ``v`` of shape
``(*batch, d_v)``, and ``g`` (the forget gate, in ``(0, 1]``) and ``beta`` (the writing
strength, in ``[0, 1]``) Python floats for one head, ``batch = ()``, or arrays of shape
``batch`` (one gate per head) for ``batch = (2, 3)``. ``o`` has shape ``(*batch, d_v)``,
``S_new`` that of ``S``, both of the inputs' dtype (float64 for most properties,
float32 for ``preserves_dtype``), and the inputs are left unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport
from .runner import Failure, call, expect_array, run_properties, with_properties

__all__ = ["PROPERTIES", "check_delta_step"]

PROPERTIES = {
    "returns_pair": "returns a pair (o, S_new) of finite arrays of shapes (d_v,) and "
                    "(d_v, d_k) for one head, with d_k != d_v",
    "inputs_unchanged": "leaves S, q, k and v as they were",
    "zero_strength_only_forgets": "with beta = 0 nothing is written: S_new = g S",
    "reads_back_the_value": "with beta = 1 and a unit key, the new memory returns v for "
                            "k (S_new k = v), whatever the gate g: the gate scales the "
                            "old memory before the write reads it",
    "orthogonal_directions_kept": "for x orthogonal to k, S_new x = g S x: the write "
                                  "changes only the direction of k",
    "output_reads_new_memory": "o = S_new q, the memory after the write",
    "matches_reference": "agrees with attncore.gated_delta_rule_step on random inputs, "
                         "for several d_k, d_v, g and beta",
    "preserves_dtype": "float32 inputs give float32 outputs, float64 ones float64, and "
                       "the same numbers to the precision of the dtype",
    "batch_axes": "with batch axes (2, 3) and one g and beta per head (arrays of shape "
                  "(2, 3)), every head gets its own step",
}
"""The properties :func:`check_delta_step` checks, by name, with what each one asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(S, q, k, v, g, beta) -> (o, S_new)"


def check_delta_step(fn: Callable[..., Any], *, seed: int = 0,
                     atol: float = 1e-10) -> CheckReport:
    """Run the delta-step properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(S, q, k, v, g, beta) -> (o, S_new)``; see the calling convention in this
        module's description.
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
        Bad arguments to ``check_delta_step`` itself (``fn`` not callable, a negative
        seed). Whatever ``fn`` raises is reported as a failure of the property that
        called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable (S, q, k, v, g, beta) -> (o, S_new), "
                        f"got {type(fn).__name__}")
    seed = check_size("seed", seed, minimum=0)
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol > 0:
        raise ValueError(f"atol: expected a positive number, got {atol!r}")
    return run_properties("check_delta_step", fn, PROPERTIES,
                          _Runner(fn, seed, float(atol)))


def _reference(S, q, k, v, g, beta):
    """S_new = g S (I - beta k k^T) + beta v k^T and o = S_new q, in float64, written
    out with the matrices (the check's own, independent of attncore)."""
    S, q, k, v = (np.asarray(x, dtype=np.float64) for x in (S, q, k, v))
    g = np.asarray(g, dtype=np.float64)[..., None, None]
    beta = np.asarray(beta, dtype=np.float64)[..., None, None]
    eye = np.eye(k.shape[-1])
    outer_kk = k[..., :, None] * k[..., None, :]
    new = g * S @ (eye - beta * outer_kk) + beta * v[..., :, None] * k[..., None, :]
    return np.einsum("...ij,...j->...i", new, q), new


class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, seed, atol):
        self.fn, self.seed, self.atol = fn, seed, atol

    def inputs(self, d_k=3, d_v=2, batch=(), offset=0, dtype="float64"):
        rng = np.random.default_rng([self.seed, offset])
        S = rng.standard_normal(batch + (d_v, d_k))
        q = rng.standard_normal(batch + (d_k,))
        k = rng.standard_normal(batch + (d_k,))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        v = rng.standard_normal(batch + (d_v,))
        return tuple(x.astype(dtype) for x in (S, q, k, v))

    def describe(self, S, g, beta, note=""):
        d_v, d_k = S.shape[-2:]
        text = f"d_k = {d_k}, d_v = {d_v}"
        if S.ndim > 2:
            text += f", batch axes {S.shape[:-2]}"
        if np.ndim(g) == 0:
            text += f", g = {float(g):g}, beta = {float(beta):g}"
        else:
            text += ", one g and beta per head"
        if S.dtype != np.float64:
            text += f", dtype {S.dtype}"
        return text + (f", {note}" if note else "") + f" (seed {self.seed})"

    def run(self, S, q, k, v, g, beta, note=""):
        """``fn``'s ``(o, S_new)`` as checked float arrays; any problem is a Failure."""
        where = self.describe(S, g, beta, note)
        args = tuple(x.copy() for x in (S, q, k, v))
        if S.dtype != np.float64:          # gates of the inputs' dtype, as a model has
            g, beta = (np.asarray(x, dtype=S.dtype)[()] for x in (g, beta))
        with np.errstate(all="ignore"):      # the learner's warnings: reported below
            result = call(self.fn, args + (g, beta), where=where, signature=SIGNATURE)
        if not isinstance(result, tuple) or len(result) != 2:
            raise Failure(f"expected a pair (o, S_new), got {type(result).__name__}"
                          + (f" of length {len(result)}" if isinstance(result, tuple)
                             else ""), where)
        dtype = str(S.dtype)
        o = expect_array(result[0], name="o", shape=v.shape, dtype=dtype, where=where)
        new = expect_array(result[1], name="S_new", shape=S.shape, dtype=dtype,
                           where=where)
        return o.astype(np.float64), new.astype(np.float64), where

    def close(self, a, b, atol=None):
        return np.allclose(a, b, rtol=0, atol=self.atol if atol is None else atol)

    # --- the properties ------------------------------------------------------------

    def returns_pair(self):
        S, q, k, v = self.inputs()
        self.run(S, q, k, v, 0.9, 0.5)

    def preserves_dtype(self):
        for dtype, atol in (("float64", self.atol), ("float32", 1e-4)):
            S, q, k, v = self.inputs(d_k=4, d_v=3, offset=1, dtype=dtype)
            o, new, where = self.run(S, q, k, v, 0.8, 0.6)
            want_o, want_new = _reference(S, q, k, v, 0.8, 0.6)
            if not (self.close(o, want_o, atol) and self.close(new, want_new, atol)):
                raise Failure(f"{dtype} inputs give another step than the definition "
                              f"(beyond {atol:g})", where)

    def inputs_unchanged(self):
        S, q, k, v = self.inputs(offset=2)
        given = tuple(x.copy() for x in (S, q, k, v))
        where = self.describe(S, 0.7, 0.5)
        with np.errstate(all="ignore"):      # the learner's warnings: reported below
            call(self.fn, given + (0.7, 0.5), where=where, signature=SIGNATURE)
        for name, before, after in zip("Sqkv", (S, q, k, v), given):
            if not np.array_equal(before, after):
                raise Failure(f"the function changed its argument {name} in place; "
                              f"return a new array instead", where)

    def zero_strength_only_forgets(self):
        S, q, k, v = self.inputs(offset=3)
        for g in (1.0, 0.5):
            _, new, where = self.run(S, q, k, v, g, 0.0, "nothing to write")
            if not self.close(new, g * S):
                raise Failure("with beta = 0, S_new should be g S (the old memory, "
                              "gated), but it is not: is beta multiplying both the "
                              "erase and the write?", where)

    def reads_back_the_value(self):
        S, q, k, v = self.inputs(offset=4)
        for g in (1.0, 0.5):
            _, new, where = self.run(S, q, k, v, g, 1.0)
            if not self.close(new @ k, v):
                raise Failure("with beta = 1 the new memory should return v for the "
                              "unit key k (S_new k = v), and it does not: the erase "
                              "term removes what the gated memory g S holds along k",
                              where)

    def orthogonal_directions_kept(self):
        S, q, k, v = self.inputs(d_k=4, d_v=2, offset=5)
        x = np.random.default_rng([self.seed, 55]).standard_normal(4)
        x -= (x @ k) * k                                       # orthogonal to k
        _, new, where = self.run(S, q, k, v, 0.6, 0.7)
        if not self.close(new @ x, 0.6 * (S @ x)):
            raise Failure("for a direction x orthogonal to k, S_new x should be g S x "
                          "(the write touches only the direction of k), and it is not",
                          where)

    def output_reads_new_memory(self):
        S, q, k, v = self.inputs(offset=6)
        o, new, where = self.run(S, q, k, v, 0.9, 0.8)
        if not self.close(o, new @ q):
            raise Failure("o is not S_new q, the returned memory read with q: read "
                          "after the write", where)

    def matches_reference(self):
        from .. import gated_delta_rule_step

        cases = [(3, 2, 1.0, 1.0), (2, 3, 0.5, 0.3), (5, 4, 0.9, 0.0), (4, 6, 0.25, 0.75)]
        for i, (d_k, d_v, g, beta) in enumerate(cases):
            S, q, k, v = self.inputs(d_k, d_v, offset=10 + i)
            o, new, where = self.run(S, q, k, v, g, beta)
            want_o, want_new = gated_delta_rule_step(S, q, k, v, g, beta)
            if not self.close(new, want_new):
                raise Failure("S_new differs from attncore.gated_delta_rule_step's "
                              f"(beyond {self.atol:g})", where)
            if not self.close(o, want_o):
                raise Failure("o differs from attncore.gated_delta_rule_step's "
                              f"(beyond {self.atol:g})", where)

    def batch_axes(self):
        from .. import gated_delta_rule_step

        batch = (2, 3)
        S, q, k, v = self.inputs(4, 3, batch=batch, offset=20)
        rng = np.random.default_rng([self.seed, 21])
        g, beta = rng.uniform(0.3, 1.0, batch), rng.uniform(0.0, 1.0, batch)
        o, new, where = self.run(S, q, k, v, g, beta)
        want_o, want_new = gated_delta_rule_step(S, q, k, v, g, beta)
        bad = ~(np.isclose(new, want_new, rtol=0, atol=self.atol).all(axis=(-2, -1))
                & np.isclose(o, want_o, rtol=0, atol=self.atol).all(axis=-1))
        if bad.any():
            head = tuple(int(i) for i in np.argwhere(bad)[0])
            raise Failure(f"head {head} gets another step than its own: each head has "
                          f"its own g and beta, which act on its own memory", where)
