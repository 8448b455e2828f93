"""Tests of attncore.lab.examples: the shared worked examples are what their docstrings say,
and every call gives the same numbers (so two chapters show the same matrices)."""

from __future__ import annotations

import numpy as np
import pytest

from attncore.lab.examples import (FIVE_WORD_SEED, FIVE_WORDS, five_word_example,
                                   small_product)


def test_small_product_is_exact_in_every_summation_order():
    a, b = small_product()
    assert a.shape == (3, 3) and b.shape == (3, 2)
    assert a.dtype == b.dtype == np.float64
    assert np.array_equal(a, np.round(a)) and np.array_equal(b, np.round(b))
    c = a @ b
    by_hand = np.array([[sum(a[i, t] * b[t, j] for t in reversed(range(3)))
                         for j in range(2)] for i in range(3)])
    assert np.array_equal(c, by_hand)


def test_small_product_returns_fresh_arrays():
    a, _ = small_product()
    a[0, 0] = 99.0
    assert small_product()[0][0, 0] == 1.0


def test_five_word_example_shapes_and_scales():
    ex = five_word_example()
    assert ex.words == FIVE_WORDS and ex.seed == FIVE_WORD_SEED
    assert ex.X.shape == (5, 512)
    assert ex.W_Q.shape == ex.W_K.shape == ex.W_V.shape == (512, 512)
    assert ex.Q.shape == ex.K.shape == ex.V.shape == (5, 512)
    assert np.array_equal(ex.Q, ex.X @ ex.W_Q) and np.array_equal(ex.V, ex.X @ ex.W_V)
    # entries of W have variance 1/d_model, so those of Q have variance about one
    assert abs(ex.W_Q.var() * 512 - 1) < 0.02
    assert 0.8 < ex.Q.var() < 1.2


def test_five_word_example_is_the_same_on_every_call_and_fresh():
    one, two = five_word_example(), five_word_example()
    for name in ("X", "W_Q", "W_K", "W_V"):
        assert np.array_equal(getattr(one, name), getattr(two, name))
        assert getattr(one, name) is not getattr(two, name)
    other = five_word_example(seed=FIVE_WORD_SEED + 1)
    assert not np.array_equal(one.X, other.X)


def test_five_word_example_draws_in_the_documented_order():
    rng = np.random.default_rng(FIVE_WORD_SEED)
    x = rng.standard_normal((5, 512))
    w_q = rng.standard_normal((512, 512)) / np.sqrt(512)
    ex = five_word_example()
    assert np.array_equal(ex.X, x) and np.array_equal(ex.W_Q, w_q)


def test_five_word_example_other_widths():
    ex = five_word_example(d_model=16, d_k=4, d_v=3)
    assert ex.X.shape == (5, 16) and ex.Q.shape == (5, 4) and ex.V.shape == (5, 3)


@pytest.mark.parametrize("kwargs,words", [
    ({"d_model": 0}, "d_model: expected a positive int, got 0"),
    ({"d_k": 2.0}, "d_k: expected a positive int, got 2.0"),
    ({"d_v": True}, "d_v: expected a positive int, got True"),
    ({"seed": -1}, "seed: expected a non-negative int, got -1"),
])
def test_bad_arguments_are_named(kwargs, words):
    with pytest.raises(ValueError) as info:
        five_word_example(**kwargs)
    assert words in str(info.value)
