"""Dropout on the attention weights: PyTorch's semantics, reproducible, p = 0 changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from conftest import BACKENDS, to_backend, to_numpy


def qkv(backend, dtype=np.float64, shape=(2, 3, 6, 4), seed=0):
    rng = np.random.default_rng(seed)
    return [to_backend(rng.standard_normal(shape).astype(dtype), backend) for _ in range(3)]


def generator(backend, seed):
    if backend == "numpy":
        return np.random.default_rng(seed)
    device = "cuda" if backend == "torch-cuda" else "cpu"
    return torch.Generator(device=device).manual_seed(seed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_dropout_changes_nothing_bit_for_bit(backend):
    q, k, v = qkv(backend)
    for fn in (ac.scaled_dot_product_attention, ac.tiled_attention):
        a = to_numpy(fn(q, k, v, causal=True))
        b = to_numpy(fn(q, k, v, causal=True, dropout_p=0.0, generator=generator(backend, 1)))
        assert np.array_equal(a, b)
    p = ac.init_multihead(8, 2, seed=0)
    x = np.random.default_rng(2).standard_normal((3, 5, 8))
    assert np.array_equal(ac.multi_head_attention(p, x), ac.multi_head_attention(
        p, x, dropout_p=0.0, generator=np.random.default_rng(0)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_zeroes_weights_scales_the_rest_and_output_uses_them(backend):
    q, k, v = qkv(backend, shape=(4, 8, 32, 8))
    _, w = ac.scaled_dot_product_attention(q, k, v, return_weights=True)
    out, wd = ac.scaled_dot_product_attention(q, k, v, return_weights=True, dropout_p=0.25,
                                              generator=generator(backend, 3))
    w, wd, out = to_numpy(w), to_numpy(wd), to_numpy(out)
    kept = wd != 0
    assert abs(kept.mean() - 0.75) < 0.02                   # zero with probability p
    np.testing.assert_allclose(wd[kept], w[kept] / 0.75, rtol=1e-12)   # the rest / (1 - p)
    np.testing.assert_allclose(out, wd @ to_numpy(v), rtol=1e-10, atol=1e-12)
    # the same generator seed gives the same draw; the output without weights agrees
    again = ac.scaled_dot_product_attention(q, k, v, dropout_p=0.25,
                                            generator=generator(backend, 3))
    np.testing.assert_allclose(to_numpy(again), out, rtol=1e-12, atol=1e-14)


def test_dropout_keeps_the_expectation():
    q, k, v = qkv("numpy", shape=(6, 4))
    ref = ac.scaled_dot_product_attention(q, k, v)
    rng = np.random.default_rng(0)
    mean = np.mean([ac.scaled_dot_product_attention(q, k, v, dropout_p=0.5, generator=rng)
                    for _ in range(4000)], axis=0)
    np.testing.assert_allclose(mean, ref, atol=0.05)


def test_dropout_is_differentiable_on_torch_and_works_with_gqa():
    q = torch.randn(2, 4, 5, 8, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(2, 2, 5, 8, dtype=torch.float64), torch.randn(2, 2, 5, 8,
                                                                    dtype=torch.float64)
    out = ac.scaled_dot_product_attention(q, k, v, enable_gqa=True, dropout_p=0.3,
                                          generator=torch.Generator().manual_seed(0))
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_multi_head_dropout_is_seeded():
    p = ac.init_multihead(8, 2, seed=0)
    x = np.random.default_rng(2).standard_normal((3, 5, 8))
    a = ac.multi_head_attention(p, x, dropout_p=0.4, generator=np.random.default_rng(5))
    b = ac.multi_head_attention(p, x, dropout_p=0.4, generator=np.random.default_rng(5))
    assert np.array_equal(a, b) and not np.allclose(a, ac.multi_head_attention(p, x))


@pytest.mark.parametrize("p, exc, words", [
    (1.0, ValueError, "dropout_p: expected a probability in [0, 1), got 1.0"),
    (-0.1, ValueError, "dropout_p: expected a probability in [0, 1)"),
    (float("nan"), ValueError, "dropout_p: expected a probability"),
    (True, TypeError, "dropout_p: expected a real number in [0, 1), got True"),
    ("0.1", TypeError, "dropout_p: expected a real number"),
])
def test_bad_dropout_p_is_refused_everywhere(p, exc, words):
    q, k, v = qkv("numpy")
    params = ac.init_multihead(4, 2)
    for call in (lambda: ac.scaled_dot_product_attention(q, k, v, dropout_p=p),
                 lambda: ac.tiled_attention(q, k, v, dropout_p=p),
                 lambda: ac.multi_head_attention(params, q[0, 0], dropout_p=p),
                 lambda: ac.dropout(q, p)):
        with pytest.raises(exc) as info:
            call()
        assert words in str(info.value)


def test_generator_must_match_the_library():
    q, k, v = qkv("numpy")
    with pytest.raises(TypeError, match="generator: expected a numpy.random.Generator"):
        ac.scaled_dot_product_attention(q, k, v, dropout_p=0.1, generator=torch.Generator())
    with pytest.raises(TypeError, match="generator: expected a numpy.random.Generator"):
        ac.scaled_dot_product_attention(q, k, v, dropout_p=0.1, generator=np.random.RandomState(0))
    t = [torch.as_tensor(x) for x in (q, k, v)]
    with pytest.raises(TypeError, match="generator: expected a torch.Generator"):
        ac.scaled_dot_product_attention(*t, dropout_p=0.1, generator=np.random.default_rng(0))


def test_tiled_attention_refuses_dropout_clearly():
    q, k, v = qkv("numpy")
    with pytest.raises(NotImplementedError, match="tiled_attention: dropout_p=0.1 is not "
                                                  "supported"):
        ac.tiled_attention(q, k, v, dropout_p=0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_generator_on_another_device_is_refused():
    q, k, v = (torch.randn(4, 8, device="cuda") for _ in range(3))
    with pytest.raises(ValueError, match="generator: expected a torch.Generator on the "
                                         "inputs' device cuda"):
        ac.scaled_dot_product_attention(q, k, v, dropout_p=0.1, generator=torch.Generator())
