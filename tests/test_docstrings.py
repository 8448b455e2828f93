"""The examples in attncore's docstrings run and print what they say (the API reference
page shows them)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["attncore._backend", "attncore._guard", "attncore.attention", "attncore.backward",
           "attncore.distributed", "attncore.linear_attention",
           "attncore.kvcache", "attncore.masks", "attncore.matmul_views", "attncore.multihead",
           "attncore.softmax", "attncore.online_softmax", "attncore.testing", "attncore.tiled",
           "attncore.paged", "attncore.quantized_cache", "attncore.mla",
           "attncore.speculative", "attncore.window_cache", "attncore.delta_rule",
           "attncore.sparse_attention", "attncore.layers"] + \
    [f"attncore.testing.{name}" for name in (
        "attention", "backward", "delta_step", "kv_cache", "merge", "multi_head",
        "paged_gather", "report", "rope", "runner", "softmax", "speculative_round",
        "window_mask")]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
