"""A conformance check for multi-head attention layers you write yourself.

:func:`check_multi_head_attention` runs the forward pass of a multi-head self-attention
layer you wrote (project, split into heads, attend, merge, output projection) on small
inputs it has not seen, and reports property by property what holds and the smallest input
on which something fails, without printing the right answer. Here it checks attncore's own
layer, wrapped into the calling convention::

    >>> import attncore as ac
    >>> from attncore.testing import check_multi_head_attention
    >>> def layer(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    ...     params = ac.MultiHeadParams(w_q, w_k, w_v, w_o, None, None, None, None,
    ...                                 num_heads)
    ...     return ac.multi_head_attention(params, x, causal=causal)
    >>> check_multi_head_attention(layer).passed
    True

**The calling convention.** Your function is called as
``fn(x, w_q, w_k, w_v, w_o, num_heads)`` or, for the causal properties,
``fn(x, w_q, w_k, w_v, w_o, num_heads, causal=True)``, with

* ``x`` of shape ``(..., n, d_model)``: no batch axis, one or two (batch and more);
* ``w_q``, ``w_k``, ``w_v``, ``w_o`` of shape ``(d_model, d_model)`` in attncore's
  layout ``(in, out)``: a token's query is ``x @ w_q`` (no biases);
* ``num_heads`` an integer that divides ``d_model``, ``d_head = d_model // num_heads``;
  head ``h`` owns the column block ``h * d_head .. (h + 1) * d_head - 1`` of ``w_q``,
  ``w_k`` and ``w_v`` and the same row block of ``w_o``, as
  :func:`attncore.split_heads` splits them;
* every head attends with the scale ``1 / sqrt(d_head)``; ``causal=True`` lets token
  ``i`` see tokens ``0..i`` only;

float64 for most properties, float32 too for ``preserves_dtype`` and
``inputs_unchanged``. It must return the layer's output, of shape ``(..., n, d_model)`` and
of the dtype of ``x``, and leave its arguments unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_flag, check_size
from .runner import with_properties
from .report import CheckReport
from .runner import Failure, Skip, call, expect_array, group_same_errors, \
    run_properties, with_dtype_hint

__all__ = ["MultiHeadCheck", "PROPERTIES", "check_multi_head_attention"]

PROPERTIES = {
    "output_shape": "returns finite values of shape (..., n, d_model) for x without a "
                    "batch axis, with one and with two",
    "preserves_dtype": "float32 inputs give a float32 output (float64 ones float64), "
                       "with the same numbers to float32's precision",
    "inputs_unchanged": "leaves x and the four weight matrices as they were",
    "output_projection": "the output is the merged heads times w_o: replacing w_o by the "
                         "identity and multiplying by w_o afterwards changes nothing",
    "heads_are_column_blocks": "head h uses only the column block h of w_q, w_k and w_v "
                               "(and writes only through the row block h of w_o), as "
                               "attncore.split_heads splits them",
    "each_head_attends": "each head's part of the output is scaled dot-product attention "
                         "of its own queries, keys and values, with the scale "
                         "1 / sqrt(d_head)",
    "batch_axes": "each sequence of a batch gives what it gives alone: the batch axes "
                  "are kept apart",
    "causal": "under causal=True, token i's output does not depend on tokens after i and "
              "equals the layer's output on tokens 0..i alone",
    "matches_reference": "agrees with attncore.multi_head_attention for several widths, "
                         "head counts, lengths and batch shapes, with and without "
                         "causal=True",
}
"""The properties :func:`check_multi_head_attention` checks, by name, with what each asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(x, w_q, w_k, w_v, w_o, num_heads, causal=False)"


@dataclass(frozen=True)
class MultiHeadCheck(CheckReport):
    """The report of :func:`check_multi_head_attention`: one result per property of
    :data:`PROPERTIES` (see :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_multi_head_attention"


def check_multi_head_attention(fn: Callable[..., Any], *, causal: bool = True,
                               seed: int = 0) -> MultiHeadCheck:
    """Run the course's multi-head attention properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(x, w_q, w_k, w_v, w_o, num_heads, causal=False) -> out``; see the calling
        convention in this module's description.
    causal : bool, default True
        Whether ``fn`` takes a ``causal`` keyword; if False, the causal property is
        skipped and no causal case is compared with the reference.
    seed : int, default 0
        Seed of the random inputs.

    Returns
    -------
    MultiHeadCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary. Where one error (an exception with
        the same message up to its numbers) makes several properties fail, the first of
        them reports it and the others say that they fail with it.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_multi_head_attention`` itself. Whatever ``fn`` raises is
        reported as a failure of the property that called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable multi-head attention layer, got "
                        f"{type(fn).__name__}")
    causal = check_flag("causal", causal)
    seed = check_size("seed", seed, minimum=0)
    report = run_properties("check_multi_head_attention", fn, PROPERTIES,
                            _Runner(fn, causal, seed))
    return MultiHeadCheck(report.function, group_same_errors(report.results))


# --- a reference layer, with the classic mistakes as switches ---------------------------

def _softmax_rows(s: np.ndarray) -> np.ndarray:
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / e.sum(axis=-1, keepdims=True)


def layer(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray,
          w_o: np.ndarray | None, num_heads: int, causal: bool = False, *,
          split: str = "blocks", scale: str = "d_head", merge: str = "in_order",
          shift: int = 0) -> np.ndarray:
    """Multi-head self-attention in float64, right by default, wrong in one named way.

    ``split="interleaved"`` gives head ``h`` the columns ``h, h + H, ...``;
    ``split="reshape"`` reshapes ``(..., n, d_model)`` straight to ``(..., H, n, d_head)``;
    ``scale="d_model"`` divides the scores by ``sqrt(d_model)``; ``w_o=None`` skips the
    output projection; ``merge="reshape"`` reshapes ``(..., H, n, d_head)`` straight to
    ``(..., n, d_model)``; ``shift`` moves the causal diagonal (key ``j`` allowed for
    ``j <= i + shift``).
    """
    h, d = num_heads, x.shape[-1]
    dh, n = d // h, x.shape[-2]

    def heads(y):
        if split == "interleaved":
            return np.moveaxis(y.reshape(y.shape[:-1] + (dh, h)), -1, -3)
        if split == "reshape":
            return y.reshape(y.shape[:-2] + (h, n, dh))
        return np.swapaxes(y.reshape(y.shape[:-1] + (h, dh)), -2, -3)

    q, k, v = (heads(x @ w) for w in (w_q, w_k, w_v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d if scale == "d_model" else dh)
    if causal:
        s = np.where(np.tri(n, n, shift, dtype=bool), s, -np.inf)
    z = _softmax_rows(s) @ v                                     # (..., H, n, dh)
    if merge == "reshape":
        z = z.reshape(z.shape[:-3] + (n, d))
    else:
        z = np.swapaxes(z, -2, -3).reshape(z.shape[:-3] + (n, d))
    return z if w_o is None else z @ w_o


# The classic mistakes, each as the one switch of `layer` that makes it (for the reports).
MISTAKES = {
    "the heads are interleaved (head h takes the columns h, h + H, h + 2H, ...), not "
    "the column block h": {"split": "interleaved"},
    "the split reshapes (..., n, d_model) straight to (..., H, n, d_head), which mixes "
    "tokens across heads: reshape to (..., n, H, d_head) and swap the two axes": {
        "split": "reshape"},
    "the scores are divided by sqrt(d_model), not by sqrt(d_head) of one head": {
        "scale": "d_model"},
    "the output projection w_o is not applied": {"w_o": None},
    "the merge reshapes (..., H, n, d_head) straight to (..., n, d_model), which mixes "
    "tokens: swap the head and token axes back first": {"merge": "reshape"},
    "the causal mask lets token i see token i + 1": {"shift": 1},
    "the causal mask hides token i from itself": {"shift": -1},
}


def diagnose(out: np.ndarray, x, w_q, w_k, w_v, w_o, num_heads, causal=False) -> str:
    """``"; it equals a layer in which <mistake>"`` if ``out`` is one of the classic
    mistakes' outputs, else ``""``."""
    for words, switch in MISTAKES.items():
        if "shift" in switch and not causal:
            continue
        kw = dict(switch)
        wo = kw.pop("w_o", w_o)
        try:
            with np.errstate(all="ignore"):
                wrong = layer(x, w_q, w_k, w_v, wo, num_heads, causal, **kw)
        except ValueError:
            continue
        if wrong.shape == out.shape and np.allclose(out, wrong, rtol=1e-6, atol=1e-8):
            return f"; it equals a layer in which {words}"
    return ""


# --- the properties -----------------------------------------------------------------------

class _Runner:
    """Builds the small inputs and runs the properties (one method per property)."""

    def __init__(self, fn, has_causal, seed):
        self.fn, self.has_causal, self.seed = fn, has_causal, seed

    def inputs(self, batch, n, d, offset, dtype="float64"):
        rng = np.random.default_rng([self.seed, offset])
        x = rng.standard_normal(batch + (n, d))
        ws = [rng.standard_normal((d, d)) * (1.5 / math.sqrt(d)) for _ in range(4)]
        return [a.astype(dtype) for a in [x] + ws]

    @staticmethod
    def describe(x, num_heads, causal=False, note=""):
        text = f"x {x.shape}, weights ({x.shape[-1]}, {x.shape[-1]}), num_heads={num_heads}"
        if x.dtype != np.float64:
            text += f", dtype {x.dtype}"
        if causal:
            text += ", causal=True"
        return text + (f", {note}" if note else "")

    def run(self, x, w_q, w_k, w_v, w_o, num_heads, causal=False, *, note="",
            dtype=None):
        """``fn``'s output as a checked NumPy array (float64 unless ``dtype``)."""
        where = self.describe(x, num_heads, causal, note) + f" (seed {self.seed})"
        kwargs = {"causal": True} if causal else {}
        args = tuple(np.array(a) for a in (x, w_q, w_k, w_v, w_o)) + (num_heads,)
        got = call(self.fn, args, kwargs, where=where, signature=SIGNATURE)
        try:
            return expect_array(got, name="out", shape=x.shape, where=where,
                                dtype=dtype or str(x.dtype))
        except Failure as failure:
            raise with_dtype_hint(failure) from None

    def compare(self, out, ref, what, where, args, causal=False):
        ok = np.abs(out - ref) <= 1e-6 * (1 + np.abs(ref))
        if not ok.all():
            row = tuple(int(i) for i in np.argwhere(~ok.all(axis=-1))[0])
            raise Failure(f"{what} at token {row} (max error "
                          f"{np.abs(out - ref).max():.3g})" + diagnose(out, *args, causal),
                          where + f" (seed {self.seed})")

    def output_shape(self):
        for batch, n, d, h in (((), 5, 8, 2), ((2,), 4, 6, 3), ((2, 3), 3, 8, 4)):
            self.run(*self.inputs(batch, n, d, offset=1), h)

    def preserves_dtype(self):
        for dtype in ("float64", "float32"):
            args = self.inputs((2,), 5, 8, offset=2, dtype=dtype)
            out = self.run(*args, 2)
            if dtype == "float32":
                wide = self.run(*(a.astype(np.float64) for a in args), 2)
                ok = np.abs(out - wide) <= 1e-4 * (1 + np.abs(wide))
                if not ok.all():
                    raise Failure(f"float32 inputs gave an output that differs from the "
                                  f"float64 one by {np.abs(out - wide).max():.3g}, more "
                                  f"than float32's rounding",
                                  self.describe(args[0], 2) + f" (seed {self.seed})")

    def inputs_unchanged(self):
        for dtype in ("float64", "float32"):
            for causal in (False, True) if self.has_causal else (False,):
                before = self.inputs((2,), 5, 8, offset=3, dtype=dtype)
                given = [a.copy() for a in before]
                kwargs = {"causal": True} if causal else {}
                where = self.describe(before[0], 2, causal) + f" (seed {self.seed})"
                call(self.fn, tuple(given) + (2,), kwargs, where=where,
                     signature=SIGNATURE)
                for name, a, b in zip(("x", "w_q", "w_k", "w_v", "w_o"), before, given):
                    if not np.array_equal(a, b):
                        raise Failure(f"the function changed its argument {name} in "
                                      f"place", where)

    def output_projection(self):
        x, w_q, w_k, w_v, w_o = self.inputs((), 5, 8, offset=4)
        out = self.run(x, w_q, w_k, w_v, w_o, 2)
        merged = self.run(x, w_q, w_k, w_v, np.eye(8), 2, note="w_o = identity")
        ok = np.abs(out - merged @ w_o) <= 1e-6 * (1 + np.abs(out))
        if not ok.all():
            why = diagnose(out, x, w_q, w_k, w_v, w_o, 2)
            raise Failure("the output is not the output with w_o = identity times w_o"
                          + (why or ": w_o is not applied once, as the last step"),
                          self.describe(x, 2) + f" (seed {self.seed})")

    def heads_are_column_blocks(self):
        d, h = 8, 2
        x, w_q, w_k, w_v, w_o = self.inputs((), 5, d, offset=5)
        dh = d // h
        for head in range(h):
            block = slice(head * dh, (head + 1) * dh)
            only = np.zeros_like(w_o)
            only[block] = w_o[block]                 # only head `head` reaches the output
            note = f"w_o zero outside rows {block.start}..{block.stop - 1}"
            out = self.run(x, w_q, w_k, w_v, only, h, note=note)
            rng = np.random.default_rng([self.seed, 50 + head])
            others = np.ones(d, bool)
            others[block] = False
            changed = []
            for w in (w_q, w_k, w_v):
                w2 = w.copy()
                w2[:, others] = rng.standard_normal((d, others.sum()))
                changed.append(w2)
            out2 = self.run(x, *changed, only, h, note=note)
            if not np.allclose(out, out2, rtol=1e-6, atol=1e-9):
                why = diagnose(out, x, w_q, w_k, w_v, only, h)
                raise Failure(f"with only the rows of head {head} kept in w_o, the output "
                              f"changed when the other columns of w_q, w_k and w_v "
                              f"changed: head {head} does not use the column block "
                              f"{block.start}..{block.stop - 1} alone" + why,
                              self.describe(x, h, note=note) + f" (seed {self.seed})")

    def each_head_attends(self):
        d, h = 8, 2
        x, w_q, w_k, w_v, w_o = self.inputs((), 5, d, offset=6)
        dh = d // h
        for head in range(h):
            block = slice(head * dh, (head + 1) * dh)
            only = np.zeros_like(w_o)
            only[block] = w_o[block]
            note = f"w_o zero outside rows {block.start}..{block.stop - 1}"
            out = self.run(x, w_q, w_k, w_v, only, h, note=note)
            ref = layer(x, w_q, w_k, w_v, only, h)
            self.compare(out, ref, f"head {head}'s part of the output is not its own "
                                   f"attention with the scale 1 / sqrt(d_head)",
                         self.describe(x, h, note=note), (x, w_q, w_k, w_v, only, h))

    def batch_axes(self):
        for batch, h in (((3,), 2), ((2, 3), 4)):
            x, w_q, w_k, w_v, w_o = self.inputs(batch, 4, 8, offset=7)
            out = self.run(x, w_q, w_k, w_v, w_o, h)
            for index in np.ndindex(*batch):
                alone = self.run(x[index], w_q, w_k, w_v, w_o, h,
                                 note=f"batch entry {index} alone")
                if not np.allclose(out[index], alone, rtol=1e-6, atol=1e-9):
                    raise Failure(f"batch entry {index} differs from the output of that "
                                  f"sequence alone: the batch axes are mixed",
                                  self.describe(x, h) + f" (seed {self.seed})")

    def causal(self):
        if not self.has_causal:
            raise Skip("fn takes no causal keyword (causal=False)")
        x, w_q, w_k, w_v, w_o = self.inputs((2,), 6, 8, offset=8)
        out = self.run(x, w_q, w_k, w_v, w_o, 2, causal=True)
        where = self.describe(x, 2, True) + f" (seed {self.seed})"
        rng = np.random.default_rng([self.seed, 9])
        for t in range(1, 6):
            x2 = x.copy()
            x2[..., t:, :] = rng.standard_normal(x2[..., t:, :].shape) * 3
            out2 = self.run(x2, w_q, w_k, w_v, w_o, 2, causal=True)
            if not np.allclose(out2[..., :t, :], out[..., :t, :], rtol=1e-6, atol=1e-9):
                raise Failure(f"the outputs of tokens 0..{t - 1} changed when tokens "
                              f"{t}.. changed"
                              + diagnose(out, x, w_q, w_k, w_v, w_o, 2, True), where)
        for t in range(1, 7):
            alone = self.run(x[..., :t, :], w_q, w_k, w_v, w_o, 2, causal=True,
                             note=f"tokens 0..{t - 1} alone")
            if not np.allclose(out[..., t - 1, :], alone[..., -1, :], rtol=1e-6,
                               atol=1e-9):
                raise Failure(f"token {t - 1}'s output differs from the layer's output "
                              f"on tokens 0..{t - 1} alone"
                              + diagnose(out, x, w_q, w_k, w_v, w_o, 2, True), where)

    def matches_reference(self):
        from ..multihead import MultiHeadParams, multi_head_attention

        cases = [((), 5, 8, 2, False, 10), ((2,), 6, 12, 3, False, 11),
                 ((2, 2), 4, 8, 4, False, 12), ((), 3, 6, 1, False, 13),
                 ((), 4, 6, 6, False, 14)]
        if self.has_causal:
            cases += [((), 6, 8, 2, True, 15), ((2,), 5, 12, 4, True, 16)]
        for batch, n, d, h, causal, offset in cases:
            x, w_q, w_k, w_v, w_o = self.inputs(batch, n, d, offset=offset)
            out = self.run(x, w_q, w_k, w_v, w_o, h, causal=causal)
            params = MultiHeadParams(w_q, w_k, w_v, w_o, None, None, None, None, h)
            ref = multi_head_attention(params, x, causal=causal)
            self.compare(out, ref, "differs from attncore.multi_head_attention",
                         self.describe(x, h, causal), (x, w_q, w_k, w_v, w_o, h), causal)
