import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attncore import causal_mask, scaled_dot_product_attention
from conftest import TOL, to_backend, to_numpy


def make_qkv(seed, batch=(2, 3), n_q=5, n_k=7, d_k=8, d_v=4, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(batch + (n_q, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_v)).astype(dtype))


def pytorch_sdpa(q, k, v, mask=None, causal=False, scale=None):
    """PyTorch's own attention, the oracle. Its bool mask also means True = may attend."""
    t = [torch.as_tensor(x) for x in (q, k, v)]
    m = None if mask is None else torch.as_tensor(mask)
    if causal and m is not None:
        m = m & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        causal = False
    return F.scaled_dot_product_attention(*t, attn_mask=m, is_causal=causal, scale=scale).numpy()


CASES = {
    "plain": dict(mask=None, causal=False),
    "causal": dict(mask=None, causal=True),
    "mask": dict(mask="random", causal=False),
    "mask+causal": dict(mask="random", causal=True),
    "padding": dict(mask="padding", causal=False),
}


def build_mask(kind, seed, batch=(2, 3), n_q=5, n_k=7):
    if kind is None:
        return None
    rng = np.random.default_rng(seed + 100)
    if kind == "random":
        m = rng.random(batch + (n_q, n_k)) < 0.7
        m[..., 0] = True  # keep every row non-empty: PyTorch's kernels differ on empty rows
        return m
    lengths = np.array([7, 3])  # per batch element, broadcast over heads and queries
    return (np.arange(n_k) < lengths[:, None])[:, None, None, :]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scale", [None, 0.3])
def test_matches_pytorch(backend, dtype, case, scale):
    q, k, v = make_qkv(0, dtype=dtype)
    mask = build_mask(CASES[case]["mask"], 0)
    causal = CASES[case]["causal"]
    expected = pytorch_sdpa(q, k, v, mask, causal, scale)
    got = scaled_dot_product_attention(*(to_backend(x, backend) for x in (q, k, v)),
                                       mask=to_backend(mask, backend), causal=causal,
                                       scale=scale)
    got = to_numpy(got)
    assert got.dtype == dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("case", CASES)
def test_weights_path_equals_fast_path(backend, dtype, case):
    q, k, v = make_qkv(1, dtype=dtype)
    mask = to_backend(build_mask(CASES[case]["mask"], 1), backend)
    args = [to_backend(x, backend) for x in (q, k, v)]
    fast = scaled_dot_product_attention(*args, mask=mask, causal=CASES[case]["causal"])
    out, w = scaled_dot_product_attention(*args, mask=mask, causal=CASES[case]["causal"],
                                          return_weights=True)
    np.testing.assert_allclose(to_numpy(out), to_numpy(fast), rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(to_numpy(w).sum(-1), 1.0, rtol=TOL[dtype])


def test_numpy_and_torch_agree_to_float64_precision():
    q, k, v = make_qkv(2)
    mask = build_mask("random", 2)
    a = scaled_dot_product_attention(q, k, v, mask=mask, causal=True)
    b = scaled_dot_product_attention(*(torch.as_tensor(x) for x in (q, k, v)),
                                     mask=torch.as_tensor(mask), causal=True)
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-12, atol=1e-12)


def test_default_scale_is_one_over_sqrt_dk():
    q, k, v = make_qkv(3, d_k=16)
    np.testing.assert_allclose(scaled_dot_product_attention(q, k, v),
                               scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(16)),
                               rtol=0, atol=0)


def test_causal_weights_are_lower_triangular(backend):
    q, k, v = make_qkv(4, n_q=6, n_k=6)
    _, w = scaled_dot_product_attention(*(to_backend(x, backend) for x in (q, k, v)),
                                        causal=True, return_weights=True)
    w = to_numpy(w)
    assert (w[..., ~causal_mask(6, 6)] == 0).all()
    np.testing.assert_allclose(w[..., 0, 0], 1.0)  # the first token can only see itself


def test_causal_mask_helper_on_torch_device():
    m = causal_mask(3, 4, like=torch.zeros(1))
    assert m.dtype == torch.bool and m.tolist() == causal_mask(3, 4).tolist()
    assert causal_mask(3, 4).tolist() == [[True, False, False, False],
                                          [True, True, False, False],
                                          [True, True, True, False]]


def test_fully_masked_rows_are_zero_not_nan(backend, dtype):
    q, k, v = make_qkv(5, dtype=dtype)
    mask = build_mask("random", 5)
    mask[0, 1, 2, :] = False           # one query with no key at all
    mask[1, :, 4, :] = False           # and a whole column of heads
    args = [to_backend(x, backend) for x in (q, k, v)]
    for return_weights in (False, True):
        res = scaled_dot_product_attention(*args, mask=to_backend(mask, backend), causal=True,
                                           return_weights=return_weights)
        out, w = (res if return_weights else (res, None))
        out = to_numpy(out)
        assert np.isfinite(out).all()
        assert (out[0, 1, 2] == 0).all() and (out[1, :, 4] == 0).all()
        if w is not None:
            w = to_numpy(w)
            assert (w[0, 1, 2] == 0).all() and np.isfinite(w).all()
        # the other rows are untouched by the empty ones
        ok = mask.copy()
        ok[0, 1, 2, 0] = ok[1, :, 4, 0] = True
        ref = pytorch_sdpa(q, k, v, ok, True)
        keep = mask.any(-1) & True
        keep = np.broadcast_to(keep, out.shape[:-1])
        np.testing.assert_allclose(out[keep], ref[keep], rtol=TOL[dtype], atol=TOL[dtype])


@st.composite
def attention_inputs(draw):
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n_q, n_k = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    spread = draw(st.sampled_from([0.1, 1.0, 10.0]))
    q = rng.standard_normal(batch + (n_q, d_k)) * spread
    k = rng.standard_normal(batch + (n_k, d_k)) * spread
    v = rng.standard_normal(batch + (n_k, d_v))
    mask = rng.random(batch + (n_q, n_k)) < 0.6 if draw(st.booleans()) else None
    return q, k, v, mask, draw(st.booleans())


@given(attention_inputs())
def test_outputs_are_convex_combinations_of_values(inputs):
    q, k, v, mask, causal = inputs
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, causal=causal,
                                          return_weights=True)
    assert out.shape == q.shape[:-1] + (v.shape[-1],)
    assert w.shape == q.shape[:-1] + (k.shape[-2],)
    assert (w >= 0).all()
    nonempty = w.sum(-1) > 0
    np.testing.assert_allclose(w.sum(-1)[nonempty], 1.0, rtol=1e-12)
    lo = v.min(axis=-2, keepdims=True) - 1e-12
    hi = v.max(axis=-2, keepdims=True) + 1e-12
    # every output coordinate lies between the smallest and largest value in that column of V
    assert ((out >= lo) | ~nonempty[..., None]).all() and ((out <= hi) | ~nonempty[..., None]).all()
    assert (out[~nonempty] == 0).all()


@given(attention_inputs())
def test_backends_agree_on_random_shapes(inputs):
    q, k, v, mask, causal = inputs
    a = scaled_dot_product_attention(q, k, v, mask=mask, causal=causal)
    b = scaled_dot_product_attention(*(torch.as_tensor(x) for x in (q, k, v)),
                                     mask=None if mask is None else torch.as_tensor(mask),
                                     causal=causal)
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-10)


# --- bad input: each is rejected with a message naming the argument, what it got, what was expected

def bad(backend, msg, exc=ValueError, **overrides):
    q, k, v = make_qkv(9)
    args = dict(q=q, k=k, v=v, mask=None)
    args.update(overrides)
    args = {n: to_backend(x, backend) if isinstance(x, np.ndarray) else x
            for n, x in args.items()}
    with pytest.raises(exc, match=msg):
        scaled_dot_product_attention(args.pop("q"), args.pop("k"), args.pop("v"), **args)


def test_rejects_wrong_rank(backend):
    bad(backend, r"q: expected shape \(\.\.\., n_q, d_k\) \(at least 2 dimensions\), "
                 r"got shape \(8,\)", q=np.zeros(8))


def test_rejects_mismatched_d_k(backend):
    q, k, v = make_qkv(9)
    bad(backend, r"q and k must have the same d_k.*d_k=8.*d_k=3", k=k[..., :3])


def test_rejects_mismatched_n_k(backend):
    q, k, v = make_qkv(9)
    bad(backend, r"k and v must have the same n_k.*n_k=7.*n_k=6", v=v[..., :6, :])


def test_rejects_mismatched_batch_shapes(backend):
    q, k, v = make_qkv(9)
    bad(backend, r"same batch shape", q=q[:1])


def test_rejects_mask_that_does_not_broadcast(backend):
    bad(backend, r"mask: expected a shape broadcastable to \(\.\.\., n_q, n_k\) = "
                 r"\(2, 3, 5, 7\), got \(5, 6\)", mask=np.ones((5, 6), bool))


def test_rejects_mask_that_would_enlarge_the_batch(backend):
    bad(backend, r"mask: expected a shape broadcastable", mask=np.ones((4, 2, 3, 5, 7), bool))


def test_rejects_non_boolean_mask(backend):
    bad(backend, r"mask: expected a boolean array.*got dtype float64", exc=TypeError,
        mask=np.zeros((5, 7)))


def test_rejects_integer_inputs(backend):
    bad(backend, r"v: expected a floating dtype.*got int64", exc=TypeError,
        v=np.ones((2, 3, 7, 4), dtype=np.int64))


def test_rejects_mixed_dtypes(backend):
    q, k, v = make_qkv(9)
    bad(backend, r"expected one floating dtype.*q is float32, k is float64", exc=TypeError,
        q=q.astype(np.float32))


def test_rejects_nan_input(backend):
    q, k, v = make_qkv(9)
    k = k.copy()
    k[0, 0, 0, 0] = np.nan
    bad(backend, r"k: expected finite values, got NaN", k=k)


def test_rejects_non_finite_scale(backend):
    bad(backend, r"scale: expected a finite real number, got inf", scale=float("inf"))


def test_rejects_mixing_numpy_and_torch():
    q, k, v = make_qkv(9)
    with pytest.raises(TypeError, match=r"cannot mix NumPy arrays and torch tensors.*"
                                        r"k is a torch.Tensor"):
        scaled_dot_product_attention(q, torch.as_tensor(k), v)
    with pytest.raises(TypeError, match=r"mask is a torch.Tensor"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 7, dtype=torch.bool))


def test_rejects_lists():
    with pytest.raises(TypeError, match=r"q: expected a numpy.ndarray or a torch.Tensor, got list"):
        scaled_dot_product_attention([[1.0]], np.ones((1, 1)), np.ones((1, 1)))


@pytest.mark.parametrize("return_weights", [False, True])
def test_overflowing_scores_are_an_error_not_nan(backend, return_weights):
    # Finite inputs whose dot products exceed float32's range: no NaN may come out.
    q = np.full((2, 4), 1e20, dtype=np.float32)
    t = to_backend(q, backend)
    with pytest.raises(ValueError, match=r"scores: expected finite scores.*overflowed dtype float32"):
        scaled_dot_product_attention(t, t, t, return_weights=return_weights)


@pytest.mark.parametrize("value, scale", [(1e20, None), (3e38, 2.0)])
def test_an_overflow_is_an_error_and_nothing_else(backend, value, scale):
    # The guard's sums of squares overflow too (1e20 squared is beyond float32), and so
    # may scale * q (2 * 3e38): for the guard that is a signal, and the caller sees the
    # ValueError alone, no RuntimeWarning.
    t = to_backend(np.full((2, 4), value, dtype=np.float32), backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"scores: expected finite scores"):
            scaled_dot_product_attention(t, t, t, scale=scale)


def test_finite_check_sees_every_kind_of_non_finite(backend):
    q, k, v = make_qkv(10)
    for bad_value in (np.nan, np.inf, -np.inf):
        v2 = v.copy()
        v2[1, 2, 3, 0] = bad_value
        with pytest.raises(ValueError, match=r"v: expected finite values"):
            scaled_dot_product_attention(*(to_backend(x, backend) for x in (q, k, v2)))
