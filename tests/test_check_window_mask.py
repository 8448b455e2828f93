"""attncore.testing.check_window_mask: the reference mask passes, each mistake learners
make in a sliding window with sink tokens fails the property it breaks on the smallest
size, and whatever the learner's function does wrong is one sentence, never the mask."""

from __future__ import annotations

import numpy as np
import pytest

import attncore as ac
from attncore.testing.window_mask import PROPERTIES, check_window_mask


def _grid(n):
    return np.arange(n)[:, None], np.arange(n)[None, :]


def reference(n, window, sinks):
    i, j = _grid(n)
    return (j <= i) & ((i - window < j) | (j < sinks))


def off_by_one(n, window, sinks):
    """i - window <= j: one key too many in every full window."""
    i, j = _grid(n)
    return (j <= i) & ((i - window <= j) | (j < sinks))


def sinks_outside_causality(n, window, sinks):
    """The sink columns added after the causal mask: a query sees later sink tokens."""
    i, j = _grid(n)
    return ((j <= i) & (i - window < j)) | (j < sinks)


def sinks_forgotten(n, window, sinks):
    i, j = _grid(n)
    return (j <= i) & (i - window < j)


def window_not_causal(n, window, sinks):
    """|i - j| < window: a band on both sides of the diagonal."""
    i, j = _grid(n)
    return (np.abs(i - j) < window) | ((j < sinks) & (j <= i))


def test_the_reference_and_attncore_pass():
    for fn in (reference,
               lambda n, w, s: ac.sliding_window_mask(n, n, w, sink_tokens=s)):
        report = check_window_mask(fn)
        assert report.passed, str(report)
        assert [r.name for r in report.results] == list(PROPERTIES)


@pytest.mark.parametrize("fn, broken, smallest", [
    (off_by_one, "window_width", "n = 2, window = 1, sinks = 0"),
    (sinks_outside_causality, "causal", "n = 2, window = 1, sinks = 2"),
    (sinks_forgotten, "sink_columns", "n = 2, window = 1, sinks = 1"),
    (window_not_causal, "causal", "n = 2, window = 2, sinks = 0"),
])
def test_each_mistake_fails_on_the_smallest_size(fn, broken, smallest):
    report = check_window_mask(fn)
    assert broken in report.failed and "nothing_else" in report.failed, str(report)
    assert report[broken].input == smallest


def test_the_mask_is_never_printed():
    text = str(check_window_mask(off_by_one)) + str(check_window_mask(sinks_forgotten))
    assert "True" not in text and "[[" not in text and "1 1" not in text


def test_a_torch_mask_is_accepted():
    torch = pytest.importorskip("torch")
    report = check_window_mask(lambda n, w, s: torch.from_numpy(reference(n, w, s)))
    assert report.passed, str(report)


@pytest.mark.parametrize("fn, words", [
    (lambda n, window, sinks: {}[n], "raised KeyError"),
    (lambda n, window: reference(n, window, 0), "takes other arguments than the check"),
    (lambda n, window, sinks: None, "got None"),
    (lambda n, window, sinks: reference(n, window, sinks)[:-1], "expected shape"),
    (lambda n, window, sinks: reference(n, window, sinks).astype(float), "expected dtype bool"),
    (lambda n, window, sinks: reference(n, window, sinks).tolist(), "got list"),
])
def test_what_the_learner_gets_wrong_is_one_sentence(fn, words):
    report = check_window_mask(fn)
    result = report["returns_boolean_mask"]
    assert result.status == "failed" and words in result.detail, result
    assert "Traceback" not in str(report) and "\n" not in result.detail


@pytest.mark.parametrize("kwargs, exc", [({"fn": "mask"}, TypeError),
                                         ({"fn": reference, "max_n": 2}, ValueError)])
def test_bad_arguments_to_the_check(kwargs, exc):
    fn = kwargs.pop("fn")
    with pytest.raises(exc):
        check_window_mask(fn, **kwargs)
