"""Checkers for the exercises of the real-LLM chapter (SmolLM2-135M computed by attncore)."""

from __future__ import annotations

import functools
import math

import numpy as np

from . import Verdict, exercise, real_answer

# ex-real-llm-quantize: blocks of 32 weights, drawn like a trained matrix's (small, centred
# near zero, a few larger ones), quantized to Q4_1 and read back.
QUANT_BLOCKS, QUANT_SEED = 16, 13


def _q4_1_round_trip(blocks: np.ndarray) -> np.ndarray:
    """What a Q4_1 file stores for ``blocks`` ``(k, 32)``, read back: llama.cpp's own
    quantization and dequantization (``gguf.quants``) where the package is installed, the
    same arithmetic written out otherwise."""
    try:
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize, quantize

        raw = quantize(blocks.astype(np.float32), GGMLQuantizationType.Q4_1)
        return dequantize(raw, GGMLQuantizationType.Q4_1).reshape(blocks.shape)
    except ImportError:
        lo = blocks.min(axis=-1, keepdims=True).astype(np.float32)
        d = ((blocks.max(axis=-1, keepdims=True) - lo) / 15).astype(np.float32)
        inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
        q = np.clip(np.trunc((blocks - lo) * inv + np.float32(0.5)), 0, 15)
        return d.astype(np.float16).astype(np.float32) * q \
            + lo.astype(np.float16).astype(np.float32)


@exercise("ex-real-llm-quantize")
def quantize_block(my_q4_1) -> Verdict:
    """The reader's ``my_q4_1(block)``: 32 numbers in, the 32 numbers Q4_1 gives back."""
    if not callable(my_q4_1):
        return Verdict(False, f"expected a function my_q4_1(block), got "
                              f"{type(my_q4_1).__name__}")
    rng = np.random.default_rng(QUANT_SEED)
    blocks = (0.03 * rng.standard_t(4, size=(QUANT_BLOCKS, 32))).astype(np.float32)
    want = _q4_1_round_trip(blocks)
    for block, expected in zip(blocks, want):
        got = np.asarray(my_q4_1(block.copy()), dtype=np.float64)
        if got.shape != (32,):
            return Verdict(False, f"my_q4_1 returned shape {got.shape}; a block of 32 "
                                  f"weights gives back 32 numbers.")
        step = float(block.max() - block.min()) / 15
        worst = float(np.abs(got - expected).max())
        if worst > 0.05 * step:
            return Verdict(False, f"on one block your values differ from the format's by "
                                  f"up to {worst / step:.2f} of a quantization step. The "
                                  f"16 levels run from the block's minimum to its maximum, "
                                  f"and each weight goes to the nearest level.")
    return Verdict(True, "Your round trip is the format's: 16 levels spread from each "
                         "block's minimum to its maximum, every weight on the nearest one.")


# ex-real-llm-cache-crossover: one sequence's key/value cache in float16 against the bytes of
# every tensor in SmolLM2's file.
CACHE_BYTES_PER_NUMBER = 2


@functools.lru_cache(maxsize=1)
def _file_facts() -> tuple[int, int]:
    """(bytes of every tensor in the file, cache bytes per token in float16)."""
    from ...pretrained.gguf_file import read_llama_gguf

    file = read_llama_gguf()
    c = file.config
    weights = sum(t.nbytes for t in file.tensors.values())
    per_token = 2 * c.num_layers * c.n_kv_heads * c.d_head * CACHE_BYTES_PER_NUMBER
    return weights, per_token


@exercise("ex-real-llm-cache-crossover")
def cache_crossover(my_tokens) -> Verdict:
    """From how many tokens on one sequence's float16 cache outweighs the file's tensors."""
    tokens = real_answer("my_tokens", my_tokens)
    weights, per_token = _file_facts()
    want = math.ceil(weights / per_token)
    if abs(tokens - want) <= 1:
        return Verdict(True, "A few tens of thousands of tokens of one conversation hold as "
                             "many bytes as the whole 4-bit model: at long contexts, and "
                             "with many sequences at once, the cache is what fills memory.")
    if abs(tokens - want / 3) <= 2 or abs(tokens - 2 * want) <= 2:
        hint = ("count keys and values, in every layer, for the 3 key/value heads the "
                "cache stores (not the 9 query heads).")
    else:
        hint = ("divide the bytes of all the file's tensors by the cache's bytes per "
                "token: 2 (key and value) x layers x key/value heads x head width x 2 bytes.")
    return Verdict(False, hint)


# ex-real-llm-sink-score: a query with N other keys, all scoring 0, parks a share P of its
# weight on the first token.
SINK_OTHER_KEYS, SINK_SHARE = 100, 0.9


@exercise("ex-real-llm-sink-score")
def sink_score(my_score) -> Verdict:
    """The score the first key needs for a share P of the weight against N keys at 0."""
    score = real_answer("my_score", my_score)
    got = 1 / (1 + SINK_OTHER_KEYS * math.exp(-score))
    if abs(got - SINK_SHARE) < 5e-4:
        return Verdict(True, "The score grows only with the logarithm of the number of other "
                             "keys: a sink stays cheap in long contexts.")
    return Verdict(False, f"with that score the first token gets {got:.3f} of the weight. "
                          f"Write its softmax weight with the other keys' exp(0) = 1 in the "
                          f"denominator, set it to the share and solve for the score.")
