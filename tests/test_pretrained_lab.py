"""The instruments of the chapter on MiniLM: head measurements, query/key statistics,
ablation sweeps and the hand-written corpora."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attncore.lab.ablation import ablation_sweep
from attncore.lab.head_patterns import head_statistics, relation_accuracy, sequences
from attncore.lab.score_statistics import score_statistics
from attncore.lab.sentences import (DETERMINER_SENTENCES, RETRIEVAL_PAIRS,
                                    determiner_noun_pairs, words_of)
from attncore.pretrained import MiniLM


@pytest.fixture(scope="module")
def model():
    return MiniLM.load()


def shifted(n, offset):
    """Attention that puts all weight on token i + offset (clipped to the sequence)."""
    w = np.zeros((n, n))
    w[np.arange(n), np.clip(np.arange(n) + offset, 0, n - 1)] = 1.0
    return w


def test_head_statistics_on_known_patterns():
    # one layer, two sequences (lengths 5 and 3, padded to 5), three heads
    mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    att = np.zeros((2, 3, 5, 5))
    for b, n in enumerate([5, 3]):
        att[b, 0, :n, :n] = shifted(n, -1)          # previous token (row 0: itself)
        att[b, 1, :n, :n] = 1.0 / n                 # uniform
        att[b, 2, :n, :n] = shifted(n, -n)          # always the first token
    stats = head_statistics([att], mask)
    assert stats.previous.shape == (1, 3)
    assert stats.previous[0, 0] == 1.0
    assert stats.first[0, 2] == 1.0 and stats.next[0, 2] == 0.0
    assert stats.entropy[0, 0] == pytest.approx(0.0, abs=1e-12)
    uniform = (5 * math.log(5) + 3 * math.log(3)) / 8
    assert stats.entropy[0, 1] == pytest.approx(uniform)
    assert stats.uniform_entropy == pytest.approx(uniform)
    assert stats.last[0, 1] == pytest.approx((5 * 0.2 + 3 / 3) / 8)
    assert [s.shape for s in sequences([att], mask)] == [(1, 3, 5, 5), (1, 3, 3, 3)]


def test_relation_accuracy_and_its_positional_baseline():
    mask = np.ones((1, 6), dtype=bool)
    att = np.zeros((1, 2, 6, 6))
    att[0, 0] = shifted(6, 2)                         # always two tokens ahead
    att[0, 1] = shifted(6, 1)
    pairs = [(0, 1, 3), (0, 2, 4), (0, 1, 2)]         # offsets 2, 2, 1
    acc, baseline = relation_accuracy([att], mask, pairs)
    assert acc[0, 0] == pytest.approx(2 / 3) and acc[0, 1] == pytest.approx(1 / 3)
    assert baseline == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="pairs: expected word tokens"):
        relation_accuracy([att], mask, [(0, 0, 3)])
    with pytest.raises(ValueError, match="pairs: expected at least one"):
        relation_accuracy([att], mask, [])


def test_score_statistics_theorem_is_exact_for_all_pairs():
    rng = np.random.default_rng(3)
    mask = np.array([[True] * 7, [True] * 4 + [False] * 3])
    mix = rng.standard_normal((8, 8))                 # correlated components, nonzero means
    q = [(rng.standard_normal((2, 2, 7, 8)) @ mix + 0.7)]
    k = [(rng.standard_normal((2, 2, 7, 8)) @ mix.T - 0.3)]
    stats = score_statistics(q, k, mask)
    assert stats.tokens == 11
    assert np.abs(stats.independent_pairs - stats.predicted_independent).max() < 1e-12
    # correlated components: the component-wise formula is not the exact one
    assert np.abs(stats.predicted_diagonal - stats.predicted_independent).max() > 0.01
    assert np.all(stats.dims_q < 8)


def test_score_statistics_formulas_agree_when_the_assumptions_hold():
    # many tokens of independent, uncorrelated, zero-mean components with variances s^2
    rng = np.random.default_rng(4)
    s_q, s_k = np.linspace(0.5, 1.5, 16), np.linspace(2.0, 1.0, 16)
    q = [rng.standard_normal((1, 1, 3_000, 16)) * s_q]
    k = [rng.standard_normal((1, 1, 3_000, 16)) * s_k]
    stats = score_statistics(q, k, np.ones((1, 3_000), dtype=bool))
    predicted = math.sqrt(np.sum(s_q ** 2 * s_k ** 2) / 16)
    for name in ("predicted_zero_mean", "predicted_diagonal", "predicted_independent",
                 "measured"):
        assert getattr(stats, name)[0, 0] == pytest.approx(predicted, rel=0.05), name
    assert stats.corr_q[0, 0] < 2 * stats.corr_noise


def test_the_corpora_are_one_token_per_word(model):
    batch = model.tokenize([s for s, _ in DETERMINER_SENTENCES])
    pairs = determiner_noun_pairs(batch.tokens)
    assert len(pairs) == sum(len(a) for _, a in DETERMINER_SENTENCES)
    determiners = {"the", "a", "an", "my", "his", "her", "our", "their"}
    offsets = set()
    for s, d, n in pairs:
        assert batch.tokens[s][d] in determiners and d < n
        offsets.add(n - d)
    assert offsets >= {1, 2, 3, 4}                  # no fixed offset finds every noun
    assert len(RETRIEVAL_PAIRS) == 12
    with pytest.raises(ValueError, match="tokens"):
        determiner_noun_pairs(batch.tokens[:3])
    assert words_of("A dog, barking.") == ["a", "dog", ",", "barking", "."]


def test_ablation_sweep_equals_encode_with_ablate(model):
    texts = ["A dog barks.", "Cats sleep all day long.", "Paris is in France."]
    groups = [[(0, 3)], [(5, 11)], [(2, h) for h in range(12)], [(1, 0), (4, 7)]]
    swept = ablation_sweep(model, texts, groups)
    assert swept.shape == (4, 3, 384)
    for group, got in zip(groups, swept):
        assert np.abs(got - model.encode(texts, ablate=group)).max() < 1e-6
    with pytest.raises(ValueError, match="groups"):
        ablation_sweep(model, texts, [[]])
    with pytest.raises(ValueError, match="ablate"):
        ablation_sweep(model, texts, [[(9, 0)]])
