"""Llama's block and language model (RMSNorm, SwiGLU, RoPE inside attention, grouped-query
attention, no biases, tied or untied head) against transformers' ``LlamaForCausalLM``, and
cached generation against recomputation, on every backend."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from conftest import BACKENDS, to_backend, to_numpy

transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=50, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def tiny_llama(tied, seed=0):
    """A small random ``LlamaForCausalLM``, float64, with its norms away from 1."""
    # (sdpa: transformers' eager attention takes its softmax in float32)
    config = transformers.LlamaConfig(**SIZES, rms_norm_eps=1e-5, tie_word_embeddings=tied,
                                      rope_theta=500.0, attention_bias=False, mlp_bias=False,
                                      attn_implementation="sdpa")
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.2)
    # transformers computes RoPE's angles and RMSNorm in float32 even in a float64 model
    # (each an error of about 1e-6 in the logits); attncore in the model's dtype. The
    # reference does the same two formulas in float64.
    freqs = torch.as_tensor(ac.position_frequencies(config.head_dim, base=500.0))

    def rotary(x, position_ids):
        angles = position_ids[..., None].double() * freqs
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    def rms_norm_in_float64(norm):
        def forward(x):
            return norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                                  + norm.variance_epsilon))
        return forward

    model.model.rotary_emb.forward = rotary
    for module in model.modules():
        if type(module).__name__ == "LlamaRMSNorm":
            module.forward = rms_norm_in_float64(module)
    return model


def from_llama(hf):
    """transformers' weights in attncore's (in, out) layout."""
    c = hf.config
    blocks = []
    for layer in hf.model.layers:
        a, m = layer.self_attn, layer.mlp
        t = lambda lin: lin.weight.detach().T.clone()            # noqa: E731
        attn = ac.MultiHeadParams(t(a.q_proj), t(a.k_proj), t(a.v_proj), t(a.o_proj),
                                  None, None, None, None, num_heads=c.num_attention_heads)
        blocks.append(ac.TransformerBlockParams(
            attn, layer.input_layernorm.weight.detach().clone(), None,
            layer.post_attention_layernorm.weight.detach().clone(), None,
            t(m.gate_proj), None, t(m.down_proj), None, activation="swiglu", norm="rms",
            eps=c.rms_norm_eps, rope_base=c.rope_parameters["rope_theta"],
            w_ff3=t(m.up_proj)))
    emb = hf.model.embed_tokens.weight.detach().clone()
    head = None if c.tie_word_embeddings else hf.lm_head.weight.detach().T.clone()
    return ac.LanguageModel(emb, None, blocks, hf.model.norm.weight.detach().clone(), None,
                            head=head, max_len=c.max_position_embeddings)


@pytest.mark.parametrize("tied", [True, False])
def test_logits_equal_transformers_llama(tied):
    hf = tiny_llama(tied)
    model = from_llama(hf)
    assert model.tied == tied
    ids = torch.randint(0, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
        got = ac.lm_logits(model, ids)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    # one block alone, with its attention weights
    h = torch.randn(2, 9, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    layer = hf.model.layers[0]
    pos = torch.arange(9)[None]
    with torch.no_grad():
        cos_sin = hf.model.rotary_emb(h, pos)
        mask = torch.full((9, 9), -torch.inf, dtype=torch.float64).triu(1)[None, None]
        ref = layer(h, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
        ref = ref[0] if isinstance(ref, tuple) else ref
        out, weights = ac.transformer_block(model.blocks[0], h, causal=True,
                                            return_weights=True)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    assert weights.shape == (2, 4, 9, 9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_llama_form_generation_with_the_cache_equals_recomputation(backend):
    kw = {} if backend == "numpy" else {"backend": "torch",
                                        "device": "cuda" if backend == "torch-cuda" else None}
    m = ac.init_language_model(40, 16, 4, 24, 2, 30, activation="swiglu", norm="rms",
                               bias=False, n_kv_heads=2, rope_base=100.0, tie_head=False,
                               seed=1, **kw)
    assert m.pos_emb is None and m.head is not None and m.blocks[0].w_ff3 is not None
    gen = (lambda: np.random.default_rng(3)) if backend == "numpy" else \
        (lambda: torch.Generator(device=m.tok_emb.device).manual_seed(3))
    prompt = np.array([[1, 2, 3], [7, 7, 9]])
    for temperature, top_k in ((1.0, None), (0.7, 5), (0.0, None)):
        a = ac.generate(m, prompt, 20, temperature=temperature, top_k=top_k,
                        generator=gen())
        b = ac.generate(m, prompt, 20, temperature=temperature, top_k=top_k,
                        generator=gen(), use_cache=False)
        assert a.shape == (2, 23) and np.array_equal(a, b)
    # the cache carries the positions: decoding a sequence step by step gives the rows of
    # one causal pass over it
    x = to_backend(np.random.default_rng(2).standard_normal((2, 9, 16)), backend)
    block = m.blocks[0]
    cache = ac.KVCache.for_layer(block.attn, 9, (2,))
    steps = [ac.block_decode_step(block, x[:, :4], cache)] + \
        [ac.block_decode_step(block, x[:, i:i + 1], cache) for i in range(4, 9)]
    whole = ac.transformer_block(block, x, causal=True)
    joined = np.concatenate([to_numpy(s) for s in steps], axis=1)
    np.testing.assert_allclose(joined, to_numpy(whole), rtol=1e-10, atol=1e-12)


def test_numpy_and_torch_llama_models_agree_and_the_seed_fixes_the_draw():
    kw = dict(activation="swiglu", norm="rms", bias=False, n_kv_heads=1, rope_base=1e4,
              seed=5)
    a = ac.init_language_model(30, 16, 2, 20, 2, 12, **kw)
    b = ac.init_language_model(30, 16, 2, 20, 2, 12, backend="torch", **kw)
    ids = np.arange(10) % 7
    np.testing.assert_allclose(ac.lm_logits(a, ids), ac.lm_logits(b, ids).numpy(),
                               rtol=1e-10, atol=1e-12)
    # RMSNorm gains, no shifts; the tied head counted once; W_3 of SwiGLU
    d, f = 16, 20
    per_block = 2 * d + (d * d * 2 + d * 8 * 2) + 3 * d * f
    assert a.num_parameters() == 30 * d + 2 * per_block + d
    # the GPT form draws the same numbers as before the Llama options existed
    g = ac.init_language_model(30, 16, 2, 20, 1, 12, seed=5)
    assert g.pos_emb.shape == (12, 16) and g.head is None and g.blocks[0].norm == "layer"


def test_the_differentiable_llama_block():
    m = ac.init_language_model(20, 8, 2, 12, 1, 10, activation="swiglu", norm="rms",
                               bias=False, rope_base=50.0, backend="torch", seed=2)
    for t in m.tensors():
        t.requires_grad_()
    ids = torch.tensor([[1, 2, 3, 4]])
    loss = ac.lm_logits(m, ids).logsumexp(-1).sum()
    loss.backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in m.tensors())
    block = m.blocks[0]
    x = torch.randn(1, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: ac.transformer_block(block, x, causal=True),
                                    (x,))


def test_a_tiny_temperature_is_greedy_decoding():
    """1e-310 once overflowed the logits over the temperature: NaN probabilities and token
    0 every step. Subtracting the largest logit first makes it the greedy limit."""
    m = ac.init_language_model(40, 16, 4, 32, 2, 30, seed=2)
    greedy = ac.generate(m, [3, 4], 12, temperature=0.0)
    for t in (1e-310, 5e-324, np.float64(1e-300)):
        tiny = ac.generate(m, [3, 4], 12, temperature=t, generator=np.random.default_rng(0))
        assert np.array_equal(tiny, greedy)
    # NumPy's scalars are temperatures like any other
    ac.generate(m, [3], 2, temperature=np.float32(0.7), generator=np.random.default_rng(0))


def test_llama_options_are_checked_and_named():
    with pytest.raises(ValueError, match="bias: expected False with norm='rms'"):
        ac.init_transformer_block(16, 4, 32, norm="rms")
    with pytest.raises(ValueError, match="norm: expected 'layer' .* or 'rms'"):
        ac.init_transformer_block(16, 4, 32, norm="batch", bias=False)
    with pytest.raises(ValueError, match="rope_base: expected None or a finite number"):
        ac.init_transformer_block(16, 4, 32, rope_base=1.0)
    with pytest.raises(ValueError, match="rope_base: RoPE rotates pairs .* d_head=3"):
        ac.init_transformer_block(12, 4, 32, rope_base=1e4)
    p = ac.init_transformer_block(16, 4, 32, activation="swiglu", norm="rms", bias=False)
    with pytest.raises(ValueError, match="w_ff3: expected an array of shape"):
        ac.TransformerBlockParams(p.attn, p.ln1_weight, None, p.ln2_weight, None, p.w_ff1,
                                  None, p.w_ff2, None, activation="gelu", w_ff3=p.w_ff3)
    with pytest.raises(ValueError, match=r"w_ff3: expected shape \(16, 32\)"):
        ac.TransformerBlockParams(p.attn, p.ln1_weight, None, p.ln2_weight, None, p.w_ff1,
                                  None, p.w_ff2, None, activation="swiglu", w_ff3=p.w_ff2)
    with pytest.raises(ValueError, match="params: expected norm='layer'"):
        ac.block_params_to_torch(p)
    blocks = [ac.init_transformer_block(16, 4, 32, norm="rms", bias=False)]
    with pytest.raises(ValueError, match="pos_emb: expected a position table, or blocks "
                                         "with RoPE"):
        ac.LanguageModel(np.zeros((10, 16)), None, blocks, np.ones(16), None, max_len=8)
    rope = [ac.init_transformer_block(16, 4, 32, norm="rms", bias=False, rope_base=1e4)]
    with pytest.raises(ValueError, match="max_len: expected the model's context length"):
        ac.LanguageModel(np.zeros((10, 16)), None, rope, np.ones(16), None)
    with pytest.raises(ValueError, match=r"head: expected shape \(d_model, vocab_size\)"):
        ac.LanguageModel(np.zeros((10, 16)), None, rope, np.ones(16), None,
                         head=np.zeros((10, 16)), max_len=8)
    with pytest.raises(ValueError, match="lnf_bias: expected None with RMSNorm"):
        ac.LanguageModel(np.zeros((10, 16)), None, rope, np.ones(16), np.zeros(16),
                         max_len=8)
    m = ac.LanguageModel(np.zeros((10, 16)), None, rope, np.ones(16), None, max_len=8)
    with pytest.raises(ValueError, match="ids: expected at most max_len=8 positions"):
        ac.lm_logits(m, np.zeros(9, dtype=np.int64))
