"""A conformance check for the backward pass of attention you write yourself.

:func:`check_attention_backward` runs a function that returns the gradients of scaled
dot-product attention with respect to its queries, keys and values on small inputs it has
not seen, compares it with torch's autograd (attncore's
:func:`~attncore.attention_backward` where torch is not installed), and reports property
by property what holds and on which small input something fails, without printing the
right gradients. Here it checks attncore's own backward pass::

    >>> import attncore as ac
    >>> from attncore.testing import check_attention_backward
    >>> def backward(q, k, v, d_out, causal=False):
    ...     return ac.attention_backward(q, k, v, d_out, causal=causal)
    >>> check_attention_backward(backward).passed
    True

**The calling convention.** Your function is called as ``fn(q, k, v, d_out)`` and, for
the causal properties, ``fn(q, k, v, d_out, causal=True)``, with NumPy arrays

* ``q`` of shape ``(*batch, n_q, d_k)``, ``k`` of ``(*batch, n_k, d_k)``, ``v`` of
  ``(*batch, n_k, d_v)`` and ``d_out``, the gradient of a loss with respect to the
  attention output ``softmax(q k^T / sqrt(d_k)) v``, of ``(*batch, n_q, d_v)``;
  ``batch`` is ``(2, 3)`` (batch and heads) for most properties and ``()`` for
  ``batch_axes``; square and non-square inputs (``n_q < n_k`` and ``n_q > n_k``) and
  several widths; float64, and float32 for ``preserves_dtype``;
* ``causal=True`` meaning query ``i`` may attend to keys ``0..i`` only, aligned at the
  top-left corner (``tril(ones(n_q, n_k))``, PyTorch's ``is_causal``), also when
  ``n_q != n_k``.

It must return ``(dq, dk, dv)``, the gradients with respect to ``q``, ``k`` and ``v``,
of the shapes and the dtype of ``q``, ``k`` and ``v``, for the default scale
``1 / sqrt(d_k)``, and leave its arguments unchanged. The inputs never leave a query
without a key. Torch tensors are accepted as results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport
from .runner import Failure, Skip, dtype_name, expect_array, run_properties, to_numpy
from .runner import with_properties

__all__ = ["AttentionBackwardCheck", "PROPERTIES", "check_attention_backward"]

PROPERTIES = {
    "returns_three_gradients": "returns a tuple (dq, dk, dv) of finite arrays with the "
                               "shapes of q, k and v, for n_q < n_k, n_q = n_k and "
                               "n_q > n_k",
    "value_gradients": "dv equals autograd's: each value gathers the output gradients of "
                       "the queries weighted by their normalised weights, so the rows of "
                       "dv add up to the rows of d_out",
    "row_sum_term": "the rows of dk add up to zero over the keys, because every row of "
                    "dS sums to zero (the row-sum term of the softmax's gradient)",
    "scale_once": "dq and dk are not off by the factor sqrt(d_k) (the scale left out) or "
                  "1/sqrt(d_k) (applied twice): the scale 1/sqrt(d_k) enters each of them "
                  "exactly once",
    "query_and_key_gradients": "dq and dk equal autograd's (neither swapped nor "
                               "transposed), for n_q < n_k, n_q = n_k and n_q > n_k and "
                               "several widths",
    "causal_backward": "under causal=True no gradient flows from a query to a later key "
                       "(the last key's dk and dv depend on the last query alone), and "
                       "dq, dk, dv equal autograd's with the top-left causal mask, also "
                       "for n_q != n_k",
    "preserves_dtype": "float32 inputs give float32 gradients, float64 ones float64, "
                       "equal to the float64 gradients to float32's precision",
    "batch_axes": "each entry of a batch gets the gradients it gets alone, as 2-D arrays "
                  "without batch axes",
    "inputs_unchanged": "leaves q, k, v and d_out as they were",
}
"""The properties :func:`check_attention_backward` checks, by name, with what each asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(q, k, v, d_out, causal=False) -> (dq, dk, dv)"


@dataclass(frozen=True)
class AttentionBackwardCheck(CheckReport):
    """The report of :func:`check_attention_backward`: one result per property of
    :data:`PROPERTIES` (see :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_attention_backward"


def check_attention_backward(fn: Callable[..., Any], *, causal: bool = True,
                             seed: int = 0) -> AttentionBackwardCheck:
    """Run the backward-pass properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(q, k, v, d_out, causal=False) -> (dq, dk, dv)``; see the calling convention
        in this module's description.
    causal : bool, default True
        Whether ``fn`` takes a ``causal`` keyword; if False, ``causal_backward`` is
        skipped.
    seed : int, default 0
        Seed of the random inputs.

    Returns
    -------
    AttentionBackwardCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary that never shows the right gradients.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_attention_backward`` itself. Whatever ``fn`` raises or
        returns is reported as a failure of the property that called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable {SIGNATURE}, got {type(fn).__name__}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, got {causal!r}")
    seed = check_size("seed", seed, minimum=0)
    report = run_properties("check_attention_backward", fn, PROPERTIES,
                            _Runner(fn, causal, seed))
    return AttentionBackwardCheck(report.function, report.results)


# The shapes (n_q, n_k, d_k, d_v) every comparison runs on: n_q < n_k, n_q = n_k, n_q > n_k.
_SHAPES = ((3, 5, 4, 2), (4, 4, 16, 3), (6, 3, 8, 5))
_BATCH = (2, 3)
_NAMES = ("dq", "dk", "dv")


class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, has_causal, seed):
        self.fn, self.has_causal, self.seed = fn, has_causal, seed

    # --- inputs, calls, reference ---------------------------------------------------

    def inputs(self, n_q, n_k, d_k, d_v, offset, batch=_BATCH, dtype=np.float64):
        rng = np.random.default_rng([self.seed, offset])
        shapes = ((n_q, d_k), (n_k, d_k), (n_k, d_v), (n_q, d_v))
        return tuple(rng.standard_normal(batch + s).astype(dtype) for s in shapes)

    def describe(self, q, k, v, d_out, causal=False, note=""):
        text = f"q {q.shape}, k {k.shape}, v {v.shape}, d_out {d_out.shape}"
        if q.dtype != np.float64:
            text += f" of dtype {q.dtype}"
        if causal:
            text += ", causal=True"
        return text + (f", {note}" if note else "") + f" (seed {self.seed})"

    def call(self, q, k, v, d_out, causal=False, *, where=None):
        """``fn``'s ``(dq, dk, dv)`` as NumPy arrays; any problem is a :class:`Failure`."""
        where = where or self.describe(q, k, v, d_out, causal)
        args = tuple(np.array(x) for x in (q, k, v, d_out))
        try:
            result = self.fn(*args, causal=True) if causal else self.fn(*args)
        except Exception as err:                               # reported, not raised
            if isinstance(err, TypeError) and ("argument" in str(err)
                                               or "keyword" in str(err)):
                raise Failure(f"the function takes other arguments than the check passes: "
                              f"expected {SIGNATURE}; calling it raised TypeError: {err}",
                              where) from None
            raise Failure(f"the function raised {type(err).__name__}: {err}",
                          where) from None
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            got = (f"a {type(result).__name__} of {len(result)}"
                   if isinstance(result, (tuple, list)) else type(result).__name__)
            raise Failure(f"expected a tuple of three gradients (dq, dk, dv), got {got}",
                          where)
        shapes = [getattr(to_numpy(x), "shape", None) for x in result[:2]]
        if q.shape != k.shape and shapes == [k.shape, q.shape]:
            raise Failure(f"dq has the shape of k {k.shape} and dk the shape of q "
                          f"{q.shape}: are dq and dk swapped?", where)
        grads = []
        for name, value, like in zip(_NAMES, result, (q, k, v)):
            arr = to_numpy(value)
            shape = getattr(arr, "shape", None)
            if isinstance(arr, np.ndarray) and shape != like.shape and \
                    shape == like.shape[:-2] + like.shape[-1:] + like.shape[-2:-1]:
                raise Failure(f"{name}: expected shape {like.shape} (the shape of "
                              f"{name[1:]}), got {shape}, its transpose", where)
            if isinstance(arr, np.ndarray) and shape != like.shape:
                others = [n for n, o in zip(_NAMES, (q, k, v)) if o.shape == shape]
                hint = f" (the shape of {others[0]})" if others and others[0] != name \
                    else ""
                raise Failure(f"{name}: expected shape {like.shape} (the shape of "
                              f"{name[1:]}), got {shape}{hint}", where)
            grads.append(expect_array(value, name=name, shape=like.shape,
                                      dtype=dtype_name(like), where=where))
        return tuple(grads)

    # --- properties -----------------------------------------------------------------

    def returns_three_gradients(self):
        for offset, shape in enumerate(_SHAPES):
            self.call(*self.inputs(*shape, offset))

    def value_gradients(self):
        for offset, shape in enumerate(_SHAPES, start=10):
            q, k, v, d_out = self.inputs(*shape, offset)
            where = self.describe(q, k, v, d_out)
            dv = self.call(q, k, v, d_out, where=where)[2]
            want = _reference(q, k, v, d_out)[2]
            if _close(dv, want):
                continue
            total, expected = dv.sum(axis=-2), d_out.sum(axis=-2)
            if not _close(total, expected):
                raise Failure("dv differs from autograd, and its rows do not add up to "
                              "the rows of d_out: the weights dv is computed from do not "
                              "sum to 1 per query (are they normalised?)", where)
            raise Failure("dv differs from autograd", where)

    def row_sum_term(self):
        for offset, shape in enumerate(_SHAPES, start=20):
            q, k, v, d_out = self.inputs(*shape, offset)
            where = self.describe(q, k, v, d_out)
            dk = self.call(q, k, v, d_out, where=where)[1]
            total = np.abs(dk.sum(axis=-2)).max()
            size = np.abs(dk).max()
            if total > 1e-9 * max(size, 1.0):
                raise Failure("the rows of dk do not add up to zero over the keys: the rows "
                              "of dS do not sum to zero (is the row-sum term of the "
                              "softmax's gradient missing?)", where)

    def scale_once(self):
        q, k, v, d_out = self.inputs(*_SHAPES[1], 30)            # d_k = 16: scale 1/4
        where = self.describe(q, k, v, d_out, note="d_k = 16, so 1/sqrt(d_k) = 1/4")
        got = self.call(q, k, v, d_out, where=where)
        want = _reference(q, k, v, d_out)
        root = math.sqrt(q.shape[-1])
        for name, g, w in zip(_NAMES[:2], got[:2], want[:2]):
            ratio = np.linalg.norm(g) / np.linalg.norm(w)
            if abs(ratio - root) < 1e-6 * root:
                why = "the scale is missing"
            elif abs(ratio - 1 / root) < 1e-6:
                why = "the scale is applied twice"
            else:
                continue                      # (other errors: the other properties)
            raise Failure(f"{name} is {ratio:.4g} times autograd's in size: {why}", where)

    def query_and_key_gradients(self):
        for offset, shape in enumerate(_SHAPES, start=40):
            q, k, v, d_out = self.inputs(*shape, offset)
            where = self.describe(q, k, v, d_out)
            got = self.call(q, k, v, d_out, where=where)
            want = _reference(q, k, v, d_out)
            for i, name in enumerate(_NAMES[:2]):
                if _close(got[i], want[i]):
                    continue
                other = want[1 - i]
                if got[i].shape == other.shape and _close(got[i], other):
                    raise Failure(f"{name} equals autograd's {_NAMES[1 - i]}: are dq and "
                                  f"dk swapped?", where)
                raise Failure(f"{name} differs from autograd", where)

    def causal_backward(self):
        if not self.has_causal:
            raise Skip("fn takes no causal keyword (causal=False)")
        # (1) square: the last key is seen by the last query alone.
        q, k, v, d_out = self.inputs(5, 5, 4, 3, 50)
        where = self.describe(q, k, v, d_out, causal=True)
        got = self.call(q, k, v, d_out, causal=True, where=where)
        poked = d_out.copy()
        poked[..., :-1, :] = np.random.default_rng([self.seed, 51]).standard_normal(
            poked[..., :-1, :].shape) * 10
        again = self.call(q, k, v, poked, causal=True, where=where)
        if not (_close(again[1][..., -1, :], got[1][..., -1, :])
                and _close(again[2][..., -1, :], got[2][..., -1, :])):
            raise Failure("the last key's dk or dv changed when the output gradients of "
                          "earlier queries changed: gradient flows from a query to a "
                          "later key (is the causal mask applied in the backward pass?)",
                          where + ", d_out of queries 0..3 changed")
        # (2) against autograd: square, n_q < n_k, n_q > n_k (top-left alignment).
        for offset, shape in enumerate(_SHAPES, start=52):
            q, k, v, d_out = self.inputs(*shape, offset)
            where = self.describe(q, k, v, d_out, causal=True)
            got = self.call(q, k, v, d_out, causal=True, where=where)
            want = _reference(q, k, v, d_out, causal=True)
            bad = [n for n, g, w in zip(_NAMES, got, want) if not _close(g, w)]
            if not bad:
                continue
            n_q, n_k = q.shape[-2], k.shape[-2]
            detail = f"{', '.join(bad)} differ{'s' if len(bad) == 1 else ''} from " \
                     f"autograd with causal=True"
            if all(_close(g, w) for g, w in zip(got, _reference(q, k, v, d_out))):
                detail += "; they equal the gradients without a mask: the causal mask " \
                          "is not applied"
            elif n_q != n_k and all(_close(g, w) for g, w in zip(
                    got, _reference(q, k, v, d_out, causal=True, shift=n_k - n_q))):
                detail += "; they equal the gradients with the mask aligned " \
                          "bottom-right, tril(ones(n_q, n_k), k=n_k-n_q): the convention " \
                          "is top-left"
            raise Failure(detail, where)

    def preserves_dtype(self):
        q, k, v, d_out = self.inputs(*_SHAPES[0], 60)
        want = self.call(q, k, v, d_out)
        low = tuple(x.astype(np.float32) for x in (q, k, v, d_out))
        where = self.describe(*low)
        try:
            got = self.call(*low, where=where)
        except Failure as failure:
            if "got float64" in failure.detail:
                failure.detail += _PROMOTION_HINT
            raise
        for name, g, w in zip(_NAMES, got, want):
            err = np.abs(g.astype(np.float64) - w).max()
            if err > 1e-4 * max(np.abs(w).max(), 1.0):
                raise Failure(f"{name} in float32 differs from the float64 result by "
                              f"{err:.3g}, more than float32's rounding explains", where)

    def batch_axes(self):
        q, k, v, d_out = self.inputs(*_SHAPES[0], 70)
        where = self.describe(q, k, v, d_out)
        together = self.call(q, k, v, d_out, where=where)
        for index in np.ndindex(*_BATCH):
            single = tuple(x[index] for x in (q, k, v, d_out))
            alone = self.call(*single, where=self.describe(
                *single, note="2-D arrays, no batch axes"))
            for name, g, a in zip(_NAMES, together, alone):
                if not _close(g[index], a):
                    raise Failure(f"batch entry {index}: {name} differs from what the "
                                  f"entry gets alone, as 2-D arrays (do batch entries "
                                  f"mix, or does the function assume 2-D arrays?)", where)

    def inputs_unchanged(self):
        for causal in (False, True) if self.has_causal else (False,):
            args = self.inputs(*_SHAPES[2], 80)
            kept = tuple(x.copy() for x in args)
            where = self.describe(*args, causal=causal)
            try:
                self.fn(*args, causal=True) if causal else self.fn(*args)
            except Exception as err:                           # reported, not raised
                raise Failure(f"the function raised {type(err).__name__}: {err}",
                              where) from None
            for name, x, y in zip(("q", "k", "v", "d_out"), args, kept):
                if not np.array_equal(x, y):
                    raise Failure(f"the function changed its argument {name}", where)


_PROMOTION_HINT = (" (a NumPy float64 number such as np.sqrt(d) turns float32 arrays into "
                   "float64 ones; a Python float such as math.sqrt(d) keeps them float32)")


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.abs(a - b) <= 1e-9 + 1e-7 * np.abs(b)))


def _reference(q, k, v, d_out, causal=False, shift=0):
    """``(dq, dk, dv)`` in float64 by torch autograd (attncore's reference without torch);
    ``shift`` moves the causal diagonal (``n_k - n_q``: the bottom-right alignment)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = np.tril(np.ones((n_q, n_k), dtype=bool), k=shift) if causal else None
    try:
        import torch
    except ImportError:
        from ..backward import attention_backward

        return attention_backward(*(np.asarray(x, dtype=np.float64)
                                    for x in (q, k, v, d_out)), mask=mask)
    leaves = [torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
              for x in (q, k, v)]
    tq, tk, tv = leaves
    s = tq @ tk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~torch.from_numpy(mask), float("-inf"))
    out = torch.softmax(s, dim=-1) @ tv
    out.backward(torch.tensor(np.asarray(d_out, dtype=np.float64)))
    return tuple(x.grad.numpy() for x in leaves)
