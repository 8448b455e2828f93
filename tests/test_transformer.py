"""The transformer block against torch.nn.TransformerEncoderLayer, on every backend."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from attncore.transformer import gelu
from conftest import BACKENDS, to_backend, to_numpy


def torch_layer(norm_first, activation, bias=True, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 40, dropout=0.0, activation=activation,
                                             batch_first=True, norm_first=norm_first,
                                             bias=bias, dtype=dtype)
    with torch.no_grad():                      # LayerNorms away from their initial 1 and 0
        for norm in (layer.norm1, layer.norm2):
            norm.weight.uniform_(0.5, 1.5)
            if norm.bias is not None:
                norm.bias.uniform_(-0.5, 0.5)
    return layer.eval()


def padded_input(dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 7, 16, generator=g, dtype=dtype)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    pad[2, 2:] = True
    return x, pad


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_torch_encoder_layer_in_eval_mode_float32(norm_first, activation, bias):
    layer = torch_layer(norm_first, activation, bias)
    params = ac.block_params_from_torch(layer)
    x, pad = padded_input()
    with torch.no_grad():
        ref = layer(x, src_key_padding_mask=pad)
        out = ac.transformer_block(params, x, mask=(~pad)[:, None, :])
    # (PyTorch's fast path returns zeros at padded positions; those rows are compared
    # through the unpadded ones only)
    torch.testing.assert_close(out[~pad], ref[~pad], rtol=1e-5, atol=2e-6)
    with torch.no_grad():
        ref = layer(x)
        out = ac.transformer_block(params, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_numpy_block_equals_torch_in_float64(norm_first, activation):
    layer = torch_layer(norm_first, activation, dtype=torch.float64)
    p = ac.block_params_from_torch(layer)
    pn = ac.TransformerBlockParams(
        ac.MultiHeadParams(**{n: getattr(p.attn, n).numpy() for n in
                              ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")},
                           num_heads=4),
        **{n: getattr(p, n).numpy() for n in ("ln1_weight", "ln1_bias", "ln2_weight",
                                              "ln2_bias", "w_ff1", "b_ff1", "w_ff2", "b_ff2")},
        norm_first=norm_first, activation=activation)
    x, pad = padded_input(torch.float64)
    with torch.no_grad():
        ref = layer(x, src_key_padding_mask=pad).numpy()
    out = ac.transformer_block(pn, x.numpy(), mask=(~pad).numpy()[:, None, :])
    keep = (~pad).numpy()
    np.testing.assert_allclose(out[keep], ref[keep], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("norm_first", [True, False])
def test_round_trip_to_torch(norm_first):
    params = ac.init_transformer_block(16, 4, 32, norm_first=norm_first, seed=3,
                                       dtype=np.float32)
    layer = ac.block_params_to_torch(params).eval()
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    with torch.no_grad():
        ref = layer(torch.from_numpy(x), is_causal=True,
                    src_mask=torch.ones(5, 5, dtype=torch.bool).triu(1)).numpy()
    np.testing.assert_allclose(ac.transformer_block(params, x, causal=True), ref, rtol=1e-5,
                               atol=1e-5)
    back = ac.block_params_from_torch(layer)
    assert back.norm_first == norm_first and back.activation == "gelu"
    np.testing.assert_array_equal(back.w_ff1.numpy(), params.w_ff1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_agree_and_seed_fixes_the_draw(backend):
    device = "cuda" if backend == "torch-cuda" else None
    kw = {} if backend == "numpy" else {"backend": "torch", "device": device}
    p = ac.init_transformer_block(16, 4, 32, seed=7, n_kv_heads=2, **kw)
    ref = ac.init_transformer_block(16, 4, 32, seed=7, n_kv_heads=2)
    assert p.num_parameters() == ref.num_parameters() == (
        16 * 16 * 2 + 16 * 8 * 2 + 16 + 8 + 8 + 16 + 4 * 16 + 16 * 32 + 32 + 32 * 16 + 16)
    x = np.random.default_rng(1).standard_normal((2, 6, 16))
    out = ac.transformer_block(p, to_backend(x, backend), causal=True)
    np.testing.assert_allclose(to_numpy(out), ac.transformer_block(ref, x, causal=True),
                               rtol=1e-10, atol=1e-12)


def test_cached_block_decoding_equals_the_causal_block():
    for norm_first in (True, False):
        p = ac.init_transformer_block(16, 4, 32, seed=2, norm_first=norm_first)
        x = np.random.default_rng(1).standard_normal((2, 9, 16))
        cache = ac.KVCache.for_layer(p.attn, 9, (2,))
        steps = [ac.block_decode_step(p, x[:, :4], cache)] + \
            [ac.block_decode_step(p, x[:, i:i + 1], cache) for i in range(4, 9)]
        np.testing.assert_allclose(np.concatenate(steps, axis=1),
                                   ac.transformer_block(p, x, causal=True), rtol=1e-10,
                                   atol=1e-12)


def test_block_dropout_is_seeded_and_off_by_default():
    p = ac.init_transformer_block(16, 4, 32, seed=0)
    x = np.random.default_rng(1).standard_normal((2, 6, 16))
    a = ac.transformer_block(p, x, dropout_p=0.2, generator=np.random.default_rng(4))
    b = ac.transformer_block(p, x, dropout_p=0.2, generator=np.random.default_rng(4))
    assert np.array_equal(a, b)
    assert np.array_equal(ac.transformer_block(p, x), ac.transformer_block(p, x, dropout_p=0.0))
    assert not np.allclose(a, ac.transformer_block(p, x))


def test_layer_norm_and_gelu_formulas():
    x = np.random.default_rng(0).standard_normal((4, 10))
    y = ac.layer_norm(x)
    np.testing.assert_allclose(y.mean(axis=-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=-1), 1 / (1 + 1e-5 / x.var(axis=-1)), rtol=1e-12)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(gelu(x), torch.nn.functional.gelu(t).numpy(), rtol=1e-12)
    np.testing.assert_allclose(ac.layer_norm(t).numpy(), y, rtol=1e-10, atol=1e-12)


def test_bad_arguments_are_named():
    p = ac.init_transformer_block(16, 4, 32)
    with pytest.raises(TypeError, match="params: expected a TransformerBlockParams"):
        ac.transformer_block(p.attn, np.zeros((2, 16)))
    with pytest.raises(ValueError, match="x: expected last axis d_model=16"):
        ac.transformer_block(p, np.zeros((2, 8)))
    with pytest.raises(TypeError, match="expected one floating dtype"):
        ac.transformer_block(p, np.zeros((2, 16), dtype=np.float32))
    with pytest.raises(ValueError, match="activation: expected 'relu', 'gelu' or 'swiglu'"):
        ac.init_transformer_block(16, 4, 32, activation="swish")
    with pytest.raises(ValueError, match="num_heads: expected a divisor"):
        ac.init_transformer_block(16, 3, 32)
    with pytest.raises(ValueError, match="w_ff2: expected shape"):
        ac.TransformerBlockParams(p.attn, p.ln1_weight, p.ln1_bias, p.ln2_weight, p.ln2_bias,
                                  p.w_ff1, p.b_ff1, p.w_ff1, p.b_ff2)
    with pytest.raises(TypeError, match="layer: expected a torch.nn.TransformerEncoderLayer"):
        ac.block_params_from_torch(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="batch_first=True"):
        ac.block_params_from_torch(torch.nn.TransformerEncoderLayer(16, 4, 32))
    with pytest.raises(ValueError, match="layer: expected dropout=0.0"):   # the default 0.1
        ac.block_params_from_torch(torch.nn.TransformerEncoderLayer(16, 4, 32,
                                                                    batch_first=True))
    gqa = ac.init_transformer_block(16, 4, 32, n_kv_heads=2)
    with pytest.raises(ValueError, match="n_kv_heads == num_heads"):
        ac.block_params_to_torch(gqa)
