"""Checkers for the exercises of chapter 1 (what attention computes)."""

from __future__ import annotations

import numpy as np

from ...attention import scaled_dot_product_attention
from . import Verdict, exercise
from ._build_it import Failure, describe, invoke, judge

# Exercise "output row": four tokens whose query, key and value are the same single number.
FOUR_TOKENS = (-1.0, 0.0, 1.0, 2.0)
ASKED_TOKEN = 2            # 0-based: the third token, x = 1
TOLERANCE = 5e-3           # answers to three decimals, rounded either way


def _numbers(answer, length: int | None = None) -> np.ndarray:
    values = np.asarray(answer, dtype=float)
    if length is not None and values.shape != (length,):
        raise ValueError(f"expected {length} numbers, got an array of shape {values.shape}")
    return values


@exercise("ex-what-attention-output-row")
def output_row(weights, output) -> Verdict:
    """Token 3's attention weights and output for q = k = v = x = (-1, 0, 1, 2), d_k = 1."""
    x = np.array(FOUR_TOKENS).reshape(-1, 1)
    out, attn = scaled_dot_product_attention(x, x, x, return_weights=True)
    true_w, true_out = attn[ASKED_TOKEN], float(out[ASKED_TOKEN, 0])
    try:
        w = _numbers(weights, len(FOUR_TOKENS))
        o = float(output)
    except (TypeError, ValueError) as err:
        return Verdict(False, f"give the weights as {len(FOUR_TOKENS)} numbers and the "
                              f"output as one number ({err}).")
    weights_ok = bool(np.all(np.abs(w - true_w) <= TOLERANCE))
    output_ok = abs(o - true_out) <= TOLERANCE
    details = (f"weights: {'right' if weights_ok else 'not yet'}",
               f"output: {'right' if output_ok else 'not yet'}")
    if weights_ok and output_ok:
        return Verdict(True, "The largest weight is not on the token itself: with x = 1 as "
                             "query, a larger key scores higher.", details)
    if abs(w.sum() - 1.0) > 2 * TOLERANCE:
        return Verdict(False, f"your weights sum to {w.sum():.3f}; one query's weights "
                              "are a probability distribution.", details)
    if not weights_ok:
        return Verdict(False, "the scores of this query are x_3 * x_j for every j; take "
                              "their softmax (exponentiate, divide by the sum).", details)
    if abs(o - FOUR_TOKENS[ASKED_TOKEN]) <= TOLERANCE:
        return Verdict(False, "that is what a hard lookup returns; attention averages all "
                              "the values with your weights.", details)
    return Verdict(False, "the output is the weighted average of the values "
                          "sum_j w_j v_j, with v_j = x_j.", details)


# Exercise "shapes": cross-attention from 5 decoder tokens to 7 encoder tokens.
N_TARGET, N_SOURCE, D_MODEL, D_K, D_V = 5, 7, 16, 8, 12


@exercise("ex-what-attention-shapes")
def shapes(scores_shape, weights_shape, output_shape) -> Verdict:
    """Shapes of Q K^T, of the weights and of the output in the cross-attention example."""
    x_dec, x_enc = np.zeros((N_TARGET, D_MODEL)), np.zeros((N_SOURCE, D_MODEL))
    w_q, w_k, w_v = np.zeros((D_MODEL, D_K)), np.zeros((D_MODEL, D_K)), np.zeros((D_MODEL, D_V))
    q, k, v = x_dec @ w_q, x_enc @ w_k, x_enc @ w_v
    out, attn = scaled_dot_product_attention(q, k, v, return_weights=True)
    truth = {"scores": (q @ k.T).shape, "weights": attn.shape, "output": out.shape}
    given = {"scores": scores_shape, "weights": weights_shape, "output": output_shape}
    hints = {"scores": "one row per query, one column per key",
             "weights": "the softmax keeps the shape of what it normalises",
             "output": "each output row averages rows of V"}
    details, right = [], True
    for name, answer in given.items():
        try:
            got = tuple(int(s) for s in answer)
        except (TypeError, ValueError):
            got = None
        ok = got == truth[name]
        right &= ok
        hint = hints[name] if got is not None else "give a tuple (rows, columns)"
        details.append(f"{name}: right" if ok else f"{name}: not yet ({hint})")
    if right:
        return Verdict(True, "n_q comes from the decoder, n_k from the encoder, and d_v "
                             "from W_V.", tuple(details))
    wrong = sum(not d.endswith("right") for d in details)
    verb = "is" if wrong == 1 else "are"
    return Verdict(False, f"{wrong} of the three shapes {verb} not right yet.", tuple(details))


# --- build it: the lookup for one query, then for all queries at once ------------------------

def _draws(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng([41, seed])
    return [rng.standard_normal(s) for s in shapes]


def _attention_of(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return scaled_dot_product_attention(q, k, v)


LOOKUP_SIGNATURE = "my_lookup(q, keys, values)"
# (d_k, n keys, d_v): d_k = 1 as in the chapter, and widths where the scale matters
LOOKUP_SIZES = ((1, 3, 1), (4, 6, 3), (16, 5, 2))


@exercise("ex-what-attention-lookup")
def lookup(fn) -> Verdict:
    """A reader-written ``my_lookup(q, keys, values)``: attention for one query ``q`` of
    shape ``(d_k,)`` over ``keys`` ``(n, d_k)`` and ``values`` ``(n, d_v)``, returning
    ``(d_v,)``; checked property by property on fresh inputs."""

    def run(q, k, v, where=""):
        return invoke(fn, (q, k, v), signature=LOOKUP_SIGNATURE, shape=(v.shape[1],),
                      where=where or describe(q=q, keys=k, values=v))

    def output_shape():
        for i, (d_k, n, d_v) in enumerate(LOOKUP_SIZES):
            run(*_draws(i, (d_k,), (n, d_k), (n, d_v)))

    def matches_attention():
        for i, (d_k, n, d_v) in enumerate(LOOKUP_SIZES):
            q, k, v = _draws(10 + i, (d_k,), (n, d_k), (n, d_v))
            where = describe(q=q, keys=k, values=v)
            error = np.abs(run(q, k, v) - _attention_of(q[None], k, v)[0]).max()
            if error > 1e-9:
                raise Failure(f"differs from attncore's attention for this query by "
                              f"{error:.3g}", where)

    def average_of_values():
        q, k, _ = _draws(20, (4,), (6, 4), (6, 3))
        u = np.array([0.5, -2.0, 3.0])
        same = np.tile(u, (6, 1))
        where = describe(q=q, keys=k, values=same) + ", every value row the same"
        if np.abs(run(q, k, same, where) - u).max() > 1e-9:
            raise Failure("the result is not that common value row: the weights do not "
                          "sum to one", where)
        q, k, v = _draws(21, (4,), (6, 4), (6, 3))
        out = run(q, k, v)
        if (out < v.min(axis=0) - 1e-12).any() or (out > v.max(axis=0) + 1e-12).any():
            raise Failure("a coordinate of the result lies outside the range of the "
                          "values' coordinates", describe(q=q, keys=k, values=v))

    def key_order():
        q, k, v = _draws(30, (4,), (6, 4), (6, 3))
        order = np.array([3, 0, 5, 1, 4, 2])
        where = describe(q=q, keys=k, values=v) + ", keys and values permuted together"
        if np.abs(run(q, k, v) - run(q, k[order], v[order], where)).max() > 1e-9:
            raise Failure("permuting the keys together with their values changed the "
                          "result", where)

    def single_key():
        q, k, v = _draws(40, (4,), (1, 4), (1, 3))
        where = describe(q=q, keys=k, values=v)
        if np.abs(run(q, k, v, where) - v[0]).max() > 1e-9:
            raise Failure("with one key the result should be that key's value", where)

    def inputs_unchanged():
        q, k, v = _draws(50, (4,), (6, 4), (6, 3))
        given = [q.copy(), k.copy(), v.copy()]
        with np.errstate(all="ignore"):
            try:
                fn(*given)
            except Exception:                      # reported by the other properties
                return
        for name, before, after in zip(("q", "keys", "values"), (q, k, v), given):
            if not np.array_equal(before, after):
                raise Failure(f"the function changed its argument {name} in place",
                              describe(q=q, keys=k, values=v))

    return judge(fn, LOOKUP_SIGNATURE, {
        "output_shape": output_shape, "matches_attention": matches_attention,
        "average_of_values": average_of_values, "key_order": key_order,
        "single_key": single_key, "inputs_unchanged": inputs_unchanged})


ROWS_SIGNATURE = "my_attention_rows(Q, K, V)"
# (batch axes, n_q, n_k, d_k, d_v): no batch axes, then one and two of them
ROWS_SIZES = (((), 4, 6, 8, 3), ((2,), 3, 5, 4, 2), ((2, 3), 5, 4, 4, 6))


@exercise("ex-what-attention-all-queries")
def all_queries(fn) -> Verdict:
    """A reader-written ``my_attention_rows(Q, K, V)`` for ``Q`` of shape
    ``(..., n_q, d_k)``, ``K`` ``(..., n_k, d_k)`` and ``V`` ``(..., n_k, d_v)``, returning
    ``(..., n_q, d_v)``; checked property by property on fresh inputs."""

    def qkv(seed, batch, n_q, n_k, d_k, d_v):
        return _draws(seed, batch + (n_q, d_k), batch + (n_k, d_k), batch + (n_k, d_v))

    def run(q, k, v, where=""):
        return invoke(fn, (q, k, v), signature=ROWS_SIGNATURE,
                      shape=q.shape[:-1] + (v.shape[-1],),
                      where=where or describe(Q=q, K=k, V=v))

    def output_shape():
        for i, size in enumerate(ROWS_SIZES):
            run(*qkv(i, *size))

    def matches_attention():
        for i, size in enumerate(ROWS_SIZES):
            q, k, v = qkv(10 + i, *size)
            error = np.abs(run(q, k, v) - _attention_of(q, k, v)).max()
            if error > 1e-9:
                raise Failure(f"differs from attncore's attention by {error:.3g}",
                              describe(Q=q, K=k, V=v))

    def each_query_alone():
        for i, size in enumerate(ROWS_SIZES):
            q, k, v = qkv(20 + i, *size)
            out = run(q, k, v)
            for r in range(q.shape[-2]):
                alone = run(q[..., r:r + 1, :], k, v)
                if np.abs(out[..., r:r + 1, :] - alone).max() > 1e-9:
                    raise Failure(f"the output of query {r} changes when the other "
                                  f"queries are left out", describe(Q=q, K=k, V=v))

    def each_batch_item_alone():
        for i, size in enumerate(ROWS_SIZES[1:]):
            q, k, v = qkv(30 + i, *size)
            out = run(q, k, v)
            for b in np.ndindex(*size[0]):
                alone = run(q[b], k[b], v[b])
                if np.abs(out[b] - alone).max() > 1e-9:
                    raise Failure(f"batch item {b} differs from the same item computed "
                                  f"alone", describe(Q=q, K=k, V=v))

    def permutations():
        q, k, v = qkv(40, (), 4, 6, 8, 3)
        out, where = run(q, k, v), describe(Q=q, K=k, V=v)
        rows, keys = np.array([2, 0, 3, 1]), np.array([3, 0, 5, 1, 4, 2])
        if np.abs(run(q[rows], k, v) - out[rows]).max() > 1e-9:
            raise Failure("permuting the queries did not permute the outputs the same "
                          "way", where)
        if np.abs(run(q, k[keys], v[keys]) - out).max() > 1e-9:
            raise Failure("permuting the keys together with their values changed the "
                          "outputs", where)

    def inputs_unchanged():
        q, k, v = qkv(50, (2,), 3, 5, 4, 2)
        given = [q.copy(), k.copy(), v.copy()]
        with np.errstate(all="ignore"):
            try:
                fn(*given)
            except Exception:                      # reported by the other properties
                return
        for name, before, after in zip("QKV", (q, k, v), given):
            if not np.array_equal(before, after):
                raise Failure(f"the function changed its argument {name} in place",
                              describe(Q=q, K=k, V=v))

    return judge(fn, ROWS_SIGNATURE, {
        "output_shape": output_shape, "matches_attention": matches_attention,
        "each_query_alone": each_query_alone,
        "each_batch_item_alone": each_batch_item_alone, "permutations": permutations,
        "inputs_unchanged": inputs_unchanged})
