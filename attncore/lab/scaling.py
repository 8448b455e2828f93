"""Why attention divides by sqrt(d_k): the statistics of dot products, measured.

The chapter ``chapters/02_why_sqrt_dk.ipynb`` proves that for independent random vectors
``q, k`` of length ``d_k`` whose components are pairwise uncorrelated with mean ``mu_q, mu_k``
and variance ``var_q, var_k``

    E[q.k]   = d_k mu_q mu_k
    var(q.k) = d_k (var_q var_k + var_q mu_k^2 + var_k mu_q^2)

(so ``0`` and ``d_k`` for standardised components), and that without the factor
``1/sqrt(d_k)`` the softmax saturates and stops passing gradients. This module holds the
pieces that the chapter and its tests check those claims with:

* theory:       :func:`dot_product_moments`, and an exact (rational-arithmetic) oracle for
                finitely supported components, :func:`exact_dot_product_distribution` with
                :func:`distribution_moments`;
* sampling:     :func:`sample_components` (Gaussian, Rademacher, uniform with a given mean
                and variance), :func:`sample_dot_products`, :func:`dot_product_statistics`;
* the softmax:  :func:`softmax_jacobian` (``diag(p) - p p^T``), :func:`row_entropy`,
                :func:`softmax_with_temperature`;
* consequences: :func:`attention_saturation` (largest weight and row entropy against
                ``d_k``) and :func:`score_gradient_norms` (the gradient that reaches the scores,
                measured with torch autograd), for the scalings ``"sqrt"`` (``1/sqrt(d_k)``,
                the Transformer's), ``"none"`` and ``"linear"`` (``1/d_k``, as in muP);
* initialisation: :func:`projected_score_statistics` (the variance of the scaled scores
                that given projection weights produce from layer-normalised tokens).

All random draws take an explicit seed and use NumPy's ``default_rng``, so a result depends
on the seed only: not on the machine, the order of calls, or the chunk size used to save
memory.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Sequence

import numpy as np

from .._backend import NUMPY, backend_of, check_axis, check_floating, check_min_rank, shape_of
from ..attention import scaled_dot_product_attention
from ..softmax import softmax

__all__ = [
    "DISTRIBUTIONS",
    "SCALINGS",
    "DotProductMoments",
    "DotProductStatistics",
    "GradientStats",
    "ProjectedScoreStats",
    "SaturationStats",
    "attention_saturation",
    "distribution_moments",
    "dot_product_moments",
    "dot_product_statistics",
    "exact_dot_product_distribution",
    "projected_score_statistics",
    "resolve_scale",
    "row_entropy",
    "sample_components",
    "sample_dot_products",
    "score_gradient_norms",
    "softmax_jacobian",
    "softmax_with_temperature",
]

#: Component distributions the sampler knows. Each is shifted and scaled to the requested
#: mean and variance: ``"gaussian"`` N(0, 1); ``"rademacher"`` +-1 with probability 1/2 each;
#: ``"uniform"`` U(-sqrt(3), sqrt(3)), which has variance 1.
DISTRIBUTIONS = ("gaussian", "rademacher", "uniform")

#: Named score scalings: ``"sqrt"`` multiplies ``q.k`` by ``1/sqrt(d_k)`` (Vaswani et al.),
#: ``"none"`` by 1, ``"linear"`` by ``1/d_k`` (maximal-update parametrisation).
SCALINGS = ("sqrt", "none", "linear")


# --------------------------------------------------------------------------------------------
# argument checks (messages name the argument, what it got, and what was expected)
# --------------------------------------------------------------------------------------------

def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def _check_real(name: str, value: Any, *, nonnegative: bool = False,
                positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} "
                        f"({value!r})")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name}: expected a finite real number, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name}: expected a number > 0, got {value!r}")
    if nonnegative and value < 0:
        raise ValueError(f"{name}: expected a number >= 0, got {value!r}")


def _check_distribution(distribution: Any) -> str:
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: expected one of {DISTRIBUTIONS}, "
                         f"got {distribution!r}")
    return distribution


def resolve_scale(scaling: str | float, d_k: int) -> float:
    """The factor that multiplies ``q.k``: a named scaling from :data:`SCALINGS` or a number.

    ``"sqrt"`` -> ``1/sqrt(d_k)``, ``"none"`` -> ``1.0``, ``"linear"`` -> ``1/d_k``; a finite
    positive float is returned unchanged.
    """
    d_k = _check_positive_int("d_k", d_k)
    if isinstance(scaling, str):
        if scaling == "sqrt":
            return 1.0 / math.sqrt(d_k)
        if scaling == "none":
            return 1.0
        if scaling == "linear":
            return 1.0 / d_k
        raise ValueError(f"scaling: expected one of {SCALINGS} or a positive number, "
                         f"got {scaling!r}")
    _check_real("scaling", scaling, positive=True)
    return float(scaling)


# --------------------------------------------------------------------------------------------
# theory
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DotProductMoments:
    """Mean, variance and second moment ``E[(q.k)^2] = var + mean^2`` of a dot product."""

    mean: Any
    var: Any
    second_moment: Any


def dot_product_moments(d_k: int, *, mean_q: Any = 0, var_q: Any = 1, mean_k: Any = 0,
                        var_k: Any = 1) -> DotProductMoments:
    """Exact moments of ``q.k`` for the chapter's assumptions.

    Assumptions: the vectors ``q`` and ``k`` (length ``d_k``) are independent of each other;
    within each vector the components are pairwise uncorrelated, with mean ``mean_q``
    (``mean_k``) and variance ``var_q`` (``var_k``). No particular distribution is assumed.
    Then::

        mean          = d_k * mean_q * mean_k
        var           = d_k * (var_q * var_k + var_q * mean_k**2 + var_k * mean_q**2)
        second_moment = var + mean**2        (contains d_k**2 * mean_q**2 * mean_k**2)

    The arithmetic is generic: ``fractions.Fraction`` inputs give exact ``Fraction`` results.
    """
    d_k = _check_positive_int("d_k", d_k)
    for name, value in (("mean_q", mean_q), ("mean_k", mean_k)):
        _check_real(name, value)
    for name, value in (("var_q", var_q), ("var_k", var_k)):
        _check_real(name, value, nonnegative=True)
    mean = d_k * mean_q * mean_k
    var = d_k * (var_q * var_k + var_q * mean_k ** 2 + var_k * mean_q ** 2)
    return DotProductMoments(mean=mean, var=var, second_moment=var + mean ** 2)


def _finite_distribution(name: str, values: Sequence[Any],
                         probs: Sequence[Any]) -> list[tuple[Fraction, Fraction]]:
    values, probs = list(values), list(probs)
    if len(values) == 0 or len(values) != len(probs):
        raise ValueError(f"{name}: expected equally long, non-empty lists of values and "
                         f"probabilities, got {len(values)} values and {len(probs)} "
                         f"probabilities")
    try:
        pairs = [(Fraction(v), Fraction(p)) for v, p in zip(values, probs)]
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name}: expected rational numbers (int, Fraction, or float), "
                        f"got values {values!r} and probabilities {probs!r}") from err
    if any(p < 0 for _, p in pairs) or sum(p for _, p in pairs) != 1:
        raise ValueError(f"{name}: expected probabilities >= 0 that sum to exactly 1, got "
                         f"{[str(p) for _, p in pairs]}")
    return pairs


def exact_dot_product_distribution(values_q: Sequence[Any], probs_q: Sequence[Any],
                                   values_k: Sequence[Any], probs_k: Sequence[Any],
                                   d_k: int) -> dict[Fraction, Fraction]:
    """Exact law of ``q.k`` for i.i.d. finitely supported components, in rational arithmetic.

    Every component of ``q`` takes ``values_q[j]`` with probability ``probs_q[j]``, every
    component of ``k`` likewise, all ``2 d_k`` components independent. The law of one term
    ``q_i k_i`` is built from the joint table of ``(q_i, k_i)``, and the law of the sum by
    ``d_k`` convolutions. Nothing in this calculation uses linearity of expectation or a
    variance formula, which makes it an independent oracle for :func:`dot_product_moments`.

    Inputs are converted with ``fractions.Fraction`` (floats convert exactly, as binary
    fractions). Returns ``{value: probability}``. The support grows polynomially; keep
    ``d_k`` and the number of values small (``d_k <= 16`` with 2-3 values is instant).
    """
    d_k = _check_positive_int("d_k", d_k)
    pq = _finite_distribution("values_q/probs_q", values_q, probs_q)
    pk = _finite_distribution("values_k/probs_k", values_k, probs_k)
    term: dict[Fraction, Fraction] = {}
    for x, px in pq:
        for y, py in pk:
            term[x * y] = term.get(x * y, Fraction(0)) + px * py
    law: dict[Fraction, Fraction] = {Fraction(0): Fraction(1)}
    for _ in range(d_k):
        nxt: dict[Fraction, Fraction] = {}
        for s, ps in law.items():
            for t, pt in term.items():
                nxt[s + t] = nxt.get(s + t, Fraction(0)) + ps * pt
        law = nxt
    return law


def distribution_moments(law: Mapping[Any, Any]) -> DotProductMoments:
    """Mean, variance and second moment of a finitely supported law ``{value: probability}``.

    Computed straight from the definitions ``E[X] = sum x p(x)`` and
    ``var X = sum (x - E[X])^2 p(x)``; exact when the law holds ``Fraction`` values.
    """
    if len(law) == 0:
        raise ValueError("law: expected a non-empty mapping {value: probability}, got {}")
    mean = sum(x * p for x, p in law.items())
    var = sum((x - mean) ** 2 * p for x, p in law.items())
    second = sum(x * x * p for x, p in law.items())
    return DotProductMoments(mean=mean, var=var, second_moment=second)


# --------------------------------------------------------------------------------------------
# sampling
# --------------------------------------------------------------------------------------------

def sample_components(rng: np.random.Generator, shape: int | tuple[int, ...], *,
                      distribution: str = "gaussian", mean: float = 0.0,
                      var: float = 1.0) -> np.ndarray:
    """I.i.d. draws with the given mean and variance; float64 array of shape ``shape``.

    ``distribution`` is one of :data:`DISTRIBUTIONS`; each draw is ``mean + sqrt(var) * Z``
    with ``Z`` standardised (mean 0, variance 1). Rademacher signs come from
    ``rng.random() < 0.5`` and uniform draws from ``rng.random()``, which, like
    ``rng.standard_normal``, consume the generator's stream element by element: drawing
    ``n`` then ``m`` values gives the same numbers as drawing ``n + m`` at once.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator "
                        f"(np.random.default_rng(seed)), got {type(rng).__name__}")
    _check_distribution(distribution)
    _check_real("mean", mean)
    _check_real("var", var, nonnegative=True)
    if distribution == "gaussian":
        z = rng.standard_normal(shape)
    elif distribution == "rademacher":
        z = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    else:
        z = (2.0 * rng.random(shape) - 1.0) * math.sqrt(3.0)
    return mean + math.sqrt(var) * z


def sample_dot_products(d_k: int, n_samples: int, *, distribution: str = "gaussian",
                        mean_q: float = 0.0, var_q: float = 1.0, mean_k: float = 0.0,
                        var_k: float = 1.0, seed: int = 0,
                        max_chunk_elements: int = 1 << 20) -> np.ndarray:
    """``n_samples`` independent draws of ``q.k``; float64 array of shape ``(n_samples,)``.

    Each draw takes fresh ``q`` and ``k`` of length ``d_k`` with i.i.d. components (see
    :func:`sample_components`). ``q`` and ``k`` come from two independent streams spawned
    from ``np.random.SeedSequence(seed)``, and are generated ``max_chunk_elements`` numbers
    at a time to bound memory; the result does not depend on the chunk size.
    """
    d_k = _check_positive_int("d_k", d_k)
    n_samples = _check_positive_int("n_samples", n_samples)
    max_chunk_elements = _check_positive_int("max_chunk_elements", max_chunk_elements)
    _check_distribution(distribution)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    seq_q, seq_k = np.random.SeedSequence(int(seed)).spawn(2)
    rng_q, rng_k = np.random.default_rng(seq_q), np.random.default_rng(seq_k)
    rows = max(1, max_chunk_elements // d_k)
    out = np.empty(n_samples)
    for start in range(0, n_samples, rows):
        r = min(rows, n_samples - start)
        q = sample_components(rng_q, (r, d_k), distribution=distribution, mean=mean_q,
                              var=var_q)
        k = sample_components(rng_k, (r, d_k), distribution=distribution, mean=mean_k,
                              var=var_k)
        out[start:start + r] = np.einsum("nd,nd->n", q, k)
    return out


@dataclass(frozen=True)
class DotProductStatistics:
    """Monte Carlo estimates for ``q.k`` at one ``d_k``, with standard errors and theory.

    ``mean``/``var``: sample mean and (unbiased) sample variance of ``q.k``;
    ``mean_se``/``var_se``: their standard errors, estimated from the same sample
    (``sqrt(var/n)`` and ``sqrt((m4 - (n-3)/(n-1) var^2)/n)``, ``m4`` the sample fourth
    central moment);
    ``second_moment``: sample mean of ``(q.k)^2``; ``scaled_var``: sample variance of
    ``q.k / sqrt(d_k)``; ``theory``: :func:`dot_product_moments` for the same parameters.
    """

    d_k: int
    n_samples: int
    distribution: str
    mean: float
    mean_se: float
    var: float
    var_se: float
    second_moment: float
    scaled_var: float
    theory: DotProductMoments

    @property
    def mean_z(self) -> float:
        """(estimate - theory) / standard error for the mean; ``|z| < 4`` is expected."""
        return (self.mean - self.theory.mean) / self.mean_se if self.mean_se > 0 else 0.0

    @property
    def var_z(self) -> float:
        """(estimate - theory) / standard error for the variance."""
        if self.var_se > 0:
            return (self.var - self.theory.var) / self.var_se
        return 0.0 if math.isclose(self.var, self.theory.var, rel_tol=1e-12, abs_tol=1e-12) \
            else math.inf


def dot_product_statistics(d_k: int, n_samples: int, *, distribution: str = "gaussian",
                           mean_q: float = 0.0, var_q: float = 1.0, mean_k: float = 0.0,
                           var_k: float = 1.0, seed: int = 0) -> DotProductStatistics:
    """Sample ``q.k`` with :func:`sample_dot_products` and summarise it against the theory."""
    if isinstance(n_samples, numbers.Integral) and not isinstance(n_samples, bool) \
            and 0 < n_samples < 2:
        raise ValueError(f"n_samples: expected at least 2 to estimate a variance, "
                         f"got {n_samples}")
    s = sample_dot_products(d_k, n_samples, distribution=distribution, mean_q=mean_q,
                            var_q=var_q, mean_k=mean_k, var_k=var_k, seed=seed)
    n = n_samples
    mean = float(s.mean())
    centred = s - mean
    var = float(centred @ centred / (n - 1))
    m4 = float(np.mean(centred ** 4))
    # var(sample variance) = (mu4 - (n-3)/(n-1) sigma^4) / n, with the moments estimated.
    var_se = math.sqrt(max(m4 - (n - 3) / (n - 1) * var * var, 0.0) / n)
    return DotProductStatistics(
        d_k=d_k, n_samples=n, distribution=distribution, mean=mean,
        mean_se=math.sqrt(var / n), var=var, var_se=var_se,
        second_moment=float(s @ s / n),
        scaled_var=float(np.var(s / math.sqrt(d_k), ddof=1)),
        theory=dot_product_moments(d_k, mean_q=mean_q, var_q=var_q, mean_k=mean_k,
                                   var_k=var_k))


# --------------------------------------------------------------------------------------------
# the softmax: Jacobian, entropy, temperature
# --------------------------------------------------------------------------------------------

def softmax_jacobian(p: Any) -> Any:
    """Jacobian of the softmax at probabilities ``p``: ``J = diag(p) - p p^T``.

    ``J[..., i, j] = d softmax(z)_i / d z_j = p_i (delta_ij - p_j)`` where ``p = softmax(z)``.

    Parameters
    ----------
    p : array ``(..., n)``, floating dtype, NumPy or torch
        Probability vectors along the last axis (not checked to sum to one).

    Returns
    -------
    Array ``(..., n, n)``, same dtype, library and device: symmetric, positive semidefinite,
    with rows summing to ``p_i (1 - sum_j p_j)``, i.e. zero for a probability vector.
    """
    backend = backend_of(p=p)
    check_floating("p", p)
    check_min_rank("p", p, 1, "(..., n)")
    if backend == NUMPY:
        return p[..., :, None] * np.eye(p.shape[-1], dtype=p.dtype) \
            - p[..., :, None] * p[..., None, :]
    import torch

    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def row_entropy(p: Any, axis: int = -1) -> Any:
    """Shannon entropy in nats, ``-sum p log p`` along ``axis``, with ``0 log 0 = 0``.

    A uniform row of length ``n`` has entropy ``log n``, a one-hot row 0.

    Parameters
    ----------
    p : numpy.ndarray or torch.Tensor, shape ``(...)``, floating
        Probability distributions along ``axis``: every entry finite and ``>= 0``, every
        slice summing to 1 to within ``1e-3`` (``0.03`` in float16), which accepts the
        rounding of weights computed in a lower precision and rejects what is not a
        distribution.
    axis : int, default -1
        The axis along which each slice is a distribution.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        ``p``'s shape with ``axis`` removed, same library and dtype; values in
        ``[0, log n]``.

    Raises
    ------
    TypeError
        ``p`` is not a floating array, ``axis`` is not an integer.
    ValueError
        ``axis`` out of range, or ``p`` is not a distribution along it (a negative or
        non-finite entry, a slice whose sum is not 1: an all-zero row of fully masked
        attention weights included, which has no entropy).
    """
    backend = backend_of(p=p)
    check_floating("p", p)
    if p.ndim == 0:
        raise ValueError("p: expected an array with at least 1 dimension, got a "
                         "0-dimensional array")
    axis = check_axis("axis", axis, p)
    if backend == NUMPY:
        values = p.astype(np.float64)
        sums = values.sum(axis=axis)
        bad_entry = bool((~np.isfinite(values) | (values < 0)).any())
        tol = max(1e-3, math.sqrt(float(np.finfo(p.dtype).eps)))
    else:
        import torch

        values = p.detach().to(torch.float64)
        sums = values.sum(dim=axis)
        bad_entry = bool((~torch.isfinite(values) | (values < 0)).any())
        tol = max(1e-3, math.sqrt(float(torch.finfo(p.dtype).eps)))
        sums = sums.cpu().numpy()
    if bad_entry:
        raise ValueError("p: expected probabilities (finite and >= 0), got a negative or "
                         "non-finite entry")
    off = np.abs(sums - 1.0) > tol
    if off.any():
        where = tuple(int(i) for i in np.argwhere(off)[0])
        raise ValueError(f"p: expected every slice along axis {axis} to sum to 1 (a "
                         f"probability distribution), got a sum of "
                         f"{float(sums[where]):.6g} at index {where}")
    if backend == NUMPY:
        safe = np.where(p > 0, p, 1.0)
        return -np.sum(np.where(p > 0, p * np.log(safe), 0.0), axis=axis)
    safe = torch.where(p > 0, p, torch.ones_like(p))
    return -torch.sum(torch.where(p > 0, p * torch.log(safe), torch.zeros_like(p)), dim=axis)


def softmax_with_temperature(x: Any, temperature: float, axis: int = -1) -> Any:
    """``softmax(x / temperature)`` along ``axis``; same shape, dtype and library as ``x``.

    Temperature ``T`` is the inverse of the score scale: attention's ``1/sqrt(d_k)`` is
    ``T = sqrt(d_k)``. ``T -> 0`` tends to the one-hot argmax, ``T -> inf`` to uniform.
    """
    _check_real("temperature", temperature, positive=True)
    return softmax(x / temperature, axis=axis)


# --------------------------------------------------------------------------------------------
# consequences: saturation and gradients
# --------------------------------------------------------------------------------------------

def _draw_qkv(d_k: int, n_queries: int, n_keys: int, d_v: int, distribution: str, seed: int):
    # One generator per (seed, d_k): the draw at one d_k does not depend on which other
    # d_k were measured before, and every scaling sees the same q, k, v.
    rng = np.random.default_rng([seed, d_k])
    q = sample_components(rng, (n_queries, d_k), distribution=distribution)
    k = sample_components(rng, (n_keys, d_k), distribution=distribution)
    v = sample_components(rng, (n_keys, d_v), distribution="gaussian")
    g = sample_components(rng, (n_queries, d_v), distribution="gaussian")
    return q, k, v, g


def _check_sizes(**sizes: Any) -> dict[str, int]:
    return {name: _check_positive_int(name, value) for name, value in sizes.items()}


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    return int(seed)


@dataclass(frozen=True)
class SaturationStats:
    """How peaked the attention rows are at one ``d_k`` and one scale.

    ``max_weight``: mean over queries of the largest weight in the row (``1/n_keys`` =
    uniform, 1 = one-hot); ``entropy``: mean row entropy in nats, between 0 (one-hot) and
    ``max_entropy = log(n_keys)`` (uniform); ``logit_std``: standard deviation of the scaled
    scores.
    """

    d_k: int
    scale: float
    max_weight: float
    entropy: float
    max_entropy: float
    logit_std: float


def attention_saturation(d_k: int, *, scaling: str | float = "sqrt", n_queries: int = 256,
                         n_keys: int = 64, distribution: str = "gaussian",
                         seed: int = 0) -> SaturationStats:
    """Largest attention weight and row entropy for random ``q, k`` with standardised components.

    Draws ``q`` ``(n_queries, d_k)`` and ``k`` ``(n_keys, d_k)`` (float64, seeded by
    ``(seed, d_k)``, so all scalings see the same vectors), computes the weights with
    :func:`attncore.scaled_dot_product_attention` at the scale given by ``scaling`` (see
    :func:`resolve_scale`) and summarises them.
    """
    sizes = _check_sizes(d_k=d_k, n_queries=n_queries, n_keys=n_keys)
    _check_distribution(distribution)
    seed = _check_seed(seed)
    scale = resolve_scale(scaling, sizes["d_k"])
    q, k, _, _ = _draw_qkv(sizes["d_k"], sizes["n_queries"], sizes["n_keys"], 1,
                           distribution, seed)
    dummy_v = np.zeros((sizes["n_keys"], 1))
    _, w = scaled_dot_product_attention(q, k, dummy_v, scale=scale, return_weights=True)
    return SaturationStats(d_k=sizes["d_k"], scale=scale,
                           max_weight=float(w.max(axis=-1).mean()),
                           entropy=float(row_entropy(w).mean()),
                           max_entropy=math.log(sizes["n_keys"]),
                           logit_std=float(np.std(q @ k.T * scale)))


@dataclass(frozen=True)
class GradientStats:
    """Gradient norms reaching the attention scores, for one ``d_k`` and one scale.

    With ``z = scale * q k^T`` (the softmax's input), ``P = softmax(z)``, ``out = P v`` and the
    loss ``L = sum(out * g)`` for a fixed random upstream gradient ``g``, each query row ``i``
    has a gradient ``dL/dz_i`` (length ``n_keys``) and ``dL/dq_i`` (length ``d_k``):

    ``logits_median``/``logits_mean``: median and mean over rows of ``||dL/dz_i||_2``;
    ``queries_median``: median over rows of ``||dL/dq_i||_2``;
    ``small_fraction``: fraction of rows with ``||dL/dz_i||_2 < 1e-3`` (rows that have
    practically stopped learning);
    ``max_weight``: mean largest attention weight (how saturated the rows are).

    The median is the typical row; the mean is dominated by the few rows whose two largest
    scores happen to be close, which stay soft even when almost all rows have saturated.
    """

    d_k: int
    scale: float
    logits_median: float
    logits_mean: float
    queries_median: float
    small_fraction: float
    max_weight: float


def score_gradient_norms(d_k: int, *, scaling: str | float = "sqrt", n_queries: int = 256,
                         n_keys: int = 64, d_v: int = 64, distribution: str = "gaussian",
                         seed: int = 0, device: Any = "cpu") -> GradientStats:
    """Measure with torch autograd how much gradient reaches the scores and the queries.

    ``q`` ``(n_queries, d_k)``, ``k`` ``(n_keys, d_k)`` with standardised components
    (``distribution``), ``v`` ``(n_keys, d_v)`` and the upstream gradient ``g``
    ``(n_queries, d_v)`` standard Gaussian; all float64, drawn with NumPy from
    ``(seed, d_k)`` (the same draws for every scaling) and moved to ``device``. The softmax
    is :func:`attncore.softmax`. By the chain rule ``dL/dz_i = J(p_i) (v g_i)``, with ``J``
    the :func:`softmax_jacobian`, so the gradient vanishes when the rows saturate.
    """
    import torch

    sizes = _check_sizes(d_k=d_k, n_queries=n_queries, n_keys=n_keys, d_v=d_v)
    _check_distribution(distribution)
    seed = _check_seed(seed)
    scale = resolve_scale(scaling, sizes["d_k"])
    arrays = _draw_qkv(sizes["d_k"], sizes["n_queries"], sizes["n_keys"], sizes["d_v"],
                       distribution, seed)
    q, k, v, g = (torch.from_numpy(a).to(device) for a in arrays)
    q.requires_grad_(True)
    z = (q @ k.T) * scale
    z.retain_grad()
    p = softmax(z, axis=-1)
    loss = ((p @ v) * g).sum()
    loss.backward()
    dz = z.grad.norm(dim=-1).detach().cpu().numpy()
    dq = q.grad.norm(dim=-1).detach().cpu().numpy()
    return GradientStats(d_k=sizes["d_k"], scale=scale,
                         logits_median=float(np.median(dz)), logits_mean=float(dz.mean()),
                         queries_median=float(np.median(dq)),
                         small_fraction=float(np.mean(dz < 1e-3)),
                         max_weight=float(p.detach().amax(dim=-1).mean()))


# --------------------------------------------------------------------------------------------
# initialisation: what given projection weights do to the scores
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProjectedScoreStats:
    """Scores that projection weights produce at initialisation, for one number of heads.

    ``weight_var``: variance of the entries of ``W_Q`` and ``W_K`` together (about their
    mean); ``query_var``: variance of the query components ``q = x W_Q``; ``score_var``:
    variance of the raw scores ``q . k``; ``scaled_score_var``: variance of
    ``q . k / sqrt(d_k)``. The score statistics run over every head and every (query, key)
    pair of tokens.
    """

    d_model: int
    num_heads: int
    d_k: int
    weight_var: float
    query_var: float
    score_var: float
    scaled_score_var: float


def _weight_matrix(name: str, w: Any) -> np.ndarray:
    backend = backend_of(**{name: w})
    check_floating(name, w)
    if w.ndim != 2:
        raise ValueError(f"{name}: expected a matrix of shape (d_model, d_out), got shape "
                         f"{shape_of(w)}")
    return np.asarray(w, dtype=np.float64) if backend == NUMPY \
        else w.detach().to("cpu").double().numpy()


def projected_score_statistics(w_q: Any, w_k: Any, num_heads: int, *, n_tokens: int = 256,
                               seed: int = 0) -> ProjectedScoreStats:
    """Variance of the attention scores that the projections ``w_q``, ``w_k`` produce.

    Draws ``n_tokens`` tokens ``x`` ``(n_tokens, d_model)`` with standard normal entries and
    normalises each to mean 0 and variance 1 over its features (layer normalisation with its
    initial gain 1 and shift 0), projects ``q = x w_q`` and ``k = x w_k``, splits the
    ``d_out`` columns into ``num_heads`` heads of ``d_k = d_out / num_heads`` columns, and
    measures the scores ``q . k`` of every head and every pair of tokens.

    Parameters
    ----------
    w_q, w_k : arrays ``(d_model, d_out)``, floating, NumPy or torch
        Query and key projections in attncore's layout, ``q = x @ w_q`` (the transpose of
        ``nn.Linear.weight``; :func:`attncore.params_from_torch` converts a
        ``torch.nn.MultiheadAttention``). Computed in float64 on the CPU.
    num_heads : int
        Number of heads; must divide ``d_out``.
    n_tokens : int
        Number of tokens drawn (at least 2).
    seed : int
        Seed of ``np.random.default_rng`` for the tokens.

    Returns
    -------
    ProjectedScoreStats
        For weights with independent zero-mean entries, the theory in
        ``chapters/02_why_sqrt_dk.ipynb`` predicts ``query_var = d_model * weight_var`` and
        ``scaled_score_var = query_var**2``, whatever ``num_heads`` is.
    """
    backend_of(w_q=w_q, w_k=w_k)   # one library for both, as everywhere in attncore
    wq, wk = _weight_matrix("w_q", w_q), _weight_matrix("w_k", w_k)
    if wq.shape != wk.shape:
        raise ValueError(f"w_q and w_k must have the same shape (d_model, d_out), got w_q "
                         f"{wq.shape} and w_k {wk.shape}")
    d_model, d_out = wq.shape
    num_heads = _check_positive_int("num_heads", num_heads)
    if d_out % num_heads:
        raise ValueError(f"num_heads: expected a divisor of d_out = {d_out} (the projections' "
                         f"output width), got {num_heads}")
    n_tokens = _check_positive_int("n_tokens", n_tokens)
    if n_tokens < 2:
        raise ValueError(f"n_tokens: expected at least 2 to estimate a variance, got "
                         f"{n_tokens}")
    seed = _check_seed(seed)
    if d_model < 2:
        raise ValueError(f"w_q: expected d_model >= 2 to normalise the tokens, got shape "
                         f"{wq.shape}")
    x = np.random.default_rng(seed).standard_normal((n_tokens, d_model))
    x = (x - x.mean(axis=-1, keepdims=True)) / x.std(axis=-1, keepdims=True)
    d_k = d_out // num_heads
    q = (x @ wq).reshape(n_tokens, num_heads, d_k).swapaxes(0, 1)   # (heads, n, d_k)
    k = (x @ wk).reshape(n_tokens, num_heads, d_k).swapaxes(0, 1)
    scores = q @ k.swapaxes(-1, -2)                                  # (heads, n, n)
    return ProjectedScoreStats(
        d_model=int(d_model), num_heads=num_heads, d_k=int(d_k),
        weight_var=float(np.concatenate([wq.ravel(), wk.ravel()]).var()),
        query_var=float(q.var()), score_var=float(scores.var()),
        scaled_score_var=float(scores.var() / d_k))
