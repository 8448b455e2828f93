"""Linear attention: its linear-time form equals its quadratic form and its recurrent form,
on NumPy and torch; Performer's features estimate the softmax kernel without bias; bad
input is refused as attention refuses it."""

from __future__ import annotations

import numpy as np
import pytest

import attncore as ac
from attncore.linear_attention import FEATURE_MAPS

torch = pytest.importorskip("torch")

MAPS = ["elu", "relu", ac.RandomFeatures(5, 7, seed=3)]


def quadratic(q, k, v, phi, causal, eps=1e-6):
    """The definition, with the (n_q, n_k) weight matrix formed."""
    a = phi(q) @ np.swapaxes(phi(k), -1, -2)
    if causal:
        a = a * np.tri(*a.shape[-2:])
    den = a.sum(-1, keepdims=True) + eps
    return np.where(den > 0, a @ v / np.where(den > 0, den, 1), 0)


def data(shape_q=(2, 3, 6, 5), n_k=6, d_v=4, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape_q)
    k = rng.standard_normal(shape_q[:-2] + (n_k, shape_q[-1]))
    v = rng.standard_normal(shape_q[:-2] + (n_k, d_v))
    return q, k, v


@pytest.mark.parametrize("fm", MAPS, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_k", [6, 4, 9, 0])
def test_equals_the_quadratic_form_on_both_backends(fm, causal, n_k):
    q, k, v = data(n_k=n_k)
    phi = FEATURE_MAPS[fm] if isinstance(fm, str) else fm
    want = quadratic(q, k, v, phi, causal)
    got = ac.linear_attention(q, k, v, feature_map=fm, causal=causal)
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-12
    got_t = ac.linear_attention(*(torch.from_numpy(x) for x in (q, k, v)), feature_map=fm,
                                causal=causal)
    assert np.abs(got_t.numpy() - want).max() < 1e-12


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("fm", MAPS, ids=str)
def test_the_recurrent_form_gives_the_causal_rows(lib, fm):
    q, k, v = data()
    if lib == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    whole = ac.linear_attention(q, k, v, feature_map=fm, causal=True)
    state = None
    for i in range(q.shape[-2]):
        out, state = ac.linear_attention_step(state, q[..., i, :], k[..., i, :],
                                              v[..., i, :], feature_map=fm)
        assert float(abs(out - whole[..., i, :]).max()) < 1e-12
    assert tuple(state.kv.shape) == (2, 3, 2 * 0 + (7 if not isinstance(fm, str) else 5),
                                     4)


def test_float32_half_and_gradients():
    q, k, v = data()
    want = ac.linear_attention(q, k, v, causal=True)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
        got = ac.linear_attention(*(torch.from_numpy(x).to(dtype) for x in (q, k, v)),
                                  causal=True)
        assert got.dtype == dtype and float((got.double() - torch.from_numpy(want)).abs()
                                            .max()) < tol
    got16 = ac.linear_attention(*(x.astype(np.float16) for x in (q, k, v)))
    assert got16.dtype == np.float16
    xs = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: ac.linear_attention(a, b, c, causal=True), xs)


def test_random_features_are_unbiased_for_the_softmax_kernel():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((1, 4)) * 0.5, rng.standard_normal((1, 4)) * 0.5
    phi = ac.RandomFeatures(4, 200_000, seed=0)
    estimate = (phi(q) @ phi(k).T).item()
    exact = np.exp(q @ k.T / 2.0).item()
    # the variance of the mean of m features, from the chapter's formula
    s = 0.5
    var = np.exp(2 * s * (q @ k.T).item()) * (np.exp(s * float(((q + k) ** 2).sum())) - 1)
    assert abs(estimate - exact) < 5 * np.sqrt(var / 200_000)
    t = phi(torch.from_numpy(q))
    assert np.allclose(t.numpy(), phi(q))
    assert (phi(q) > 0).all()


@pytest.mark.parametrize("call, exc, words", [
    (lambda q, k, v: ac.linear_attention(q, k, v.astype(np.float32)), TypeError,
     "one floating dtype"),
    (lambda q, k, v: ac.linear_attention(q, k[..., :3], v), ValueError, "same d_k"),
    (lambda q, k, v: ac.linear_attention(q, k, v[..., :4, :]), ValueError, "same n_k"),
    (lambda q, k, v: ac.linear_attention(q, k, v, causal=1), TypeError, "causal"),
    (lambda q, k, v: ac.linear_attention(q, k, v, feature_map="softmax"), ValueError,
     "feature_map"),
    (lambda q, k, v: ac.linear_attention(q, k, v, feature_map=3), TypeError, "feature_map"),
    (lambda q, k, v: ac.linear_attention(q, k, v, feature_map=lambda x: x), ValueError,
     r"features >= 0"),
    (lambda q, k, v: ac.linear_attention(q, k, v, feature_map=lambda x: x[..., 0]),
     ValueError, "shape"),
    (lambda q, k, v: ac.linear_attention(q, k, v, feature_map=lambda x: np.full_like(x, np.inf)),
     ValueError, "finite"),
    (lambda q, k, v: ac.linear_attention(q, k, v, eps=-1.0), ValueError, "eps"),
    (lambda q, k, v: ac.linear_attention(q, k, torch.from_numpy(v)), TypeError, "mix"),
    (lambda q, k, v: ac.linear_attention(q * np.nan, k, v), ValueError,
     "q: expected finite values"),
    (lambda q, k, v: ac.linear_attention(q, k, v,
                                         feature_map=ac.RandomFeatures(3, 4, seed=0)),
     ValueError, "d = 3"),
    (lambda q, k, v: ac.linear_attention_step(None, q[..., 0, :], k[..., 0, :3],
                                              v[..., 0, :]), ValueError, "same shape"),
    (lambda q, k, v: ac.linear_attention_step((1, 2), q[..., 0, :], k[..., 0, :],
                                              v[..., 0, :]), TypeError, "state"),
    (lambda q, k, v: ac.RandomFeatures(4, 0, seed=0), ValueError, "num_features"),
    (lambda q, k, v: ac.RandomFeatures(4, 8, seed=1.5), TypeError, "seed"),
])
def test_bad_input_gets_clear_errors(call, exc, words):
    with pytest.raises(exc, match=words):
        call(*data())


def test_a_step_state_of_the_wrong_shape_is_named():
    q, k, v = data()
    _, state = ac.linear_attention_step(None, q[..., 0, :], k[..., 0, :], v[..., 0, :])
    with pytest.raises(ValueError, match="state.kv"):
        ac.linear_attention_step(state, q[0, ..., 0, :], k[0, ..., 0, :], v[0, ..., 0, :])
