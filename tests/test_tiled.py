"""Tiled attention equals the reference, block size by block size, on both backends."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncore.attention import scaled_dot_product_attention
from attncore.lab.profiling import peak_memory_bytes
from attncore.softmax import softmax
from attncore.tiled import (
    SoftmaxState,
    finalize_softmax_state,
    merge_softmax_states,
    softmax_state,
    tiled_attention,
)

TOL = {np.float64: 1e-10, np.float32: 1e-5}


def qkv(rng, batch, n_q, n_k, d_k, d_v, dtype=np.float64):
    return (rng.standard_normal(batch + (n_q, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_v)).astype(dtype))


def to_torch(*arrays):
    return tuple(None if a is None else torch.from_numpy(a) for a in arrays)


def max_err(a, b):
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    b = b.numpy() if isinstance(b, torch.Tensor) else b
    return float(np.abs(a - b).max()) if a.size else 0.0


def assert_matches_reference(q, k, v, *, block_size, mask=None, causal=False, scale=None):
    tol = TOL[q.dtype.type]
    expected = scaled_dot_product_attention(q, k, v, mask=mask, causal=causal, scale=scale)
    got = tiled_attention(q, k, v, block_size=block_size, mask=mask, causal=causal, scale=scale)
    assert type(got) is np.ndarray and got.dtype == q.dtype and got.shape == expected.shape
    assert max_err(got, expected) < tol
    tq, tk, tv, tm = to_torch(q, k, v, mask)
    expected_t = scaled_dot_product_attention(tq, tk, tv, mask=tm, causal=causal, scale=scale)
    got_t = tiled_attention(tq, tk, tv, block_size=block_size, mask=tm, causal=causal,
                            scale=scale)
    assert isinstance(got_t, torch.Tensor) and got_t.dtype == tq.dtype
    assert got_t.device == tq.device and tuple(got_t.shape) == expected.shape
    assert max_err(got_t, expected_t) < tol
    assert max_err(got_t, expected) < tol
    return got


# --- equality with the reference ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block_size", [1, 3, 8, 13, 64, 200])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_reference(dtype, block_size, causal):
    # n_k = 37 is divisible by none of the block sizes (200 > n_k is a single block).
    rng = np.random.default_rng(block_size)
    q, k, v = qkv(rng, (2, 3), 41, 37, 16, 8, dtype)
    assert_matches_reference(q, k, v, block_size=block_size, causal=causal)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block_size", [1, 5, 16, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_padding_mask(dtype, block_size, causal):
    # Key padding: sequence b has only lengths[b] real keys; the mask (B, 1, 1, n_k) broadcasts
    # over heads and queries.
    rng = np.random.default_rng(7)
    q, k, v = qkv(rng, (3, 2), 30, 30, 8, 4, dtype)
    lengths = np.array([30, 17, 5])
    mask = (np.arange(30) < lengths[:, None])[:, None, None, :]
    assert_matches_reference(q, k, v, block_size=block_size, mask=mask, causal=causal)


@pytest.mark.parametrize("block_size", [1, 4, 9, 50])
def test_random_mask_and_nonsquare_causal(block_size):
    rng = np.random.default_rng(11)
    q, k, v = qkv(rng, (2,), 19, 45, 6, 7)
    mask = rng.random((2, 19, 45)) > 0.4
    assert_matches_reference(q, k, v, block_size=block_size, mask=mask, causal=True)
    q, k, v = qkv(rng, (2,), 45, 19, 6, 7)   # more queries than keys
    assert_matches_reference(q, k, v, block_size=block_size, causal=True)


@pytest.mark.parametrize("block_size", [1, 4, 32])
def test_fully_masked_rows_are_zeros(block_size):
    rng = np.random.default_rng(3)
    q, k, v = qkv(rng, (2,), 12, 20, 4, 3)
    mask = rng.random((2, 12, 20)) > 0.5
    mask[0, 3] = False
    mask[1, [0, 11]] = False
    out = assert_matches_reference(q, k, v, block_size=block_size, mask=mask)
    assert np.all(out[0, 3] == 0) and np.all(out[1, [0, 11]] == 0)
    # A row that is empty only because the padding and the causal mask combine.
    pad = np.ones(20, dtype=bool)
    pad[0] = False
    out = assert_matches_reference(q, k, v, block_size=block_size, mask=pad, causal=True)
    assert np.all(out[:, 0] == 0) and not np.any(np.all(out[:, 1:] == 0, axis=-1))
    out = tiled_attention(q, k, v, block_size=block_size, mask=np.zeros((12, 20), dtype=bool))
    assert np.all(out == 0) and not np.isnan(out).any()


@pytest.mark.parametrize("scale", [0.0, -0.7, 2.5, 1])
def test_explicit_scale(scale):
    rng = np.random.default_rng(5)
    q, k, v = qkv(rng, (), 10, 23, 5, 2)
    assert_matches_reference(q, k, v, block_size=6, scale=scale, causal=True)


def test_large_scores_are_stable():
    # Scores around 1e4: exp would overflow without the running maximum, and the maximum of
    # a late block dwarfs the early ones (alpha underflows to 0, not NaN).
    rng = np.random.default_rng(2)
    q, k, v = qkv(rng, (), 16, 40, 4, 3)
    k[30:] *= 300.0
    assert_matches_reference(q * 100.0, k, v, block_size=7)


def test_no_queries():
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, (2,), 0, 9, 4, 3)
    assert tiled_attention(q, k, v, block_size=4).shape == (2, 0, 3)


def test_inputs_untouched():
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, (2,), 9, 9, 4, 3)
    copies = [x.copy() for x in (q, k, v)]
    tiled_attention(q, k, v, block_size=4, causal=True)
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v), copies))


@given(batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
       n_q=st.integers(1, 24), n_k=st.integers(1, 24), d_k=st.integers(1, 6),
       d_v=st.integers(1, 5), block_size=st.integers(1, 30), causal=st.booleans(),
       masked=st.booleans(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_hypothesis_any_shape_any_block(batch, n_q, n_k, d_k, d_v, block_size, causal, masked,
                                        seed):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, batch, n_q, n_k, d_k, d_v)
    mask = rng.random(batch + (n_q, n_k)) > 0.3 if masked else None
    assert_matches_reference(q, k, v, block_size=block_size, mask=mask, causal=causal)


# --- half precision and devices (torch) ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_torch_low_precision_keeps_dtype(dtype):
    rng = np.random.default_rng(4)
    q, k, v = qkv(rng, (2,), 33, 33, 8, 8, np.float32)
    expected = scaled_dot_product_attention(q, k, v, causal=True)
    got = tiled_attention(*(torch.from_numpy(x).to(dtype) for x in (q, k, v)), block_size=8,
                          causal=True)
    assert got.dtype == dtype
    assert max_err(got.float(), expected) < 2e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    rng = np.random.default_rng(6)
    q, k, v = qkv(rng, (2, 4), 100, 100, 16, 16)
    expected = scaled_dot_product_attention(q, k, v, causal=True)
    got = tiled_attention(*(torch.from_numpy(x).cuda() for x in (q, k, v)), block_size=32,
                          causal=True)
    assert got.device.type == "cuda" and max_err(got.cpu(), expected) < 1e-10


# --- the online-softmax state --------------------------------------------------------------

def test_state_of_a_block_finalizes_to_softmax_times_v():
    rng = np.random.default_rng(8)
    s, v = rng.standard_normal((5, 11)), rng.standard_normal((11, 3))
    state = softmax_state(s, v)
    assert np.array_equal(state.max, s.max(axis=-1, keepdims=True))
    assert np.allclose(state.sum, np.exp(s - state.max).sum(axis=-1, keepdims=True),
                       rtol=1e-14, atol=0)
    assert max_err(finalize_softmax_state(state), softmax(s) @ v) < 1e-14


@pytest.mark.parametrize("split", [1, 4, 10])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_merge_gives_state_of_union(split, backend):
    rng = np.random.default_rng(split)
    s, v = rng.standard_normal((6, 11)) * 5, rng.standard_normal((11, 2))
    s[2, :split] = -np.inf      # a row whose first part is fully masked
    if backend == "torch":
        s, v = to_torch(s, v)
    left = softmax_state(s[:, :split], v[:split])
    right = softmax_state(s[:, split:], v[split:])
    whole = softmax_state(s, v)
    for merged in (merge_softmax_states(left, right), merge_softmax_states(right, left)):
        assert max_err(merged.max, whole.max) == 0.0
        assert max_err(merged.sum, whole.sum) < 1e-13
        assert max_err(merged.out, whole.out) < 1e-13


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_in_place_variants_agree(backend):
    rng = np.random.default_rng(12)
    s, v = rng.standard_normal((5, 9)) * 4, rng.standard_normal((9, 3))
    s[1, :4] = -np.inf
    if backend == "torch":
        s, v = to_torch(s, v)
    a, b = softmax_state(s[:, :4], v[:4]), softmax_state(s[:, 4:], v[4:])
    expected = merge_softmax_states(a, b)
    scratch = s[:, 4:].copy() if backend == "numpy" else s[:, 4:].clone()
    b2 = softmax_state(scratch, v[4:], overwrite_scores=True)
    for x, y in zip(b2, b):
        assert max_err(x, y) == 0.0
    merged = merge_softmax_states(a, b2, into_a=True)
    assert merged is a
    for x, y in zip(a, expected):
        assert max_err(x, y) == 0.0


def test_merge_is_associative_with_identity():
    rng = np.random.default_rng(9)
    s, v = rng.standard_normal((4, 9)), rng.standard_normal((9, 3))
    a, b, c = (softmax_state(s[:, sl], v[sl]) for sl in (slice(0, 2), slice(2, 5), slice(5, 9)))
    left = merge_softmax_states(merge_softmax_states(a, b), c)
    right = merge_softmax_states(a, merge_softmax_states(b, c))
    for x, y in zip(left, right):
        assert max_err(x, y) < 1e-14
    empty = SoftmaxState(np.full((4, 1), -np.inf), np.zeros((4, 1)), np.zeros((4, 3)))
    for x, y in zip(merge_softmax_states(empty, a), a):
        assert np.array_equal(x, y)


def test_fully_masked_state():
    s = np.full((2, 5), -np.inf)
    s[1, 2] = 0.5
    v = np.ones((5, 3))
    state = softmax_state(s, v)
    assert state.max[0, 0] == -np.inf and state.sum[0, 0] == 0 and np.all(state.out[0] == 0)
    out = finalize_softmax_state(state)
    assert np.all(out[0] == 0) and np.allclose(out[1], 1.0)


# --- memory: the point of tiling -------------------------------------------------------------

def test_never_materialises_the_score_matrix():
    n, block, d_v = 2048, 32, 16
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, (), n, n, 16, d_v)
    peak = peak_memory_bytes(lambda: tiled_attention(q, k, v, block_size=block))
    # Scores and exponentials of one block (2 * n * block numbers) plus a few (n, d_v) state
    # arrays: a small multiple of n * (block + d_v) numbers ...
    assert peak < 6 * n * (block + d_v) * q.itemsize
    # ... which is a small fraction of the n x n score matrix that the reference builds.
    assert peak < n * n * q.itemsize / 5


# --- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("block_size, exc", [(0, ValueError), (-3, ValueError),
                                             (2.0, TypeError), (1.5, TypeError),
                                             (True, TypeError), ("8", TypeError),
                                             (None, TypeError)])
def test_bad_block_size(block_size, exc):
    # The library-wide rule for sizes: not an integer -> TypeError, out of range -> ValueError.
    q = np.zeros((4, 2))
    with pytest.raises(exc, match=r"block_size: expected a positive integer, got "
                                  + re.escape(str(block_size) if exc is ValueError
                                              else repr(block_size))):
        tiled_attention(q, q, q, block_size=block_size)


def test_numpy_integer_block_size_is_accepted():
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, (), 5, 7, 3, 2)
    assert_matches_reference(q, k, v, block_size=np.int64(3))


def _bad_inputs():
    f = np.zeros((2, 4, 3))
    return {
        "mixed libraries": (f, torch.zeros(2, 4, 3), f, {}),
        "integer dtype": (np.zeros((2, 4, 3), dtype=int), f, f, {}),
        "mixed dtypes": (f, f.astype(np.float32), f, {}),
        "rank 1": (np.zeros(3), f, f, {}),
        "d_k differs": (np.zeros((2, 4, 5)), f, f, {}),
        "n_k differs": (f, f, np.zeros((2, 5, 3)), {}),
        "batch differs": (np.zeros((3, 4, 3)), f, f, {}),
        "mask not boolean": (f, f, f, {"mask": np.ones((4, 4))}),
        "mask shape": (f, f, f, {"mask": np.ones((3, 4), dtype=bool)}),
        "mask enlarges batch": (f, f, f, {"mask": np.ones((5, 2, 4, 4), dtype=bool)}),
        "NaN": (np.full((2, 4, 3), np.nan), f, f, {}),
        "infinite scale": (f, f, f, {"scale": math.inf}),
        "not an array": ([[1.0]], f, f, {}),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_rejects_bad_input_like_the_reference(case):
    q, k, v, kw = _bad_inputs()[case]
    with pytest.raises((TypeError, ValueError)) as ref:
        scaled_dot_product_attention(q, k, v, **kw)
    with pytest.raises(ref.type) as got:
        tiled_attention(q, k, v, block_size=2, **kw)
    assert str(got.value) == str(ref.value)


def test_overflowing_scores_raise():
    big = np.full((3, 2), 1e30, dtype=np.float32)
    with np.errstate(over="ignore"), pytest.raises(ValueError, match="scores"):
        tiled_attention(big, big, big, block_size=2)


# --- autograd on torch: the gradients of the reference, with the forward's memory bound ------

def _grads(fn, q, k, v, g):
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    out = fn(*leaves)
    out.backward(g)
    return out.detach(), [x.grad for x in leaves]


@pytest.mark.parametrize("block_size", [1, 3, 8, 64])
@pytest.mark.parametrize("case", ["plain", "causal", "mask", "mask+causal", "padding"])
def test_gradients_equal_the_reference(block_size, case):
    rng = np.random.default_rng(block_size)
    q, k, v = to_torch(*qkv(rng, (2, 3), 11, 13, 5, 4))
    g = torch.from_numpy(rng.standard_normal((2, 3, 11, 4)))
    kw = {"causal": "causal" in case}
    if case.startswith("mask"):
        m = rng.random((2, 3, 11, 13)) > 0.4
        m[0, 1, 4] = False                     # a query with no key: zero gradient
        kw["mask"] = torch.from_numpy(m)
    elif case == "padding":
        kw["mask"] = torch.from_numpy(np.arange(13) < np.array([13, 6])[:, None])[:, None,
                                                                                    None]
    out, grads = _grads(lambda a, b, c: tiled_attention(a, b, c, block_size=block_size, **kw),
                        q, k, v, g)
    ref_out, ref_grads = _grads(lambda a, b, c: scaled_dot_product_attention(
        a, b, c, return_weights=True, **kw)[0], q, k, v, g)
    assert max_err(out, ref_out) < 1e-12
    for name, got, expected in zip("qkv", grads, ref_grads):
        assert max_err(got, expected) < 1e-12, name


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"scale": -0.6},
                                {"mask": "random", "causal": True}])
def test_gradcheck_float64(kw):
    rng = np.random.default_rng(3)
    q, k, v = (x.requires_grad_(True) for x in to_torch(*qkv(rng, (2,), 6, 7, 3, 2)))
    kw = dict(kw)
    if kw.get("mask") == "random":
        m = rng.random((2, 6, 7)) > 0.5
        m[1, 2] = False
        kw["mask"] = torch.from_numpy(m)
    assert torch.autograd.gradcheck(
        lambda a, b, c: tiled_attention(a, b, c, block_size=3, **kw), (q, k, v))


# --- beyond the first derivative: double backward and torch.func -------------------------------

_KINDS = [{}, {"causal": True}, {"mask": "random"}, {"mask": "random", "causal": True},
          {"scale": -0.6}]


def _inputs(kw, seed=3, shape=(2,), n_q=5, n_k=6):
    rng = np.random.default_rng(seed)
    q, k, v = to_torch(*qkv(rng, shape, n_q, n_k, 3, 2))
    kw = dict(kw)
    if kw.get("mask") == "random":
        m = rng.random(shape + (n_q, n_k)) > 0.5
        m[..., 1, :] = False                       # a query with no admissible key
        m[..., 2, 0] = True
        kw["mask"] = torch.from_numpy(m)
    return q, k, v, kw


def _reference(kw):
    # attncore's own arithmetic (return_weights), differentiable to any order
    return lambda a, b, c: scaled_dot_product_attention(a, b, c, return_weights=True,
                                                        **kw)[0]


@pytest.mark.parametrize("kw", _KINDS)
def test_gradgradcheck_float64(kw):
    q, k, v, kw = _inputs(kw)
    leaves = [x.requires_grad_(True) for x in (q, k, v)]
    assert torch.autograd.gradgradcheck(
        lambda a, b, c: tiled_attention(a, b, c, block_size=2, **kw), leaves)


@pytest.mark.parametrize("kw", _KINDS)
def test_double_backward_equals_the_reference(kw):
    q, k, v, kw = _inputs(kw, seed=5)
    results = []
    for fn in (lambda a, b, c: tiled_attention(a, b, c, block_size=4, **kw), _reference(kw)):
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = fn(*leaves)
        dq, dk, dv = torch.autograd.grad((out ** 2).sum(), leaves, create_graph=True)
        second = torch.autograd.grad((dq ** 2).sum() + (dk * dv.sum()).sum() + dv.sum(),
                                     leaves)
        results.append([dq, dk, dv, *second])
    for got, expected in zip(*results):
        assert max_err(got.detach(), expected.detach()) < 1e-12


# (forward-mode AD scripts a helper with torch.jit.script on first use, which PyTorch 2.13
# reports as deprecated: PyTorch's warning about itself, not attncore's)
_JIT_WARNING = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")


@_JIT_WARNING
@pytest.mark.parametrize("transform", ["grad", "jacrev", "jvp", "jacfwd", "vmap",
                                       "forward_ad", "hessian"])
@pytest.mark.parametrize("kw", _KINDS[:4])
def test_torch_func_transforms_equal_the_reference(transform, kw):
    import torch.autograd.forward_ad as fwAD
    from torch import func

    q, k, v, kw = _inputs(kw, seed=7)
    tangent = torch.from_numpy(np.random.default_rng(8).standard_normal(tuple(q.shape)))

    def run(f):
        g = lambda x: f(x, k, v)                    # noqa: E731
        if transform == "grad":
            return func.grad(lambda x: (g(x) ** 2).sum())(q)
        if transform == "jacrev":
            return func.jacrev(g)(q)
        if transform == "jacfwd":
            return func.jacfwd(g)(q)
        if transform == "hessian":
            return func.hessian(lambda x: (g(x) ** 2).sum())(q)
        if transform == "jvp":
            return func.jvp(g, (q,), (tangent,))[1]
        if transform == "vmap":
            m = kw.get("mask")
            extra = {} if m is None else {"mask": m[:, None].expand(-1, 2, -1, -1)}
            return func.vmap(lambda a, b, c, **e: f(a, b, c, **e), in_dims=(1, 1, 1))(
                *(x[:, None].expand(-1, 2, -1, -1).clone() for x in (q, k, v)))
        with fwAD.dual_level():
            return fwAD.unpack_dual(g(fwAD.make_dual(q, tangent))).tangent

    got = run(lambda a, b, c: tiled_attention(a, b, c, block_size=2, **kw))
    expected = run(_reference(kw))
    assert got.shape == expected.shape
    assert max_err(got, expected) < 1e-12


@_JIT_WARNING
def test_the_fused_reference_works_under_forward_mode_transforms():
    # the value guard reads torch's norms of wrapped tensors (it used to call .numpy() on
    # them), and forward derivatives go through attncore's arithmetic, not the fused kernel
    from torch import func

    q, k, v, _ = _inputs({}, seed=9)
    t = torch.ones_like(q)
    f = lambda x: scaled_dot_product_attention(x, k, v, causal=True)   # noqa: E731
    got = func.jvp(f, (q,), (t,))[1]
    expected = func.jvp(_reference({"causal": True}), (q, k, v), (t, torch.zeros_like(k),
                                                                  torch.zeros_like(v)))[1]
    assert max_err(got, expected) < 1e-12
    assert func.jacfwd(f)(q).shape == (2, 5, 2, 2, 5, 3)
    bad = q.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"q: expected finite values"):
        func.jvp(f, (bad,), (t,))


def test_gradient_reaches_only_the_inputs_that_ask():
    q, k, v = (torch.randn(5, 3, dtype=torch.float64) for _ in range(3))
    k.requires_grad_(True)
    tiled_attention(q, k, v, block_size=2).sum().backward()
    assert k.grad is not None and q.grad is None and v.grad is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_gradients(dtype):
    rng = np.random.default_rng(5)
    q, k, v = to_torch(*qkv(rng, (2,), 9, 9, 8, 4))
    g = torch.from_numpy(rng.standard_normal((2, 9, 4)))
    _, ref = _grads(lambda a, b, c: scaled_dot_product_attention(a, b, c, causal=True),
                    q, k, v, g)
    low = [x.to(dtype) for x in (q, k, v)]
    _, got = _grads(lambda a, b, c: tiled_attention(a, b, c, block_size=4, causal=True),
                    *low, g.to(dtype))
    for a, b in zip(got, ref):
        assert a.dtype == dtype and max_err(a.double(), b) < 5e-2


def test_training_keeps_the_memory_bound():
    from attncore.lab.torch_memory import torch_peak_memory_bytes

    n, block, d = 1024, 32, 16
    q, k, v = (torch.randn(n, d).requires_grad_(True) for _ in range(3))

    def step(fn):
        def run():
            out = fn(q, k, v)
            out.sum().backward()
            for x in (q, k, v):
                x.grad = None
        return run

    tiled = torch_peak_memory_bytes(step(lambda a, b, c: tiled_attention(
        a, b, c, block_size=block)))
    naive = torch_peak_memory_bytes(step(lambda a, b, c: scaled_dot_product_attention(
        a, b, c, return_weights=True)[0]))
    scores = n * n * 4
    # The reference keeps (n, n) weights for its backward pass; tiled attention keeps the
    # output and one statistic per row, and recomputes (n, block) blocks.
    assert naive > scores
    assert tiled < 6 * n * (block + d) * 4
    assert tiled < scores / 4


def test_forward_with_grad_keeps_the_memory_bound():
    from attncore.lab.torch_memory import torch_peak_memory_bytes

    n, block, d = 2048, 32, 16
    q, k, v = (torch.randn(n, d).requires_grad_(True) for _ in range(3))
    peak = torch_peak_memory_bytes(lambda: tiled_attention(q, k, v, block_size=block))
    assert peak < 3 * n * (block + d) * 4
    assert peak < n * n * 4 / 10
