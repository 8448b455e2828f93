"""attncore.testing.check_attention: the course's implementations pass, classic mistakes are
caught by the property that names them, and the report reads well."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import attncore as ac
import broken_attention as broken
from attncore.testing import PROPERTIES, AttentionCheck, check_attention

OURS = {
    "numpy": (ac.scaled_dot_product_attention, "numpy"),
    "numpy, weights": (functools.partial(ac.scaled_dot_product_attention,
                                         return_weights=True), "numpy"),
    "torch": (ac.scaled_dot_product_attention, "torch"),
    "torch, weights": (functools.partial(ac.scaled_dot_product_attention,
                                         return_weights=True), "torch"),
    "tiled numpy, block 3": (functools.partial(ac.tiled_attention, block_size=3), "numpy"),
    "tiled torch, block 128": (ac.tiled_attention, "torch"),
    "hand-written": (broken.correct, "numpy"),
    "hand-written, weights": (broken.correct_with_weights, "numpy"),
    "PyTorch's, wrapped": (None, "torch"),
}


def torch_sdpa(q, k, v, mask=None, causal=False, dropout_p=0.0):
    """PyTorch's own attention in the course's calling convention: is_causal is top-left
    (PyTorch's too), and a query with no admissible key gets zeros, not NaN."""
    import torch
    import torch.nn.functional as F

    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal:
        tri = torch.ones(n_q, n_k, dtype=torch.bool).tril()
        mask = tri if mask is None else mask & tri
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


OURS["PyTorch's, wrapped"] = (torch_sdpa, "torch")


@pytest.mark.parametrize("name", OURS)
def test_the_course_implementations_pass(name):
    fn, backend = OURS[name]
    report = check_attention(fn, backend=backend)
    report.assert_passed()
    assert [r.name for r in report.results] == list(PROPERTIES)
    weights = "weights" in name
    assert report["rows_sum_to_one"].status == ("passed" if weights else "skipped")


@pytest.mark.parametrize("name", [n for n in OURS if not n.startswith("hand-written")])
def test_the_course_implementations_keep_half_precision(name):
    # attncore's functions and PyTorch's claim float16 too (and keep it)
    fn, backend = OURS[name]
    check_attention(fn, backend=backend, dtypes=("float32", "float16")).assert_passed()


@pytest.mark.parametrize("name", OURS)
def test_no_false_alarm_for_any_declared_support(name):
    fn, backend = OURS[name]
    for mask, causal in ((False, False), (False, True), (True, False)):
        report = check_attention(fn, backend=backend, mask=mask, causal=causal,
                                 batch_shape=(3,), seed=4)
        report.assert_passed()


@pytest.mark.parametrize("batch_shape", [(), (3,), (2, 1, 2)])
def test_any_batch_shape(batch_shape):
    check_attention(ac.scaled_dot_product_attention, batch_shape=batch_shape).assert_passed()
    assert check_attention(broken.scale_by_d, batch_shape=batch_shape).failed == \
        ["matches_reference"]


# Each mistake, and the properties that must name it. Where a property cannot see a
# mistake at all, it must pass: the report points at the mistake, not at everything.
MISTAKES = {
    # the structure is intact; only the numbers are off
    "scale_by_d": {"matches_reference"},
    # the scores of key j mix in other keys' coordinates
    "reshape_not_transpose": {"permutation_equivariance", "no_future_leakage",
                              "causal_prefix", "causal_top_left", "no_padding_leakage",
                              "matches_reference"},
    "inverted_mask": {"no_padding_leakage", "fully_masked_rows", "matches_reference"},
    # masked keys still in the denominator: weights no longer sum to one
    "mask_after_softmax": {"rows_sum_to_one", "convex_combination", "no_future_leakage",
                           "causal_prefix", "causal_top_left", "no_padding_leakage",
                           "matches_reference"},
    "causal_sees_next": {"no_future_leakage", "causal_prefix", "causal_top_left",
                         "matches_reference"},
    # query 0 sees nothing and returns zeros, outside the range of the values
    "causal_misses_itself": {"convex_combination", "causal_prefix", "causal_top_left",
                             "matches_reference"},
    # only visible once the keys span several blocks
    "online_softmax_without_rescale": {"convex_combination", "matches_reference"},
    # --- the mistakes an outside attack found check_attention passing (issue 29) ---
    # the same as top-left on square inputs, where every causal call used to be
    "causal_bottom_right": {"causal_top_left", "matches_reference"},
    "causal_shifted_when_not_square": {"causal_top_left", "matches_reference"},
    # every input used to be float64
    "float32_answered_in_float64": {"preserves_dtype"},
    # inputs_unchanged used to make one call, with a mask and without causal
    "mutates_under_causal": {"inputs_unchanged"},
    "mutates_without_mask": {"inputs_unchanged"},
    # every case used d_v = 3
    "wrong_when_d_v_above_3": {"matches_reference"},
    # used to be reported as no_padding_leakage; a causal call with n_q > n_k is wrong too
    "zeros_when_more_queries_than_keys": {"causal_top_left", "matches_reference"},
    # --- five more a learner could write ---
    "scale_by_sqrt_d_v": {"matches_reference"},
    "causal_upper_triangle": {"no_future_leakage", "causal_prefix", "causal_top_left",
                              "matches_reference"},
    # masked keys keep weight exp(0): the future and the padding leak, and a fully
    # masked row averages every value
    "multiplies_scores_by_mask": {"no_future_leakage", "causal_prefix", "causal_top_left",
                                  "no_padding_leakage", "fully_masked_rows",
                                  "matches_reference"},
    "causal_replaces_mask": {"matches_reference"},
    "computes_float32_in_float16": {"preserves_dtype"},
    # --- three more an outside attack found passing (issue 37) ---
    # NaN once a score passes about 709; every score the other properties make is small
    "softmax_without_max_subtraction": {"large_scores"},
    # float64 compared to 1e-6 only: float32's seven digits passed
    "computes_in_float32": {"float64_precision"},
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_is_caught_by_name(mistake):
    report = check_attention(getattr(broken, mistake))
    assert not report.passed
    assert set(report.failed) == MISTAKES[mistake], str(report)
    for name in report.failed:
        result = report[name]
        assert result.detail and result.input, result
        assert "seed 0" in result.input


def test_mistakes_are_caught_on_torch_too():
    def on_torch(fn):
        def wrapped(q, k, v, mask=None, causal=False):
            to = lambda x: None if x is None else x.numpy()   # noqa: E731
            res = fn(to(q), to(k), to(v), mask=to(mask), causal=causal)
            import torch
            return tuple(map(torch.from_numpy, res)) if isinstance(res, tuple) \
                else torch.from_numpy(res)
        wrapped.__name__ = fn.__name__
        return wrapped

    for mistake in ("causal_sees_next", "causal_bottom_right", "mutates_under_causal",
                    "float32_answered_in_float64"):
        report = check_attention(on_torch(getattr(broken, mistake)), backend="torch")
        assert set(report.failed) == MISTAKES[mistake], str(report)


def test_mistakes_that_need_a_declaration():
    # softmax over the queries on square inputs, in a function that declares neither
    # keyword: every square call used to be a causal one
    report = check_attention(broken.wrong_axis_when_square, mask=False, causal=False)
    assert set(report.failed) == {"convex_combination", "matches_reference"}, str(report)
    assert "q (2, 3, 6, 4), k (2, 3, 6, 4)" in report["matches_reference"].input
    # half precision, where claimed: a function that claims float16 must keep it
    assert check_attention(broken.float16_answered_in_float32).passed
    report = check_attention(broken.float16_answered_in_float32,
                             dtypes=("float32", "float16"))
    assert report.failed == ["preserves_dtype"]
    assert report["preserves_dtype"].detail == ("float16 inputs gave out of dtype float32, "
                                                "expected float16")


def test_each_property_names_what_it_found():
    report = check_attention(broken.causal_bottom_right)
    assert report["causal_top_left"].detail == (
        "output 0 differs from attention of query 0 over keys 0..0 (top-left: "
        "tril(ones(n_q, n_k))); it equals attention over keys 0..3: the mask is aligned "
        "bottom-right, tril(ones(n_q, n_k), k=n_k-n_q)")
    assert "n_q < n_k" in report["causal_top_left"].input
    detail = check_attention(broken.causal_shifted_when_not_square)["causal_top_left"].detail
    assert detail.endswith("the mask is shifted by one, j <= i + 1")
    result = check_attention(broken.mutates_under_causal)["inputs_unchanged"]
    assert result.detail == ("fn changed its argument q in place (without a mask, "
                             "causal=True)")
    assert "causal=True" in result.input
    assert check_attention(broken.mutates_without_mask)["inputs_unchanged"].detail == \
        "fn changed its argument v in place (without a mask)"
    result = check_attention(broken.float32_answered_in_float64)["preserves_dtype"]
    assert result.detail.startswith("float32 inputs gave out of dtype float64, expected "
                                    "float32; under NumPy 2")
    assert "of dtype float32" in result.input
    result = check_attention(broken.wrong_when_d_v_above_3)["matches_reference"]
    assert "v (2, 3, 6, 5)" in result.input
    result = check_attention(broken.zeros_when_more_queries_than_keys)["matches_reference"]
    assert "q (2, 3, 7, 16), k (2, 3, 4, 16)" in result.input
    assert "aligned" not in \
        check_attention(broken.zeros_when_more_queries_than_keys)["causal_top_left"].detail


def test_a_function_without_mask_or_causal():
    def plain(q, k, v):
        return broken.correct(q, k, v)

    report = check_attention(plain, mask=False, causal=False)
    assert report.passed
    skipped = {r.name for r in report.results if r.status == "skipped"}
    assert skipped == {"rows_sum_to_one", "no_future_leakage", "causal_prefix",
                       "causal_top_left", "no_padding_leakage", "fully_masked_rows",
                       "dropout"}
    # without saying so, the mask calls fail, and the report says what to do
    report = check_attention(plain)
    assert "no_padding_leakage" in report.failed
    # (the first property that hits the error reports it; the others point to it)
    assert "pass mask=False or causal=False" in report[report.failed[0]].detail
    assert report["no_padding_leakage"].detail.startswith("fails with the same error")


def test_nan_for_fully_masked_rows_is_reported():
    def nan_rows(q, k, v, mask=None, causal=False):
        scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        with np.errstate(invalid="ignore"):
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True) @ v

    report = check_attention(nan_rows, causal=False)
    assert report.failed == ["fully_masked_rows"]
    assert "NaN" in report["fully_masked_rows"].detail


def test_errors_and_wrong_shapes_are_failures_not_crashes():
    def crashes(q, k, v, mask=None, causal=False):
        raise RuntimeError("boom")

    def transposed(q, k, v, mask=None, causal=False):
        return np.swapaxes(broken.correct(q, k, v, mask, causal), -1, -2)

    def in_place(q, k, v, mask=None, causal=False):
        q *= 1.0 / np.sqrt(q.shape[-1])
        return broken.correct(q, k, v, mask, causal) * 1.0

    report = check_attention(crashes)
    assert set(report.failed) == set(PROPERTIES) - {"rows_sum_to_one", "dropout"}
    assert report["output_shape"].detail == "fn raised RuntimeError: boom"
    report = check_attention(transposed)
    assert "expected out of shape (2, 3, 5, 3), got (2, 3, 3, 5)" in \
        report["output_shape"].detail
    assert "inputs_unchanged" in check_attention(in_place).failed


def test_report_is_short_and_readable():
    report = check_attention(broken.mask_after_softmax)
    text = str(report)
    lines = text.splitlines()
    assert lines[0] == ("check_attention(mask_after_softmax): 7 passed, 7 failed, "
                        "1 skipped")
    assert all(len(line) <= 80 for line in lines)   # the book's content column
    assert any(line.startswith("  FAIL  rows_sum_to_one: ") for line in lines)
    assert any(line.startswith("  ok    permutation_equivariance") for line in lines)
    assert isinstance(report, AttentionCheck)
    with pytest.raises(AssertionError, match="FAIL  no_padding_leakage"):
        report.assert_passed()
    with pytest.raises(KeyError, match="name: expected one of"):
        report["no_such_property"]
    assert "partial(tiled_attention, ...)" in str(
        check_attention(functools.partial(ac.tiled_attention, block_size=4)))


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"fn": 3}, TypeError, "fn: expected a callable"),
    ({"mask": "yes"}, TypeError, "mask: expected True or False"),
    ({"batch_shape": [2]}, TypeError, "batch_shape: expected a tuple"),
    ({"batch_shape": (0,)}, ValueError, "batch_shape: expected a positive integer"),
    ({"backend": "jax"}, ValueError, "backend: expected 'numpy' or 'torch'"),
    ({"atol": -1.0}, ValueError, "atol: expected a finite number >= 0"),
    ({"rtol": "1e-6"}, TypeError, "rtol: expected a finite number >= 0"),
    ({"dtypes": ("float16",)}, ValueError, r"dtypes: expected \('float32',\) or"),
    ({"dtypes": ["float32"]}, ValueError, r"dtypes: expected \('float32',\) or"),
    ({"dtypes": ("float32", "bfloat16")}, ValueError, "dtypes: expected"),
    ({"seed": -1}, ValueError, "seed: expected a non-negative integer"),
])
def test_bad_arguments(kwargs, exc, words):
    kwargs = {"fn": broken.correct, **kwargs}
    with pytest.raises(exc, match=words):
        check_attention(kwargs.pop("fn"), **kwargs)


def test_seed_changes_the_inputs():
    a = check_attention(broken.scale_by_d, seed=0)["matches_reference"]
    b = check_attention(broken.scale_by_d, seed=5)["matches_reference"]
    assert a.detail != b.detail and "seed 5" in b.input


# the functions that take dropout_p: attncore's (NumPy and torch), PyTorch's, by hand
WITH_DROPOUT = [n for n in OURS if n != "hand-written" and n != "hand-written, weights"]


@pytest.mark.parametrize("name", WITH_DROPOUT)
def test_dropout_is_checked_without_false_alarm(name):
    fn, backend = OURS[name]
    report = check_attention(fn, backend=backend, dropout=True)
    report.assert_passed()
    assert report["dropout"].status == "passed"


def test_dropout_without_rescaling_is_caught():
    assert check_attention(broken.dropout_correct, dropout=True).passed
    report = check_attention(broken.dropout_without_rescaling, dropout=True)
    assert report.failed == ["dropout"], str(report)
    assert "1 - dropout_p" in report["dropout"].detail
    # without the declaration, dropout is not exercised: skipped, and named so
    report = check_attention(broken.dropout_without_rescaling)
    assert report.passed and report["dropout"].status == "skipped"


def test_the_new_properties_name_what_they_found():
    detail = check_attention(broken.softmax_without_max_subtraction)["large_scores"].detail
    assert "NaN" in detail and "709" in detail
    detail = check_attention(broken.computes_in_float32)["float64_precision"].detail
    assert "float64" in detail


def test_one_error_is_reported_once_as_the_cause():
    # k.T on batched inputs: every property hits the same ValueError (with other sizes)
    report = check_attention(broken.transpose_with_dot_t)
    first = report[report.failed[0]]
    assert first.name == "output_shape" and "raised ValueError" in first.detail
    assert "k.T reverses every axis" in first.detail
    text = report.summary()
    assert text.count("raised ValueError") == 1, text
    others = [report[name] for name in report.failed[1:]]
    assert others and all(r.detail.startswith("fails with the same error as "
                                              "output_shape") for r in others)


def test_a_float64_result_says_why_and_how():
    detail = check_attention(broken.float32_answered_in_float64)["preserves_dtype"].detail
    assert "float32 inputs gave out of dtype float64" in detail
    assert "np.sqrt(d_k)" in detail and "math.sqrt(d_k)" in detail
    assert ".astype(q.dtype)" in detail
