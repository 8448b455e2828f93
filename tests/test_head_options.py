"""Gated attention and QK-norm, the two per-head options of the transformer block: against
transformers' Qwen3-Next attention (which has both) and a reference written with torch
operations, decoding against recomputation, gradients, and the checks of bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from conftest import BACKENDS, to_backend, to_numpy

D, H, H_KV, F = 16, 4, 2, 24


def block(backend="numpy", gate=True, qk_norm=True, rope_base=100.0, seed=0, **kw):
    """A Llama-form block with the options; gains away from 1, so that they matter."""
    kw = {"norm": "rms", "activation": "swiglu", "bias": False, **kw}
    p = ac.init_transformer_block(D, H, F, n_kv_heads=H_KV, rope_base=rope_base, gate=gate,
                                  qk_norm=qk_norm, seed=seed, **kw)
    rng = np.random.default_rng(seed + 7)
    if qk_norm:
        p.q_norm_weight = rng.uniform(0.5, 1.5, D // H).astype(p.ln1_weight.dtype)
        p.k_norm_weight = rng.uniform(0.5, 1.5, D // H).astype(p.ln1_weight.dtype)
    if backend != "numpy":
        return ac.TransformerBlockParams(**{
            n: to_backend(v, backend) if isinstance(v, np.ndarray) else v
            for n, v in p.__dict__.items() if n != "attn"},
            attn=ac.MultiHeadParams(*(to_backend(getattr(p.attn, n), backend)
                                      if getattr(p.attn, n) is not None else None
                                      for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k",
                                                "b_v", "b_o")),
                                    num_heads=H))
    return p


def reference_attention(p, h, causal=True):
    """The attention sub-layer written out with torch operations, float64: project, split,
    RMSNorm each head's queries and keys, rotate, attend (grouped), gate, merge, W_O."""
    t = lambda a: None if a is None else torch.as_tensor(to_numpy(a))     # noqa: E731
    h = t(h)
    n, d_head = h.shape[-2], D // H
    heads = lambda y, k: y.reshape(*y.shape[:-1], k, d_head).transpose(-3, -2)  # noqa
    q, k, v = heads(h @ t(p.attn.w_q), H), heads(h @ t(p.attn.w_k), H_KV), \
        heads(h @ t(p.attn.w_v), H_KV)
    if p.q_norm_weight is not None:
        rms = lambda y, g: g * y / torch.sqrt((y * y).mean(-1, keepdim=True) + p.eps)  # noqa
        q, k = rms(q, t(p.q_norm_weight)), rms(k, t(p.k_norm_weight))
    if p.rope_base is not None:
        inv = p.rope_base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        half = lambda y: torch.cat([-y[..., d_head // 2:], y[..., :d_head // 2]], -1)  # noqa
        q, k = q * cos + half(q) * sin, k * cos + half(k) * sin
    k, v = k.repeat_interleave(H // H_KV, -3), v.repeat_interleave(H // H_KV, -3)
    s = q @ k.transpose(-1, -2) / d_head ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)
    o = s.softmax(-1) @ v
    if p.w_gate is not None:
        o = o * heads(torch.sigmoid(h @ t(p.w_gate)), H)
    return o.transpose(-3, -2).reshape(*h.shape[:-1], D) @ t(p.attn.w_o)


def attention_part(p, x, causal=True):
    """The attention sub-layer of attncore's block: the block with W_2 = 0 (no
    feed-forward output) minus its input."""
    p.w_ff2 = p.w_ff2 * 0
    return to_numpy(ac.transformer_block(p, x, causal=causal)) - to_numpy(x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gate, qk_norm, rope_base", [
    (True, False, None), (False, True, 100.0), (True, True, 100.0), (True, True, None)])
def test_each_option_equals_the_reference(backend, gate, qk_norm, rope_base):
    p = block(backend, gate=gate, qk_norm=qk_norm, rope_base=rope_base)
    x = np.random.default_rng(1).standard_normal((2, 7, D))
    h = ac.rms_norm(x, to_numpy(p.ln1_weight), p.eps)
    for causal in (True, False):
        np.testing.assert_allclose(attention_part(p, to_backend(x, backend), causal),
                                   reference_attention(p, h, causal).numpy(),
                                   rtol=1e-10, atol=1e-12)
    # the weights of every head come back too, and a mask is honoured as without options
    out, w = ac.transformer_block(p, to_backend(x, backend), causal=True,
                                  return_weights=True)
    assert w.shape == (2, H, 7, 7)
    np.testing.assert_allclose(to_numpy(w).sum(-1), 1.0, rtol=1e-12)
    tril = to_backend(np.tril(np.ones((7, 7), dtype=bool)), backend)
    np.testing.assert_allclose(to_numpy(ac.transformer_block(p, to_backend(x, backend),
                                                             mask=tril)),
                               to_numpy(out), rtol=1e-12, atol=1e-13)


def test_gated_qk_normed_attention_equals_transformers_qwen3_next():
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_next import modeling_qwen3_next as qn

    d_head = D // H
    config = qn.Qwen3NextConfig(hidden_size=D, num_attention_heads=H,
                                num_key_value_heads=H_KV, head_dim=d_head,
                                rms_norm_eps=1e-5, attention_bias=False,
                                partial_rotary_factor=1.0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    ref = qn.Qwen3NextAttention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        for name, w in ref.named_parameters():
            (w.uniform_(-0.5, 0.5) if "norm" in name else w.normal_(0.0, 0.3))

    def norm_in_float64(norm):       # transformers computes it in float32; the same formula
        return lambda y: (1.0 + norm.weight) * y * torch.rsqrt(
            y.pow(2).mean(-1, keepdim=True) + norm.eps)
    ref.q_norm.forward, ref.k_norm.forward = norm_in_float64(ref.q_norm), \
        norm_in_float64(ref.k_norm)
    # q_proj's rows hold, per head, its d_head query rows and then its d_head gate rows
    wq = ref.q_proj.weight.detach().reshape(H, 2, d_head, D)
    p = block("torch-cpu", rope_base=1e4)
    p.attn = ac.MultiHeadParams(wq[:, 0].reshape(D, D).T.clone(),
                                ref.k_proj.weight.detach().T.clone(),
                                ref.v_proj.weight.detach().T.clone(),
                                ref.o_proj.weight.detach().T.clone(),
                                None, None, None, None, num_heads=H)
    p.w_gate = wq[:, 1].reshape(D, D).T.clone()
    p.q_norm_weight = 1.0 + ref.q_norm.weight.detach().clone()   # Qwen3-Next stores g - 1
    p.k_norm_weight = 1.0 + ref.k_norm.weight.detach().clone()
    p.ln1_weight = torch.ones(D, dtype=torch.float64)
    p.eps = config.rms_norm_eps
    x = torch.randn(2, 9, D, dtype=torch.float64)
    ang = torch.arange(9, dtype=torch.float64)[:, None] * torch.as_tensor(
        ac.position_frequencies(d_head, base=1e4))
    cos = torch.cat([ang.cos()] * 2, -1).expand(2, 9, d_head)
    sin = torch.cat([ang.sin()] * 2, -1).expand(2, 9, d_head)
    h = ac.rms_norm(x, eps=p.eps)
    expected, _ = ref(h, (cos, sin), None)
    np.testing.assert_allclose(attention_part(p, x), expected.detach().numpy(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm_first", [True, False])
def test_decoding_equals_recomputation(backend, norm_first):
    kw = {} if norm_first else {"norm": "layer", "activation": "gelu", "bias": True}
    p = block(backend, norm_first=norm_first, **kw)
    x = to_backend(np.random.default_rng(2).standard_normal((2, 9, D)), backend)
    cache = ac.KVCache.for_layer(p.attn, 9, (2,))
    steps = [ac.block_decode_step(p, x[:, :4], cache)] + \
        [ac.block_decode_step(p, x[:, i:i + 1], cache) for i in range(4, 9)]
    whole = ac.transformer_block(p, x, causal=True)
    np.testing.assert_allclose(np.concatenate([to_numpy(s) for s in steps], axis=1),
                               to_numpy(whole), rtol=1e-10, atol=1e-12)


def test_generation_through_gated_qk_normed_blocks_uses_the_cache_rightly():
    blocks = [block(seed=s) for s in (0, 1)]
    rng = np.random.default_rng(4)
    m = ac.LanguageModel(rng.standard_normal((30, D)), None, blocks, np.ones(D), None,
                         max_len=24)
    for temperature in (1.0, 0.0):
        a = ac.generate(m, [[1, 2, 3]], 12, temperature=temperature,
                        generator=np.random.default_rng(3))
        b = ac.generate(m, [[1, 2, 3]], 12, temperature=temperature,
                        generator=np.random.default_rng(3), use_cache=False)
        assert np.array_equal(a, b)


def test_numpy_and_torch_agree_and_the_options_count_as_parameters():
    a, b = block("numpy"), block("torch-cpu")
    x = np.random.default_rng(5).standard_normal((3, 6, D))
    np.testing.assert_allclose(to_numpy(ac.transformer_block(a, x, causal=True)),
                               to_numpy(ac.transformer_block(b, torch.tensor(x),
                                                             causal=True)),
                               rtol=1e-12, atol=1e-13)
    plain = block(gate=False, qk_norm=False)
    assert a.num_parameters() == plain.num_parameters() + D * D + 2 * (D // H)
    assert a.gated and a.qk_norm and not plain.gated and not plain.qk_norm
    # the options draw after the other weights: without them, the same block as before
    same = ac.init_transformer_block(D, H, F, n_kv_heads=H_KV, rope_base=100.0,
                                     norm="rms", activation="swiglu", bias=False)
    assert np.array_equal(same.w_ff3, plain.w_ff3)


def test_the_options_are_differentiable():
    p = block("torch-cpu", seed=3)
    leaves = [p.w_gate, p.q_norm_weight, p.k_norm_weight]
    for t in leaves:
        t.requires_grad_()
    x = torch.randn(1, 5, D, dtype=torch.float64, requires_grad=True)
    ac.transformer_block(p, x, causal=True).square().sum().backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in leaves)

    def f(x, w_gate, q_g, k_g):
        p.w_gate, p.q_norm_weight, p.k_norm_weight = w_gate, q_g, k_g
        return ac.transformer_block(p, x, causal=True)
    small = [t.detach().clone().requires_grad_() for t in [x] + leaves]
    assert torch.autograd.gradcheck(f, small)


def test_bad_options_are_refused_by_name():
    p = block()
    fields = {n: v for n, v in p.__dict__.items()}
    with pytest.raises(ValueError, match=r"k_norm_weight: expected an array of shape \(4,\) "
                                         r"with q_norm_weight"):
        ac.TransformerBlockParams(**{**fields, "k_norm_weight": None})
    with pytest.raises(ValueError, match=r"w_gate: expected shape \(16, 16\)"):
        ac.TransformerBlockParams(**{**fields, "w_gate": np.zeros((16, 4))})
    with pytest.raises(ValueError, match=r"q_norm_weight: expected shape \(4,\)"):
        ac.TransformerBlockParams(**{**fields, "q_norm_weight": np.ones(16)})
    with pytest.raises(TypeError, match="float32"):
        ac.TransformerBlockParams(**{**fields, "w_gate": p.w_gate.astype(np.float32)})
    with pytest.raises(TypeError, match="gate"):
        ac.init_transformer_block(D, H, F, gate="yes")
    with pytest.raises(TypeError, match="qk_norm"):
        ac.init_transformer_block(D, H, F, qk_norm=1)
    with pytest.raises(ValueError, match="expected no w_gate and no QK-norm"):
        ac.block_params_to_torch(block(norm="layer", activation="gelu", bias=True,
                                       rope_base=None))
    for backend in BACKENDS:        # the same errors on every path
        x = to_backend(np.random.default_rng(0).standard_normal((1, 3, D)), backend)
        for name, bad in (("q_norm_weight", np.nan), ("w_gate", np.inf)):
            b = block(backend)
            arr = to_backend(to_numpy(getattr(b, name)).copy(), backend)
            arr[0] = bad
            setattr(b, name, arr)
            with pytest.raises(ValueError, match=f"params.{name}: expected finite values"):
                ac.transformer_block(b, x, causal=True)
            cache = ac.KVCache.for_layer(b.attn, 4, (1,))
            with pytest.raises(ValueError, match=f"params.{name}: expected finite values"):
                ac.block_decode_step(b, x, cache)
            assert len(cache) == 0
    # x @ W_G overflows float32 (16 terms of 3e37): said, not a silent gate of 0 or 1
    b = block(qk_norm=False, dtype=np.float32)
    big = np.ones((1, 2, D), dtype=np.float32)
    b.w_gate = np.full((D, D), 3e37, dtype=np.float32)
    with pytest.raises(ValueError, match=r"overflow in x @ params.w_gate"):
        ac.transformer_block(b, big, causal=True)


def test_chapter_19s_shipped_models_have_their_options_and_obey_the_bound():
    from attncore.lab.head_options import VARIANTS, load_variant, score_statistics

    ids = np.random.default_rng(0).integers(0, 60, (2, 64))
    for name, (gate, qk_norm) in VARIANTS.items():
        model, losses = load_variant(name)
        assert all(b.gated == gate and b.qk_norm == qk_norm for b in model.blocks)
        assert len(losses) == 600 and losses[-1] < losses[0] - 1.5    # it learnt
        for s in score_statistics(model, ids):
            assert 0 < s["first_key"] < 1
            assert (s["max_score"] <= s["bound"] + 1e-9) if qk_norm else np.isnan(s["bound"])
    with pytest.raises(ValueError, match="name: expected one of"):
        load_variant("gate")


def test_the_shipped_runs_first_steps_are_reproduced():
    from attncore.lab.head_options import HEAD_OPTIONS_CONFIG, init_variant, load_variant
    from attncore.lab.language import train_language_model

    for name in ("gated", "qk-norm"):
        _, stored = load_variant(name)
        _, losses = train_language_model(HEAD_OPTIONS_CONFIG, model=init_variant(name),
                                         stop_step=2)
        np.testing.assert_allclose(losses, stored[:2], rtol=1e-9)
