"""RoPE meets the KV cache: decode with rope_base equals RoPE attention on the whole
sequence, on every backend, and the cache tracks the positions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from conftest import TOL, to_backend, to_numpy


def layer(backend, dtype, n_kv_heads=2, seed=0):
    lib = "numpy" if backend == "numpy" else "torch"
    device = "cuda" if backend == "torch-cuda" else None
    return ac.init_multihead(16, 4, n_kv_heads=n_kv_heads, seed=seed, dtype=dtype,
                             backend=lib, device=device)


def inputs(backend, dtype, shape=(2, 9, 16), seed=1):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return x, to_backend(x, backend)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("chunk_size", [1, 2, 4, 9])
def test_chunked_rope_decoding_equals_rope_attention(backend, dtype, n_kv_heads, chunk_size):
    p = layer(backend, dtype, n_kv_heads)
    p_np = layer("numpy", dtype, n_kv_heads)
    x_np, x = inputs(backend, dtype)
    want = ac.rope_multi_head_attention(p_np, x_np, causal=True, base=500.0)
    got = ac.decode(p, x, chunk_size=chunk_size, rope_base=500.0)
    np.testing.assert_allclose(to_numpy(got), want, atol=TOL[dtype] * 10)


def test_continuing_a_cache_continues_the_positions(backend):
    p = layer(backend, np.float64)
    x_np, x = inputs(backend, np.float64)
    want = ac.rope_multi_head_attention(layer("numpy", np.float64), x_np, causal=True,
                                        base=100.0)
    cache = ac.KVCache.for_layer(p, 9, (2,))
    first = ac.decode(p, x[:, :4], cache=cache, rope_base=100.0)
    assert cache.length == 4                     # the next token stands at position 4
    second = ac.decode(p, x[:, 4:], cache=cache, rope_base=100.0, chunk_size=2)
    np.testing.assert_allclose(to_numpy(first), want[:, :4], atol=1e-12)
    np.testing.assert_allclose(to_numpy(second), want[:, 4:], atol=1e-12)


def test_truncate_rolls_the_positions_back():
    p = layer("numpy", np.float64)
    x, _ = inputs("numpy", np.float64)
    want = ac.rope_multi_head_attention(p, x, causal=True, base=100.0)
    cache = ac.KVCache.for_layer(p, 9, (2,))
    wrong = np.random.default_rng(7).standard_normal((2, 3, 16))
    ac.decode(p, x[:, :5], cache=cache, rope_base=100.0)
    ac.decode(p, wrong, cache=cache, rope_base=100.0)       # drafted, then rejected
    cache.truncate(5)
    got = ac.decode(p, x[:, 5:], cache=cache, rope_base=100.0)
    np.testing.assert_allclose(got, want[:, 5:], atol=1e-12)


def test_cached_keys_are_the_keys_rotated_at_their_own_positions():
    p = layer("numpy", np.float64)
    x, _ = inputs("numpy", np.float64)
    cache = ac.KVCache.for_layer(p, 9, (2,))
    ac.decode(p, x, cache=cache, rope_base=100.0, chunk_size=3)
    k = ac.split_heads(x @ p.w_k + p.b_k, p.n_kv_heads)
    np.testing.assert_allclose(cache.keys, ac.rope(k, base=100.0), atol=1e-13)


def test_without_rope_base_nothing_changes():
    p = layer("numpy", np.float64)
    x, _ = inputs("numpy", np.float64)
    np.testing.assert_allclose(ac.decode(p, x, chunk_size=2),
                               ac.multi_head_attention(p, x, causal=True), atol=1e-12)


def test_a_cache_refuses_another_rope_base_until_emptied():
    p = layer("numpy", np.float64)
    x, _ = inputs("numpy", np.float64)
    cache = ac.KVCache.for_layer(p, 9, (2,))
    ac.decode(p, x[:, :2], cache=cache, rope_base=100.0)
    with pytest.raises(ValueError, match="rope_base=100.0, got rope_base=None"):
        ac.decode_step(p, x[:, 2:3], cache)
    with pytest.raises(ValueError, match="rope_base"):
        ac.decode_step(p, x[:, 2:3], cache, rope_base=10000.0)
    assert cache.length == 2
    cache.reset()
    ac.decode_step(p, x[:, :1], cache)                       # empty: any choice again
    assert cache.rope_base is None


@pytest.mark.parametrize("base, exc, words", [
    (1.0, ValueError, "base: expected a finite number greater than 1"),
    (float("nan"), ValueError, "base"),
    ("10000", ValueError, "base"),
])
def test_rope_base_is_checked(base, exc, words):
    p = layer("numpy", np.float64)
    x, _ = inputs("numpy", np.float64)
    with pytest.raises(exc, match=words):
        ac.decode(p, x, rope_base=base)


def test_odd_head_width_is_refused_for_rope():
    p = ac.init_multihead(6, 2)                  # d_head = 3
    with pytest.raises(ValueError, match="even head width"):
        ac.decode(p, np.zeros((2, 6)), rope_base=100.0)


def test_left_padded_batch_positions():
    # each sequence's tokens at 0, 1, ...: positions = index - padding, with the padding
    # masked out; equals each sequence alone
    p = layer("numpy", np.float64)
    rng = np.random.default_rng(3)
    lengths, n = [3, 5], 5
    x = rng.standard_normal((2, n, 16))
    pad = np.array([n - m for m in lengths])
    positions = np.maximum(np.arange(n)[None, :] - pad[:, None], 0)
    keep = np.arange(n)[None, :] >= pad[:, None]                      # (2, n)
    mask = keep[:, None, None, :] & np.tril(np.ones((n, n), bool))
    out = ac.rope_multi_head_attention(p, x, positions, mask=mask[:, 0], base=100.0)
    for b, m in enumerate(lengths):
        alone = ac.rope_multi_head_attention(p, x[b, n - m:], causal=True, base=100.0)
        np.testing.assert_allclose(out[b, n - m:], alone, atol=1e-12)


def test_paged_cache_gives_exactly_the_contiguous_result(backend):
    p = layer(backend, np.float64)
    _, x = inputs(backend, np.float64, shape=(11, 16))
    want = ac.decode(p, x, chunk_size=3, rope_base=100.0)
    device = "cuda" if backend == "torch-cuda" else None
    pool = ac.BlockPool(8, 4, (2,), 4, dtype=np.float64,
                        backend="numpy" if backend == "numpy" else "torch", device=device)
    got = ac.decode(p, x, chunk_size=3, cache=ac.PagedKVCache(pool), rope_base=100.0)
    assert (to_numpy(got) == to_numpy(want)).all()


def test_torch_rope_decode_is_differentiable():
    p = layer("torch-cpu", np.float64)
    x = torch.randn(7, 16, dtype=torch.float64, requires_grad=True)
    out = ac.decode(p, x, chunk_size=2, rope_base=100.0)
    out.sum().backward()
    g_decode = x.grad.clone()
    x.grad = None
    ac.rope_multi_head_attention(p, x, causal=True, base=100.0).sum().backward()
    torch.testing.assert_close(g_decode, x.grad)
