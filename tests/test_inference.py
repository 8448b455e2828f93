"""attncore.lab.inference: the KV cache of published models, arithmetic intensity, and the
one-query-against-many timing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attncore import KVCache, init_multihead
from attncore.lab.inference import (
    PUBLISHED,
    ModelShape,
    attention_intensity,
    kv_cache_bytes,
    queries_per_read,
    weight_bytes,
)

TINY = ModelShape("tiny", layers=3, d_model=64, heads=8, kv_heads=2, d_head=8,
                  parameters=1e6, context=32)


def test_published_shapes_are_consistent():
    assert set(PUBLISHED) == {"GPT-3 175B", "LLaMA-2 7B", "LLaMA-2 70B", "Mistral 7B"}
    for name, m in PUBLISHED.items():
        assert m.name == name
        assert m.heads * m.d_head == m.d_model
        assert m.heads % m.kv_heads == 0
    # the ones that share key/value heads, and the one with a window
    assert [m.name for m in PUBLISHED.values() if m.kv_heads < m.heads] == [
        "LLaMA-2 70B", "Mistral 7B"]
    assert [m.name for m in PUBLISHED.values() if m.window] == ["Mistral 7B"]


@pytest.mark.parametrize("field, value", [
    ("layers", 0), ("d_model", -1), ("heads", True), ("kv_heads", 2.0), ("context", None),
])
def test_model_shape_rejects_bad_sizes(field, value):
    kwargs = dict(name="m", layers=2, d_model=8, heads=4, kv_heads=2, d_head=2,
                  parameters=1.0, context=8)
    with pytest.raises(ValueError, match=field):
        ModelShape(**{**kwargs, field: value})


def test_model_shape_needs_kv_heads_dividing_heads():
    with pytest.raises(ValueError, match="kv_heads: expected a divisor of heads=4, got 3"):
        ModelShape("m", layers=2, d_model=8, heads=4, kv_heads=3, d_head=2, parameters=1.0,
                   context=8)


def test_kv_cache_bytes_is_the_formula():
    for m in PUBLISHED.values():
        per_token = 2 * m.layers * m.kv_heads * m.d_head * 2
        assert kv_cache_bytes(m, 1) == per_token
        assert kv_cache_bytes(m, 100, batch=3) == 300 * per_token
        assert kv_cache_bytes(m, 10, bytes_per_number=4) == 20 * per_token
        assert kv_cache_bytes(m, 10, kv_heads=m.heads) == 10 * per_token * m.heads // m.kv_heads
        assert kv_cache_bytes(m, 0) == 0
    # the published numbers the chapter quotes
    assert kv_cache_bytes(PUBLISHED["GPT-3 175B"], 2048) == 9 * 2**30
    assert kv_cache_bytes(PUBLISHED["LLaMA-2 70B"], 4096, batch=16) == 20 * 2**30


def test_kv_cache_bytes_caps_a_sliding_window():
    mistral = PUBLISHED["Mistral 7B"]
    assert mistral.window == 4096
    assert kv_cache_bytes(mistral, 4095) < kv_cache_bytes(mistral, 4096)
    assert kv_cache_bytes(mistral, 4096) == kv_cache_bytes(mistral, 8192) \
        == kv_cache_bytes(mistral, 10**6)


@pytest.mark.parametrize("dtype, size", [(np.float32, 4), (np.float64, 8)])
def test_kv_cache_bytes_equals_the_caches_attncore_allocates(dtype, size):
    layer = init_multihead(TINY.d_model, TINY.heads, n_kv_heads=TINY.kv_heads, dtype=dtype)
    batch = 5
    caches = [KVCache.for_layer(layer, TINY.context, (batch,)) for _ in range(TINY.layers)]
    assert sum(c.nbytes for c in caches) == kv_cache_bytes(
        TINY, TINY.context, batch=batch, bytes_per_number=size)


@pytest.mark.parametrize("kwargs, match", [
    (dict(tokens=-1), "tokens"),
    (dict(tokens=1.5), "tokens"),
    (dict(tokens=True), "tokens"),
    (dict(tokens=4, batch=0), "batch"),
    (dict(tokens=4, bytes_per_number=0), "bytes_per_number"),
    (dict(tokens=4, kv_heads=0), "kv_heads"),
    (dict(tokens=4, kv_heads=3), "kv_heads: expected a divisor of heads=8, got 3"),
])
def test_kv_cache_bytes_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kv_cache_bytes(TINY, **kwargs)


def test_weight_bytes():
    assert weight_bytes(PUBLISHED["GPT-3 175B"]) == 350e9
    assert weight_bytes(TINY, bytes_per_number=4) == 4e6
    with pytest.raises(ValueError, match="bytes_per_number"):
        weight_bytes(TINY, bytes_per_number=0)


def test_attention_intensity_counts_flops_and_bytes():
    # 4 m n d H flops over (2 n d H_kv + 2 m d H) numbers of b bytes
    i = attention_intensity(8, 2, n_keys=100, d_head=16, queries=3, bytes_per_number=2)
    assert i == pytest.approx(4 * 3 * 100 * 16 * 8 / ((2 * 100 * 16 * 2 + 2 * 3 * 16 * 8) * 2))
    for heads, kv_heads, m in ((32, 32, 1), (64, 8, 1), (32, 8, 4)):
        limit = 2 * m / 2 * heads / kv_heads
        long = attention_intensity(heads, kv_heads, n_keys=10**9, d_head=128, queries=m)
        assert long == pytest.approx(limit, rel=1e-6)
        assert attention_intensity(heads, kv_heads, n_keys=4096, d_head=128,
                                   queries=m) < limit          # the queries' bytes count
    assert attention_intensity(4, 4, n_keys=0, d_head=8) == 0.0


@pytest.mark.parametrize("args, kwargs, match", [
    ((8, 3), dict(n_keys=4, d_head=8), "kv_heads: expected a divisor of heads=8"),
    ((0, 1), dict(n_keys=4, d_head=8), "heads"),
    ((8, 2), dict(n_keys=-1, d_head=8), "n_keys"),
    ((8, 2), dict(n_keys=4, d_head=0), "d_head"),
    ((8, 2), dict(n_keys=4, d_head=8, queries=0), "queries"),
    ((8, 2), dict(n_keys=4, d_head=8, bytes_per_number=True), "bytes_per_number"),
])
def test_attention_intensity_rejects_bad_arguments(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention_intensity(*args, **kwargs)


def test_queries_per_read_reports_median_ratios_with_quartiles(torch_threads):
    torch = pytest.importorskip("torch")
    threads = torch_threads
    rows = queries_per_read(n_keys=256, d_head=8, queries=(2, 8), rounds=9)
    assert torch.get_num_threads() == threads
    assert [r["queries"] for r in rows] == [2, 8]
    for r in rows:
        assert set(r) == {"queries", "ratio", "ratio_q1", "ratio_q3", "per_query"}
        assert 0 < r["ratio_q1"] <= r["ratio"] <= r["ratio_q3"]
        assert math.isclose(r["per_query"], r["ratio"] / r["queries"])


@pytest.mark.parametrize("kwargs, match", [
    (dict(rounds=8), "rounds"),
    (dict(queries=(0,)), "queries"),
    (dict(n_keys=0), "n_keys"),
    (dict(d_head=-2), "d_head"),
])
def test_queries_per_read_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        queries_per_read(**{"n_keys": 16, "d_head": 4, **kwargs})
