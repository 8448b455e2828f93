"""attncore.testing.check_attention_backward: accepts a right backward pass, rejects each
mistake learners make for the property it breaks, and turns whatever the learner's function
does into one sentence, never showing the right gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attncore as ac
from attncore.testing import check_attention_backward
from attncore.testing.backward import PROPERTIES, _SHAPES, _Runner, _reference

pytest.importorskip("torch")


def _softmax(s):
    with np.errstate(invalid="ignore"):                # (rows with no key: NaN)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _t(x):
    return np.swapaxes(x, -1, -2)


def _parts(q, k, v, d_out, causal, bottom_right=False):
    c = 1 / math.sqrt(q.shape[-1])
    s = c * q @ _t(k)
    if causal:
        n_q, n_k = s.shape[-2:]
        shift = n_k - n_q if bottom_right else 0
        s = np.where(np.tril(np.ones((n_q, n_k), dtype=bool), k=shift), s, -np.inf)
    a = _softmax(s)
    da = d_out @ _t(v)
    return c, s, a, da


def right(q, k, v, d_out, causal=False):
    """The backward pass from the saved row statistics, as the chapter teaches it."""
    out, lse = ac.tiled_attention(q, k, v, causal=causal, return_lse=True)
    c = 1 / math.sqrt(q.shape[-1])
    s = c * q @ _t(k)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - lse[..., None])
    dv = _t(p) @ d_out
    ds = p * (d_out @ _t(v) - (d_out * out).sum(axis=-1, keepdims=True))
    return c * ds @ k, c * _t(ds) @ q, dv


def missing_row_sum(q, k, v, d_out, causal=False):
    c, _, a, da = _parts(q, k, v, d_out, causal)
    ds = a * da                                               # the delta term forgotten
    return c * ds @ k, c * _t(ds) @ q, _t(a) @ d_out


def no_scale(q, k, v, d_out, causal=False):
    c, _, a, da = _parts(q, k, v, d_out, causal)
    ds = a * (da - (a * da).sum(axis=-1, keepdims=True))
    return ds @ k, _t(ds) @ q, _t(a) @ d_out


def swapped(q, k, v, d_out, causal=False):
    dq, dk, dv = right(q, k, v, d_out, causal)
    return dk, dq, dv


def transposed_dk(q, k, v, d_out, causal=False):
    c, _, a, da = _parts(q, k, v, d_out, causal)
    ds = a * (da - (a * da).sum(axis=-1, keepdims=True))
    return c * ds @ k, c * _t(q) @ ds, _t(a) @ d_out        # (d_k, n_k), not (n_k, d_k)


def no_causal_in_backward(q, k, v, d_out, causal=False):
    """The forward statistics are causal; the recomputed weights forget the mask."""
    out, lse = ac.tiled_attention(q, k, v, causal=causal, return_lse=True)
    c = 1 / math.sqrt(q.shape[-1])
    p = np.exp(c * q @ _t(k) - lse[..., None])                # no mask here
    ds = p * (d_out @ _t(v) - (d_out * out).sum(axis=-1, keepdims=True))
    return c * ds @ k, c * _t(ds) @ q, _t(p) @ d_out


def unnormalised_dv(q, k, v, d_out, causal=False):
    dq, dk, _ = right(q, k, v, d_out, causal)
    _, s, _, _ = _parts(q, k, v, d_out, causal)
    e = np.exp(s - s.max(axis=-1, keepdims=True))              # not divided by the sum
    return dq, dk, _t(e) @ d_out


def bottom_right(q, k, v, d_out, causal=False):
    c, _, a, da = _parts(q, k, v, d_out, causal, bottom_right=True)
    a = np.nan_to_num(a)
    ds = a * (da - (a * da).sum(axis=-1, keepdims=True))
    return c * ds @ k, c * _t(ds) @ q, _t(a) @ d_out


def swapped_when_square(q, k, v, d_out, causal=False):
    dq, dk, dv = right(q, k, v, d_out, causal)
    return (dk, dq, dv) if q.shape == k.shape else (dq, dk, dv)


def four_d_only(q, k, v, d_out, causal=False):
    """Transposes axes 2 and 3 by number: right for (batch, heads, n, d) only."""
    c = 1 / math.sqrt(q.shape[-1])
    a = _softmax(c * q @ k.transpose(0, 1, 3, 2))
    da = d_out @ v.transpose(0, 1, 3, 2)
    ds = a * (da - (a * da).sum(axis=-1, keepdims=True))
    return (c * ds @ k, c * ds.transpose(0, 1, 3, 2) @ q,
            a.transpose(0, 1, 3, 2) @ d_out)


def float64_always(q, k, v, d_out, causal=False):
    return tuple(g.astype(np.float64) for g in right(q, k, v, d_out, causal))


def overwrites_d_out(q, k, v, d_out, causal=False):
    grads = right(q, k, v, d_out, causal)
    d_out *= 0
    return grads


def test_the_reference_and_attncore_pass():
    report = check_attention_backward(right)
    assert report.passed, str(report)
    assert not any(r.status == "skipped" for r in report.results)
    lib = check_attention_backward(
        lambda q, k, v, d_out, causal=False: ac.attention_backward(q, k, v, d_out,
                                                                   causal=causal))
    assert lib.passed, str(lib)


@pytest.mark.parametrize("fn, prop, words", [
    (missing_row_sum, "row_sum_term", "row-sum term"),
    (no_scale, "scale_once", "scale is missing"),
    (swapped, "returns_three_gradients", "swapped"),
    (swapped_when_square, "query_and_key_gradients", "swapped"),
    (transposed_dk, "returns_three_gradients", "transpose"),
    (no_causal_in_backward, "causal_backward", "causal mask"),
    (unnormalised_dv, "value_gradients", "normalised"),
    (bottom_right, "causal_backward", "bottom-right"),
    (four_d_only, "batch_axes", "no batch axes"),
    (float64_always, "preserves_dtype", "math.sqrt"),
    (overwrites_d_out, "inputs_unchanged", "d_out"),
])
def test_each_mistake_fails_its_property(fn, prop, words):
    report = check_attention_backward(fn)
    assert prop in report.failed, str(report)
    result = report[prop]
    assert words in f"{result.detail} {result.input}", result
    assert result.input, "a failure names the input it failed on"


def test_the_mistakes_keep_the_other_properties():
    assert check_attention_backward(missing_row_sum).failed == [
        "row_sum_term", "query_and_key_gradients", "causal_backward"]
    assert check_attention_backward(no_scale).failed == [
        "scale_once", "query_and_key_gradients", "causal_backward"]
    assert check_attention_backward(unnormalised_dv).failed == [
        "value_gradients", "causal_backward"]
    assert check_attention_backward(no_causal_in_backward).failed == ["causal_backward"]


@pytest.mark.parametrize("fn, words", [
    (lambda q, k, v, d_out, causal=False: 1 / 0, "raised ZeroDivisionError"),
    (lambda q, k, v, d_out, causal=False: right(q, k, v, d_out)[:2],
     "tuple of three gradients"),
    (lambda q, k, v, d_out, causal=False: None, "tuple of three gradients"),
    (lambda q, k, v, d_out, causal=False: (q, k[..., :1, :], v), "expected shape"),
    (lambda q, k, v, d_out, causal=False: tuple(x.tolist() for x in (q, k, v)),
     "expected a NumPy array"),
    (lambda q, k, v, d_out, causal=False: (q.astype(np.float16), k, v), "dtype"),
    (lambda q, k, v, d_out, causal=False: (q * np.nan, k, v), "NaN"),
    (lambda q, k, v: (q, k, v), "other arguments"),
])
def test_bad_functions_get_one_sentence(fn, words):
    report = check_attention_backward(fn)
    first = report["returns_three_gradients"]
    assert first.status == "failed"
    assert words in first.detail, first.detail
    assert "Traceback" not in str(report) and "\n" not in first.detail


def test_without_a_causal_keyword_the_causal_property_is_skipped():
    def plain(q, k, v, d_out):
        return right(q, k, v, d_out)

    report = check_attention_backward(plain, causal=False)
    assert report.passed, str(report)
    assert report["causal_backward"].status == "skipped"


def test_torch_results_are_accepted():
    import torch

    def on_torch(q, k, v, d_out, causal=False):
        return tuple(torch.from_numpy(g) for g in right(q, k, v, d_out, causal))

    assert check_attention_backward(on_torch).passed


def test_the_report_never_shows_the_right_gradients():
    runner = _Runner(right, True, 0)
    values = set()
    for offset, shape in enumerate(_SHAPES):
        for start in (0, 10, 20, 40, 52):
            for g in _reference(*runner.inputs(*shape, offset + start)):
                values.update(f"{x:.3g}" for x in g.ravel()[:20])
    for fn in (missing_row_sum, no_scale, swapped, unnormalised_dv,
               no_causal_in_backward, bottom_right):
        text = str(check_attention_backward(fn)) + " ".join(
            r.detail for r in check_attention_backward(fn).results)
        words = set(text.replace(",", " ").replace("(", " ").replace(")", " ").split())
        leaked = {w for w in words if w in values and len(w.strip("-0.")) > 2}
        assert not leaked, leaked


def test_properties_and_bad_arguments():
    assert list(PROPERTIES) == [r.name for r in check_attention_backward(right).results]
    with pytest.raises(TypeError, match="fn: expected a callable"):
        check_attention_backward(3)
    with pytest.raises(TypeError, match="causal: expected True or False"):
        check_attention_backward(right, causal="yes")
    with pytest.raises((TypeError, ValueError), match="seed"):
        check_attention_backward(right, seed=-1)
