"""Chapter 11's checks of a learner's code: the pre-norm block (``check_block``) and the
training step over micro-batches (``check_train_step``). The references pass; broken
versions, kept here, fail the property that names their mistake; a function that raises,
returns the wrong thing or takes other arguments gets one sentence; no report shows the
reference's output values."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import attncore as ac
from attncore.lab.exercises.the_whole_transformer import (BLOCK_PROPERTIES, STEP_PROPERTIES,
                                                           _gpt2_variant, _input_values,
                                                           check_block, check_train_step)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="needs torch")


def block(x, params):
    p = params
    h = ac.layer_norm(x, p.ln1_weight, p.ln1_bias, eps=p.eps)
    x = x + ac.multi_head_attention(p.attn, h, causal=True)
    h = ac.layer_norm(x, p.ln2_weight, p.ln2_bias, eps=p.eps)
    return x + ac.feed_forward(h, p.w_ff1, p.b_ff1, p.w_ff2, p.b_ff2)


def post_norm(x, params):
    return _gpt2_variant(x, params, norm_first=False)


def no_mask(x, params):
    return _gpt2_variant(x, params, causal=False)


def relu(x, params):
    return _gpt2_variant(x, params, activation="relu")


def shared_norm(x, params):
    return _gpt2_variant(x, params, second_norm="ln1")


def no_residual(x, params):
    p = params
    h = ac.layer_norm(x, p.ln1_weight, p.ln1_bias, eps=p.eps)
    x = ac.multi_head_attention(p.attn, h, causal=True)
    h = ac.layer_norm(x, p.ln2_weight, p.ln2_bias, eps=p.eps)
    return x + ac.feed_forward(h, p.w_ff1, p.b_ff1, p.w_ff2, p.b_ff2)


def _details(report):
    """Every property's detail, on one line (the summary wraps them)."""
    return " ".join(r.detail for r in report.results)


def test_the_reference_block_passes():
    report = check_block(block)
    report.assert_passed()
    assert [r.name for r in report.results] == list(BLOCK_PROPERTIES)
    report = check_block(lambda x, p: ac.transformer_block(p, x, causal=True))
    report.assert_passed()


@pytest.mark.parametrize("fn, failed, words", [
    (post_norm, ["residual_stream", "whole_block"], "post-norm"),
    (no_mask, ["causal", "whole_block"], "no causal mask"),
    (relu, ["whole_block"], "ReLU"),
    (shared_norm, ["whole_block"], "first LayerNorm's gain and shift"),
    (no_residual, ["residual_stream", "whole_block"], "added to x"),
])
def test_a_broken_block_fails_the_property_that_names_it(fn, failed, words):
    report = check_block(fn)
    assert report.failed == failed
    assert words in _details(report)


@pytest.mark.parametrize("fn, words", [
    (lambda x, p: 1 / 0, "raised ZeroDivisionError"),
    (lambda x: x, "takes other arguments"),
    (lambda x, p: x.tolist(), "got list"),
    (lambda x, p: x[:-1], "expected shape"),
    (lambda x, p: x.astype(np.float64) if x.dtype == np.float32 else x, "dtype"),
    (lambda x, p: x * np.nan, "NaN"),
])
def test_a_function_that_returns_the_wrong_thing_gets_one_sentence(fn, words):
    report = check_block(fn)
    assert report.failed == ["output"]
    assert words in report["output"].detail
    assert "Traceback" not in str(report)
    assert all(r.status == "skipped" for r in report.results[1:])


def _shown_values(arrays):
    """The values of ``arrays`` as a report could print them (4 and 3 decimals)."""
    values = np.concatenate([np.ravel(a) for a in arrays])
    return {f"{v:.4f}" for v in values} | {f"{v:.3f}" for v in values if abs(v) > 0.01}


def test_no_report_shows_the_reference_output():
    shown = _shown_values(block(*_input_values()))
    for fn in (post_norm, no_mask, relu, no_residual):
        text = str(check_block(fn))
        assert not [v for v in shown if v in text]


def train_step(model, opt, x, y, micro_batches, *, zero_first=True, zero_each=False,
               scale=True, step_each=False):
    import torch.nn.functional as F

    if zero_first:
        opt.zero_grad()
    total = 0.0
    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        if zero_each:
            opt.zero_grad()
        logits = ac.lm_logits(model, xs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ys.reshape(-1))
        (loss / micro_batches if scale else loss).backward()
        if step_each:
            opt.step()
        total += loss.item() / micro_batches
    if not step_each:
        opt.step()
    return total


def test_the_reference_train_step_passes():
    report = check_train_step(train_step)
    report.assert_passed()
    assert [r.name for r in report.results] == list(STEP_PROPERTIES)


@pytest.mark.parametrize("flags, failed, words", [
    ({"zero_first": False}, ["one_step", "lowers_loss"], "no zero_grad"),
    ({"zero_each": True}, ["one_step"], "zero_grad before every micro-batch"),
    ({"scale": False}, ["one_step"], "not divided"),
    ({"step_each": True}, ["returns_loss", "one_step"], "a step after every micro-batch"),
])
def test_a_broken_train_step_fails_the_property_that_names_it(flags, failed, words):
    report = check_train_step(lambda *args: train_step(*args, **flags))
    assert report.failed == failed
    assert words in _details(report)


@pytest.mark.parametrize("fn, words", [
    (lambda m, o, x, y, k: 1 / 0, "raised ZeroDivisionError"),
    (lambda m, o, x, y: 0.0, "takes other arguments"),
])
def test_a_train_step_that_cannot_run_gets_one_sentence(fn, words):
    report = check_train_step(fn)
    assert report.failed == ["returns_loss"]
    assert words in report["returns_loss"].detail
    assert all(r.status == "skipped" for r in report.results[1:])


def test_a_train_step_returning_no_number_is_named():
    report = check_train_step(lambda *args: [train_step(*args)])
    assert "expected the loss as a number, got list" in report["returns_loss"].detail
