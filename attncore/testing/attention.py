"""A conformance check for attention functions you write yourself.

:func:`check_attention` runs the course's property suite on any function that computes
scaled dot-product attention, and reports, property by property, what holds and on which
small input something fails. Here it checks PyTorch's own function, wrapped to take and
return NumPy arrays::

    >>> import torch
    >>> import torch.nn.functional as F
    >>> from attncore.testing import check_attention
    >>> def torch_attention(q, k, v):
    ...     t = [torch.from_numpy(x) for x in (q, k, v)]
    ...     return F.scaled_dot_product_attention(*t).numpy()
    >>> report = check_attention(torch_attention, mask=False, causal=False)
    >>> report.passed
    True

**The calling convention.** Your function is called as ``fn(q, k, v)``, ``fn(q, k, v, mask=mask)``,
``fn(q, k, v, causal=True)`` or ``fn(q, k, v, mask=mask, causal=True)`` (a keyword is
passed only when a property needs it), and, if you declare ``dropout=True``, as
``fn(q, k, v, dropout_p=p)``, drawing its own random numbers, with

* ``q`` of shape ``(*batch, n_q, d_k)``, ``k`` of shape ``(*batch, n_k, d_k)`` and ``v``
  of shape ``(*batch, n_k, d_v)``: NumPy arrays (or CPU torch tensors with
  ``backend="torch"``), float64 for most properties and float32 too (float16 if you
  claim it, see ``dtypes``) for ``preserves_dtype`` and ``inputs_unchanged``, ``batch``
  being ``batch_shape`` (``(2, 3)`` by default: batch and heads; pass ``()`` for a
  function written for single sequences). Square (``n_q = n_k``) and non-square inputs, with ``n_q < n_k`` and
  ``n_q > n_k``, and several widths ``d_k`` and ``d_v``, whatever keywords ``fn`` takes;
* ``mask`` a boolean array of exactly the scores' shape ``(*batch, n_q, n_k)``,
  ``True`` meaning "query i may attend to key j";
* ``causal=True`` meaning query ``i`` may attend to keys ``0..i`` only, combined with
  ``mask`` by AND. This is the course's convention, and PyTorch's ``is_causal``: the
  mask is aligned at the **top-left** corner, ``tril(ones(n_q, n_k))``, also when
  ``n_q != n_k``. (A decoder's new queries against a cache of earlier keys are aligned
  at the bottom-right instead, :func:`attncore.bottom_right_causal_mask`; that is not
  what ``causal=True`` means here, and ``causal_top_left`` says so when it finds it.)

It must return ``out`` of shape ``(*batch, n_q, d_v)`` and of the dtype of ``q``, or a
pair ``(out, weights)`` with ``weights`` of shape ``(*batch, n_q, n_k)``, using the
default scale ``1 / sqrt(d_k)``, and leave its arguments unchanged. A query whose keys
are all masked has no distribution to average: the course's convention (and attncore's)
is a row of zeros, never NaN. Pass ``mask=False`` or
``causal=False`` to :func:`check_attention` if your function takes no such keyword; the
properties that need it are then skipped. Dropout is checked only where declared
(``dropout=True``): a function without it needs no keyword.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_flag, check_real, check_size
from .runner import with_properties
from .report import CheckReport, PropertyResult
from .runner import DTYPE_HINT, Failure, Skip, dtype_name as _dtype_name, \
    function_name as _name, group_same_errors, run_properties, to_numpy as _to_numpy

__all__ = ["AttentionCheck", "PropertyResult", "PROPERTIES", "check_attention"]

PROPERTIES = {
    "output_shape": "returns finite values of shape (batch..., n_q, d_v) (and weights of "
                    "the scores' shape, if any), for n_q < n_k, n_q = n_k and n_q > n_k",
    "preserves_dtype": "float32 inputs give float32 outputs (float16 ones float16, if "
                       "claimed), float64 ones float64, and the same numbers to the "
                       "precision of the dtype",
    "float64_precision": "float64 inputs are computed in float64: with every value row "
                         "equal to one vector u, the output is u to 1e-12 (float32 "
                         "arithmetic errs by about 1e-7)",
    "inputs_unchanged": "leaves q, k, v and mask as they were, under every combination "
                        "of mask and causal it takes, in every dtype",
    "rows_sum_to_one": "returned weights are >= 0, sum to 1 per query, are 0 where masked, "
                       "and out = weights @ v",
    "convex_combination": "each output is a weighted average of the values: within their "
                          "range, and equal to v when every value row is the same",
    "large_scores": "scores far beyond the range of exp (up to 1000; float64's exp "
                    "overflows above 709) give finite outputs within the range of the "
                    "values: the softmax subtracts each row's largest score first",
    "permutation_equivariance": "permuting queries permutes the outputs; permuting keys "
                                "with their values changes nothing",
    "no_future_leakage": "under causal=True, output i does not change when keys and "
                         "values after i change",
    "causal_prefix": "under causal=True, output i equals attention of query i over keys "
                     "0..i alone",
    "causal_top_left": "under causal=True with n_q < n_k and with n_q > n_k, query i "
                       "still sees keys 0..i: the mask is tril(ones(n_q, n_k)), aligned "
                       "top-left",
    "no_padding_leakage": "keys a padding mask excludes have no influence: the output "
                          "equals attention over the real keys alone",
    "fully_masked_rows": "a query with every key masked gets zeros (not NaN), and the "
                         "other rows are unaffected",
    "matches_reference": "agrees with PyTorch's scaled_dot_product_attention (attncore's "
                         "NumPy reference when torch is not installed), with n_q < n_k, "
                         "n_q = n_k and n_q > n_k and several widths d_k and d_v",
    "dropout": "with dropout_p = 0 the output is unchanged; with dropout_p = 0.5 the "
               "outputs vary from call to call and average the output without dropout "
               "(the kept weights are divided by 1 - dropout_p)",
}
"""The properties :func:`check_attention` checks, by name, with what each one asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)


@dataclass(frozen=True)
class AttentionCheck(CheckReport):
    """The report of :func:`check_attention`: one result per property of
    :data:`PROPERTIES` (see :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_attention"


_Failure, _Skip = Failure, Skip


def check_attention(fn: Callable[..., Any], *, mask: bool = True, causal: bool = True,
                    batch_shape: tuple[int, ...] = (2, 3), backend: str = "numpy",
                    dtypes: tuple[str, ...] = ("float32",), atol: float = 1e-6,
                    rtol: float = 1e-6, seed: int = 0,
                    dropout: bool = False) -> AttentionCheck:
    """Run the course's attention properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(q, k, v[, mask=...][, causal=True]) -> out`` or ``(out, weights)``; see the
        calling convention in this module's description.
    mask : bool, default True
        Whether ``fn`` takes a ``mask`` keyword; if False, the mask properties are skipped.
    causal : bool, default True
        Whether ``fn`` takes a ``causal`` keyword; if False, the causal properties are
        skipped.
    batch_shape : tuple of int, default (2, 3)
        The leading axes of every input; ``()`` for a function of 2-D arrays.
    backend : {"numpy", "torch"}, default "numpy"
        Pass NumPy arrays, or CPU torch tensors (outputs may be either).
    dtypes : tuple of str, default ("float32",)
        The dtypes besides float64 that ``fn`` claims to keep (``preserves_dtype``):
        float32 always; add ``"float16"`` if ``fn`` claims half precision too (its
        numbers are then compared to 1e-2, float32's to 1e-4).
    atol, rtol : float, default 1e-6
        Tolerances of every float64 comparison (``|a - b| <= atol + rtol * |b|``).
    seed : int, default 0
        Seed of the random inputs.
    dropout : bool, default False
        Whether ``fn`` takes a ``dropout_p`` keyword (attention dropout, drawn from its
        own random source); if False, the ``dropout`` property is skipped.

    Returns
    -------
    AttentionCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary. Where one error (an exception with
        the same message up to its numbers) makes several properties fail, the first of
        them reports it and the others say that they fail with it.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_attention`` itself. Whatever ``fn`` raises is reported
        as a failure of the property that called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable attention function, got "
                        f"{type(fn).__name__}")
    mask, causal = check_flag("mask", mask), check_flag("causal", causal)
    dropout = check_flag("dropout", dropout)
    if not isinstance(batch_shape, tuple):
        raise TypeError(f"batch_shape: expected a tuple of integers, got "
                        f"{type(batch_shape).__name__}")
    batch_shape = tuple(check_size("batch_shape", b) for b in batch_shape)
    if backend not in ("numpy", "torch"):
        raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
    atol, rtol = check_real("atol", atol, minimum=0), check_real("rtol", rtol, minimum=0)
    if not isinstance(dtypes, tuple) or "float32" not in dtypes or \
            not set(dtypes) <= set(_LOW_PRECISION):
        raise ValueError(f"dtypes: expected ('float32',) or ('float32', 'float16'), got "
                         f"{dtypes!r}")
    seed = check_size("seed", seed, minimum=0)
    runner = _Runner(fn, mask, causal, batch_shape, backend, atol, rtol, seed)
    runner.dtypes, runner.has_dropout = dtypes, dropout
    report = run_properties("check_attention", fn, PROPERTIES, runner)
    return AttentionCheck(report.function, group_same_errors(report.results))


# Relative tolerances of preserves_dtype, by dtype: float32 and float16 round every score,
# exponential and sum (float16 inputs may be computed in float32 and rounded once).
_LOW_PRECISION = {"float32": 1e-4, "float16": 1e-2}


class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, has_mask, has_causal, batch, backend, atol, rtol, seed):
        self.fn, self.has_mask, self.has_causal = fn, has_mask, has_causal
        self.batch, self.backend, self.atol, self.rtol, self.seed = \
            batch, backend, atol, rtol, seed
        self.dtypes = ("float32",)
        self.has_dropout = False
        self._weights = None                         # does fn return weights? (first call)

    # --- inputs and calls ------------------------------------------------------------

    def qkv(self, n_q, n_k, d_k=4, d_v=3, offset=0, spread=1.0):
        rng = np.random.default_rng([self.seed, offset])
        b = self.batch
        return (rng.standard_normal(b + (n_q, d_k)) * spread,
                rng.standard_normal(b + (n_k, d_k)) * spread,
                rng.standard_normal(b + (n_k, d_v)))

    def flag_sets(self):
        """Every combination of keywords ``fn`` takes: ``(mask?, causal)`` pairs."""
        return [(m, c) for m in ((False, True) if self.has_mask else (False,))
                for c in ((False, True) if self.has_causal else (False,))]

    def describe(self, q, k, v, mask=None, causal=False, note=""):
        text = f"q {q.shape}, k {k.shape}, v {v.shape}"
        if q.dtype != np.float64:
            text += f" of dtype {q.dtype}"
        if mask is not None:
            text += f", mask {mask.shape}"
        if causal:
            text += ", causal=True"
        return text + (f", {note}" if note else "") + f" (seed {self.seed})"

    def convert(self, x):
        """A fresh copy of ``x`` in the backend's library, for ``fn``."""
        if self.backend == "torch":
            import torch

            return torch.from_numpy(np.array(x))
        return np.array(x)

    def invoke(self, q, k, v, mask=None, causal=False, *, where="", dropout_p=None):
        """``fn``'s raw result and the arguments it was given (its own copies)."""
        kwargs = {}
        if mask is not None:
            kwargs["mask"] = self.convert(mask)
        if causal:
            kwargs["causal"] = True
        if dropout_p is not None:
            kwargs["dropout_p"] = dropout_p
        args = [self.convert(x) for x in (q, k, v)]
        try:
            result = self.fn(*args, **kwargs)
        except Exception as err:                                # reported, not raised
            hint = ""
            if isinstance(err, ValueError) and "core dimension" in str(err) and \
                    np.ndim(k) > 2:
                hint = (" (k has batch axes, (..., n_k, d_k): k.T reverses every axis, "
                        "not only the last two)")
            if isinstance(err, TypeError) and "keyword" in str(err):
                hint = (" (if fn takes no such keyword, pass mask=False or causal=False "
                        "to check_attention)")
            raise _Failure(f"fn raised {type(err).__name__}: {err}{hint}",
                           where or self.describe(q, k, v, mask, causal)) from None
        return result, args, kwargs

    def call(self, q, k, v, mask=None, causal=False, *, where="", dtype_of=False,
             dropout_p=None):
        """``fn``'s result as NumPy ``(out, weights or None)``; any problem is a failure.
        With ``dtype_of``, the dtypes of the result as given are returned too."""
        result = self.invoke(q, k, v, mask, causal, where=where, dropout_p=dropout_p)[0]
        out, weights = (result if isinstance(result, tuple) and len(result) == 2
                        else (result, None))
        given = (_dtype_name(out), None if weights is None else _dtype_name(weights))
        out, weights = _to_numpy(out), _to_numpy(weights)
        if self._weights is None:
            self._weights = weights is not None
        expected = q.shape[:-1] + (v.shape[-1],)
        where = where or self.describe(q, k, v, mask, causal)
        if not isinstance(out, np.ndarray) or out.shape != expected:
            got = getattr(out, "shape", type(out).__name__)
            raise _Failure(f"expected out of shape {expected}, got {got}", where)
        if weights is not None:
            expected_w = q.shape[:-1] + (k.shape[-2],)
            if not isinstance(weights, np.ndarray) or weights.shape != expected_w:
                got = getattr(weights, "shape", type(weights).__name__)
                raise _Failure(f"expected weights of shape {expected_w}, got {got}", where)
        return (out, weights, given) if dtype_of else (out, weights)

    def close(self, a, b):
        return np.abs(a - b) <= self.atol + self.rtol * np.abs(b)

    def first_bad(self, ok):
        """Index (batch..., row) of the first output row where ``ok`` fails."""
        rows = ok.all(axis=-1) if ok.ndim == len(self.batch) + 2 else ok
        return tuple(int(i) for i in np.argwhere(~rows)[0])

    def padding(self, n_q, n_k):
        """A key-padding mask of exactly the scores' shape: batch entry b keeps
        ``lengths[b]`` keys (the first axis of ``batch``; all keys without batch axes)."""
        lead = self.batch[0] if self.batch else 1
        lengths = np.array([n_k - 1 - (2 * b) % (n_k - 1) for b in range(lead)])  # 1..n_k-1
        keys = np.arange(n_k) < lengths[:, None]                     # (lead, n_k)
        if not self.batch:
            keys = keys[0]
        else:
            keys = keys.reshape((lead,) + (1,) * (len(self.batch) - 1) + (n_k,))
        return np.broadcast_to(keys[..., None, :], self.batch + (n_q, n_k)).copy(), lengths

    def random_mask(self, n_q, n_k, offset):
        rng = np.random.default_rng([self.seed, offset])
        m = rng.random(self.batch + (n_q, n_k)) < 0.6
        m[..., rng.integers(n_k)] = True            # every row keeps at least one key
        return m

    # --- the properties ----------------------------------------------------------------

    def output_shape(self):
        for n_q, n_k, d_k, d_v in ((5, 7, 4, 3), (6, 6, 8, 5), (7, 4, 3, 6)):
            q, k, v = self.qkv(n_q, n_k, d_k, d_v)
            out, weights = self.call(q, k, v)
            if not np.isfinite(out).all():
                raise _Failure("out holds NaN or infinity", self.describe(q, k, v))
            if weights is not None and not np.isfinite(weights).all():
                raise _Failure("weights hold NaN or infinity", self.describe(q, k, v))

    def preserves_dtype(self):
        cases = [(5, 7, 4, 3, False), (7, 4, 8, 5, False)]
        if self.has_causal:
            cases.append((6, 6, 4, 3, True))
        for dtype in ("float64",) + tuple(d for d in _LOW_PRECISION if d in self.dtypes):
            for n_q, n_k, d_k, d_v, c in cases:
                q, k, v = (x.astype(dtype) for x in self.qkv(n_q, n_k, d_k, d_v, offset=21))
                where = self.describe(q, k, v, causal=c)
                out, weights, given = self.call(q, k, v, causal=c, where=where,
                                                dtype_of=True)
                for what, got in zip(("out", "weights"), given):
                    if got is not None and got != dtype:
                        hint = DTYPE_HINT.replace("(d)", "(d_k)").replace(
                            "x.dtype", "q.dtype") if got == "float64" else ""
                        raise _Failure(f"{dtype} inputs gave {what} of dtype {got}, "
                                       f"expected {dtype}{hint}", where)
                if dtype == "float64":
                    continue
                wide, _ = self.call(*(x.astype(np.float64) for x in (q, k, v)), causal=c,
                                    where=where)
                tol = _LOW_PRECISION[dtype]
                ok = np.abs(out.astype(np.float64) - wide) <= tol * (1 + np.abs(wide))
                if not ok.all():
                    raise _Failure(f"{dtype} inputs gave an output {self.first_bad(ok)} "
                                   f"that differs from the float64 answer by more than "
                                   f"{tol:g} (max error "
                                   f"{np.abs(out.astype(np.float64) - wide).max():.3g})",
                                   where)

    def float64_precision(self):
        q, k, v = self.qkv(5, 7, offset=34)
        # every value row the same u, whose entries float32 cannot hold (1 + 1e-9 j): the
        # exact output is u, and float64 arithmetic gives it to about 1e-15
        u = 1.0 + 1e-9 * np.arange(1, 4)
        same = np.broadcast_to(u, v.shape).copy()
        where = self.describe(q, k, same, note="every value row 1 + 1e-9 * (1, 2, 3)")
        out, _ = self.call(q, k, same, where=where)
        error = np.abs(out - u)
        ok = error <= 1e-12
        if not ok.all():
            raise _Failure(f"output {self.first_bad(ok)} differs from the common value row "
                           f"by {error.max():.3g}, where float64 arithmetic errs by about "
                           f"1e-15: float64 inputs are not computed in float64", where)

    def inputs_unchanged(self):
        shapes = ((5, 7, 4, 3), (6, 6, 4, 3), (7, 4, 5, 2))
        dtypes = ("float64",) + tuple(d for d in _LOW_PRECISION if d in self.dtypes)
        for dtype in dtypes:
            for i, (n_q, n_k, d_k, d_v) in enumerate(shapes):
                for has_m, c in self.flag_sets():
                    q, k, v = (x.astype(dtype) for x in self.qkv(n_q, n_k, d_k, d_v,
                                                                  offset=1 + i))
                    m = self.random_mask(n_q, n_k, 1 + i) if has_m else None
                    where = self.describe(q, k, v, m, c)
                    _, args, kwargs = self.invoke(q, k, v, m, c, where=where)
                    for name, before, after in zip("qkv", (q, k, v), args):
                        if not np.array_equal(before, _to_numpy(after)):
                            raise _Failure(f"fn changed its argument {name} in place "
                                           f"({_flags(has_m, c)})", where)
                    if m is not None and not np.array_equal(m, _to_numpy(kwargs["mask"])):
                        raise _Failure(f"fn changed its argument mask in place "
                                       f"({_flags(has_m, c)})", where)

    def rows_sum_to_one(self):
        if not self._weights:
            raise _Skip("fn returns no weights")
        cases = [(self.qkv(5, 7, offset=2), None, False),
                 (self.qkv(6, 6, offset=22), None, False)]
        if self.has_mask:
            cases.append((self.qkv(5, 7, offset=3), self.random_mask(5, 7, 3), False))
        if self.has_causal:
            cases.append((self.qkv(6, 6, offset=4), None, True))
            cases.append((self.qkv(4, 7, offset=23), None, True))
        for (q, k, v), m, c in cases:
            out, w = self.call(q, k, v, m, c)
            where = self.describe(q, k, v, m, c)
            if w is None:
                raise _Failure("fn returned weights on one call but not on another", where)
            if (w < 0).any():
                raise _Failure(f"a weight is negative: {w.min():.3g}", where)
            allowed = np.ones(w.shape, bool) if m is None else m.copy()
            if c:
                allowed &= np.tri(*w.shape[-2:], dtype=bool)
            if (w[~allowed] != 0).any():
                raise _Failure(f"a masked key has weight {np.abs(w[~allowed]).max():.3g}, "
                               f"expected 0", where)
            ok = self.close(w.sum(axis=-1), np.ones(w.shape[:-1]))
            if not ok.all():
                i = self.first_bad(ok)
                raise _Failure(f"weights of query {i} sum to {w.sum(axis=-1)[i]:.6g}, "
                               f"expected 1", where)
            ok = self.close(out, w @ v)
            if not ok.all():
                raise _Failure(f"out differs from weights @ v at query "
                               f"{self.first_bad(ok)}", where)

    def convex_combination(self):
        cases = [(5, 7, None, False, 5), (6, 6, None, False, 24), (4, 300, None, False, 6)]
        if self.has_mask:
            cases.append((5, 7, self.random_mask(5, 7, 7), False, 7))
        if self.has_causal:
            cases.append((6, 6, None, True, 8))
        for n_q, n_k, m, c, offset in cases:
            q, k, v = self.qkv(n_q, n_k, offset=offset, spread=2.0)
            note = "keys in several blocks" if n_k > 100 else ""
            out, _ = self.call(q, k, v, m, c)
            lo = v.min(axis=-2, keepdims=True) - self.atol
            hi = v.max(axis=-2, keepdims=True) + self.atol
            ok = (out >= lo) & (out <= hi)
            if not ok.all():
                i = self.first_bad(ok)
                raise _Failure(f"output {i} leaves the range of the values",
                               self.describe(q, k, v, m, c, note))
            same = np.broadcast_to(v[..., :1, :], v.shape).copy()     # every row equal
            out, _ = self.call(q, k, same, m, c)
            ok = self.close(out, np.broadcast_to(same[..., :1, :], out.shape))
            if not ok.all():
                i = self.first_bad(ok)
                raise _Failure(f"with every value row equal to c, output {i} is not c "
                               f"(max error {np.abs(out - same[..., :1, :]).max():.3g}): "
                               f"the weights do not sum to 1",
                               self.describe(q, k, same, m, c,
                                             ("equal value rows, " + note).strip(", ")))

    def large_scores(self):
        q, k, v = self.qkv(5, 7, offset=33)
        # scale the queries so that the largest |score| is 1000 (scores are linear in q)
        top = np.abs(q @ np.swapaxes(k, -1, -2)).max() / math.sqrt(q.shape[-1])
        q = q * (1000.0 / top)
        where = self.describe(q, k, v, note="scores up to 1000 in size")
        out, weights = self.call(q, k, v, where=where)
        for what, x in (("out", out), ("weights", weights)):
            if x is not None and not np.isfinite(x).all():
                raise _Failure(f"{what} holds NaN or infinity with scores up to 1000 in "
                               f"size: exp overflows float64 above 709, so the softmax "
                               f"must subtract each row's largest score first", where)
        lo = v.min(axis=-2, keepdims=True) - self.atol
        hi = v.max(axis=-2, keepdims=True) + self.atol
        ok = (out >= lo) & (out <= hi)
        if not ok.all():
            raise _Failure(f"with scores up to 1000 in size, output {self.first_bad(ok)} "
                           f"leaves the range of the values", where)

    def permutation_equivariance(self):
        rng = np.random.default_rng([self.seed, 9])
        q, k, v = self.qkv(5, 7, offset=9)
        m = self.random_mask(5, 7, 9) if self.has_mask else None
        out, _ = self.call(q, k, v, m)
        pq, pk = rng.permutation(5), rng.permutation(7)
        out_q, _ = self.call(q[..., pq, :], k, v, None if m is None else m[..., pq, :])
        ok = self.close(out_q, out[..., pq, :])
        if not ok.all():
            raise _Failure(f"permuting the queries by {pq.tolist()} did not permute the "
                           f"outputs the same way", self.describe(q, k, v, m))
        out_k, _ = self.call(q, k[..., pk, :], v[..., pk, :],
                             None if m is None else m[..., pk])
        ok = self.close(out_k, out)
        if not ok.all():
            raise _Failure(f"permuting keys and values together by {pk.tolist()} changed "
                           f"output {self.first_bad(ok)}", self.describe(q, k, v, m))

    def causal_run(self, offset, n=6):
        """``(q, k, v, out)`` of one causal call on ``n`` tokens (skipped without causal)."""
        if not self.has_causal:
            raise _Skip("fn takes no causal keyword (causal=False)")
        q, k, v = self.qkv(n, n, offset=offset)
        return q, k, v, self.call(q, k, v, causal=True)[0]

    def no_future_leakage(self):
        q, k, v, out = self.causal_run(10)
        n = q.shape[-2]
        rng = np.random.default_rng([self.seed, 11])
        for t in range(1, n):
            k2, v2 = k.copy(), v.copy()
            k2[..., t:, :] = rng.standard_normal(k2[..., t:, :].shape) * 10
            v2[..., t:, :] = rng.standard_normal(v2[..., t:, :].shape) * 10
            out2, _ = self.call(q, k2, v2, causal=True)
            ok = self.close(out2[..., :t, :], out[..., :t, :])
            if not ok.all():
                i = self.first_bad(ok)
                raise _Failure(f"output {i} changed when keys and values {t}.. changed "
                               f"(max change {np.abs(out2 - out)[..., :t, :].max():.3g})",
                               self.describe(q, k, v, causal=True))

    def causal_prefix(self):
        q, k, v, out = self.causal_run(12)
        for i in range(q.shape[-2]):
            alone, _ = self.call(q[..., i:i + 1, :], k[..., :i + 1, :], v[..., :i + 1, :])
            ok = self.close(out[..., i:i + 1, :], alone)
            if not ok.all():
                raise _Failure(f"output {i} differs from attention of query {i} over keys "
                               f"0..{i} alone (max error "
                               f"{np.abs(out[..., i:i + 1, :] - alone).max():.3g})",
                               self.describe(q, k, v, causal=True))

    def causal_top_left(self):
        if not self.has_causal:
            raise _Skip("fn takes no causal keyword (causal=False)")
        for n_q, n_k, d_k, d_v, offset in ((4, 7, 4, 3, 25), (7, 4, 6, 5, 26)):
            q, k, v = self.qkv(n_q, n_k, d_k, d_v, offset=offset)
            where = self.describe(q, k, v, causal=True,
                                  note=f"n_q {'<' if n_q < n_k else '>'} n_k")
            out, _ = self.call(q, k, v, causal=True, where=where)
            # attention of query i over keys 0..last alone (no keys: zeros)
            def alone(i, last):
                if last < 0:
                    return np.zeros(out[..., i:i + 1, :].shape)
                return self.call(q[..., i:i + 1, :], k[..., :last + 1, :],
                                 v[..., :last + 1, :], where=where)[0]
            for i in range(n_q):
                last = min(i, n_k - 1)
                if self.close(out[..., i:i + 1, :], alone(i, last)).all():
                    continue
                detail = (f"output {i} differs from attention of query {i} over keys "
                          f"0..{last} (top-left: tril(ones(n_q, n_k)))")
                for shift, name in ((n_k - n_q, "aligned bottom-right, "
                                     "tril(ones(n_q, n_k), k=n_k-n_q)"),
                                    (1, "shifted by one, j <= i + 1"),
                                    (-1, "shifted by one, j < i")):
                    # (named only if every row fits it: zeros are no alignment)
                    seen = min(i + shift, n_k - 1)
                    if seen != last and all(
                            self.close(out[..., r:r + 1, :],
                                       alone(r, min(r + shift, n_k - 1))).all()
                            for r in range(n_q)):
                        keys = f"keys 0..{seen}" if seen >= 0 else "no key"
                        detail += f"; it equals attention over {keys}: the mask is {name}"
                        break
                raise _Failure(detail, where)

    def no_padding_leakage(self):
        if not self.has_mask:
            raise _Skip("fn takes no mask keyword (mask=False)")
        n_q, n_k = 5, 7
        q, k, v = self.qkv(n_q, n_k, offset=13)
        m, lengths = self.padding(n_q, n_k)
        note = f"padding mask, lengths {lengths.tolist()} along batch axis 0"
        where = self.describe(q, k, v, m, note=note)
        out, _ = self.call(q, k, v, m, where=where)
        rng = np.random.default_rng([self.seed, 14])
        k2, v2 = k.copy(), v.copy()
        pad = ~m[..., 0, :]                                        # (*batch, n_k)
        k2[pad] = rng.standard_normal(k2[pad].shape) * 10
        v2[pad] = rng.standard_normal(v2[pad].shape) * 10
        out2, _ = self.call(q, k2, v2, m, where=where)
        ok = self.close(out2, out)
        if not ok.all():
            raise _Failure(f"output {self.first_bad(ok)} changed when padded keys and "
                           f"values changed (max change {np.abs(out2 - out).max():.3g})",
                           where)
        for b, length in enumerate(lengths.tolist()):
            sl = slice(b, b + 1) if self.batch else slice(None)      # keep every axis
            # (at most `length` queries per call: a function that is wrong only when
            # n_q > n_k is matches_reference's finding, not a padding leak)
            for r in range(0, n_q, length):
                alone, _ = self.call(q[sl][..., r:r + length, :], k[sl][..., :length, :],
                                     v[sl][..., :length, :], where=where)
                ok = self.close(out[sl][..., r:r + length, :], alone)
                if not ok.all():
                    raise _Failure(f"batch entry {b} differs from attention over its "
                                   f"{length} real keys alone", where)

    def fully_masked_rows(self):
        if not self.has_mask:
            raise _Skip("fn takes no mask keyword (mask=False)")
        n_q, n_k = 5, 7
        q, k, v = self.qkv(n_q, n_k, offset=15)
        m = self.random_mask(n_q, n_k, 15)
        m[..., 1, :] = False                                   # query 1 sees no key at all
        if self.batch:
            m[(0,) * len(self.batch) + (3,)] = False          # and query 3 of one entry
        where = self.describe(q, k, v, m, note="query 1 has every key masked")
        out, w = self.call(q, k, v, m, where=where)
        empty = ~m.any(axis=-1)
        if not np.isfinite(out[empty]).all():
            raise _Failure("a fully masked query's output holds NaN or infinity, "
                           "expected zeros", where)
        if (out[empty] != 0).any():
            raise _Failure(f"a fully masked query's output is not zero (max "
                           f"{np.abs(out[empty]).max():.3g}), expected zeros", where)
        if w is not None and not (np.isfinite(w[empty]).all() and (w[empty] == 0).all()):
            raise _Failure("a fully masked query's weights are not zeros", where)
        filled = m.copy()
        filled[empty] = True
        ref, _ = self.call(q, k, v, filled, where=where)
        ok = self.close(out[~empty], ref[~empty])
        if not ok.all():
            raise _Failure("rows with admissible keys changed because another row is "
                           "fully masked", where)

    def matches_reference(self):
        reference, name = _reference()
        several = "keys in several blocks"
        cases = [("", self.qkv(5, 7, d_k=8, offset=16), None, False),
                 ("", self.qkv(6, 6, d_k=4, d_v=5, offset=27), None, False),
                 ("", self.qkv(7, 4, d_k=16, d_v=8, offset=28), None, False),
                 ("", self.qkv(3, 5, d_k=1, d_v=1, offset=29), None, False),
                 (several, self.qkv(4, 300, d_k=8, offset=17, spread=1.5), None, False)]
        if self.has_causal:
            cases += [("", self.qkv(6, 6, d_k=8, offset=18), None, True),
                      ("", self.qkv(4, 7, d_k=4, d_v=6, offset=30), None, True),
                      ("", self.qkv(7, 4, d_k=8, d_v=5, offset=31), None, True)]
        if self.has_mask:
            cases.append(("", self.qkv(5, 7, d_k=8, offset=19),
                          self.random_mask(5, 7, 19), False))
            cases.append(("", self.qkv(7, 5, d_k=6, d_v=4, offset=32),
                          self.random_mask(7, 5, 32), False))
            if self.has_causal:
                cases.append(("", self.qkv(6, 6, d_k=8, offset=20),
                              self.random_mask(6, 6, 20), True))
        for note, (q, k, v), m, c in cases:
            if c and m is not None:                # keep key 0: no row fully masked
                m[..., 0] = True
            where = self.describe(q, k, v, m, c, note)
            out, _ = self.call(q, k, v, m, c, where=where)
            ref = reference(q, k, v, m, c)
            ok = self.close(out, ref)
            if not ok.all():
                raise _Failure(f"differs from {name} at output {self.first_bad(ok)} (max "
                               f"error {np.abs(out - ref).max():.3g})", where)

    def dropout(self):
        if not self.has_dropout:
            raise _Skip("fn takes no dropout_p keyword (dropout=False)")
        n_q, p = 20, 0.5
        q, k, v = self.qkv(n_q, 7, offset=35)
        out, _ = self.call(q, k, v)
        where = self.describe(q, k, v, note="dropout_p=0")
        same, _ = self.call(q, k, v, where=where, dropout_p=0.0)
        ok = self.close(same, out)
        if not ok.all():
            raise _Failure(f"dropout_p=0 changed output {self.first_bad(ok)}", where)
        # With every value 1 an output row is the sum of its kept weights over 1 - p:
        # 1 on average over the draws (its variance is at most p / (1 - p) = 1), 1 - p
        # without the rescaling. Enough rows that the mean's error is below 0.03.
        ones = np.ones_like(v)
        rows = n_q * math.prod(self.batch)
        calls = min(200, -(-1200 // rows))
        where = self.describe(q, k, ones, note=f"dropout_p={p}, every value 1, {calls} "
                                                f"calls")
        outs = np.stack([self.call(q, k, ones, where=where, dropout_p=p)[0]
                         for _ in range(calls)])
        if not np.isfinite(outs).all():
            raise _Failure("dropout gave NaN or infinity", where)
        if np.ptp(outs, axis=0).max() == 0:
            raise _Failure(f"dropout_p={p} gave the same output on every call: nothing "
                           f"was dropped", where)
        mean = float(outs.mean())
        if abs(mean - 1.0) > 0.15:
            why = " (about 1 - dropout_p: the kept weights are not divided by 1 - " \
                "dropout_p)" if abs(mean - (1 - p)) < 0.15 else ""
            raise _Failure(f"with every value 1 and dropout_p={p}, the outputs average "
                           f"{mean:.3f} over {calls} calls, expected 1{why}", where)


def _flags(has_mask: bool, causal: bool) -> str:
    words = (["with a mask"] if has_mask else ["without a mask"]) + \
        (["causal=True"] if causal else [])
    return ", ".join(words)


def _reference() -> tuple[Callable[..., np.ndarray], str]:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        from ..attention import scaled_dot_product_attention

        def ours(q, k, v, m, c):
            return scaled_dot_product_attention(q, k, v, mask=m, causal=c)

        return ours, "attncore.scaled_dot_product_attention (torch is not installed)"

    def theirs(q, k, v, m, c):
        t = [torch.from_numpy(x) for x in (q, k, v)]
        if c:
            tri = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
            m = tri if m is None else torch.from_numpy(m) & tri
        elif m is not None:
            m = torch.from_numpy(m)
        # The cases never mask a whole row, where PyTorch's kernels have differed.
        return F.scaled_dot_product_attention(*t, attn_mask=m,
                                              scale=1 / math.sqrt(q.shape[-1])).numpy()

    return theirs, "torch.nn.functional.scaled_dot_product_attention"
