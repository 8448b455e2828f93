"""attncore.testing.check_softmax: it accepts correct softmaxes, rejects each classic mistake
for the property it breaks, turns whatever a learner's function does into one sentence, and
never prints the right answer."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import attncore as ac
from attncore.testing import check_softmax
from attncore.testing.softmax import PROPERTIES, SoftmaxCheck


# --- correct softmaxes ----------------------------------------------------------------------

def stable(x, axis=-1):
    """The course's convention, written out: max subtracted, all -inf slices give zeros."""
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(m), m, 0))
    total = e.sum(axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def via_torch(x, axis=-1):
    """PyTorch's softmax, with its NaN for an all -inf slice turned into zeros."""
    p = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
    return np.nan_to_num(p, nan=0.0)


# --- the classic mistakes, each broken in one way -------------------------------------------

def no_max_subtraction(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def no_keepdims(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis)


def fixed_axis(x, axis=-1):
    # normalises along the first axis whatever it is asked
    return stable(x, axis=0)


def nan_for_masked_rows(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def float64_upcast(x, axis=-1):
    return stable(np.asarray(x, dtype=float), axis=axis)


def mutates_input(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    x -= np.where(np.isfinite(m), m, 0)              # in place: the caller's x changes
    return stable(x, axis=axis)


def float32_inside(x, axis=-1):
    return stable(x.astype(np.float32), axis=axis).astype(x.dtype)


def mean_subtraction(x, axis=-1):
    e = np.exp(x - x.mean(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_correct_softmaxes_pass():
    for fn in (ac.softmax, stable, via_torch):
        report = check_softmax(fn)
        assert isinstance(report, SoftmaxCheck)
        assert report.passed, str(report)
        assert [r.name for r in report.results] == list(PROPERTIES)
        assert all(r.status == "passed" for r in report.results)


@pytest.mark.parametrize("fn, broken", [
    (no_max_subtraction, {"large_inputs", "all_masked_slices"}),
    (nan_for_masked_rows, {"all_masked_slices"}),
    (float64_upcast, {"preserves_dtype"}),
    (mutates_input, {"inputs_unchanged"}),
    (float32_inside, {"float64_precision"}),
    (mean_subtraction, {"large_inputs", "masked_entries", "all_masked_slices"}),
])
def test_each_mistake_is_caught_by_the_property_it_breaks(fn, broken):
    report = check_softmax(fn)
    assert set(report.failed) == broken, str(report)


def test_a_float64_result_says_why():
    detail = check_softmax(float64_upcast)["preserves_dtype"].detail
    assert "expected dtype float32" in detail and "got float64" in detail
    assert "turns a float32 result into float64" in detail


def test_wrong_axis_is_caught():
    report = check_softmax(fixed_axis)
    assert {"sums_to_one", "matches_reference", "shift_invariance"} <= set(report.failed)
    # on a square input the sum along the wrong axis broadcasts and sums_to_one says so
    assert "sums to" in report["sums_to_one"].detail


def test_no_keepdims_is_one_failure_not_ten():
    report = check_softmax(no_keepdims)
    assert report.failed == ["output_shape"]
    assert "could not be broadcast" in report["output_shape"].detail
    skipped = [r for r in report.results if r.status == "skipped"]
    assert len(skipped) == len(PROPERTIES) - 1
    assert all("same error as under output_shape" in r.detail for r in skipped)


@pytest.mark.parametrize("fn, words", [
    (lambda x, axis=-1: 1 / 0, "raised ZeroDivisionError"),
    (lambda x: stable(x), "expected fn(x, axis=-1)"),
    (lambda x, axis=-1: None, "got None"),
    (lambda x, axis=-1: stable(x, axis).tolist(), "got list"),
    (lambda x, axis=-1: stable(x, axis)[..., :1], "expected shape"),
    (lambda x, axis=-1: np.full(x.shape, np.nan), "NaN or infinity"),
    (lambda x, axis=-1: (stable(x, axis) > 0.2).astype(int), "floating-point"),
])
def test_what_a_function_does_wrong_is_one_sentence(fn, words):
    report = check_softmax(fn)
    first = report[report.failed[0]]
    assert words in first.detail, first.detail
    assert "Traceback" not in str(report) and "File \"" not in str(report)
    assert first.input.startswith("x of shape")


def test_overflow_warnings_of_the_learner_are_not_shown(recwarn):
    with np.errstate(all="warn"):
        check_softmax(no_max_subtraction)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_report_never_prints_the_right_answer():
    # every number of the reference's outputs on the check's own inputs, at the printed
    # precisions, is absent from the report of each broken function
    for fn in (fixed_axis, no_max_subtraction, float32_inside, float64_upcast):
        text = str(check_softmax(fn))
        rng = np.random.default_rng(0)
        for shape in ((5,), (3, 4), (4, 4)):
            x = rng.standard_normal(shape) * 2
            for value in ac.softmax(x).ravel():
                for digits in (3, 4, 6):
                    shown = f"{value:.{digits}f}"
                    if shown not in ("0.000", "1.000", "0.0000", "1.0000"):
                        assert shown not in text
        assert "array([" not in text and "[0." not in text


def test_report_lines_fit():
    for fn in (fixed_axis, no_keepdims, mean_subtraction):
        assert max(len(line) for line in str(check_softmax(fn)).splitlines()) <= 80


def test_seed_changes_the_inputs_and_is_reported():
    report = check_softmax(fixed_axis, seed=3)
    assert "(seed 3)" in report["matches_reference"].input
    assert check_softmax(ac.softmax, seed=5).passed


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"fn": 3}, TypeError, "fn: expected a callable"),
    ({"fn": ac.softmax, "seed": -1}, ValueError, "seed"),
    ({"fn": ac.softmax, "seed": 1.5}, TypeError, "seed"),
])
def test_bad_arguments(kwargs, exc, words):
    fn = kwargs.pop("fn")
    with pytest.raises(exc, match=words):
        check_softmax(fn, **kwargs)


def test_fast_enough():
    start = time.perf_counter()
    check_softmax(no_max_subtraction)
    check_softmax(ac.softmax)
    assert time.perf_counter() - start < 2.0
