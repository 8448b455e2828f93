"""Tests for attncore.lab.scaling: the dot-product statistics behind the 1/sqrt(d_k) factor."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncore import scaled_dot_product_attention, softmax
from attncore.lab.scaling import (
    DISTRIBUTIONS,
    SCALINGS,
    attention_saturation,
    distribution_moments,
    dot_product_moments,
    dot_product_statistics,
    exact_dot_product_distribution,
    resolve_scale,
    row_entropy,
    sample_components,
    sample_dot_products,
    score_gradient_norms,
    softmax_jacobian,
    softmax_with_temperature,
)

HALF = Fraction(1, 2)
small_fractions = st.fractions(min_value=-3, max_value=3, max_denominator=8)
positive_fractions = st.fractions(min_value=Fraction(1, 8), max_value=3, max_denominator=8)


# ------------------------------------------------------------------------------- theory

def test_standard_moments():
    m = dot_product_moments(64)
    assert (m.mean, m.var, m.second_moment) == (0, 64, 64)


def test_general_moments_example():
    # mu_q = 1/2, s_q^2 = 1, mu_k = -1, s_k^2 = 4, d_k = 64 (the chapter's exercise 1)
    m = dot_product_moments(64, mean_q=Fraction(1, 2), var_q=1, mean_k=-1, var_k=4)
    assert m.mean == -32
    assert m.var == 64 * (4 + 1 + 1)
    assert m.second_moment == 384 + 1024


@settings(max_examples=25, deadline=None)
@given(mq=small_fractions, sq=positive_fractions, mk=small_fractions, sk=positive_fractions,
       d_k=st.integers(1, 5))
def test_moments_match_exact_law_of_shifted_rademacher(mq, sq, mk, sk, d_k):
    """Components mu +- s with probability 1/2: mean mu, variance s^2, exactly."""
    law = exact_dot_product_distribution([mq - sq, mq + sq], [HALF, HALF],
                                         [mk - sk, mk + sk], [HALF, HALF], d_k)
    exact = distribution_moments(law)
    assert exact == dot_product_moments(d_k, mean_q=mq, var_q=sq * sq, mean_k=mk,
                                        var_k=sk * sk)


@settings(max_examples=20, deadline=None)
@given(vals_q=st.lists(small_fractions, min_size=1, max_size=3),
       vals_k=st.lists(small_fractions, min_size=1, max_size=3),
       wq=st.lists(st.integers(1, 5), min_size=3, max_size=3),
       wk=st.lists(st.integers(1, 5), min_size=3, max_size=3),
       d_k=st.integers(1, 4))
def test_moments_match_exact_law_of_arbitrary_finite_components(vals_q, vals_k, wq, wk, d_k):
    pq = [Fraction(w, sum(wq[:len(vals_q)])) for w in wq[:len(vals_q)]]
    pk = [Fraction(w, sum(wk[:len(vals_k)])) for w in wk[:len(vals_k)]]

    def mean_var(vals, probs):
        mu = sum(v * p for v, p in zip(vals, probs))
        return mu, sum((v - mu) ** 2 * p for v, p in zip(vals, probs))

    mq, vq = mean_var(vals_q, pq)
    mk, vk = mean_var(vals_k, pk)
    exact = distribution_moments(exact_dot_product_distribution(vals_q, pq, vals_k, pk, d_k))
    assert exact == dot_product_moments(d_k, mean_q=mq, var_q=vq, mean_k=mk, var_k=vk)


def test_exact_law_sums_to_one_and_rademacher_support():
    law = exact_dot_product_distribution([-1, 1], [HALF, HALF], [-1, 1], [HALF, HALF], 4)
    assert sum(law.values()) == 1
    assert set(law) == {-4, -2, 0, 2, 4}
    assert law[Fraction(4)] == Fraction(1, 16)


def test_exact_law_rejects_bad_probabilities():
    with pytest.raises(ValueError, match="sum to exactly 1"):
        exact_dot_product_distribution([0, 1], [HALF, Fraction(1, 3)], [1], [1], 2)
    with pytest.raises(ValueError, match="equally long"):
        exact_dot_product_distribution([0, 1], [1], [1], [1], 2)
    with pytest.raises(ValueError, match="d_k"):
        exact_dot_product_distribution([1], [1], [1], [1], 0)


def test_moments_validation():
    with pytest.raises(ValueError, match="d_k: expected a positive integer, got 0"):
        dot_product_moments(0)
    with pytest.raises(ValueError, match="var_q: expected a number >= 0"):
        dot_product_moments(4, var_q=-1.0)
    with pytest.raises(TypeError, match="mean_k: expected a real number"):
        dot_product_moments(4, mean_k="1")
    with pytest.raises(ValueError, match="law"):
        distribution_moments({})


# ------------------------------------------------------------------------------ sampling

@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_sample_components_has_requested_moments(distribution):
    rng = np.random.default_rng(0)
    x = sample_components(rng, 200_000, distribution=distribution, mean=1.5, var=4.0)
    assert x.shape == (200_000,) and x.dtype == np.float64
    assert abs(x.mean() - 1.5) < 5 * 2 / math.sqrt(x.size)
    assert abs(x.var() - 4.0) < 0.05


def test_sample_components_supports():
    rng = np.random.default_rng(1)
    r = sample_components(rng, 1000, distribution="rademacher", mean=2.0, var=9.0)
    assert set(np.unique(r)) == {-1.0, 5.0}
    u = sample_components(rng, 1000, distribution="uniform")
    assert np.all(np.abs(u) <= math.sqrt(3))


def test_sample_components_validation():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="distribution: expected one of"):
        sample_components(rng, 3, distribution="cauchy")
    with pytest.raises(TypeError, match="rng: expected a numpy.random.Generator"):
        sample_components(0, 3)
    with pytest.raises(ValueError, match="var: expected a number >= 0"):
        sample_components(rng, 3, var=-1.0)
    with pytest.raises(ValueError, match="mean: expected a finite"):
        sample_components(rng, 3, mean=math.nan)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_sample_dot_products_is_seeded_and_chunk_invariant(distribution):
    a = sample_dot_products(7, 50, distribution=distribution, seed=3)
    b = sample_dot_products(7, 50, distribution=distribution, seed=3, max_chunk_elements=10)
    c = sample_dot_products(7, 50, distribution=distribution, seed=4)
    assert a.shape == (50,)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_sample_dot_products_matches_direct_computation():
    seq_q, seq_k = np.random.SeedSequence(5).spawn(2)
    q = np.random.default_rng(seq_q).standard_normal((20, 3))
    k = np.random.default_rng(seq_k).standard_normal((20, 3))
    np.testing.assert_allclose(sample_dot_products(3, 20, seed=5), np.sum(q * k, axis=1),
                               rtol=1e-12)


def test_sample_dot_products_validation():
    with pytest.raises(ValueError, match="d_k: expected a positive integer"):
        sample_dot_products(0, 10)
    with pytest.raises(ValueError, match="n_samples: expected a positive integer"):
        sample_dot_products(4, 2.5)
    with pytest.raises(ValueError, match="seed: expected a non-negative integer"):
        sample_dot_products(4, 10, seed=-1)
    with pytest.raises(ValueError, match="n_samples: expected at least 2"):
        dot_product_statistics(4, 1)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("d_k", [1, 16, 256])
def test_monte_carlo_agrees_with_theory_standardised(distribution, d_k):
    s = dot_product_statistics(d_k, 4000, distribution=distribution, seed=11)
    assert abs(s.mean_z) < 4.5 and abs(s.var_z) < 4.5
    assert s.theory.mean == 0 and s.theory.var == d_k
    assert abs(s.scaled_var - 1) < 0.15
    assert math.isclose(s.scaled_var, s.var / d_k, rel_tol=1e-9)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_monte_carlo_agrees_with_theory_general(distribution):
    s = dot_product_statistics(32, 6000, distribution=distribution, mean_q=0.5, var_q=2.0,
                               mean_k=-1.0, var_k=0.5, seed=2)
    assert s.theory.mean == pytest.approx(-16.0)
    assert s.theory.var == pytest.approx(32 * (1.0 + 2.0 + 0.125))
    assert abs(s.mean_z) < 4.5 and abs(s.var_z) < 4.5
    assert s.second_moment == pytest.approx(s.theory.second_moment, rel=0.05)


# --------------------------------------------------------------------------- the softmax

@settings(max_examples=30, deadline=None)
@given(z=st.lists(st.floats(-20, 20), min_size=1, max_size=8))
def test_softmax_jacobian_matches_autograd(z):
    zt = torch.tensor(z, dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda x: softmax(x), zt)
    p = softmax(zt)
    torch.testing.assert_close(softmax_jacobian(p), auto, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(softmax_jacobian(p.numpy()), auto.numpy(), rtol=1e-10,
                               atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(z=st.lists(st.floats(-30, 30), min_size=2, max_size=10))
def test_softmax_jacobian_structure_and_saturation_bound(z):
    p = softmax(np.array(z))
    j = softmax_jacobian(p)
    np.testing.assert_allclose(j, j.T, atol=0)
    np.testing.assert_allclose(j @ np.ones(len(z)), 0.0, atol=1e-12)     # shift invariance
    eig = np.linalg.eigvalsh(j)
    assert eig.min() > -1e-12                                            # PSD
    assert np.trace(j) == pytest.approx(1 - p @ p, abs=1e-12)
    # ||J||_2 <= trace J = 1 - ||p||^2 <= 2 (1 - max p): J vanishes as p becomes one-hot
    assert eig.max() <= 1 - p @ p + 1e-12
    assert 1 - p @ p <= 2 * (1 - p.max()) + 1e-12


def test_softmax_jacobian_batched_and_validation():
    p = softmax(np.random.default_rng(0).standard_normal((2, 3, 5)))
    j = softmax_jacobian(p)
    assert j.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(j[1, 2], softmax_jacobian(p[1, 2]))
    with pytest.raises(TypeError, match="p: expected a floating dtype"):
        softmax_jacobian(np.array([1, 0]))
    with pytest.raises(ValueError, match=r"p: expected shape \(..., n\)"):
        softmax_jacobian(np.array(1.0))


def test_row_entropy_limits_numpy_and_torch():
    n = 8
    uniform = np.full((3, n), 1 / n)
    onehot = np.eye(n)[:3]
    np.testing.assert_allclose(row_entropy(uniform), math.log(n))
    np.testing.assert_array_equal(row_entropy(onehot), 0.0)
    t = row_entropy(torch.tensor(uniform))
    assert isinstance(t, torch.Tensor) and torch.allclose(t, torch.full((3,), math.log(n),
                                                                         dtype=t.dtype))
    assert row_entropy(uniform.T, axis=0).shape == (3,)
    with pytest.raises(ValueError, match="axis"):
        row_entropy(uniform, axis=2)


@settings(max_examples=30, deadline=None)
@given(z=st.lists(st.floats(-10, 10), min_size=2, max_size=8),
       t=st.floats(0.05, 50))
def test_temperature_is_inverse_scale(z, t):
    x = np.array(z)
    np.testing.assert_allclose(softmax_with_temperature(x, t), softmax(x / t), rtol=1e-12)
    h = row_entropy(softmax_with_temperature(x, t))
    assert -1e-12 <= h <= math.log(len(z)) + 1e-12


def test_temperature_limits_and_validation():
    x = np.array([0.3, 2.0, -1.0, 1.5])
    np.testing.assert_allclose(softmax_with_temperature(x, 1e-3), [0, 1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(softmax_with_temperature(x, 1e6), 0.25, atol=1e-5)
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="temperature"):
            softmax_with_temperature(x, bad)


def test_attention_scale_is_temperature_sqrt_dk():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((4, 16)), rng.standard_normal((6, 16))
    _, w = scaled_dot_product_attention(q, k, np.zeros((6, 1)), return_weights=True)
    np.testing.assert_allclose(w, softmax_with_temperature(q @ k.T, 4.0), rtol=1e-12)


# ------------------------------------------------------------------------- consequences

def test_resolve_scale():
    assert resolve_scale("sqrt", 64) == 0.125
    assert resolve_scale("none", 64) == 1.0
    assert resolve_scale("linear", 64) == 1 / 64
    assert resolve_scale(0.5, 64) == 0.5
    assert set(SCALINGS) == {"sqrt", "none", "linear"}
    with pytest.raises(ValueError, match="scaling: expected one of"):
        resolve_scale("cube", 4)
    with pytest.raises(ValueError, match="scaling: expected a number > 0"):
        resolve_scale(-1.0, 4)


def test_saturation_scaled_is_stable_and_unscaled_saturates():
    dims = [1, 16, 256, 1024]
    scaled = [attention_saturation(d, scaling="sqrt", n_queries=128) for d in dims]
    raw = [attention_saturation(d, scaling="none", n_queries=128) for d in dims]
    for s in scaled:
        assert 0.8 < s.logit_std < 1.2
        assert s.entropy > 0.85 * s.max_entropy
    assert raw[0] == scaled[0]                        # d_k = 1: the two scalings coincide
    assert [r.max_weight for r in raw] == sorted(r.max_weight for r in raw)
    assert raw[-1].max_weight > 0.9 and raw[-1].entropy < 0.2
    for s in scaled + raw:
        assert 1 / 64 <= s.max_weight <= 1 and 0 <= s.entropy <= s.max_entropy + 1e-12


def test_saturation_linear_scaling_tends_to_uniform():
    s = attention_saturation(1024, scaling="linear", n_queries=64)
    assert s.entropy > 0.99 * s.max_entropy


def test_saturation_validation():
    with pytest.raises(ValueError, match="n_keys: expected a positive integer"):
        attention_saturation(4, n_keys=0)
    with pytest.raises(ValueError, match="distribution"):
        attention_saturation(4, distribution="laplace")


def test_gradient_norms_vanish_without_scaling():
    scaled = [score_gradient_norms(d, scaling="sqrt", n_queries=128) for d in (4, 1024)]
    raw = [score_gradient_norms(d, scaling="none", n_queries=128) for d in (4, 1024)]
    assert all(0.5 < g.logits_median < 3 for g in scaled)
    assert all(g.small_fraction == 0 for g in scaled)
    assert raw[1].logits_median < 1e-2 * scaled[1].logits_median
    assert raw[1].small_fraction > 0.3
    assert raw[1].max_weight > 0.9


def test_gradient_matches_jacobian_formula():
    """dL/dz_i = J(p_i) (v g_i): check autograd's number against the explicit product."""
    from attncore.lab.scaling import _draw_qkv

    d_k, scale = 8, 1 / math.sqrt(8)
    q, k, v, g = _draw_qkv(d_k, 5, 6, 3, "gaussian", 0)
    p = softmax(q @ k.T * scale)
    dz = np.einsum("nij,nj->ni", softmax_jacobian(p), g @ v.T)
    stats = score_gradient_norms(d_k, n_queries=5, n_keys=6, d_v=3)
    norms = np.linalg.norm(dz, axis=-1)
    assert stats.logits_median == pytest.approx(float(np.median(norms)), rel=1e-10)
    assert stats.logits_mean == pytest.approx(float(norms.mean()), rel=1e-10)
