"""Property tests: every public attention path (the multi-head layers, RoPE's included),
over random shapes (empty and degenerate ones included), masks, dtypes and both libraries,
against one oracle written here from the definition, in float64."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attncore as ac


def oracle(q, k, v, mask=None, causal=False, scale=None):
    """softmax(scale q k^T) v from the definition, row by row; a row with no admissible key
    is zeros. Returns (out, weights) in float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    batch, n_q, n_k = q.shape[:-2], q.shape[-2], k.shape[-2]
    allowed = np.ones(batch + (n_q, n_k), bool)
    if mask is not None:
        allowed &= np.broadcast_to(mask, allowed.shape)
    if causal:
        allowed &= np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]
    weights = np.zeros(batch + (n_q, n_k))
    for idx in np.ndindex(*batch, n_q):
        keys = np.flatnonzero(allowed[idx])
        if keys.size:
            s = scale * (k[idx[:-1]][keys] @ q[idx])
            e = np.exp(s - s.max())
            weights[idx + (keys,)] = e / e.sum()
    return weights @ v, weights


def _on(lib, x):
    if x is None or lib == "numpy":
        return x
    return torch.from_numpy(np.array(x))


def _back(x):
    return x.detach().to(torch.float64).numpy() if isinstance(x, torch.Tensor) else \
        np.asarray(x, np.float64)


PATHS = ["sdpa", "sdpa weights", "tiled"]
TOL = {"float16": 2e-2, "float32": 2e-4, "float64": 1e-10}


@st.composite
def attention_problem(draw, lib=None):
    lib = lib or draw(st.sampled_from(["numpy", "torch"]))
    dtype = draw(st.sampled_from(["float16", "float32", "float64"]))
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    n_q, n_k = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(0, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    spread = draw(st.sampled_from([0.1, 1.0, 3.0]))
    q = (rng.standard_normal(batch + (n_q, d_k)) * spread).astype(dtype)
    k = (rng.standard_normal(batch + (n_k, d_k)) * spread).astype(dtype)
    v = rng.standard_normal(batch + (n_k, d_v)).astype(dtype)
    kind = draw(st.sampled_from(["none", "full", "2-D", "keys", "padding", "empty"]))
    full = batch + (n_q, n_k)
    mask = {
        "none": lambda: None,
        "full": lambda: rng.random(full) < 0.6,
        "2-D": lambda: rng.random((n_q, n_k)) < 0.6,
        "keys": lambda: rng.random(n_k) < 0.7,
        "padding": lambda: (np.arange(n_k) < rng.integers(0, n_k + 1, size=batch[:1] or (1,))
                            [:, None]).reshape(batch[:1] + (1,) * max(len(batch) - 1, 0)
                                               + (1, n_k)) if batch else
        np.arange(n_k)[None, :] < rng.integers(0, n_k + 1),
        "empty": lambda: np.zeros(full, bool),
    }[kind]()
    causal = draw(st.booleans())
    scale = draw(st.one_of(st.none(), st.floats(-2, 2)))
    block = draw(st.integers(1, 7))
    return lib, q, k, v, mask, causal, scale, block


def run(path, lib, q, k, v, mask, causal, scale, block):
    args = [_on(lib, x) for x in (q, k, v)]
    kw = dict(mask=_on(lib, mask), causal=causal, scale=scale)
    if path == "sdpa":
        return ac.scaled_dot_product_attention(*args, **kw), None
    if path == "sdpa weights":
        return ac.scaled_dot_product_attention(*args, return_weights=True, **kw)
    return ac.tiled_attention(*args, block_size=block, **kw), None


@settings(max_examples=300)
@given(attention_problem())
def test_every_path_equals_the_oracle(problem):
    lib, q, k, v, mask, causal, scale, block = problem
    expected, expected_w = oracle(q, k, v, mask, causal, scale)
    tol = TOL[q.dtype.name]
    for path in PATHS:
        out, w = run(path, lib, q, k, v, mask, causal, scale, block)
        assert type(out) is (np.ndarray if lib == "numpy" else torch.Tensor), path
        assert tuple(out.shape) == expected.shape, path
        assert str(out.dtype).replace("torch.", "") == q.dtype.name, path
        np.testing.assert_allclose(_back(out), expected, rtol=tol, atol=tol, err_msg=path)
        if w is not None:
            assert tuple(w.shape) == expected_w.shape
            np.testing.assert_allclose(_back(w), expected_w, rtol=tol, atol=tol,
                                       err_msg=path)


@settings(max_examples=40)
@given(attention_problem(lib="torch"))
def test_bfloat16_on_every_torch_path(problem):
    _, q, k, v, mask, causal, scale, block = problem
    q, k, v = (torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16) for x in (q, k, v))
    rounded = [x.float().numpy() for x in (q, k, v)]
    expected, _ = oracle(*rounded, mask, causal, scale)
    m = None if mask is None else torch.from_numpy(np.array(mask))
    for fn in (ac.scaled_dot_product_attention, ac.tiled_attention):
        out = fn(q, k, v, mask=m, causal=causal, scale=scale)
        assert out.dtype == torch.bfloat16
        np.testing.assert_allclose(out.float().numpy(), expected, rtol=5e-2, atol=5e-2)


def outcome(fn):
    try:
        return _back(fn())
    except (TypeError, ValueError) as err:
        return type(err).__name__, str(err)


@settings(max_examples=150)
@given(attention_problem(), st.sampled_from(["q", "k", "v"]),
       st.sampled_from([None, np.nan, np.inf, -np.inf, "huge"]), st.data())
def test_every_path_gives_the_same_outcome(problem, where, bad, data):
    """Non-finite entries (masked or not) and overflowing numbers: one outcome for all
    paths, on both libraries: the same error, or results equal to each other."""
    _, q, k, v, mask, causal, scale, block = problem
    arrays = dict(q=q.copy(), k=k.copy(), v=v.copy())
    x = arrays[where]
    if bad == "huge":
        with np.errstate(over="ignore"):          # large entries may become inf: also fine
            x *= np.finfo(x.dtype).max / 4
    elif bad is not None and x.size:
        idx = data.draw(st.integers(0, x.size - 1))
        x.reshape(-1)[idx] = bad
    results = {(path, lib): outcome(lambda: run(path, lib, *arrays.values(), mask, causal,
                                                scale, block)[0])
               for path in PATHS for lib in ("numpy", "torch")}
    first = results[("sdpa", "numpy")]
    for key, got in results.items():
        if isinstance(first, tuple) or isinstance(got, tuple):
            assert got == first, (key, got, first)
        else:
            assert np.isfinite(got).all(), key
            np.testing.assert_allclose(got, first, rtol=2e-2, atol=2e-2, err_msg=str(key))


@st.composite
def layer_problem(draw):
    lib = draw(st.sampled_from(["numpy", "torch"]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    num_heads = draw(st.integers(1, 3))
    d_model = num_heads * draw(st.integers(1, 3))
    d_kv = draw(st.one_of(st.none(), st.integers(1, 5)))
    batch = tuple(draw(st.lists(st.integers(0, 2), max_size=2)))
    n_q, n_k = draw(st.integers(0, 5)), draw(st.integers(0, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    bias = draw(st.booleans())
    rng = np.random.default_rng(seed)
    params = ac.init_multihead(d_model, num_heads, d_kv=d_kv, bias=bias, seed=seed % 1000,
                               dtype=dtype)
    if bias:
        for name in ("b_q", "b_k", "b_v", "b_o"):
            getattr(params, name)[:] = rng.standard_normal(d_model)
    x_q = rng.standard_normal(batch + (n_q, d_model)).astype(dtype)
    cross = d_kv is not None
    x_kv = rng.standard_normal(batch + (n_k, d_kv)).astype(dtype) if cross else None
    n_keys = n_k if cross else n_q
    mask = draw(st.sampled_from([None, "full", "2-D"]))
    if mask == "full":
        mask = rng.random(batch + (n_q, n_keys)) < 0.6
    elif mask == "2-D":
        mask = rng.random((n_q, n_keys)) < 0.6
    causal = draw(st.booleans())
    return lib, params, x_q, x_kv, mask, causal


def layer_oracle(p, x_q, x_kv, mask, causal, rotate=False):
    x_kv = x_q if x_kv is None else x_kv
    h, d = p.num_heads, p.d_head
    lin = (lambda x, w, b: x.astype(np.float64) @ w.astype(np.float64)
           + (0 if b is None else b.astype(np.float64)))
    q, k, v = (lin(x, w, b) for x, w, b in ((x_q, p.w_q, p.b_q), (x_kv, p.w_k, p.b_k),
                                            (x_kv, p.w_v, p.b_v)))
    turn = ac.rope if rotate else (lambda x: x)       # RoPE itself is tested on its own
    heads = [oracle(turn(q[..., i * d:(i + 1) * d]), turn(k[..., i * d:(i + 1) * d]),
                    v[..., i * d:(i + 1) * d], mask, causal)[0] for i in range(h)]
    return lin(np.concatenate(heads, axis=-1), p.w_o, p.b_o)


@settings(max_examples=60)
@given(layer_problem())
def test_both_layers_equal_the_oracle(problem):
    lib, params, x_q, x_kv, mask, causal = problem
    expected = layer_oracle(params, x_q, x_kv, mask, causal)
    if lib == "torch":
        params = ac.MultiHeadParams(num_heads=params.num_heads, **{
            n: _on("torch", getattr(params, n)) for n in
            ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")})
    args = [_on(lib, x) for x in (x_q, x_kv)]
    tol = 1e-4 if x_q.dtype == np.float32 else 1e-10
    for fn in (ac.multi_head_attention, ac.multi_head_attention_loop):
        out = fn(params, *args, mask=_on(lib, mask), causal=causal)
        assert tuple(out.shape) == expected.shape
        np.testing.assert_allclose(_back(out), expected, rtol=tol, atol=tol,
                                   err_msg=fn.__name__)
    if x_kv is None and params.d_head % 2 == 0:
        rotated = layer_oracle(problem[1], x_q, None, mask, causal, rotate=True)
        out = ac.rope_multi_head_attention(params, args[0], mask=_on(lib, mask),
                                           causal=causal)
        np.testing.assert_allclose(_back(out), rotated, rtol=tol, atol=tol,
                                   err_msg="rope_multi_head_attention")
