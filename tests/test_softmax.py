import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attncore import softmax
from conftest import TOL, to_backend, to_numpy


def test_matches_definition(backend, dtype):
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(dtype)
    expected = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    for axis in (-1, 0, 1):
        expected = np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)
        got = to_numpy(softmax(to_backend(x, backend), axis=axis))
        assert got.dtype == dtype
        np.testing.assert_allclose(got, expected, rtol=TOL[dtype], atol=TOL[dtype])


def test_matches_torch_softmax(backend, dtype):
    x = np.random.default_rng(1).standard_normal((4, 7)).astype(dtype) * 10
    ref = torch.softmax(torch.as_tensor(x), dim=-1).numpy()
    np.testing.assert_allclose(to_numpy(softmax(to_backend(x, backend))), ref,
                               rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_finite_for_huge_logits(backend, dtype):
    # exp(1e4) overflows every float type; the max subtraction makes it harmless.
    x = np.array([[1e4, -1e4, 0.0, 1e4 - 1.0], [-1e4, -1e4, -1e4, -1e4]], dtype=dtype)
    p = to_numpy(softmax(to_backend(x, backend)))
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-3)
    assert p[0, 0] > p[0, 3] > 0 or dtype == np.float16  # float16 cannot tell 1e4 from 1e4-1
    np.testing.assert_allclose(p[1], 0.25, rtol=1e-3)


def test_bfloat16_on_torch():
    x = torch.tensor([[1e4, 0.0, -1e4]], dtype=torch.bfloat16)
    p = softmax(x)
    assert p.dtype == torch.bfloat16 and torch.isfinite(p).all()


def test_all_masked_slice_gives_zeros_not_nan(backend, dtype):
    x = np.array([[0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf]], dtype=dtype)
    p = to_numpy(softmax(to_backend(x, backend)))
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p[0], [1 / (1 + np.e), np.e / (1 + np.e), 0.0], rtol=1e-6)
    assert (p[1] == 0).all()


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6),
                  elements=st.floats(-50, 50)))
def test_rows_are_distributions(x):
    p = softmax(x)
    assert p.shape == x.shape
    assert (p >= 0).all() and (p <= 1).all()
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)
    # softmax is invariant to adding a constant to a row
    np.testing.assert_allclose(softmax(x + 3.0), p, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_rejects_nan_and_plus_inf(backend, bad):
    x = np.array([[0.0, bad]])
    with pytest.raises(ValueError, match="x: expected no NaN or \\+inf"):
        softmax(to_backend(x, backend))


def test_rejects_integers(backend):
    with pytest.raises(TypeError, match="x: expected a floating dtype.*got int64"):
        softmax(to_backend(np.arange(4).reshape(2, 2), backend))


def test_rejects_bad_axis_and_non_arrays():
    with pytest.raises(ValueError, match="axis: expected an integer in \\[-2, 1\\]"):
        softmax(np.zeros((2, 2)), axis=2)
    with pytest.raises(TypeError, match="x: expected a numpy.ndarray or a torch.Tensor, got list"):
        softmax([1.0, 2.0])


def test_rejects_zero_dimensional_input(backend):
    with pytest.raises(ValueError, match="x: expected an array with at least 1 dimension"):
        softmax(to_backend(np.array(1.0), backend))
