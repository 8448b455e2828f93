"""attncore.testing.check_multi_head_attention: attncore's layer and a hand-written one
pass, the classic mistakes of a multi-head forward pass are each caught by the property
that names them, and a function that raises, returns the wrong thing or takes other
arguments gets one sentence, never the right answer's values."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attncore as ac
from attncore.testing import check_multi_head_attention
from attncore.testing.multi_head import PROPERTIES, layer


def reference(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    params = ac.MultiHeadParams(w_q, w_k, w_v, w_o, None, None, None, None, num_heads)
    return ac.multi_head_attention(params, x, causal=causal)


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def hand_written(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    """What a learner writes: split, attend, merge, project."""
    *batch, n, d = x.shape
    dh = d // num_heads

    def split(y):
        return np.swapaxes(y.reshape(*batch, n, num_heads, dh), -2, -3)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(dh)
    if causal:
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    z = _softmax(s) @ v
    return np.swapaxes(z, -2, -3).reshape(*batch, n, d) @ w_o


# --- broken layers, each with one classic mistake -----------------------------------

def interleaved_heads(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return layer(x, w_q, w_k, w_v, w_o, num_heads, causal, split="interleaved")


def split_by_reshape(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return layer(x, w_q, w_k, w_v, w_o, num_heads, causal, split="reshape")


def scale_by_d_model(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    *batch, n, d = x.shape
    dh = d // num_heads
    split = lambda y: np.swapaxes(y.reshape(*batch, n, num_heads, dh), -2, -3)  # noqa: E731
    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)               # d_model, not d_head
    if causal:
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    return np.swapaxes(_softmax(s) @ v, -2, -3).reshape(*batch, n, d) @ w_o


def no_output_projection(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return hand_written(x, w_q, w_k, w_v, np.eye(x.shape[-1]), num_heads, causal)


def merge_by_reshape(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return layer(x, w_q, w_k, w_v, w_o, num_heads, causal, merge="reshape")


def causal_sees_next(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return layer(x, w_q, w_k, w_v, w_o, num_heads, causal, shift=1)


def two_dimensional_only(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    """Written for one sequence: transposes with .T, which reverses every axis."""
    n, d = x.shape[-2:]
    dh = d // num_heads
    split = lambda y: y.reshape(-1, n, num_heads, dh).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    s = q @ k.T.transpose(2, 0, 1, 3) / math.sqrt(dh) if q.shape[0] == 1 else \
        q @ np.swapaxes(k, -1, -2)[::-1] / math.sqrt(dh)
    if causal:
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    z = _softmax(s) @ v
    return z.transpose(0, 2, 1, 3).reshape(x.shape) @ w_o


def float64_always(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return hand_written(*(np.asarray(a, np.float64) for a in (x, w_q, w_k, w_v, w_o)),
                        num_heads, causal)


def in_place(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    out = hand_written(x, w_q, w_k, w_v, w_o, num_heads, causal)
    x *= 2
    return out


BROKEN = {
    interleaved_heads: ("heads_are_column_blocks", "interleaved"),
    split_by_reshape: ("heads_are_column_blocks", "mixes tokens across heads"),
    scale_by_d_model: ("each_head_attends", "sqrt(d_model)"),
    no_output_projection: ("output_projection", "w_o is not applied"),
    merge_by_reshape: ("heads_are_column_blocks", "merge reshapes"),
    causal_sees_next: ("causal", "see token i + 1"),
    two_dimensional_only: ("batch_axes", "batch"),
    float64_always: ("preserves_dtype", "dtype float32"),
    in_place: ("inputs_unchanged", "changed its argument x"),
}


@pytest.mark.parametrize("fn", [reference, hand_written], ids=["attncore", "hand-written"])
def test_correct_layers_pass(fn):
    report = check_multi_head_attention(fn)
    report.assert_passed()
    assert [r.name for r in report.results] == list(PROPERTIES)


def test_the_switchable_layer_is_right_by_default():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 8))
    ws = [rng.standard_normal((8, 8)) for _ in range(4)]
    for h in (1, 2, 4):
        for causal in (False, True):
            np.testing.assert_allclose(layer(x, *ws, h, causal),
                                       reference(x, *ws, h, causal), atol=1e-12)


@pytest.mark.parametrize("fn", list(BROKEN), ids=lambda f: f.__name__)
def test_each_mistake_is_caught_by_its_property(fn):
    name, words = BROKEN[fn]
    report = check_multi_head_attention(fn)
    assert not report.passed
    assert name in report.failed, report.summary()
    text = report.summary()
    assert words in text, text
    assert "matches_reference" in report.failed or fn in (float64_always, in_place)


def test_one_error_reads_as_one_cause():
    def raises(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
        return x @ np.ones((x.shape[-1] + 1, 2))
    report = check_multi_head_attention(raises)
    assert set(report.failed) == set(PROPERTIES)
    first = report.results[0]
    assert "raised ValueError" in first.detail
    assert all(r.detail.startswith("fails with the same error as output_shape")
               for r in report.results[1:]), report.summary()
    assert report.summary().count("raised ValueError") == 1


@pytest.mark.parametrize("fn, words", [
    (lambda x, w_q, w_k, w_v, w_o, num_heads, causal=False: None, "got None"),
    (lambda x, w_q, w_k, w_v, w_o, num_heads, causal=False: x.tolist(), "got list"),
    (lambda x, w_q, w_k, w_v, w_o, num_heads, causal=False: x[..., :1], "expected shape"),
    (lambda x, w_q, w_k, w_v, w_o, num_heads, causal=False: x * np.nan, "NaN"),
    (lambda x, w_q, w_k, w_v, w_o, num_heads, causal=False: (x > 0), "got bool"),
    (lambda x, w_q, w_k, w_v, w_o: x, "takes other arguments"),
], ids=["None", "list", "shape", "nan", "bool", "signature"])
def test_a_bad_return_or_signature_is_one_sentence(fn, words):
    report = check_multi_head_attention(fn)
    detail = report["output_shape"].detail
    assert words in detail
    assert "Traceback" not in report.summary()
    assert "\n" not in detail


def test_without_causal_the_causal_property_is_skipped():
    def no_causal(x, w_q, w_k, w_v, w_o, num_heads):
        return hand_written(x, w_q, w_k, w_v, w_o, num_heads)
    report = check_multi_head_attention(no_causal, causal=False)
    report.assert_passed()
    assert report["causal"].status == "skipped"


def test_the_report_never_prints_the_reference_values():
    rng = np.random.default_rng([0, 10])          # the first reference case's inputs
    x = rng.standard_normal((5, 8))
    ws = [rng.standard_normal((8, 8)) * (1.5 / math.sqrt(8)) for _ in range(4)]
    ref = reference(x, *ws, 2)
    for fn in BROKEN:
        text = check_multi_head_attention(fn).summary()
        for value in ref.ravel()[:12]:
            for digits in (3, 4, 6):
                assert f"{value:.{digits}f}" not in text


def test_bad_arguments_to_the_check():
    with pytest.raises(TypeError, match="fn: expected a callable"):
        check_multi_head_attention(3)
    with pytest.raises(TypeError, match="causal"):
        check_multi_head_attention(reference, causal="yes")


def test_the_module_example_runs():
    import doctest

    import attncore.testing.multi_head as module
    assert doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
