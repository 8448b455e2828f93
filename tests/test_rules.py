"""One rule per input: every public attention path answers the same input the same way.

The paths: the NumPy reference, the torch backend (PyTorch's fused kernel), the weights
path on both libraries, tiled attention on both, and the two multi-head layers."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attncore as ac
from attncore.lab.scaling import row_entropy


def _t(x):
    return None if x is None else torch.from_numpy(np.array(x))


def _np(x):
    return x.detach().numpy() if isinstance(x, torch.Tensor) else x


def sdpa_weights(*a, **kw):
    return ac.scaled_dot_product_attention(*a, return_weights=True, **kw)[0]


PATHS = {
    "numpy": (ac.scaled_dot_product_attention, False),
    "torch fused": (ac.scaled_dot_product_attention, True),
    "numpy weights": (sdpa_weights, False),
    "torch weights": (sdpa_weights, True),
    "tiled numpy": (lambda *a, **kw: ac.tiled_attention(*a, block_size=3, **kw), False),
    "tiled torch": (lambda *a, **kw: ac.tiled_attention(*a, block_size=3, **kw), True),
}


def run(path, q, k, v, **kw):
    fn, on_torch = PATHS[path]
    if on_torch:
        q, k, v = (_t(x) for x in (q, k, v))
        kw = {n: (_t(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    return _np(fn(q, k, v, **kw))


def outcome(path, *args, **kw):
    """The result, or the exception's type and message: what must agree across paths."""
    try:
        return run(path, *args, **kw)
    except (TypeError, ValueError) as err:
        return type(err), str(err)


def assert_same_everywhere(*args, **kw):
    results = {p: outcome(p, *args, **kw) for p in PATHS}
    first = results["numpy"]
    for path, got in results.items():
        if isinstance(first, tuple):
            assert got == first, (path, got, first)
        else:
            assert isinstance(got, np.ndarray), (path, got)
            assert got.shape == first.shape and got.dtype == first.dtype, path
            np.testing.assert_allclose(got, first, rtol=1e-5, atol=1e-6, err_msg=path)
    return first


def qkv(batch=(2,), n_q=4, n_k=5, d_k=3, d_v=2, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(batch + (n_q, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_k)).astype(dtype),
            rng.standard_normal(batch + (n_k, d_v)).astype(dtype))


# --- degenerate sizes ------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [dict(n_k=0), dict(n_q=0), dict(n_q=0, n_k=0),
                                   dict(batch=(0,)), dict(batch=(2, 0)), dict(d_v=0),
                                   dict(batch=())])
@pytest.mark.parametrize("causal", [False, True])
def test_degenerate_sizes_one_answer(sizes, causal):
    q, k, v = qkv(**sizes)
    out = assert_same_everywhere(q, k, v, causal=causal)
    if sizes.get("n_k") == 0:
        # no key at all: the documented "no admissible key" rule, zeros
        assert out.shape == q.shape[:-1] + (v.shape[-1],) and (out == 0).all()


def test_no_keys_gives_zero_weights_of_width_zero():
    q, k, v = qkv(n_k=0)
    for lib in (np.asarray, _t):
        out, w = ac.scaled_dot_product_attention(lib(q), lib(k), lib(v), return_weights=True)
        assert tuple(w.shape) == (2, 4, 0) and (_np(out) == 0).all()


def test_no_keys_keeps_autograd_working():
    q, k, v = (torch.zeros(2, 3, requires_grad=True), torch.zeros(0, 3, requires_grad=True),
               torch.zeros(0, 2, requires_grad=True))
    for fn in (ac.scaled_dot_product_attention, sdpa_weights, ac.tiled_attention):
        out = fn(q, k, v)
        assert out.shape == (2, 2)
        out.sum().backward()
        assert (q.grad == 0).all()


def test_d_k_zero_is_a_value_error_everywhere():
    q, k, v = qkv(d_k=0)
    err = assert_same_everywhere(q, k, v)
    assert err[0] is ValueError and err[1].startswith("q and k: expected d_k >= 1")


# --- flags and scale -------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["causal", "return_weights"])
@pytest.mark.parametrize("value", ["False", "no", 1, 0, None, torch.tensor(True)])
def test_flags_must_be_bools(flag, value):
    q, k, v = qkv()
    paths = PATHS if flag == "causal" else ["numpy", "torch fused"]
    for path in paths:
        with pytest.raises(TypeError, match=rf"{flag}: expected True or False, got "):
            run(path, q, k, v, **{flag: value})


def test_numpy_bools_are_bools():
    q, k, v = qkv()
    a = ac.scaled_dot_product_attention(q, k, v, causal=np.bool_(True))
    np.testing.assert_array_equal(a, ac.scaled_dot_product_attention(q, k, v, causal=True))


@pytest.mark.parametrize("scale", [np.float32(0.5), np.float64(0.5), np.float16(0.5),
                                   np.array(0.5), np.array(0.5, np.float32),
                                   torch.tensor(0.5), torch.tensor(0.5, dtype=torch.float64)])
def test_any_real_scalar_is_a_scale(scale):
    q, k, v = qkv()
    expected = assert_same_everywhere(q, k, v, scale=0.5)
    np.testing.assert_allclose(assert_same_everywhere(q, k, v, scale=scale), expected,
                               rtol=1e-12)


@pytest.mark.parametrize("scale", [np.int64(2), np.int32(2), np.array(2), torch.tensor(2), 2])
def test_integer_scales(scale):
    q, k, v = qkv()
    np.testing.assert_allclose(assert_same_everywhere(q, k, v, scale=scale),
                               assert_same_everywhere(q, k, v, scale=2.0), rtol=1e-12)


@pytest.mark.parametrize("scale, exc, words", [
    (True, TypeError, "scale: expected a real number, got True (bool)"),
    (np.bool_(False), TypeError, "scale: expected a real number, got"),
    (np.array(True), TypeError, "scale: expected a real scalar, got a 0-d array of dtype bool"),
    (np.array([0.5]), TypeError, "scale: expected a real scalar, got an array of shape (1,)"),
    (torch.ones(2), TypeError, "scale: expected a real scalar, got an array of shape (2,)"),
    ("0.5", TypeError, "scale: expected a real number, got '0.5' (str)"),
    (1 + 2j, TypeError, "scale: expected a real number"),
    (math.nan, ValueError, "scale: expected a finite real number, got nan"),
    (np.float32(np.inf), ValueError, "scale: expected a finite real number, got inf"),
])
def test_bad_scales(scale, exc, words):
    q, k, v = qkv()
    err = assert_same_everywhere(q, k, v, scale=scale)
    assert err[0] is exc and err[1].startswith(words), err


# --- values: non-finite inputs and overflow ---------------------------------------------------

@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_named_everywhere_even_when_masked(where, bad):
    q, k, v = qkv()
    arrays = dict(q=q, k=k, v=v)
    arrays[where] = arrays[where].copy()
    row = 0 if where == "q" else 4            # key 4 is masked out for every query
    arrays[where][1, row, 0] = bad
    mask = np.ones((4, 5), bool)
    mask[:, 4] = False
    err = assert_same_everywhere(*arrays.values(), mask=mask)
    assert err == (ValueError, f"{where}: expected finite values, got NaN or infinity in "
                               f"an array of shape {arrays[where].shape}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sign", [1, -1], ids=["to +inf", "to -inf"])
def test_overflowing_scores_one_error_everywhere(dtype, sign):
    # finite inputs whose dot products leave the dtype's range, upwards or downwards (a
    # row of -inf scores would otherwise pass for a fully masked row of zeros)
    big = np.finfo(dtype).max ** 0.5 * 4
    q = np.full((3, 4), big, dtype)
    k = np.full((5, 4), sign * big, dtype)
    v = np.ones((5, 2), dtype)
    err = assert_same_everywhere(q, k, v)
    name = np.dtype(dtype).name
    assert err == (ValueError, f"scores: expected finite scores scale * q @ k^T, got "
                               f"+-infinity (the product overflowed dtype {name}); use a "
                               f"wider dtype or smaller q, k or scale")


def test_masked_overflow_is_still_an_overflow():
    q, k, v = qkv(dtype=np.float32)
    k[0, 3] = 1e30                                        # key 3 of batch 0, masked out
    mask = np.ones((4, 5), bool)
    mask[:, 3] = False
    assert assert_same_everywhere(q * 1e10, k, v, mask=mask)[1].startswith("scores:")


def test_a_huge_scale_overflows_the_same_way():
    q, k, v = qkv(dtype=np.float32)
    assert assert_same_everywhere(q, k, v, scale=1e38)[1].startswith("scores: expected")


def test_half_precision_scores_are_computed_in_float32_everywhere():
    # scores of 40 * 40 * 64 / 8 = 12800 and up, products beyond float16's 65504
    q = np.full((1, 4, 64), 40.0, np.float16)
    q[0, :, 0] = [0.0, 10.0, 20.0, 40.0]
    expected = ac.scaled_dot_product_attention(*(q.astype(np.float32),) * 3)
    out = assert_same_everywhere(q, q, q)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=1e-3)
    b = torch.from_numpy(q).to(torch.bfloat16)
    for fn in (ac.scaled_dot_product_attention, sdpa_weights, ac.tiled_attention):
        got = fn(b, b, b)
        assert got.dtype == torch.bfloat16
        np.testing.assert_allclose(got.float().numpy(), expected, rtol=2e-2)


def test_values_near_the_largest_float_do_not_overflow_any_path():
    # the unnormalised sum of exp(s - m) v over 300 keys would pass float32's range
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((2, n, 4)).astype(np.float32) for n in (3, 300))
    v = np.full((2, 300, 2), 1e37, np.float32)
    v[:, ::2, 1] = -2e37
    v[:, :, 0] *= rng.random(300).astype(np.float32)
    out = assert_same_everywhere(q, k, v)
    assert np.isfinite(out).all()
    ref = ac.scaled_dot_product_attention(q.astype(np.float64), k.astype(np.float64),
                                          v.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-5)


# --- masks -----------------------------------------------------------------------------------

def test_padding_mask_cannot_line_up_with_the_heads_axis():
    # B == H == 2: broadcasting the (B, 1, n) mask from the right would apply batch b's
    # padding to head b, silently. Every path refuses it ...
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 2, 5, 3)) for _ in range(3))
    mask = ac.padding_mask([5, 2], 5)
    assert mask.shape == (2, 1, 5)
    err = assert_same_everywhere(q, k, v, mask=mask)
    assert err[0] is ValueError and err[1].startswith(
        "mask: expected 4 dimensions (one per axis of the scores (2, 2, 5, 5)) or at most "
        "2, got shape (2, 1, 5)")
    assert "mask[:, None]" in err[1]
    # ... and the documented spelling gives each sequence its own padding
    out = assert_same_everywhere(q, k, v, mask=mask[:, None])
    alone = ac.scaled_dot_product_attention(q[1], k[1, :, :2], v[1, :, :2])
    np.testing.assert_allclose(out[1], alone, rtol=1e-12)


def test_masks_that_cannot_be_misaligned_are_accepted():
    q, k, v = qkv(batch=(2, 3))
    for mask in (np.ones(5, bool), np.ones((4, 5), bool), np.ones((1, 4, 5), bool),
                 np.ones((1, 1, 1, 5), bool), np.ones((2, 1, 4, 5), bool), np.array(True)):
        out = assert_same_everywhere(q, k, v, mask=mask)
        np.testing.assert_allclose(out, ac.scaled_dot_product_attention(q, k, v),
                                   rtol=1e-12)


def test_ambiguous_mask_in_multi_head_layers():
    p = ac.init_multihead(8, 2)
    x = np.random.default_rng(0).standard_normal((2, 2, 5, 8))    # two batch axes
    for fn in (ac.multi_head_attention, ac.multi_head_attention_loop):
        with pytest.raises(ValueError, match=r"mask: expected 4 dimensions .* got shape "
                                             r"\(2, 1, 5\).* batch axes of x_q and x_kv"):
            fn(p, x, mask=ac.padding_mask([5, 2], 5))
        # in the caller's terms: x_q's batch, not the internal (batch, heads) shape
        with pytest.raises(ValueError, match=re.escape(
                "mask: expected a shape broadcastable to (..., n_q, n_k) = (2, 2, 5, 5), "
                "got (3, 5, 5)")):
            fn(p, x, mask=np.ones((3, 5, 5), bool))


# --- the multi-head layers: one set of checks for both -----------------------------------------

def _layer_cases():
    p = ac.init_multihead(8, 2)
    x = np.random.default_rng(0).standard_normal((3, 5, 8))
    nan_x = x.copy()
    nan_x[1, 2, 3] = np.nan
    nan_w = ac.init_multihead(8, 2)
    nan_w.w_k[0, 0] = np.inf
    big = ac.init_multihead(8, 2)
    big.w_q *= 1e160
    big.w_k *= 1e160
    return {
        "torch input, numpy params": ((p, torch.from_numpy(x)), TypeError,
                                      "cannot mix NumPy arrays and torch tensors"),
        "float32 input": ((p, x.astype(np.float32)), TypeError,
                          "expected one floating dtype for all inputs, got params is "
                          "float64, x_q is float32"),
        "integer input": ((p, np.zeros((3, 5, 8), int)), TypeError,
                          "x_q: expected a floating dtype"),
        "not params": ((x, x), TypeError, "params: expected a MultiHeadParams"),
        "width": ((p, x[..., :6]), ValueError, "x_q: expected last axis d_model=8"),
        "batch": ((p, x, x[:2]), ValueError,
                  "x_q and x_kv must have the same batch shape (...): got x_q (3, 5, 8), "
                  "x_kv (2, 5, 8)"),
        "rank": ((p, x[0, 0]), ValueError, "x_q: expected shape (..., n_q, d_model)"),
        "causal flag": ((p, x), TypeError, "causal: expected True or False, got 'yes'"),
        "NaN in x_q": ((p, nan_x), ValueError, "x_q: expected finite values"),
        "NaN in x_kv": ((p, x, nan_x), ValueError, "x_kv: expected finite values"),
        "inf in a weight": ((nan_w, x), ValueError, "params.w_k: expected finite values"),
        "overflow": ((big, x), ValueError, "scores: expected finite scores (x_q @ params.w_q "
                                           "+ params.b_q) @ (x_kv @ params.w_k + "
                                           "params.b_k)^T / sqrt(d_head), per head, got "
                                           "+-infinity (the product overflowed dtype "
                                           "float64); use a wider dtype or smaller x_q, "
                                           "x_kv or params"),
    }


@pytest.mark.parametrize("case", list(_layer_cases()))
def test_both_layers_check_the_same(case):
    args, exc, words = _layer_cases()[case]
    kw = {"causal": "yes"} if case == "causal flag" else {}
    messages = []
    for fn in (ac.multi_head_attention, ac.multi_head_attention_loop):
        with pytest.raises(exc) as info:
            fn(*args, **kw)
        assert str(info.value).startswith(words), str(info.value)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "(3, 2, 1, 5, 5)" not in messages[0]         # never an internal shape


def test_layer_overflow_in_the_projections_is_named():
    p = ac.init_multihead(8, 2, dtype=np.float32)
    p.w_v *= np.float32(1e30)
    x = np.full((3, 5, 8), 1e10, np.float32)
    for fn in (ac.multi_head_attention, ac.multi_head_attention_loop):
        with pytest.raises(ValueError, match=r"x_q, x_kv, params: expected projections "
                                             r"that fit in dtype float32, got an overflow "
                                             r"in x_kv @ params.w_v"):
            fn(p, x)


@pytest.mark.parametrize("args, exc, words", [
    ((0, 1), ValueError, "d_model: expected a positive integer, got 0"),
    ((-4, 2), ValueError, "d_model: expected a positive integer, got -4"),
    ((8.0, 2), TypeError, "d_model: expected a positive integer, got 8.0 (float)"),
    ((8, 2.0), TypeError, "num_heads: expected a positive integer, got 2.0 (float)"),
    ((8, 0), ValueError, "num_heads: expected a positive integer, got 0"),
    ((8, True), TypeError, "num_heads: expected a positive integer, got True (bool)"),
    ((8, 3), ValueError, "num_heads: expected a divisor of d_model=8, got 3"),
])
def test_init_multihead_sizes(args, exc, words):
    with pytest.raises(exc, match=re.escape(words)):
        ac.init_multihead(*args)


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"d_kv": 0}, ValueError, "d_kv: expected a positive integer, got 0"),
    ({"bias": 1}, TypeError, "bias: expected True or False, got 1"),
    ({"seed": -1}, ValueError, "seed: expected a non-negative integer, got -1"),
    ({"dtype": np.int32}, TypeError, "dtype: expected float16, float32 or float64, got int32"),
    ({"dtype": torch.float32}, TypeError, "dtype: expected a NumPy floating dtype for "
                                          "backend='numpy'"),
    ({"backend": "jax"}, ValueError, "backend: expected 'numpy' or 'torch', got 'jax'"),
])
def test_init_multihead_other_arguments(kwargs, exc, words):
    with pytest.raises(exc, match=re.escape(words)):
        ac.init_multihead(8, 2, **kwargs)


def test_params_from_torch_describes_the_real_problem():
    with pytest.raises(TypeError, match=r"mha: expected a torch.nn.MultiheadAttention, got "
                                        r"Linear"):
        ac.params_from_torch(torch.nn.Linear(8, 8))
    with pytest.raises(TypeError, match=r"params: expected a MultiHeadParams, got dict"):
        ac.params_to_torch({})


def test_unbatched_layer_on_torch_uses_the_fused_kernel(monkeypatch):
    seen = []
    original = F.scaled_dot_product_attention

    def spy(q, *args, **kwargs):
        seen.append(q.dim())
        return original(q, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    p = ac.init_multihead(8, 2, backend="torch")
    x = torch.randn(5, 8, dtype=torch.float64)
    for inputs in (x, x[None], x[None, None]):
        ac.multi_head_attention(p, inputs)
    q = torch.randn(5, 4, dtype=torch.float64)
    for inputs in (q, q[None], q[None, None], q[None, None, None]):
        ac.scaled_dot_product_attention(inputs, inputs, inputs, mask=torch.ones(5, 5).bool())
    # PyTorch's fused CPU kernel takes 4-D inputs only: every call got them
    assert seen == [4] * 7


# --- the lower-level functions ---------------------------------------------------------------

def test_softmax_axis_none_is_a_type_error():
    with pytest.raises(TypeError, match=r"axis: expected an integer in \[-1, 0\] \(one axis\), "
                                        r"got None"):
        ac.softmax(np.zeros(3), axis=None)
    with pytest.raises(TypeError, match=r"axis: expected an integer"):
        ac.softmax(np.zeros(3), axis=1.0)


@pytest.mark.parametrize("lib", [np.asarray, _t])
def test_softmax_over_an_empty_axis_is_empty(lib):
    x = lib(np.zeros((3, 0)))
    assert tuple(ac.softmax(x).shape) == (3, 0)
    assert tuple(ac.softmax(lib(np.zeros((0, 4)))).shape) == (0, 4)


@pytest.mark.parametrize("lib", [np.asarray, _t])
def test_softmax_state_blames_the_scores_not_overflow(lib):
    s = np.array([[0.0, np.nan], [1.0, 2.0]])
    with pytest.raises(ValueError) as info:
        ac.softmax_state(lib(s), lib(np.ones((2, 3))))
    assert str(info.value) == ("scores: expected finite scores, or -inf for a masked key, "
                               "got NaN or +inf")
    assert "overflow" not in str(info.value)
    with pytest.raises(ValueError, match=r"v: expected finite values"):
        ac.softmax_state(lib(np.zeros((2, 2))), lib(np.full((2, 3), np.nan)))


@pytest.mark.parametrize("lib", [np.asarray, _t])
def test_merge_refuses_states_of_different_rows(lib):
    six = ac.softmax_state(lib(np.zeros((6, 3))), lib(np.ones((3, 2))))
    one = ac.softmax_state(lib(np.zeros((1, 3))), lib(np.ones((3, 2))))
    wide = ac.softmax_state(lib(np.zeros((6, 3))), lib(np.ones((3, 4))))
    for a, b in ((six, one), (one, six), (six, wide)):
        with pytest.raises(ValueError, match=r"a and b: expected states of the same query "
                                             r"rows and value width \(nothing is broadcast\)"):
            ac.merge_softmax_states(a, b)
    with pytest.raises(TypeError, match=r"b: expected a SoftmaxState\(max, sum, out\), got "
                                        r"tuple"):
        ac.merge_softmax_states(six, tuple(six))
    bad = ac.SoftmaxState(six.max, six.sum[:3], six.out)
    with pytest.raises(ValueError, match=r"state: expected max and sum of shape"):
        ac.finalize_softmax_state(bad)
    with pytest.raises(TypeError, match=r"into_a: expected True or False"):
        ac.merge_softmax_states(six, six, into_a="yes")
    negative = ac.SoftmaxState(six.max, -six.sum, six.out)
    with pytest.raises(ValueError, match=r"a.sum: expected finite sums >= 0"):
        ac.merge_softmax_states(negative, six)


@pytest.mark.parametrize("p, words", [
    (np.array([2.0, -1.0]), "p: expected probabilities (finite and >= 0), got a negative"),
    (np.array([0.5, np.nan]), "p: expected probabilities (finite and >= 0), got a negative "
                              "or non-finite entry"),
    (np.array([[0.5, 0.25], [0.5, 0.5]]), "p: expected every slice along axis 1 to sum to 1 "
                                          "(a probability distribution), got a sum of 0.75 "
                                          "at index (0,)"),
    (np.zeros((2, 3)), "got a sum of 0 at index (0,)"),
    (np.array(1.0), "p: expected an array with at least 1 dimension"),
])
def test_row_entropy_refuses_what_is_not_a_distribution(p, words):
    for lib in (np.asarray, _t):
        with pytest.raises(ValueError, match=re.escape(words)):
            row_entropy(lib(p))
    with pytest.raises(TypeError, match=r"axis: expected an integer"):
        row_entropy(np.ones(2) / 2, axis=None)


def test_row_entropy_accepts_rounding():
    p = ac.softmax(np.random.default_rng(0).standard_normal((4, 1000)).astype(np.float32))
    h = row_entropy(p)
    assert ((h >= 0) & (h <= math.log(1000) + 1e-4)).all()


# --- torch.func.vmap ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"return_weights": True},
                                {"mask": "padding"}])
def test_vmap_over_attention(kw):
    from torch.func import vmap

    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    if kw.get("mask"):
        kw = {"mask": torch.from_numpy(ac.padding_mask([5, 2, 4], 5))[:, None]}
        mask = kw.pop("mask")

        def one(q, k, v, m):
            return ac.scaled_dot_product_attention(q, k, v, mask=m)
        got = vmap(one)(q, k, v, mask)
        expected = ac.scaled_dot_product_attention(q, k, v, mask=mask)
    else:
        def one(q, k, v):
            res = ac.scaled_dot_product_attention(q, k, v, **kw)
            return res[0] if kw.get("return_weights") else res
        got = vmap(one)(q, k, v)
        expected = one(q, k, v)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"mask": "padding"}])
def test_vmap_over_tiled_attention(kw):
    from torch.func import vmap

    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    if kw.get("mask"):
        mask = torch.from_numpy(ac.padding_mask([5, 2, 4], 5))[:, None]
        got = vmap(lambda a, b, c, m: ac.tiled_attention(a, b, c, mask=m, block_size=2))(
            q, k, v, mask)
        expected = ac.scaled_dot_product_attention(q, k, v, mask=mask)
    else:
        got = vmap(lambda a, b, c: ac.tiled_attention(a, b, c, block_size=2, **kw))(q, k, v)
        expected = ac.scaled_dot_product_attention(q, k, v, **kw)
    torch.testing.assert_close(got, expected)


def test_the_backward_by_hand_names_the_transforms_it_refuses():
    from torch.func import grad, vmap

    q = torch.randn(3, 5, 4, dtype=torch.float64)
    out, lse = ac.tiled_attention(q, q, q, return_lse=True)

    def backward(x):
        return ac.tiled_attention_backward(x, q, q, torch.ones_like(out), out=out,
                                           lse=lse)[0]
    with pytest.raises(NotImplementedError, match=r"tiled_attention_backward: torch.func "
                                                  r"transforms \(grad, jacrev, jvp, jacfwd\)"):
        grad(lambda x: backward(x).sum())(q)
    with pytest.raises(NotImplementedError, match=r"torch.func.vmap is not supported"):
        vmap(lambda a, o, s, d: ac.tiled_attention_backward(a, a, a, d, out=o, lse=s))(
            q, out, lse, torch.ones_like(out))


def test_grad_transform_over_attention_keeps_the_checks():
    from torch.func import grad

    q = torch.randn(5, 4, dtype=torch.float64)
    g = grad(lambda x: ac.scaled_dot_product_attention(x, x, x).sum())(q)
    assert g.shape == q.shape
    bad = q.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"q: expected finite values"):
        grad(lambda x: ac.scaled_dot_product_attention(x, x, x).sum())(bad)


@pytest.mark.parametrize("scale", [0.0, -0.0, -1.0, 1e-51, -3.5])
def test_non_positive_and_tiny_scales_with_causal(scale):
    # PyTorch's fused kernel alone gives NaN here; attncore must not
    q, k, v = qkv()
    out = assert_same_everywhere(q, k, v, causal=True, scale=scale)
    assert np.isfinite(out).all()
    if abs(scale) < 1e-40:                        # uniform over keys 0..i
        np.testing.assert_allclose(out[:, 2], v[:, :3].mean(axis=1), rtol=1e-12)


# --- the RoPE layer: the same checks, in terms of its one input x --------------------------------

def test_rope_layer_checks_like_the_other_layers():
    p = ac.init_multihead(8, 2)
    x = np.random.default_rng(0).standard_normal((2, 5, 8))
    nan_x = x.copy()
    nan_x[0, 1, 2] = np.nan
    cases = [
        ((p, torch.from_numpy(x)), {}, TypeError, "cannot mix NumPy arrays and torch tensors"),
        ((p, x.astype(np.float32)), {}, TypeError,
         "expected one floating dtype for all inputs, got params is float64, x is float32"),
        ((x, x), {}, TypeError, "params: expected a MultiHeadParams"),
        ((p, nan_x), {}, ValueError, "x: expected finite values"),
        ((p, x), {"causal": "yes"}, TypeError, "causal: expected True or False"),
        ((p, x), {"return_weights": 1}, TypeError, "return_weights: expected True or False"),
        ((p, np.random.default_rng(1).standard_normal((2, 2, 5, 8))),
         {"mask": ac.padding_mask([5, 2], 5)}, ValueError,
         "mask: expected 4 dimensions (one per axis of the scores (2, 2, 5, 5))"),
    ]
    for args, kw, exc, words in cases:
        with pytest.raises(exc) as info:
            ac.rope_multi_head_attention(*args, **kw)
        assert str(info.value).startswith(words), str(info.value)


def test_rope_layer_on_torch_uses_the_fused_kernel_and_zero_keys():
    p = ac.init_multihead(8, 2, backend="torch")
    x = torch.randn(5, 8, dtype=torch.float64)
    out = ac.rope_multi_head_attention(p, x, causal=True)
    assert out.shape == (5, 8)
    mask = torch.zeros(5, 5, dtype=torch.bool)
    out = ac.rope_multi_head_attention(p, x, mask=mask)
    expected = (p.b_o.expand(5, 8) if p.b_o is not None else torch.zeros(5, 8))
    torch.testing.assert_close(out, expected)      # no admissible key: zero heads, then W_O


# --- the unclear errors an outside attack found (issue 29): each names its argument ------------

def _float8():
    return torch.randn(3, 4).to(torch.float8_e4m3fn)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("call, exc, words", [
    (lambda: ac.scaled_dot_product_attention(np.matrix(np.ones((3, 4))), np.ones((3, 4)),
                                             np.ones((3, 4))),
     TypeError, "q: expected a numpy.ndarray, got a numpy.matrix (always 2-D, and its * is "
                "a matrix product); convert it with np.asarray(q)"),
    (lambda: ac.tiled_attention(np.ones((3, 4)), np.ma.masked_array(np.ones((3, 4))),
                                np.ones((3, 4))),
     TypeError, "k: expected a numpy.ndarray, got a numpy.ma.MaskedArray (attncore would "
                "ignore its mask"),
    (lambda: ac.softmax(np.ma.masked_array(np.ones(3), mask=[0, 1, 0])),
     TypeError, "x: expected a numpy.ndarray, got a numpy.ma.MaskedArray"),
    (lambda: ac.scaled_dot_product_attention(_float8(), _float8(), _float8()),
     TypeError, "q: expected a floating dtype (float16, bfloat16, float32 or float64), got "
                "float8_e4m3fn (an 8-bit float"),
    (lambda: ac.tiled_attention(_float8(), _float8(), _float8()),
     TypeError, "q: expected a floating dtype (float16, bfloat16, float32 or float64), got "
                "float8_e4m3fn"),
    (lambda: ac.softmax(torch.zeros(3).to(torch.float8_e5m2)),
     TypeError, "x: expected a floating dtype (float16, bfloat16, float32 or float64), got "
                "float8_e5m2"),
    (lambda: ac.scaled_dot_product_attention(*(np.ones((3, 4), np.longdouble),) * 3),
     TypeError, "q: expected a floating dtype (float16, bfloat16, float32 or float64), got "
                f"{np.dtype(np.longdouble).name} (NumPy's longdouble"),
    (lambda: ac.softmax(np.ones(3, np.longdouble)),
     TypeError, "(NumPy's longdouble, whose precision depends on the platform"),
    (lambda: ac.KVCache(3, (2,), 4, dtype=torch.float8_e4m3fn, backend="torch"),
     TypeError, "dtype: expected torch.float16, torch.bfloat16, torch.float32 or "
                "torch.float64, got torch.float8_e4m3fn"),
    (lambda: ac.init_multihead(8, 2, dtype=torch.float8_e4m3fn, backend="torch"),
     TypeError, "dtype: expected torch.float16, torch.bfloat16, torch.float32 or "
                "torch.float64, got torch.float8_e4m3fn"),
    (lambda: ac.init_multihead(8, 2, dtype=np.longdouble),
     TypeError, "dtype: expected float16, float32 or float64, got "
                f"{np.dtype(np.longdouble).name}"),
    (lambda: ac.decode(ac.init_multihead(8, 2, d_kv=6), np.zeros((3, 8))),
     ValueError, "params: expected a self-attention layer (d_kv == d_model) to decode, got "
                 "d_kv=6, d_model=8"),
    (lambda: ac.rope(torch.randn(5, 0)),
     ValueError, "x: expected a positive even last axis d (RoPE rotates pairs of features), "
                 "got shape (5, 0) with d=0"),
    (lambda: ac.padding_mask(np.array([2**64 - 1], dtype=np.uint64), 4),
     ValueError, "lengths: expected every length in [0, n_k] = [0, 4], got lengths[0] = "
                 "18446744073709551615"),
    (lambda: ac.params_from_torch(torch.nn.MultiheadAttention(8, 2, dropout=0.1,
                                                              batch_first=True)),
     ValueError, "mha: dropout=0.1 drops random attention weights in training, which "
                 "attncore's MultiHeadParams cannot hold; expected dropout=0.0"),
])
def test_unclear_errors_name_the_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_what_is_refused_is_not_refused_when_it_is_plain():
    # the same values as a plain array, an unsigned length in range, and half precision
    # (float16, bfloat16) are accepted
    x = np.ones((3, 4))
    assert ac.scaled_dot_product_attention(np.asarray(np.matrix(x)), x, x).shape == (3, 4)
    assert ac.padding_mask(np.array([3], dtype=np.uint64), 4).tolist() == \
        [[[True, True, True, False]]]
    for dtype in (torch.float16, torch.bfloat16):
        q = torch.randn(3, 4).to(dtype)
        assert ac.tiled_attention(q, q, q).dtype == dtype

