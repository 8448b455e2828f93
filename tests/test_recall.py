"""The associative-recall tasks of chapters 14 and 19: their data and their score."""

from __future__ import annotations

import numpy as np
import pytest

from attncore.lab.recall import overwrite_task, recall_accuracy, recall_task


def test_recall_task_draws_unit_keys_and_sign_values_from_its_seed():
    keys, values = recall_task(5, 8, seed=3)
    assert keys.shape == values.shape == (5, 8)
    assert np.allclose(np.linalg.norm(keys, axis=1), 1.0)
    assert set(np.unique(values)) <= {-1.0, 1.0}
    again = recall_task(5, 8, seed=3)
    assert np.array_equal(keys, again[0]) and np.array_equal(values, again[1])


def test_overwrite_task_writes_the_keys_twice_with_new_values():
    keys, values, targets = overwrite_task(4, 16, seed=1)
    first, old = recall_task(4, 16, seed=1)
    assert np.array_equal(keys[:4], first) and np.array_equal(keys[4:], first)
    assert np.array_equal(values[:4], old)
    assert set(np.unique(values[4:])) <= {-1.0, 1.0}
    assert not np.array_equal(values[4:], old)
    assert list(targets) == [4, 5, 6, 7]
    # the current value of key i is values[targets[i]]: a memory that returns it scores 1
    assert recall_accuracy(values[targets], values, targets) == 1.0


def test_recall_accuracy_counts_the_best_match_against_the_target():
    values = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    out = np.array([[0.9, 0.1], [0.8, 0.3], [0.1, -0.2]])
    assert recall_accuracy(out, values) == pytest.approx(1 / 3)        # row 0 only
    assert recall_accuracy(out[:2], values, [0, 0]) == 1.0


@pytest.mark.parametrize("out, values, targets, words", [
    (np.zeros((2, 3)), np.zeros((2, 4)), None, "out, values: expected shapes"),
    (np.zeros((2, 3)), np.zeros((3, 3)), None, "need as many rows"),
    (np.zeros((2, 3)), np.zeros((3, 3)), [0, 1, 2], "targets: expected shape (2,)"),
])
def test_recall_accuracy_refuses_shapes_that_do_not_fit(out, values, targets, words):
    with pytest.raises(ValueError) as info:
        recall_accuracy(out, values, targets)
    assert words in str(info.value)
