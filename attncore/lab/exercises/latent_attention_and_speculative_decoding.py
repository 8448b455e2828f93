"""Checkers for the exercises of chapter 17, latent attention and speculative decoding.

Each checker recomputes what it compares with from the chapter's definitions: the cost
model of speculative decoding, and the flops and bytes of a decoding step of DeepSeek-V2's
absorbed attention. The reader's round of speculative sampling is put through
:func:`attncore.testing.check_speculative_round`, which tests the law of what it emits.
Hints point at the method, never at the number.
"""

from __future__ import annotations

import math
import numbers

from . import Verdict, exercise, real_answer

# ex-llms-gamma: acceptance rate and the cost of a draft call relative to a target call
GAMMA_ALPHA, GAMMA_COST, GAMMA_MAX = 0.8, 0.1, 64

# ex-llms-mla-intensity: DeepSeek-V2's attention (DeepSeek-AI, 2024, section 3.1.2):
# 128 heads, d_c = 512, d_h^R = 64; a 16-bit cache
MLA = {"heads": 128, "d_c": 512, "d_rope": 64, "bytes": 2}


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


def mla_step_intensity(heads: int, d_c: int, d_rope: int, n_bytes: int) -> float:
    """Flops per byte of cache read by a decoding step of absorbed MLA, per cached token:
    every head scores against the whole cached row (``d_c + d_rope`` numbers) and averages
    its first ``d_c`` numbers, two flops per multiply-add; the row is read once."""
    flops = 2 * heads * ((d_c + d_rope) + d_c)
    return flops / ((d_c + d_rope) * n_bytes)


@exercise("ex-llms-mla-intensity")
def mla_intensity(intensity) -> Verdict:
    """Flops per byte of cache of one decoding step of DeepSeek-V2's absorbed attention,
    in the limit of a long cache (:data:`MLA`)."""
    got = real_answer("my_intensity", intensity)
    want = mla_step_intensity(**{"heads": MLA["heads"], "d_c": MLA["d_c"],
                                 "d_rope": MLA["d_rope"], "n_bytes": MLA["bytes"]})
    if math.isclose(got, want, rel_tol=2e-3):
        return Verdict(True, "every byte of a cached row serves all the heads, as a key "
                             "and, for most of it, as a value.")
    if math.isclose(got, want / MLA["heads"], rel_tol=2e-3):
        return Verdict(False, "that is one head's share; all the heads read the same "
                              "cached row.")
    separate = 2 * MLA["heads"] * (2 * MLA["d_c"] + MLA["d_rope"]) / (
        (2 * MLA["d_c"] + MLA["d_rope"]) * MLA["bytes"])
    if math.isclose(got, separate, rel_tol=2e-3):
        return Verdict(False, "count both the scores and the weighted average, and the "
                              "bytes of one cached row: the values are not stored apart.")
    return Verdict(False, "per cached token: the flops of every head's score and of its "
                          "share of the weighted average, over the bytes of the one row "
                          "the cache holds for that token.")


@exercise("ex-llms-speculative-round")
def speculative_round(fn) -> Verdict:
    """A reader-written ``my_speculative_round(p_target, p_draft, draft_tokens, rng)``, put
    through :func:`attncore.testing.check_speculative_round`: its properties, and the law
    of its tokens by the chi-square test."""
    from ...testing import check_speculative_round

    if not callable(fn):
        return Verdict(False, f"expected a function my_speculative_round(p_target, "
                              f"p_draft, draft_tokens, rng), got {type(fn).__name__}")
    report = check_speculative_round(fn)
    if report.passed:
        return Verdict(True, f"your round has all {len(report.results)} properties, and "
                             "the tokens it emits follow the target's law, not the "
                             "draft's, by the chi-square test.")
    failed = report.failed
    first = report[failed[0]]
    return Verdict(False, f"{len(failed)} of the {len(report.results)} properties failed "
                          f"({', '.join(failed)}). The first: {first.detail}, on "
                          f"{first.input}. print(ac.testing.check_speculative_round("
                          "my_speculative_round)) shows each one.")
