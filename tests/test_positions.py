"""attncore.positions: sinusoidal encodings and RoPE, against their formulas, their theorems,
Hugging Face's LLaMA implementation, and the argument checks every attncore function shares."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attncore import (
    position_frequencies,
    rope,
    rope_multi_head_attention,
    sinusoidal_positions,
)
from conftest import TOL, to_backend, to_numpy

RNG = np.random.default_rng(1234)


def rope_by_pairs(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """The definition, one pair at a time: features (i, i + d/2) of the row at position m
    rotated by the angle m * base ** (-2i / d)."""
    out = np.empty_like(x, dtype=np.float64)
    d = x.shape[-1]
    h = d // 2
    pos = np.broadcast_to(positions, x.shape[:-1])
    for index in np.ndindex(*x.shape[:-1]):
        m = float(pos[index])
        for i in range(h):
            a = m * base ** (-2 * i / d)
            c, s = math.cos(a), math.sin(a)
            u, v = float(x[index + (i,)]), float(x[index + (i + h,)])
            out[index + (i,)] = c * u - s * v
            out[index + (i + h,)] = s * u + c * v
    return out


def close(got, want, dtype, scale=1.0):
    got = to_numpy(got).astype(np.float64)
    return np.abs(got - want).max() <= TOL[dtype] * scale * max(1.0, np.abs(want).max())


# --- position_frequencies and sinusoidal_positions -----------------------------------------


def test_frequencies_follow_the_formula():
    w = position_frequencies(8, base=100.0)
    assert w.dtype == np.float64 and w.shape == (4,)
    np.testing.assert_allclose(w, [100.0 ** (-2 * i / 8) for i in range(4)], rtol=1e-15)
    assert w[0] == 1.0 and np.all(np.diff(w) < 0)


def test_sinusoidal_follows_the_original_formula():
    n, d, base = 7, 6, 10000.0
    pe = sinusoidal_positions(n, d)
    assert pe.shape == (n, d) and pe.dtype == np.float64
    for p in range(n):
        for i in range(d // 2):
            assert pe[p, 2 * i] == pytest.approx(math.sin(p / base ** (2 * i / d)), abs=1e-15)
            assert pe[p, 2 * i + 1] == pytest.approx(math.cos(p / base ** (2 * i / d)),
                                                     abs=1e-15)


def test_sinusoidal_takes_library_device_and_dtype_from_like(backend, dtype):
    like = to_backend(np.zeros((2, 3), dtype=dtype), backend)
    pe = sinusoidal_positions(5, 4, base=50.0, like=like)
    assert type(pe) is type(like) and pe.dtype == like.dtype and tuple(pe.shape) == (5, 4)
    if backend != "numpy":
        assert pe.device == like.device
    want = sinusoidal_positions(5, 4, base=50.0)
    assert close(pe, want, dtype)


def test_an_offset_is_one_linear_map_of_the_sinusoidal_encoding():
    # PE[p + k] = PE[p] @ T_k for every p, T_k block-diagonal with one 2x2 rotation per pair
    n, d, k = 40, 10, 7
    pe = sinusoidal_positions(n + k, d)
    t = np.zeros((d, d))
    for i, w in enumerate(position_frequencies(d)):
        c, s = math.cos(k * w), math.sin(k * w)
        t[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
    np.testing.assert_allclose(pe[:n] @ t, pe[k:], atol=1e-12)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(n=0, d=4), ValueError, "n: expected a positive integer, got 0"),
    (dict(n=2.0, d=4), TypeError, "n: expected a positive integer"),
    (dict(n=True, d=4), TypeError, "n: expected a positive integer"),
    (dict(n=3, d=5), ValueError, "d: expected an even number"),
    (dict(n=3, d=0), ValueError, "d: expected a positive integer"),
    (dict(n=3, d=4, base=1.0), ValueError, "base: expected a finite number greater than 1"),
    (dict(n=3, d=4, base=float("nan")), ValueError, "base"),
    (dict(n=3, d=4, base=True), ValueError, "base"),
    (dict(n=3, d=4, like=np.zeros(2, dtype=np.int64)), TypeError, "like: expected a floating"),
    (dict(n=3, d=4, like=[0.0]), TypeError, "like: expected a numpy.ndarray or a torch"),
])
def test_sinusoidal_rejects_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        sinusoidal_positions(**kwargs)


# --- rope: the definition and its theorems --------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 6, 8)])
def test_rope_rotates_pairs_i_and_i_plus_half(backend, dtype, shape):
    x = RNG.standard_normal(shape).astype(dtype)
    want = rope_by_pairs(x, np.arange(shape[-2]), 10000.0)
    xb = to_backend(x, backend)
    got = rope(xb)
    assert type(got) is type(xb) and got.dtype == xb.dtype and tuple(got.shape) == shape
    if backend != "numpy":
        assert got.device == xb.device
    assert close(got, want, dtype, scale=4)


def test_rope_with_explicit_and_fractional_positions(backend, dtype):
    x = RNG.standard_normal((3, 2, 5, 6)).astype(dtype)
    for positions in (np.array([4, 0, 9, 2, 2]), np.array([0.5, 1.25, -3.0, 7.0, 100.5])):
        want = rope_by_pairs(x, positions, 500.0)
        got = rope(to_backend(x, backend), to_backend(positions, backend), base=500.0)
        assert close(got, want, dtype, scale=100)


def test_rope_with_per_sequence_positions(backend, dtype):
    # (batch, 1, n) positions for (batch, heads, n, d) queries: one offset per sequence
    x = RNG.standard_normal((3, 2, 4, 6)).astype(dtype)
    positions = np.array([[0, 1, 2, 3], [5, 6, 7, 8], [0, 0, 1, 2]])[:, None, :]
    want = rope_by_pairs(x, positions, 10000.0)
    assert close(rope(to_backend(x, backend), to_backend(positions, backend)), want, dtype,
                 scale=10)
    full = np.broadcast_to(positions, (3, 2, 4)).copy()
    assert close(rope(to_backend(x, backend), to_backend(full, backend)), want, dtype,
                 scale=10)


def test_rope_agrees_across_backends(backend, dtype):
    x = RNG.standard_normal((2, 7, 10)).astype(dtype)
    ref = rope(x.astype(np.float64), base=300.0)
    assert close(rope(to_backend(x, backend), base=300.0), ref, dtype, scale=4)


def test_rope_scores_depend_only_on_the_offset(backend, dtype):
    q = RNG.standard_normal((6, 8)).astype(dtype)
    k = RNG.standard_normal((6, 8)).astype(dtype)
    pos = np.arange(6)
    scores = []
    for shift in (0, 13, 250):
        qr = rope(to_backend(q, backend), to_backend(pos + shift, backend))
        kr = rope(to_backend(k, backend), to_backend(pos + shift, backend))
        scores.append(to_numpy(qr @ kr.T).astype(np.float64))
    scale = 50 if dtype == np.float32 else 1e3     # float32 angles of ~250 rad, rounded
    assert np.abs(scores[1] - scores[0]).max() <= TOL[dtype] * scale
    assert np.abs(scores[2] - scores[0]).max() <= TOL[dtype] * scale


def test_rope_preserves_norms_and_is_undone_by_the_opposite_positions(backend, dtype):
    x = RNG.standard_normal((4, 9, 12)).astype(dtype)
    pos = np.arange(9) * 3 - 5
    xb = to_backend(x, backend)
    y = rope(xb, to_backend(pos, backend))
    norms = np.linalg.norm(to_numpy(y).astype(np.float64), axis=-1)
    assert np.abs(norms - np.linalg.norm(x.astype(np.float64), axis=-1)).max() <= TOL[dtype] * 10
    back = rope(y, to_backend(-pos, backend))
    assert close(back, x.astype(np.float64), dtype, scale=10)


def test_the_interleaved_convention_is_a_permutation_of_rotate_half():
    # Meta's LLaMA / RoFormer: pairs (2i, 2i+1) as complex numbers, times exp(i m w_i)
    n, d = 7, 10
    x = RNG.standard_normal((2, n, d))
    angles = np.arange(n)[:, None] * position_frequencies(d)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)
    interleaved = np.stack([z.real, z.imag], axis=-1).reshape(x.shape)
    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    np.testing.assert_allclose(rope(x[..., perm])[..., np.argsort(perm)], interleaved,
                               atol=1e-12)


@given(n=st.integers(1, 6), half=st.integers(1, 5), shift=st.integers(-1000, 1000),
       base=st.floats(2.0, 1e6), seed=st.integers(0, 2**16))
def test_property_relative_scores_and_norms(n, half, shift, base, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, n, 2 * half))
    pos = rng.integers(-50, 50, size=n)
    s0 = rope(q, pos, base=base) @ rope(k, pos, base=base).T
    s1 = rope(q, pos + shift, base=base) @ rope(k, pos + shift, base=base).T
    assert np.abs(s1 - s0).max() <= 1e-9 * max(1.0, np.abs(s0).max())
    np.testing.assert_allclose(np.linalg.norm(rope(q, pos, base=base), axis=-1),
                               np.linalg.norm(q, axis=-1), rtol=1e-12)


def test_rope_keeps_half_precision_dtypes():
    x = torch.randn(3, 8, dtype=torch.float64)
    for low in (torch.float16, torch.bfloat16):
        y = rope(x.to(low))
        assert y.dtype == low
        assert (y.double() - rope(x)).abs().max() < 0.05


# --- rope against Hugging Face's LLaMA (the rotate-half convention) -------------------------


@pytest.fixture(scope="module")
def llama():
    modeling = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    def rotary(d: int, base: float):
        config = LlamaConfig(hidden_size=2 * d, num_attention_heads=2, head_dim=d,
                             max_position_embeddings=256,
                             rope_parameters={"rope_type": "default", "rope_theta": base})
        return modeling.LlamaRotaryEmbedding(config=config)

    return modeling, rotary


@pytest.mark.parametrize("base", [10000.0, 500000.0, 37.0])
def test_rope_matches_hugging_face_llama(llama, torch_backend, dtype, base):
    # Hugging Face's implementation is torch only; NumPy's rope equals torch's elsewhere.
    modeling, rotary = llama
    device = "cuda" if torch_backend == "torch-cuda" else "cpu"
    tdtype = getattr(torch, np.dtype(dtype).name)
    batch, heads, n, d = 3, 2, 40, 16
    q = torch.as_tensor(RNG.standard_normal((batch, heads, n, d)), dtype=tdtype, device=device)
    k = torch.as_tensor(RNG.standard_normal((batch, heads, n, d)), dtype=tdtype, device=device)
    ids = torch.stack([torch.arange(n), torch.arange(n) + 17,
                       torch.clamp(torch.arange(n) - 5, min=0)]).to(device)
    # 1. Hugging Face's own cos/sin (float32 angles, so agreement to float32 rounding)
    cos, sin = rotary(d, base).to(device)(q, ids)
    q_hf, k_hf = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    angle_err = 1e-6 * (n + 17)
    assert (rope(q, ids[:, None, :], base=base) - q_hf).abs().max() < 10 * angle_err
    assert (rope(k, ids[:, None, :], base=base) - k_hf).abs().max() < 10 * angle_err
    # 2. the pairing itself, exactly: Hugging Face's rotation with float64 cos/sin
    w = torch.as_tensor(position_frequencies(d, base=base), device=device)
    angles = torch.cat([ids[..., None] * w] * 2, dim=-1)
    q_hf, k_hf = modeling.apply_rotary_pos_emb(q, k, angles.cos().to(tdtype),
                                               angles.sin().to(tdtype))
    assert close(rope(q, ids[:, None, :], base=base), to_numpy(q_hf).astype(np.float64), dtype,
                 scale=4)
    assert close(rope(k, ids[:, None, :], base=base), to_numpy(k_hf).astype(np.float64), dtype,
                 scale=4)


# --- rope: argument checks, the same on every backend ---------------------------------------


@pytest.mark.parametrize("make, error, words", [
    (lambda b: (to_backend(np.zeros((3, 5)), b), None), ValueError,
     r"x: expected a positive even last axis d .*d=5"),
    (lambda b: (to_backend(np.zeros(4), b), None), ValueError,
     r"x: expected shape \(\.\.\., n, d\)"),
    (lambda b: (to_backend(np.zeros((3, 4), dtype=np.int64), b), None), TypeError,
     "x: expected a floating dtype"),
    (lambda b: (to_backend(np.array([[0.0, np.nan]]), b), None), ValueError,
     "x: expected finite values"),
    (lambda b: (to_backend(np.zeros((3, 4)), b), to_backend(np.arange(4), b)), ValueError,
     r"positions: expected shape \(n,\) = \(3,\)"),
    (lambda b: (to_backend(np.zeros((3, 4)), b), to_backend(np.arange(1), b)), ValueError,
     "positions: expected shape"),
    (lambda b: (to_backend(np.zeros((3, 4)), b), to_backend(np.array(2), b)), ValueError,
     "positions: expected shape"),
    (lambda b: (to_backend(np.zeros((3, 4)), b), to_backend(np.zeros((2, 3), np.int64), b)),
     ValueError, "without enlarging it"),
    (lambda b: (to_backend(np.zeros((2, 3, 4)), b), to_backend(np.zeros((3, 3), np.int64), b)),
     ValueError, "positions: expected shape"),
    (lambda b: (to_backend(np.zeros((3, 4)), b), to_backend(np.ones(3, bool), b)), TypeError,
     "positions: expected an integer or floating array, got dtype bool"),
    (lambda b: (to_backend(np.zeros((3, 4)), b), to_backend(np.array([0, np.inf, 1]), b)),
     ValueError, "positions: expected finite values"),
    (lambda b: (to_backend(np.zeros((3, 4)), b), [0, 1, 2]), TypeError,
     "positions: expected a numpy.ndarray or a torch.Tensor, got list"),
    (lambda b: (to_backend(np.zeros((5, 0)), b), None), ValueError,
     r"x: expected a positive even last axis d .*d=0"),
])
def test_rope_rejects_bad_arguments_the_same_way_on_every_backend(backend, make, error, words):
    x, positions = make(backend)
    with pytest.raises(error, match=words):
        rope(x, positions)


@pytest.mark.parametrize("base", [1.0, 0.5, -10.0, float("inf"), True, "10000"])
def test_rope_rejects_a_bad_base(backend, base):
    with pytest.raises(ValueError, match="base: expected a finite number greater than 1"):
        rope(to_backend(np.zeros((3, 4)), backend), base=base)


def test_rope_refuses_mixed_libraries():
    with pytest.raises(TypeError, match="cannot mix NumPy arrays and torch tensors"):
        rope(torch.zeros(3, 4), np.arange(3))
    with pytest.raises(TypeError, match="x: expected a numpy.ndarray or a torch.Tensor"):
        rope([[0.0, 1.0]])


# --- rope_multi_head_attention: the layer with RoPE in its place ----------------------------


def _layer(backend, dtype, d_model=12, num_heads=2, **kwargs):
    import attncore as ac

    if backend == "numpy":
        return ac.init_multihead(d_model, num_heads, seed=5, dtype=dtype, **kwargs)
    device = "cuda" if backend == "torch-cuda" else "cpu"
    return ac.init_multihead(d_model, num_heads, seed=5, backend="torch", device=device,
                             dtype=getattr(torch, np.dtype(dtype).name), **kwargs)


def test_rope_layer_is_projection_rotation_attention(backend, dtype):
    import attncore as ac

    params = _layer(backend, dtype)
    x = to_backend(RNG.standard_normal((2, 5, 12)).astype(dtype), backend)
    q = ac.split_heads(x @ params.w_q + params.b_q, 2)
    k = ac.split_heads(x @ params.w_k + params.b_k, 2)
    v = ac.split_heads(x @ params.w_v + params.b_v, 2)
    z = ac.scaled_dot_product_attention(ac.rope(q), ac.rope(k), v, causal=True)
    want = to_numpy(ac.merge_heads(z) @ params.w_o + params.b_o).astype(np.float64)
    out, weights = rope_multi_head_attention(params, x, causal=True, return_weights=True)
    assert close(out, want, dtype, scale=10)
    assert tuple(weights.shape) == (2, 2, 5, 5)


def test_rope_layer_ignores_a_common_shift_of_positions(backend, dtype):
    params = _layer(backend, dtype)
    x = to_backend(RNG.standard_normal((3, 6, 12)).astype(dtype), backend)
    pos = np.arange(6)
    a = rope_multi_head_attention(params, x, to_backend(pos, backend))
    b = rope_multi_head_attention(params, x, to_backend(pos + 40, backend))
    assert close(b, to_numpy(a).astype(np.float64), dtype, scale=100)
    # per-sequence positions (batch, n), in x's terms: each sequence shifted, the same
    per_seq = to_backend(np.stack([pos, pos + 7, pos + 100]), backend)
    assert close(rope_multi_head_attention(params, x, per_seq),
                 to_numpy(a).astype(np.float64), dtype, scale=100)


def test_rope_layer_per_sequence_positions_are_the_sequences_not_the_heads(backend):
    # batch == heads == 2: positions (batch, n) must number the sequences' rows. The layer
    # used to line them up with its heads axis, off by up to 0.64.
    import attncore as ac

    params = _layer(backend, np.float64, d_model=8, num_heads=2)
    x = RNG.standard_normal((2, 5, 8))
    pos = np.array([[0, 1, 2, 3, 4], [7, 9, 11, 13, 15]])
    got = to_numpy(rope_multi_head_attention(params, to_backend(x, backend),
                                             to_backend(pos, backend), causal=True))
    for b in range(2):            # each sequence alone, with its own positions
        alone = to_numpy(rope_multi_head_attention(params, to_backend(x[b], backend),
                                                   to_backend(pos[b], backend),
                                                   causal=True))
        assert np.abs(got[b] - alone).max() < 1e-12
    # the heads-axis form of rope's rule is x's rows plus one: refused, with the reason
    with pytest.raises(ValueError, match=r"the layer inserts the heads axis itself"):
        rope_multi_head_attention(params, to_backend(x, backend),
                                  to_backend(pos[:, None, :], backend))
    # 3 heads, 3 sequences, 4-D x with (batch, n) positions: refused, as masks are
    params3 = _layer(backend, np.float64, d_model=12, num_heads=3)
    x4 = to_backend(RNG.standard_normal((3, 2, 5, 12)), backend)
    with pytest.raises(ValueError, match=r"positions: expected 3 dimensions .* ambiguous; "
                                         r"insert the missing axes"):
        rope_multi_head_attention(params3, x4, to_backend(np.zeros((2, 5)), backend))
    assert ac.rope_multi_head_attention(params3, x4, to_backend(
        np.zeros((3, 1, 5)), backend)).shape == (3, 2, 5, 12)


def test_rope_refuses_positions_that_would_line_up_with_the_heads(backend):
    # x (batch, heads, n, d) with batch == heads, positions (batch, n): broadcasting from
    # the right would rotate head h by sequence h's positions (off by 6.3 before)
    x = to_backend(RNG.standard_normal((2, 2, 5, 8)), backend)
    pos = np.array([[0, 1, 2, 3, 4], [10, 20, 30, 40, 50]])
    with pytest.raises(ValueError) as info:
        rope(x, to_backend(pos, backend))
    assert str(info.value) == (
        "positions: expected 3 dimensions (one per axis of x's rows (2, 2, 5)) or 1, got "
        "shape (2, 5): its leading axes would be matched with the last 1 of the 2 batch "
        "axes of x, which is ambiguous; insert the missing axes (for per-sequence "
        "positions of shape (batch, n) against x of shape (batch, heads, n, d): "
        "positions[:, None])")
    want = rope_by_pairs(to_numpy(x), pos[:, None, :], 10000.0)
    assert np.abs(to_numpy(rope(x, to_backend(pos[:, None, :], backend))) - want).max() \
        < 1e-12
    # leading axes of size 1 cannot be misaligned: accepted
    ones = to_backend(np.arange(5)[None, :], backend)
    assert np.abs(to_numpy(rope(x, ones)) - to_numpy(rope(x))).max() == 0


def test_rope_layer_rejects_odd_heads_and_cross_attention_weights(backend):
    params = _layer(backend, np.float64, d_model=6, num_heads=2)      # d_head = 3
    x = to_backend(np.zeros((4, 6)), backend)
    with pytest.raises(ValueError, match="even head width d_head for RoPE, got d_head=3"):
        rope_multi_head_attention(params, x)
    cross = _layer(backend, np.float64, d_kv=8)
    with pytest.raises(ValueError, match="x: expected last axis d_model=12"):
        rope_multi_head_attention(cross, to_backend(np.zeros((4, 12)), backend))
    with pytest.raises(ValueError, match="x: expected last axis d_model=12"):
        rope_multi_head_attention(_layer(backend, np.float64), x)
