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
    # (random features are stabilised, and eps added to the stabilised denominator:
    # without eps the stabilisers cancel exactly)
    eps = 0.0 if isinstance(fm, ac.RandomFeatures) else 1e-6
    want = quadratic(q, k, v, phi, causal, eps)
    got = ac.linear_attention(q, k, v, feature_map=fm, causal=causal, eps=eps)
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-12
    got_t = ac.linear_attention(*(torch.from_numpy(x) for x in (q, k, v)), feature_map=fm,
                                causal=causal, eps=eps)
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


# --- random features, stabilised (issue 37) -------------------------------------------------

def _exact_random_feature_attention(phi, q, k, v, causal=False):
    """A v / A 1 for A = phi(q) phi(k)^T, in log space (any norm), without eps."""
    s, w = phi.scale, phi.weights
    a = (q * np.sqrt(s)) @ w.T - (q * q).sum(-1, keepdims=True) * s / 2
    b = (k * np.sqrt(s)) @ w.T - (k * k).sum(-1, keepdims=True) * s / 2
    terms = a[..., :, None, :] + b[..., None, :, :]                    # (..., n_q, n_k, m)
    top = terms.max(-1)
    log_a = top + np.log(np.exp(terms - top[..., None]).sum(-1))      # log sum_r, exactly
    if causal:
        log_a = np.where(np.tri(*log_a.shape[-2:], dtype=bool), log_a, -np.inf)
    weights = np.exp(log_a - log_a.max(-1, keepdims=True))
    return weights @ v / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("causal", [False, True])
def test_random_features_of_large_inputs_do_not_underflow(lib, causal):
    # sqrt(s)|x| = 50: every feature exp(sqrt(s) w.x - s|x|^2 / 2) underflows float64,
    # and the rows used to come back as zeros, eps = 0 or not. Subtracting the largest
    # exponent (per query row; over the keys a query sees) keeps them.
    rng = np.random.default_rng(0)
    phi = ac.RandomFeatures(4, 64, seed=1, scale=1.0)
    u = np.array([50.0, 0.0, 0.0, 0.0])
    q = u + rng.standard_normal((2, 6, 4)) * 0.3
    k = u + rng.standard_normal((2, 6, 4)) * 0.3
    v = rng.standard_normal((2, 6, 3))
    want = _exact_random_feature_attention(phi, q, k, v, causal)
    args = [q, k, v] if lib == "numpy" else [torch.from_numpy(x) for x in (q, k, v)]
    for eps, tol in ((0.0, 1e-9), (1e-6, 1e-3)):      # eps shrinks a row by den/(den + eps)
        got = ac.linear_attention(*args, feature_map=phi, causal=causal, eps=eps)
        np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)
    if causal:                                    # the recurrent form agrees
        state = None
        for i in range(6):
            out, state = ac.linear_attention_step(state, *(x[..., i, :] for x in args),
                                                  feature_map=phi, eps=1e-6)
            np.testing.assert_allclose(np.asarray(out), want[..., i, :], rtol=1e-3,
                                       atol=1e-3)
            np.testing.assert_allclose(np.asarray(out), np.asarray(ac.linear_attention(
                *args, feature_map=phi, causal=True))[..., i, :], rtol=1e-12, atol=1e-12)


def test_a_row_that_eps_would_decide_is_refused_not_zeroed():
    # queries and keys pointing opposite ways: every weight exp(s q.k) is about e^-25,
    # so eps = 1e-6 used to be the whole denominator and the output zeros. The stabilised
    # weights of these are still below eps (the largest query and key features point
    # different ways): refused, with the reason; eps = 0 gives the estimate.
    rng = np.random.default_rng(2)
    phi = ac.RandomFeatures(16, 1024, seed=0)
    u = np.zeros(16)
    u[0] = 10.0
    q = u + rng.standard_normal((5, 16)) * 0.3
    k = -u + rng.standard_normal((7, 16)) * 0.3
    v = rng.standard_normal((7, 3))
    with pytest.raises(ValueError, match=r"feature_map: .*not above eps=1e-06"):
        ac.linear_attention(q, k, v, feature_map=phi)
    with pytest.raises(ValueError, match=r"not above eps"):
        ac.linear_attention_step(None, q[0], k[0], v[0], feature_map=phi)
    got = ac.linear_attention(q, k, v, feature_map=phi, eps=0.0)
    np.testing.assert_allclose(got, _exact_random_feature_attention(phi, q, k, v),
                               rtol=1e-8)
    assert np.abs(got).max() > 0.1


def test_a_state_must_come_from_the_same_kind_of_feature_map():
    q, k, v = (x[0, 0, 0] for x in data())
    phi = ac.RandomFeatures(5, 7, seed=3)
    _, state = ac.linear_attention_step(None, q, k, v, feature_map=phi)
    assert state.shift.shape == (1,)
    with pytest.raises(ValueError, match="state.shift"):
        ac.linear_attention_step(state, q, k, v)                 # elu, no shift
    _, plain = ac.linear_attention_step(None, q, k, v)
    assert plain.shift is None
    with pytest.raises(ValueError, match="state.shift"):
        ac.linear_attention_step(plain, q, k, v, feature_map=phi)


def test_stabilised_random_features_have_the_gradient_of_what_they_compute():
    q, k, v = (torch.from_numpy(x[0, 0]).requires_grad_() for x in data(seed=3))
    phi = ac.RandomFeatures(5, 7, seed=3)
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b, c: ac.linear_attention(a, b, c, feature_map=phi, causal=causal),
            (q, k, v))

    def steps(a, b, c):
        state, outs = None, []
        for i in range(a.shape[0]):
            out, state = ac.linear_attention_step(state, a[i], b[i], c[i], feature_map=phi)
            outs.append(out)
        return torch.stack(outs)

    assert torch.autograd.gradcheck(steps, (q, k, v))
