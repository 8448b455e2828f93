"""Grouped-query attention: enable_gqa on every attention path, n_kv_heads in the layers.

PyTorch's ``F.scaled_dot_product_attention(..., enable_gqa=True)`` is the reference: query
head ``h`` attends with key/value head ``h // (H_q // H_kv)``."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac
from attncore.lab.profiling import peak_memory_bytes
from conftest import TOL, to_backend, to_numpy
from test_rules import PATHS, assert_same_everywhere, outcome


def gqa_inputs(batch=(2,), h_q=6, h_kv=3, n_q=5, n_k=7, d_k=4, d_v=3, dtype=np.float64,
               seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(batch + (h_q, n_q, d_k)).astype(dtype),
            rng.standard_normal(batch + (h_kv, n_k, d_k)).astype(dtype),
            rng.standard_normal(batch + (h_kv, n_k, d_v)).astype(dtype))


def torch_reference(q, k, v, mask=None, causal=False):
    """PyTorch's own grouped-query attention, in float64 on the CPU."""
    t = [torch.from_numpy(np.asarray(x, np.float64)) for x in (q, k, v)]
    m = None if mask is None else torch.from_numpy(np.asarray(mask))
    return F.scaled_dot_product_attention(*t, attn_mask=m, is_causal=causal,
                                          enable_gqa=True).numpy()


# --- parity with PyTorch, on every path ------------------------------------------------------

@pytest.mark.parametrize("heads", [(6, 3), (6, 1), (4, 2), (8, 8)], ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"mask": "heads"}, {"mask": "2d"},
                                {"mask": "one-head"}], ids=lambda kw: str(kw))
def test_parity_with_pytorch_enable_gqa(backend, dtype, heads, kw):
    h_q, h_kv = heads
    q, k, v = gqa_inputs(h_q=h_q, h_kv=h_kv, dtype=dtype)
    rng = np.random.default_rng(1)
    masks = {"heads": rng.random((2, h_q, 5, 7)) < 0.7, "2d": rng.random((5, 7)) < 0.7,
             "one-head": rng.random((2, 1, 5, 7)) < 0.7}
    kw = {"mask": masks[kw["mask"]]} if "mask" in kw else kw
    expected = torch_reference(q, k, v, **kw)
    if "mask" in kw:                     # attncore's rule for a row without keys: zeros
        expected = np.where(kw["mask"].any(-1, keepdims=True), expected, 0.0)
    args = [to_backend(x, backend) for x in (q, k, v)]
    kw_b = {n: to_backend(x, backend) if isinstance(x, np.ndarray) else x for n, x in kw.items()}
    got = {"fused": ac.scaled_dot_product_attention(*args, enable_gqa=True, **kw_b),
           "weights": ac.scaled_dot_product_attention(*args, enable_gqa=True,
                                                      return_weights=True, **kw_b)[0],
           "tiled": ac.tiled_attention(*args, enable_gqa=True, block_size=3, **kw_b)}
    for path, out in got.items():
        assert tuple(out.shape) == (2, h_q, 5, 3), path
        np.testing.assert_allclose(to_numpy(out), expected, rtol=TOL[dtype], atol=TOL[dtype],
                                   err_msg=path)


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)], ids=lambda b: f"batch{b}")
def test_any_number_of_leading_axes(batch):
    q, k, v = gqa_inputs(batch=batch, h_q=4, h_kv=2)
    expected = torch_reference(q.reshape((-1,) + q.shape[-3:]), k.reshape((-1,) + k.shape[-3:]),
                               v.reshape((-1,) + v.shape[-3:])).reshape(q.shape[:-1] + (3,))
    for path in PATHS:
        fn, on_torch = PATHS[path]
        args = [torch.from_numpy(x) if on_torch else x for x in (q, k, v)]
        np.testing.assert_allclose(to_numpy(fn(*args, enable_gqa=True)), expected, rtol=1e-12,
                                   atol=1e-12, err_msg=path)


def test_gqa_is_attention_with_the_key_value_heads_repeated():
    q, k, v = gqa_inputs(h_q=8, h_kv=2)
    repeated = [np.repeat(x, 4, axis=-3) for x in (k, v)]
    for causal in (False, True):
        out, w = ac.scaled_dot_product_attention(q, k, v, enable_gqa=True, causal=causal,
                                                 return_weights=True)
        out_r, w_r = ac.scaled_dot_product_attention(q, *repeated, causal=causal,
                                                     return_weights=True)
        np.testing.assert_allclose(out, out_r, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(w, w_r, rtol=1e-13, atol=1e-13)
        assert w.shape == (2, 8, 5, 7)
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("to", [np.asarray, torch.from_numpy], ids=["numpy", "torch"])
def test_tiled_row_log_sum_exp_with_grouped_heads(to):
    # return_lse and enable_gqa together: the log-sum-exp comes back in q's head layout,
    # equal to that of the key/value heads repeated, and feeds the tiled backward pass.
    q, k, v = (to(x) for x in gqa_inputs(h_q=8, h_kv=2))
    repeated = [np.repeat(np.asarray(x), 4, axis=-3) for x in (k, v)]
    for causal in (False, True):
        out, lse = ac.tiled_attention(q, k, v, enable_gqa=True, causal=causal,
                                      block_size=3, return_lse=True)
        out_r, lse_r = ac.tiled_attention(np.asarray(q), *repeated, causal=causal,
                                          block_size=3, return_lse=True)
        assert tuple(lse.shape) == (2, 8, 5)
        np.testing.assert_allclose(np.asarray(out), out_r, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(np.asarray(lse), lse_r, rtol=1e-13, atol=1e-13)


def test_equal_head_counts_with_enable_gqa_change_nothing():
    q, k, v = gqa_inputs(h_q=3, h_kv=3)
    for path in PATHS:
        np.testing.assert_array_equal(outcome(path, q, k, v, enable_gqa=True),
                                      outcome(path, q, k, v), err_msg=path)
    q2 = q[0, 0]                                 # 2-D inputs: no heads axis, nothing to group
    np.testing.assert_array_equal(
        ac.scaled_dot_product_attention(q2, k[0, 0], v[0, 0], enable_gqa=True),
        ac.scaled_dot_product_attention(q2, k[0, 0], v[0, 0]))


@settings(max_examples=40, deadline=None)
@given(h_kv=st.integers(1, 3), group=st.integers(1, 4), n_q=st.integers(0, 6),
       n_k=st.integers(0, 6), causal=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_property_grouped_equals_repeated(h_kv, group, n_q, n_k, causal, seed):
    q, k, v = gqa_inputs(batch=(2,), h_q=h_kv * group, h_kv=h_kv, n_q=n_q, n_k=n_k, seed=seed)
    repeated = [np.repeat(x, group, axis=-3) for x in (k, v)]
    expected = ac.scaled_dot_product_attention(q, *repeated, causal=causal)
    for path in PATHS:
        fn, on_torch = PATHS[path]
        args = [torch.from_numpy(x) if on_torch else x for x in (q, k, v)]
        np.testing.assert_allclose(to_numpy(fn(*args, enable_gqa=True, causal=causal)),
                                   expected, rtol=1e-11, atol=1e-11, err_msg=path)


# --- one rule for bad input ------------------------------------------------------------------

def test_without_enable_gqa_mismatched_heads_keep_their_error():
    q, k, v = gqa_inputs(h_q=4, h_kv=2)
    err = assert_same_everywhere(q, k, v)
    assert err == (ValueError, "q, k and v must have the same batch shape (...): got q "
                               "(2, 4, 5, 4), k (2, 2, 7, 4), v (2, 2, 7, 3)")
    assert assert_same_everywhere(q, k, v, enable_gqa=False) == err


@pytest.mark.parametrize("shapes, words", [
    (((2, 6, 5, 4), (2, 4, 7, 4), (2, 4, 7, 3)),
     "enable_gqa=True: expected the number of query heads (axis -3 of q) to be a positive "
     "multiple of the number of key/value heads (axis -3 of k and v), got q of shape "
     "(2, 6, 5, 4) (6 heads) and k of shape (2, 4, 7, 4) (4 heads)"),
    (((2, 2, 5, 4), (2, 4, 7, 4), (2, 4, 7, 3)), "(2 heads) and k of shape (2, 4, 7, 4) (4 heads)"),
    (((2, 4, 5, 4), (2, 0, 7, 4), (2, 0, 7, 3)), "(4 heads) and k of shape (2, 0, 7, 4) (0 heads)"),
    (((2, 4, 5, 4), (2, 2, 7, 4), (2, 1, 7, 3)),
     "k and v must have the same number of heads (axis -3): k has shape (2, 2, 7, 4) (2 "
     "heads), v has shape (2, 1, 7, 3) (1 heads)"),
    (((2, 4, 5, 4), (3, 2, 7, 4), (3, 2, 7, 3)),
     "q, k and v must have the same batch shape (...) apart from the heads axis -3 "
     "(enable_gqa=True): got q (2, 4, 5, 4), k (3, 2, 7, 4), v (3, 2, 7, 3)"),
    (((4, 5, 4), (1, 2, 7, 4), (1, 2, 7, 3)), "apart from the heads axis -3"),
    (((5, 4), (7, 4), (6, 3)), "k and v must have the same n_k"),
])
def test_bad_grouped_shapes_one_error_everywhere(shapes, words):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s) for s in shapes)
    err = assert_same_everywhere(q, k, v, enable_gqa=True)
    assert err[0] is ValueError and words in err[1], err


@pytest.mark.parametrize("value", ["True", 1, None, torch.tensor(True)])
def test_enable_gqa_must_be_a_bool(value):
    q, k, v = gqa_inputs()
    err = assert_same_everywhere(q, k, v, enable_gqa=value)
    assert err[0] is TypeError and err[1].startswith("enable_gqa: expected True or False, got ")
    q, k, v = gqa_inputs(h_q=2, h_kv=2)             # equal heads (the fast path) too
    assert assert_same_everywhere(q, k, v, enable_gqa=value) == err
    assert ac.scaled_dot_product_attention(q, k, v, enable_gqa=np.bool_(True)).shape == \
        (2, 2, 5, 3)


def test_mask_with_the_wrong_number_of_heads_is_refused():
    q, k, v = gqa_inputs(h_q=4, h_kv=2)
    err = assert_same_everywhere(q, k, v, enable_gqa=True, mask=np.ones((2, 2, 5, 7), bool))
    assert err[0] is ValueError and err[1].startswith(
        "mask: expected a shape broadcastable to (..., n_q, n_k) = (2, 4, 5, 7), got "
        "(2, 2, 5, 7)")


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_non_finite_input_named_with_its_own_shape(where):
    arrays = dict(zip("qkv", gqa_inputs(h_q=4, h_kv=2)))
    arrays[where][1, 1, 0, 0] = np.nan
    err = assert_same_everywhere(*arrays.values(), enable_gqa=True)
    assert err == (ValueError, f"{where}: expected finite values, got NaN or infinity in an "
                               f"array of shape {arrays[where].shape}")


def test_overflow_in_a_group_is_an_overflow_everywhere():
    q, k, v = gqa_inputs(h_q=4, h_kv=2, dtype=np.float32)
    k[1, 1] *= np.float32(1e20)
    err = assert_same_everywhere(q * np.float32(1e20), k, v, enable_gqa=True)
    assert err[0] is ValueError and err[1].startswith("scores: expected finite scores")


# --- how it is computed ----------------------------------------------------------------------

def test_numpy_shares_keys_and_values_without_copies():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((8, 1, 64))
    k, v = (rng.standard_normal((1, 50_000, 64)) for _ in range(2))     # 25.6 MB each
    grouped = peak_memory_bytes(lambda: ac.scaled_dot_product_attention(q, k, v,
                                                                        enable_gqa=True))
    scores = 8 * 50_000 * 8
    assert grouped < 2 * scores + 10**6, grouped       # the scores, not 8 copies of k and v
    for fn in (lambda: ac.tiled_attention(q, k, v, enable_gqa=True, block_size=4096),):
        assert peak_memory_bytes(fn) < k.nbytes


def test_torch_passes_enable_gqa_to_the_fused_kernel(monkeypatch):
    seen = []
    original = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        seen.append((tuple(q.shape), tuple(k.shape), kwargs.get("enable_gqa", False)))
        return original(q, k, v, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    q, k, v = (torch.from_numpy(x) for x in gqa_inputs(batch=(2, 3), h_q=4, h_kv=2))
    ac.scaled_dot_product_attention(q, k, v, enable_gqa=True, causal=True)
    ac.scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True)
    assert seen == [((6, 4, 5, 4), (6, 2, 7, 4), True), ((1, 4, 5, 4), (1, 2, 7, 4), True)]


def test_gradients_match_pytorch():
    q, k, v = gqa_inputs(h_q=6, h_kv=2)
    ref = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*ref, is_causal=True, enable_gqa=True).pow(2).sum().backward()
    for path in ("torch fused", "torch weights", "tiled torch"):
        fn = PATHS[path][0]
        t = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
        fn(*t, causal=True, enable_gqa=True).pow(2).sum().backward()
        for a, b in zip(t, ref):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-10, msg=path)


def test_vmap_over_grouped_attention():
    from torch.func import vmap

    q, k, v = (torch.from_numpy(x) for x in gqa_inputs(batch=(3,), h_q=4, h_kv=2))
    got = vmap(lambda a, b, c: ac.scaled_dot_product_attention(a, b, c, enable_gqa=True))(
        q, k, v)
    torch.testing.assert_close(got, ac.scaled_dot_product_attention(q, k, v, enable_gqa=True))


# --- the multi-head layers with n_kv_heads ---------------------------------------------------

@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_layer_equals_pytorch_and_the_loop(backend, dtype, n_kv_heads):
    device = "cuda" if backend == "torch-cuda" else None
    p = ac.init_multihead(16, 4, n_kv_heads=n_kv_heads, seed=3, dtype=dtype)
    assert p.n_kv_heads == n_kv_heads and p.w_k.shape == p.w_v.shape == (16, 4 * n_kv_heads)
    assert p.num_parameters() == 2 * 16 * 16 + 2 * 16 * 4 * n_kv_heads + 2 * 16 + \
        2 * 4 * n_kv_heads
    for n in ("b_q", "b_k", "b_v", "b_o"):                 # non-zero biases
        getattr(p, n)[:] = np.random.default_rng(4).standard_normal(getattr(p, n).shape)
    x = np.random.default_rng(5).standard_normal((2, 6, 16)).astype(dtype)
    q = ac.split_heads(x @ p.w_q + p.b_q, 4)
    k = ac.split_heads(x @ p.w_k + p.b_k, n_kv_heads)
    v = ac.split_heads(x @ p.w_v + p.b_v, n_kv_heads)
    expected = ac.merge_heads(torch_reference(q, k, v, causal=True)) @ p.w_o + p.b_o
    if backend != "numpy":
        p = ac.MultiHeadParams(num_heads=4, **{n: to_backend(getattr(p, n), backend) for n in
                                               ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k",
                                                "b_v", "b_o")})
        assert p.w_q.device.type == (device or "cpu")
    xb = to_backend(x, backend)
    for fn in (ac.multi_head_attention, ac.multi_head_attention_loop):
        np.testing.assert_allclose(to_numpy(fn(p, xb, causal=True)), expected,
                                   rtol=10 * TOL[dtype], atol=10 * TOL[dtype])
    out, w = ac.multi_head_attention(p, xb, causal=True, return_weights=True)
    assert tuple(w.shape) == (2, 4, 6, 6)


def test_query_heads_of_a_group_keep_their_own_patterns():
    p = ac.init_multihead(16, 4, n_kv_heads=1, seed=0)
    x = np.random.default_rng(0).standard_normal((6, 16))
    _, w = ac.multi_head_attention(p, x, return_weights=True)
    # one key/value head, four query heads: four different attention patterns
    assert min(np.abs(w[a] - w[b]).max() for a in range(4) for b in range(a)) > 1e-3


def test_default_n_kv_heads_draws_the_same_layer():
    for backend in ("numpy", "torch"):
        a = ac.init_multihead(12, 3, seed=7, backend=backend)
        b = ac.init_multihead(12, 3, n_kv_heads=3, seed=7, backend=backend)
        for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
            np.testing.assert_array_equal(to_numpy(getattr(a, n)), to_numpy(getattr(b, n)))


@pytest.mark.parametrize("value, exc, words", [
    (3, ValueError, "n_kv_heads: expected a divisor of num_heads=4 (each key/value head "
                    "serves the same number of query heads), got 3"),
    (0, ValueError, "n_kv_heads: expected a positive integer, got 0"),
    (8, ValueError, "n_kv_heads: expected a divisor of num_heads=4"),
    (2.0, TypeError, "n_kv_heads: expected a positive integer, got 2.0 (float)"),
    (True, TypeError, "n_kv_heads: expected a positive integer, got True (bool)"),
])
def test_init_multihead_n_kv_heads_is_checked(value, exc, words):
    with pytest.raises(exc, match=re.escape(words)):
        ac.init_multihead(16, 4, n_kv_heads=value)


def test_key_value_width_must_be_whole_heads_dividing_the_query_heads():
    p = ac.init_multihead(16, 4)
    with pytest.raises(ValueError, match=re.escape(
            "w_k: expected shape (d_kv, n_kv_heads * d_head) with d_kv >= 1 and n_kv_heads a "
            "divisor of num_heads=4 (d_head=4: a width of 16, 8 or 4), got (16, 12)")):
        ac.MultiHeadParams(p.w_q, p.w_k[:, :12], p.w_v[:, :12], p.w_o, p.b_q, p.b_k[:12],
                           p.b_v[:12], p.b_o, 4)
    with pytest.raises(ValueError, match=re.escape(
            "w_v: expected shape (16, 8) for d_model=16, d_kv=16, n_kv_heads=2, got (16, 16)")):
        ac.MultiHeadParams(p.w_q, p.w_k[:, :8], p.w_v, p.w_o, p.b_q, p.b_k[:8], p.b_v, p.b_o, 4)
    with pytest.raises(ValueError, match=re.escape("b_k: expected shape (8,)")):
        ac.MultiHeadParams(p.w_q, p.w_k[:, :8], p.w_v[:, :8], p.w_o, p.b_q, p.b_k, p.b_v[:8],
                           p.b_o, 4)


def test_params_to_torch_refuses_grouped_layers():
    ac.params_to_torch(ac.init_multihead(8, 2, n_kv_heads=2))       # all heads: fine
    with pytest.raises(ValueError, match=re.escape(
            "params: expected n_kv_heads == num_heads, got n_kv_heads=1 and num_heads=2 "
            "(grouped-query attention); torch.nn.MultiheadAttention has one key/value head "
            "per query head")):
        ac.params_to_torch(ac.init_multihead(8, 2, n_kv_heads=1))


def test_cross_attention_and_rope_layers_take_grouped_parameters():
    p = ac.init_multihead(16, 4, n_kv_heads=2, d_kv=6, seed=1)
    assert p.w_k.shape == (6, 8)
    rng = np.random.default_rng(0)
    x_q, x_kv = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 7, 6))
    np.testing.assert_allclose(ac.multi_head_attention(p, x_q, x_kv),
                               ac.multi_head_attention_loop(p, x_q, x_kv), rtol=1e-12,
                               atol=1e-12)
    r = ac.init_multihead(16, 4, n_kv_heads=2, seed=1)
    x = rng.standard_normal((2, 5, 16))
    out = ac.rope_multi_head_attention(r, x, causal=True)
    t = ac.init_multihead(16, 4, n_kv_heads=2, seed=1, backend="torch", dtype=torch.float64)
    np.testing.assert_allclose(
        ac.rope_multi_head_attention(t, torch.from_numpy(x), causal=True).numpy(), out,
        rtol=1e-12, atol=1e-12)
