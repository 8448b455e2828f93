"""The moments of a trained model's queries and keys, and the spread of its attention scores
against what the independence assumptions predict.

Input: each layer's queries and keys, ``(batch, heads, n, d_k)`` arrays (``BertOutput``
with ``return_qk=True``), and the ``(batch, n)`` mask of real tokens. For one head, let the
corpus's real tokens give queries ``q_t`` and keys ``k_t`` (``t = 1..T``), with component
means ``mu_q, mu_k``, standard deviations ``s_q, s_k`` (population, divided by ``T``) and
second-moment matrices ``M_q = (1/T) sum_t q_t q_t^T``, ``M_k`` likewise. Every spread is of
the *scaled* score ``q . k / sqrt(d_k)``. Computed in float64.

* ``predicted_diagonal``: ``sqrt(sum_i s_qi^2 s_ki^2 + s_qi^2 mu_ki^2 + s_ki^2 mu_qi^2) /
  sqrt(d_k)``, the variance formula under (A1) q independent of k and (A2) uncorrelated
  components, with each component's own mean and variance;
* ``predicted_zero_mean``: the same with the means set to 0, ``sqrt(sum_i s_qi^2 s_ki^2 / d_k)``;
* ``predicted_independent``: ``sqrt(tr(M_q M_k) - (mu_q . mu_k)^2) / sqrt(d_k)``, exact under
  (A1) alone, whatever the correlations between components;
* ``independent_pairs``: the measured spread over all ``T^2`` query-key pairs of the corpus
  (the empirical distribution of an independent pair: equals the previous line exactly);
* ``measured``: the spread over the pairs attention actually scores, query and key in the
  same sentence.

``dims_q`` and ``dims_k`` measure how many directions the queries (keys) really use: the
participation ratio ``(sum lambda)^2 / sum lambda^2`` of the eigenvalues ``lambda`` of their
covariance matrix, ``d_k`` for uncorrelated components of equal variance, 1 when all the
variance lies along one direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["ScoreStatistics", "score_statistics"]


@dataclass
class ScoreStatistics:
    """Per-head results, each an array ``(layers, heads)`` (see the module docstring).

    Moments (root mean square over the ``d_k`` components): ``std_q``, ``std_k`` (of the
    components' standard deviations), ``mean_q``, ``mean_k`` (of the components' means).
    Correlations: ``corr_q``, ``corr_k``, the mean absolute correlation between two
    different components of a query (of a key); ``corr_noise``, float, what that mean would
    be for truly uncorrelated components with this many tokens, ``sqrt(2 / (pi T))``;
    ``dims_q``, ``dims_k``, the participation ratios (module docstring).
    Spreads of ``q . k / sqrt(d_k)``: ``predicted_zero_mean``, ``predicted_diagonal``,
    ``predicted_independent``, ``independent_pairs``, ``measured``; means:
    ``predicted_mean`` (``mu_q . mu_k / sqrt(d_k)``) and ``measured_mean``.
    ``tokens``: T.
    """

    std_q: np.ndarray
    std_k: np.ndarray
    mean_q: np.ndarray
    mean_k: np.ndarray
    corr_q: np.ndarray
    corr_k: np.ndarray
    corr_noise: float
    dims_q: np.ndarray
    dims_k: np.ndarray
    predicted_zero_mean: np.ndarray
    predicted_diagonal: np.ndarray
    predicted_independent: np.ndarray
    independent_pairs: np.ndarray
    measured: np.ndarray
    predicted_mean: np.ndarray
    measured_mean: np.ndarray
    tokens: int


def _mean_abs_offdiagonal_corr(x: np.ndarray) -> float:
    c = np.corrcoef(x, rowvar=False)
    off = ~np.eye(c.shape[0], dtype=bool)
    return float(np.abs(c[off]).mean())


def _participation_ratio(x: np.ndarray) -> float:
    eig = np.linalg.eigvalsh(np.cov(x, rowvar=False, bias=True))
    return float(eig.sum() ** 2 / (eig ** 2).sum())


def score_statistics(queries: Sequence[Any], keys: Sequence[Any], mask: Any) -> ScoreStatistics:
    """Measure every head (inputs as in the module docstring)."""
    mask = np.asarray(mask, dtype=bool)
    n_layers = len(queries)
    n_heads, d_k = np.asarray(queries[0]).shape[1], np.asarray(queries[0]).shape[-1]
    names = ["std_q", "std_k", "mean_q", "mean_k", "corr_q", "corr_k", "dims_q", "dims_k",
             "predicted_zero_mean", "predicted_diagonal", "predicted_independent",
             "independent_pairs", "measured", "predicted_mean", "measured_mean"]
    out = {name: np.zeros((n_layers, n_heads)) for name in names}
    lengths = mask.sum(axis=1)
    tokens = int(lengths.sum())
    root = np.sqrt(d_k)
    for layer in range(n_layers):
        Q = np.asarray(queries[layer], dtype=np.float64)
        K = np.asarray(keys[layer], dtype=np.float64)
        for h in range(n_heads):
            q, k = Q[:, h][mask], K[:, h][mask]                       # (T, d_k)
            mu_q, mu_k = q.mean(axis=0), k.mean(axis=0)
            var_q, var_k = q.var(axis=0), k.var(axis=0)
            m_q, m_k = q.T @ q / tokens, k.T @ k / tokens
            r = {"std_q": np.sqrt(var_q.mean()), "std_k": np.sqrt(var_k.mean()),
                 "mean_q": np.sqrt((mu_q ** 2).mean()), "mean_k": np.sqrt((mu_k ** 2).mean()),
                 "corr_q": _mean_abs_offdiagonal_corr(q),
                 "corr_k": _mean_abs_offdiagonal_corr(k),
                 "dims_q": _participation_ratio(q), "dims_k": _participation_ratio(k)}
            r["predicted_zero_mean"] = np.sqrt((var_q * var_k).sum()) / root
            r["predicted_diagonal"] = np.sqrt((var_q * var_k + var_q * mu_k ** 2
                                               + var_k * mu_q ** 2).sum()) / root
            r["predicted_independent"] = np.sqrt(np.sum(m_q * m_k) - (mu_q @ mu_k) ** 2) / root
            r["predicted_mean"] = mu_q @ mu_k / root
            r["independent_pairs"] = (q @ k.T).std() / root
            within = []
            for b, n in enumerate(lengths):
                within.append((Q[b, h, :n] @ K[b, h, :n].T).ravel())
            within = np.concatenate(within) / root
            r["measured"], r["measured_mean"] = within.std(), within.mean()
            for name, value in r.items():
                out[name][layer, h] = value
    return ScoreStatistics(**out, corr_noise=float(np.sqrt(2 / (np.pi * tokens))),
                           tokens=tokens)
