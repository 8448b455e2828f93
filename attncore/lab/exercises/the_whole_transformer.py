"""Checkers for the exercises of chapter 11, the whole transformer (the capstone).

Each checker recomputes what it compares with: the parameters from a block that
:func:`attncore.init_transformer_block` builds, the flops from the products a block
computes, the work of generation by walking through the steps. Hints point at the method,
never at the number.
"""

from __future__ import annotations

from ...transformer import init_transformer_block
from . import Verdict, exercise, real_answer

# ex-capstone-gpt2-parameters: GPT-2 small's sizes (a tied head, learned positions)
GPT2_VOCAB, GPT2_MAX_LEN, GPT2_D, GPT2_HEADS, GPT2_D_FF, GPT2_LAYERS = \
    50257, 1024, 768, 12, 3072, 12

# ex-capstone-crossover: a block of GPT-2 small's widths
CROSS_D_MODEL, CROSS_D_FF = 768, 3072

# ex-capstone-cache-work: a prompt, new tokens, blocks
WORK_PROMPT, WORK_NEW, WORK_BLOCKS = 28, 100, 2


def _whole(name: str, value) -> int:
    number = real_answer(name, value)
    if not number.is_integer():
        raise ValueError(f"{name} should be a whole number, got {value}")
    return int(number)


@exercise("ex-capstone-gpt2-parameters")
def gpt2_parameters(parameters) -> Verdict:
    """The parameters of a language model of GPT-2 small's sizes, built as this chapter's
    model is (blocks with biases, a final LayerNorm, the head tied to the embedding)."""
    got = _whole("my_parameters", parameters)
    d = GPT2_D
    block = init_transformer_block(d, GPT2_HEADS, GPT2_D_FF, dtype="float32")
    embeddings = GPT2_VOCAB * d + GPT2_MAX_LEN * d
    want = GPT2_LAYERS * block.num_parameters() + embeddings + 2 * d
    if got == want:
        return Verdict(True, "About 124 million: nearly a third of them is the token "
                             "embedding, which the tied head reuses.")
    if got == want + GPT2_VOCAB * d or got == want + GPT2_VOCAB * d + GPT2_VOCAB:
        return Verdict(False, "the head is tied: its weights are the embedding's, counted "
                              "once.")
    if got == want - GPT2_MAX_LEN * d:
        return Verdict(False, "the learned positions are parameters too.")
    if got in (want - 2 * d, want - 2 * d * (GPT2_LAYERS + 1), want - 4 * d * GPT2_LAYERS):
        return Verdict(False, "count every LayerNorm: two per block and the final one, "
                              "each with a gain and a shift.")
    return Verdict(False, "one block's parameters times the blocks, plus the token and "
                          "position embeddings, plus the final LayerNorm.")


def _block_flops(n: int, d: int, d_ff: int) -> tuple[int, int]:
    """(attention products, everything else) of a block's forward pass on n tokens, in
    flops (2 per multiply-add), as torch's FlopCounterMode counts matrix products."""
    scores_and_values = 2 * (2 * n * n * d)
    rest = 2 * n * d * 4 * d + 2 * (2 * n * d * d_ff)
    return scores_and_values, rest


@exercise("ex-capstone-crossover")
def crossover(n) -> Verdict:
    """The sequence length at which a block's n^2 products cost as much as the rest."""
    got = _whole("my_n", n)
    lo, hi = 1, 1
    while _block_flops(hi, CROSS_D_MODEL, CROSS_D_FF)[0] < \
            _block_flops(hi, CROSS_D_MODEL, CROSS_D_FF)[1]:
        lo, hi = hi, 2 * hi
    while lo < hi:                       # the smallest n where attention's products catch up
        mid = (lo + hi) // 2
        a, r = _block_flops(mid, CROSS_D_MODEL, CROSS_D_FF)
        lo, hi = (mid + 1, hi) if a < r else (lo, mid)
    if got == lo:
        return Verdict(True, "Below that length the projections and the feed-forward "
                             "layer dominate a block's cost, above it the n^2 products.")
    a, r = _block_flops(got, CROSS_D_MODEL, CROSS_D_FF) if got > 0 else (0, 1)
    if got > 0 and 2 * a == r:
        return Verdict(False, "both attention products grow as n^2: Q K^T and the weights "
                              "times V.")
    return Verdict(False, "write both costs as functions of n, set them equal and divide "
                          "by n.")


@exercise("ex-capstone-cache-work")
def cache_work(recomputed, cached) -> Verdict:
    """Key/value projections (one per position and block) of generating with and without
    the cache."""
    got = (_whole("my_recomputed", recomputed), _whole("my_cached", cached))
    recompute = cache = 0
    fed = WORK_PROMPT                      # positions the next step runs through the blocks
    length = WORK_PROMPT
    for _ in range(WORK_NEW):
        recompute += length * WORK_BLOCKS  # the whole prefix, every step
        cache += fed * WORK_BLOCKS         # only the positions not yet in the cache
        length += 1
        fed = 1
    want = (recompute, cache)
    details = (f"recomputed: {'right' if got[0] == want[0] else 'not yet'}",
               f"cached: {'right' if got[1] == want[1] else 'not yet'}")
    if got == want:
        return Verdict(True, "The cache turns a sum that grows as the square of the "
                             "length into one that grows linearly.", details)
    if got[1] == want[1] + WORK_BLOCKS or got[0] == want[0] + WORK_BLOCKS * (
            WORK_PROMPT + WORK_NEW):
        return Verdict(False, "the last token is sampled but never fed back in.", details)
    if got[0] * WORK_BLOCKS == want[0] or got[1] * WORK_BLOCKS == want[1]:
        return Verdict(False, "every block has its own keys and values.", details)
    return Verdict(False, "walk through the steps: which positions go through the blocks "
                          "at each one?", details)
