"""Sliding windows: ``window=`` of the attention functions equals attention under
``sliding_window_mask``; tiled attention computes only the blocks a window reaches, and
``tiled_attention_work`` counts them; the masks of ``attncore.masks``; bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac
from attncore.tiled import _block_plan

from conftest import TOL, to_backend, to_numpy

torch = pytest.importorskip("torch")


def data(shape_q=(2, 3, 11, 4), n_k=11, d_v=3, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape_q)
    k = rng.standard_normal(shape_q[:-2] + (n_k, shape_q[-1]))
    v = rng.standard_normal(shape_q[:-2] + (n_k, d_v))
    return q, k, v


def brute_window(n_q, n_k, window, sink_tokens=0, offset=0):
    m = np.zeros((n_q, n_k), bool)
    for i in range(n_q):
        p = offset + i
        for j in range(n_k):
            m[i, j] = j <= p and (p - window < j or j < sink_tokens)
    return m


@pytest.mark.parametrize("n_q,n_k", [(11, 11), (5, 11), (11, 5)])
@pytest.mark.parametrize("window", [1, 3, 20])
def test_window_equals_its_mask_everywhere(backend, dtype, n_q, n_k, window):
    q, k, v = (to_backend(x.astype(dtype), backend) for x in data((2, 3, n_q, 4), n_k))
    mask = ac.sliding_window_mask(n_q, n_k, window, like=q)
    want = to_numpy(ac.scaled_dot_product_attention(q, k, v, mask=mask))
    tol = TOL[dtype]
    for got in (ac.scaled_dot_product_attention(q, k, v, causal=True, window=window),
                ac.scaled_dot_product_attention(q, k, v, causal=True, window=window,
                                                return_weights=True)[0],
                ac.tiled_attention(q, k, v, causal=True, window=window, block_size=2),
                ac.tiled_attention(q, k, v, causal=True, window=window, block_size=4)):
        assert np.abs(to_numpy(got) - want).max() < tol
    # a window at least as long as the keys is the causal mask
    if window >= n_k:
        causal = to_numpy(ac.scaled_dot_product_attention(q, k, v, causal=True))
        assert np.abs(causal - want).max() < tol


def test_window_with_a_mask_and_grouped_heads():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 4, 9, 3))
    k, v = rng.standard_normal((2, 2, 2, 9, 3))
    pad = ac.padding_mask([9, 6], 9)[:, None]
    want = ac.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                           mask=pad & ac.sliding_window_mask(9, 9, 3))
    for lib in ("numpy", "torch-cpu"):
        args = [to_backend(x, lib) for x in (q, k, v, pad)]
        for f in (ac.scaled_dot_product_attention, ac.tiled_attention):
            got = f(*args[:3], enable_gqa=True, mask=args[3], causal=True, window=3)
            assert np.abs(to_numpy(got) - want).max() < 1e-12


def test_multi_head_window_equals_its_mask(backend):
    params = ac.init_multihead(8, 4, n_kv_heads=2, seed=0,
                               backend="numpy" if backend == "numpy" else "torch",
                               device=None if backend == "numpy" else backend[6:])
    x = to_backend(np.random.default_rng(2).standard_normal((2, 10, 8)), backend)
    want = ac.multi_head_attention(params, x, mask=ac.sliding_window_mask(10, 10, 4,
                                                                          like=x))
    got = ac.multi_head_attention(params, x, causal=True, window=4)
    assert np.abs(to_numpy(got) - to_numpy(want)).max() < 1e-12
    out, w = ac.multi_head_attention(params, x, causal=True, window=4, return_weights=True)
    w = to_numpy(w)
    assert w.shape == (2, 4, 10, 10) and np.all(w[..., ~ac.sliding_window_mask(10, 10, 4)] == 0)


def test_tiled_window_gradients_equal_the_reference():
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in data((1, 2, 13, 4), 13))
    g = torch.randn(1, 2, 13, 3, dtype=torch.float64)
    grads = []
    for f in (lambda: ac.scaled_dot_product_attention(q, k, v, causal=True, window=3,
                                                      return_weights=True)[0],
              lambda: ac.tiled_attention(q, k, v, causal=True, window=3, block_size=4)):
        q.grad = k.grad = v.grad = None
        f().backward(g)
        grads.append([x.grad.clone() for x in (q, k, v)])
    for a, b in zip(*grads):
        assert (a - b).abs().max() < 1e-12
    # a second derivative goes through the out-of-place loop, window included
    assert torch.autograd.gradgradcheck(
        lambda a, b, c: ac.tiled_attention(a, b, c, causal=True, window=2, block_size=2),
        [x.detach()[:, :1, :4, :2].clone().requires_grad_() for x in (q, k, v)],
        fast_mode=True)


def test_tiled_window_with_dropout_drops_the_reference_weights():
    # the window restricts the rows of each block; dropout's mask must stay the one of
    # the full (n_q, n_k) positions, so the same seed gives the same output as without
    # skipping: compare with the dropout of a window written as a mask
    q, k, v = data((1, 2, 12, 4), 12)
    mask = ac.sliding_window_mask(12, 12, 3)
    outs = [ac.tiled_attention(q, k, v, block_size=4, dropout_p=0.3,
                               generator=np.random.default_rng(5), **kw)
            for kw in ({"causal": True, "window": 3}, {"mask": mask})]
    assert np.abs(outs[0] - outs[1]).max() < 1e-12


@settings(max_examples=40)
@given(n_q=st.integers(0, 40), n_k=st.integers(0, 40), block=st.integers(1, 9),
       window=st.none() | st.integers(1, 12), causal=st.booleans())
def test_the_block_plan_covers_every_admissible_score(n_q, n_k, block, window, causal):
    causal = causal or window is not None
    computed = np.zeros((n_q, n_k), bool)
    for j0, j1, r0, r1 in _block_plan(n_q, n_k, block, causal, window):
        assert not computed[r0:r1, j0:j1].any()          # each score at most once
        computed[r0:r1, j0:j1] = True
    admissible = np.ones((n_q, n_k), bool) if not causal else \
        brute_window(n_q, n_k, window if window is not None else n_k + 1)
    assert not (admissible & ~computed).any()            # nothing admissible skipped
    work = ac.tiled_attention_work(n_q, n_k, block_size=block, causal=causal,
                                   window=window)
    assert work.score_entries == computed.sum() and work.dense_entries == n_q * n_k
    if window is not None:
        # a row computes its window's keys and at most a block's worth on each side
        assert computed.sum(1).max(initial=0) <= window + 2 * (block - 1)


def test_window_work_grows_linearly():
    sizes = (4096, 8192)
    causal = [ac.tiled_attention_work(n, n, block_size=64, causal=True).score_entries
              for n in sizes]
    window = [ac.tiled_attention_work(n, n, block_size=64, causal=True,
                                      window=256).score_entries for n in sizes]
    assert causal[1] / causal[0] > 3.9          # quadratic
    assert 1.9 < window[1] / window[0] < 2.1    # linear
    assert window[1] < 8192 * (256 + 64)        # under window + block_size per row


def test_sliding_window_mask_matches_its_definition():
    for n_q, n_k, w, s, off in [(6, 6, 2, 0, 0), (6, 6, 2, 2, 0), (3, 8, 4, 1, 5),
                                (8, 3, 2, 1, -5), (0, 4, 1, 0, 0), (5, 0, 3, 2, 0)]:
        got = ac.sliding_window_mask(n_q, n_k, w, sink_tokens=s, offset=off)
        assert got.dtype == bool and np.array_equal(got, brute_window(n_q, n_k, w, s, off))
    t = ac.sliding_window_mask(4, 6, 2, offset=2, like=torch.zeros(1))
    assert t.dtype == torch.bool
    assert np.array_equal(t.numpy(), ac.bottom_right_causal_mask(4, 6) &
                          brute_window(4, 6, 2, 0, 2))


def test_document_and_prefix_masks():
    ids = [3, 3, 7, 7, 7, 1]
    m = ac.document_mask(ids)
    assert np.array_equal(m, np.equal.outer(ids, ids))
    batch = torch.tensor([[0, 0, 1], [5, 6, 6]])
    t = ac.document_mask(batch)
    assert t.dtype == torch.bool and t.shape == (2, 3, 3)
    assert ac.document_mask([0, 1], [1, 1, 0]).tolist() == [[False, False, True],
                                                            [True, True, False]]
    p = ac.prefix_lm_mask(5, 3)
    want = np.tri(5, dtype=bool)
    want[:, :3] = True
    assert np.array_equal(p, want)
    assert np.array_equal(ac.prefix_lm_mask(4, 0), np.tri(4, dtype=bool))
    assert ac.prefix_lm_mask(4, 4).all()
    pb = ac.prefix_lm_mask(4, torch.tensor([1, 3]))
    assert pb.shape == (2, 4, 4) and torch.equal(pb[1], torch.from_numpy(
        ac.prefix_lm_mask(4, 3)))


@pytest.mark.parametrize("call, exc, words", [
    (lambda q: ac.scaled_dot_product_attention(q, q, q, window=2), ValueError,
     "pass causal=True"),
    (lambda q: ac.tiled_attention(q, q, q, window=2), ValueError, "pass causal=True"),
    (lambda q: ac.scaled_dot_product_attention(q, q, q, causal=True, window=0), ValueError,
     "window: expected a positive integer, got 0"),
    (lambda q: ac.tiled_attention(q, q, q, causal=True, window=2.0), TypeError,
     "window: expected a positive integer"),
    (lambda q: ac.multi_head_attention(ac.init_multihead(4, 2), q[0], window=3),
     ValueError, "pass causal=True"),
    (lambda q: ac.sliding_window_mask(3, 3, 0), ValueError, "window"),
    (lambda q: ac.sliding_window_mask(3, 3, 2, sink_tokens=-1), ValueError, "sink_tokens"),
    (lambda q: ac.sliding_window_mask(3, 3, 2, offset=1.5), TypeError, "offset"),
    (lambda q: ac.document_mask([0.5, 1.0]), TypeError, "doc_ids: expected integers"),
    (lambda q: ac.document_mask([[0, 1]], [[0], [1]]), ValueError, "same leading shape"),
    (lambda q: ac.document_mask(np.int64(3)), TypeError, "doc_ids"),
    (lambda q: ac.prefix_lm_mask(3, 4), ValueError, "prefix_length: expected a length in"),
    (lambda q: ac.prefix_lm_mask(3, [1, -1]), ValueError, "prefix_length[1] = -1"),
    (lambda q: ac.prefix_lm_mask(3, 1.0), TypeError, "prefix_length"),
    (lambda q: ac.tiled_attention_work(4, 4, window=2), ValueError, "pass causal=True"),
])
def test_bad_windows_and_masks_are_named(call, exc, words):
    q = np.zeros((1, 3, 4))
    with pytest.raises(exc) as info:
        call(q)
    assert words in str(info.value)
