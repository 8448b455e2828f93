"""attncore.layers: the normalisations and activations every model uses, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attncore as ac
from conftest import BACKENDS, to_backend, to_numpy

TOL = {np.float32: 2e-6, np.float64: 1e-12}


def rows(dtype, shape=(3, 5, 16), scale=3.0, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale + 1).astype(dtype)


def test_rms_norm_is_torchs(backend, dtype):
    x = rows(dtype)
    w = np.random.default_rng(1).standard_normal(16).astype(dtype)
    expected = F.rms_norm(torch.as_tensor(x, dtype=torch.float64), (16,),
                          torch.as_tensor(w, dtype=torch.float64), eps=1e-5).numpy()
    got = ac.rms_norm(to_backend(x, backend), to_backend(w, backend), eps=1e-5)
    assert str(got.dtype).endswith(np.dtype(dtype).name) and tuple(got.shape) == x.shape
    np.testing.assert_allclose(to_numpy(got), expected, rtol=TOL[dtype], atol=TOL[dtype])
    # no weight: unit gain; and the definition, x / sqrt(mean(x^2) + eps)
    plain = to_numpy(ac.rms_norm(to_backend(x, backend)))
    ms = (x.astype(np.float64) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(plain, x / np.sqrt(ms + 1e-6), rtol=TOL[dtype] * 4)


def test_rms_norm_is_layer_norm_without_centring(backend):
    x = rows(np.float64)
    centred = x - x.mean(-1, keepdims=True)
    a = ac.rms_norm(to_backend(centred, backend), eps=1e-5)
    b = ac.layer_norm(to_backend(x, backend), eps=1e-5)
    np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-12, atol=1e-12)


def test_silu_and_swiglu_are_torchs(backend, dtype):
    x = np.linspace(-750, 750, 3001).astype(dtype)       # exp(750) overflows float64
    got = ac.silu(to_backend(x, backend))
    expected = F.silu(torch.as_tensor(x, dtype=torch.float64)).numpy().astype(dtype)
    # (at x near the bottom of the range, where exp(-x) overflows, PyTorch's kernels give
    # 0 and attncore's NumPy the tiny value: they differ by a few thousand times the
    # smallest normal number)
    tiny = 1e4 * float(np.finfo(dtype).tiny)
    np.testing.assert_allclose(to_numpy(got), expected, rtol=TOL[dtype], atol=tiny)
    assert to_numpy(got)[0] == 0 and np.signbit(to_numpy(got)[0])
    rng = np.random.default_rng(2)
    h = rng.standard_normal((2, 4, 8)).astype(dtype)
    gate, up = (rng.standard_normal((8, 12)).astype(dtype) for _ in range(2))
    down = rng.standard_normal((12, 8)).astype(dtype)
    t = [torch.as_tensor(a, dtype=torch.float64) for a in (h, gate, up, down)]
    expected = ((F.silu(t[0] @ t[1]) * (t[0] @ t[2])) @ t[3]).numpy()
    got = ac.swiglu(*(to_backend(a, backend) for a in (h, gate, up, down)))
    np.testing.assert_allclose(to_numpy(got), expected, rtol=TOL[dtype] * 10,
                               atol=TOL[dtype] * 10)


def test_the_layers_are_differentiable_on_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 6, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    gate, up = (torch.randn(6, 5, dtype=torch.float64, generator=g, requires_grad=True)
                for _ in range(2))
    down = torch.randn(5, 6, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: ac.rms_norm(x, w), (x, w))
    assert torch.autograd.gradcheck(lambda x, w, b: ac.layer_norm(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(ac.silu, (x,))
    assert torch.autograd.gradcheck(ac.gelu, (x,))
    assert torch.autograd.gradcheck(ac.swiglu, (x, gate, up, down))


def test_float16_normalises_in_float32_as_torch_does():
    """Deviations above about 256 square to infinity in float16: computed there, the row
    came back as zeros. Statistics in float32, as PyTorch computes them, normalise it."""
    x = np.array([[300.0, -300.0, 10.0, 0.0], [1000.0, 1001.0, 999.0, 1000.5]],
                 dtype=np.float16)
    w = np.array([1.0, 2.0, 0.5, 1.0], dtype=np.float16)
    b = np.array([0.0, 1.0, 0.0, -1.0], dtype=np.float16)
    for got, expected in (
            (ac.layer_norm(x, w, b), F.layer_norm(torch.from_numpy(x), (4,),
                                                   torch.from_numpy(w), torch.from_numpy(b))),
            (ac.rms_norm(x, w, eps=1e-5), F.rms_norm(torch.from_numpy(x).float(), (4,),
                                                     torch.from_numpy(w).float(), 1e-5))):
        assert got.dtype == np.float16 and np.isfinite(got).all() and np.abs(got).max() > 1
        np.testing.assert_allclose(got.astype(np.float32), expected.float().numpy(),
                                   rtol=2e-3, atol=2e-3)


def test_float16_transformer_block_on_numpy_agrees_with_float64():
    params = ac.init_transformer_block(16, 4, 32, seed=3)
    x = np.random.default_rng(4).standard_normal((2, 5, 16)) * 200
    exact = ac.transformer_block(params, x, causal=True)
    half = ac.TransformerBlockParams(
        ac.MultiHeadParams(*(None if a is None else a.astype(np.float16) for a in (
            params.attn.w_q, params.attn.w_k, params.attn.w_v, params.attn.w_o,
            params.attn.b_q, params.attn.b_k, params.attn.b_v, params.attn.b_o)),
            num_heads=4),
        *(getattr(params, n).astype(np.float16) for n in (
            "ln1_weight", "ln1_bias", "ln2_weight", "ln2_bias", "w_ff1", "b_ff1", "w_ff2",
            "b_ff2")))
    got = ac.transformer_block(half, x.astype(np.float16), causal=True)
    # float16 keeps 11 bits: about 0.5 units of error on outputs of size 200-700
    assert np.abs(got.astype(np.float64) - exact).max() < 1.0
    assert np.abs(got.astype(np.float64) - exact).max() / np.abs(exact).max() < 2e-3


def test_layer_arguments_are_named(backend):
    x = to_backend(np.zeros((2, 4)), backend)
    with pytest.raises(ValueError, match=r"weight: expected shape \(4,\) to match x"):
        ac.rms_norm(x, to_backend(np.ones(3), backend))
    with pytest.raises(ValueError, match=r"bias: expected shape \(4,\)"):
        ac.layer_norm(x, None, to_backend(np.ones(5), backend))
    with pytest.raises(ValueError, match="eps: expected a positive finite number"):
        ac.rms_norm(x, eps=0.0)
    with pytest.raises(TypeError, match="x: expected a floating dtype"):
        ac.silu(to_backend(np.arange(3), backend))
    with pytest.raises(ValueError, match=r"w_down: expected shape \(d_ff, d_out\) = \(3, "):
        ac.swiglu(x, *(to_backend(a, backend) for a in (np.ones((4, 3)), np.ones((4, 3)),
                                                         np.ones((2, 4)))))
    with pytest.raises(ValueError, match=r"w_up: expected the shape of w_gate"):
        ac.swiglu(x, *(to_backend(a, backend) for a in (np.ones((4, 3)), np.ones((4, 2)),
                                                         np.ones((3, 4)))))
    # NumPy's own scalars are numbers like any other
    ac.rms_norm(x, eps=np.float32(1e-5))
    with pytest.raises(TypeError, match="cannot mix"):
        ac.rms_norm(np.zeros((2, 4)), torch.ones(4, dtype=torch.float64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pretrained_layer_norm_is_the_core_one_with_berts_names(backend):
    from attncore.pretrained import layer_norm as bert_layer_norm

    x = to_backend(rows(np.float32), backend)
    g = to_backend(np.linspace(0.5, 1.5, 16).astype(np.float32), backend)
    s = to_backend(np.linspace(-1, 1, 16).astype(np.float32), backend)
    a = bert_layer_norm(x, g, s)
    b = ac.layer_norm(x, g, s, eps=1e-12)
    assert np.array_equal(to_numpy(a), to_numpy(b))
    with pytest.raises(ValueError, match=r"gain: expected shape \(16,\)"):
        bert_layer_norm(x, g[:8], s)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_torch_gelu_is_the_exact_gelu_rounded_once(dtype):
    # float16 and bfloat16 were computed in their own precision, where 1 + erf(x/sqrt 2)
    # cancels: 44% off at x = -3 in bfloat16, 0 instead of -1.3e-4 at x = -4 in float16.
    x64 = torch.linspace(-8, 8, 4001, dtype=torch.float64)
    t = getattr(torch, dtype)
    x = x64.to(t)
    exact = (0.5 * x.double() * torch.erfc(-x.double() / np.sqrt(2)))
    got = ac.gelu(x).double()
    # Half precision: within one rounding of the exact value. float32: within the error
    # that rounding x itself causes, about x^2 units in the last place in the tail (the
    # relative condition number of erfc(-x/sqrt 2) grows like x^2); 1 + erf was off by
    # 9e6 units there (x = -5.6).
    cond = 1.0 if dtype != "float32" else 1.0 + x64 ** 2
    ulp = torch.finfo(t).eps * exact.abs() * cond + torch.finfo(t).tiny
    assert ((got - exact).abs() <= ulp).all(), float(((got - exact).abs() / ulp).max())
    assert ac.gelu(x).dtype == t
