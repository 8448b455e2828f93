"""The capstone's language model: cached generation equals recomputation; its lab."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from attncore.lab import language as lab


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 5), (0.0, None)])
def test_cached_generation_equals_recomputing_the_prefix_numpy(temperature, top_k):
    m = ac.init_language_model(40, 16, 4, 32, 2, 30, seed=1)
    prompt = np.array([[1, 2, 3], [7, 7, 9]])
    a = ac.generate(m, prompt, 25, temperature=temperature, top_k=top_k,
                    generator=np.random.default_rng(3))
    b = ac.generate(m, prompt, 25, temperature=temperature, top_k=top_k,
                    generator=np.random.default_rng(3), use_cache=False)
    assert a.shape == (2, 28) and np.array_equal(a, b)
    assert np.array_equal(a[:, :3], prompt)


def test_cached_generation_equals_recomputing_the_prefix_torch():
    m = ac.init_language_model(40, 16, 4, 32, 2, 30, seed=1, backend="torch",
                               dtype=torch.float32)
    a = ac.generate(m, [5, 6], 20, generator=torch.Generator().manual_seed(0))
    b = ac.generate(m, [5, 6], 20, generator=torch.Generator().manual_seed(0),
                    use_cache=False)
    assert np.array_equal(a, b)


def test_top_k_one_is_greedy_and_logits_are_causal():
    m = ac.init_language_model(40, 16, 4, 32, 2, 30, seed=2)
    g = ac.generate(m, [3], 10, temperature=0.0)
    assert np.array_equal(g, ac.generate(m, [3], 10, top_k=1,
                                         generator=np.random.default_rng(0)))
    ids = np.array([1, 2, 3, 4, 5])
    full = ac.lm_logits(m, ids)
    np.testing.assert_allclose(ac.lm_logits(m, ids[:3]), full[:3], rtol=1e-10, atol=1e-12)
    # the head is tied: logits are the final state times E^T
    assert m.num_parameters() == 40 * 16 + 30 * 16 + sum(
        b.num_parameters() for b in m.blocks) + 2 * 16


def test_generate_checks_its_arguments():
    m = ac.init_language_model(40, 16, 4, 32, 1, 10, seed=2)
    with pytest.raises(ValueError, match=r"prompt_ids: expected ids in \[0, 40\)"):
        ac.generate(m, [-1], 2)
    with pytest.raises(ValueError, match="n_new: expected n0 \\+ n_new <= max_len=10"):
        ac.generate(m, [1, 2], 9)
    with pytest.raises(ValueError, match="temperature: expected a finite number >= 0"):
        ac.generate(m, [1], 2, temperature=-1.0)
    with pytest.raises(TypeError, match="generator: expected a numpy.random.Generator"):
        ac.generate(m, [1], 2, generator=torch.Generator())
    with pytest.raises(ValueError, match="top_k: expected a positive integer"):
        ac.generate(m, [1], 2, top_k=0)


def test_torch_nn_reference_model_equals_attncore_model():
    m = ac.init_language_model(30, 16, 4, 32, 2, 12, seed=0, backend="torch",
                               dtype=torch.float64)
    ref = lab.torch_reference_model(m).eval()
    ids = torch.randint(0, 30, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ref(ids), ac.lm_logits(m, ids), rtol=1e-10, atol=1e-10)


def test_checkpoint_round_trip_and_the_safetensors_format(tmp_path):
    config = lab.LMConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, seq_len=16,
                          batch_size=4, steps=3)
    model, losses = lab.train_language_model(config)
    path = tmp_path / "m.safetensors"
    lab.save_checkpoint(path, model, config, losses)
    back, config2, losses2 = lab.load_checkpoint(path)
    assert config2 == config and losses2 == losses
    ids = np.arange(10) % 5
    with torch.no_grad():
        np.testing.assert_allclose(ac.lm_logits(back, ids).numpy(),
                                   ac.lm_logits(model, ids).numpy(), rtol=1e-5, atol=1e-5)
    from safetensors.numpy import load_file        # the real library reads our file
    assert set(load_file(str(path))) == set(lab.read_safetensors(path)[0])


def test_shipped_checkpoint_is_reproduced_by_its_script(tmp_path, capsys):
    """The first steps of scripts/train_capstone.py's run give the losses the shipped file
    stores (float64 training: equal to far more digits than any chapter prints)."""
    import importlib.util
    from pathlib import Path

    _, config, losses = lab.load_checkpoint(lab.shipped_checkpoint())
    assert config == lab.CAPSTONE_CONFIG and len(losses) == config.steps
    path = Path(__file__).resolve().parents[1] / "scripts" / "train_capstone.py"
    spec = importlib.util.spec_from_file_location("train_capstone", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "first_steps.safetensors"
    assert script.main(["--steps", "3", "--out", str(out)]) == 0
    _, config3, first = lab.load_checkpoint(out)
    assert config3 == config and len(first) == 3
    np.testing.assert_allclose(first, losses[:3], rtol=1e-9)


def test_bigram_baseline_and_gradient_norms():
    tok, train, val = lab.corpus()
    assert tok.decode(tok.encode("def f(x):")) == "def f(x):"
    loss = lab.bigram_loss(train, val, tok.vocab_size)
    assert 2.0 < loss < np.log(tok.vocab_size)
    pre = lab.gradient_norms_through_depth(3, norm_first=True, n=8, batch=2)
    post = lab.gradient_norms_through_depth(3, norm_first=False, n=8, batch=2)
    assert pre.shape == post.shape == (3,) and np.isfinite(pre).all() and (post > 0).all()
    # post-norm puts more of the gradient on the top block than pre-norm does
    assert post[-1] / post[0] > pre[-1] / pre[0]


def test_random_batch_can_draw_every_window_the_last_included():
    # a text of 6 ids has 3 windows of 3 + 1 ids: starts 0, 1 and 2, the last ending at
    # the final id, which is then a target
    ids = np.arange(6)
    starts = []
    for seed in range(60):
        x, y = lab.random_batch(np.random.default_rng(seed), ids, 4, 3)
        assert (y == x + 1).all() and x.shape == (4, 3)
        starts += x[:, 0].tolist()
    assert set(starts) == {0, 1, 2}
    counts = np.bincount(starts)                 # 240 draws, 80 expected of each
    assert counts.min() > 50 and counts.max() < 110
    with pytest.raises(ValueError, match="seq_len"):
        lab.random_batch(np.random.default_rng(0), ids, 4, 6)


@pytest.mark.parametrize("backend, sink_tokens", [("numpy", 0), ("numpy", 2), ("torch", 1)])
def test_window_decoding_equals_recomputation_under_the_same_mask(backend, sink_tokens):
    # a Llama-form model (RoPE) decoded through SlidingWindowKVCache per block: every
    # step's logits are the rows of one masked pass, positions staying absolute
    m = ac.init_language_model(40, 16, 4, 32, 2, 30, seed=3, norm="rms", bias=False,
                               activation="swiglu", rope_base=100.0, n_kv_heads=2,
                               backend=backend, dtype=np.float64 if backend == "numpy"
                               else torch.float64)
    prompt = np.array([[1, 2, 3, 4], [9, 8, 7, 6]])
    window = 3
    rng = (lambda: np.random.default_rng(5)) if backend == "numpy" else \
        (lambda: torch.Generator().manual_seed(5))
    out = ac.generate(m, prompt, 14, window=window, sink_tokens=sink_tokens,
                      temperature=1.0, generator=rng())
    again = ac.generate(m, prompt, 14, window=window, sink_tokens=sink_tokens,
                        temperature=1.0, generator=rng(), use_cache=False)
    assert np.array_equal(out, again)
    ids = out if backend == "numpy" else torch.as_tensor(out)
    full = ac.lm_logits(m, ids, window=window, sink_tokens=sink_tokens)
    steps = ac.language_model._cached_logits(m, 2, 18, window, sink_tokens)
    rows = [steps(None, ids[:, :4])]
    rows += [steps(None, ids[:, t:t + 1]) for t in range(4, 18)]
    got = np.stack([np.asarray(r) for r in rows], axis=1)
    assert np.abs(got - np.asarray(full[:, 3:])).max() < 1e-12
    # the window matters: full attention differs once the window has slid
    plain = np.asarray(ac.lm_logits(m, ids))
    assert np.abs(plain[:, 3:] - got).max() > 1e-3
    assert np.abs(plain[:, :window] - np.asarray(full[:, :window])).max() < 1e-12


def test_window_arguments_are_checked():
    m = ac.init_language_model(40, 16, 4, 32, 1, 10, seed=2)
    with pytest.raises(ValueError, match="window: expected a positive integer, got 0"):
        ac.generate(m, [1], 2, window=0)
    with pytest.raises(ValueError, match="sink_tokens: expected 0 without a window"):
        ac.lm_logits(m, [1, 2], sink_tokens=2)
    with pytest.raises(ValueError, match="sink_tokens: expected a non-negative integer"):
        ac.lm_logits(m, [1, 2], window=2, sink_tokens=-1)
    with pytest.raises(TypeError, match="window: expected a positive integer"):
        ac.lm_logits(m, [1, 2], window=1.5)


def _overflowing_model(blocks, where, backend):
    """A float16 Llama-form model whose feed-forward layer in ``blocks[0]`` (``where="ffn"``)
    or whose head (``where="head"``) overflows float16 on every prompt, though every weight
    and input is finite."""
    from attncore.pretrained.smollm2 import _convert

    m = ac.init_language_model(16, 8, 2, 8, blocks, 32, activation="swiglu", bias=False,
                               norm="rms", rope_base=1e4, dtype=np.float16, tie_head=False)
    if where == "ffn":
        b = m.blocks[0]
        b.w_ff1[...] = 300 * np.eye(8)
        b.w_ff3[...] = 300 * np.eye(8)
        b.w_ff2[...] = 1e-5
    elif where == "head":
        m.head[...] = 0
        m.head[:, 5] = m.head[:, 7] = 3e4
    if backend == "torch":
        m = _convert(m, lambda a: None if a is None else torch.from_numpy(a))
    return m


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("blocks", [1, 2])
@pytest.mark.parametrize("call", ["lm_logits", "generate", "generate_uncached", "lm_decode"])
def test_an_overflow_in_the_feed_forward_layer_is_an_error_naming_block_and_weights(
        backend, blocks, call, recwarn):
    # It was NaN logits (and generate picked token 0, of probability 0), or, with a block
    # after it, "x: expected finite values", x being no argument of these functions.
    m = _overflowing_model(blocks, "ffn", backend)
    with pytest.raises(ValueError, match=r"^blocks\[0\]: params.w_ff1, params.w_ff3, "
                                         r"params.w_ff2: the feed-forward layer overflowed "
                                         r"float16"):
        if call == "lm_logits":
            ac.lm_logits(m, [1, 2, 3])
        elif call == "lm_decode":
            caches = [ac.KVCache.for_layer(b.attn, 8, ()) for b in m.blocks]
            ac.lm_decode(m, np.array([1, 2, 3]) if backend == "numpy"
                         else torch.tensor([1, 2, 3]), caches)
        else:
            ac.generate(m, [1, 2, 3], 4, temperature=0.0,
                        use_cache=call == "generate")
    assert not [w for w in recwarn if "overflow" in str(w.message)]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_an_overflow_in_the_head_is_an_error_not_a_token_of_probability_zero(backend,
                                                                          temperature):
    m = _overflowing_model(1, "head", backend)
    with pytest.raises(ValueError, match="head: the head overflowed float16"):
        ac.lm_logits(m, [1, 2, 3])
    gen = np.random.default_rng(0) if backend == "numpy" else torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="head: the head overflowed float16"):
        ac.generate(m, [1, 2, 3], 4, temperature=temperature, generator=gen)


def test_a_model_that_fits_its_dtype_still_runs_in_float16():
    m = _overflowing_model(2, "none", "numpy")
    m.head[...] = 0.01
    assert np.isfinite(ac.lm_logits(m, [1, 2, 3])).all()
    assert len(ac.generate(m, [1, 2, 3], 3, temperature=0.0)) == 6
