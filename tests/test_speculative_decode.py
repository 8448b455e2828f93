"""Speculative decoding of a language model: the context draft, decoding through caches,
and the target's greedy output kept exactly (on small seeded Llama-form models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac


def llama(backend="numpy", dtype=np.float64):
    return ac.init_language_model(50, 16, 4, 32, 2, 64, norm="rms", activation="swiglu",
                                  bias=False, rope_base=10000.0, n_kv_heads=2, seed=1,
                                  backend=backend, dtype=dtype)


PROMPT = np.array([1, 2, 3, 4, 1, 2, 3, 4, 1, 2])


# --- context_ngram_draft ------------------------------------------------------------------

def test_draft_copies_what_followed_the_longest_latest_ngram():
    assert ac.context_ngram_draft([5, 6, 7, 8, 9, 5, 6], 2).tolist() == [7, 8]
    # "6" alone last occurred before 9; the bigram "5 6" before 7: the longer one wins
    assert ac.context_ngram_draft([5, 6, 7, 1, 6, 9, 5, 6], 3).tolist() == [7, 1, 6]
    # the latest earlier occurrence: "1 2" is followed by 3 then by 4
    assert ac.context_ngram_draft([1, 2, 3, 1, 2, 4, 1, 2], 1).tolist() == [4]
    # a proposal may be shorter than gamma (the context ends)
    assert ac.context_ngram_draft([1, 2, 1], 5).tolist() == [2, 1]


def test_draft_proposes_nothing_without_a_match():
    for tokens, gamma in (([1, 2, 3], 4), ([7], 3), ([], 2), ([1, 2, 1], 0)):
        out = ac.context_ngram_draft(np.array(tokens, dtype=np.int64), gamma)
        assert out.dtype == np.int64 and out.shape == (0,)


def test_draft_bad_input():
    with pytest.raises(ValueError, match="tokens: expected integer tokens of shape"):
        ac.context_ngram_draft(np.ones((2, 3), dtype=int), 2)
    with pytest.raises(ValueError, match="tokens"):
        ac.context_ngram_draft([1.5, 2.0], 2)
    with pytest.raises(ValueError, match="gamma"):
        ac.context_ngram_draft([1, 2], -1)
    with pytest.raises(ValueError, match="max_n"):
        ac.context_ngram_draft([1, 2], 2, max_n=0)


# --- lm_decode ------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_lm_decode_in_chunks_equals_lm_logits(backend):
    m = llama(backend)
    ids = np.random.default_rng(0).integers(0, 50, size=(2, 13))
    full = ac.lm_logits(m, ids)
    caches = [ac.KVCache.for_layer(b.attn, 13, (2,)) for b in m.blocks]
    parts = [ac.lm_decode(m, ids[:, a:b], caches) for a, b in ((0, 5), (5, 6), (6, 13))]
    got = np.concatenate([np.asarray(p) for p in parts], axis=1)
    assert np.abs(got - np.asarray(full)).max() < 1e-10
    assert [len(c) for c in caches] == [13, 13]


def test_lm_decode_through_int8_caches_is_close_not_equal():
    m = llama()
    ids = np.random.default_rng(1).integers(0, 50, size=20)
    full = ac.lm_logits(m, ids)
    caches = [ac.Int8KVCache.for_layer(b.attn, 20) for b in m.blocks]
    assert caches[0].batch_shape == (2,) and caches[0].d_k == 4
    got = ac.lm_decode(m, ids, caches)
    err = np.abs(got - full).max()
    assert 0 < err < 1e-2


def test_int8_for_layer_follows_the_parameters():
    m = llama("torch", np.float32)
    c = ac.Int8KVCache.for_layer(m.blocks[0].attn, 8, (3,), key_scale="channel",
                                 group_size=4)
    assert (c.batch_shape, c.d_k, c.capacity, c.key_scale, c.group_size) == \
        ((3, 2), 4, 8, "channel", 4)
    assert c.dtype == torch.float32
    with pytest.raises(TypeError, match="params: expected a MultiHeadParams"):
        ac.Int8KVCache.for_layer(m.blocks[0], 8)


def test_lm_decode_bad_caches_change_nothing():
    m = llama()
    ids = np.arange(6)
    caches = [ac.KVCache.for_layer(b.attn, 8) for b in m.blocks]
    ac.lm_decode(m, ids[:3], caches)
    with pytest.raises(ValueError, match="caches: expected a list of 2 caches"):
        ac.lm_decode(m, ids, caches[:1])
    with pytest.raises(TypeError, match="caches: expected KV caches"):
        ac.lm_decode(m, ids, [caches[0], "cache"])
    with pytest.raises(ValueError, match=r"caches\[0\]: cache: cannot append 6"):
        ac.lm_decode(m, ids, caches)
    with pytest.raises(ValueError, match=r"caches\[0\]: cache: expected batch_shape"):
        ac.lm_decode(m, ids[None, :2], caches)
    with pytest.raises(ValueError, match="ids: expected ids in"):
        ac.lm_decode(m, [3, 50], caches)
    assert [len(c) for c in caches] == [3, 3]
    other = ac.KVCache.for_layer(m.blocks[1].attn, 8)
    with pytest.raises(ValueError, match="same number of positions"):
        ac.lm_decode(m, ids[:1], [caches[0], other])
    with pytest.raises(ValueError, match="max_len=64"):
        ac.lm_decode(m, np.zeros(62, dtype=int), caches)
    assert [len(c) for c in caches] == [3, 3]


# --- speculative_decode -----------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("gamma", [0, 1, 4])
def test_greedy_speculative_decoding_is_greedy_decoding(backend, gamma):
    m = llama(backend)
    greedy = ac.generate(m, PROMPT, 30, temperature=0)
    run = ac.speculative_decode(m, PROMPT, 30, draft=ac.context_ngram_draft, gamma=gamma)
    assert run.tokens.dtype == np.int64
    np.testing.assert_array_equal(run.tokens, greedy)
    assert len(run.accepted) == run.target_calls == len(run.proposed)
    assert all(0 <= a <= p <= gamma for a, p in zip(run.accepted, run.proposed))
    assert sum(run.accepted) + run.target_calls == 30
    if gamma == 0:
        assert run.target_calls == 30 and np.isnan(run.acceptance_rate)
    else:
        assert run.target_calls < 30 and 0 < run.acceptance_rate <= 1
        assert run.tokens_per_call == pytest.approx(30 / run.target_calls)


def test_a_draft_that_is_always_right_needs_few_target_calls():
    m = llama()
    greedy = ac.generate(m, PROMPT, 24, temperature=0)

    def oracle(tokens, k):                # the greedy continuation itself
        return greedy[len(tokens):len(tokens) + k]

    run = ac.speculative_decode(m, PROMPT, 24, draft=oracle, gamma=5)
    np.testing.assert_array_equal(run.tokens, greedy)
    assert run.acceptance_rate == 1.0 and run.target_calls == 4    # 24 = 4 rounds of 6


def test_stops_after_eos():
    m = llama()
    greedy = ac.generate(m, PROMPT, 30, temperature=0)
    eos = int(greedy[len(PROMPT) + 7])
    first = len(PROMPT) + int(np.argmax(greedy[len(PROMPT):] == eos))
    run = ac.speculative_decode(m, PROMPT, 30, draft=ac.context_ngram_draft, eos_id=eos)
    np.testing.assert_array_equal(run.tokens, greedy[:first + 1])


def test_sampling_is_reproducible_with_a_seed_on_either_library():
    m = llama()
    runs = [ac.speculative_decode(m, PROMPT, 20, draft=ac.context_ngram_draft,
                                  temperature=1.0, generator=np.random.default_rng(3))
            for _ in range(2)]
    np.testing.assert_array_equal(runs[0].tokens, runs[1].tokens)
    t = ac.speculative_decode(m, PROMPT, 20, draft=ac.context_ngram_draft, temperature=1.0,
                              generator=torch.Generator().manual_seed(3))
    assert t.tokens.shape == (30,) and t.tokens.max() < 50


def test_speculative_decode_bad_input():
    m = llama()
    draft = ac.context_ngram_draft
    with pytest.raises(ValueError, match="prompt_ids: expected one sequence"):
        ac.speculative_decode(m, PROMPT[None], 4, draft=draft)
    with pytest.raises(ValueError, match="prompt_ids: expected ids in"):
        ac.speculative_decode(m, [1, 99], 4, draft=draft)
    with pytest.raises(ValueError, match="n_new: expected n0 \\+ n_new <= max_len=64"):
        ac.speculative_decode(m, PROMPT, 60, draft=draft)
    with pytest.raises(ValueError, match="gamma"):
        ac.speculative_decode(m, PROMPT, 4, draft=draft, gamma=-1)
    with pytest.raises(ValueError, match="temperature"):
        ac.speculative_decode(m, PROMPT, 4, draft=draft, temperature=-0.5)
    with pytest.raises(ValueError, match="eos_id: expected None or a token in"):
        ac.speculative_decode(m, PROMPT, 4, draft=draft, eos_id=50)
    with pytest.raises(TypeError, match="draft: expected a function"):
        ac.speculative_decode(m, PROMPT, 4, draft=[1, 2])
    with pytest.raises(TypeError, match="generator: expected a numpy.random.Generator"):
        ac.speculative_decode(m, PROMPT, 4, draft=draft, generator=3)
    with pytest.raises(ValueError, match="draft: expected at most k=2 proposed tokens"):
        ac.speculative_decode(m, PROMPT, 4, draft=lambda t, k: [1] * (k + 1), gamma=2)
    with pytest.raises(ValueError, match="draft: expected tokens in \\[0, 50\\)"):
        ac.speculative_decode(m, PROMPT, 4, draft=lambda t, k: [50] * k, gamma=2)
    with pytest.raises(TypeError, match="model: expected a LanguageModel"):
        ac.speculative_decode("model", PROMPT, 4, draft=draft)


def test_counts_stop_at_eos_inside_a_round():
    # An oracle draft (rounds of 6 tokens) and an end-of-sequence token that is the first
    # drafted token of the third round: the 5 tokens after it are neither emitted nor
    # counted as kept (tokens_per_call counted them: 18/3 instead of 13/3).
    m = llama()
    n0 = len(PROMPT)
    greedy = ac.generate(m, PROMPT, 24, temperature=0)
    new = greedy[n0:]
    j = int(np.argmax(new != new[0]))            # the first occurrence of a second token
    assert j == 12
    eos = int(new[j])

    def oracle(tokens, k):
        return greedy[len(tokens):len(tokens) + k]

    run = ac.speculative_decode(m, PROMPT, 24, draft=oracle, gamma=5, eos_id=eos)
    np.testing.assert_array_equal(run.tokens, greedy[:n0 + j + 1])
    assert run.target_calls == 3
    assert run.proposed == [5, 5, 5] and run.accepted == [5, 5, 1]
    assert run.emitted == [6, 6, 1]
    assert run.tokens_per_call == pytest.approx(13 / 3)
    assert run.acceptance_rate == pytest.approx(11 / 15)     # 4 proposed, not kept


def test_tokens_per_call_counts_the_kept_tokens_with_a_context_draft():
    # eos emitted by the target itself or inside an accepted run: either way the count is
    # the new tokens kept over the passes
    m = llama()
    greedy = ac.generate(m, PROMPT, 30, temperature=0)
    for eos in {int(t) for t in greedy[len(PROMPT):]}:
        run = ac.speculative_decode(m, PROMPT, 30, draft=ac.context_ngram_draft,
                                    eos_id=eos)
        new = len(run.tokens) - len(PROMPT)
        assert sum(run.emitted) == new
        assert run.tokens_per_call == pytest.approx(new / run.target_calls)
        assert all(e in (a, a + 1) for e, a in zip(run.emitted, run.accepted))
        assert all(0 <= a <= p for a, p in zip(run.accepted, run.proposed))
