"""Tests for attncore.lab.scaling.projected_score_statistics: scores at initialisation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attncore as ac
from attncore.lab.scaling import projected_score_statistics


def gaussian_weights(d_model, d_out, std, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, std, (d_model, d_out)), rng.normal(0.0, std, (d_model, d_out))


@pytest.mark.parametrize("std", [0.02, 1 / math.sqrt(256)])
def test_scaled_score_variance_is_the_squared_query_variance(std):
    # q_j = sum_m x_m W_mj with |x|^2 = d_model: var q_j = d_model std^2, and the scaled
    # scores have variance (d_model std^2)^2 for every head size.
    w_q, w_k = gaussian_weights(256, 256, std, seed=1)
    theory = 256 * std**2
    for heads in (1, 4, 16):
        s = projected_score_statistics(w_q, w_k, heads, n_tokens=256, seed=2)
        assert s.d_k == 256 // heads and s.d_model == 256 and s.num_heads == heads
        assert s.weight_var == pytest.approx(std**2, rel=0.03)
        assert s.query_var == pytest.approx(theory, rel=0.05)
        assert s.scaled_score_var == pytest.approx(theory**2, rel=0.1)
        assert s.score_var == pytest.approx(s.scaled_score_var * s.d_k, rel=1e-12)


def test_square_xavier_gives_unit_scaled_scores():
    params = ac.init_multihead(384, 6, seed=3)
    s = projected_score_statistics(params.w_q, params.w_k, 6, seed=4)
    assert s.weight_var * 384 == pytest.approx(1.0, rel=0.03)
    assert s.scaled_score_var == pytest.approx(1.0, rel=0.1)


def test_packed_in_projection_of_multihead_attention_gives_a_quarter():
    # xavier_uniform_ over the packed (3d, d) in_proj_weight: variance 2 / (d + 3d) = 1/(2d)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(256, 4, batch_first=True)
    params = ac.params_from_torch(mha)
    s = projected_score_statistics(params.w_q, params.w_k, 4, seed=5)
    assert s.weight_var * 2 * 256 == pytest.approx(1.0, rel=0.03)
    assert s.scaled_score_var == pytest.approx(0.25, rel=0.1)


def test_torch_and_numpy_weights_give_the_same_numbers():
    w_q, w_k = gaussian_weights(64, 32, 0.1, seed=6)
    a = projected_score_statistics(w_q, w_k, 2, n_tokens=50, seed=7)
    b = projected_score_statistics(torch.from_numpy(w_q).float(), torch.from_numpy(w_k).float(),
                                   2, n_tokens=50, seed=7)
    assert a.scaled_score_var == pytest.approx(b.scaled_score_var, rel=1e-5)
    assert a == projected_score_statistics(w_q, w_k, 2, n_tokens=50, seed=7)


@pytest.mark.parametrize("kwargs, match", [
    (dict(w_k=np.zeros((8, 4))), "same shape"),
    (dict(w_q=np.zeros(8), w_k=np.zeros(8)), "w_q: expected a matrix"),
    (dict(w_q=np.zeros((8, 8), dtype=int)), "w_q"),
    (dict(num_heads=3), "num_heads: expected a divisor of d_out = 8"),
    (dict(num_heads=0), "num_heads: expected a positive integer"),
    (dict(n_tokens=1), "n_tokens: expected at least 2"),
    (dict(seed=-1), "seed"),
])
def test_bad_input_names_the_argument(kwargs, match):
    args = dict(w_q=np.zeros((8, 8)), w_k=np.zeros((8, 8)), num_heads=2)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        projected_score_statistics(args.pop("w_q"), args.pop("w_k"), args.pop("num_heads"),
                                   **args)


def test_mixed_libraries_are_refused():
    with pytest.raises(TypeError, match="w_k"):
        projected_score_statistics(np.zeros((8, 8)), torch.zeros(8, 8), 2)
