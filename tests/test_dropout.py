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


def tiled_dropout_reference(q, k, v, p, gen, **kw):
    """Attention with the factor tiled attention draws from the same generator state,
    applied to the reference's weights: ``(A * Z) V``."""
    from attncore.dropout import Dropout, block_dropout, block_keep

    drop = block_dropout(Dropout(p, gen), q)
    *batch, n_q, _ = q.shape
    n_k = k.shape[-2]
    z = block_keep(drop, q.detach() if isinstance(q, torch.Tensor) else q, tuple(batch),
                   n_q, n_k, 0, 0, n_k)
    w = ac.scaled_dot_product_attention(q, k, v, return_weights=True, **kw)[1]
    return (w * z) @ v, z


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size", [3, 5, 64])
def test_tiled_dropout_drops_the_same_weights_block_by_block(backend, causal, block_size):
    q, k, v = qkv(backend, shape=(2, 3, 11, 4))
    out = ac.tiled_attention(q, k, v, causal=causal, block_size=block_size, dropout_p=0.3,
                             generator=generator(backend, 7))
    ref, z = tiled_dropout_reference(q, k, v, 0.3, generator(backend, 7), causal=causal)
    np.testing.assert_allclose(to_numpy(out), to_numpy(ref), rtol=1e-12, atol=1e-12)
    kept = to_numpy(z) > 0
    assert 0.5 < kept.mean() < 0.9                    # about 1 - p of the weights survive
    again = ac.tiled_attention(q, k, v, causal=causal, block_size=block_size, dropout_p=0.3,
                               generator=generator(backend, 7))
    assert np.array_equal(to_numpy(out), to_numpy(again))          # reproducible
    other = ac.tiled_attention(q, k, v, causal=causal, block_size=block_size, dropout_p=0.3,
                               generator=generator(backend, 8))
    assert not np.allclose(to_numpy(out), to_numpy(other))         # another seed, another mask


def test_tiled_dropout_keeps_each_weight_with_probability_one_minus_p():
    from attncore.dropout import BlockDropout, block_keep

    z = block_keep(BlockDropout(0.25, 12345), np.zeros(1), (4, 8), 64, 64, 0, 0, 64)
    assert set(np.unique(z)) == {0.0, 1 / 0.75}
    kept = (z > 0).mean()                              # 131,072 draws: sd about 0.0012
    assert abs(kept - 0.75) < 0.006, kept
    # rows and columns are not correlated: neighbouring weights agree as often as chance
    agree = ((z[..., 1:] > 0) == (z[..., :-1] > 0)).mean()
    assert abs(agree - (0.75**2 + 0.25**2)) < 0.01, agree


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_dropout_backward_equals_autograd_of_the_same_mask(causal):
    q, k, v = (x.requires_grad_() for x in qkv("torch", shape=(2, 2, 9, 4)))
    out = ac.tiled_attention(q, k, v, causal=causal, block_size=4, dropout_p=0.25,
                             generator=torch.Generator().manual_seed(3))
    ref, _ = tiled_dropout_reference(q, k, v, 0.25, torch.Generator().manual_seed(3),
                                     causal=causal)
    go = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), go)
    want = torch.autograd.grad(ref, (q, k, v), go)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # the differentiable backward (create_graph=True) drops the same weights
    again = ac.tiled_attention(q, k, v, causal=causal, block_size=4, dropout_p=0.25,
                               generator=torch.Generator().manual_seed(3))
    second = torch.autograd.grad(again, (q, k, v), go, create_graph=True)
    for a, b in zip(second, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_generator_on_another_device_is_refused():
    q, k, v = (torch.randn(4, 8, device="cuda") for _ in range(3))
    with pytest.raises(ValueError, match="generator: expected a torch.Generator on the "
                                         "inputs' device cuda"):
        ac.scaled_dot_product_attention(q, k, v, dropout_p=0.1, generator=torch.Generator())
