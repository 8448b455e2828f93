"""Checkers for the exercises of chapter 10, attention at inference (the KV cache, MQA, GQA).

Each checker recomputes what it compares with from the published model shapes in
:mod:`attncore.lab.inference` and the chapter's formulas, in exact integer arithmetic where
the answer is a count. Hints point at the method, never at the number.
"""

from __future__ import annotations

import math
import numbers

from ..inference import PUBLISHED, kv_cache_bytes, weight_bytes
from . import Verdict, exercise

# ex-inference-cache-size: LLaMA-2 70B, a batch of 16 sequences, 16-bit, 30 GiB of cache:
# the cache formula inverted for the longest context, with 8 and with 64 key/value heads
CACHE_MODEL, CACHE_BATCH, CACHE_BUDGET = "LLaMA-2 70B", 16, 30 * 2**30

# ex-inference-batch: Mistral 7B on an 80 GiB device, a batch of equally many sequences of
# 3000 and of 12000 tokens (one shorter, one longer than its sliding window of 4096)
BATCH_MODEL, BATCH_TOKENS, BATCH_MEMORY = "Mistral 7B", (3000, 12000), 80 * 2**30

# ex-inference-intensity: LLaMA-2 70B with its KV cache stored in 8-bit numbers, against a
# device that does 295 flops in the time it reads one byte
INTENSITY_MODEL, INTENSITY_BYTES, DEVICE_FLOPS_PER_BYTE = "LLaMA-2 70B", 1, 295


def _integer(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} should be a number, got {type(value).__name__}")
    if not float(value).is_integer():
        raise ValueError(f"{name} should be a whole number, got {value}")
    return int(value)


def longest_context(kv_heads: int | None = None) -> int:
    """The most tokens per sequence whose KV cache, for the whole batch, fits the budget."""
    model = PUBLISHED[CACHE_MODEL]
    per_token = kv_cache_bytes(model, 1, batch=CACHE_BATCH, kv_heads=kv_heads)
    tokens = CACHE_BUDGET // per_token
    assert kv_cache_bytes(model, tokens, batch=CACHE_BATCH, kv_heads=kv_heads) <= CACHE_BUDGET
    return tokens


@exercise("ex-inference-cache-size")
def cache_size(tokens_gqa, tokens_mha) -> Verdict:
    """The longest context whose KV cache, for 16 sequences of LLaMA-2 70B in 16-bit
    numbers, fits in 30 GiB: with its 8 key/value heads, and with one per query head."""
    model = PUBLISHED[CACHE_MODEL]
    want = {"with 8 key/value heads": longest_context(),
            "with 64 key/value heads": longest_context(kv_heads=model.heads)}
    got = dict(zip(want, (_integer("my_tokens_gqa", tokens_gqa),
                          _integer("my_tokens_mha", tokens_mha))))
    parts = {name: got[name] == want[name] for name in want}
    details = tuple(f"{name}: {'right' if ok else 'not yet'}" for name, ok in parts.items())
    if all(parts.values()):
        return Verdict(True, "Eight times fewer key/value heads, eight times longer "
                             "contexts in the same memory.", details)
    for name, value in got.items():
        if value == want[name] * 2:
            return Verdict(False, "one factor 2 is missing: a key and a value per head, and "
                                  "2 bytes per number.", details)
        if value == want[name] * CACHE_BATCH:
            return Verdict(False, "that is the context of one sequence alone; the 16 "
                                  "sequences of the batch share the budget.", details)
    return Verdict(False, "one token of one sequence costs 2 (keys and values) x layers x "
                          "key/value heads x d_head x bytes; divide the budget by that "
                          "times the batch, and round down.", details)


def largest_batch(window: bool = True) -> int:
    """The most sequences, equally many of each length, whose caches fit next to Mistral
    7B's weights (``window=False``: as if it had no sliding window)."""
    model = PUBLISHED[BATCH_MODEL]
    room = BATCH_MEMORY - int(weight_bytes(model))
    per_token = kv_cache_bytes(model, 1)
    pair = sum((min(n, model.window) if window else n) * per_token for n in BATCH_TOKENS)
    return len(BATCH_TOKENS) * (room // pair)


@exercise("ex-inference-batch")
def batch(my_batch) -> Verdict:
    """The largest batch of equally many 3000- and 12000-token sequences that Mistral 7B
    can serve in 80 GiB."""
    value = _integer("my_batch", my_batch)
    answer = largest_batch()
    model = PUBLISHED[BATCH_MODEL]
    room = BATCH_MEMORY - int(weight_bytes(model))
    if value == answer:
        return Verdict(True, "The short sequences hold every position they have, the long "
                             "ones only the window's; without the window the batch would "
                             "be about half as large.")
    if value == largest_batch(window=False):
        return Verdict(False, "with a window of 4096 positions, how many positions does each "
                              "layer's cache hold for a sequence of 12000 tokens?")
    if value == 2 * (room // (2 * kv_cache_bytes(model, model.window))):
        return Verdict(False, "a sequence shorter than the window has fewer positions to "
                              "keep than the window allows.")
    if value % len(BATCH_TOKENS):
        return Verdict(False, "the batch holds as many short sequences as long ones, so its "
                              "size is even.")
    if value > answer:
        return Verdict(False, f"{value} sequences do not fit: leave room for the weights "
                              f"(2 bytes per parameter) and round down.")
    return Verdict(False, f"{value} sequences fit, but so do more; divide the memory left "
                          f"after the weights by the cache of one short and one long "
                          f"sequence, and round down.")


def intensity_limit() -> float:
    """Flops per byte of one decoding step's attention in the long-cache limit."""
    model = PUBLISHED[INTENSITY_MODEL]
    return 2 * (model.heads // model.kv_heads) / INTENSITY_BYTES


@exercise("ex-inference-intensity")
def intensity(my_intensity, my_queries) -> Verdict:
    """LLaMA-2 70B's decoding attention with an 8-bit cache: flops per byte of cache read
    (one query per sequence, long cache), and the fewest queries per step that reach 295
    flops per byte."""
    if isinstance(my_intensity, bool) or not isinstance(my_intensity, numbers.Real):
        raise TypeError(f"my_intensity should be a number, got {type(my_intensity).__name__}")
    limit = intensity_limit()
    queries = math.ceil(DEVICE_FLOPS_PER_BYTE / limit)
    parts = {"flops per byte": abs(float(my_intensity) - limit) <= 0.01 * limit,
             "queries per step": _integer("my_queries", my_queries) == queries}
    details = tuple(f"{name}: {'right' if ok else 'not yet'}" for name, ok in parts.items())
    if all(parts.values()):
        return Verdict(True, "Even then only the attention is compute-bound; with GQA each "
                             "byte of cache serves a whole group of query heads.", details)
    if not parts["flops per byte"]:
        return Verdict(False, "count 4 d_head flops per key for each query head, and the "
                              "bytes of one key and one value for each key/value head, "
                              "1 byte per number here.", details)
    return Verdict(False, "the intensity grows in proportion to the queries per step; round "
                          "up to a whole number of queries.", details)


@exercise("ex-inference-decode-step")
def decode_step(fn) -> Verdict:
    """A reader-written ``my_decode_step(q_new, k_new, v_new, k_cache, v_cache)``, put
    through :func:`attncore.testing.check_kv_cache_decode` (PyTorch as the reference)."""
    from ...testing import check_kv_cache_decode

    if not callable(fn):
        return Verdict(False, f"expected a function my_decode_step(q_new, k_new, v_new, "
                              f"k_cache, v_cache), got {type(fn).__name__}")
    report = check_kv_cache_decode(fn)
    if report.passed:
        return Verdict(True, f"Your decoding step has all {len(report.results)} properties "
                             "the course checks, including agreement with PyTorch's "
                             "grouped-query attention over the whole sequence.")
    failed = report.failed
    return Verdict(False, f"{len(failed)} of the properties failed ({', '.join(failed)}). "
                          "print(ac.testing.check_kv_cache_decode(my_decode_step)) shows the "
                          "small input each one failed on.")
