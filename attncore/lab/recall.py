"""Associative recall: store ``n`` key-value pairs, ask with a key, read back its value.

The task that separates softmax attention from linear attention in the chapter: keys are
random unit vectors in ``R^d``, values random sign vectors in ``{-1, 1}^d``, and every
stored key is asked once as a query. A query counts as answered if the output is closer
(by dot product) to the right value than to every other stored value.
"""

from __future__ import annotations

import numpy as np

__all__ = ["recall_accuracy", "recall_task"]


def recall_task(n_pairs: int, d: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys ``(n_pairs, d)`` of unit length and values ``(n_pairs, d)`` of signs, float64."""
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((n_pairs, d))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    values = rng.choice([-1.0, 1.0], size=(n_pairs, d))
    return keys, values


def recall_accuracy(out: np.ndarray, values: np.ndarray) -> float:
    """The fraction of rows ``i`` of ``out`` whose best-matching stored value is ``i``."""
    best = np.argmax(np.asarray(out) @ values.T, axis=1)
    return float(np.mean(best == np.arange(len(values))))
