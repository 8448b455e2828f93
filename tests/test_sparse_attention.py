"""Top-k sparse attention (DeepSeek-V3.2): equal to dense attention with exactly the chosen
keys masked in; the same choice on NumPy and torch (ties to the earlier key); the
lightning indexer's scores; bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac

from conftest import TOL, to_backend, to_numpy

torch = pytest.importorskip("torch")


def chosen_mask(indices, n_k):
    """The boolean mask of the keys ``indices`` names (-1: none)."""
    idx = to_numpy(indices)
    mask = np.zeros(idx.shape[:-1] + (n_k,), bool)
    for pos in np.ndindex(idx.shape[:-1]):
        mask[pos][idx[pos][idx[pos] >= 0]] = True
    return mask


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_share", [False, True])
def test_equals_dense_attention_on_the_chosen_keys(backend, dtype, causal, heads_share):
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 2, 3, 8, 4)).astype(dtype)
    v = rng.standard_normal((2, 3, 8, 5)).astype(dtype)
    scores = rng.standard_normal((2, 1 if heads_share else 3, 8, 8)).astype(dtype)
    args = [to_backend(x, backend) for x in (q, k, v, scores)]
    out, idx = ac.topk_sparse_attention(*args, 3, causal=causal, return_indices=True)
    assert to_numpy(idx).shape == (2, 3, 8, 3)
    mask = chosen_mask(idx, 8)
    assert (mask.sum(-1) == (np.minimum(np.arange(8) + 1, 3) if causal else 3)).all()
    if causal:
        assert not (mask & ~np.tri(8, dtype=bool)).any()
    if heads_share:                     # one choice for all the heads of a token
        assert (mask == mask[:, :1]).all()
    # the chosen keys are the best-scored admissible ones
    ranked = np.where(np.tri(8, dtype=bool), scores, -np.inf) if causal else scores
    ranked = np.broadcast_to(ranked, (2, 3, 8, 8))
    worst_chosen = np.where(mask, ranked, np.inf).min(-1)
    best_left = np.where(mask, -np.inf, ranked).max(-1)
    assert (worst_chosen >= best_left).all()
    want = ac.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.abs(to_numpy(out) - want).max() < TOL[dtype]


@settings(max_examples=30)
@given(n_q=st.integers(1, 9), n_k=st.integers(1, 9), data=st.data(),
       causal=st.booleans(), seed=st.integers(0, 2**16))
def test_numpy_and_torch_choose_the_same_keys(n_q, n_k, data, causal, seed):
    top_k = data.draw(st.integers(1, n_k))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_q, 2))
    k = rng.standard_normal((n_k, 2))
    v = rng.standard_normal((n_k, 3))
    scores = rng.integers(0, 3, (n_q, n_k)).astype(float)     # many ties
    a, ia = ac.topk_sparse_attention(q, k, v, scores, top_k, causal=causal,
                                     return_indices=True)
    b, ib = ac.topk_sparse_attention(*(torch.from_numpy(x) for x in (q, k, v, scores)),
                                     top_k, causal=causal, return_indices=True)
    assert np.array_equal(ia, ib.numpy())
    assert np.abs(a - b.numpy()).max() < 1e-12
    mask = chosen_mask(ia, n_k)
    assert np.abs(a - ac.scaled_dot_product_attention(q, k, v, mask=mask)).max() < 1e-12
    if top_k == n_k:                   # every admissible key: dense attention
        dense = ac.scaled_dot_product_attention(q, k, v, causal=causal)
        rows = slice(None) if not causal or n_q <= n_k else slice(0, n_k)
        assert np.abs(a[rows] - dense[rows]).max() < 1e-12


def test_gradients_flow_to_q_k_v_only():
    rng = np.random.default_rng(1)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in rng.standard_normal((3, 2, 6, 3)))
    scores = torch.from_numpy(rng.standard_normal((2, 6, 6))).requires_grad_()
    out, idx = ac.topk_sparse_attention(q, k, v, scores, 2, causal=True,
                                        return_indices=True)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, [q, k, v], g)
    mask = torch.from_numpy(chosen_mask(idx, 6))
    want = ac.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)[0]
    for a, b in zip(grads, torch.autograd.grad(want, [q, k, v], g)):
        assert (a - b).abs().max() < 1e-12
    assert torch.autograd.gradcheck(
        lambda a, b, c: ac.topk_sparse_attention(a, b, c, scores.detach()[:1, :4, :4], 3,
                                                 causal=True),
        [x.detach()[:1, :4].clone().requires_grad_() for x in (q, k, v)], fast_mode=True)


def test_indexer_scores_by_definition(backend):
    rng = np.random.default_rng(2)
    qi = rng.standard_normal((2, 5, 3, 4))       # 5 queries, 3 indexer heads of width 4
    ki = rng.standard_normal((2, 7, 4))
    w = rng.standard_normal((2, 5, 3))
    want = np.zeros((2, 5, 7))
    for b in range(2):
        for t in range(5):
            for s in range(7):
                want[b, t, s] = sum(w[b, t, j] * max(qi[b, t, j] @ ki[b, s], 0)
                                    for j in range(3))
    got = ac.indexer_scores(*(to_backend(x, backend) for x in (qi, ki, w)))
    assert np.abs(to_numpy(got) - want).max() < 1e-12
    # usable as index scores, shared by the heads
    q = rng.standard_normal((2, 4, 5, 2))
    k, v = rng.standard_normal((2, 2, 4, 7, 2))
    out = ac.topk_sparse_attention(q, k, v, ac.indexer_scores(qi, ki, w)[:, None], 3)
    assert out.shape == (2, 4, 5, 2)


@pytest.mark.parametrize("change, exc, words", [
    ({"top_k": 9}, ValueError, "top_k: expected at most the number of keys n_k = 8, got 9"),
    ({"top_k": 0}, ValueError, "top_k: expected a positive integer"),
    ({"top_k": 2.0}, TypeError, "top_k"),
    ({"index_scores": np.zeros((3, 8, 8))}, ValueError, "index_scores: expected shape"),
    ({"index_scores": np.zeros((8, 7))}, ValueError, "index_scores: expected shape"),
    ({"index_scores": np.zeros((8, 8), bool)}, TypeError, "index_scores: expected a floating"),
    ({"index_scores": np.full((8, 8), np.nan)}, ValueError, "index_scores: expected finite"),
    ({"index_scores": torch.zeros(8, 8)}, TypeError, "cannot mix"),
    ({"causal": "yes"}, TypeError, "causal: expected True or False"),
])
def test_bad_input_is_named(change, exc, words):
    rng = np.random.default_rng(3)
    args = dict(q=rng.standard_normal((2, 3, 8, 4)), k=rng.standard_normal((2, 3, 8, 4)),
                v=rng.standard_normal((2, 3, 8, 4)), index_scores=np.zeros((8, 8)), top_k=3)
    args.update(change)
    with pytest.raises(exc) as info:
        ac.topk_sparse_attention(**args)
    assert words in str(info.value)
    with pytest.raises(ValueError, match="q_index, k_index, weights: expected shapes"):
        ac.indexer_scores(np.zeros((5, 3, 4)), np.zeros((7, 4)), np.zeros((5, 2)))
