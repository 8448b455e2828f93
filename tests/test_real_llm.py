"""attncore.lab.real_llm: the measurements of chapter 13 on hand-made maps, and the float64
attention maps on a tiny Llama file (tests/tiny_gguf.py) against the model's own float32
weights. (The chapter itself, run under nbval, checks them on SmolLM2.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install gguf)")
torch = pytest.importorskip("torch")

import attncore as ac  # noqa: E402
from attncore.lab import real_llm as R  # noqa: E402
from attncore.pretrained import SmolLM2  # noqa: E402
from tiny_gguf import write_tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return SmolLM2.load(write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))


def test_maps_are_the_models_weights_in_float64(tiny):
    ids = [np.array([5, 9, 40, 7, 7, 3]), np.array([1, 2])]
    maps = R.attention_maps(tiny, ids)
    assert [m.shape for m in maps] == [(2, 4, 6, 6), (2, 4, 2, 2)]
    assert all(m.dtype == np.float64 for m in maps)
    np.testing.assert_allclose(maps[0], tiny.attention_weights(ids[0]).numpy(), atol=1e-5)
    np.testing.assert_allclose(maps[0].sum(-1), 1, rtol=1e-12)
    assert np.triu(maps[0], 1).max() == 0
    before = tiny.model.blocks[0].attn.w_q.clone()
    R.attention_maps(tiny.to("numpy"), ids[:1])
    assert torch.equal(tiny.model.blocks[0].attn.w_q, before)       # nothing changed


def test_bad_sequences_are_refused_by_name(tiny):
    with pytest.raises(TypeError, match="sequences: expected a non-empty list"):
        R.attention_maps(tiny, np.array([1, 2]))
    with pytest.raises(ValueError, match=r"sequences\[1\]: expected ids in"):
        R.attention_maps(tiny, [np.array([1]), np.array([10**6])])
    with pytest.raises(ValueError, match=r"sequences\[0\]: expected a non-empty 1-D"):
        R.attention_maps(tiny, [np.array([[1, 2]])])


def test_sink_previous_and_roles_on_hand_made_maps():
    n = 6
    sink = np.zeros((n, n))
    sink[:, 0] = 1
    previous = np.eye(n, k=-1)
    previous[0, 0] = 1
    maps = np.stack([sink, previous])[None]                     # (1 layer, 2 heads, n, n)
    np.testing.assert_allclose(R.sink_weight(maps), [[1, 0.2]])  # query 1's previous is 0
    np.testing.assert_allclose(R.previous_token_weight(maps), [[0, 1]])
    scores = R.HeadScores(R.sink_weight(maps), R.previous_token_weight(maps),
                          np.array([[0.0, 0.5]]))
    assert R.head_roles(scores).tolist() == [["attention sink", "induction head"]]
    scores = R.HeadScores(scores.sink, scores.previous, np.zeros((1, 2)))
    assert R.head_roles(scores).tolist() == [["attention sink", "previous-token head"]]
    with pytest.raises(ValueError, match="maps: expected shape"):
        R.sink_weight(np.zeros((3, 4)))


def test_interleaved_rope_is_rope_on_the_reordered_features():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8))
    pos = np.arange(5)
    sigma = np.r_[0:8:2, 1:8:2]
    back = np.argsort(sigma)
    np.testing.assert_allclose(R.rope_interleaved(x, pos, base=100.0),
                               ac.rope(x[:, sigma], pos, base=100.0)[:, back], atol=1e-12)
    with pytest.raises(ValueError, match="x, positions"):
        R.rope_interleaved(np.zeros((5, 7)), pos)


def test_repeated_random_tokens_are_plain_words_twice(tiny):
    with pytest.raises(ValueError, match="length: expected an integer >= 2"):
        R.repeated_random_tokens(tiny, 1)
    words = R._plain_words(tiny)
    assert [tiny.tokens([w])[0] for w in words] == ["Ġthe"]
