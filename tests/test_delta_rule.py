"""The gated delta rule: the chunked (UT-transform) form equals the recurrence; a step is
one gradient step on |S k - v|^2 / 2; without the erase term and with unit gates it is
linear attention's recurrence; states chain; gradients; bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac
from attncore.linear_attention import FEATURE_MAPS

from conftest import to_backend, to_numpy

torch = pytest.importorskip("torch")


def data(batch=(2, 3), n=10, d_k=4, d_v=3, seed=0, g_low=0.3):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(batch + (n, d_k))
    k = rng.standard_normal(batch + (n, d_k))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)        # as the models do
    v = rng.standard_normal(batch + (n, d_v))
    g = rng.uniform(g_low, 1.0, batch + (n,))
    beta = rng.uniform(0.0, 1.0, batch + (n,))
    return q, k, v, g, beta


def by_definition(q, k, v, g, beta):
    """S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t, with
    the identity matrix written out."""
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for idx in np.ndindex(q.shape[:-2]):
        s = np.zeros((v.shape[-1], q.shape[-1]))
        for t in range(q.shape[-2]):
            kt = k[idx][t]
            s = g[idx][t] * s @ (np.eye(len(kt)) - beta[idx][t] * np.outer(kt, kt)) + \
                beta[idx][t] * np.outer(v[idx][t], kt)
            out[idx][t] = s @ q[idx][t]
    return out


def test_the_recurrence_is_the_definition(backend, dtype):
    q, k, v, g, beta = data()
    want = by_definition(q, k, v, g, beta)
    args = [to_backend(x.astype(dtype), backend) for x in (q, k, v, g, beta)]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for chunk in (None, 1, 3, 4, 10, 16):
        got = ac.gated_delta_rule(*args, chunk_size=chunk)
        assert got.dtype == args[0].dtype
        assert np.abs(to_numpy(got) - want).max() < tol


@settings(max_examples=40)
@given(n=st.integers(0, 17), chunk=st.integers(1, 8), d_k=st.integers(1, 5),
       d_v=st.integers(1, 4), seed=st.integers(0, 2**16), erase=st.booleans(),
       extremes=st.booleans())
def test_chunked_equals_recurrent(n, chunk, d_k, d_v, seed, erase, extremes):
    q, k, v, g, beta = data((2,), n, d_k, d_v, seed, g_low=1e-3)
    if extremes:                       # gates at the ends of their ranges
        rng = np.random.default_rng(seed)
        g = rng.choice([1e-30, 1.0, 0.5], g.shape)
        beta = rng.choice([0.0, 1.0], beta.shape)
    s0 = np.random.default_rng(seed + 1).standard_normal((2, d_v, d_k))
    rec, s_rec = ac.gated_delta_rule(q, k, v, g, beta, initial_state=s0, erase=erase,
                                     return_state=True)
    chk, s_chk = ac.gated_delta_rule(q, k, v, g, beta, initial_state=s0, erase=erase,
                                     chunk_size=chunk, return_state=True)
    assert rec.shape == (2, n, d_v) and s_rec.shape == (2, d_v, d_k)
    assert np.abs(rec - chk).max(initial=0) < 1e-10
    assert np.abs(s_rec - s_chk).max() < 1e-10


def test_steps_and_chained_calls_give_the_whole():
    q, k, v, g, beta = data()
    whole, final = ac.gated_delta_rule(q, k, v, g, beta, return_state=True)
    state = None
    for t in range(q.shape[-2]):
        o, state = ac.gated_delta_rule_step(state, q[..., t, :], k[..., t, :], v[..., t, :],
                                            g[..., t], beta[..., t])
        assert np.abs(o - whole[..., t, :]).max() < 1e-12
    assert np.abs(state - final).max() < 1e-12
    first, s = ac.gated_delta_rule(q[..., :4, :], k[..., :4, :], v[..., :4, :],
                                   g[..., :4], beta[..., :4], return_state=True)
    rest = ac.gated_delta_rule(q[..., 4:, :], k[..., 4:, :], v[..., 4:, :], g[..., 4:],
                               beta[..., 4:], initial_state=s, chunk_size=3)
    assert np.abs(np.concatenate([first, rest], -2) - whole).max() < 1e-12


def test_a_delta_step_is_a_gradient_step_on_the_regression_loss():
    rng = np.random.default_rng(5)
    s = torch.from_numpy(rng.standard_normal((3, 4))).requires_grad_()
    k, q = (torch.from_numpy(rng.standard_normal(4)) for _ in range(2))
    v = torch.from_numpy(rng.standard_normal(3))
    loss = 0.5 * ((s @ k - v) ** 2).sum()
    (grad,) = torch.autograd.grad(loss, [s])
    _, new = ac.gated_delta_rule_step(s.detach(), q, k, v, 1.0, 0.4)
    assert (new - (s.detach() - 0.4 * grad)).abs().max() < 1e-12
    # with a unit key and beta = 1 the memory then returns v for k exactly
    k1 = k / k.norm()
    _, new = ac.gated_delta_rule_step(s.detach(), q, k1, v, 1.0, 1.0)
    assert (new @ k1 - v).abs().max() < 1e-12


def test_without_erasing_and_gates_it_is_causal_linear_attention():
    rng = np.random.default_rng(6)
    q, k = rng.standard_normal((2, 2, 3, 9, 4))
    v = rng.standard_normal((2, 3, 9, 5))
    phi = FEATURE_MAPS["elu"]
    fq, fk = phi(q), phi(k)
    num = ac.gated_delta_rule(fq, fk, v, 1.0, 1.0, erase=False, chunk_size=4)
    den = ac.gated_delta_rule(fq, fk, np.ones(v.shape[:-1] + (1,)), 1.0, 1.0, erase=False)
    want = ac.linear_attention(q, k, v, feature_map="elu", causal=True, eps=1e-6)
    assert np.abs(num / (den + 1e-6) - want).max() < 1e-12


def test_torch_gradients():
    leaves = [torch.from_numpy(x).requires_grad_() for x in data((1, 2), 5, 3, 2)]
    leaves.append(torch.randn(1, 2, 2, 3, dtype=torch.float64, requires_grad=True))

    def f(chunk):
        return lambda q, k, v, g, b, s: ac.gated_delta_rule(
            q, k, v, g, b, initial_state=s, chunk_size=chunk, return_state=True)

    assert torch.autograd.gradcheck(f(2), leaves, fast_mode=True)
    grads = []
    for chunk in (None, 2):
        out, state = f(chunk)(*leaves)
        grads.append(torch.autograd.grad(out.sum() + state.sum(), leaves))
    for a, b in zip(*grads):
        assert (a - b).abs().max() < 1e-12


def test_half_precision_is_computed_in_float32():
    q, k, v, g, beta = data()
    want = ac.gated_delta_rule(q, k, v, g, beta)
    got = ac.gated_delta_rule(*(torch.from_numpy(x).to(torch.bfloat16)
                                for x in (q, k, v, g, beta)), chunk_size=4)
    assert got.dtype == torch.bfloat16
    assert np.abs(got.double().numpy() - want).max() < 0.1


@pytest.mark.parametrize("change, exc, words", [
    ({"beta": 1.5}, ValueError, "beta: expected values in [0, 1], got 1.5"),
    ({"beta": -0.1}, ValueError, "beta: expected values in [0, 1]"),
    ({"g": 0.0}, ValueError, "g: expected values in (0, 1], got 0.0"),
    ({"g": np.full((2, 3, 10), 1.01)}, ValueError, "g: expected values in (0, 1], got 1.01"),
    ({"g": np.full((2, 3, 10), np.nan)}, ValueError, "g: expected values in (0, 1], got nan"),
    ({"beta": np.full((2, 3, 10), 0.5, np.float32)}, TypeError, "beta: expected the dtype"),
    ({"beta": np.full((2, 3), 0.5)}, ValueError, "beta: expected shape (2, 3, 10)"),
    ({"g": True}, TypeError, "g: expected a real number or an array"),
    ({"chunk_size": 0}, ValueError, "chunk_size: expected a positive integer"),
    ({"chunk_size": 2.0}, TypeError, "chunk_size"),
    ({"initial_state": np.zeros((2, 3, 4, 3))}, ValueError,
     "initial_state: expected shape (..., d_v, d_k) = (2, 3, 3, 4)"),
    ({"k": np.zeros((2, 3, 9, 4)), "v": np.zeros((2, 3, 9, 3))}, ValueError,
     "same length n"),
    ({"v": np.zeros((2, 3, 10, 3), np.float32)}, TypeError, "one floating dtype"),
    ({"q": np.full((2, 3, 10, 4), np.inf)}, ValueError, "q: expected finite values"),
    ({"erase": 1}, TypeError, "erase: expected True or False"),
])
def test_bad_input_is_named(change, exc, words):
    q, k, v, g, beta = data()
    args = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    kwargs = {}
    for name, value in change.items():
        (args if name in args else kwargs)[name] = value
    with pytest.raises(exc) as info:
        ac.gated_delta_rule(**args, **kwargs)
    assert words in str(info.value)
    with pytest.raises(ValueError, match="beta_t: expected values in"):
        ac.gated_delta_rule_step(None, q[..., 0, :], k[..., 0, :], v[..., 0, :], 1.0, 2.0)
    with pytest.raises(ValueError, match="state: expected shape"):
        ac.gated_delta_rule_step(np.zeros((3, 3)), q[..., 0, :], k[..., 0, :],
                                 v[..., 0, :], 1.0, 1.0)
    with pytest.raises(ValueError, match="q_t, k_t, v_t: expected shapes"):
        ac.gated_delta_rule_step(None, q[..., 0, :], k[..., 0, :2], v[..., 0, :], 1.0, 1.0)
    with pytest.raises(TypeError, match="v_t: expected a floating dtype"):
        ac.gated_delta_rule_step(None, q[..., 0, :], k[..., 0, :], v[..., 0, :] > 0, 1.0,
                                 1.0)


@pytest.mark.parametrize("lib, dtype, g", [
    ("numpy", "float32", 1e-50), ("numpy", "float16", 1e-8), ("torch", "float32", 1e-50),
    ("torch", "bfloat16", 1e-50), ("torch", "float16", 1e-8)])
@pytest.mark.parametrize("chunk_size", [None, 1, 4, 16])
def test_a_gate_that_rounds_to_zero_is_refused_not_nan(lib, dtype, g, chunk_size):
    # A valid number g that rounds to 0 in the inputs' dtype used to make the chunked form
    # all NaN (log 0 - log 0) while the recurrence stayed finite.
    q, k, v, _, _ = data(batch=(2,), n=8)
    args = [x.astype(np.float32) for x in (q, k, v)]
    if lib == "torch":
        args = [torch.from_numpy(x).to(getattr(torch, dtype)) for x in args]
    else:
        args = [x.astype(dtype) for x in args]
    with pytest.raises(ValueError, match=r"g: expected values in \(0, 1\], got 1e-\d+, which "
                                         rf"rounds to 0 in q's dtype {dtype}"):
        ac.gated_delta_rule(*args, g, 0.5, chunk_size=chunk_size)
    with pytest.raises(ValueError, match=r"g_t: expected values in \(0, 1\]"):
        ac.gated_delta_rule_step(None, args[0][..., 0, :], args[1][..., 0, :],
                                 args[2][..., 0, :], g, 0.5)
    # A small gate the dtype holds is computed, chunked as recurrent.
    small = 1e-40 if dtype == "float32" else 1e-4
    rec = ac.gated_delta_rule(*args, small, 0.5)
    chunked = ac.gated_delta_rule(*args, small, 0.5, chunk_size=chunk_size or 4)
    if lib == "torch":
        rec, chunked = rec.double(), chunked.double()
    assert np.abs(to_numpy(rec).astype(np.float64) - to_numpy(chunked)).max() < 1e-2


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("chunk_size", [None, 8])
def test_a_state_that_overflows_is_an_error_that_says_why(lib, chunk_size, recwarn):
    # Unnormalised keys with beta |k|^2 > 2 grow the state geometrically: in float32 it
    # overflowed within 100 tokens and came back as NaN, silently on torch.
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 100, 4)).astype(np.float32) for _ in range(3))
    k *= 5
    if lib == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    with pytest.raises(ValueError, match=r"k, beta: the gated delta rule's state overflowed "
                                         r"float32 to NaN or infinity: beta_t \|k_t\|\^2 "
                                         r"reaches \d+ > 2"):
        ac.gated_delta_rule(q, k, v, 1.0, 1.0, chunk_size=chunk_size)
    assert not [w for w in recwarn if "overflow" in str(w.message)]    # one error, no noise
    state = None
    with pytest.raises(ValueError, match="k, beta: the gated delta rule's state overflowed"):
        for t in range(100):
            _, state = ac.gated_delta_rule_step(state, q[..., t, :], k[..., t, :],
                                                v[..., t, :], 1.0, 1.0)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_chunked_float32_keeps_float32_precision_under_tiny_gates(lib):
    # Gates of 1e-30 drive log gamma to -2000 within a chunk; float32 differences of such
    # sums cancelled (NumPy: relative error 4.6e-4 against float64, the recurrence 1e-7).
    rng = np.random.default_rng(0)
    n, d = 64, 16
    q, k, v = rng.standard_normal((3, 1, n, d))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    g = np.full((1, n), 0.99)
    g[0, :32] = 1e-30
    beta = np.full((1, n), 0.9)
    exact = ac.gated_delta_rule(q, k, v, g, beta)
    f32 = [x.astype(np.float32) for x in (q, k, v, g, beta)]
    if lib == "torch":
        f32 = [torch.from_numpy(x) for x in f32]
    got = to_numpy(ac.gated_delta_rule(*f32, chunk_size=64))
    assert got.dtype == np.float32
    assert np.abs(got - exact).max() / np.abs(exact).max() < 2e-6
