"""check_gather_pages: the reference is accepted, each broken reading of a paged cache is
rejected for the property it breaks, a function that misbehaves gets one sentence, and the
report never shows the keys a right function returns."""

from __future__ import annotations

import numpy as np
import pytest

from attncore.testing import check_gather_pages
from attncore.testing.paged_gather import PROPERTIES


def reference(key_blocks, block_table, length):
    d = key_blocks.shape[-1]
    return key_blocks[np.asarray(block_table, dtype=int)].reshape(-1, d)[:length]


def loop(key_blocks, block_table, length):              # right, one position at a time
    b = key_blocks.shape[1]
    out = np.empty((length, key_blocks.shape[-1]), key_blocks.dtype)
    for j in range(length):
        out[j] = key_blocks[block_table[j // b], j % b]
    return out


# --- broken implementations: the mistakes a learner makes -----------------------------------

def blocks_in_pool_order(key_blocks, block_table, length):
    # ignores the table: reads the first len(table) blocks of the pool
    d = key_blocks.shape[-1]
    return key_blocks[:len(block_table)].reshape(-1, d)[:length]


def every_reserved_slot(key_blocks, block_table, length):
    # returns the whole last block, past the sequence's length
    d = key_blocks.shape[-1]
    return key_blocks[np.asarray(block_table, dtype=int)].reshape(-1, d)


def slot_and_block_swapped(key_blocks, block_table, length):
    # position j read from block table[j % n], slot j // n
    n = len(block_table)
    out = np.empty((length, key_blocks.shape[-1]), key_blocks.dtype)
    for j in range(length):
        out[j] = key_blocks[block_table[j % n], j // n]
    return out


def stacked_rows(key_blocks, block_table, length):
    # right for length >= 1; np.stack of no rows raises
    b = key_blocks.shape[1]
    return np.stack([key_blocks[block_table[j // b], j % b] for j in range(length)])


def promoted_to_float64(key_blocks, block_table, length):
    return reference(key_blocks, block_table, length).astype(np.float64)


def zeroes_the_pool(key_blocks, block_table, length):
    out = reference(key_blocks, block_table, length).copy()
    key_blocks[...] = 0
    return out


@pytest.mark.parametrize("fn", [reference, loop])
def test_right_functions_pass(fn):
    report = check_gather_pages(fn)
    assert report.passed, report.summary()
    assert [r.name for r in report.results] == list(PROPERTIES)


@pytest.mark.parametrize("fn, broken", [
    (blocks_in_pool_order, {"blocks_out_of_order", "shared_pool", "partial_last_block"}),
    (every_reserved_slot, {"output_shape", "partial_last_block"}),
    (slot_and_block_swapped, {"matches_contiguous_cache", "blocks_out_of_order",
                              "block_sizes"}),
    (stacked_rows, {"empty_sequence"}),
    (promoted_to_float64, {"float32"}),
    (zeroes_the_pool, {"inputs_unchanged"}),
])
def test_broken_functions_fail_the_property_they_break(fn, broken):
    report = check_gather_pages(fn)
    assert broken <= set(report.failed), report.summary()
    if fn in (stacked_rows, promoted_to_float64, zeroes_the_pool):
        assert set(report.failed) == broken, report.summary()


def test_messages_are_one_sentence_without_a_traceback():
    def raises(key_blocks, block_table, length):
        raise RuntimeError("my bug")

    cases = {
        raises: "the function raised RuntimeError: my bug",
        (lambda key_blocks, block_table: key_blocks): "takes other arguments",
        (lambda *a: None): "got None (does the function end with a return",
        (lambda *a: [[0.0]]): "expected a NumPy array",
        (lambda k, t, n: np.zeros((n + 1, k.shape[-1]), k.dtype)): "expected shape",
        (lambda k, t, n: np.zeros((n, k.shape[-1]), np.int64)): "expected dtype",
        (lambda k, t, n: np.full((n, k.shape[-1]), np.nan, k.dtype)): "NaN or infinity",
    }
    for fn, words in cases.items():
        report = check_gather_pages(fn)
        first = report[report.failed[0]]
        assert words in first.detail, (words, first.detail)
        assert "Traceback" not in report.summary() and "File \"" not in report.summary()


def test_report_never_shows_the_keys():
    rng = np.random.default_rng(0)
    blocks = rng.standard_normal((4, 4, 3))
    keys = reference(blocks, (2, 0), 6)
    text = str(check_gather_pages(slot_and_block_swapped))
    for value in keys.ravel():
        assert f"{value:.3f}" not in text and f"{value:.2f}" not in text
    assert "[[" not in text and "array(" not in text


def test_bad_arguments_to_the_check():
    with pytest.raises(TypeError, match="fn: expected a function"):
        check_gather_pages(3)
    with pytest.raises(ValueError, match="seed"):
        check_gather_pages(reference, seed=-1)
