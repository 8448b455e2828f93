"""A conformance check for one round of speculative sampling that you write yourself.

In a round of speculative sampling (Leviathan et al., 2023; Chen et al., 2023) a draft has
proposed ``gamma`` tokens, and one call of the target has given its next-token
distributions after each prefix of the proposal. The round tests the drafted tokens in
order, keeping token ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first
rejection it emits a token of the residual ``max(0, p_i - q_i)`` (normalised) and ends; if
all are kept it adds a bonus token drawn from ``p_gamma``. :func:`check_speculative_round`
checks such a function by its properties and, above all, by the law of what it emits,
with Pearson's chi-square test as the course does: the tokens must follow the target's
distributions, not the draft's::

    >>> import numpy as np
    >>> import attncore as ac
    >>> from attncore.testing import check_speculative_round
    >>> def library_round(p_target, p_draft, draft_tokens, rng):
    ...     return ac.speculative_accept(p_target, p_draft, draft_tokens, generator=rng)
    >>> check_speculative_round(library_round).passed
    True

**The calling convention.** ``fn(p_target, p_draft, draft_tokens, rng)`` with

* ``p_target`` a NumPy array ``(gamma + 1, vocab)``: row ``i`` the target's distribution
  after the context and the first ``i`` drafted tokens (row ``gamma`` after all of them);
* ``p_draft`` a NumPy array ``(gamma, vocab)``: row ``i`` the draft's distribution from
  which ``draft_tokens[i]`` was drawn;
* ``draft_tokens`` an int64 array ``(gamma,)``;
* ``rng`` a :class:`numpy.random.Generator`, the function's only source of randomness.

Both distributions are float64, and float32 in the property ``float32``; ``gamma`` runs
from 0 to 4. It must return the emitted tokens, a list or 1-D integer array of 1 to
``gamma + 1`` tokens: the kept drafted tokens, then one more. It must leave its arguments
unchanged and draw only from ``rng`` (so that a seeded generator gives the same tokens).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport, PropertyResult
from .runner import Failure, call, run_properties, with_properties

__all__ = ["PROPERTIES", "PropertyResult", "SpeculativeRoundCheck",
           "check_speculative_round"]

PROPERTIES = {
    "returns_tokens": "returns a list or 1-D integer array of 1 to gamma + 1 tokens in "
                      "[0, vocab), for gamma = 0, 1 and 3",
    "keeps_a_prefix": "every emitted token but the last is the drafted token at its "
                      "place: the round emits the kept prefix of the proposal, then one "
                      "token",
    "all_kept_when_draft_is_target": "with the draft's rows equal to the target's, every "
                                     "drafted token is kept and a bonus token follows: "
                                     "gamma + 1 tokens",
    "stops_at_rejection": "a drafted token the target gives probability 0 is rejected "
                          "and ends the round, with a token other than it",
    "greedy_limit": "with one-hot distributions (greedy target and draft) the round "
                    "emits the target's arg-max tokens: the drafted ones while they "
                    "agree, then the target's own",
    "one_token_law": "over many rounds of one drafted token, the first emitted token "
                     "follows the target's distribution p_0 (chi-square test)",
    "bonus_law": "when every drafted token is kept, the bonus token follows the "
                 "target's last row p_gamma (chi-square test)",
    "sequence_law": "sequences of 3 tokens generated round after round from a Markov "
                    "target and a Markov draft follow the target chain's law, and not "
                    "the draft's (chi-square test, gamma = 2)",
    "reproducible": "two runs with generators of the same seed emit the same tokens: "
                    "the function draws from rng only",
    "float32": "float32 distributions are accepted, with the same greedy tokens",
    "inputs_unchanged": "leaves p_target, p_draft and draft_tokens as they were",
}
"""The properties :func:`check_speculative_round` checks, by name, with what each one
asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(p_target, p_draft, draft_tokens, rng)"

#: A chi-square test fails a law below this p-value: a right function fails it on one
#: seed in ten thousand, and the mistakes the check looks for reach p < 1e-12.
P_VALUE_FLOOR = 1e-4


@dataclass(frozen=True)
class SpeculativeRoundCheck(CheckReport):
    """The report of :func:`check_speculative_round`: one result per property of
    :data:`PROPERTIES` (see :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_speculative_round"


def check_speculative_round(fn: Callable[..., Any], *,
                            seed: int = 0) -> SpeculativeRoundCheck:
    """Run the properties of a round of speculative sampling on ``fn``; report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(p_target, p_draft, draft_tokens, rng) -> tokens``; see the calling
        convention in this module's description.
    seed : int, default 0
        Seed of the distributions, the drafted tokens and the generators handed to
        ``fn``.

    Returns
    -------
    SpeculativeRoundCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary, which names the failing property
        and its input, never the tokens a right round would emit.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_speculative_round`` itself. Whatever ``fn`` raises or
        returns is reported as the failure of the property that called it.

    Notes
    -----
    The three laws are tested with Pearson's statistic over cells of expected count at
    least 5 (rarer outcomes pooled into one cell), failing below a p-value of
    :data:`P_VALUE_FLOOR`; a round whose tokens follow the draft, or that replaces a
    rejected token from ``p`` instead of the residual, falls far below it. The whole
    check calls ``fn`` about 6,500 times.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a function {SIGNATURE}, got {type(fn).__name__}")
    seed = check_size("seed", seed, minimum=0)
    report = run_properties("check_speculative_round", fn, PROPERTIES, _Runner(fn, seed))
    return SpeculativeRoundCheck(report.function, report.results)


# --- the chi-square test -----------------------------------------------------------------

def chi2_sf(statistic: float, df: int) -> float:
    """P(X >= statistic) for X chi-square with ``df >= 1`` degrees of freedom (exact
    series for integer ``df``)."""
    x = max(float(statistic), 0.0)
    if df % 2 == 0:
        term = total = math.exp(-x / 2)
        for k in range(1, df // 2):
            term *= x / (2 * k)
            total += term
        return min(total, 1.0)
    total = math.erfc(math.sqrt(x / 2))
    term = math.sqrt(2 * x / math.pi) * math.exp(-x / 2)
    for k in range(1, (df + 1) // 2):
        total += term
        term *= x / (2 * k + 1)
    return min(total, 1.0)


def pooled_p_value(counts: np.ndarray, probabilities: np.ndarray) -> float:
    """Pearson's test of ``counts`` against ``probabilities``, with the cells expected
    fewer than 5 times pooled into one (and, while that cell is still below 5, the
    smallest other cell with it)."""
    counts = np.asarray(counts, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    outside = counts[p <= 0].sum()
    if outside:                                    # an outcome of probability 0
        return 0.0
    counts, p = counts[p > 0], p[p > 0]
    expected = counts.sum() * p
    small = expected < 5
    while small.any() and expected[small].sum() < 5 and (~small).any():
        kept = np.flatnonzero(~small)
        small[kept[np.argmin(expected[kept])]] = True
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    if len(counts) < 2:
        return 1.0
    statistic = float(((counts - expected) ** 2 / expected).sum())
    return chi2_sf(statistic, len(counts) - 1)


# --- the runner --------------------------------------------------------------------------

def _sample(dist: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(dist)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"),
                   len(dist) - 1))


class _Runner:
    """Builds distributions and proposals and runs the properties (one method each)."""

    def __init__(self, fn: Callable[..., Any], seed: int) -> None:
        self.fn, self.seed = fn, seed

    def rng(self, *offset: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, *offset])

    @staticmethod
    def describe(p_target: np.ndarray, note: str = "") -> str:
        gamma, vocab = p_target.shape[0] - 1, p_target.shape[1]
        dtype = "" if p_target.dtype == np.float64 else f", dtype {p_target.dtype}"
        return f"gamma={gamma}, vocab={vocab}{dtype}" + (f", {note}" if note else "")

    def round(self, p_target: np.ndarray, p_draft: np.ndarray, tokens: np.ndarray,
              rng: np.random.Generator, where: str) -> list[int]:
        """``fn``'s tokens as a list of ints, checked for type, length and range."""
        out = call(self.fn, (p_target.copy(), p_draft.copy(), tokens.copy(), rng),
                   where=where, signature=SIGNATURE)
        gamma, vocab = p_target.shape[0] - 1, p_target.shape[1]
        if out is None:
            raise Failure("expected a list of tokens, got None (does the function end "
                          "with a return statement?)", where)
        if hasattr(out, "detach"):
            out = out.detach().cpu().numpy()
        if isinstance(out, np.ndarray):
            if out.ndim != 1 or not (np.issubdtype(out.dtype, np.integer) or out.size == 0):
                raise Failure(f"expected a 1-D array of integer tokens, got shape "
                              f"{out.shape} and dtype {out.dtype}", where)
            out = out.tolist()
        if not isinstance(out, (list, tuple)):
            raise Failure(f"expected a list of tokens, got {type(out).__name__}", where)
        odd = [t for t in out if not isinstance(t, numbers.Integral) or isinstance(t, bool)]
        if odd:
            raise Failure(f"expected integer tokens, got {type(odd[0]).__name__}", where)
        if not 1 <= len(out) <= gamma + 1:
            raise Failure(f"expected 1 to gamma + 1 = {gamma + 1} tokens, got {len(out)}",
                          where)
        if any(not 0 <= t < vocab for t in out):
            raise Failure(f"expected tokens in [0, {vocab}), got one outside", where)
        return [int(t) for t in out]

    def proposal(self, gamma: int, vocab: int, rng: np.random.Generator, *,
                 concentration: float = 1.0):
        """Random target and draft rows, and drafted tokens drawn from the draft."""
        p_target = rng.dirichlet(np.full(vocab, concentration), size=gamma + 1)
        p_draft = rng.dirichlet(np.full(vocab, concentration), size=gamma)
        tokens = np.array([_sample(q, rng) for q in p_draft], dtype=np.int64)
        return p_target, p_draft, tokens

    # --- the properties ----------------------------------------------------------------

    def returns_tokens(self):
        rng = self.rng(1)
        for gamma in (0, 1, 3):
            for trial in range(5):
                args = self.proposal(gamma, 5, rng)
                self.round(*args, np.random.default_rng(trial), self.describe(args[0]))

    def keeps_a_prefix(self):
        rng = self.rng(2)
        for trial in range(40):
            gamma = 1 + trial % 4
            p_target, p_draft, tokens = self.proposal(gamma, 4, rng)
            where = self.describe(p_target, f"trial {trial} (seed {self.seed})")
            out = self.round(p_target, p_draft, tokens, np.random.default_rng(trial),
                             where)
            if out[:-1] != tokens[:len(out) - 1].tolist():
                raise Failure(f"emitted {len(out)} tokens whose first {len(out) - 1} "
                              f"are not the first {len(out) - 1} drafted tokens", where)

    def all_kept_when_draft_is_target(self):
        rng = self.rng(3)
        for gamma in (1, 2, 4):
            for trial in range(5):
                p_target, _, _ = self.proposal(gamma, 5, rng)
                p_draft = p_target[:gamma].copy()
                tokens = np.array([_sample(q, rng) for q in p_draft], dtype=np.int64)
                where = self.describe(p_target, "p_draft = p_target[:gamma]")
                out = self.round(p_target, p_draft, tokens,
                                 np.random.default_rng(trial), where)
                if len(out) != gamma + 1 or out[:gamma] != tokens.tolist():
                    raise Failure(f"emitted {len(out)} tokens, not the {gamma} drafted "
                                  f"tokens and a bonus token", where)

    def stops_at_rejection(self):
        rng = self.rng(4)
        for gamma, bad in ((1, 0), (3, 0), (3, 1), (3, 2)):
            for trial in range(5):
                p_target, p_draft, tokens = self.proposal(gamma, 5, rng)
                p_draft[:bad] = p_target[:bad]            # kept with probability 1
                p_target[bad, tokens[bad]] = 0.0          # rejected with probability 1
                p_target[bad] /= p_target[bad].sum()
                where = self.describe(p_target, f"drafted token {bad} has target "
                                                f"probability 0")
                out = self.round(p_target, p_draft, tokens, np.random.default_rng(trial),
                                 where)
                if len(out) != bad + 1:
                    raise Failure(f"emitted {len(out)} tokens where the round ends at "
                                  f"drafted token {bad}", where)
                if out[-1] == tokens[bad]:
                    raise Failure(f"emitted the rejected drafted token {bad} itself "
                                  f"(target probability 0)", where)

    def greedy(self, dtype: Any) -> None:
        rng = self.rng(5)
        for trial in range(30):
            gamma, vocab = 1 + trial % 4, 6
            greedy = rng.integers(vocab, size=gamma + 1)
            tokens = np.where(rng.random(gamma) < 0.6, greedy[:gamma],
                              rng.integers(vocab, size=gamma)).astype(np.int64)
            p_target = np.eye(vocab, dtype=dtype)[greedy]
            p_draft = np.eye(vocab, dtype=dtype)[tokens]
            agree = int(np.argmin(np.append(tokens == greedy[:gamma], False)))
            want = greedy[:agree + 1].tolist()
            where = self.describe(p_target, f"one-hot rows, trial {trial} "
                                            f"(seed {self.seed})")
            out = self.round(p_target, p_draft, tokens, np.random.default_rng(trial),
                             where)
            if out != want:
                raise Failure("did not emit the target's arg-max tokens: the drafted "
                              "ones while they agree with it, then the target's own",
                              where)

    def greedy_limit(self):
        self.greedy(np.float64)

    def one_token_law(self):
        rng, draws = self.rng(6), np.random.default_rng([self.seed, 60])
        vocab, n = 6, 2000
        p_target, p_draft, _ = self.proposal(1, vocab, rng)
        counts = np.zeros(vocab)
        for _ in range(n):
            token = np.array([_sample(p_draft[0], rng)], dtype=np.int64)
            out = self.round(p_target, p_draft, token, draws,
                             self.describe(p_target, f"{n} rounds"))
            counts[out[0]] += 1
        self.law(counts, p_target[0], f"the first emitted tokens of {n} rounds",
                 self.describe(p_target, f"{n} rounds of one drafted token (seed "
                                         f"{self.seed})"))

    def bonus_law(self):
        rng, draws = self.rng(7), np.random.default_rng([self.seed, 70])
        vocab, n, gamma = 5, 1000, 2
        p_target, _, _ = self.proposal(gamma, vocab, rng)
        p_draft = p_target[:gamma].copy()
        counts = np.zeros(vocab)
        for _ in range(n):
            tokens = np.array([_sample(q, rng) for q in p_draft], dtype=np.int64)
            out = self.round(p_target, p_draft, tokens, draws, self.describe(p_target))
            if len(out) != gamma + 1:
                raise Failure(f"emitted {len(out)} tokens with every drafted token "
                              f"kept (p_draft = p_target[:gamma])",
                              self.describe(p_target))
            counts[out[-1]] += 1
        self.law(counts, p_target[gamma], f"the bonus tokens of {n} rounds",
                 self.describe(p_target, f"p_draft = p_target[:gamma], {n} rounds "
                                         f"(seed {self.seed})"))

    def sequence_law(self):
        rng, draws = self.rng(8), np.random.default_rng([self.seed, 80])
        vocab, length, gamma, n = 4, 3, 2, 1500
        target = rng.dirichlet(np.ones(vocab), size=vocab)
        draft = rng.dirichlet(np.ones(vocab), size=vocab)
        where = (f"Markov target and draft over {vocab} tokens, gamma={gamma}, {n} "
                 f"sequences of {length} tokens after token 0 (seed {self.seed})")
        counts = np.zeros(vocab ** length)
        for _ in range(n):
            seq = [0]
            while len(seq) < length + 1:
                proposal, q_rows = [], []
                for _ in range(gamma):
                    q = draft[(seq + proposal)[-1]]
                    q_rows.append(q)
                    proposal.append(_sample(q, rng))
                p_rows = np.stack([target[(seq + proposal[:i])[-1]]
                                   for i in range(gamma + 1)])
                seq += self.round(p_rows, np.stack(q_rows),
                                  np.array(proposal, dtype=np.int64), draws, where)
            code = 0
            for t in seq[1:length + 1]:
                code = code * vocab + t
            counts[code] += 1

        def law(chain):
            return (chain[0][:, None, None] * chain[:, :, None] * chain[None]).ravel()

        self.law(counts, law(target), f"the {n} sequences", where)
        if pooled_p_value(counts, law(draft)) >= P_VALUE_FLOOR:
            raise Failure(f"the {n} sequences are consistent with the draft chain's law "
                          f"too (p >= {P_VALUE_FLOOR:g}): they should follow the "
                          f"target's", where)

    def law(self, counts: np.ndarray, probabilities: np.ndarray, what: str,
            where: str) -> None:
        p_value = pooled_p_value(counts, probabilities)
        if p_value < P_VALUE_FLOOR:
            raise Failure(f"{what} do not follow the target's distribution: chi-square "
                          f"p-value {p_value:.1e}, below {P_VALUE_FLOOR:g}", where)

    def reproducible(self):
        rng = self.rng(9)
        for trial in range(10):
            args = self.proposal(3, 5, rng)
            where = self.describe(args[0], f"generators seeded with {trial}")
            first = self.round(*args, np.random.default_rng(trial), where)
            second = self.round(*args, np.random.default_rng(trial), where)
            if first != second:
                raise Failure("two generators of the same seed gave different tokens: "
                              "draw from rng only (rng.random(), rng.choice(...))", where)

    def float32(self):
        self.greedy(np.float32)
        rng = self.rng(10)
        for trial in range(5):
            p_target, p_draft, tokens = self.proposal(2, 5, rng)
            self.round(p_target.astype(np.float32), p_draft.astype(np.float32), tokens,
                       np.random.default_rng(trial),
                       self.describe(p_target.astype(np.float32)))

    def inputs_unchanged(self):
        rng = self.rng(11)
        for trial in range(5):
            args = self.proposal(3, 5, rng)
            given = [a.copy() for a in args]
            where = self.describe(args[0])
            call(self.fn, (*given, np.random.default_rng(trial)), where=where,
                 signature=SIGNATURE)
            for name, before, after in zip(("p_target", "p_draft", "draft_tokens"),
                                           args, given):
                if not np.array_equal(before, after):
                    raise Failure(f"{name} changed during the call", where)
