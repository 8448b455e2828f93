"""Checkers for the exercises of chapter 1 (what attention computes)."""

from __future__ import annotations

import numpy as np

from ...attention import scaled_dot_product_attention
from . import Verdict, exercise

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
