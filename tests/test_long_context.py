"""attncore.lab.long_context: the shipped passage and next-token losses (its
``layer_heads`` is tested with the real model, in test_smollm2.py)."""

from __future__ import annotations

import numpy as np
import pytest

from attncore.lab import long_context

torch = pytest.importorskip("torch")


def test_the_passage_is_the_execution_model_section():
    text = long_context.execution_model_text()
    assert text.startswith("A Python program is constructed from code blocks.")
    assert 5000 < len(text) < 10000 and "Exceptions\n====" not in text


def test_token_losses_are_the_negative_log_likelihoods():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 11))
    ids = rng.integers(0, 11, 6)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    want = -np.log(p[np.arange(5), ids[1:]])
    np.testing.assert_allclose(long_context.token_losses(logits, ids), want, rtol=1e-12)
    np.testing.assert_allclose(long_context.token_losses(torch.from_numpy(logits), ids),
                               want, rtol=1e-12)
    with pytest.raises(ValueError, match="logits, ids: expected shapes"):
        long_context.token_losses(logits, ids[:3])

