"""The build-it checkers of chapters 1 and 3 (attncore/lab/exercises/what_attention.py and
matmul_views.py): each accepts correct functions written in several ways, rejects each
classic mistake by the property it breaks, and never prints an expected output."""

from __future__ import annotations

import numpy as np
import pytest

import attncore as ac
from attncore.lab.exercises import _CHECKERS, _load_all
from attncore.lab.exercises._build_it import judge
from attncore.testing.runner import Failure

_load_all()
LOOKUP = _CHECKERS["ex-what-attention-lookup"]
ROWS = _CHECKERS["ex-what-attention-all-queries"]
OUTER = _CHECKERS["ex-matmul-views-outer"]


def failed(verdict):
    """The property names a verdict's details report as failed."""
    return {line.split(":")[0] for line in verdict.details}


# --- chapter 1: one lookup -----------------------------------------------------------------

def lookup_loop(q, keys, values):
    scores = np.array([k @ q for k in keys]) / np.sqrt(len(q))
    w = ac.softmax(scores)
    return sum(w[j] * values[j] for j in range(len(keys)))


def lookup_matrix(q, keys, values):
    return ac.softmax(keys @ q / np.sqrt(q.shape[0])) @ values


@pytest.mark.parametrize("fn", [lookup_loop, lookup_matrix])
def test_correct_lookups_pass(fn):
    verdict = LOOKUP(fn)
    assert verdict.correct, verdict


@pytest.mark.parametrize("fn, broken", [
    (lambda q, k, v: ac.softmax(k @ q) @ v, {"matches_attention"}),          # no scale
    (lambda q, k, v: v[np.argmax(k @ q)], {"matches_attention"}),            # hard lookup
    (lambda q, k, v: (k @ q / np.sqrt(len(q))) @ v,                           # no softmax
     {"matches_attention", "average_of_values", "single_key"}),
    (lambda q, k, v: ac.softmax(k @ q / np.sqrt(len(q))) @ v[::-1],         # values misaligned
     {"matches_attention", "key_order"}),
])
def test_lookup_mistakes_are_named(fn, broken):
    verdict = LOOKUP(fn)
    assert not verdict.correct
    assert failed(verdict) == broken, verdict


# --- chapter 1: all queries at once ----------------------------------------------------------

def rows(Q, K, V):
    return ac.softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]), axis=-1) @ V


def rows_einsum(Q, K, V):
    S = np.einsum("...id,...jd->...ij", Q, K) / np.sqrt(Q.shape[-1])
    return np.einsum("...ij,...jv->...iv", ac.softmax(S), V)


@pytest.mark.parametrize("fn", [rows, rows_einsum, ac.scaled_dot_product_attention])
def test_correct_matrix_forms_pass(fn):
    verdict = ROWS(fn)
    assert verdict.correct, verdict


@pytest.mark.parametrize("fn, broken", [
    (lambda Q, K, V: ac.softmax(Q @ K.T / np.sqrt(Q.shape[-1])) @ V,          # K.T
     {"output_shape", "matches_attention", "each_query_alone", "each_batch_item_alone"}),
    (lambda Q, K, V: ac.softmax(Q @ np.swapaxes(K, -1, -2), axis=-2) @ V,     # wrong axis
     {"matches_attention", "each_query_alone"}),
])
def test_matrix_form_mistakes_are_named(fn, broken):
    verdict = ROWS(fn)
    assert failed(verdict) == broken, verdict


def test_one_error_is_reported_once():
    verdict = ROWS(lambda Q, K, V: ac.softmax(Q @ K.T / np.sqrt(Q.shape[-1])) @ V)
    same = [d for d in verdict.details if "the same error as under output_shape" in d]
    assert len(same) == 3 and len(verdict.details) == 4


# --- chapter 3: the outer-product view -------------------------------------------------------

def outer_loop(A, B):
    C = np.zeros(A.shape[:-1] + B.shape[-1:], dtype=A.dtype)
    for t in range(A.shape[-1]):
        C += A[..., :, t, None] * B[..., None, t, :]
    return C


def outer_column_times_row(A, B):
    # a column (m, 1) times a row (1, n) is an outer product, also when written with @
    return sum(A[..., :, t:t + 1] @ B[..., t:t + 1, :] for t in range(A.shape[-1]))


def outer_broadcast(A, B):
    return (A[..., :, :, None] * B[..., None, :, :]).sum(axis=-2)


@pytest.mark.parametrize("fn", [outer_loop, outer_column_times_row, outer_broadcast])
def test_correct_outer_product_views_pass(fn):
    verdict = OUTER(fn)
    assert verdict.correct, verdict


@pytest.mark.parametrize("fn, broken", [
    (lambda A, B: A @ B, {"sum_of_outer_products"}),
    (lambda A, B: np.matmul(A, B), {"sum_of_outer_products"}),
    (lambda A, B: np.einsum("...ij,...jk->...ik", A, B), {"sum_of_outer_products"}),
    (lambda A, B: sum(np.outer(A[:, t], B[t, :]) for t in range(A.shape[1])),   # 2-D only
     {"output_shape", "exact_on_integers", "matches_matmul", "keeps_dtype"}),
    (lambda A, B: outer_loop(A, B).astype(np.float64), {"keeps_dtype"}),
    (lambda A, B: outer_loop(A, B[..., ::-1, :]),                              # rows of B reversed
     {"exact_on_integers", "matches_matmul"}),
])
def test_outer_product_mistakes_are_named(fn, broken):
    verdict = OUTER(fn)
    assert failed(verdict) == broken, verdict


def test_a_mutating_function_is_caught():
    def mutates(A, B):
        A *= 1.0
        B[...] = B[..., ::-1, :]
        return outer_loop(A, B)

    assert "inputs_unchanged" in failed(OUTER(mutates))


@pytest.mark.parametrize("checker", [LOOKUP, ROWS, OUTER])
def test_not_a_function_is_one_sentence(checker):
    verdict = checker(42)
    assert not verdict.correct and "got int" in verdict.message and "def" in verdict.message


def test_messages_name_properties_and_inputs_but_no_expected_values():
    verdict = OUTER(lambda A, B: outer_loop(A, B) + 1.0)
    text = verdict.message + "\n".join(verdict.details)
    assert "matches_matmul" in text and "A (3, 4), B (4, 2)" in text
    rng = np.random.default_rng([43, 20])
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    for value in (a @ b).ravel():
        assert f"{value:.3f}" not in text and f"{value:.2f}" not in text


def test_judge_reports_each_property_once():
    def holds():
        pass

    def fails():
        raise Failure("it does not hold", "x (2,)")

    verdict = judge(lambda: None, "f()", {"a": holds, "b": fails, "c": fails})
    assert not verdict.correct
    assert verdict.details == ("b: it does not hold, on x (2,)",
                               "c: the same error as under b")
