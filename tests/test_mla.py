"""Multi-head latent attention: absorbed and not absorbed agree, decoding from the latent
cache equals the layer, every backend gives the same answer, bad input is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from conftest import TOL, to_backend, to_numpy


def params(backend, dtype, d_latent_q=12, seed=0):
    lib = "numpy" if backend == "numpy" else "torch"
    device = "cuda" if backend == "torch-cuda" else None
    return ac.init_mla(32, 4, d_latent_kv=10, d_latent_q=d_latent_q, d_rope=4, seed=seed,
                       dtype=dtype, backend=lib, device=device, rope_base=500.0)


def x_of(backend, dtype, shape=(2, 7, 32)):
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    return x, to_backend(x, backend)


def reference(p, x):
    """MLA written out token by token, head by head, with the scores formed explicitly."""
    n, h, d, r = x.shape[0], p.num_heads, p.d_head, p.d_rope
    c = x @ p.w_dkv
    c_q = x if p.w_dq is None else x @ p.w_dq
    k_r = ac.rope(x @ p.w_kr, base=p.rope_base)
    out = np.zeros((n, h * d))
    for i in range(h):
        q = np.concatenate([c_q @ p.w_uq[:, i * d:(i + 1) * d],
                            ac.rope(c_q @ p.w_qr[:, i * r:(i + 1) * r], base=p.rope_base)], 1)
        k = np.concatenate([c @ p.w_uk[:, i * d:(i + 1) * d], k_r], 1)
        v = c @ p.w_uv[:, i * d:(i + 1) * d]
        s = q @ k.T / np.sqrt(d + r)
        s[np.triu_indices(n, 1)] = -np.inf
        a = np.exp(s - s.max(1, keepdims=True))
        out[:, i * d:(i + 1) * d] = (a / a.sum(1, keepdims=True)) @ v
    return out @ p.w_o


@pytest.mark.parametrize("d_latent_q", [12, None])
def test_mla_matches_the_written_out_reference(d_latent_q):
    p = params("numpy", np.float64, d_latent_q)
    x, _ = x_of("numpy", np.float64, (7, 32))
    np.testing.assert_allclose(ac.mla(p, x), reference(p, x), atol=1e-12)


@pytest.mark.parametrize("absorbed", [False, True])
def test_every_backend_gives_the_numpy_answer(backend, dtype, absorbed):
    p, p_np = params(backend, dtype), params("numpy", dtype)
    x_np, x = x_of(backend, dtype)
    want = ac.mla(p_np, x_np)
    got = ac.mla(p, x, absorbed=absorbed)
    np.testing.assert_allclose(to_numpy(got), want, atol=TOL[dtype] * 10)


@pytest.mark.parametrize("causal", [True, False])
def test_absorption_gives_the_same_output(backend, causal):
    p = params(backend, np.float64)
    _, x = x_of(backend, np.float64)
    np.testing.assert_allclose(to_numpy(ac.mla(p, x, causal=causal, absorbed=True)),
                               to_numpy(ac.mla(p, x, causal=causal)), atol=1e-12)


def test_absorbed_weights_are_the_products_of_the_factors():
    p = params("numpy", np.float64)
    w_q, w_o = ac.absorbed_weights(p)
    d = p.d_head
    for h in range(p.num_heads):
        cols = slice(h * d, (h + 1) * d)
        np.testing.assert_allclose(w_q[h], p.w_uq[:, cols] @ p.w_uk[:, cols].T, atol=1e-14)
        np.testing.assert_allclose(w_o[h], p.w_uv[:, cols] @ p.w_o[cols], atol=1e-14)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7])
def test_decoding_from_the_latent_cache_equals_mla(backend, dtype, chunk_size):
    p = params(backend, dtype)
    x_np, x = x_of(backend, dtype)
    want = ac.mla(params("numpy", dtype), x_np)
    got = ac.mla_decode(p, x, chunk_size=chunk_size)
    np.testing.assert_allclose(to_numpy(got), want, atol=TOL[dtype] * 10)


def test_the_cache_holds_the_latent_and_the_rope_key_only():
    p = params("numpy", np.float64)
    x, _ = x_of("numpy", np.float64)
    cache = p.new_cache(7, (2,))
    first = ac.mla_decode(p, x[:, :3], cache=cache)
    second = ac.mla_decode(p, x[:, 3:], cache=cache, chunk_size=2)
    want = ac.mla(p, x)
    np.testing.assert_allclose(np.concatenate([first, second], 1), want, atol=1e-12)
    assert cache.keys.shape == (2, 1, 7, p.d_latent_kv + p.d_rope)
    np.testing.assert_allclose(cache.keys[:, 0, :, :p.d_latent_kv], x @ p.w_dkv, atol=1e-14)
    np.testing.assert_allclose(cache.keys[:, 0, :, p.d_latent_kv:],
                               ac.rope(x @ p.w_kr, base=p.rope_base), atol=1e-14)
    assert p.cache_width == 14


def test_mla_is_differentiable_on_torch():
    p = params("torch-cpu", np.float64)
    x = torch.randn(5, 32, dtype=torch.float64, requires_grad=True)
    ac.mla_decode(p, x, chunk_size=2).sum().backward()
    g = x.grad.clone()
    x.grad = None
    ac.mla(p, x).sum().backward()
    torch.testing.assert_close(g, x.grad)


@pytest.mark.parametrize("call, exc, words", [
    (lambda p: ac.mla(p, np.zeros((3, 31))), ValueError, "x: expected last axis d_model=32"),
    (lambda p: ac.mla(p, np.zeros(32)), ValueError, "x"),
    (lambda p: ac.mla(p, np.zeros((3, 32), np.float32)), TypeError, "dtype"),
    (lambda p: ac.mla(p, torch.zeros(3, 32, dtype=torch.float64)), TypeError, "x"),
    (lambda p: ac.mla(p, np.full((3, 32), np.nan)), ValueError, "x"),
    (lambda p: ac.mla(p, np.zeros((3, 32)), causal=1), TypeError, "causal"),
    (lambda p: ac.mla(p, np.zeros((3, 32)), absorbed="yes"), TypeError, "absorbed"),
    (lambda p: ac.mla("p", np.zeros((3, 32))), TypeError, "params: expected an MLAParams"),
    (lambda p: ac.mla_decode(p, np.zeros((3, 32)), chunk_size=0), ValueError, "chunk_size"),
    (lambda p: ac.mla_decode(p, np.zeros((3, 32)), cache=p.new_cache(2)), ValueError,
     "cache: cannot append 3"),
    (lambda p: ac.mla_decode(p, np.zeros((3, 32)), cache=p.new_cache(3, (2,))), ValueError,
     "cache: expected params.new_cache"),
    (lambda p: ac.init_mla(32, 4, d_latent_kv=8, d_rope=3), ValueError, "d_rope: expected an even"),
    (lambda p: ac.init_mla(30, 4, d_latent_kv=8, d_rope=4), ValueError, "num_heads"),
    (lambda p: ac.init_mla(32, 4, d_latent_kv=0, d_rope=4), ValueError, "d_latent_kv"),
    (lambda p: ac.init_mla(32, 4, d_latent_kv=8, d_rope=4, backend="jax"), ValueError,
     "backend"),
])
def test_bad_input_is_named(call, exc, words):
    with pytest.raises(exc, match=words):
        call(params("numpy", np.float64))


def test_params_check_their_shapes():
    p = params("numpy", np.float64)
    with pytest.raises(ValueError, match="w_uv: expected shape"):
        ac.MLAParams(p.w_dq, p.w_uq, p.w_qr, p.w_dkv, p.w_uk, p.w_uv[:, :-4], p.w_kr, p.w_o,
                     num_heads=4)
    with pytest.raises(TypeError, match="w_uk"):
        ac.MLAParams(p.w_dq, p.w_uq, p.w_qr, p.w_dkv, None, p.w_uv, p.w_kr, p.w_o,
                     num_heads=4)


def test_init_mla_is_the_same_on_every_backend(backend):
    a, b = params("numpy", np.float64), params(backend, np.float64)
    for name in ("w_dq", "w_uq", "w_qr", "w_dkv", "w_uk", "w_uv", "w_kr", "w_o"):
        np.testing.assert_array_equal(to_numpy(getattr(b, name)), getattr(a, name))
