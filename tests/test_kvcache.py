"""The KV cache and cached decoding: step by step equals full causal attention."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac
from conftest import TOL, to_backend, to_numpy


def layer(backend, dtype, n_kv_heads=4, d_model=16, num_heads=4, seed=0):
    device = "cuda" if backend == "torch-cuda" else None
    if backend == "numpy":
        p = ac.init_multihead(d_model, num_heads, n_kv_heads=n_kv_heads, seed=seed,
                              dtype=dtype)
    else:
        p = ac.init_multihead(d_model, num_heads, n_kv_heads=n_kv_heads, seed=seed,
                              dtype=dtype, backend="torch", device=device)
    rng = np.random.default_rng(seed + 1)          # non-zero biases
    for n in ("b_q", "b_k", "b_v", "b_o"):
        b = getattr(p, n)
        b[...] = to_backend(rng.standard_normal(tuple(b.shape)).astype(dtype), backend)
    return p


# --- the cache -------------------------------------------------------------------------------

def test_append_and_read(backend, dtype):
    device = "cuda" if backend == "torch-cuda" else None
    kind = "numpy" if backend == "numpy" else "torch"
    cache = ac.KVCache(5, (2, 3), d_k=4, d_v=2, dtype=dtype, backend=kind, device=device)
    assert len(cache) == 0 and tuple(cache.keys.shape) == (2, 3, 0, 4)
    rng = np.random.default_rng(0)
    k1, v1 = rng.standard_normal((2, 3, 2, 4)), rng.standard_normal((2, 3, 2, 2))
    k2, v2 = rng.standard_normal((2, 3, 1, 4)), rng.standard_normal((2, 3, 1, 2))
    cache.append(*(to_backend(x.astype(dtype), backend) for x in (k1, v1)))
    keys, values = cache.append(*(to_backend(x.astype(dtype), backend) for x in (k2, v2)))
    assert len(cache) == 3 and cache.capacity == 5
    np.testing.assert_array_equal(to_numpy(keys), np.concatenate([k1, k2], -2).astype(dtype))
    np.testing.assert_array_equal(to_numpy(values), np.concatenate([v1, v2], -2).astype(dtype))
    np.testing.assert_array_equal(to_numpy(cache.keys), to_numpy(keys))
    itemsize = np.dtype(dtype).itemsize
    assert cache.nbytes == 5 * 2 * 3 * (4 + 2) * itemsize
    cache.truncate(1)
    np.testing.assert_array_equal(to_numpy(cache.values), v1[..., :1, :].astype(dtype))
    cache.reset()
    assert len(cache) == 0


def test_keys_and_values_are_views_not_copies():
    cache = ac.KVCache(4, (1,), 2)
    keys, _ = cache.append(np.ones((1, 2, 2)), np.ones((1, 2, 2)))
    assert np.shares_memory(keys, cache._k)


def test_memory_formula_of_a_layer_cache():
    # 2 (keys and values) * n_kv_heads * d_head * tokens * bytes, per sequence
    for n_kv in (8, 2, 1):
        p = ac.init_multihead(64, 8, n_kv_heads=n_kv, dtype=np.float32)
        cache = ac.KVCache.for_layer(p, 100, (3,))
        assert cache.batch_shape == (3, n_kv) and cache.d_k == cache.d_v == 8
        assert cache.nbytes == 2 * n_kv * 8 * 100 * 4 * 3
    t = ac.init_multihead(8, 2, backend="torch", dtype=torch.float16)
    cache = ac.KVCache.for_layer(t, 10)
    assert cache.dtype == torch.float16 and cache.nbytes == 2 * 2 * 4 * 10 * 2


def test_overflow_is_a_clear_error_and_changes_nothing():
    cache = ac.KVCache(3, (2,), 4)
    cache.append(np.zeros((2, 2, 4)), np.zeros((2, 2, 4)))
    with pytest.raises(ValueError, match=re.escape(
            "k, v: cannot append 2 positions to a KVCache holding 2 of its capacity 3 (room "
            "for 1); make the cache with a larger capacity")):
        cache.append(np.ones((2, 2, 4)), np.ones((2, 2, 4)))
    assert len(cache) == 2 and not cache.keys.any()


@pytest.mark.parametrize("k, v, exc, words", [
    (np.zeros((3, 1, 4)), np.zeros((2, 1, 4)), ValueError,
     "k: expected shape batch_shape + (n, d_k) = (2, n, 4), got (3, 1, 4)"),
    (np.zeros((2, 1, 4)), np.zeros((2, 1, 5)), ValueError,
     "v: expected shape batch_shape + (n, d_v) = (2, n, 4), got (2, 1, 5)"),
    (np.zeros((1, 4)), np.zeros((1, 4)), ValueError, "k: expected shape batch_shape"),
    (np.zeros((2, 1, 4)), np.zeros((2, 2, 4)), ValueError,
     "k and v must hold the same number of positions n"),
    (np.zeros((2, 1, 4), np.float32), np.zeros((2, 1, 4)), TypeError,
     "k: expected the cache's dtype float64, got float32"),
    (torch.zeros(2, 1, 4, dtype=torch.float64), np.zeros((2, 1, 4)), TypeError,
     "cannot mix NumPy arrays and torch tensors"),
])
def test_append_checks_its_arguments(k, v, exc, words):
    cache = ac.KVCache(3, (2,), 4)
    with pytest.raises(exc, match=re.escape(words)):
        cache.append(k, v)
    assert len(cache) == 0


@pytest.mark.parametrize("args, kwargs, exc, words", [
    ((-1, (2,), 4), {}, ValueError, "capacity: expected a non-negative integer, got -1"),
    ((3.0, (2,), 4), {}, TypeError, "capacity: expected a non-negative integer, got 3.0"),
    ((3, [2], 4), {}, TypeError, "batch_shape: expected a tuple of non-negative integers"),
    ((3, (2,), 0), {}, ValueError, "d_k: expected a positive integer, got 0"),
    ((3, (2,), 4), {"backend": "jax"}, ValueError, "backend: expected 'numpy' or 'torch'"),
    ((3, (2,), 4), {"dtype": np.int32}, TypeError, "dtype: expected float16, float32 or"),
    ((3, (2,), 4), {"device": "cpu"}, ValueError, "device: expected None for backend='numpy'"),
])
def test_making_a_cache_checks_its_arguments(args, kwargs, exc, words):
    with pytest.raises(exc, match=re.escape(words)):
        ac.KVCache(*args, **kwargs)


def test_truncate_checks_its_argument():
    cache = ac.KVCache(3, (), 2)
    cache.append(np.zeros((1, 2)), np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"length: expected at most the 1 positions held, "
                                         r"got 2"):
        cache.truncate(2)


# --- the mask of new queries against the cache -----------------------------------------------

@pytest.mark.filterwarnings("ignore:Lower right causal bias")     # PyTorch's, for n_q > n_k
@pytest.mark.parametrize("n_q, n_k", [(1, 5), (3, 5), (5, 5), (6, 4), (0, 3), (2, 0)])
def test_bottom_right_mask_matches_pytorch(n_q, n_k):
    from torch.nn.attention.bias import causal_lower_right

    expected = causal_lower_right(n_q, n_k)._materialize(torch.device("cpu")).numpy()
    np.testing.assert_array_equal(ac.bottom_right_causal_mask(n_q, n_k), expected)
    np.testing.assert_array_equal(
        ac.bottom_right_causal_mask(n_q, n_k, like=torch.zeros(1)).numpy(), expected)
    if n_q == n_k:
        np.testing.assert_array_equal(expected, ac.causal_mask(n_q, n_k))


def test_one_new_query_sees_every_key_only_with_the_bottom_right_mask():
    assert ac.bottom_right_causal_mask(1, 6).all()
    assert ac.causal_mask(1, 6).sum() == 1                  # top-left: key 0 alone


# --- decoding equals full causal attention ---------------------------------------------------

@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("chunk_size", [1, 3, 9])
def test_decode_equals_causal_attention(backend, dtype, n_kv_heads, chunk_size):
    p = layer(backend, dtype, n_kv_heads)
    x = to_backend(np.random.default_rng(2).standard_normal((2, 9, 16)).astype(dtype), backend)
    full = ac.multi_head_attention(p, x, causal=True)
    got = ac.decode(p, x, chunk_size=chunk_size)
    assert tuple(got.shape) == (2, 9, 16) and got.dtype == full.dtype
    np.testing.assert_allclose(to_numpy(got), to_numpy(full), rtol=10 * TOL[dtype],
                               atol=10 * TOL[dtype])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 10), chunk=st.integers(1, 10), prefix=st.integers(0, 5),
       n_kv=st.sampled_from([1, 2, 4]), batch=st.sampled_from([(), (2,), (2, 1)]),
       seed=st.integers(0, 2**31 - 1))
def test_property_any_split_into_steps_gives_causal_attention(n, chunk, prefix, n_kv, batch,
                                                               seed):
    p = ac.init_multihead(8, 4, n_kv_heads=n_kv, seed=seed % 1000)
    x = np.random.default_rng(seed).standard_normal(batch + (prefix + n, 8))
    cache = ac.KVCache.for_layer(p, prefix + n, batch)
    first = ac.decode(p, x[..., :prefix, :], cache=cache)            # an earlier prompt
    rest = ac.decode(p, x[..., prefix:, :], chunk_size=chunk, cache=cache)
    got = np.concatenate([first, rest], axis=-2)
    np.testing.assert_allclose(got, ac.multi_head_attention(p, x, causal=True), rtol=1e-11,
                               atol=1e-11)
    assert len(cache) == prefix + n


def test_a_chunk_after_the_prompt_needs_the_bottom_right_mask():
    p = layer("numpy", np.float64)
    x = np.random.default_rng(0).standard_normal((7, 16))
    cache = ac.KVCache.for_layer(p, 7)
    ac.decode_step(p, x[:4], cache)
    right = ac.decode_step(p, x[4:], cache)                     # 3 new queries, 7 keys
    full = ac.multi_head_attention(p, x, causal=True)
    np.testing.assert_allclose(right, full[4:], rtol=1e-12, atol=1e-12)
    q = ac.split_heads(x[4:] @ p.w_q + p.b_q, 4)
    heads_wrong = ac.scaled_dot_product_attention(q, cache.keys, cache.values, causal=True)
    wrong = ac.merge_heads(heads_wrong) @ p.w_o + p.b_o
    assert np.abs(wrong - full[4:]).max() > 1e-2               # top-left: not the layer


def test_decode_step_checks_and_leaves_the_cache_alone_on_error():
    p = layer("numpy", np.float64, n_kv_heads=2)
    x = np.random.default_rng(0).standard_normal((2, 3, 16))
    cache = ac.KVCache.for_layer(p, 3, (2,))
    with pytest.raises(ValueError, match=re.escape(
            "cache: expected batch_shape x.shape[:-2] + (n_kv_heads,) = (3, 2) and d_k = d_v "
            "= d_head = 4, got batch_shape (2, 2), d_k=4, d_v=4")):
        ac.decode_step(p, x[:1].repeat(3, 0), cache)
    with pytest.raises(ValueError, match=r"cache: cannot append 4 positions to a KVCache "
                                         r"holding 0 of its capacity 3"):
        ac.decode(p, np.zeros((2, 4, 16)), cache=cache)
    with pytest.raises(TypeError, match=r"cache: expected a KVCache"):
        ac.decode_step(p, x, {})
    with pytest.raises(TypeError, match=r"cache: expected the dtype of x, float32, got a "
                                        r"cache of float64"):
        ac.decode_step(ac.init_multihead(16, 4, n_kv_heads=2, dtype=np.float32),
                       x.astype(np.float32), cache)
    with pytest.raises(TypeError, match=r"cannot mix NumPy arrays and torch tensors"):
        ac.decode_step(p, torch.from_numpy(x), cache)
    bad = x.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"x: expected finite values"):
        ac.decode_step(p, bad, cache)
    with pytest.raises(ValueError, match=r"x: expected at least one new position"):
        ac.decode_step(p, x[:, :0], cache)
    with pytest.raises(ValueError, match=r"params: expected a self-attention layer"):
        ac.decode_step(ac.init_multihead(16, 4, d_kv=6), x, cache)
    with pytest.raises(ValueError, match=r"chunk_size: expected a positive integer, got 0"):
        ac.decode(p, x, chunk_size=0)
    assert len(cache) == 0
    # an overflow found after the append takes the new positions out again
    ac.decode_step(p, x[:, :1], cache)
    cache._k[..., 0, :] = 1e300                          # a key no projection of x gives
    with pytest.raises(ValueError, match=r"scores: expected finite scores q @ cache.keys\^T"):
        ac.decode_step(p, x[:, 1:2] * 1e10, cache)
    assert len(cache) == 1


def test_decode_continues_a_given_cache_and_leaves_it_filled():
    p = layer("torch-cpu", np.float64, n_kv_heads=1)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((5, 16)))
    cache = ac.KVCache.for_layer(p, 8)
    ac.decode(p, x[:2], cache=cache)
    out = ac.decode(p, x[2:], cache=cache)
    torch.testing.assert_close(out, ac.multi_head_attention(p, x, causal=True)[2:])
    assert len(cache) == 5 and tuple(cache.keys.shape) == (1, 5, 4)
    assert tuple(ac.decode(p, x[:0]).shape) == (0, 16)


def test_one_step_uses_the_fused_kernel_without_a_mask(monkeypatch):
    import torch.nn.functional as F

    seen = []
    original = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        seen.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal", False),
                     kwargs.get("enable_gqa", False)))
        return original(q, k, v, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    p = layer("torch-cpu", np.float64, n_kv_heads=2)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 16)))
    ac.decode(p, x, chunk_size=2)
    # the prompt chunk is ordinary causal attention, the next needs the bottom-right mask
    assert seen == [(True, True, True), (False, False, True)]
    seen.clear()
    ac.decode(p, x)
    assert seen == [(True, False, True)] * 4


@pytest.mark.parametrize("n_kv_heads", [2, 1])
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5])
def test_decode_is_differentiable_for_every_chunk_size(n_kv_heads, chunk_size):
    # each step's append used to overwrite what autograd saved of the step before
    params = ac.init_multihead(8, 2, n_kv_heads=n_kv_heads, seed=1, backend="torch",
                               dtype=torch.float64)
    x0 = torch.from_numpy(np.random.default_rng(2).standard_normal((2, 5, 8)))
    grads = []
    for run in (lambda x: ac.decode(params, x, chunk_size=chunk_size),
                lambda x: ac.multi_head_attention(params, x, causal=True)):
        x = x0.clone().requires_grad_(True)
        leaves = [x, params.w_q, params.w_k, params.w_v, params.w_o]
        for w in leaves[1:]:
            w.requires_grad_(True)
        out = run(x)
        grads.append(torch.autograd.grad((out ** 2).sum(), leaves))
        for w in leaves[1:]:
            w.requires_grad_(False)
    for got, expected in zip(*grads):
        assert float((got - expected).abs().max()) < 1e-12
    x = x0.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: ac.decode(params, a, chunk_size=chunk_size),
                                    (x[:1, :3],))
