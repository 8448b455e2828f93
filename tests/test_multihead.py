import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attncore as ac
from conftest import TOL, to_backend, to_numpy


def params_on(backend, dtype, d_model=12, num_heads=3, d_kv=None, bias=True, seed=0):
    if backend == "numpy":
        return ac.init_multihead(d_model, num_heads, d_kv=d_kv, bias=bias, seed=seed, dtype=dtype)
    device = "cuda" if backend == "torch-cuda" else "cpu"
    return ac.init_multihead(d_model, num_heads, d_kv=d_kv, bias=bias, seed=seed, dtype=dtype,
                             backend="torch", device=device)


def random_biases(params, seed=1):
    """Nonzero biases, so that the tests notice a bias applied in the wrong place."""
    rng = np.random.default_rng(seed)
    for name in ("b_q", "b_k", "b_v", "b_o"):
        b = getattr(params, name)
        new = rng.standard_normal(tuple(b.shape)) * 0.5
        setattr(params, name, new.astype(b.dtype) if isinstance(b, np.ndarray)
                else torch.as_tensor(new, dtype=b.dtype, device=b.device))
    return params


def torch_mha_output(params, x_q, x_kv, allowed=None):
    """torch.nn.MultiheadAttention with attncore's weights copied in: the oracle."""
    mha = ac.params_to_torch(params).eval()
    xq = torch.as_tensor(x_q, dtype=mha.out_proj.weight.dtype)
    xkv = torch.as_tensor(x_kv, dtype=mha.out_proj.weight.dtype)
    # PyTorch's boolean attn_mask means the opposite of attncore's: True = NOT allowed.
    m = None if allowed is None else ~torch.as_tensor(allowed)
    with torch.no_grad():
        out, w = mha(xq, xkv, xkv, attn_mask=m, need_weights=True, average_attn_weights=False)
    return out.numpy(), w.numpy()


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_matches_torch_multihead_attention(backend, dtype, cross, masked):
    d_model, h, d_kv = 12, 3, (7 if cross else None)
    params = random_biases(params_on("numpy", dtype, d_model, h, d_kv=d_kv))
    rng = np.random.default_rng(2)
    x_q = rng.standard_normal((2, 5, d_model)).astype(dtype)
    x_kv = rng.standard_normal((2, 6, d_kv)).astype(dtype) if cross else x_q
    n_k = x_kv.shape[1]
    allowed = None
    if masked:
        allowed = rng.random((5, n_k)) < 0.6
        allowed[:, 0] = True
    ref_out, ref_w = torch_mha_output(params, x_q, x_kv, allowed)

    p = params if backend == "numpy" else _params_to(params, backend)
    out, w = ac.multi_head_attention(p, to_backend(x_q, backend),
                                     to_backend(x_kv, backend) if cross else None,
                                     mask=to_backend(allowed, backend), return_weights=True)
    np.testing.assert_allclose(to_numpy(out), ref_out, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(to_numpy(w), ref_w, rtol=TOL[dtype], atol=TOL[dtype])


def _params_to(params, backend):
    device = "cuda" if backend == "torch-cuda" else "cpu"
    fields = {n: (None if getattr(params, n) is None else
                  torch.as_tensor(getattr(params, n), device=device))
              for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    return ac.MultiHeadParams(num_heads=params.num_heads, **fields)


def test_causal_matches_torch(dtype):
    params = random_biases(params_on("numpy", dtype))
    x = np.random.default_rng(3).standard_normal((2, 6, 12)).astype(dtype)
    ref, _ = torch_mha_output(params, x, x, ac.causal_mask(6, 6))
    np.testing.assert_allclose(ac.multi_head_attention(params, x, causal=True), ref,
                               rtol=TOL[dtype], atol=TOL[dtype])


def test_weights_copied_from_torch_module():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    params = ac.params_from_torch(mha)
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    with torch.no_grad():
        ref, _ = mha(x, x, x)
    np.testing.assert_allclose(ac.multi_head_attention(params, x).detach().numpy(), ref.numpy(),
                               rtol=1e-10, atol=1e-10)
    # and back again: the round trip reproduces the module's packed weights exactly
    back = ac.params_to_torch(params)
    assert torch.equal(back.in_proj_weight, mha.in_proj_weight)
    assert torch.equal(back.out_proj.weight, mha.out_proj.weight)


def test_weights_copied_from_torch_module_with_kdim():
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(8, 4, batch_first=True, kdim=5, vdim=5,
                                      dtype=torch.float64)
    params = ac.params_from_torch(mha)
    assert params.d_kv == 5
    xq, xkv = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)
    with torch.no_grad():
        ref, _ = mha(xq, xkv, xkv)
    np.testing.assert_allclose(ac.multi_head_attention(params, xq, xkv).numpy(), ref.numpy(),
                               rtol=1e-10, atol=1e-10)


def test_params_from_torch_requires_batch_first():
    with pytest.raises(ValueError, match="batch_first=True"):
        ac.params_from_torch(torch.nn.MultiheadAttention(4, 2))


@pytest.mark.parametrize("bias", [True, False])
def test_loop_over_heads_equals_reshape(backend, dtype, bias):
    params = params_on(backend, dtype, bias=bias)
    if bias:
        params = random_biases(params)
    x = to_backend(np.random.default_rng(4).standard_normal((2, 5, 12)).astype(dtype), backend)
    a = ac.multi_head_attention(params, x, causal=True)
    b = ac.multi_head_attention_loop(params, x, causal=True)
    np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=TOL[dtype], atol=TOL[dtype])


def test_init_is_seeded_and_identical_across_backends():
    a = ac.init_multihead(16, 4, seed=7)
    b = ac.init_multihead(16, 4, seed=7, backend="torch", dtype=torch.float64)
    c = ac.init_multihead(16, 4, seed=8)
    assert np.array_equal(a.w_q, b.w_q.numpy()) and np.array_equal(a.w_o, b.w_o.numpy())
    assert not np.array_equal(a.w_q, c.w_q)
    assert a.num_parameters() == 4 * 16 * 16 + 4 * 16
    assert (a.d_model, a.d_head, a.d_kv, a.backend) == (16, 4, 16, "numpy")
    limit = np.sqrt(6 / 32)
    assert np.abs(a.w_q).max() <= limit


@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 6), st.integers(0, 2))
def test_split_then_merge_is_identity(num_heads, d_head, n, extra_batch):
    shape = (2,) * extra_batch + (n, num_heads * d_head)
    x = np.random.default_rng(n).standard_normal(shape)
    heads = ac.split_heads(x, num_heads)
    assert heads.shape == (2,) * extra_batch + (num_heads, n, d_head)
    # head h is column block h
    np.testing.assert_array_equal(heads[..., 0, :, :], x[..., :d_head])
    np.testing.assert_array_equal(ac.merge_heads(heads), x)
    t = torch.as_tensor(x)
    assert torch.equal(ac.merge_heads(ac.split_heads(t, num_heads)), t)
    np.testing.assert_array_equal(ac.split_heads(t, num_heads).numpy(), heads)


def test_num_heads_must_divide_d_model():
    with pytest.raises(ValueError, match=r"num_heads: expected a divisor of d_model=12, got 5"):
        ac.init_multihead(12, 5)
    with pytest.raises(ValueError, match=r"num_heads: expected a divisor of d_model=12, got 5"):
        ac.split_heads(np.zeros((3, 12)), 5)
    with pytest.raises(ValueError, match=r"num_heads: expected a positive integer, got 0"):
        ac.init_multihead(12, 0)
    p = ac.init_multihead(12, 3)
    with pytest.raises(ValueError, match=r"num_heads: expected a divisor of d_model=12, got 5"):
        ac.MultiHeadParams(p.w_q, p.w_k, p.w_v, p.w_o, p.b_q, p.b_k, p.b_v, p.b_o, num_heads=5)


def test_bad_params_and_inputs_are_named():
    p = ac.init_multihead(12, 3)
    with pytest.raises(ValueError, match=r"w_o: expected shape \(12, 12\).*got \(12, 6\)"):
        ac.MultiHeadParams(p.w_q, p.w_k, p.w_v, p.w_o[:, :6], p.b_q, p.b_k, p.b_v, p.b_o, 3)
    with pytest.raises(ValueError, match=r"expected all four biases or none"):
        ac.MultiHeadParams(p.w_q, p.w_k, p.w_v, p.w_o, p.b_q, None, p.b_v, p.b_o, 3)
    with pytest.raises(ValueError, match=r"x_q: expected last axis d_model=12, got shape \(4, 10\)"):
        ac.multi_head_attention(p, np.zeros((4, 10)))
    with pytest.raises(ValueError, match=r"x_kv: expected last axis d_kv=12"):
        ac.multi_head_attention(p, np.zeros((4, 12)), np.zeros((4, 7)))
    with pytest.raises(TypeError, match=r"cannot mix NumPy arrays and torch tensors"):
        ac.multi_head_attention(p, torch.zeros(4, 12, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"expected one floating dtype.*x_q is float32"):
        ac.multi_head_attention(p, np.zeros((4, 12), np.float32))
    with pytest.raises(ValueError, match=r"mask: expected a shape broadcastable"):
        ac.multi_head_attention(p, np.zeros((4, 12)), mask=np.ones((4, 5), bool))
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., num_heads, n, d_head\)"):
        ac.merge_heads(np.zeros((4, 12)))


@pytest.mark.parametrize("kw,msg", [({"add_bias_kv": True}, "add_bias_kv=True"),
                                    ({"add_zero_attn": True}, "add_zero_attn=True"),
                                    ({"kdim": 6, "vdim": 5}, "kdim=6, vdim=5")])
def test_params_from_torch_refuses_what_it_cannot_hold(kw, msg):
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, **kw)
    with pytest.raises(ValueError, match=msg):
        ac.params_from_torch(mha)
