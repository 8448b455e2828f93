"""Speculative sampling: the rejection rule emits tokens distributed as the target's.

The Monte Carlo check: sequences of three tokens from a 4-token Markov chain (the target)
are drawn by speculative sampling with another chain as the draft; their 64 counts are
compared with the target's own probabilities by Pearson's chi-square test. The seed is
fixed, so the test is deterministic; with a correct sampler the p-value is uniform on
(0, 1) over seeds and the test asks p > 0.001, which a wrong sampler (the draft's
tokens accepted as they come, or the residual drawn from p instead of max(0, p - q))
fails by many orders of magnitude (checked below).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attncore as ac
from attncore.lab.serving import (
    CharNgram,
    SHIPPED_TEXT,
    chi_square_test,
    counts_of,
    pooled_cells,
    markov_sequences,
    speculative_generate,
)

V = 4
_r = np.random.default_rng(1)
TARGET = _r.dirichlet(np.ones(V), size=V)
DRAFT = _r.dirichlet(np.ones(V), size=V)


def chain_probabilities(length):
    p = np.ones(1)
    prev = np.zeros(1, dtype=int)                      # start token 0
    for _ in range(length):
        p = (p[:, None] * TARGET[prev]).ravel()
        prev = np.tile(np.arange(V), len(prev))
    return p


def test_chain_probabilities_order_matches_counts_of():
    seqs = np.array([[1, 2, 3]])
    codes = counts_of(seqs, V)
    assert codes[1 * 16 + 2 * 4 + 3] == 1
    p = chain_probabilities(3)
    assert np.isclose(p[1 * 16 + 2 * 4 + 3], TARGET[0, 1] * TARGET[1, 2] * TARGET[2, 3])


@pytest.mark.parametrize("gamma", [1, 3])
def test_monte_carlo_speculative_samples_follow_the_target(gamma):
    seqs = markov_sequences(TARGET, DRAFT, start=0, length=3, count=5000, gamma=gamma,
                            rng=np.random.default_rng(2))
    counts = counts_of(seqs, V)
    p = chain_probabilities(3)
    assert chi_square_test(counts, p)[1] > 1e-3
    # and not the draft's distribution
    q = np.ones(1)
    prev = np.zeros(1, dtype=int)
    for _ in range(3):
        q = (q[:, None] * DRAFT[prev]).ravel()
        prev = np.tile(np.arange(V), len(prev))
    assert chi_square_test(counts, q)[1] < 1e-12


def test_the_test_catches_a_sampler_that_skips_the_residual(monkeypatch):
    import attncore.speculative as spec

    def wrong(p_target, p_draft, draft_tokens, *, generator):     # residual from p
        out = []
        for i, x in enumerate(draft_tokens):
            if generator.random() * p_draft[i, x] < p_target[i, x]:
                out.append(int(x))
                continue
            out.append(spec._draw(generator.random(), p_target[i]))
            return np.array(out)
        out.append(spec._draw(generator.random(), p_target[-1]))
        return np.array(out)

    monkeypatch.setattr("attncore.lab.serving.speculative_accept", wrong)
    seqs = markov_sequences(TARGET, DRAFT, start=0, length=3, count=5000, gamma=2,
                            rng=np.random.default_rng(2))
    counts = counts_of(seqs, V)
    assert chi_square_test(counts, chain_probabilities(3))[1] < 1e-6


def test_expected_tokens_per_call_with_constant_acceptance():
    # context-free target and draft: each draft token is accepted with the same
    # probability a = sum(min(p, q)), so tokens per call = (1 - a^(g+1)) / (1 - a)
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    a = np.minimum(p, q).sum()
    gamma = 4
    run = speculative_generate(lambda s: p, lambda s: q, [0], 6000, gamma=gamma,
                               rng=np.random.default_rng(6))
    emitted = np.array(run.accepted) + 1
    want = (1 - a ** (gamma + 1)) / (1 - a)
    # 4 standard errors of the mean of the emitted counts
    assert abs(emitted.mean() - want) < 4 * emitted.std() / np.sqrt(len(emitted))


def test_numpy_and_torch_give_the_same_tokens():
    rng = np.random.default_rng(0)
    pt, pd = rng.dirichlet(np.ones(5), size=4), rng.dirichlet(np.ones(5), size=3)
    tokens = np.array([1, 3, 0])
    for seed in range(20):
        a = ac.speculative_accept(pt, pd, tokens, generator=np.random.default_rng(seed))
        g = torch.Generator().manual_seed(seed)
        b = ac.speculative_accept(torch.tensor(pt), torch.tensor(pd), torch.tensor(tokens),
                                  generator=g)
        assert len(a) >= 1 and b.dtype == torch.int64
        # the two generators give different uniforms; the torch path is deterministic
        g2 = torch.Generator().manual_seed(seed)
        c = ac.speculative_accept(torch.tensor(pt), torch.tensor(pd), torch.tensor(tokens),
                                  generator=g2)
        assert torch.equal(b, c)


def test_accepted_prefix_then_one_token():
    p = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    q = np.array([[0.0, 1.0], [1.0, 0.0]])
    out = ac.speculative_accept(p, q, np.array([1, 0]), generator=np.random.default_rng(0))
    assert out[:2].tolist() == [1, 0] and len(out) == 3          # both accepted, bonus
    q = np.array([[1.0, 0.0], [1.0, 0.0]])                       # token 0 has p = 0
    out = ac.speculative_accept(p, q, np.array([0, 0]), generator=np.random.default_rng(0))
    assert out.tolist() == [1]                                   # rejected, residual = [0, 1]


def test_gamma_zero_samples_the_target():
    p = np.array([[0.0, 0.0, 1.0]])
    out = ac.speculative_accept(p, np.zeros((0, 3)), np.zeros(0, np.int64),
                                generator=np.random.default_rng(0))
    assert out.tolist() == [2]


@pytest.mark.parametrize("pt, pd, tok, gen, exc, words", [
    (np.full((3, 2), 0.5), np.full((2, 2), 0.5), np.array([0, 1]), None, TypeError,
     "generator: expected a numpy.random.Generator"),
    (np.full((3, 2), 0.5), np.full((2, 2), 0.5), np.array([0.0, 1.0]), "np", TypeError,
     "draft_tokens: expected an integer"),
    (np.full((3, 2), 0.5), np.full((3, 2), 0.5), np.array([0, 1]), "np", ValueError,
     r"p_draft: expected shape \(gamma, vocab\) = \(2, 2\)"),
    (np.full((3, 2), 0.5), np.full((2, 2), 0.5), np.array([0]), "np", ValueError,
     "draft_tokens: expected shape"),
    (np.full((3, 2), 0.6), np.full((2, 2), 0.5), np.array([0, 1]), "np", ValueError,
     "p_target: expected each row to sum to 1"),
    (np.array([[1.5, -0.5]] * 3), np.full((2, 2), 0.5), np.array([0, 1]), "np", ValueError,
     "p_target: expected probabilities >= 0"),
    (np.full((3, 2), 0.5), np.full((2, 2), 0.5), np.array([0, 2]), "np", ValueError,
     r"draft_tokens: expected tokens in \[0, vocab=2\)"),
    (np.full((3, 2), 0.5), np.array([[1.0, 0.0]] * 2), np.array([0, 1]), "np", ValueError,
     "draft probability"),
    (np.full((3, 2), 0.5), np.full((2, 2), np.nan), np.array([0, 1]), "np", ValueError,
     "p_draft: expected finite"),
    (np.full((3, 2), 0.5), np.full((2, 2), 0.5, np.float32), np.array([0, 1]), "np", None,
     None),
])
def test_bad_input_is_named(pt, pd, tok, gen, exc, words):
    generator = np.random.default_rng(0) if gen == "np" else gen
    if exc is None:
        ac.speculative_accept(pt, pd, tok, generator=generator)
        return
    with pytest.raises(exc, match=words):
        ac.speculative_accept(pt, pd, tok, generator=generator)


def test_torch_needs_a_torch_generator():
    with pytest.raises(TypeError, match="generator: expected a torch.Generator"):
        ac.speculative_accept(torch.full((2, 2), 0.5), torch.full((1, 2), 0.5),
                              torch.tensor([0]), generator=np.random.default_rng(0))


def test_ngram_models_speculate_and_stay_reproducible():
    target, draft = CharNgram(SHIPPED_TEXT, 4), CharNgram(SHIPPED_TEXT, 2)
    a = speculative_generate(target, draft, target.encode("the "), 60, gamma=3,
                             rng=np.random.default_rng(0))
    b = speculative_generate(target, draft, target.encode("the "), 60, gamma=3,
                             rng=np.random.default_rng(0))
    assert a == b and len(a.tokens) == 60 and a.target_calls < 60
    assert np.isclose(target([0, 1, 2]).sum(), 1.0)


def test_chi_square_test_agrees_with_the_textbook_values():
    # df = 1: P(chi2 > 3.841) = 0.05; df = 63: P(chi2 > 63) is close to 1/2
    counts = np.array([60, 40])
    stat, p = chi_square_test(counts, np.array([0.5, 0.5]))
    assert stat == 4.0 and abs(p - 0.0455) < 1e-4
    with pytest.raises(ValueError, match="probabilities"):
        chi_square_test(counts, np.array([1.0, 0.0]))


# --- the row-sum rule, from both dtypes (issue 37) ----------------------------------------

def test_a_bfloat16_row_far_from_one_is_refused():
    # 64 eps of bfloat16 is 0.5: a row summing to 1.45 used to be taken as it was
    pt = torch.tensor([[0.95, 0.5], [0.5, 0.5]], dtype=torch.bfloat16)
    pd = torch.tensor([[0.5, 0.5]], dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="p_target: expected each row to sum to 1.*"
                                         "summing to 1.449"):
        ac.speculative_accept(pt, pd, torch.tensor([0]), generator=torch.Generator())


def test_a_correctly_rounded_float16_draft_beside_a_float64_target_is_taken():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((2, 2000)) * 2
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    pd = p[:1].astype(np.float16)                       # rounded to nearest, entry by entry
    assert abs(pd.astype(np.float64).sum() - 1) > 1e-6  # more than float64's rule allowed
    token = np.array([int(np.argmax(pd[0]))])
    for generator, lib in ((np.random.default_rng(0), np.asarray),
                           (torch.Generator(), torch.from_numpy)):
        out = ac.speculative_accept(lib(p), lib(pd), lib(token), generator=generator)
        assert 1 <= len(out) <= 2
    # and the other way round: the tolerance is the coarser dtype's, whichever holds it
    ac.speculative_accept(p.astype(np.float16), p[:1], token,
                          generator=np.random.default_rng(0))


def test_the_tolerance_is_stated_and_applied():
    from attncore.speculative import row_sum_tolerance

    eps16 = float(np.finfo(np.float16).eps)
    tol = row_sum_tolerance(np.float64, np.float16, vocab=2)
    assert tol == row_sum_tolerance(np.float16, np.float64, vocab=2) >= 2 * eps16
    assert row_sum_tolerance(np.float64, np.float64, vocab=2) == 1e-6
    assert row_sum_tolerance(torch.bfloat16, torch.float32, vocab=2) < 0.45
    # just inside is taken, just outside refused
    pt = np.array([[0.5, 0.5 + tol / 2], [0.5, 0.5]])
    ac.speculative_accept(pt, np.full((1, 2), 0.5, np.float16), np.array([0]),
                          generator=np.random.default_rng(0))
    pt[0, 1] = 0.5 + 2 * tol
    with pytest.raises(ValueError, match="p_target: expected each row to sum to 1"):
        ac.speculative_accept(pt, np.full((1, 2), 0.5, np.float16), np.array([0]),
                              generator=np.random.default_rng(0))


def test_a_huge_unsigned_token_is_reported_as_it_is():
    pt, pd = np.full((2, 3), 1 / 3), np.full((1, 3), 1 / 3)
    token = np.array([2**63 + 1], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"vocab=3\), got 9223372036854775809"):
        ac.speculative_accept(pt, pd, token, generator=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"got 9223372036854775809"):
        ac.speculative_accept(torch.from_numpy(pt), torch.from_numpy(pd),
                              torch.tensor([2**63 + 1], dtype=torch.uint64),
                              generator=torch.Generator())


def test_pooled_cells_merges_the_small_expected_counts_and_keeps_the_totals():
    counts = np.array([50, 30, 3, 2, 1, 0])
    p = np.array([0.5, 0.3, 0.08, 0.06, 0.04, 0.02])   # expected 43, 25.8, 6.9, 5.2, 3.4, 1.7
    c, q = pooled_cells(counts, p)                      # 3.4 + 1.7 = 5.2: enough
    assert c.tolist() == [50, 30, 3, 2, 1] and np.allclose(q, [0.5, 0.3, 0.08, 0.06, 0.06])
    c, q = pooled_cells(counts, p, min_expected=6.0)    # 5.2 is small too: 10.3
    assert c.tolist() == [50, 30, 3, 3] and np.isclose(q[-1], 0.12)
    assert pooled_cells(counts[:2], p[:2] / 0.8)[0].tolist() == [50, 30]   # nothing small
    assert c.sum() == counts.sum() and np.isclose(q.sum(), 1.0)
    with pytest.raises(ValueError, match="min_expected"):
        pooled_cells(np.array([1, 1]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="1-D"):
        pooled_cells(np.ones((2, 2)), np.full((2, 2), 0.25))
