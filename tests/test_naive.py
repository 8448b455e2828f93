"""Tests of attncore.lab.naive.naive_softmax: right where it can be, broken where it must be."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attncore.lab.naive import naive_softmax
from attncore.softmax import softmax


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
                  elements=st.floats(-30, 30)))
def test_agrees_with_stable_softmax_for_moderate_logits(x):
    for axis in range(-x.ndim, x.ndim):
        np.testing.assert_allclose(naive_softmax(x, axis=axis), softmax(x, axis=axis),
                                   rtol=1e-12, atol=1e-15)


def test_torch_agrees_with_numpy():
    x = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_allclose(naive_softmax(torch.from_numpy(x)).numpy(), naive_softmax(x),
                               rtol=1e-12, atol=0)


@pytest.mark.parametrize("make", [np.asarray, torch.tensor])
@pytest.mark.parametrize("dtype_name, logits", [
    ("float32", [100.0, 99.0, 98.0]),      # exp overflows above ~88.7
    ("float16", [12.0, 11.5, 11.25]),      # exp overflows above ~11.1
])
def test_overflows_where_the_stable_version_does_not(make, dtype_name, logits):
    dtype = getattr(np, dtype_name) if make is np.asarray else getattr(torch, dtype_name)
    x = make(logits, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the demonstration must print no warnings
        bad = naive_softmax(x)
    good = softmax(x)
    assert bad.dtype == x.dtype
    bad_np = np.asarray(bad.float() if isinstance(bad, torch.Tensor) else bad, dtype=float)
    good_np = np.asarray(good.float() if isinstance(good, torch.Tensor) else good, dtype=float)
    assert np.isnan(bad_np).all()               # inf / inf in every entry
    np.testing.assert_allclose(good_np, softmax(np.array(logits)), atol=1e-3)


def test_float64_survives_logits_that_break_float32():
    x = np.array([100.0, 99.0, 98.0])
    np.testing.assert_allclose(naive_softmax(x), softmax(x), rtol=1e-12)


def test_underflow_gives_nan():
    x = np.array([-120.0, -121.0], dtype=np.float32)    # exp underflows to 0 in float32
    assert np.isnan(naive_softmax(x)).all()
    assert np.isfinite(softmax(x)).all()


def test_one_overflowing_entry_takes_all_the_mass_as_nan():
    x = np.array([100.0, 0.0, -5.0], dtype=np.float32)
    out = naive_softmax(x)
    assert np.isnan(out[0]) and out[1] == 0.0 and out[2] == 0.0


def test_shape_dtype_preserved_and_axis_respected():
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    out = naive_softmax(x, axis=1)
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("x, axis, exc, words", [
    (np.array([1, 2, 3]), -1, TypeError, ["x", "floating", "int64"]),
    (np.zeros((2, 3)), 2, ValueError, ["axis", "[-2, 1]", "got 2"]),
    (np.zeros((2, 3)), -3, ValueError, ["axis", "got -3"]),
    (np.array(1.0), -1, ValueError, ["x", "at least 1 dimension"]),
    ([1.0, 2.0], -1, TypeError, ["x", "list"]),
])
def test_errors(x, axis, exc, words):
    with pytest.raises(exc) as info:
        naive_softmax(x, axis=axis)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
