"""Instruments for the chapter on attention in today's LLMs: small models to speculate
with, and the measurements of paged and quantized caches.

* :data:`SHIPPED_TEXT`, :class:`CharNgram` -- character n-gram language models trained on
  the course's own sentences (no download): a target and a draft for speculative sampling
* :func:`sample_autoregressive`, :func:`speculative_generate` -- generation one token per
  target call, and by speculative sampling with :func:`attncore.speculative_accept`
* :func:`markov_sequences` -- many short sequences from a Markov chain, sampled either way,
  for a Monte Carlo check of the output distribution
* :func:`counts_of`, :func:`pooled_cells`, :func:`chi_square_test` -- Pearson's
  goodness-of-fit test of those samples against the target's probabilities, with the
  cells of small expected count pooled first
* :func:`block_usage` -- slots reserved by a contiguous allocator and by a paged one for a
  workload of sequence lengths
* :func:`keys_with_outlier_channels`, :func:`int8_errors` -- keys shaped like a trained
  model's (a few channels much larger than the rest), and what int8 caches do to them
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..paged import BlockPool, PagedKVCache
from ..quantized_cache import Int8KVCache
from ..speculative import speculative_accept
from .sentences import DETERMINER_SENTENCES, RETRIEVAL_PAIRS

__all__ = ["SHIPPED_TEXT", "BlockUsage", "CharNgram", "Int8Errors", "SpeculativeRun",
           "block_usage", "chi_square_test", "counts_of", "int8_errors",
           "keys_with_outlier_channels", "markov_sequences", "pooled_cells",
           "sample_autoregressive", "speculative_generate"]

#: The course's hand-written sentences, lower-cased, one text (about 2200 characters).
SHIPPED_TEXT: str = " ".join([s for s, _ in DETERMINER_SENTENCES]
                             + [f"{q} {a}" for q, a in RETRIEVAL_PAIRS]).lower()

Model = Callable[[Sequence[int]], np.ndarray]


class CharNgram:
    """A character n-gram model with add-``alpha`` smoothing.

    ``model(tokens)`` is the distribution of the next character given the last
    ``order - 1`` tokens: ``(count(context, c) + alpha) / (count(context) + alpha *
    vocab)``. A context never seen in the text (or fewer tokens than ``order - 1``)
    backs off to its longest seen suffix.

    Parameters
    ----------
    text : str
        Training text; its characters are the vocabulary (sorted).
    order : int
        ``n`` of the n-gram, ``>= 1`` (1: character frequencies alone).
    alpha : float, default 0.01
        Added to every count, ``> 0``, so that every character has probability above 0.
    """

    def __init__(self, text: str, order: int, alpha: float = 0.01) -> None:
        if not isinstance(order, int) or order < 1:
            raise ValueError(f"order: expected a positive integer, got {order!r}")
        if not alpha > 0:
            raise ValueError(f"alpha: expected a positive number, got {alpha!r}")
        self.vocab = sorted(set(text))
        self.order, self.alpha = order, float(alpha)
        self._index = {c: i for i, c in enumerate(self.vocab)}
        ids = self.encode(text)
        self._counts: dict[tuple[int, ...], np.ndarray] = {}
        for n in range(order):             # contexts of every length up to order - 1
            for i in range(n, len(ids)):
                ctx = tuple(ids[i - n:i])
                row = self._counts.setdefault(ctx, np.zeros(len(self.vocab)))
                row[ids[i]] += 1

    def encode(self, text: str) -> list[int]:
        return [self._index[c] for c in text]

    def decode(self, tokens: Sequence[int]) -> str:
        return "".join(self.vocab[t] for t in tokens)

    def __call__(self, tokens: Sequence[int]) -> np.ndarray:
        ctx = tuple(tokens[max(0, len(tokens) - self.order + 1):])
        while ctx not in self._counts:                     # back off to a seen context
            ctx = ctx[1:]
        row = self._counts[ctx]
        return (row + self.alpha) / (row.sum() + self.alpha * len(self.vocab))


def _draw(dist: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(dist)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"),
                   len(dist) - 1))


def sample_autoregressive(model: Model, prompt: Sequence[int], n_new: int, *,
                          rng: np.random.Generator) -> list[int]:
    """``n_new`` tokens after ``prompt``, each drawn from ``model`` (one call per token)."""
    tokens = list(prompt)
    for _ in range(n_new):
        tokens.append(_draw(model(tokens), rng))
    return tokens[len(prompt):]


class SpeculativeRun(NamedTuple):
    """What :func:`speculative_generate` produced: the tokens, the calls of the target
    (each scores ``gamma + 1`` positions at once), and the draft tokens the target
    accepted per round (the test results: in the last round, tokens past ``n_new`` count
    too, although they are dropped from ``tokens``)."""

    tokens: list[int]
    target_calls: int
    accepted: list[int]


def speculative_generate(target: Model, draft: Model, prompt: Sequence[int], n_new: int, *,
                         gamma: int, rng: np.random.Generator) -> SpeculativeRun:
    """``n_new`` tokens after ``prompt`` by speculative sampling.

    Each round the draft proposes ``gamma`` tokens (drawn one after another from its own
    distributions), the target gives its distributions at the ``gamma + 1`` positions
    (one call), and :func:`attncore.speculative_accept` keeps a prefix and adds one token.
    The last round may overshoot ``n_new``; the extra tokens are dropped.
    """
    tokens, calls, accepted = list(prompt), 0, []
    while len(tokens) - len(prompt) < n_new:
        proposal, q_rows = [], []
        for _ in range(gamma):
            q = draft(tokens + proposal)
            q_rows.append(q)
            proposal.append(_draw(q, rng))
        p_rows = np.stack([target(tokens + proposal[:i]) for i in range(gamma + 1)])
        calls += 1
        q_mat = np.stack(q_rows) if q_rows else np.zeros((0, p_rows.shape[1]))
        emitted = speculative_accept(p_rows, q_mat, np.asarray(proposal, dtype=np.int64),
                                     generator=rng)
        accepted.append(len(emitted) - 1)
        tokens += [int(t) for t in emitted]
    return SpeculativeRun(tokens[len(prompt):len(prompt) + n_new], calls, accepted)


def markov_sequences(target: np.ndarray, draft: np.ndarray, *, start: int, length: int,
                     count: int, gamma: int | None, rng: np.random.Generator) -> np.ndarray:
    """``count`` sequences of ``length`` tokens after ``start`` from the Markov chain
    ``target`` (rows: next-token distributions given the last token), drawn directly
    (``gamma=None``) or by speculative sampling with the chain ``draft`` as the draft.

    Returns an int64 array ``(count, length)``.
    """
    out = np.empty((count, length), dtype=np.int64)
    for s in range(count):
        def t_model(seq, m=target):
            return m[seq[-1]]

        def d_model(seq, m=draft):
            return m[seq[-1]]

        if gamma is None:
            out[s] = sample_autoregressive(t_model, [start], length, rng=rng)
        else:
            out[s] = speculative_generate(t_model, d_model, [start], length, gamma=gamma,
                                          rng=rng).tokens
    return out


class BlockUsage(NamedTuple):
    """Slots (positions) of a workload: used, reserved contiguously, reserved in blocks."""

    used: int
    contiguous: int
    paged: int
    blocks: int


def block_usage(lengths: Sequence[int], *, max_length: int, block_size: int) -> BlockUsage:
    """Serve sequences of ``lengths`` with a contiguous allocator that reserves
    ``max_length`` slots per sequence (the length is not known in advance), and with
    :class:`attncore.PagedKVCache` on one pool; count the slots each reserves.

    The paged count comes from real caches (keys and values of width 1), each filled
    with its sequence in one append (a prompt; token-by-token appends take the same
    blocks), not from a formula.
    """
    total_blocks = sum(math.ceil(n / block_size) for n in lengths) + 1
    pool = BlockPool(total_blocks, block_size, (), 1)
    caches = []
    for n in lengths:
        if n > max_length:
            raise ValueError(f"lengths: expected at most max_length={max_length}, got {n}")
        cache = PagedKVCache(pool, max_length=max_length)
        cache.append(np.zeros((n, 1)), np.zeros((n, 1)))
        caches.append(cache)
    used = sum(lengths)
    return BlockUsage(used, max_length * len(lengths), pool.num_used * block_size,
                      pool.num_used)


def keys_with_outlier_channels(n: int, d: int, *, outliers: Sequence[int], size: float,
                               rng: np.random.Generator) -> np.ndarray:
    """``(n, d)`` keys: standard normal, except channels ``outliers``, which are ``size``
    plus a standard normal (a fixed large offset, as in the keys of trained models)."""
    k = rng.standard_normal((n, d))
    k[:, list(outliers)] += size
    return k


class Int8Errors(NamedTuple):
    """Bytes per token of keys and values, and errors of an int8 cache against the input:
    the largest key error on the ordinary (non-outlier) channels, and the relative error
    (Frobenius norm) of an attention output."""

    bytes_per_token: float
    key_error: float
    output_error: float


def int8_errors(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, key_scale: str | None,
                group_size: int = 32, ordinary: Sequence[int] = ()) -> Int8Errors:
    """Store ``k``, ``v`` ``(n, d)`` in an :class:`attncore.Int8KVCache` (``key_scale``
    "token" or "channel") or, with ``key_scale=None``, keep them as float32, and attend
    to them with the queries ``q`` ``(m, d)`` (float64 arithmetic)."""
    from ..attention import scaled_dot_product_attention

    n, d = k.shape
    ref = scaled_dot_product_attention(q, k, v)
    if key_scale is None:
        kk, vv = k.astype(np.float32).astype(np.float64), v.astype(np.float32).astype(np.float64)
        per_token = 2 * d * 4
    else:
        cache = Int8KVCache(n, (), d, key_scale=key_scale, group_size=group_size,
                            dtype=np.float32)
        kk, vv = (a.astype(np.float64) for a in cache.append(k.astype(np.float32),
                                                             v.astype(np.float32)))
        per_token = cache.nbytes / n
    cols = list(ordinary) if len(ordinary) else list(range(d))
    out = scaled_dot_product_attention(q, kk, vv)
    return Int8Errors(per_token, float(np.abs(kk - k)[:, cols].max()),
                      float(np.linalg.norm(out - ref) / np.linalg.norm(ref)))


def counts_of(sequences: np.ndarray, vocab: int) -> np.ndarray:
    """How often each sequence occurs, as a flat array over all ``vocab ** length``
    sequences (in lexicographic order)."""
    length = sequences.shape[1]
    codes = sequences @ (vocab ** np.arange(length - 1, -1, -1))
    counter = Counter(codes.tolist())
    return np.array([counter.get(i, 0) for i in range(vocab ** length)], dtype=np.int64)


def pooled_cells(counts: np.ndarray, probabilities: np.ndarray, *,
                 min_expected: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Merge the cells whose expected count ``counts.sum() * p`` is below ``min_expected``
    into one cell, for :func:`chi_square_test`.

    Pearson's statistic follows its chi-square law only approximately, and the usual rule
    of thumb asks for an expected count of about 5 or more in every cell; a cell expected
    to hold 0.4 samples would weigh ``(count - 0.4)^2 / 0.4`` and dominate the sum. The
    small cells are summed (their counts and their probabilities) into one last cell;
    while that cell's own expected count is still below ``min_expected``, the smallest of
    the kept cells joins it.

    Parameters
    ----------
    counts, probabilities : 1-D arrays of one length
        Observed counts, and probabilities (every one > 0, summing to 1).
    min_expected : float, default 5.0

    Returns
    -------
    counts, probabilities : 1-D arrays
        The kept cells in their order, then the pooled cell (if any cell was pooled).

    Raises
    ------
    ValueError
        Arrays that are not 1-D of one length; no cell expected to reach
        ``min_expected`` even when every cell is pooled.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    if counts.shape != probabilities.shape or counts.ndim != 1:
        raise ValueError(f"counts, probabilities: expected two 1-D arrays of one length, "
                         f"got shapes {counts.shape} and {probabilities.shape}")
    expected = counts.sum() * probabilities
    if expected.sum() < min_expected:
        raise ValueError(f"min_expected: all cells together expect {expected.sum():.3g} "
                         f"samples, fewer than min_expected={min_expected}")
    small = expected < min_expected
    while small.any() and expected[small].sum() < min_expected:
        kept = np.flatnonzero(~small)
        small[kept[np.argmin(expected[kept])]] = True
    if not small.any():
        return counts, probabilities
    return (np.append(counts[~small], counts[small].sum()),
            np.append(probabilities[~small], probabilities[small].sum()))


def chi_square_test(counts: np.ndarray, probabilities: np.ndarray) -> tuple[float, float]:
    """Pearson's chi-square test of ``counts`` against ``probabilities`` (every one > 0).

    Returns the statistic ``sum((counts - N p)^2 / (N p))`` and its p-value, the
    probability that a chi-square variable with ``len(counts) - 1`` degrees of freedom
    exceeds it: ``Q(df / 2, statistic / 2)``, the regularized upper incomplete gamma
    function (``torch.special.gammaincc``).
    """
    import torch

    counts = np.asarray(counts, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    if counts.shape != probabilities.shape or counts.ndim != 1 or len(counts) < 2:
        raise ValueError(f"counts, probabilities: expected two 1-D arrays of one length "
                         f">= 2, got shapes {counts.shape} and {probabilities.shape}")
    if not (probabilities > 0).all() or not np.isclose(probabilities.sum(), 1.0):
        raise ValueError("probabilities: expected positive numbers summing to 1")
    expected = counts.sum() * probabilities
    statistic = float(((counts - expected) ** 2 / expected).sum())
    df = len(counts) - 1
    p = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                torch.tensor(statistic / 2, dtype=torch.float64))
    return statistic, float(p)
