"""Checkers for the exercises of chapter 9, attention at inference (the KV cache, MQA, GQA).

Each checker recomputes what it compares with from the published model shapes in
:mod:`attncore.lab.inference` and the chapter's formulas, in exact integer arithmetic where
the answer is a count. Hints point at the method, never at the number.
"""

from __future__ import annotations

import math
import numbers

from ..inference import PUBLISHED, kv_cache_bytes, weight_bytes
from . import Verdict, exercise

# ex-inference-cache-size: LLaMA-2 70B, a batch of 16 sequences of 4096 tokens, 16-bit
CACHE_MODEL, CACHE_BATCH, CACHE_TOKENS = "LLaMA-2 70B", 16, 4096

# ex-inference-batch: Mistral 7B, sequences of 8192 tokens, an 80 GiB device
BATCH_MODEL, BATCH_TOKENS, BATCH_MEMORY = "Mistral 7B", 8192, 80 * 2**30

# ex-inference-intensity: LLaMA-2 70B in bfloat16, against a device that does 295 flops
# in the time it reads one byte
INTENSITY_MODEL, DEVICE_FLOPS_PER_BYTE = "LLaMA-2 70B", 295


def _integer(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} should be a number, got {type(value).__name__}")
    if not float(value).is_integer():
        raise ValueError(f"{name} should be a whole number, got {value}")
    return int(value)


@exercise("ex-inference-cache-size")
def cache_size(bytes_gqa, bytes_mha) -> Verdict:
    """The KV cache of LLaMA-2 70B for 16 sequences of 4096 tokens in 16-bit numbers, with
    its 8 key/value heads and as it would be with one per query head."""
    model = PUBLISHED[CACHE_MODEL]
    want = {"with 8 key/value heads": kv_cache_bytes(model, CACHE_TOKENS, batch=CACHE_BATCH),
            "with 64 key/value heads": kv_cache_bytes(model, CACHE_TOKENS, batch=CACHE_BATCH,
                                                      kv_heads=model.heads)}
    got = dict(zip(want, (_integer("my_bytes_gqa", bytes_gqa),
                          _integer("my_bytes_mha", bytes_mha))))
    parts = {name: got[name] == want[name] for name in want}
    details = tuple(f"{name}: {'right' if ok else 'not yet'}" for name, ok in parts.items())
    if all(parts.values()):
        return Verdict(True, "Grouping 64 query heads onto 8 key/value heads makes the cache "
                             "8 times smaller; the weights do not change size.", details)
    per_token = 2 * model.layers * model.kv_heads * model.d_head * 2
    for name, value in got.items():
        if value * 2 == want[name]:
            return Verdict(False, "one factor 2 is missing: a key and a value per head, and "
                                  "2 bytes per number.", details)
        if value * 1024 == want[name] or value == want[name] / 2**30:
            return Verdict(False, "give the answer in bytes, not in KiB or GiB.", details)
    if got["with 8 key/value heads"] == per_token * CACHE_TOKENS:
        return Verdict(False, "that is one sequence; the batch holds 16.", details)
    return Verdict(False, "multiply 2 (keys and values), the layers, the key/value heads, "
                          "d_head, the tokens, the bytes per number and the batch.", details)


def largest_batch() -> int:
    """The most sequences whose caches fit next to Mistral 7B's weights."""
    model = PUBLISHED[BATCH_MODEL]
    room = BATCH_MEMORY - int(weight_bytes(model))
    return room // kv_cache_bytes(model, BATCH_TOKENS)


@exercise("ex-inference-batch")
def batch(my_batch) -> Verdict:
    """The largest batch of 8192-token sequences Mistral 7B can serve in 80 GiB."""
    value = _integer("my_batch", my_batch)
    answer = largest_batch()
    model = PUBLISHED[BATCH_MODEL]
    per_sequence = kv_cache_bytes(model, BATCH_TOKENS)
    if value == answer:
        return Verdict(True, "Without the sliding window each sequence would need twice the "
                             "cache, and the batch would be about half as large.")
    if value == (BATCH_MEMORY - int(weight_bytes(model))) // (2 * per_sequence):
        return Verdict(False, "with a window of 4096 positions, how many positions does each "
                              "layer's cache hold for a sequence of 8192 tokens?")
    if value > answer:
        return Verdict(False, f"{value} sequences do not fit: leave room for the weights "
                              f"(2 bytes per parameter) and round down.")
    return Verdict(False, f"{value} sequences fit, but so do more; divide the memory left "
                          f"after the weights by one sequence's cache, and round down.")


def intensity_limit() -> float:
    """Flops per byte of one decoding step's attention in the long-cache limit."""
    model = PUBLISHED[INTENSITY_MODEL]
    return 2 * (model.heads // model.kv_heads) / 2


@exercise("ex-inference-intensity")
def intensity(my_intensity, my_queries) -> Verdict:
    """LLaMA-2 70B's decoding attention: flops per byte of cache read (one query per
    sequence, long cache), and the fewest queries per step that reach 295 flops per byte."""
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
                              "bytes of one key and one value for each key/value head.",
                       details)
    return Verdict(False, "the intensity grows in proportion to the queries per step; round "
                          "up to a whole number of queries.", details)
