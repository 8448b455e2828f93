"""check_speculative_round: the library's round and a learner's right round are accepted,
each broken round is rejected for the property it breaks (the wrong laws by the chi-square
test), a function that misbehaves gets one sentence, and the report never shows the tokens
a right round emits."""

from __future__ import annotations

import re

import numpy as np
import pytest

import attncore as ac
from attncore.testing import check_speculative_round
from attncore.testing.speculative_round import PROPERTIES, chi2_sf, pooled_p_value


def sample(dist, u):
    cdf = np.cumsum(dist)
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(dist) - 1)


def verify_one(p, q, x, rng):
    if rng.random() * q[x] < p[x]:
        return int(x), True
    return sample(np.maximum(p - q, 0.0), rng.random()), False


def reference(p_target, p_draft, draft_tokens, rng):
    out = []
    for i, x in enumerate(draft_tokens):
        token, kept = verify_one(p_target[i], p_draft[i], x, rng)
        out.append(token)
        if not kept:
            return out
    return out + [sample(p_target[len(draft_tokens)], rng.random())]


def library(p_target, p_draft, draft_tokens, rng):
    return ac.speculative_accept(p_target, p_draft, draft_tokens, generator=rng)


def with_choice(p_target, p_draft, draft_tokens, rng):      # right, other draws
    out = []
    for i, x in enumerate(draft_tokens):
        if rng.random() < min(1.0, p_target[i][x] / p_draft[i][x]):
            out.append(int(x))
            continue
        r = np.maximum(p_target[i] - p_draft[i], 0.0)
        return out + [int(rng.choice(len(r), p=r / r.sum()))]
    last = p_target[-1] / p_target[-1].sum()
    return np.array(out + [int(rng.choice(len(last), p=last))])


# --- broken rounds: the mistakes a learner makes --------------------------------------------

def resample_from_p(p_target, p_draft, draft_tokens, rng):
    # a rejected token replaced by a fresh sample of p, not of the residual
    out = []
    for i, x in enumerate(draft_tokens):
        if rng.random() * p_draft[i][x] < p_target[i][x]:
            out.append(int(x))
            continue
        return out + [sample(p_target[i], rng.random())]
    return out + [sample(p_target[len(draft_tokens)], rng.random())]


def no_bonus(p_target, p_draft, draft_tokens, rng):
    # all kept: returns the drafted tokens alone (for gamma >= 1)
    out = reference(p_target, p_draft, draft_tokens, rng)
    return out[:-1] if len(out) == len(draft_tokens) + 1 > 1 else out


def bonus_from_the_last_drafted_row(p_target, p_draft, draft_tokens, rng):
    out = []
    for i, x in enumerate(draft_tokens):
        token, kept = verify_one(p_target[i], p_draft[i], x, rng)
        out.append(token)
        if not kept:
            return out
    return out + [sample(p_target[max(len(draft_tokens) - 1, 0)], rng.random())]


def goes_on_after_a_rejection(p_target, p_draft, draft_tokens, rng):
    out = [verify_one(p_target[i], p_draft[i], x, rng)[0]
           for i, x in enumerate(draft_tokens)]
    return out + [sample(p_target[len(draft_tokens)], rng.random())]


def accepts_with_p(p_target, p_draft, draft_tokens, rng):
    # keeps x with probability p(x), forgetting the draft's q(x)
    out = []
    for i, x in enumerate(draft_tokens):
        if rng.random() < p_target[i][x]:
            out.append(int(x))
            continue
        return out + [sample(np.maximum(p_target[i] - p_draft[i], 0.0), rng.random())]
    return out + [sample(p_target[len(draft_tokens)], rng.random())]


def unseeded(p_target, p_draft, draft_tokens, rng):
    return reference(p_target, p_draft, draft_tokens, np.random.default_rng())


def normalises_in_place(p_target, p_draft, draft_tokens, rng):
    p_target /= p_target.sum(axis=-1, keepdims=True)
    p_draft -= 0.0 * p_draft
    p_target[0, 0] += 0.0
    out = reference(p_target, p_draft, draft_tokens, rng)
    p_draft[...] = p_draft[::-1] if len(p_draft) else p_draft
    return out


@pytest.mark.parametrize("fn", [reference, library, with_choice])
def test_right_rounds_pass(fn):
    report = check_speculative_round(fn)
    assert report.passed, report.summary()
    assert [r.name for r in report.results] == list(PROPERTIES)


@pytest.mark.parametrize("fn, broken", [
    (resample_from_p, {"one_token_law", "sequence_law"}),
    (no_bonus, {"all_kept_when_draft_is_target", "bonus_law", "greedy_limit"}),
    (bonus_from_the_last_drafted_row, {"bonus_law", "greedy_limit"}),
    (goes_on_after_a_rejection, {"keeps_a_prefix", "stops_at_rejection", "sequence_law"}),
    (accepts_with_p, {"one_token_law", "sequence_law", "all_kept_when_draft_is_target"}),
    (unseeded, {"reproducible"}),
    (normalises_in_place, {"inputs_unchanged"}),
])
def test_broken_rounds_fail_the_property_they_break(fn, broken):
    report = check_speculative_round(fn)
    assert broken <= set(report.failed), report.summary()
    if fn in (unseeded, normalises_in_place):
        assert set(report.failed) == broken, report.summary()


def test_messages_are_one_sentence_without_a_traceback():
    def raises(p_target, p_draft, draft_tokens, rng):
        raise RuntimeError("my bug")

    cases = {
        raises: "the function raised RuntimeError: my bug",
        (lambda p_target, p_draft, draft_tokens: [0]): "takes other arguments",
        (lambda *a: None): "got None (does the function end with a return",
        (lambda *a: "0"): "expected a list of tokens, got str",
        (lambda *a: np.zeros((1, 1), dtype=int)): "expected a 1-D array",
        (lambda *a: [0.5]): "expected integer tokens, got float",
        (lambda *a: [np.nan]): "expected integer tokens, got float",
        (lambda *a: list(range(9))): "expected 1 to gamma + 1",
        (lambda p, q, x, rng: [p.shape[1]]): "expected tokens in [0, 5)",
    }
    for fn, words in cases.items():
        report = check_speculative_round(fn)
        first = report[report.failed[0]]
        assert words in first.detail, (words, first.detail)
        assert "Traceback" not in report.summary() and "File \"" not in report.summary()


def test_report_never_shows_the_tokens_of_a_right_round():
    # no list of tokens, and no count of the tokens a right round would keep
    for fn in (goes_on_after_a_rejection, bonus_from_the_last_drafted_row, no_bonus):
        text = str(check_speculative_round(fn))
        assert not re.search(r"\[\d+,", text) and "kept, then" not in text, text


def test_chi_square_tail():
    # known values: P(chi2_1 >= 3.841) = 0.05, P(chi2_2 >= 5.991) = 0.05,
    # P(chi2_10 >= 18.307) = 0.05, P(chi2_5 >= 20.515) = 0.001
    for stat, df in ((3.841459, 1), (5.991465, 2), (18.307038, 10)):
        assert chi2_sf(stat, df) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(20.515006, 5) == pytest.approx(0.001, rel=1e-5)
    assert chi2_sf(0.0, 3) == 1.0
    # a count where the law says 0 is impossible
    assert pooled_p_value(np.array([5, 5, 1]), np.array([0.5, 0.5, 0.0])) == 0.0


def test_bad_arguments_to_the_check():
    with pytest.raises(TypeError, match="fn: expected a function"):
        check_speculative_round("round")
    with pytest.raises(ValueError, match="seed"):
        check_speculative_round(reference, seed=-2)
