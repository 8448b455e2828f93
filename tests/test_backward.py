"""The backward pass by hand: attention_backward (the weights formed) and
tiled_attention_backward (block by block, from the output and the row log-sum-exp) give the
gradients of torch autograd, on both backends, with masks, causal attention and rows that
see no key; with the checks and the memory bound of the rest of attncore."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from conftest import to_backend, to_numpy
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac
from attncore.lab.autograd_reference import attention_autograd
from attncore.lab.profiling import peak_memory_bytes

# Gradients agree with a float64 autograd reference to these (absolute, for O(1) inputs).
TOL = {np.float32: 2e-5, np.float64: 1e-10}


def qkv_g(rng, batch, n_q, n_k, d_k, d_v, dtype=np.float64):
    """q, k, v and a gradient d_out for the output."""
    return (rng.standard_normal(batch + (n_q, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_v)).astype(dtype),
            rng.standard_normal(batch + (n_q, d_v)).astype(dtype))


def autograd_reference(q, k, v, g, **kw):
    """dq, dk, dv by torch autograd through attention in plain torch (float64)."""
    return list(attention_autograd(q, k, v, g, **kw)[-3:])


def both_backwards(q, k, v, g, *, block_size, **kw):
    """(reference, tiled) gradients, the tiled ones fed by tiled_attention's out and lse."""
    ref = ac.attention_backward(q, k, v, g, **kw)
    out, lse = ac.tiled_attention(q, k, v, block_size=block_size, return_lse=True, **kw)
    tiled = ac.tiled_attention_backward(q, k, v, g, out=out, lse=lse,
                                        block_size=block_size, **kw)
    return ref, tiled


def on(backend, *arrays):
    return tuple(to_backend(x, backend) for x in arrays)


def max_err(a, b):
    a, b = to_numpy(a), to_numpy(b)
    return float(np.abs(a.astype(np.float64) - b).max()) if a.size else 0.0


def assert_gradients(got, want, tol, what=""):
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert a.shape == b.shape, (what, name)
        assert max_err(a, b) < tol, (what, name, max_err(a, b))


# --- the reference itself: torch autograd, every intermediate --------------------------------

@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"scale": 0.3, "mask": "random"}])
def test_autograd_reference_is_torchs_own_attention(kw):
    # Where every row has a key, the lab's plain-torch attention has the gradients of
    # PyTorch's scaled_dot_product_attention (math kernel, float64).
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    q, k, v, g = qkv_g(rng, (2, 2), 6, 7, 3, 4)
    kw = dict(kw)
    if kw.get("mask") == "random":
        kw["mask"] = rng.random((2, 2, 6, 7)) > 0.4
        kw["mask"][..., 0] = True
    ref = attention_autograd(q, k, v, g, **kw)
    leaves = [torch.from_numpy(x).requires_grad_(True) for x in (q, k, v)]
    m = None if "mask" not in kw else torch.from_numpy(kw["mask"])
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=kw.get("causal",
                                         False), scale=kw.get("scale"))
    out.backward(torch.from_numpy(g))
    assert max_err(ref.out, out.detach()) < 1e-12
    assert_gradients(ref[-3:], [x.grad.numpy() for x in leaves], 1e-12)
    # the intermediates: dA = dO V^T, and each row of dS sums to 0
    assert max_err(ref.d_a, g @ v.swapaxes(-1, -2)) < 1e-12
    assert np.abs(ref.d_s.sum(-1)).max() < 1e-12


def test_autograd_reference_gives_empty_rows_zeros():
    rng = np.random.default_rng(1)
    q, k, v, g = qkv_g(rng, (), 4, 5, 3, 2)
    mask = np.ones((4, 5), dtype=bool)
    mask[2] = False
    ref = attention_autograd(torch.from_numpy(q), k, v, g, mask=torch.from_numpy(mask))
    assert not ref.a[2].any() and not ref.out[2].any() and not ref.d_q[2].any()
    assert not ref.d_s[~mask].any() and all(np.isfinite(x).all() for x in ref)


# --- the gradients of autograd -------------------------------------------------------------

def _case(name, rng, batch, n_q, n_k):
    """Keyword arguments of one masking case; 'mask' cases include rows with no key."""
    if name == "plain":
        return {}
    if name == "causal":
        return {"causal": True}
    if name == "scale":
        return {"scale": -0.8, "causal": True}
    if name == "padding":
        lengths = np.array([n_k, n_k // 2])[:batch[0]]
        return {"mask": (np.arange(n_k) < lengths[:, None])[:, None, None, :]}
    mask = rng.random(batch + (n_q, n_k)) > 0.4
    mask[0, 1, 3] = False                       # a query that sees no key at all
    mask[-1, -1, :] = False
    return {"mask": mask, "causal": name == "mask+causal"}


@pytest.mark.parametrize("block_size", [3, 4, 5, 7, 64])      # n_k = 12: 3, 4 divide it
@pytest.mark.parametrize("case", ["plain", "causal", "mask", "mask+causal", "padding",
                                  "scale"])
def test_gradients_equal_autograd(backend, dtype, case, block_size):
    rng = np.random.default_rng(block_size)
    batch = (2, 3)
    q, k, v, g = qkv_g(rng, batch, 10, 12, 5, 4, dtype)
    kw = _case(case, rng, batch, 10, 12)
    want = autograd_reference(q, k, v, g, **kw)
    kw_b = {n: (to_backend(x, backend) if isinstance(x, np.ndarray) else x)
            for n, x in kw.items()}
    ref, tiled = both_backwards(*on(backend, q, k, v, g), block_size=block_size, **kw_b)
    for grads in (ref, tiled):
        for x, like in zip(grads, (q, k, v)):
            assert type(x) is type(to_backend(like, backend)) and x.dtype == \
                to_backend(like, backend).dtype
        assert_gradients(grads, want, TOL[dtype], case)


def test_more_queries_than_keys_and_the_reverse(backend):
    rng = np.random.default_rng(1)
    for n_q, n_k in ((17, 5), (5, 17)):
        q, k, v, g = qkv_g(rng, (2,), n_q, n_k, 3, 2)
        want = autograd_reference(q, k, v, g, causal=True)
        for grads in both_backwards(*on(backend, q, k, v, g), block_size=4, causal=True):
            assert_gradients(grads, want, 1e-10)


@pytest.mark.parametrize("block_size", [1, 4, 32])
def test_rows_with_no_key_get_zeros_never_nan(backend, block_size):
    rng = np.random.default_rng(3)
    q, k, v, g = qkv_g(rng, (2,), 12, 20, 4, 3)
    mask = rng.random((2, 12, 20)) > 0.5
    mask[0, 3] = False
    mask[1, [0, 11]] = False
    for grads in both_backwards(*on(backend, q, k, v, g, mask)[:4], block_size=block_size,
                                mask=to_backend(mask, backend)):
        dq, dk, dv = (to_numpy(x) for x in grads)
        assert all(np.isfinite(x).all() for x in (dq, dk, dv))
        assert np.all(dq[0, 3] == 0) and np.all(dq[1, [0, 11]] == 0)
    # What an empty row's d_out holds reaches nothing.
    g2 = g.copy()
    g2[0, 3] = 1e3
    g2[1, 0] = -7.0
    for a, b in zip(both_backwards(q, k, v, g, block_size=block_size, mask=mask),
                    both_backwards(q, k, v, g2, block_size=block_size, mask=mask)):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
    # Everything masked, or no key at all: zero gradients.
    for n_k, m in ((20, np.zeros((12, 20), dtype=bool)), (0, None)):
        q0, k0, v0, g0 = qkv_g(rng, (2,), 12, n_k, 4, 3)
        for grads in both_backwards(*on(backend, q0, k0, v0, g0), block_size=block_size,
                                    mask=to_backend(m, backend)):
            assert all(x.shape == y.shape and not to_numpy(x).any()
                       for x, y in zip(grads, (q0, k0, v0)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, np.float16])
def test_low_precision_is_computed_in_float32(dtype):
    rng = np.random.default_rng(5)
    q, k, v, g = qkv_g(rng, (2,), 9, 11, 8, 4)
    want = autograd_reference(q, k, v, g, causal=True)
    if dtype is np.float16:
        low = [x.astype(np.float16) for x in (q, k, v, g)]
    else:
        low = [torch.from_numpy(x).to(dtype) for x in (q, k, v, g)]
    out, lse = ac.tiled_attention(*low[:3], block_size=4, causal=True, return_lse=True)
    assert lse.dtype in (np.float32, torch.float32)
    for grads in (ac.attention_backward(*low, causal=True),
                  ac.tiled_attention_backward(*low, out=out, lse=lse, causal=True,
                                              block_size=4)):
        for x in grads:
            assert x.dtype == low[0].dtype
        assert_gradients([to_numpy(x.float() if isinstance(x, torch.Tensor) else x)
                          for x in grads], want, 5e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    rng = np.random.default_rng(2)
    q, k, v, g = qkv_g(rng, (2, 2), 40, 70, 16, 8)
    cpu = both_backwards(*on("torch-cpu", q, k, v, g), block_size=16, causal=True)
    cuda = both_backwards(*on("torch-cuda", q, k, v, g), block_size=16, causal=True)
    for a, b in zip(cpu, cuda):
        assert all(y.device.type == "cuda" for y in b)
        assert_gradients(b, [x.numpy() for x in a], 1e-10)


def test_torch_results_carry_no_autograd_history():
    rng = np.random.default_rng(0)
    q, k, v, g = (torch.from_numpy(x).requires_grad_(True) for x in qkv_g(rng, (), 5, 6, 3, 2))
    out, lse = ac.tiled_attention(q, k, v, block_size=2, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    for grads in (ac.attention_backward(q, k, v, g),
                  ac.tiled_attention_backward(q, k, v, g, out=out, lse=lse, block_size=2)):
        assert not any(x.requires_grad for x in grads)


def test_inputs_untouched(backend):
    rng = np.random.default_rng(0)
    arrays = on(backend, *qkv_g(rng, (2,), 9, 9, 4, 3))
    out, lse = ac.tiled_attention(*arrays[:3], block_size=4, causal=True, return_lse=True)
    before = [to_numpy(x).copy() for x in (*arrays, out, lse)]
    ac.attention_backward(*arrays, causal=True)
    ac.tiled_attention_backward(*arrays, out=out, lse=lse, causal=True, block_size=4)
    assert all(np.array_equal(to_numpy(x), b) for x, b in zip((*arrays, out, lse), before))


# --- gradcheck: the hand-written backward passes against finite differences ----------------

def _as_function(backward, block_size=3):
    """An autograd Function whose forward is attncore's and whose backward is ours, so that
    gradcheck compares our gradients with finite differences of the forward pass."""

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, kw):
            out, lse = ac.tiled_attention(q, k, v, block_size=block_size, return_lse=True,
                                          **kw)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.kw = kw
            return out

        @staticmethod
        def backward(ctx, g):
            q, k, v, out, lse = ctx.saved_tensors
            if backward == "reference":
                grads = ac.attention_backward(q, k, v, g, **ctx.kw)
            else:
                grads = ac.tiled_attention_backward(q, k, v, g, out=out, lse=lse,
                                                    block_size=block_size, **ctx.kw)
            return (*grads, None)

    return Attention.apply


@pytest.mark.parametrize("backward", ["reference", "tiled"])
@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"scale": -0.6},
                                {"mask": "random", "causal": True}])
def test_gradcheck_float64(backward, kw):
    rng = np.random.default_rng(3)
    q, k, v, _ = (torch.from_numpy(x).requires_grad_(True) for x in qkv_g(rng, (2,), 6, 7,
                                                                          3, 2))
    kw = dict(kw)
    if kw.get("mask") == "random":
        m = rng.random((2, 6, 7)) > 0.5
        m[1, 2] = False                          # a row with no key
        kw["mask"] = torch.from_numpy(m)
    fn = _as_function(backward)
    assert torch.autograd.gradcheck(lambda a, b, c: fn(a, b, c, kw), (q, k, v))


# --- the identity that lets the backward pass do without the weights ----------------------

def test_rowsum_of_da_times_a_is_rowsum_of_d_out_times_out(backend, dtype):
    rng = np.random.default_rng(4)
    q, k, v, g = qkv_g(rng, (3,), 8, 11, 4, 5, dtype)
    mask = rng.random((3, 8, 11)) > 0.3
    mask[2, 5] = False                            # an empty row: both sides are 0
    q, k, v, g, mask = on(backend, q, k, v, g, mask)
    out, a = ac.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)
    da = g @ (v.swapaxes(-1, -2) if isinstance(v, np.ndarray) else v.transpose(-1, -2))
    lhs, rhs = to_numpy((da * a).sum(-1)), to_numpy((g * out).sum(-1))
    assert np.abs(lhs - rhs).max() < {np.float32: 1e-5, np.float64: 1e-12}[dtype]
    assert lhs[2, 5] == 0 and rhs[2, 5] == 0


# --- tiled_attention(..., return_lse=True) --------------------------------------------------

def _logsumexp_reference(q, k, scale=None, mask=None, causal=False):
    s = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2)
    s = s * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = s.masked_fill(~torch.from_numpy(mask), float("-inf"))
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.logsumexp(s, dim=-1).numpy()        # -inf for an all -inf row


@pytest.mark.parametrize("block_size", [1, 5, 64])
def test_lse_is_the_row_log_sum_exp(backend, dtype, block_size):
    rng = np.random.default_rng(6)
    q, k, v, _ = qkv_g(rng, (2,), 9, 13, 4, 3, dtype)
    mask = rng.random((2, 9, 13)) > 0.3
    mask[1, 4] = False
    want = _logsumexp_reference(q.astype(np.float64), k.astype(np.float64), mask=mask,
                                causal=True)
    out, lse = ac.tiled_attention(*on(backend, q, k, v), block_size=block_size,
                                  mask=to_backend(mask, backend), causal=True,
                                  return_lse=True)
    assert tuple(lse.shape) == (2, 9) and lse.dtype == to_backend(q, backend).dtype
    lse = to_numpy(lse)
    assert lse[1, 4] == -np.inf and np.isfinite(np.delete(lse.ravel(), 13)).all()
    finite = np.isfinite(want)
    assert np.abs(lse[finite] - want[finite]).max() < {np.float32: 1e-5,
                                                      np.float64: 1e-12}[dtype]
    # the output is the one returned without return_lse
    plain = ac.tiled_attention(*on(backend, q, k, v), block_size=block_size,
                               mask=to_backend(mask, backend), causal=True)
    assert np.array_equal(to_numpy(out), to_numpy(plain))


def test_lse_on_every_torch_path_is_the_same():
    rng = np.random.default_rng(7)
    q, k, v = (torch.from_numpy(x) for x in qkv_g(rng, (2,), 6, 8, 3, 2)[:3])
    _, without_grad = ac.tiled_attention(q, k, v, block_size=3, return_lse=True)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out, with_grad = ac.tiled_attention(*leaves, block_size=3, return_lse=True)
    assert torch.equal(without_grad, with_grad)
    out.sum().backward()                           # lse returned does not break autograd
    assert all(x.grad is not None for x in leaves)


def test_lse_with_no_keys_and_no_queries():
    rng = np.random.default_rng(0)
    q, k, v, _ = qkv_g(rng, (2,), 3, 0, 4, 2)
    out, lse = ac.tiled_attention(q, k, v, return_lse=True)
    assert lse.shape == (2, 3) and np.all(lse == -np.inf) and not out.any()
    q, k, v, _ = qkv_g(rng, (2,), 0, 5, 4, 2)
    assert ac.tiled_attention(q, k, v, return_lse=True)[1].shape == (2, 0)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_return_lse_must_be_a_bool(value):
    q = np.zeros((3, 2))
    with pytest.raises(TypeError, match=r"^return_lse: expected True or False"):
        ac.tiled_attention(q, q, q, return_lse=value)


# --- any shape --------------------------------------------------------------------------------

@given(batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
       n_q=st.integers(0, 16), n_k=st.integers(0, 16), d_k=st.integers(1, 5),
       d_v=st.integers(0, 4), block_size=st.integers(1, 20), causal=st.booleans(),
       masked=st.booleans(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_hypothesis_any_shape(batch, n_q, n_k, d_k, d_v, block_size, causal, masked, seed):
    rng = np.random.default_rng(seed)
    q, k, v, g = qkv_g(rng, batch, n_q, n_k, d_k, d_v)
    mask = rng.random(batch + (n_q, n_k)) > 0.3 if masked else None
    want = autograd_reference(q, k, v, g, mask=mask, causal=causal)
    for grads in both_backwards(q, k, v, g, block_size=block_size, mask=mask, causal=causal):
        assert_gradients(grads, want, 1e-10)
    tgrads = both_backwards(*on("torch-cpu", q, k, v, g), block_size=block_size,
                            mask=to_backend(mask, "torch-cpu"), causal=causal)
    for grads in tgrads:
        assert_gradients(grads, want, 1e-10)


# --- memory: the point of the tiled backward pass --------------------------------------------

def test_tiled_backward_memory_is_linear_in_n():
    n, block, d = 2048, 32, 16
    rng = np.random.default_rng(0)
    q, k, v, g = qkv_g(rng, (), n, n, d, d)
    out, lse = ac.tiled_attention(q, k, v, block_size=block, return_lse=True)
    tiled = peak_memory_bytes(lambda: ac.tiled_attention_backward(
        q, k, v, g, out=out, lse=lse, block_size=block))
    # Two (n, block) blocks (the weights, and dS in dA's memory) and five (n, d) arrays (the
    # three gradients, scale * q, one product): n (2 block + 5 d) numbers; a generous bound.
    assert tiled < 2 * n * (2 * block + 5 * d) * q.itemsize
    # ... a small fraction of the (n, n) weights, which the reference backward pass forms.
    assert tiled < n * n * q.itemsize / 5
    reference = peak_memory_bytes(lambda: ac.attention_backward(q, k, v, g))
    assert reference > 2 * n * n * q.itemsize


# --- flops: one product more than a backward pass that keeps the weights -------------------

@pytest.mark.parametrize("causal", [False, True])
def test_the_tiled_backward_pass_runs_five_products_per_block(causal):
    from torch.utils.flop_counter import FlopCounterMode

    from attncore.lab.exercises.backward_pass import causal_tiled_backward_flops

    n, d, block = 96, 8, 32
    want = causal_tiled_backward_flops(n, block, d) if causal else 5 * 2 * n * n * d
    q, k, v, g = (torch.randn(n, d, dtype=torch.float64) for _ in range(4))
    out, lse = ac.tiled_attention(q, k, v, block_size=block, causal=causal, return_lse=True)
    with FlopCounterMode(display=False) as counter:
        ac.tiled_attention_backward(q, k, v, g, out=out, lse=lse, block_size=block,
                                    causal=causal)
    assert counter.get_total_flops() == want
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = ac.tiled_attention(*leaves, block_size=block, causal=causal)
    with FlopCounterMode(display=False) as counter:
        out.backward(g)
    assert counter.get_total_flops() == want


# --- bad input: the forward pass's errors, and errors that name the new arguments ---------

def _good(rng=None):
    rng = rng or np.random.default_rng(0)
    q, k, v, g = qkv_g(rng, (2,), 4, 5, 3, 2)
    out, lse = ac.tiled_attention(q, k, v, return_lse=True)
    return dict(q=q, k=k, v=v, d_out=g, out=out, lse=lse)


def _call(which, a, **kw):
    if which == "reference":
        return ac.attention_backward(a["q"], a["k"], a["v"], a["d_out"], **kw)
    return ac.tiled_attention_backward(a["q"], a["k"], a["v"], a["d_out"], out=a["out"],
                                       lse=a["lse"], block_size=2, **kw)


def _forward_cases():
    f = np.zeros((2, 4, 3))
    return {
        "mixed libraries": ({"k": torch.zeros(2, 5, 3)}, {}),
        "integer dtype": ({"q": np.zeros((2, 4, 3), dtype=int)}, {}),
        "mixed dtypes": ({"q": f.astype(np.float32)}, {}),
        "rank 1": ({"q": np.zeros(3)}, {}),
        "d_k differs": ({"q": np.zeros((2, 4, 5))}, {}),
        "n_k differs": ({"v": np.zeros((2, 6, 2))}, {}),
        "mask not boolean": ({}, {"mask": np.ones((4, 5))}),
        "mask shape": ({}, {"mask": np.ones((3, 5), dtype=bool)}),
        "causal not a bool": ({}, {"causal": "False"}),
        "NaN in k": ({"k": np.full((2, 5, 3), np.nan)}, {}),
        "infinite scale": ({}, {"scale": math.inf}),
        "not an array": ({"q": [[1.0]]}, {}),
    }


@pytest.mark.parametrize("which", ["reference", "tiled"])
@pytest.mark.parametrize("case", list(_forward_cases()))
def test_rejects_bad_attention_input_like_the_forward_pass(which, case):
    replace, kw = _forward_cases()[case]
    a = {**_good(), **replace}
    with pytest.raises((TypeError, ValueError)) as forward:
        ac.scaled_dot_product_attention(a["q"], a["k"], a["v"], **kw)
    with pytest.raises(forward.type) as got:
        _call(which, a, **kw)
    assert str(got.value) == str(forward.value)


def _argument_cases():
    good = _good()
    g, lse = good["d_out"], good["lse"]
    return {
        ("d_out", "torch"): (TypeError, {"d_out": torch.from_numpy(g)},
                             "cannot mix NumPy arrays and torch tensors"),
        ("d_out", "dtype"): (TypeError, {"d_out": g.astype(np.float32)},
                             "expected one floating dtype for all inputs, got q is "
                             "float64, d_out is float32"),
        ("d_out", "integers"): (TypeError, {"d_out": g.astype(int)}, "d_out: expected a "
                                "floating dtype"),
        ("d_out", "shape"): (ValueError, {"d_out": g[..., :1]}, "d_out: expected the shape "
                             "of the attention output (..., n_q, d_v) = (2, 4, 2), got "
                             "(2, 4, 1)"),
        ("d_out", "broadcast"): (ValueError, {"d_out": g[:1]}, "d_out: expected the shape"),
        ("d_out", "NaN"): (ValueError, {"d_out": np.where(g > 0, np.nan, g)},
                           "d_out: expected finite values, got NaN or infinity"),
        ("out", "shape"): (ValueError, {"out": good["out"][:, :3]}, "out: expected the "
                           "shape of the attention output"),
        ("out", "inf"): (ValueError, {"out": good["out"] + np.inf}, "out: expected finite "
                         "values"),
        ("lse", "dtype"): (TypeError, {"lse": lse.astype(np.float32)}, "lse: expected "
                           "dtype float64, got float32"),
        ("lse", "shape"): (ValueError, {"lse": lse[..., None]}, "lse: expected one number "
                           "per query row, shape (..., n_q) = (2, 4), got (2, 4, 1)"),
        ("lse", "NaN"): (ValueError, {"lse": lse * np.nan}, "lse: expected finite row "
                         "log-sum-exps, or -inf for a row with no admissible key, got NaN"),
        ("lse", "+inf"): (ValueError, {"lse": lse + np.inf}, "lse: expected finite"),
        ("lse", "list"): (TypeError, {"lse": lse.tolist()}, "lse: expected a numpy.ndarray "
                          "or a torch.Tensor, got list"),
    }


@pytest.mark.parametrize("case", list(_argument_cases()), ids=lambda c: "-".join(c))
def test_bad_gradient_arguments_are_named(case):
    exc, replace, message = _argument_cases()[case]
    a = {**_good(), **replace}
    whose = ["tiled"] if case[0] in ("out", "lse") else ["reference", "tiled"]
    for which in whose:
        with pytest.raises(exc, match="^" + re.escape(message)):
            _call(which, a)


def test_low_precision_lse_must_be_float32():
    q = np.zeros((3, 2), np.float16)
    out, lse = ac.tiled_attention(q, q, q, return_lse=True)
    with pytest.raises(TypeError, match=r"^lse: expected dtype float32 \(the forward pass "
                                        r"keeps the statistic of float16 inputs in float32"):
        ac.tiled_attention_backward(q, q, q, q, out=out, lse=lse.astype(np.float16))


@pytest.mark.parametrize("block_size, exc", [(0, ValueError), (2.0, TypeError),
                                             (True, TypeError)])
def test_bad_block_size(block_size, exc):
    a = _good()
    with pytest.raises(exc, match=r"^block_size: expected a positive integer"):
        ac.tiled_attention_backward(a["q"], a["k"], a["v"], a["d_out"], out=a["out"],
                                    lse=a["lse"], block_size=block_size)


@pytest.mark.parametrize("backend", ["numpy", "torch-cpu"])
@pytest.mark.parametrize("wrong", ["scale", "causal", "mask", "lse + 0.1", "max only"])
def test_an_lse_of_other_inputs_is_refused(backend, wrong):
    rng = np.random.default_rng(8)
    q, k, v, g = on(backend, *qkv_g(rng, (2,), 6, 9, 3, 2))
    kw = {"causal": True}
    other = {"scale": {"causal": True, "scale": 0.3}, "causal": {},
             "mask": {"causal": True, "mask": to_backend(np.arange(9) < 5, backend)}}
    out, lse = ac.tiled_attention(q, k, v, return_lse=True, **kw)
    if wrong in other:
        _, lse = ac.tiled_attention(q, k, v, return_lse=True, **other[wrong])
    elif wrong == "lse + 0.1":
        lse = lse + 0.1
    else:                       # the row maximum m instead of m + log l
        s = to_numpy(q) @ to_numpy(k).swapaxes(-1, -2) / math.sqrt(3)
        s[..., ~np.tri(6, 9, dtype=bool)] = -np.inf
        lse = to_backend(s.max(-1), backend)
    with pytest.raises(ValueError, match=r"^lse: expected the row log-sum-exp of the "
                                         r"scores of these q, k, mask, causal and scale"):
        ac.tiled_attention_backward(q, k, v, g, out=out, lse=lse, block_size=4, **kw)


@pytest.mark.parametrize("backend", ["numpy", "torch-cpu"])
def test_an_out_of_other_inputs_is_refused(backend):
    rng = np.random.default_rng(9)
    q, k, v, g = on(backend, *qkv_g(rng, (2,), 6, 9, 3, 2))
    out, lse = ac.tiled_attention(q, k, v, return_lse=True)
    for wrong in (out * 1.01, ac.tiled_attention(q, k, v * 2.0), 0 * out):
        with pytest.raises(ValueError, match=r"^out: expected the attention output of "
                                             r"these q, k, v, mask, causal and scale"):
            ac.tiled_attention_backward(q, k, v, g, out=wrong, lse=lse, block_size=4)


def test_gradients_that_overflow_raise():
    # finite inputs, finite scores, but dO V^T beyond float32's range
    q = np.ones((3, 2), np.float32)
    v = np.full((4, 2), 1e30, np.float32)
    g = np.full((3, 2), 1e30, np.float32)
    out, lse = ac.tiled_attention(q, q[:1].repeat(4, 0), v, return_lse=True)
    for grads in (lambda: ac.attention_backward(q, q[:1].repeat(4, 0), v, g),
                  lambda: ac.tiled_attention_backward(q, q[:1].repeat(4, 0), v, g, out=out,
                                                      lse=lse)):
        with np.errstate(over="ignore", invalid="ignore"), pytest.raises(
                ValueError, match=r"^(dq|dk|dv): expected finite gradients.*overflowed "
                                  r"dtype float32"):
            grads()


def test_vmap():
    rng = np.random.default_rng(0)
    q, k, v, g = (torch.from_numpy(x) for x in qkv_g(rng, (3,), 4, 5, 2, 2))
    batched = torch.func.vmap(ac.attention_backward)(q, k, v, g)
    assert_gradients(batched, [x.numpy() for x in ac.attention_backward(q, k, v, g)], 1e-12)
    out, lse = ac.tiled_attention(q, k, v, return_lse=True)
    with pytest.raises(NotImplementedError, match="vmap is not supported"):
        torch.func.vmap(lambda *a: ac.tiled_attention_backward(
            *a[:4], out=a[4], lse=a[5]))(q, k, v, g, out, lse)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_an_out_of_a_dropout_forward_pass_is_named(backend):
    # tiled_attention_backward differentiates attention without dropout: an output of
    # tiled_attention(..., dropout_p > 0) is not that function's, and the error says so
    rng = np.random.default_rng(5)
    q, k, v, g = (to_backend(rng.standard_normal((2, 9, 4)), backend) for _ in range(4))
    gen = np.random.default_rng(0) if backend == "numpy" else torch.Generator()
    out, lse = ac.tiled_attention(q, k, v, return_lse=True, dropout_p=0.3, generator=gen)
    with pytest.raises(ValueError, match="dropout"):
        ac.tiled_attention_backward(q, k, v, g, out=out, lse=lse)
