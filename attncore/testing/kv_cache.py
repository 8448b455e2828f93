"""A conformance check for one decoding step with a KV cache that you write yourself.

:func:`check_kv_cache_decode` runs a function that decodes one new position, with a cache
of earlier keys and values and grouped-query attention, on small inputs it has not seen,
compares it with PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)`` over the
whole sequence (attncore's where torch is not installed), and reports property by property
what holds and on which small input something fails, without printing the right output.
Here it checks a step written with attncore::

    >>> import numpy as np
    >>> import attncore as ac
    >>> from attncore.testing import check_kv_cache_decode
    >>> def step(q_new, k_new, v_new, k_cache, v_cache):
    ...     k = np.concatenate([k_cache, k_new], axis=-2)
    ...     v = np.concatenate([v_cache, v_new], axis=-2)
    ...     return ac.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v
    >>> check_kv_cache_decode(step).passed
    True

**The calling convention.** Your function is called as
``fn(q_new, k_new, v_new, k_cache, v_cache)`` with NumPy arrays

* ``q_new`` of shape ``(*batch, h, 1, d)``: the new position's query in each of ``h``
  query heads;
* ``k_new`` and ``v_new`` of shape ``(*batch, h_kv, 1, d)``: its key and value in each
  of ``h_kv`` key/value heads, ``h_kv`` dividing ``h``;
* ``k_cache`` and ``v_cache`` of shape ``(*batch, h_kv, t, d)``: the keys and values of
  the ``t >= 0`` earlier positions (``t = 0``: an empty cache),

``batch`` being ``(2,)`` for most properties and ``()`` for some; float64, and float32 for
``preserves_dtype``. It returns ``(out, k_cache, v_cache)``: ``out`` of shape
``(*batch, h, 1, d)``, the new query attending to all ``t + 1`` positions, its own
included, with the default scale ``1 / sqrt(d)``, query head ``i`` reading key/value head
``i // (h // h_kv)`` (consecutive query heads share a key/value head, as chapter 10 groups
them); and the caches one position longer, ``(*batch, h_kv, t + 1, d)``, the new key and
value appended after the old ones. It leaves its arguments unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport
from .runner import Failure, dtype_name, expect_array, run_properties, to_numpy
from .runner import with_properties

__all__ = ["KVCacheDecodeCheck", "PROPERTIES", "check_kv_cache_decode"]

PROPERTIES = {
    "returns_output_and_caches": "returns a tuple (out, k_cache, v_cache) of finite arrays: "
                                 "out of the shape of q_new, the caches one position "
                                 "longer than they came, for h_kv = h, 1 < h_kv < h and "
                                 "h_kv = 1",
    "caches_grow": "the returned caches are the old ones with k_new and v_new appended "
                   "after their last position (axis -2), the old positions unchanged",
    "empty_cache": "with t = 0 (caches of length 0) the new query attends to itself "
                   "alone: out is v_new of its key/value head",
    "sees_its_own_position": "the new query attends to its own key and value: changing "
                             "v_new changes out (the cache is extended before attending)",
    "sees_the_whole_cache": "the new query attends to every cached position: changing the "
                            "value at any one of them changes out (no causal mask on the "
                            "single new query)",
    "head_grouping": "query head i reads key/value head i // (h // h_kv): changing "
                     "key/value head j changes exactly the query heads of group j",
    "matches_reference": "out equals attention of the new query over all t + 1 positions "
                         "(PyTorch's scaled_dot_product_attention with enable_gqa=True), "
                         "for several t, h and h_kv, with and without batch axes",
    "preserves_dtype": "float32 inputs give float32 out and caches, float64 ones float64, "
                       "out equal to the float64 result to float32's precision",
    "inputs_unchanged": "leaves q_new, k_new, v_new, k_cache and v_cache as they were",
}
"""The properties :func:`check_kv_cache_decode` checks, by name, with what each asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache)"
_NAMES = ("q_new", "k_new", "v_new", "k_cache", "v_cache")


@dataclass(frozen=True)
class KVCacheDecodeCheck(CheckReport):
    """The report of :func:`check_kv_cache_decode`: one result per property of
    :data:`PROPERTIES` (see :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_kv_cache_decode"


def check_kv_cache_decode(fn: Callable[..., Any], *, seed: int = 0) -> KVCacheDecodeCheck:
    """Run the KV-cache decoding properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache)``; see the
        calling convention in this module's description.
    seed : int, default 0
        Seed of the random inputs.

    Returns
    -------
    KVCacheDecodeCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary that never shows the right output.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_kv_cache_decode`` itself. Whatever ``fn`` raises or
        returns is reported as a failure of the property that called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable {SIGNATURE}, got {type(fn).__name__}")
    seed = check_size("seed", seed, minimum=0)
    report = run_properties("check_kv_cache_decode", fn, PROPERTIES, _Runner(fn, seed))
    return KVCacheDecodeCheck(report.function, report.results)


# (h, h_kv, t): multi-head, grouped-query (groups of 2 and of 3), multi-query.
_CASES = ((2, 2, 3), (4, 2, 5), (6, 2, 4), (3, 1, 6))
_BATCH = (2,)
_D = 4


class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, seed):
        self.fn, self.seed = fn, seed

    # --- inputs, calls, reference ---------------------------------------------------

    def inputs(self, h, h_kv, t, offset, batch=_BATCH, d=_D, dtype=np.float64):
        rng = np.random.default_rng([self.seed, offset])
        shapes = ((h, 1, d), (h_kv, 1, d), (h_kv, 1, d), (h_kv, t, d), (h_kv, t, d))
        return [rng.standard_normal(batch + s).astype(dtype) for s in shapes]

    def describe(self, args, note=""):
        q, k_new, _, k_cache, _ = args
        text = (f"q_new {q.shape}, k_new and v_new {k_new.shape}, caches {k_cache.shape} "
                f"(h = {q.shape[-3]}, h_kv = {k_new.shape[-3]}, t = {k_cache.shape[-2]})")
        if q.dtype != np.float64:
            text += f" of dtype {q.dtype}"
        return text + (f", {note}" if note else "") + f" (seed {self.seed})"

    def call(self, args, *, where=None):
        """``fn``'s ``(out, k_cache, v_cache)`` as NumPy arrays; any problem is a
        :class:`Failure`."""
        where = where or self.describe(args)
        copies = [np.array(x) for x in args]
        try:
            result = self.fn(*copies)
        except Exception as err:                               # reported, not raised
            if isinstance(err, TypeError) and ("argument" in str(err)
                                               or "keyword" in str(err)):
                raise Failure(f"the function takes other arguments than the check passes: "
                              f"expected {SIGNATURE}; calling it raised TypeError: {err}",
                              where) from None
            hint = (" (the new position goes on axis -2, the positions axis, of shape "
                    "(..., h_kv, 1, d) against the caches' (..., h_kv, t, d))"
                    if "concatenation axis" in str(err) else "")
            raise Failure(f"the function raised {type(err).__name__}: {err}{hint}",
                          where) from None
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            got = (f"a {type(result).__name__} of {len(result)}"
                   if isinstance(result, (tuple, list)) else type(result).__name__)
            raise Failure(f"expected a tuple (out, k_cache, v_cache), got {got}", where)
        q, _, _, k_cache, _ = args
        longer = k_cache.shape[:-2] + (k_cache.shape[-2] + 1, k_cache.shape[-1])
        dtype = dtype_name(q)
        out = expect_array(result[0], name="out", shape=q.shape, dtype=dtype, where=where)
        caches = []
        for name, value in zip(("k_cache", "v_cache"), result[1:]):
            shape = getattr(to_numpy(value), "shape", None)
            if shape == k_cache.shape:
                raise Failure(f"{name}: expected the cache one position longer, "
                              f"{longer}, got it as long as it came, {shape} (is the new "
                              f"position appended, and the new cache returned?)", where)
            if shape is not None and len(shape) == len(longer) and \
                    shape[-3] == 2 * k_cache.shape[-3] and shape[-2] == k_cache.shape[-2]:
                raise Failure(f"{name}: expected shape {longer} (one more position on "
                              f"axis -2), got {shape}: the new position is concatenated "
                              f"on the heads axis (-3)", where)
            if shape is not None and shape != longer and len(shape) == len(longer) and \
                    math.prod(shape) == math.prod(longer):
                raise Failure(f"{name}: expected shape {longer} (one more position on "
                              f"axis -2), got {shape}: is the new position concatenated "
                              f"on another axis?", where)
            caches.append(expect_array(value, name=name, shape=longer, dtype=dtype,
                                       where=where))
        return out, caches[0], caches[1]

    # --- properties -----------------------------------------------------------------

    def returns_output_and_caches(self):
        for offset, case in enumerate(((4, 2, 1),) + _CASES):
            self.call(self.inputs(*case, offset))

    def caches_grow(self):
        for offset, case in enumerate(_CASES, start=10):
            args = self.inputs(*case, offset)
            where = self.describe(args)
            _, k_out, v_out = self.call(args, where=where)
            t = args[3].shape[-2]
            for name, got, old, new in (("k_cache", k_out, args[3], args[1]),
                                        ("v_cache", v_out, args[4], args[2])):
                if not np.array_equal(got[..., :t, :], old):
                    hint = " (is the new position put first?)" if np.array_equal(
                        got[..., 1:, :], old) else ""
                    raise Failure(f"the returned {name}'s first {t} positions are not the "
                                  f"old cache{hint}", where)
                if not np.array_equal(got[..., t:, :], new):
                    raise Failure(f"the returned {name}'s last position is not "
                                  f"{'k_new' if name[0] == 'k' else 'v_new'}", where)

    def empty_cache(self):
        for offset, (h, h_kv, _) in enumerate(_CASES, start=20):
            args = self.inputs(h, h_kv, 0, offset)
            where = self.describe(args, note="empty caches")
            out, _, _ = self.call(args, where=where)
            want = np.repeat(args[2], h // h_kv, axis=-3)
            if not _close(out, want):
                raise Failure("with an empty cache the new query has one position to "
                              "attend to, its own, yet out is not its value", where)

    def sees_its_own_position(self):
        for offset, case in enumerate(_CASES, start=30):
            args = self.inputs(*case, offset)
            where = self.describe(args, note="v_new changed")
            out, _, _ = self.call(args, where=where)
            changed = list(args)
            changed[2] = args[2] + 10.0
            again, _, _ = self.call(changed, where=where)
            if _close(again, out):
                raise Failure("out does not change when v_new changes: the new query "
                              "does not attend to its own position (is the new key and "
                              "value appended after attending, or hidden by a mask?)", where)

    def sees_the_whole_cache(self):
        for offset, case in enumerate(_CASES, start=40):
            args = self.inputs(*case, offset)
            out, _, _ = self.call(args)
            t = args[3].shape[-2]
            blind = []
            for j in range(t):
                changed = list(args)
                changed[4] = args[4].copy()
                changed[4][..., j, :] += 10.0
                again, _, _ = self.call(changed)
                if _close(again, out):
                    blind.append(j)
            if blind:
                where = self.describe(args, note=f"the value at cached position "
                                                 f"{blind[-1]} changed")
                detail = (f"out does not change when the value at cached position "
                          f"{blind[-1]} changes: the new query does not attend to the "
                          f"whole cache")
                if blind == list(range(1, t)):
                    detail += (" (it reads position 0 alone: a causal mask aligned "
                               "top-left, tril(ones(1, t + 1)), hides the cache; the one "
                               "new query needs no mask)")
                raise Failure(detail, where)

    def head_grouping(self):
        for offset, case in enumerate(_CASES, start=50):
            h, h_kv, _ = case
            if h == h_kv:
                continue
            args = self.inputs(*case, offset)
            out, _, _ = self.call(args)
            g = h // h_kv
            for j in range(h_kv):
                changed = [x.copy() for x in args]
                changed[2][..., j, :, :] += 10.0
                changed[4][..., j, :, :] += 10.0
                again, _, _ = self.call(changed)
                moved = [i for i in range(h)
                         if not _close(again[..., i, :, :], out[..., i, :, :])]
                if moved != list(range(j * g, (j + 1) * g)):
                    where = self.describe(args, note=f"the values of key/value head {j} "
                                                     f"changed")
                    detail = (f"changing key/value head {j} changed query heads {moved}; "
                              f"query head i reads key/value head i // (h // h_kv)")
                    if moved == [i for i in range(h) if i % h_kv == j]:
                        detail += " (the heads are grouped as i % h_kv)"
                    raise Failure(detail, where)

    def matches_reference(self):
        cases = [(case, _BATCH) for case in _CASES] + [((4, 2, 1), ()), ((4, 1, 7), ())]
        for offset, (case, batch) in enumerate(cases, start=60):
            args = self.inputs(*case, offset, batch=batch)
            where = self.describe(args)
            out, _, _ = self.call(args, where=where)
            want = _reference(*args)
            if _close(out, want):
                continue
            detail = "out differs from attention over all t + 1 positions"
            if _close(out, _reference(*args, scale=1.0)):
                detail += " (it equals attention without the scale 1/sqrt(d))"
            raise Failure(detail, where)

    def preserves_dtype(self):
        args = self.inputs(4, 2, 5, 70)
        want, _, _ = self.call(args)
        low = [x.astype(np.float32) for x in args]
        where = self.describe(low)
        try:
            got, _, _ = self.call(low, where=where)
        except Failure as failure:
            if "got float64" in failure.detail:
                failure.detail += _PROMOTION_HINT
            raise
        err = np.abs(got.astype(np.float64) - want).max()
        if err > 1e-4 * max(np.abs(want).max(), 1.0):
            raise Failure(f"out in float32 differs from the float64 result by {err:.3g}, "
                          f"more than float32's rounding explains", where)

    def inputs_unchanged(self):
        args = self.inputs(4, 2, 5, 80)
        kept = [x.copy() for x in args]
        where = self.describe(args)
        try:
            self.fn(*args)
        except Exception as err:                               # reported, not raised
            raise Failure(f"the function raised {type(err).__name__}: {err}",
                          where) from None
        for name, x, y in zip(_NAMES, args, kept):
            if not np.array_equal(x, y):
                raise Failure(f"the function changed its argument {name}", where)


_PROMOTION_HINT = (" (a NumPy float64 number such as np.sqrt(d) turns float32 arrays into "
                   "float64 ones; a Python float such as math.sqrt(d) keeps them float32)")


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.abs(a - b) <= 1e-9 + 1e-7 * np.abs(b)))


def _reference(q_new, k_new, v_new, k_cache, v_cache, scale=None):
    """The new query over the whole sequence, float64, grouped-query attention."""
    k = np.concatenate([k_cache, k_new], axis=-2).astype(np.float64)
    v = np.concatenate([v_cache, v_new], axis=-2).astype(np.float64)
    q = np.asarray(q_new, dtype=np.float64)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        from ..attention import scaled_dot_product_attention

        return scaled_dot_product_attention(q, k, v, enable_gqa=True, scale=scale)
    t = [torch.from_numpy(x[None]) for x in (q, k, v)]        # (a batch axis for torch)
    return F.scaled_dot_product_attention(*t, enable_gqa=True, scale=scale)[0].numpy()
