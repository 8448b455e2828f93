"""SlidingWindowKVCache: decoding through it equals recomputation under
``sliding_window_mask`` (with and without sink tokens, RoPE, chunks, grouped heads, NumPy
and torch); its memory is fixed; it is left unchanged by any error."""

from __future__ import annotations

import numpy as np
import pytest

import attncore as ac
from attncore import kvcache

from conftest import to_backend, to_numpy

torch = pytest.importorskip("torch")


def layer(backend, seed=0):
    lib = "numpy" if backend == "numpy" else "torch"
    return ac.init_multihead(8, 4, n_kv_heads=2, seed=seed, backend=lib,
                             device=None if backend == "numpy" else backend[6:])


@pytest.mark.parametrize("window, sink_tokens", [(1, 0), (3, 0), (4, 2), (5, 1), (1, 3),
                                                 (30, 0)])
def test_decoding_equals_recomputation_under_the_same_mask(backend, window, sink_tokens):
    params = layer(backend)
    n = 14
    x = to_backend(np.random.default_rng(1).standard_normal((2, n, 8)), backend)
    mask = ac.sliding_window_mask(n, n, window, sink_tokens=sink_tokens, like=x)
    plain = to_numpy(ac.multi_head_attention(params, x, mask=mask))
    rotated = to_numpy(ac.rope_multi_head_attention(params, x, base=100.0, mask=mask))
    for chunk in (1, 3, n):
        for rope_base, want in ((None, plain), (100.0, rotated)):
            cache = ac.SlidingWindowKVCache.for_layer(params, window, (2,),
                                                      sink_tokens=sink_tokens)
            got = ac.decode(params, x, cache=cache, chunk_size=chunk, rope_base=rope_base)
            assert np.abs(to_numpy(got) - want).max() < 1e-12
            assert cache.length == n and cache.held == min(n, window + sink_tokens)
    # the rows held are the sink tokens and the last positions of the window
    held = sorted(cache.positions.tolist())
    assert held == sorted(set(range(min(sink_tokens, n))) |
                          set(range(max(0, n - window), n)))


def test_keys_are_the_appended_ones_at_their_positions():
    rng = np.random.default_rng(2)
    keys = rng.standard_normal((3, 20, 2))
    cache = ac.SlidingWindowKVCache(4, (3,), 2, 1, sink_tokens=2)
    for chunk in (1, 3, 1, 5, 2, 8):
        start = cache.length
        cache.append(keys[:, start:start + chunk], np.zeros((3, chunk, 1)))
        assert np.array_equal(cache.keys, keys[:, cache.positions])
    assert cache.nbytes == 3 * (4 + 2) * (2 + 1) * 8          # fixed, whatever the length
    assert len(cache) == 20 and cache.capacity > 10**9


def test_cache_is_unchanged_by_an_error_after_the_append(monkeypatch):
    params = layer("numpy")
    x = np.random.default_rng(3).standard_normal((1, 9, 8))
    cache = ac.SlidingWindowKVCache.for_layer(params, 3, (1,), sink_tokens=1)
    ac.decode(params, x[:, :7], cache=cache)
    before = (cache.length, cache.keys.copy(), cache.values.copy(), cache.positions)

    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(kvcache, "attend", fail)
    for n in (1, 2):                                  # the ring wraps in both appends
        with pytest.raises(RuntimeError):
            ac.decode_step(params, x[:, 7:7 + n], cache)
        assert cache.length == before[0]
        for a, b in zip((cache.keys, cache.values, cache.positions), before[1:]):
            assert np.array_equal(a, b)
    monkeypatch.undo()
    # and it decodes on as if nothing had happened
    want = ac.multi_head_attention(params, x, mask=ac.sliding_window_mask(9, 9, 3,
                                                                          sink_tokens=1))
    got = ac.decode(params, x[:, 7:], cache=cache)
    assert np.abs(got - want[:, 7:]).max() < 1e-12


def test_truncate_goes_back_only_where_nothing_was_overwritten():
    cache = ac.SlidingWindowKVCache(3, (), 1)
    z = np.zeros((2, 1))
    cache.append(z, z)
    cache.truncate(1)                      # nothing evicted yet: any length
    assert len(cache) == 1
    for _ in range(3):
        cache.append(z, z)
    with pytest.raises(ValueError, match="has overwritten the positions"):
        cache.truncate(1)
    assert len(cache) == 7
    cache.truncate(5)                      # the last append undone
    assert len(cache) == 5
    cache.reset()
    assert len(cache) == 0 and cache.held == 0


def test_a_training_step_through_the_window_cache():
    params = layer("torch-cpu")
    for name in ("w_q", "w_k", "w_v", "w_o"):
        getattr(params, name).requires_grad_()
    x = torch.randn(1, 8, 8, dtype=torch.float64, requires_grad=True)
    cache = ac.SlidingWindowKVCache.for_layer(params, 3, (1,))
    got = ac.decode(params, x, cache=cache, chunk_size=2)
    want = ac.multi_head_attention(params, x, causal=True, window=3)
    (gx,) = torch.autograd.grad(got.sum(), [x])
    (wx,) = torch.autograd.grad(want.sum(), [x])
    assert (gx - wx).abs().max() < 1e-12


@pytest.mark.parametrize("call, exc, words", [
    (lambda p: ac.SlidingWindowKVCache(0, (2,), 4), ValueError, "window: expected a positive"),
    (lambda p: ac.SlidingWindowKVCache(2, (2,), 4, sink_tokens=-1), ValueError,
     "sink_tokens"),
    (lambda p: ac.SlidingWindowKVCache.for_layer(p, 2.5), TypeError, "window"),
    (lambda p: ac.SlidingWindowKVCache.for_layer("p", 2), TypeError, "params"),
    (lambda p: ac.decode(p, np.zeros((3, 8)), cache=ac.SlidingWindowKVCache(2, (3,), 2)),
     ValueError, "cache: expected batch_shape"),
])
def test_bad_window_caches_are_named(call, exc, words):
    with pytest.raises(exc) as info:
        call(layer("numpy"))
    assert words in str(info.value)


def _window_gradients(cache=None):
    params = ac.init_multihead(8, 2, seed=1, backend="torch", dtype=torch.float64)
    leaves = (params.w_q, params.w_k, params.w_v, params.w_o)
    for w in leaves:
        w.requires_grad_(True)
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((2, 9, 8)))
    if cache is None:
        cache = ac.SlidingWindowKVCache.for_layer(params, 3, (2,), sink_tokens=1)
    out = ac.decode(params, x, chunk_size=2, cache=cache)
    (out ** 2).sum().backward()
    want = ac.multi_head_attention(params, x, mask=ac.sliding_window_mask(
        9, 9, 3, sink_tokens=1, like=x))
    grads = torch.autograd.grad((want ** 2).sum(), leaves)
    for w, g in zip(leaves, grads):
        torch.testing.assert_close(w.grad, g, rtol=1e-12, atol=1e-12)
    return cache, [w.grad.numpy() for w in leaves]


def test_a_reset_window_cache_keeps_no_history_and_is_differentiable_again():
    # as KVCache: the buffers hold numbers, and a reset forgets the recorded appends
    cache, first = _window_gradients()
    assert cache._k.grad_fn is None and not cache._k.requires_grad
    cache.reset()
    assert cache._grad is None
    plain = torch.ones(2, 2, 1, 4, dtype=torch.float64)
    keys, _ = cache.append(plain, plain)
    assert not keys.requires_grad
    cache.reset()
    _, again = _window_gradients(cache)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    with torch.no_grad():                           # nothing recorded: plain views
        assert not cache.keys.requires_grad


def test_window_cache_refuses_nan_and_infinity_and_changes_nothing():
    cache = ac.SlidingWindowKVCache(2, (2,), 4, sink_tokens=1)
    cache.append(np.ones((2, 4, 4)), np.ones((2, 4, 4)))          # the ring has wrapped
    before = (cache.keys.copy(), cache.values.copy(), cache.positions)
    for bad, name in ((np.nan, "k"), (np.inf, "v")):
        for n in (1, 3):
            k, v = np.full((2, n, 4), 2.0), np.full((2, n, 4), 2.0)
            (k if name == "k" else v)[1, 0, 2] = bad
            with pytest.raises(ValueError, match=f"^{name}: expected finite values"):
                cache.append(k, v)
            assert cache.length == 4
            for a, b in zip((cache.keys, cache.values, cache.positions), before):
                assert np.array_equal(a, b)
    # through a layer, the NaN is blamed on the input that holds it
    params = layer("numpy")
    x = np.random.default_rng(4).standard_normal((1, 6, 8))
    window = ac.SlidingWindowKVCache.for_layer(params, 2, (1,), sink_tokens=1)
    ac.decode(params, x[:, :4], cache=window)
    bad = x[:, 4:].copy()
    bad[0, 0, 3] = np.nan
    with pytest.raises(ValueError, match=r"^x: expected finite values"):
        ac.decode_step(params, bad, window)
    assert window.length == 4


def test_window_cache_is_rolled_back_after_an_overflow_in_the_scores():
    params = layer("numpy")
    x = np.random.default_rng(5).standard_normal((1, 6, 8))
    cache = ac.SlidingWindowKVCache.for_layer(params, 2, (1,), sink_tokens=1)
    ac.decode(params, x[:, :4], cache=cache)
    cache._k[..., 0, :] = 1e300                       # a key no projection of x gives
    before = (cache.keys.copy(), cache.values.copy(), cache.positions)
    with pytest.raises(ValueError, match=r"scores: expected finite scores"):
        ac.decode_step(params, x[:, 4:5] * 1e10, cache)
    assert cache.length == 4
    for a, b in zip((cache.keys, cache.values, cache.positions), before):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("chunk_size", [1, 3, 9])
def test_window_decoding_is_differentiable_for_every_chunk_size(chunk_size):
    # the ring overwrites rows that autograd saved for an earlier step: the
    # differentiable copies are made out of place, so every step keeps its own
    params = ac.init_multihead(8, 2, n_kv_heads=1, seed=1, backend="torch",
                               dtype=torch.float64)
    x0 = torch.from_numpy(np.random.default_rng(2).standard_normal((2, 9, 8)))
    mask = ac.sliding_window_mask(9, 9, 2, sink_tokens=1, like=x0)
    grads = []
    for run in (lambda x: ac.decode(params, x, chunk_size=chunk_size,
                                    cache=ac.SlidingWindowKVCache.for_layer(
                                        params, 2, (2,), sink_tokens=1)),
                lambda x: ac.multi_head_attention(params, x, mask=mask)):
        x = x0.clone().requires_grad_(True)
        leaves = [x, params.w_q, params.w_k, params.w_v, params.w_o]
        for w in leaves[1:]:
            w.requires_grad_(True)
        grads.append(torch.autograd.grad((run(x) ** 2).sum(), leaves))
        for w in leaves[1:]:
            w.requires_grad_(False)
    for got, expected in zip(*grads):
        assert float((got - expected).abs().max()) < 1e-12
