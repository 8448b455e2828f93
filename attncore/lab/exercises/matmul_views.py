"""Checkers for the exercises of chapter 3 (four ways to read a matrix product).

Each checker rebuilds what it compares with from the chapter's own examples
(:mod:`attncore.lab.examples`) and functions, so no answer is stored here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...attention import scaled_dot_product_attention
from ..examples import five_word_example, small_product
from ..view_figures import matmul_flops
from . import Verdict, exercise
from ._build_it import Failure, describe, invoke, judge


def _as_vector(answer: Any, length: int, what: str) -> np.ndarray | Verdict:
    try:
        vec = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return Verdict(False, f"expected {length} numbers for {what}, got {answer!r}")
    if vec.shape != (length,):
        return Verdict(False, f"expected {length} numbers for {what}, got an array of "
                              f"shape {vec.shape}")
    return vec


@exercise("ex-matmul-views-row-weights")
def row_weights(w: Any) -> Verdict:
    """Weights ``w`` (three numbers) with ``w @ B`` equal to row 2 of ``C = A B``."""
    a, b = small_product()
    target = (a @ b)[1]
    vec = _as_vector(w, b.shape[0], "the weights of the three rows of B")
    if isinstance(vec, Verdict):
        return vec
    made = vec @ b
    if not np.allclose(made, target, rtol=0, atol=1e-9):
        return Verdict(False, f"w @ B is {np.round(made, 4).tolist()}, which is not row 2 "
                              "of C. In the row view, which matrix holds the weights of "
                              "the rows of B that make row i of C?")
    if np.allclose(vec, a[1], rtol=0, atol=1e-9):
        return Verdict(True, "These are the row view's weights. Now explain why the check "
                             "would accept other weights too.")
    return Verdict(True, "w @ B is row 2 of C, though these are not the weights the row "
                         "view reads off; the solution says why several weights work.")


# Exercise ex-matmul-views-flops: one head of GPT-2 small's sizes on ten tokens (not the
# five-word example, whose products the chapter counts before the exercise).
FLOPS_HEAD = dict(n=10, d_model=768, d_k=64, d_v=64)


def _one_head_flops(n: int, d_model: int, d_k: int, d_v: int) -> tuple[int, int]:
    """(projections Q, K, V; the two n x n products) for one head."""
    projections = (2 * matmul_flops(n, d_model, d_k) + matmul_flops(n, d_model, d_v))
    attention = matmul_flops(n, d_k, n) + matmul_flops(n, n, d_v)
    return projections, attention


@exercise("ex-matmul-views-flops")
def flops_of_one_head(flops_one_head: Any, n_equal: Any) -> Verdict:
    """Total flops of the five products of one head of ``FLOPS_HEAD``'s sizes, and the n at
    which the two n x n products cost as much as the three projections."""
    n, d_model, d_k, d_v = (FLOPS_HEAD[key] for key in ("n", "d_model", "d_k", "d_v"))
    projections, attention = _one_head_flops(n, d_model, d_k, d_v)
    details = []
    total_ok = isinstance(flops_one_head, (int, float, np.integer, np.floating)) \
        and not isinstance(flops_one_head, bool) and flops_one_head == projections + attention
    if total_ok:
        details.append("total flops: right.")
    elif isinstance(flops_one_head, (int, float, np.integer, np.floating)) \
            and flops_one_head * 2 == projections + attention:
        details.append("total flops: half of the right count; a multiply-add is two flops.")
    else:
        details.append("total flops: not yet; add 2 m n p for each of the five products.")
    # The crossing point, found by counting rather than from a formula: the first n at which
    # the two n x n products cost at least as much as the projections.
    crossing = next(m for m in range(1, 100 * d_model)
                    if _one_head_flops(m, d_model, d_k, d_v)[1]
                    >= _one_head_flops(m, d_model, d_k, d_v)[0])
    n_ok = isinstance(n_equal, (int, np.integer)) and not isinstance(n_equal, bool) \
        and int(n_equal) == crossing
    if n_ok:
        details.append("crossing length: right.")
    else:
        try:
            p_, a_ = _one_head_flops(int(n_equal), d_model, d_k, d_v)
            details.append(f"crossing length: not yet; at n = {int(n_equal)} the two n x n "
                           f"products cost {a_ / p_:.3f} times the projections.")
        except (TypeError, ValueError, OverflowError):
            details.append(f"crossing length: expected a whole number of tokens, "
                           f"got {n_equal!r}.")
    if total_ok and n_ok:
        return Verdict(True, "Both counts are right.", tuple(details))
    return Verdict(False, "see each part below.", tuple(details))


def _token_set(answer: Any, n: int, what: str) -> set[int] | Verdict:
    try:
        tokens = {int(t) for t in answer}
        exact = all(float(t) == int(t) for t in answer)
    except (TypeError, ValueError):
        return Verdict(False, f"expected a list of token numbers for {what}, got {answer!r}")
    if not exact or not tokens <= set(range(1, n + 1)):
        return Verdict(False, f"expected token numbers between 1 and {n} for {what}, "
                              f"got {answer!r}")
    return tokens


@exercise("ex-matmul-views-causal")
def causal_reach(z3_depends_on: Any, v5_reaches: Any) -> Verdict:
    """Under a causal mask: which value rows output z_3 depends on, and which outputs the
    value v_5 reaches (1-based token numbers of the five-word example)."""
    ex = five_word_example()
    q, k, v = ex.Q, ex.K, ex.V
    n = v.shape[0]
    base = scaled_dot_product_attention(q, k, v, causal=True)
    moved = {}
    for j in range(n):                   # change value j alone and see which outputs move
        v_j = v.copy()
        v_j[j] += 10.0
        out = scaled_dot_product_attention(q, k, v_j, causal=True)
        moved[j + 1] = {i + 1 for i in range(n) if np.abs(out[i] - base[i]).max() > 1e-9}
    depends = {j for j, outputs in moved.items() if 3 in outputs}
    reaches = moved[n]
    got_depends = _token_set(z3_depends_on, n, "the value rows z_3 depends on")
    if isinstance(got_depends, Verdict):
        return got_depends
    got_reaches = _token_set(v5_reaches, n, "the outputs v_5 reaches")
    if isinstance(got_reaches, Verdict):
        return got_reaches
    details = ("z_3 depends on: " + ("right." if got_depends == depends else
                                      "not yet; read row 3 of A: which weights are zero?"),
               "v_5 reaches: " + ("right." if got_reaches == reaches else
                                   "not yet; read column 5 of A: which weights are zero?"))
    if got_depends == depends and got_reaches == reaches:
        return Verdict(True, "A causal A is lower triangular; its rows and columns say it.",
                       details)
    return Verdict(False, "see each part below.", details)


# --- build it: the outer-product view, with batch axes ---------------------------------------

OUTER_SIGNATURE = "my_matmul_outer(A, B)"
# (batch axes, m, p, n): non-square, p = 1, one and two batch axes
OUTER_SIZES = (((), 3, 4, 2), ((), 2, 1, 5), ((), 1, 3, 1), ((2,), 3, 4, 2),
               ((2, 3), 4, 2, 5))

# The products that compute all of A @ B at once: refused while the inner axis is longer
# than 1 (a column times a row, inner length 1, is an outer product and allowed).
_WHOLE_PRODUCTS = {"matmul", "dot", "vdot", "inner", "tensordot", "einsum", "multi_dot"}


class _OneTermAtATime(np.ndarray):
    """An array that refuses to be multiplied as a whole matrix product (``@``,
    ``np.dot``, ``np.matmul``, ``np.einsum``, ``np.tensordot``, ...) over an inner axis longer
    than 1, and otherwise behaves as a plain array (what it computes is a plain array)."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [np.asarray(x) if isinstance(x, _OneTermAtATime) else x for x in inputs]
        if ufunc is np.matmul and method == "__call__":
            _refuse_inner(plain[0])
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(x) if isinstance(x, _OneTermAtATime) else x
                                  for x in kwargs["out"])
        return getattr(ufunc, method)(*plain, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in _WHOLE_PRODUCTS:
            first = args[0] if func.__name__ != "einsum" else args[1]
            _refuse_inner(np.asarray(first), einsum=args[0] if func.__name__ == "einsum"
                          else None)
        return super().__array_function__(func, types, args, kwargs)

    def dot(self, other, *args, **kwargs):
        _refuse_inner(np.asarray(self))
        return np.asarray(self).dot(np.asarray(other), *args, **kwargs)


class _WholeProduct(BaseException):
    """(Not an Exception, so that the check's call of the learner's function, which
    reports every Exception as a failure, lets it through to this property.)"""


def _refuse_inner(first: np.ndarray, einsum: Any = None) -> None:
    if einsum is not None:
        text = einsum if isinstance(einsum, str) else ""
        ins, _, out = text.partition("->")
        summed = {c for c in ins if c.isalpha()} - set(out) if out else \
            {c for c in ins if c.isalpha() and ins.count(c) > 1}
        if summed:
            raise _WholeProduct
        return
    if first.ndim and first.shape[-1] > 1:
        raise _WholeProduct


@exercise("ex-matmul-views-outer")
def outer_products(fn) -> Verdict:
    """A reader-written ``my_matmul_outer(A, B)``: ``A @ B`` for ``A`` of shape
    ``(..., m, p)`` and ``B`` of shape ``(..., p, n)``, as a sum of p outer products,
    keeping the dtype; checked property by property on fresh inputs."""

    def draw(seed, batch, m, p, n, integers=False, dtype="float64"):
        rng = np.random.default_rng([43, seed])
        if integers:
            return [rng.integers(-4, 5, batch + s).astype(dtype)
                    for s in ((m, p), (p, n))]
        return [rng.standard_normal(batch + s).astype(dtype) for s in ((m, p), (p, n))]

    def run(a, b, dtype=None):
        return invoke(fn, (a, b), signature=OUTER_SIGNATURE,
                      shape=a.shape[:-1] + (b.shape[-1],), dtype=dtype,
                      where=describe(A=a, B=b))

    def output_shape():
        for i, size in enumerate(OUTER_SIZES):
            run(*draw(i, *size))

    def exact_on_integers():
        for i, size in enumerate(OUTER_SIZES):
            a, b = draw(10 + i, *size, integers=True)
            if not np.array_equal(run(a, b), a @ b):
                raise Failure("on small whole numbers, where every order of the sums is "
                              "exact, the result differs from A @ B",
                              describe(A=a, B=b) + ", whole numbers from -4 to 4")

    def matches_matmul():
        for i, size in enumerate(OUTER_SIZES):
            a, b = draw(20 + i, *size)
            error = np.abs(run(a, b) - a @ b).max()
            if error > 1e-12:
                raise Failure(f"differs from A @ B by {error:.3g}", describe(A=a, B=b))

    def sum_of_outer_products():
        for i, size in enumerate(OUTER_SIZES):
            a, b = draw(30 + i, *size)
            where = describe(A=a, B=b)
            try:
                run(a.view(_OneTermAtATime), b.view(_OneTermAtATime))
            except _WholeProduct:
                raise Failure("the function multiplies A and B in one matrix product "
                              "over their inner axis (@, np.matmul, np.dot, np.einsum or "
                              "np.tensordot); the exercise asks for a sum of outer "
                              "products, one column of A times one row of B at a time",
                              where) from None
            except Failure:                         # reported by the other properties
                return

    def keeps_dtype():
        for dtype in ("float32", "float64"):
            for i, size in enumerate(OUTER_SIZES[::2]):
                a, b = draw(40 + i, *size, dtype=dtype)
                run(a, b, dtype=dtype)

    def inputs_unchanged():
        a, b = draw(50, (2,), 3, 4, 2)
        given = [a.copy(), b.copy()]
        with np.errstate(all="ignore"):
            try:
                fn(*given)
            except Exception:                      # reported by the other properties
                return
        for name, before, after in zip("AB", (a, b), given):
            if not np.array_equal(before, after):
                raise Failure(f"the function changed its argument {name} in place",
                              describe(A=a, B=b))

    return judge(fn, OUTER_SIGNATURE, {
        "output_shape": output_shape, "exact_on_integers": exact_on_integers,
        "matches_matmul": matches_matmul, "sum_of_outer_products": sum_of_outer_products,
        "keeps_dtype": keeps_dtype, "inputs_unchanged": inputs_unchanged})
