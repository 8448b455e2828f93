"""Checkers for the exercises of the chapter on attention in today's LLMs.

Each checker recomputes what it compares with from the chapter's definitions (the RoPE
positions of a left-padded batch, the cost model of speculative decoding, MLA's cache
formula, int8 rounding by :class:`attncore.Int8KVCache`). Hints point at the method, never
at the number.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ...quantized_cache import Int8KVCache
from . import Verdict, exercise, real_answer

# ex-llms-left-padding: two prompts of these lengths, left-padded to the longest
PAD_LENGTHS = (3, 5)

# ex-llms-gamma: acceptance rate and the cost of a draft call relative to a target call
GAMMA_ALPHA, GAMMA_COST, GAMMA_MAX = 0.8, 0.1, 64

# ex-llms-lite-cache: DeepSeek-V2-Lite (DeepSeek-AI, 2024, Appendix B.1): 27 layers,
# 16 heads of width 128, d_c = 512, d_h^R = 64; 16-bit numbers
LITE = {"layers": 27, "heads": 16, "d_head": 128, "d_c": 512, "d_rope": 64, "bytes": 2}

# ex-llms-int8-row: one key row with an outlier channel, int8 with a scale per token
INT8_ROW = (12.7, 0.26, -0.04, 1.0)
INT8_ASKED = (1, 2)


def _int_list(name: str, value) -> list[int]:
    try:
        items = list(np.asarray(value).ravel())
    except Exception:                                   # noqa: BLE001 - any non-array
        raise TypeError(f"{name} should be a list of integers") from None
    out = []
    for v in items:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) \
                or not float(v).is_integer():
            raise TypeError(f"{name} should hold whole numbers, got {v!r}")
        out.append(int(v))
    return out


@exercise("ex-llms-left-padding")
def left_padding(positions, next_positions) -> Verdict:
    """RoPE positions of a batch of prompts of lengths 3 and 5, left-padded to 5 (padding
    slots may hold any position), and the position of each sequence's next token."""
    n = max(PAD_LENGTHS)
    got = np.asarray(_int_list("my_positions", positions))
    if got.size != len(PAD_LENGTHS) * n:
        return Verdict(False, f"Give one position per slot: {len(PAD_LENGTHS)} rows of {n}.")
    got = got.reshape(len(PAD_LENGTHS), n)
    nxt = _int_list("my_next_positions", next_positions)
    rows_ok = all((got[b, n - m:] == np.arange(m)).all() for b, m in enumerate(PAD_LENGTHS))
    next_ok = nxt == list(PAD_LENGTHS)
    details = (f"prompt positions: {'right' if rows_ok else 'not yet'}",
               f"next positions: {'right' if next_ok else 'not yet'}")
    if rows_ok and next_ok:
        return Verdict(True, "Each sequence's first real token is at position 0, whatever "
                             "padding precedes it.", details)
    if not rows_ok and all((got[b] == np.arange(n)).all() for b in range(len(PAD_LENGTHS))):
        return Verdict(False, "The column index is not the position: the padding is not "
                              "part of the text.", details)
    if not next_ok and nxt == [n] * len(PAD_LENGTHS):
        return Verdict(False, "The next position counts real tokens, not slots.", details)
    return Verdict(False, "Count from each sequence's first real token.", details)


@exercise("ex-llms-gamma")
def best_gamma(gamma) -> Verdict:
    """The number of draft tokens per round that maximises tokens per unit of time, at
    acceptance rate 0.8 with a draft call costing 0.1 of a target call."""
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) \
            or not float(gamma).is_integer() or gamma < 0:
        raise TypeError(f"my_gamma should be a whole number >= 0, got {gamma!r}")
    a, c = GAMMA_ALPHA, GAMMA_COST

    def rate(g: int) -> float:
        return (1 - a ** (g + 1)) / ((1 - a) * (g * c + 1))

    best = max(range(GAMMA_MAX), key=rate)
    g = int(gamma)
    if g == best:
        return Verdict(True, "Beyond it, each extra draft token costs more time than the "
                             "tokens it is expected to add.")
    if g == max(range(GAMMA_MAX), key=lambda k: (1 - a ** (k + 1)) / (1 - a)) or g > best:
        return Verdict(False, "Tokens per target call keep growing with gamma; divide by "
                              "the time of a round, which the drafts lengthen.")
    return Verdict(False, "Compare the expected tokens per round divided by the round's "
                          "time, gamma draft calls plus one target call, for each gamma.")


@exercise("ex-llms-lite-cache")
def lite_cache(bytes_mla, bytes_mha) -> Verdict:
    """Bytes per token of DeepSeek-V2-Lite's cache (all layers, 16-bit) with MLA, and with
    multi-head attention of the same heads."""
    m = LITE
    want = {"MLA": (m["d_c"] + m["d_rope"]) * m["layers"] * m["bytes"],
            "MHA": 2 * m["heads"] * m["d_head"] * m["layers"] * m["bytes"]}
    got = {"MLA": real_answer("my_bytes_mla", bytes_mla),
           "MHA": real_answer("my_bytes_mha", bytes_mha)}
    parts = {k: got[k] == want[k] for k in want}
    details = tuple(f"{k}: {'right' if ok else 'not yet'}" for k, ok in parts.items())
    if all(parts.values()):
        return Verdict(True, "The latent and the shared RoPE key replace a key and a value "
                             "per head.", details)
    if got["MLA"] == m["d_c"] * m["layers"] * m["bytes"]:
        return Verdict(False, "The decoupled RoPE key is cached too.", details)
    for k in want:
        if got[k] * m["bytes"] == want[k] or got[k] * m["layers"] == want[k]:
            return Verdict(False, "Count every layer, and 2 bytes per number.", details)
    return Verdict(False, "Per layer MLA caches d_c + d_h^R numbers per token, MHA a key and "
                          "a value per head; then layers and bytes.", details)


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
