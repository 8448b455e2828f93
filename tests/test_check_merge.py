"""attncore.testing.check_merge: the reference merge of two partial attention results
passes, each mistake learners make in ring attention's step fails the property it breaks,
and whatever the learner's function does wrong is one sentence, never the right values."""

from __future__ import annotations

import numpy as np
import pytest

from attncore.testing.merge import PROPERTIES, _partial, check_merge


def reference(out_a, lse_a, out_b, lse_b):
    lse = np.logaddexp(lse_a, lse_b)
    safe = np.where(np.isfinite(lse), lse, 0.0)
    w_a, w_b = np.exp(lse_a - safe), np.exp(lse_b - safe)
    return w_a[:, None] * out_a + w_b[:, None] * out_b, lse


def add_outputs(out_a, lse_a, out_b, lse_b):
    """The outputs added without weights."""
    return out_a + out_b, np.logaddexp(lse_a, lse_b)


def no_rescale(out_a, lse_a, out_b, lse_b):
    """Weights exp(lse - m) without dividing by the merged sum: the rescaling forgotten."""
    m = np.maximum(lse_a, lse_b)
    w_a, w_b = np.exp(lse_a - m), np.exp(lse_b - m)
    return w_a[:, None] * out_a + w_b[:, None] * out_b, m + np.log(w_a + w_b)


def unstable(out_a, lse_a, out_b, lse_b):
    """Right in exact arithmetic, but exp(lse) overflows for large scores."""
    e_a, e_b = np.exp(lse_a), np.exp(lse_b)
    total = e_a + e_b
    return (e_a[:, None] * out_a + e_b[:, None] * out_b) / total[:, None], np.log(total)


def nan_for_empty(out_a, lse_a, out_b, lse_b):
    """Shifts by the larger lse, which is -inf for a query with no key at all."""
    m = np.maximum(lse_a, lse_b)
    w_a, w_b = np.exp(lse_a - m), np.exp(lse_b - m)
    total = w_a + w_b
    return (w_a[:, None] * out_a + w_b[:, None] * out_b) / total[:, None], m + np.log(total)


def test_the_reference_passes():
    report = check_merge(reference)
    assert report.passed, str(report)
    assert [r.name for r in report.results] == list(PROPERTIES)


@pytest.mark.parametrize("fn, broken", [
    (add_outputs, "union_of_blocks"),
    (no_rescale, "union_of_blocks"),
    (unstable, "large_scores"),
    (nan_for_empty, "empty_block"),
])
def test_each_mistake_fails_the_property_it_breaks(fn, broken):
    report = check_merge(fn)
    assert broken in report.failed, str(report)
    assert "queries" in report[broken].input


def test_only_the_empty_block_catches_nan_for_empty():
    assert check_merge(nan_for_empty).failed == ["empty_block"]
    assert "expected finite numbers" in check_merge(nan_for_empty)["empty_block"].detail


def test_no_output_value_of_the_reference_is_printed():
    text = "\n".join(str(check_merge(fn)) for fn in (add_outputs, no_rescale, unstable,
                                                     nan_for_empty))
    rng = np.random.default_rng([0, 3])               # the first union_of_blocks input
    s, v = rng.standard_normal((3, 6)), rng.standard_normal((6, 3))
    out, lse = _partial(s, v)
    for x in np.concatenate([out.ravel(), lse]):
        for digits in (2, 3, 4):
            assert f"{x:.{digits}f}" not in text


@pytest.mark.parametrize("fn, words", [
    (lambda oa, la, ob, lb: oa[5], "raised IndexError"),
    (lambda oa, la, ob: (oa, la), "takes other arguments than the check passes"),
    (lambda oa, la, ob, lb: oa, "expected a pair (out, lse), got ndarray"),
    (lambda oa, la, ob, lb: (oa, la[:, None]), "lse: expected shape"),
    (lambda oa, la, ob, lb: (oa.astype(np.float32), la), "out: expected dtype"),
    (lambda oa, la, ob, lb: (oa * np.nan, la), "out: expected finite numbers"),
    (lambda oa, la, ob, lb: (oa.tolist(), la), "out: expected a NumPy array"),
])
def test_what_the_learner_gets_wrong_is_one_sentence(fn, words):
    report = check_merge(fn)
    result = report["returns_pair"]
    assert result.status == "failed" and words in result.detail, result
    assert "Traceback" not in str(report) and "\n" not in result.detail


def test_the_inputs_must_be_left_alone():
    def in_place(out_a, lse_a, out_b, lse_b):
        out, lse = reference(out_a, lse_a, out_b, lse_b)
        out_a[...] = out
        return out_a, lse
    assert "inputs_unchanged" in check_merge(in_place).failed


@pytest.mark.parametrize("kwargs, exc", [({"fn": None}, TypeError),
                                         ({"fn": reference, "seed": -2}, ValueError),
                                         ({"fn": reference, "atol": -1.0}, ValueError)])
def test_bad_arguments_to_the_check(kwargs, exc):
    fn = kwargs.pop("fn")
    with pytest.raises(exc):
        check_merge(fn, **kwargs)
