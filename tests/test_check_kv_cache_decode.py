"""attncore.testing.check_kv_cache_decode: accepts a right decoding step with a KV cache and
grouped-query attention, rejects each mistake learners make for the property it breaks, and
turns whatever the learner's function does into one sentence, never showing the right
output."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attncore as ac
from attncore.testing import check_kv_cache_decode
from attncore.testing.kv_cache import _CASES, PROPERTIES, _reference, _Runner


def _attend(q, k, v, groups, causal_top_left=False):
    """q (..., h, 1, d) over k, v (..., h_kv, n, d); query head i reads kv head groups[i]."""
    k, v = k[..., groups, :, :], v[..., groups, :, :]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal_top_left:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def right(q_new, k_new, v_new, k_cache, v_cache):
    h, h_kv = q_new.shape[-3], k_new.shape[-3]
    k = np.concatenate([k_cache, k_new], axis=-2)
    v = np.concatenate([v_cache, v_new], axis=-2)
    return _attend(q_new, k, v, np.arange(h) // (h // h_kv)), k, v


def append_after_attending(q_new, k_new, v_new, k_cache, v_cache):
    h, h_kv = q_new.shape[-3], k_new.shape[-3]
    groups = np.arange(h) // (h // h_kv)
    if k_cache.shape[-2] == 0:                       # nothing to attend to yet
        out = np.zeros_like(q_new)
    else:
        out = _attend(q_new, k_cache, v_cache, groups)
    return (out, np.concatenate([k_cache, k_new], axis=-2),
            np.concatenate([v_cache, v_new], axis=-2))


def modulo_grouping(q_new, k_new, v_new, k_cache, v_cache):
    h, h_kv = q_new.shape[-3], k_new.shape[-3]
    k = np.concatenate([k_cache, k_new], axis=-2)
    v = np.concatenate([v_cache, v_new], axis=-2)
    return _attend(q_new, k, v, np.arange(h) % h_kv), k, v


def causal_on_the_new_query(q_new, k_new, v_new, k_cache, v_cache):
    h, h_kv = q_new.shape[-3], k_new.shape[-3]
    k = np.concatenate([k_cache, k_new], axis=-2)
    v = np.concatenate([v_cache, v_new], axis=-2)
    return _attend(q_new, k, v, np.arange(h) // (h // h_kv), causal_top_left=True), k, v


def caches_not_returned_longer(q_new, k_new, v_new, k_cache, v_cache):
    out, _, _ = right(q_new, k_new, v_new, k_cache, v_cache)
    return out, k_cache, v_cache


def concatenated_on_the_heads_axis(q_new, k_new, v_new, k_cache, v_cache):
    out, _, _ = right(q_new, k_new, v_new, k_cache, v_cache)
    return (out, np.concatenate([k_cache, k_new], axis=-3),
            np.concatenate([v_cache, v_new], axis=-3))


def concatenated_on_the_heads_axis_when_it_fits(q_new, k_new, v_new, k_cache, v_cache):
    out, _, _ = right(q_new, k_new, v_new, k_cache, v_cache)
    axis = -3 if k_cache.shape[-2] == 1 else -2
    return (out, np.concatenate([k_cache, k_new], axis=axis),
            np.concatenate([v_cache, v_new], axis=axis))


def prepended(q_new, k_new, v_new, k_cache, v_cache):
    out, _, _ = right(q_new, k_new, v_new, k_cache, v_cache)
    return (out, np.concatenate([k_new, k_cache], axis=-2),
            np.concatenate([v_new, v_cache], axis=-2))


def fails_on_an_empty_cache(q_new, k_new, v_new, k_cache, v_cache):
    k_cache[..., 0, 0]                              # IndexError when t = 0
    return right(q_new, k_new, v_new, k_cache, v_cache)


def no_scale(q_new, k_new, v_new, k_cache, v_cache):
    out, k, v = right(q_new * math.sqrt(q_new.shape[-1]), k_new, v_new, k_cache, v_cache)
    return out, k, v


def float64_always(q_new, k_new, v_new, k_cache, v_cache):
    out, k, v = right(q_new, k_new, v_new, k_cache, v_cache)
    return out.astype(np.float64), k, v


def writes_into_the_cache(q_new, k_new, v_new, k_cache, v_cache):
    result = right(q_new, k_new, v_new, k_cache, v_cache)
    k_cache *= 0
    return result


def test_the_reference_and_attncore_pass():
    report = check_kv_cache_decode(right)
    assert report.passed, str(report)
    assert not any(r.status == "skipped" for r in report.results)

    def with_attncore(q_new, k_new, v_new, k_cache, v_cache):
        k = np.concatenate([k_cache, k_new], axis=-2)
        v = np.concatenate([v_cache, v_new], axis=-2)
        return ac.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v

    assert check_kv_cache_decode(with_attncore).passed


@pytest.mark.parametrize("fn, prop, words", [
    (append_after_attending, "sees_its_own_position", "appended after attending"),
    (append_after_attending, "empty_cache", "its own"),
    (modulo_grouping, "head_grouping", "i % h_kv"),
    (causal_on_the_new_query, "sees_the_whole_cache", "top-left"),
    (caches_not_returned_longer, "returns_output_and_caches", "one position longer"),
    (concatenated_on_the_heads_axis, "returns_output_and_caches", "axis -2"),
    (concatenated_on_the_heads_axis_when_it_fits, "returns_output_and_caches",
     "heads axis"),
    (prepended, "caches_grow", "put first"),
    (fails_on_an_empty_cache, "empty_cache", "IndexError"),
    (no_scale, "matches_reference", "without the scale"),
    (float64_always, "preserves_dtype", "math.sqrt"),
    (writes_into_the_cache, "inputs_unchanged", "k_cache"),
])
def test_each_mistake_fails_its_property(fn, prop, words):
    report = check_kv_cache_decode(fn)
    assert prop in report.failed, str(report)
    result = report[prop]
    assert words in f"{result.detail} {result.input}", result
    assert result.input


def test_the_mistakes_keep_the_other_properties():
    assert check_kv_cache_decode(modulo_grouping).failed == [
        "empty_cache", "head_grouping", "matches_reference"]
    assert check_kv_cache_decode(prepended).failed == ["caches_grow"]
    assert check_kv_cache_decode(fails_on_an_empty_cache).failed == ["empty_cache"]


@pytest.mark.parametrize("fn, words", [
    (lambda q, k, v, kc, vc: 1 / 0, "raised ZeroDivisionError"),
    (lambda q, k, v, kc, vc: right(q, k, v, kc, vc)[0], "tuple (out, k_cache, v_cache)"),
    (lambda q, k, v, kc, vc: None, "tuple (out, k_cache, v_cache)"),
    (lambda q, k, v, kc, vc: (q[..., :1, :, :],) + right(q, k, v, kc, vc)[1:],
     "expected shape"),
    (lambda q, k, v, kc, vc: (q.tolist(),) + right(q, k, v, kc, vc)[1:],
     "expected a NumPy array"),
    (lambda q, k, v, kc, vc: (q * np.nan,) + right(q, k, v, kc, vc)[1:], "NaN"),
    (lambda q, k, v: (q, k, v), "other arguments"),
])
def test_bad_functions_get_one_sentence(fn, words):
    report = check_kv_cache_decode(fn)
    first = report["returns_output_and_caches"]
    assert first.status == "failed"
    assert words in first.detail, first.detail
    assert "Traceback" not in str(report) and "\n" not in first.detail


def test_torch_results_are_accepted():
    torch = pytest.importorskip("torch")

    def on_torch(*args):
        return tuple(torch.from_numpy(x) for x in right(*args))

    assert check_kv_cache_decode(on_torch).passed


def test_the_report_never_shows_the_right_output():
    runner = _Runner(right, 0)
    values = set()
    for start in (0, 10, 20, 30, 40, 50, 60):
        for offset, case in enumerate(_CASES, start=start):
            out = _reference(*runner.inputs(*case, offset))
            values.update(f"{x:.3g}" for x in out.ravel())
    for fn in (append_after_attending, modulo_grouping, causal_on_the_new_query,
               prepended, no_scale):
        report = check_kv_cache_decode(fn)
        text = str(report) + " ".join(r.detail for r in report.results)
        words = set(text.replace(",", " ").replace("(", " ").replace(")", " ").split())
        leaked = {w for w in words if w in values and len(w.strip("-0.")) > 2}
        assert not leaked, leaked


def test_properties_and_bad_arguments():
    assert list(PROPERTIES) == [r.name for r in check_kv_cache_decode(right).results]
    with pytest.raises(TypeError, match="fn: expected a callable"):
        check_kv_cache_decode("step")
    with pytest.raises((TypeError, ValueError), match="seed"):
        check_kv_cache_decode(right, seed=-1)
