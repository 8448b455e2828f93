"""Checkers for the exercises of chapter 16, caches in serving.

Each checker recomputes what it compares with from the chapter's definitions: the decoding
step of a left-padded batch is run through :func:`attncore.rope_multi_head_attention` and
compared with each sequence alone, int8 rounding is done by :class:`attncore.Int8KVCache`,
and the bound on the attention weights is derived from the int8 error bound. The reader's
reading of a paged cache is put through :func:`attncore.testing.check_gather_pages`. Hints
point at the method, never at the number.
"""

from __future__ import annotations

import math

import numpy as np

from ...multihead import init_multihead
from ...positions import rope_multi_head_attention
from ...quantized_cache import Int8KVCache
from . import Verdict, exercise, real_answer

# ex-llms-left-padding: prompts of these lengths, left-padded to the longest, then one
# generated token per sequence in the next column; the layer of the chapter's section
PAD_LENGTHS = (2, 5, 3)
PAD_LAYER = dict(d_model=32, num_heads=4, n_kv_heads=2, seed=0)
PAD_BASE = 10000.0
PAD_SEED = 16
PAD_TOLERANCE = 1e-10

# ex-llms-int8-row: one key row with an outlier channel, int8 with a scale per token
INT8_ROW = (12.7, 0.26, -0.04, 1.0)
INT8_ASKED = (1, 2)

# ex-llms-int8-weights: per-token key scales at most S, a query of width D whose entries'
# magnitudes sum to L1, scores scaled by 1 / sqrt(D)
WEIGHTS = dict(s=0.02, d=64, l1=8.0)


def _padded_step(new_positions: np.ndarray, new_mask: np.ndarray) -> list[bool]:
    """For each sequence: does its new token's output, with the reader's position and mask
    row, equal the output of that token in its sequence alone?"""
    n = max(PAD_LENGTHS)
    batch = len(PAD_LENGTHS)
    params = init_multihead(PAD_LAYER["d_model"], PAD_LAYER["num_heads"],
                            n_kv_heads=PAD_LAYER["n_kv_heads"], seed=PAD_LAYER["seed"])
    x = np.random.default_rng(PAD_SEED).standard_normal((batch, n + 1, PAD_LAYER["d_model"]))
    pad = n - np.array(PAD_LENGTHS)
    cols = np.arange(n)
    positions = np.concatenate([np.maximum(cols[None, :] - pad[:, None], 0),
                                new_positions[:, None]], axis=1)
    real = cols[None, :] >= pad[:, None]
    prompt_mask = real[:, None, :] & (cols[:, None] >= cols[None, :])[None]
    mask = np.zeros((batch, n + 1, n + 1), dtype=bool)
    mask[:, :n, :n] = prompt_mask
    mask[:, n, :] = new_mask
    out = rope_multi_head_attention(params, x, positions, mask=mask, base=PAD_BASE)
    right = []
    for b, m in enumerate(PAD_LENGTHS):
        alone = rope_multi_head_attention(params, x[b, n - m:], causal=True, base=PAD_BASE)
        right.append(bool(np.abs(out[b, n] - alone[-1]).max() < PAD_TOLERANCE))
    return right


@exercise("ex-llms-left-padding")
def left_padding(new_positions, new_mask) -> Verdict:
    """The RoPE position and the mask row of one generated token per sequence, appended in
    the next column after a left-padded prefill of prompts of lengths PAD_LENGTHS."""
    n, batch = max(PAD_LENGTHS), len(PAD_LENGTHS)
    pos = np.asarray(new_positions)
    if pos.shape != (batch,) or pos.dtype.kind not in "iu" and not (
            pos.dtype.kind == "f" and np.all(pos == np.round(pos))):
        return Verdict(False, f"Give my_new_positions as {batch} whole numbers, one per "
                              "sequence.")
    row = np.asarray(new_mask)
    if row.shape != (batch, n + 1) or row.dtype.kind not in "biu" \
            or not np.isin(row, (0, 1)).all():
        return Verdict(False, f"Give my_new_mask as {batch} rows of {n + 1} booleans, one "
                              "per column the new query could see.")
    row = row.astype(bool)
    right = _padded_step(pos.astype(int), row)
    details = tuple(f"sequence {b} (prompt of {m}): {'right' if ok else 'not yet'}"
                    for b, (m, ok) in enumerate(zip(PAD_LENGTHS, right)))
    if all(right):
        return Verdict(True, "each sequence continues its own positions and sees its own "
                             "tokens only, whatever column it is written in.", details)
    pad = n - np.array(PAD_LENGTHS)
    if row[:, :n][np.arange(n)[None, :] < pad[:, None]].any():
        return Verdict(False, "the padding slots are not text: the new query must not see "
                              "them either.", details)
    if not row[:, n].all():
        return Verdict(False, "a token attends to itself: its own column belongs in its "
                              "row.", details)
    return Verdict(False, "the prompt's positions were counted from each sequence's first "
                          "real token; the new token continues that count.", details)


@exercise("ex-llms-int8-row")
def int8_row(values) -> Verdict:
    """The values read back for channels 1 and 2 of the row INT8_ROW stored with one int8
    scale for the whole row."""
    try:
        got = [float(v) for v in np.asarray(values, dtype=float).ravel()]
    except (TypeError, ValueError):
        raise TypeError("my_values should be two numbers") from None
    if len(got) != len(INT8_ASKED):
        return Verdict(False, f"Give {len(INT8_ASKED)} numbers, one per channel asked for.")
    cache = Int8KVCache(1, (), len(INT8_ROW))
    row = np.asarray([INT8_ROW])
    keys, _ = cache.append(row, row)
    want = [float(keys[0, i]) for i in INT8_ASKED]
    if all(math.isclose(g, w, abs_tol=1e-9) for g, w in zip(got, want)):
        return Verdict(True, "The outlier sets the step for the whole row; small channels "
                             "keep only a few levels.")
    if all(math.isclose(g, INT8_ROW[i], abs_tol=1e-9) for g, i in zip(got, INT8_ASKED)):
        return Verdict(False, "Those are the stored inputs; what comes back is a whole "
                              "number of steps.")
    return Verdict(False, "Find the step max|row| / 127, round each value to a whole number "
                          "of steps, multiply back.")


@exercise("ex-llms-int8-weights")
def int8_weights(factor) -> Verdict:
    """The bound e^(2 delta) on the ratio of an attention weight computed from int8 keys to
    the exact one, delta = (s / 2) * sum|q_i| / sqrt(d) the bound on each score's error."""
    factor = real_answer("my_factor", factor)
    delta = WEIGHTS["s"] / 2 * WEIGHTS["l1"] / math.sqrt(WEIGHTS["d"])
    if math.isclose(factor, math.exp(2 * delta), rel_tol=1e-4):
        return Verdict(True, "the scores move by at most delta, and a weight's numerator "
                             "and its normaliser each by a factor of at most e^delta.")
    if math.isclose(factor, math.exp(delta), rel_tol=1e-4):
        return Verdict(False, "that bounds the numerator e^(score) alone; the normaliser, "
                              "a sum over all the keys, moves too.")
    if math.isclose(factor, 1 + 2 * delta, rel_tol=1e-4):
        return Verdict(False, "close, but a factor on e^(score) is an exponential, not a "
                              "first-order estimate.")
    return Verdict(False, "first bound the error of one score q . k / sqrt(d) from the error "
                          "of each key number, then see how far a softmax weight can move "
                          "when every score moves by at most that much.")


@exercise("ex-llms-gather-pages")
def gather_pages(fn) -> Verdict:
    """A reader-written ``my_gather_pages(key_blocks, block_table, length)``, put through
    :func:`attncore.testing.check_gather_pages` on fresh pools and tables."""
    from ...testing import check_gather_pages

    if not callable(fn):
        return Verdict(False, f"expected a function my_gather_pages(key_blocks, "
                              f"block_table, length), got {type(fn).__name__}")
    report = check_gather_pages(fn)
    if report.passed:
        return Verdict(True, f"your function has all {len(report.results)} properties: it "
                             "reads every position from its block and slot, stops at the "
                             "sequence's length, and follows any order of blocks.")
    failed = report.failed
    first = report[failed[0]]
    return Verdict(False, f"{len(failed)} of the {len(report.results)} properties failed "
                          f"({', '.join(failed)}). The first: {first.detail}, on "
                          f"{first.input}. print(ac.testing.check_gather_pages("
                          "my_gather_pages)) shows each one.")
