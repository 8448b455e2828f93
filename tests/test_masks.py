"""Tests of attncore.masks.padding_mask: shapes, values, libraries, errors, and its use."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncore.attention import scaled_dot_product_attention
from attncore.masks import padding_mask


def test_right_padding_values_and_default_shape():
    m = padding_mask([3, 1, 0], 4)
    assert isinstance(m, np.ndarray) and m.dtype == np.bool_
    assert m.shape == (3, 1, 4)
    expected = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(m[:, 0, :], expected)


def test_left_padding_values():
    m = padding_mask([3, 1, 4], 4, side="left")
    expected = np.array([[0, 1, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(m[:, 0, :], expected)


def test_n_q_repeats_the_key_mask_for_every_query():
    m = padding_mask([2, 5], 5, n_q=3)
    assert m.shape == (2, 3, 5)
    for b, length in enumerate([2, 5]):
        for i in range(3):
            np.testing.assert_array_equal(m[b, i], np.arange(5) < length)


def test_result_is_a_fresh_writable_array():
    m = padding_mask([1, 2], 3, n_q=2)
    m[0, 0, 2] = True                   # must not raise (no read-only broadcast view)
    assert m[0, 1, 2] == False          # noqa: E712  (rows are independent copies)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=6), st.integers(0, 3),
       st.sampled_from(["right", "left"]), st.booleans())
def test_properties(lengths, extra, side, with_n_q):
    n_k = max(lengths) + extra
    if n_k == 0:
        n_k = 1
    n_q = 4 if with_n_q else None
    m = padding_mask(lengths, n_k, n_q=n_q, side=side)
    assert m.shape == (len(lengths), n_q or 1, n_k)
    np.testing.assert_array_equal(m.sum(axis=-1), np.broadcast_to(
        np.asarray(lengths)[:, None], m.shape[:2]))
    right = padding_mask(lengths, n_k, n_q=n_q)
    if side == "left":
        np.testing.assert_array_equal(m, right[..., ::-1])
    # the real keys form one contiguous block at the chosen end
    j = np.arange(n_k)
    for b, length in enumerate(lengths):
        real = j < length if side == "right" else j >= n_k - length
        np.testing.assert_array_equal(m[b, 0], real)


def test_lengths_as_numpy_and_torch_integers():
    ref = padding_mask([2, 3], 4)
    np.testing.assert_array_equal(padding_mask(np.array([2, 3], dtype=np.int32), 4), ref)
    np.testing.assert_array_equal(padding_mask(np.array([2, 3], dtype=np.uint8), 4), ref)
    np.testing.assert_array_equal(padding_mask((2, 3), 4), ref)
    t = padding_mask(torch.tensor([2, 3]), 4)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.bool and t.device.type == "cpu"
    np.testing.assert_array_equal(t.numpy(), ref)


def test_like_chooses_library_and_device():
    q = torch.zeros(2, 4, 8)
    t = padding_mask([2, 3], 4, like=q)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.bool and t.device == q.device
    n = padding_mask(torch.tensor([2, 3]), 4, like=np.zeros(3))
    assert isinstance(n, np.ndarray)
    np.testing.assert_array_equal(n, t.numpy())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_like_on_cuda():
    q = torch.zeros(2, 4, 8, device="cuda")
    t = padding_mask([2, 3], 4, like=q)
    assert t.device == q.device
    t2 = padding_mask(torch.tensor([2, 3], device="cuda"), 4)
    assert t2.device.type == "cuda"


@pytest.mark.parametrize("lengths, n_k, kwargs, exc, words", [
    ([[1, 2]], 3, {}, ValueError, ["lengths", "(batch,)", "(1, 2)"]),
    (np.array(2), 3, {}, ValueError, ["lengths", "(batch,)"]),
    ([1.0, 2.0], 3, {}, TypeError, ["lengths", "integers", "1.0"]),
    (np.array([1.0, 2.0]), 3, {}, TypeError, ["lengths", "float64"]),
    (np.array([True, False]), 3, {}, TypeError, ["lengths", "bool"]),
    ([True, 2], 3, {}, TypeError, ["lengths", "True"]),
    (torch.tensor([1.0]), 3, {}, TypeError, ["lengths", "float32"]),
    ("12", 3, {}, TypeError, ["lengths", "str"]),
    ([1, -1], 3, {}, ValueError, ["lengths[1] = -1", "[0, 3]"]),
    ([1, 4], 3, {}, ValueError, ["lengths[1] = 4", "[0, 3]"]),
    ([1], -1, {}, ValueError, ["n_k", "non-negative", "-1"]),
    ([1], 2.0, {}, TypeError, ["n_k", "2.0", "float"]),
    ([1], True, {}, TypeError, ["n_k", "True"]),
    ([1], 3, {"n_q": -2}, ValueError, ["n_q", "non-negative", "-2"]),
    ([1], 3, {"n_q": "2"}, TypeError, ["n_q", "'2'"]),
    ([1], 3, {"like": [0.0]}, TypeError, ["like", "list"]),
    ([1], 3, {"side": "top"}, ValueError, ["side", "'top'"]),
])
def test_errors_name_the_argument(lengths, n_k, kwargs, exc, words):
    with pytest.raises(exc) as info:
        padding_mask(lengths, n_k, **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_padded_batch_matches_each_sequence_alone(lib):
    """The purpose of the mask: real tokens get exactly the output of the unpadded sequence."""
    rng = np.random.default_rng(5)
    lengths, n, d = [5, 3, 1], 5, 4
    q, k, v = (rng.standard_normal((3, n, d)) for _ in range(3))
    # fill the padding positions with huge values: a leak would be obvious
    for b, length in enumerate(lengths):
        k[b, length:] = 1e3
        v[b, length:] = 1e3
    conv = (lambda a: a) if lib == "numpy" else torch.from_numpy
    out = scaled_dot_product_attention(conv(q), conv(k), conv(v),
                                       mask=padding_mask(lengths, n, like=conv(q)))
    out = np.asarray(out)
    for b, length in enumerate(lengths):
        alone = scaled_dot_product_attention(q[b, :length], k[b, :length], v[b, :length])
        np.testing.assert_allclose(out[b, :length], alone, rtol=0, atol=1e-12)
    assert np.isfinite(out).all()


def test_left_padding_with_causal_leaves_leading_rows_empty():
    """Left padding + causal: a query at a padding position sees only padding keys."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 4, 3))
    mask = padding_mask([2], 4, side="left")
    out, w = scaled_dot_product_attention(q, q, q, mask=mask, causal=True, return_weights=True)
    np.testing.assert_array_equal(w[0, :2], 0.0)
    np.testing.assert_array_equal(out[0, :2], 0.0)
    np.testing.assert_allclose(w[0, 2:].sum(axis=-1), 1.0, rtol=0, atol=1e-12)
