"""Attention sinks (gpt-oss's form): every attention function equals the softmax over the
scores and one more column, the sink's logit, whose value is zero; the online softmax adds
it as one term of the log-sum-exp and still merges exactly; gradients reach the logits;
bad sinks are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac

from conftest import TOL, to_backend, to_numpy

torch = pytest.importorskip("torch")


def reference(q, k, v, sinks, mask=None, scale=None):
    """The definition: append the sink's logit as a last score column, softmax, and drop
    that column's weight (its value is zero). ``sinks`` of shape (H,) for (..., H, n, d)."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ np.swapaxes(k, -1, -2)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    col = np.broadcast_to(np.reshape(sinks, np.shape(sinks) + (1, 1)), s.shape[:-1] + (1,))
    full = np.concatenate([s, col], axis=-1)
    w = np.exp(full - full.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w[..., :-1] @ v, w[..., :-1]


def data(shape_q=(2, 3, 7, 4), n_k=9, d_v=3, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape_q)
    k = rng.standard_normal(shape_q[:-2] + (n_k, shape_q[-1]))
    v = rng.standard_normal(shape_q[:-2] + (n_k, d_v))
    return q, k, v, rng.standard_normal(shape_q[-3]) * 2


@pytest.mark.parametrize("causal", [False, True])
def test_every_attention_function_equals_the_definition(backend, dtype, causal):
    q, k, v, s = data()
    mask = np.tri(7, 9, dtype=bool) if causal else None
    want, want_w = reference(q, k, v, s, mask)
    q, k, v, s = (to_backend(x.astype(dtype), backend) for x in (q, k, v, s))
    tol = TOL[dtype]
    out, w = ac.scaled_dot_product_attention(q, k, v, causal=causal, sinks=s,
                                             return_weights=True)
    assert np.abs(to_numpy(w) - want_w).max() < tol
    for got in (out, ac.scaled_dot_product_attention(q, k, v, causal=causal, sinks=s),
                ac.tiled_attention(q, k, v, causal=causal, sinks=s, block_size=4),
                ac.tiled_attention(q, k, v, causal=causal, sinks=s, block_size=2)):
        assert np.abs(to_numpy(got) - want).max() < tol
    # the weights on the keys sum to 1 minus the sink's share
    _, lse = ac.tiled_attention(q, k, v, causal=causal, sinks=s, return_lse=True)
    sink_share = np.exp(to_numpy(s)[:, None] - to_numpy(lse))
    assert np.abs(to_numpy(w).sum(-1) + sink_share - 1).max() < tol


def test_one_logit_for_all_heads_grouped_heads_and_windows():
    q, k, v, _ = data((2, 4, 8, 3), 8)
    s0 = np.array(0.7)
    want = reference(q, k, v, np.full(4, 0.7))[0]
    for lib in ("numpy", "torch-cpu"):
        args = [to_backend(x, lib) for x in (q, k, v, s0)]
        for f in (ac.scaled_dot_product_attention, ac.tiled_attention):
            assert np.abs(to_numpy(f(*args[:3], sinks=args[3])) - want).max() < 1e-12
    # grouped-query attention: one logit per *query* head
    rng = np.random.default_rng(3)
    k2, v2 = rng.standard_normal((2, 2, 2, 8, 3))
    s4 = rng.standard_normal(4)
    mask = ac.sliding_window_mask(8, 8, 3)
    want = reference(q, np.repeat(k2, 2, axis=1), np.repeat(v2, 2, axis=1), s4, mask)[0]
    for lib in ("numpy", "torch-cpu"):
        args = [to_backend(x, lib) for x in (q, k2, v2, s4)]
        for f in (ac.scaled_dot_product_attention, ac.tiled_attention):
            got = f(*args[:3], sinks=args[3], enable_gqa=True, causal=True, window=3)
            assert np.abs(to_numpy(got) - want).max() < 1e-12


def test_a_row_without_keys_gives_zeros_and_a_finite_lse():
    q, k, v, s = data((1, 3, 4, 2), 5)
    mask = np.ones((4, 5), bool)
    mask[1] = False
    for lib in ("numpy", "torch-cpu"):
        args = [to_backend(x, lib) for x in (q, k, v, s, mask)]
        out, lse = ac.tiled_attention(*args[:3], sinks=args[3], mask=args[4],
                                      return_lse=True)
        ref = ac.scaled_dot_product_attention(*args[:3], sinks=args[3], mask=args[4])
        assert np.all(to_numpy(out)[:, :, 1] == 0) and np.all(to_numpy(ref)[:, :, 1] == 0)
        assert np.allclose(to_numpy(lse)[0, :, 1], s)          # only the sink: lse = s


def test_multi_head_layer_and_decoding_with_sinks(backend):
    lib = "numpy" if backend == "numpy" else "torch"
    device = None if backend == "numpy" else backend[6:]
    params = ac.init_multihead(8, 4, n_kv_heads=2, seed=1, backend=lib, device=device)
    x = to_backend(np.random.default_rng(4).standard_normal((2, 9, 8)), backend)
    s = to_backend(np.array([0.5, -1.0, 2.0, 0.0]), backend)
    out = ac.multi_head_attention(params, x, causal=True, sinks=s)
    # by hand: the heads with the definition, merged and projected
    p = {n: to_numpy(getattr(params, n)) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k",
                                                    "b_v", "b_o")}
    xn = to_numpy(x)
    heads = [xn @ p[f"w_{n}"] + p[f"b_{n}"] for n in "qkv"]
    q, k, v = (ac.split_heads(h, nh) for h, nh in zip(heads, (4, 2, 2)))
    k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    o = reference(q, k, v, to_numpy(s), np.tri(9, dtype=bool))[0]
    want = ac.merge_heads(o) @ p["w_o"] + p["b_o"]
    assert np.abs(to_numpy(out) - want).max() < 1e-12
    # decoding through a cache gives the same rows, with or without a window
    got = ac.decode(params, x, chunk_size=2, sinks=s)
    assert np.abs(to_numpy(got) - want).max() < 1e-12
    win = ac.multi_head_attention(params, x, causal=True, window=3, sinks=s)
    cache = ac.SlidingWindowKVCache.for_layer(params, 3, (2,))
    assert np.abs(to_numpy(ac.decode(params, x, cache=cache, sinks=s)) -
                  to_numpy(win)).max() < 1e-12


def test_gradients_reach_the_sink_logits():
    q, k, v, s = (torch.from_numpy(x).requires_grad_() for x in data((1, 2, 5, 3), 6))
    g = torch.randn(1, 2, 5, 3, dtype=torch.float64)
    grads = []
    for f in (lambda: ac.scaled_dot_product_attention(q, k, v, sinks=s, causal=True),
              lambda: ac.scaled_dot_product_attention(q, k, v, sinks=s, causal=True,
                                                      return_weights=True)[0],
              lambda: ac.tiled_attention(q, k, v, sinks=s, causal=True, block_size=2)):
        for x in (q, k, v, s):
            x.grad = None
        f().backward(g)
        grads.append([x.grad.clone() for x in (q, k, v, s)])
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            assert (a - b).abs().max() < 1e-12
    assert grads[0][3].abs().min() > 0
    leaves = [x.detach()[..., :3, :2].clone().requires_grad_() for x in (q, k, v)] + \
        [s.detach().clone().requires_grad_()]
    tiled = lambda a, b, c, d: ac.tiled_attention(a, b, c, sinks=d, causal=True,  # noqa
                                                  block_size=2)
    assert torch.autograd.gradcheck(tiled, leaves, fast_mode=True)
    assert torch.autograd.gradgradcheck(tiled, leaves, fast_mode=True)


@settings(max_examples=30)
@given(seed=st.integers(0, 2**16), split=st.integers(0, 6), sink=st.floats(-30, 30))
def test_the_sink_is_one_term_of_the_log_sum_exp_and_merges_exactly(seed, split, sink):
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((2, 3, 6)) * 5
    scores[0, 1, :] = -np.inf                     # a row with no key
    v = rng.standard_normal((2, 6, 4))
    s = np.array(sink)
    whole = ac.softmax_state(scores, v)
    with_sink = ac.add_sink_to_state(whole, s)
    lse = with_sink.max + np.log(with_sink.sum)
    lse_plain = whole.max + np.log(np.where(whole.sum > 0, whole.sum, 1))
    lse_plain = np.where(whole.sum > 0, lse_plain, -np.inf)
    assert np.allclose(lse, np.logaddexp(lse_plain, sink))
    # added to either part before merging, or after: the same state
    a = ac.softmax_state(scores[..., :split], v[:, :split])
    b = ac.softmax_state(scores[..., split:], v[:, split:])
    for merged in (ac.merge_softmax_states(ac.add_sink_to_state(a, s), b),
                   ac.merge_softmax_states(a, ac.add_sink_to_state(b, s))):
        for x, y in zip(merged, with_sink):
            assert np.allclose(x, y, rtol=1e-12, atol=1e-300)
    out = ac.finalize_softmax_state(with_sink)
    full = np.concatenate([scores, np.full((2, 3, 1), sink)], -1)
    w = np.exp(full - full.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    assert np.allclose(out, w[..., :-1] @ v, atol=1e-12)


@pytest.mark.parametrize("sinks, exc, words", [
    (np.zeros(2), ValueError, "sinks: expected shape () (one logit for every head) or (3,)"),
    (np.zeros((3, 1)), ValueError, "got shape (3, 1)"),
    (np.zeros(3, np.float32), TypeError, "sinks: expected the dtype of the queries, float64"),
    (np.array([0.0, np.nan, 1.0]), ValueError, "sinks: expected finite values"),
    (np.array([0, 1, 2]), TypeError, "sinks: expected the dtype"),
    ([0.0, 1.0, 2.0], TypeError, "sinks: expected a numpy.ndarray or a torch.Tensor"),
    (torch.zeros(3, dtype=torch.float64), TypeError, "cannot mix NumPy arrays and torch"),
])
def test_bad_sinks_are_named_everywhere(sinks, exc, words):
    q, k, v, _ = data((2, 3, 4, 2), 4)
    params = ac.init_multihead(6, 3)
    x = np.zeros((2, 4, 6))
    for call in (lambda: ac.scaled_dot_product_attention(q, k, v, sinks=sinks),
                 lambda: ac.tiled_attention(q, k, v, sinks=sinks),
                 lambda: ac.multi_head_attention(params, x, sinks=sinks)):
        with pytest.raises(exc) as info:
            call()
        assert words in str(info.value)


def test_sinks_need_a_heads_axis_to_be_per_head():
    q = np.zeros((4, 2))
    with pytest.raises(ValueError, match="the queries have no heads axis"):
        ac.scaled_dot_product_attention(q, q, q, sinks=np.zeros(4))
    out = ac.scaled_dot_product_attention(q, q, q, sinks=np.array(0.0))
    assert np.allclose(out, 0)
    st_ = ac.softmax_state(np.zeros((3, 2)), np.ones((2, 1)))
    with pytest.raises(ValueError, match="sink: expected shape"):
        ac.add_sink_to_state(st_, np.zeros(3))
    with pytest.raises(ValueError, match="sink: expected finite"):
        ac.add_sink_to_state(st_, np.array(np.inf))
