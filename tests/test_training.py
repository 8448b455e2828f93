"""attncore.lab.training: the induction data, the attention-only model, training, probes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from attncore.attention import scaled_dot_product_attention  # noqa: E402
from attncore.multihead import merge_heads, multi_head_attention, split_heads  # noqa: E402
from attncore.lab.training import (  # noqa: E402
    IGNORE_INDEX,
    AttentionOnlyModel,
    InductionConfig,
    ablate_heads,
    accuracy,
    evaluate,
    generate,
    head_attention,
    head_scores,
    induction_batch,
    induction_score,
    init_attention_only,
    learning_rate,
    previous_occurrence,
    previous_token_score,
    train_induction,
)

SMALL = InductionConfig(vocab_size=12, seq_len=10, min_repeat=2, max_repeat=4, d_model=8,
                        num_heads=2, num_layers=2, batch_size=8, steps=3)


# --------------------------------------------------------------------------------------------
# data


@st.composite
def task(draw):
    seq_len = draw(st.integers(4, 24))
    max_repeat = draw(st.integers(2, seq_len // 2))
    min_repeat = draw(st.integers(2, max_repeat))
    vocab_size = draw(st.integers(seq_len - min_repeat, seq_len + 10))
    return dict(seed=draw(st.integers(0, 2**32 - 1)), batch_size=draw(st.integers(1, 6)),
                seq_len=seq_len, vocab_size=vocab_size, min_repeat=min_repeat,
                max_repeat=max_repeat)


def _batch(t):
    return induction_batch(np.random.default_rng(t["seed"]), t["batch_size"], t["seq_len"],
                           t["vocab_size"], min_repeat=t["min_repeat"],
                           max_repeat=t["max_repeat"])


@settings(max_examples=60, deadline=None)
@given(task())
def test_induction_batch_structure(t):
    tokens, targets = _batch(t)
    shape = (t["batch_size"], t["seq_len"])
    assert tokens.shape == targets.shape == shape
    assert tokens.dtype == targets.dtype == np.int64
    assert tokens.min() >= 0 and tokens.max() < t["vocab_size"]
    for row, target in zip(tokens, targets):
        values, counts = np.unique(row, return_counts=True)
        assert counts.max() == 2                               # only the block repeats
        m = int((counts == 2).sum())
        assert t["min_repeat"] <= m <= t["max_repeat"]
        twice = np.flatnonzero(np.isin(row, values[counts == 2]))
        start = twice[0]
        # the repeated tokens form a block immediately followed by its copy
        np.testing.assert_array_equal(twice, np.arange(start, start + 2 * m))
        np.testing.assert_array_equal(row[start:start + m], row[start + m:start + 2 * m])
        labelled = np.flatnonzero(target != IGNORE_INDEX)
        np.testing.assert_array_equal(labelled, np.arange(start + m, start + 2 * m))


@settings(max_examples=60, deadline=None)
@given(task())
def test_targets_follow_the_previous_occurrence(t):
    tokens, targets = _batch(t)
    prev = previous_occurrence(tokens)
    for row in range(tokens.shape[0]):
        for i in range(tokens.shape[1]):
            if prev[row, i] < 0:
                assert targets[row, i] == IGNORE_INDEX
            else:
                assert targets[row, i] == tokens[row, prev[row, i] + 1]


def test_induction_batch_is_reproducible_and_varied():
    a = induction_batch(np.random.default_rng(3), 200, 20, 24)
    b = induction_batch(np.random.default_rng(3), 200, 20, 24)
    c = induction_batch(np.random.default_rng(4), 200, 20, 24)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    # block length and position both vary, so no fixed offset solves the task
    labelled = a[1] != IGNORE_INDEX
    lengths = labelled.sum(axis=1)
    first = labelled.argmax(axis=1)
    assert set(lengths.tolist()) == set(range(3, 9))
    assert len(set(first.tolist())) > 5


def test_induction_batch_pinned_example():
    tokens, targets = induction_batch(np.random.default_rng(6), 1, 20, 24)
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWX"))
    assert "".join(letters[tokens[0]]) == "UPFKOITHKOITHABRVXSD"
    assert "".join("." if t < 0 else letters[t] for t in targets[0]) == "........OITHK......."


@pytest.mark.parametrize("kwargs, match", [
    (dict(vocab_size=10), "vocab_size"),
    (dict(max_repeat=11), "max_repeat"),
    (dict(min_repeat=1), "min_repeat"),
    (dict(min_repeat=5, max_repeat=4), "max_repeat"),
    (dict(batch_size=0), "batch_size"),
    (dict(seq_len=2.5), "seq_len"),
])
def test_induction_batch_rejects_bad_arguments(kwargs, match):
    args = dict(batch_size=2, seq_len=20, vocab_size=24, min_repeat=3, max_repeat=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        induction_batch(np.random.default_rng(0), args.pop("batch_size"), args.pop("seq_len"),
                        args.pop("vocab_size"), **args)


def test_induction_batch_needs_a_generator():
    with pytest.raises(TypeError, match="rng"):
        induction_batch(0, 2, 20, 24)


def test_previous_occurrence():
    tokens = np.array([[5, 1, 5, 2, 1, 5], [0, 1, 2, 3, 4, 5]])
    expected = np.array([[-1, -1, 0, -1, 1, 2], [-1] * 6])
    np.testing.assert_array_equal(previous_occurrence(tokens), expected)
    with pytest.raises(ValueError, match="tokens"):
        previous_occurrence(np.array([0.5, 1.0]))


# --------------------------------------------------------------------------------------------
# config and model


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_heads=3), "num_heads"),
    (dict(lr=0.0), "lr"),
    (dict(lr=float("nan")), "lr"),
    (dict(steps=-1), "steps"),
    (dict(d_model=0), "d_model"),
    (dict(vocab_size=5), "vocab_size"),
    (dict(num_layers=True), "num_layers"),
    (dict(warmup_steps=-1), "warmup_steps"),
    (dict(embed_std=0.0), "embed_std"),
    (dict(embed_std=float("inf")), "embed_std"),
    (dict(lr=True), "lr"),
    (dict(n_kv_heads=0), "n_kv_heads"),
    (dict(n_kv_heads=True), "n_kv_heads"),
    (dict(num_heads=4, n_kv_heads=3), "n_kv_heads: expected a divisor of num_heads=4"),
])
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InductionConfig(**kwargs)


def test_model_shapes_and_parameter_count():
    c = SMALL
    model = init_attention_only(c)
    assert all(p.requires_grad and p.dtype == torch.float64 and p.device.type == "cpu"
               for p in model.parameters())
    d = c.d_model
    expected = c.vocab_size * d * 2 + c.seq_len * d + c.num_layers * (4 * d * d + 4 * d)
    assert model.num_parameters() == expected
    tokens, _ = induction_batch(np.random.default_rng(0), 3, c.seq_len, c.vocab_size,
                                min_repeat=c.min_repeat, max_repeat=c.max_repeat)
    with torch.no_grad():
        logits, weights = model.forward(torch.from_numpy(tokens), return_weights=True)
    assert logits.shape == (3, c.seq_len, c.vocab_size)
    assert len(weights) == c.num_layers
    for w in weights:
        assert w.shape == (3, c.num_heads, c.seq_len, c.seq_len)
        torch.testing.assert_close(w.sum(-1), torch.ones(3, c.num_heads, c.seq_len,
                                                         dtype=torch.float64))
        assert float(w.triu(1).abs().max()) == 0.0          # causal
    with torch.no_grad():
        torch.testing.assert_close(model.forward(tokens), logits)


def test_embeddings_are_drawn_with_embed_std():
    # the same standard-normal draws, scaled: changing embed_std changes nothing else
    small = init_attention_only(SMALL)
    unit = init_attention_only(InductionConfig(**{**SMALL.__dict__, "embed_std": 1.0}))
    torch.testing.assert_close(small.tok_emb, SMALL.embed_std * unit.tok_emb)
    torch.testing.assert_close(small.pos_emb, SMALL.embed_std * unit.pos_emb)
    assert torch.equal(small.unembed, unit.unembed)
    assert all(torch.equal(getattr(a, n), getattr(b, n)) for a, b in
               zip(small.layers, unit.layers) for n in ("w_q", "w_k", "w_v", "w_o"))


def test_learning_rate_warms_up_then_follows_a_cosine_to_zero():
    c = InductionConfig(steps=100, warmup_steps=10, lr=0.5)
    rates = [learning_rate(c, s) for s in range(c.steps)]
    np.testing.assert_allclose(rates[:10], 0.5 * np.arange(1, 11) / 10)
    assert rates[10] == 0.5 and max(rates) == 0.5
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))          # decays after warm-up
    assert math.isclose(rates[55], 0.25)                                # halfway down
    assert learning_rate(c, c.steps) == 0.0 and 0 < rates[-1] < 1e-3
    no_warmup = InductionConfig(steps=10, warmup_steps=0, lr=0.5)
    assert learning_rate(no_warmup, 0) == 0.5
    with pytest.raises(ValueError, match="step"):
        learning_rate(c, -1)


def test_model_is_causal():
    model = init_attention_only(SMALL)
    tokens = torch.arange(SMALL.seq_len)[None] % SMALL.vocab_size
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % SMALL.vocab_size
    a, b = model.forward(tokens), model.forward(changed)
    torch.testing.assert_close(a[:, :-1], b[:, :-1], rtol=0, atol=0)
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_init_is_seeded_by_numpy_only():
    torch.manual_seed(123)
    a = init_attention_only(SMALL)
    torch.manual_seed(456)
    b = init_attention_only(SMALL)
    c = init_attention_only(InductionConfig(**{**SMALL.__dict__, "seed": 1}))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.tok_emb, c.tok_emb)


@pytest.mark.parametrize("tokens, match", [
    (np.full((1, 11), 0, dtype=np.int64), "seq_len"),
    (np.full((1, 4), 12, dtype=np.int64), r"\[0, 12\)"),
    (np.full((1, 4), -1, dtype=np.int64), r"\[0, 12\)"),
    (np.zeros((4,), dtype=np.int64), "batch, n"),
    (np.zeros((1, 4), dtype=np.int32), "int64"),
])
def test_forward_rejects_bad_tokens(tokens, match):
    with pytest.raises(ValueError, match=match):
        init_attention_only(SMALL).forward(tokens)


# --------------------------------------------------------------------------------------------
# training


def test_short_training_reduces_the_loss():
    c = InductionConfig(vocab_size=12, seq_len=10, min_repeat=2, max_repeat=4, d_model=16,
                        num_heads=2, batch_size=32, steps=60, lr=3e-2)
    model, losses = train_induction(c)
    assert len(losses) == 60 and all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
    held_out = induction_batch(np.random.default_rng(99), 64, c.seq_len, c.vocab_size,
                               min_repeat=c.min_repeat, max_repeat=c.max_repeat)
    untrained = init_attention_only(c)
    assert evaluate(model, *held_out)[0] < evaluate(untrained, *held_out)[0]


def test_training_is_deterministic_and_restores_threads(torch_threads):
    threads = torch_threads
    torch.manual_seed(0)
    m1, l1 = train_induction(SMALL)
    torch.manual_seed(1)                      # torch's generator plays no part
    m2, l2 = train_induction(SMALL)
    m3, l3 = train_induction(SMALL, seed=1)
    assert torch.get_num_threads() == threads
    assert l1 == l2
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert l1 != l3


def test_train_overrides_and_zero_steps():
    model, losses = train_induction(SMALL, steps=0, num_layers=1)
    assert losses == [] and len(model.layers) == 1
    fresh = init_attention_only(InductionConfig(**{**SMALL.__dict__, "num_layers": 1}))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    with pytest.raises(TypeError):
        train_induction(SMALL, no_such_option=1)


def test_accuracy_matches_a_direct_count():
    c = SMALL
    model = init_attention_only(c)
    tokens, targets = induction_batch(np.random.default_rng(5), 16, c.seq_len, c.vocab_size,
                                      min_repeat=c.min_repeat, max_repeat=c.max_repeat)
    with torch.no_grad():
        pred = model.forward(torch.from_numpy(tokens)).argmax(-1).numpy()
    labelled = targets != IGNORE_INDEX
    assert accuracy(model, tokens, targets) == (pred == targets)[labelled].mean()
    # targets set to the model's own predictions: every labelled position is right
    oracle_targets = np.where(labelled, pred, IGNORE_INDEX)
    assert accuracy(model, tokens, oracle_targets) == 1.0
    with pytest.raises(ValueError, match="labelled"):
        evaluate(model, tokens, np.full_like(targets, IGNORE_INDEX))
    with pytest.raises(ValueError, match="same shape"):
        evaluate(model, tokens, targets[:, :-1])


# --------------------------------------------------------------------------------------------
# probes: attention patterns, scores, ablations


def test_head_attention_matches_forward():
    model = init_attention_only(SMALL)
    tokens, _ = induction_batch(np.random.default_rng(1), 1, SMALL.seq_len, SMALL.vocab_size,
                                min_repeat=2, max_repeat=4)
    w = head_attention(model, tokens[0])
    assert w.shape == (SMALL.num_layers, SMALL.num_heads, SMALL.seq_len, SMALL.seq_len)
    assert w.dtype == np.float64
    with torch.no_grad():
        _, weights = model.forward(torch.from_numpy(tokens), return_weights=True)
    np.testing.assert_array_equal(w, np.stack([x[0].numpy() for x in weights]))
    with pytest.raises(ValueError, match="tokens"):
        head_attention(model, tokens)


def test_scores_of_ideal_patterns():
    n = 6
    shift = np.eye(n, k=-1)
    shift[0, 0] = 1.0
    assert previous_token_score(shift) == 1.0
    assert previous_token_score(np.eye(n)) == 0.0
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    assert math.isclose(previous_token_score(uniform), np.mean(1 / np.arange(2, n + 1)))

    tokens = np.array([7, 3, 4, 9, 3, 4])       # 3 4 repeats: queries 4, 5 -> keys 2, 3
    ideal = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    ideal[4] = np.eye(n)[2]
    ideal[5] = np.eye(n)[3]
    assert induction_score(ideal, tokens) == 1.0
    assert induction_score(np.stack([ideal, np.eye(n)]), tokens).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="repeated"):
        induction_score(ideal, np.arange(n))
    with pytest.raises(ValueError, match="shapes"):
        induction_score(ideal, tokens[:-1])
    with pytest.raises(ValueError, match="weights"):
        previous_token_score(np.ones((3, 4)))


def test_head_scores_average_the_per_sequence_scores():
    model = init_attention_only(SMALL)
    tokens, _ = induction_batch(np.random.default_rng(3), 7, SMALL.seq_len, SMALL.vocab_size,
                                min_repeat=2, max_repeat=4)
    previous, induction = head_scores(model, tokens)
    assert previous.shape == induction.shape == (SMALL.num_layers, SMALL.num_heads)
    weights = [head_attention(model, row) for row in tokens]
    np.testing.assert_allclose(previous, np.mean([previous_token_score(w) for w in weights],
                                                 axis=0), rtol=0, atol=1e-15)
    np.testing.assert_allclose(induction, np.mean([induction_score(w, row) for w, row in
                                                   zip(weights, tokens)], axis=0),
                               rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="repeat"):
        head_scores(model, np.arange(SMALL.seq_len)[None] % SMALL.vocab_size)
    with pytest.raises(ValueError, match="tokens"):
        head_scores(model, tokens[0])


def test_ablating_a_head_removes_exactly_its_contribution():
    model = init_attention_only(SMALL)
    layer = model.layers[0]
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((2, 5, SMALL.d_model)))
    d = layer.d_head
    with torch.no_grad():
        q = split_heads(x @ layer.w_q + layer.b_q, layer.num_heads)
        k = split_heads(x @ layer.w_k + layer.b_k, layer.num_heads)
        v = split_heads(x @ layer.w_v + layer.b_v, layer.num_heads)
        heads = scaled_dot_product_attention(q, k, v, causal=True)
        full = multi_head_attention(layer, x, causal=True)
        for h in range(layer.num_heads):
            ablated = ablate_heads(model, [(0, h)]).layers[0]
            expected = full - heads[:, h] @ layer.w_o[h * d:(h + 1) * d]
            torch.testing.assert_close(multi_head_attention(ablated, x, causal=True), expected)
        # and the decomposition it relies on
        torch.testing.assert_close(merge_heads(heads) @ layer.w_o + layer.b_o, full)


def test_ablate_heads_copies_and_validates():
    model = init_attention_only(SMALL)
    before = [p.detach().clone() for p in model.parameters()]
    none = ablate_heads(model, [])
    every = ablate_heads(model, [(l, h) for l in range(2) for h in range(2)])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(not p.requires_grad for p in every.parameters())
    tokens = torch.from_numpy(induction_batch(np.random.default_rng(0), 2, SMALL.seq_len,
                                              SMALL.vocab_size, min_repeat=2,
                                              max_repeat=4)[0])
    with torch.no_grad():
        torch.testing.assert_close(none.forward(tokens), model.forward(tokens), rtol=0, atol=0)
        # with every head silenced only the embeddings and the output biases reach the logits
        h = model.tok_emb[tokens] + model.pos_emb[:SMALL.seq_len]
        h = h + sum(layer.b_o for layer in model.layers)
        torch.testing.assert_close(every.forward(tokens), h @ model.unembed)
    for bad in ([(2, 0)], [(0, 2)], [(0,)], [("0", 1)]):
        with pytest.raises(ValueError, match="heads"):
            ablate_heads(model, bad)


def test_model_container_type():
    assert isinstance(init_attention_only(SMALL), AttentionOnlyModel)


# --- the optimizer --------------------------------------------------------------------------

@pytest.mark.parametrize("foreach", [False, True])
def test_adam_written_out_equals_torch_adam_bit_for_bit(foreach):
    from attncore.lab.adam import Adam

    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 4), (5,), (2, 2, 2)]
    ours = [torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True)
            for s in shapes]
    theirs = [p.detach().clone().requires_grad_(True) for p in ours]
    opt_ours = Adam(ours, lr=0.05)
    opt_theirs = torch.optim.Adam(theirs, lr=0.05, foreach=foreach)
    targets = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    for step in range(6):
        lr = 0.05 / (1 + step)                      # the rate may change between steps
        opt_ours.lr = lr
        for group in opt_theirs.param_groups:
            group["lr"] = lr
        for params, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            # the last tensor gets no gradient in odd steps: both leave it alone
            used = params if step % 2 == 0 else params[:-1]
            sum(((p - t) ** 2 * (1 + k)).sum() for k, (p, t) in enumerate(zip(used, targets))
                ).backward()
            opt.step()
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b), f"step {step}: {(a - b).abs().max()}"
    assert all(p.grad is None for p in ours) is False
    opt_ours.zero_grad()
    assert all(p.grad is None for p in ours)
# --------------------------------------------------------------------------------------------
# grouped-query and multi-query layers (n_kv_heads)


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_model_with_n_kv_heads(n_kv_heads):
    c = InductionConfig(**{**SMALL.__dict__, "n_kv_heads": n_kv_heads})
    model = init_attention_only(c)
    d, d_head = c.d_model, c.d_model // c.num_heads
    d_kv = (n_kv_heads or c.num_heads) * d_head
    for layer in model.layers:
        assert layer.num_heads == c.num_heads
        assert layer.n_kv_heads == (n_kv_heads or c.num_heads)
        assert tuple(layer.w_k.shape) == tuple(layer.w_v.shape) == (d, d_kv)
    per_layer = 2 * (d * d + d) + 2 * (d * d_kv + d_kv)        # W_Q, W_O; W_K, W_V
    assert model.num_parameters() == c.vocab_size * d * 2 + c.seq_len * d \
        + c.num_layers * per_layer
    tokens = torch.from_numpy(induction_batch(
        np.random.default_rng(0), 3, c.seq_len, c.vocab_size, min_repeat=c.min_repeat,
        max_repeat=c.max_repeat)[0])
    with torch.no_grad():
        logits, weights = model.forward(tokens, return_weights=True)
    assert logits.shape == (3, c.seq_len, c.vocab_size)
    assert all(w.shape == (3, c.num_heads, c.seq_len, c.seq_len) for w in weights)
    # a head per query head even when they share keys and values: ablation still works
    ablated = ablate_heads(model, [(0, 1)])
    assert all(a.n_kv_heads == b.n_kv_heads for a, b in zip(ablated.layers, model.layers))


def test_training_with_shared_keys_and_values_is_seeded():
    m1, l1 = train_induction(SMALL, n_kv_heads=1)
    m2, l2 = train_induction(SMALL, n_kv_heads=1)
    _, l_mha = train_induction(SMALL)
    assert l1 == l2 and all(math.isfinite(x) for x in l1)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert l1 != l_mha


# --------------------------------------------------------------------------------------------
# generation, with and without the KV cache


@pytest.mark.parametrize("n_kv_heads", [None, 1])
@pytest.mark.parametrize("n0", [1, 4])
def test_generate_with_the_cache_equals_recomputing(n_kv_heads, n0, torch_threads):
    c = InductionConfig(**{**SMALL.__dict__, "n_kv_heads": n_kv_heads})
    model, _ = train_induction(c)
    prompt = np.random.default_rng(n0).integers(0, c.vocab_size, (5, n0))
    steps = c.seq_len - n0
    threads = torch_threads
    cached, logits_cached = generate(model, prompt, steps)
    assert torch.get_num_threads() == threads
    recomputed, logits_recomputed = generate(model, prompt, steps, use_cache=False)
    assert cached.dtype == np.int64 and cached.shape == (5, c.seq_len)
    assert logits_cached.dtype == np.float64
    assert logits_cached.shape == (5, steps, c.vocab_size)
    np.testing.assert_array_equal(cached[:, :n0], prompt)
    np.testing.assert_array_equal(cached, recomputed)
    np.testing.assert_allclose(logits_cached, logits_recomputed, rtol=0, atol=1e-12)
    # each new token is the arg-max of the logits it was chosen from, and those are the
    # model's logits at the last position of the sequence so far
    np.testing.assert_array_equal(cached[:, n0:], logits_cached.argmax(-1))
    with torch.no_grad():
        full = model.forward(torch.from_numpy(cached[:, :-1])).numpy()
    np.testing.assert_allclose(logits_cached, full[:, n0 - 1:], rtol=0, atol=1e-12)


def test_generate_zero_steps_returns_the_prompt():
    model = init_attention_only(SMALL)
    prompt = np.array([[1, 2, 3]])
    tokens, logits = generate(model, prompt, 0)
    np.testing.assert_array_equal(tokens, prompt)
    assert logits.shape == (1, 0, SMALL.vocab_size)


@pytest.mark.parametrize("prompt, steps, kwargs, match", [
    (np.array([1, 2]), 1, {}, "prompt: expected an integer array"),
    (np.zeros((1, 0), dtype=np.int64), 1, {}, "n0 >= 1"),
    (np.array([[0.0, 1.0]]), 1, {}, "prompt: expected an integer array"),
    (np.array([[True, False]]), 1, {}, "prompt: expected an integer array"),
    (np.array([[0, -1]]), 1, {}, r"prompt: expected tokens in \[0, 12\)"),
    (np.array([[0, 12]]), 1, {}, r"prompt: expected tokens in \[0, 12\)"),
    (np.array([[0, 1]]), -1, {}, "steps"),
    (np.array([[0, 1]]), 9, {}, "steps: expected n0 \\+ steps <= seq_len=10"),
    (np.array([[0, 1]]), 1, {"use_cache": 1}, "use_cache"),
])
def test_generate_rejects_bad_arguments(prompt, steps, kwargs, match):
    model = init_attention_only(SMALL)
    with pytest.raises((ValueError, TypeError), match=match):
        generate(model, prompt, steps, **kwargs)
    if kwargs or steps != 1:
        return
    with pytest.raises(ValueError, match=match):                   # on both paths
        generate(model, prompt, steps, use_cache=False)
