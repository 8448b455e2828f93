"""The worked examples that several chapters share, built in one place.

A chapter that returns to an example calls the same function with the same seed, so the
reader meets the same numbers again (the same attention matrix in chapter 3 and chapter 4,
say) rather than a look-alike drawn with another seed.

* :func:`small_product`     -- the ``(3, 3) @ (3, 2)`` product of small integers that
  chapter 3 reads in four ways
* :func:`five_word_example` -- "attention is all you need": five tokens embedded in
  ``d_model = 512`` dimensions and one head with ``d_k = d_v = 512``, seeded random
  embeddings and projections
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FIVE_WORDS", "FIVE_WORD_SEED", "FiveWordExample", "five_word_example",
           "small_product"]

FIVE_WORDS = ("attention", "is", "all", "you", "need")
"""The five tokens of the running sentence, in order."""

FIVE_WORD_SEED = 0
"""The seed of :func:`five_word_example`: every chapter that shows the example uses it."""


def small_product() -> tuple[np.ndarray, np.ndarray]:
    """The running example of the matrix-product views: ``A`` ``(3, 3)`` and ``B`` ``(3, 2)``.

    Both hold small integers stored as float64, so every product and partial sum of
    ``A @ B`` is exactly representable and every order of summation gives the same bits.
    Returns fresh arrays on each call.
    """
    a = np.array([[1.0, 2.0, 0.0],
                  [-1.0, 3.0, 1.0],
                  [2.0, 0.0, -2.0]])
    b = np.array([[1.0, -1.0],
                  [0.0, 2.0],
                  [3.0, 1.0]])
    return a, b


@dataclass(frozen=True)
class FiveWordExample:
    """One head of self-attention over the five-word sentence.

    Attributes
    ----------
    words : tuple of str
        The tokens, one per row of ``X``.
    X : ndarray, shape ``(n, d_model)``, float64
        The embeddings, one row per token; entries standard normal.
    W_Q, W_K : ndarray, shape ``(d_model, d_k)``, float64
        Query and key projections; entries normal with variance ``1 / d_model``.
    W_V : ndarray, shape ``(d_model, d_v)``, float64
        Value projection, drawn the same way.
    seed : int
        The seed all of the above were drawn with.
    """

    words: tuple[str, ...]
    X: np.ndarray
    W_Q: np.ndarray
    W_K: np.ndarray
    W_V: np.ndarray
    seed: int

    @property
    def Q(self) -> np.ndarray:
        """Queries ``X @ W_Q``, shape ``(n, d_k)``."""
        return self.X @ self.W_Q

    @property
    def K(self) -> np.ndarray:
        """Keys ``X @ W_K``, shape ``(n, d_k)``."""
        return self.X @ self.W_K

    @property
    def V(self) -> np.ndarray:
        """Values ``X @ W_V``, shape ``(n, d_v)``."""
        return self.X @ self.W_V


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


def five_word_example(*, d_model: int = 512, d_k: int = 512, d_v: int = 512,
                      seed: int = FIVE_WORD_SEED) -> FiveWordExample:
    """The five-word sentence with seeded random embeddings and one head's projections.

    Draws, in this order from ``numpy.random.default_rng(seed)``: ``X`` ``(5, d_model)``
    with standard normal entries, then ``W_Q``, ``W_K`` ``(d_model, d_k)`` and ``W_V``
    ``(d_model, d_v)`` with standard normal entries divided by ``sqrt(d_model)``, so that
    the entries of ``Q``, ``K`` and ``V`` have variance about one. Nothing is trained: the
    example shows the mechanics of attention, not what a model has learned.

    Parameters
    ----------
    d_model, d_k, d_v : int
        Widths of the embeddings, of the queries and keys, and of the values.
    seed : int
        Seed of the generator; the chapters use the default, :data:`FIVE_WORD_SEED`.

    Returns
    -------
    FiveWordExample
        Fresh float64 arrays on each call, so a chapter may edit its copy.
    """
    d_model = _positive_int("d_model", d_model)
    d_k = _positive_int("d_k", d_k)
    d_v = _positive_int("d_v", d_v)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(FIVE_WORDS), d_model))
    w_q, w_k, w_v = (rng.standard_normal((d_model, d)) / np.sqrt(d_model)
                     for d in (d_k, d_k, d_v))
    return FiveWordExample(words=FIVE_WORDS, X=x, W_Q=w_q, W_K=w_k, W_V=w_v, seed=int(seed))
