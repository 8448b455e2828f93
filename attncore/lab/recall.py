"""Associative recall: store ``n`` key-value pairs, ask with a key, read back its value.

The task that separates softmax attention from linear attention in chapter 14: keys are
random unit vectors in ``R^d``, values random sign vectors in ``{-1, 1}^d``, and every
stored key is asked once as a query. A query counts as answered if the output is closer
(by dot product) to the right value than to every other stored value.

Chapter 19 asks two more questions of a memory that is written in order, one pair per
token: does it return the *newest* value of a key written twice (:func:`overwrite_task`),
and does it still return the newest pairs when far more pairs than it can hold have been
written (the last rows of :func:`recall_task`, with ``targets``)?
"""

from __future__ import annotations

import numpy as np

__all__ = ["overwrite_task", "recall_accuracy", "recall_task"]


def recall_task(n_pairs: int, d: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys ``(n_pairs, d)`` of unit length and values ``(n_pairs, d)`` of signs, float64."""
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((n_pairs, d))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    values = rng.choice([-1.0, 1.0], size=(n_pairs, d))
    return keys, values


def overwrite_task(n_keys: int, d: int, *,
                   seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n_keys`` keys written twice, the second time with a new value.

    The written sequence is the ``n_keys`` pairs of :func:`recall_task` (``seed``), then
    the same keys in the same order with fresh sign values (drawn from ``seed`` too, by
    another generator). The question for key ``i`` is its *current* value, the one
    written second, at row ``n_keys + i``.

    Returns
    -------
    keys : ndarray, shape ``(2 n_keys, d)``
        The keys in the order written (the same ``n_keys`` rows twice).
    values : ndarray, shape ``(2 n_keys, d)``
        The values in the order written.
    targets : ndarray of int, shape ``(n_keys,)``
        For the query ``keys[i]``, the row of ``values`` that holds its current value,
        ``n_keys + i``.
    """
    keys, old = recall_task(n_keys, d, seed=seed)
    new = np.random.default_rng([seed, 1]).choice([-1.0, 1.0], size=(n_keys, d))
    return (np.concatenate([keys, keys]), np.concatenate([old, new]),
            np.arange(n_keys, 2 * n_keys))


def recall_accuracy(out: np.ndarray, values: np.ndarray,
                    targets: np.ndarray | None = None) -> float:
    """The fraction of rows ``i`` of ``out`` whose best-matching row of ``values`` (by dot
    product) is ``targets[i]``.

    Parameters
    ----------
    out : array, shape ``(m, d)``
        What the memory returned for ``m`` queries.
    values : array, shape ``(n, d)``
        Every value stored (the candidates).
    targets : array of int, shape ``(m,)``, optional
        The right row of ``values`` for each query; by default ``0, 1, ..., m - 1`` (query
        ``i`` asks for value ``i``, with ``m == n``).

    Returns
    -------
    float
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        ``out`` and ``values`` of different widths, or ``targets`` of a length other than
        ``m``; without ``targets``, ``m != n``.
    """
    out, values = np.asarray(out), np.asarray(values)
    if out.ndim != 2 or values.ndim != 2 or out.shape[1] != values.shape[1]:
        raise ValueError(f"out, values: expected shapes (m, d) and (n, d), got {out.shape} "
                         f"and {values.shape}")
    if targets is None:
        if len(out) != len(values):
            raise ValueError(f"out, values: without targets, query i asks for value i, so "
                             f"they need as many rows; got {len(out)} and {len(values)}")
        targets = np.arange(len(values))
    targets = np.asarray(targets)
    if targets.shape != (len(out),):
        raise ValueError(f"targets: expected shape ({len(out)},), one row of values per "
                         f"query, got {targets.shape}")
    best = np.argmax(out @ values.T, axis=1)
    return float(np.mean(best == targets))
