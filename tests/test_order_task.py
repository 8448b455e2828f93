"""attncore.lab.order_task: the look-back task, the model told positions four ways, training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncore.lab.order_task import (
    POSITIONS,
    LookbackConfig,
    init_order_model,
    lookback_batch,
    plot_lookback_losses,
    train_lookback,
)
from attncore.lab.training import IGNORE_INDEX, evaluate


def test_lookback_batch_holds_distinct_tokens_and_the_token_lag_places_back():
    tokens, targets = lookback_batch(np.random.default_rng(0), 50, 9, 12, lag=3)
    assert tokens.shape == targets.shape == (50, 9)
    assert tokens.dtype == targets.dtype == np.int64
    assert tokens.min() >= 0 and tokens.max() < 12
    assert all(len(set(row)) == 9 for row in tokens.tolist())
    assert np.all(targets[:, :3] == IGNORE_INDEX)
    np.testing.assert_array_equal(targets[:, 3:], tokens[:, :-3])


def test_lookback_batch_is_reproducible_and_uniform_enough():
    a = lookback_batch(np.random.default_rng(7), 4, 5, 8, lag=1)
    b = lookback_batch(np.random.default_rng(7), 4, 5, 8, lag=1)
    np.testing.assert_array_equal(a[0], b[0])
    tokens, _ = lookback_batch(np.random.default_rng(1), 4000, 6, 6, lag=1)
    # every token equally likely at every position (distinct tokens in uniform order)
    counts = np.stack([(tokens == t).mean(axis=0) for t in range(6)])
    assert np.abs(counts - 1 / 6).max() < 0.03


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(lag=0), ValueError, "lag: expected a positive integer"),
    (dict(lag=9), ValueError, "lag: expected 1 <= lag < seq_len=9"),
    (dict(vocab_size=5), ValueError, "vocab_size: expected at least seq_len=9"),
    (dict(batch_size=2.0), ValueError, "batch_size: expected a positive integer"),
])
def test_lookback_batch_rejects_bad_arguments(kwargs, error, words):
    args = dict(batch_size=2, seq_len=9, vocab_size=12, lag=2) | kwargs
    with pytest.raises(error, match=words):
        lookback_batch(np.random.default_rng(0), args.pop("batch_size"), args.pop("seq_len"),
                       args.pop("vocab_size"), **args)
    with pytest.raises(TypeError, match="rng: expected a numpy.random.Generator"):
        lookback_batch(0, 2, 9, 12, lag=2)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(positions="alibi"), ValueError, "positions: expected one of"),
    (dict(causal=1), TypeError, "causal: expected a bool"),
    (dict(lag=12), ValueError, "lag: expected 1 <= lag < seq_len=12"),
    (dict(num_heads=5), ValueError, "num_heads: expected a divisor of d_model=32"),
    (dict(positions="rope", d_model=6, num_heads=2), ValueError, "even head width"),
    (dict(positions="sinusoidal", d_model=5, num_heads=1), ValueError,
     "d_model: expected an even"),
    (dict(lr=0.0), ValueError, "lr: expected a finite positive number"),
    (dict(steps=-1), ValueError, "steps: expected a non-negative integer"),
])
def test_config_rejects_bad_settings(kwargs, error, words):
    with pytest.raises(error, match=words):
        LookbackConfig(**kwargs)


@pytest.mark.parametrize("positions", POSITIONS)
def test_forward_shapes_and_which_weights_exist(positions):
    model = init_order_model(LookbackConfig(positions=positions))
    assert (model.pos_emb is not None) == (positions == "learned")
    tokens = torch.from_numpy(lookback_batch(np.random.default_rng(0), 3, 12, 24, lag=2)[0])
    assert tuple(model.forward(tokens).shape) == (3, 12, 24)


def test_without_positions_and_mask_the_model_is_permutation_equivariant():
    # The chapter's theorem on the model itself: permuting the tokens permutes the logits.
    model = init_order_model(LookbackConfig(positions="none", num_layers=2))
    tokens = torch.from_numpy(lookback_batch(np.random.default_rng(3), 2, 12, 24, lag=2)[0])
    perm = torch.from_numpy(np.random.default_rng(4).permutation(12))
    with torch.no_grad():
        assert torch.allclose(model.forward(tokens[:, perm]), model.forward(tokens)[:, perm],
                              atol=1e-12)
    for kwargs in (dict(positions="learned"), dict(positions="sinusoidal"),
                   dict(positions="rope"), dict(positions="none", causal=True)):
        model = init_order_model(LookbackConfig(**kwargs))
        with torch.no_grad():
            gap = (model.forward(tokens[:, perm]) - model.forward(tokens)[:, perm]).abs().max()
        assert gap > 1e-3, kwargs


def test_a_learned_table_cannot_run_past_its_length_the_others_can():
    long = torch.from_numpy(lookback_batch(np.random.default_rng(0), 2, 20, 24, lag=2)[0])
    with pytest.raises(ValueError, match="a learned position table has 12 rows, got 20"):
        init_order_model(LookbackConfig(positions="learned")).forward(long)
    for positions in ("none", "sinusoidal", "rope"):
        out = init_order_model(LookbackConfig(positions=positions)).forward(long)
        assert tuple(out.shape) == (2, 20, 24)


def test_training_is_deterministic_and_learns_with_positions():
    model, losses = train_lookback(positions="rope", steps=60, seed=3)
    _, again = train_lookback(positions="rope", steps=60, seed=3)
    assert losses == again
    assert len(losses) == 60 and losses[-1] < 0.5 * losses[0]
    tokens, targets = lookback_batch(np.random.default_rng(9), 64, 12, 24, lag=2)
    assert evaluate(model, tokens, targets)[1] > 0.5
    assert torch.get_num_threads() >= 1


def test_training_without_positions_stays_near_the_bound():
    # Bidirectional and position-free: at most 1 / (n - 1) on average, whatever it learns.
    model, _ = train_lookback(positions="none", steps=40)
    tokens, targets = lookback_batch(np.random.default_rng(9), 400, 12, 24, lag=2)
    assert evaluate(model, tokens, targets)[1] < 1 / 11 + 0.03


def test_plot_lookback_losses_draws_each_run_and_the_uniform_guess():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = LookbackConfig(seq_len=12, lag=2)
    losses = {"learned": [2.0, 1.0, 0.5], "rope": [2.0, 0.8, 0.1]}
    ax = plot_lookback_losses(losses, config, background=["learned"])
    lines = ax.get_lines()
    assert [line.get_label() for line in lines][:2] == ["learned", "rope"]
    assert list(lines[1].get_ydata()) == [2.0, 0.8, 0.1]
    assert lines[0].get_linewidth() < lines[1].get_linewidth()   # the reference is thin
    assert lines[2].get_ydata()[0] == pytest.approx(math.log(11))
    assert ax.get_yscale() == "log" and "n = 12, k = 2" in ax.get_title()
    plt.close("all")
    with pytest.raises(KeyError, match="sinusoidal"):
        plot_lookback_losses(losses, config, background=["sinusoidal"])
