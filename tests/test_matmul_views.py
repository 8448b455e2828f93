import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attncore import MATMUL_VIEWS
from conftest import TOL, to_backend, to_numpy

VIEWS = list(MATMUL_VIEWS.items())


@pytest.mark.parametrize("name,view", VIEWS, ids=[n for n, _ in VIEWS])
def test_notes_example_3x3_times_3x2(backend, dtype, name, view):
    a = np.arange(1, 10, dtype=dtype).reshape(3, 3)
    b = np.arange(1, 7, dtype=dtype).reshape(3, 2)
    c = view(to_backend(a, backend), to_backend(b, backend))
    assert type(c) is type(to_backend(a, backend))
    assert str(c.dtype).endswith(np.dtype(dtype).name)
    # small integers: every partial sum is exact, so every order of summation gives A @ B exactly
    np.testing.assert_array_equal(to_numpy(c), a @ b)


@st.composite
def integer_matrices(draw):
    m, p, n = (draw(st.integers(1, 6)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return (rng.integers(-9, 10, (m, p)).astype(np.float64),
            rng.integers(-9, 10, (p, n)).astype(np.float64))


@given(integer_matrices())
def test_each_view_equals_matmul_exactly(mats):
    a, b = mats
    for name, view in VIEWS:
        np.testing.assert_array_equal(view(a, b), a @ b, err_msg=name)
        np.testing.assert_array_equal(view(torch.as_tensor(a), torch.as_tensor(b)).numpy(),
                                      a @ b, err_msg=name)


@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.integers(0, 1000))
def test_each_view_equals_matmul_on_real_data(m, p, n, seed):
    rng = np.random.default_rng(seed)
    for dtype in (np.float32, np.float64):
        a = rng.standard_normal((m, p)).astype(dtype)
        b = rng.standard_normal((p, n)).astype(dtype)
        for name, view in VIEWS:
            np.testing.assert_allclose(view(a, b), a @ b, rtol=TOL[dtype], atol=TOL[dtype],
                                       err_msg=name)


@pytest.mark.parametrize("name,view", VIEWS, ids=[n for n, _ in VIEWS])
def test_bad_input(name, view):
    with pytest.raises(ValueError, match=r"a and b: inner dimensions must agree.*\(3, 4\).*\(3, 2\)"):
        view(np.zeros((3, 4)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"a: expected shape \(m, p\) \(2 dimensions\), got shape \(3,\)"):
        view(np.zeros(3), np.zeros((3, 2)))
    with pytest.raises(TypeError, match=r"b: expected a floating dtype.*got int64"):
        view(np.zeros((2, 3)), np.zeros((3, 2), dtype=np.int64))
    with pytest.raises(TypeError, match=r"cannot mix NumPy arrays and torch tensors"):
        view(np.zeros((2, 3)), torch.zeros(3, 2, dtype=torch.float64))
