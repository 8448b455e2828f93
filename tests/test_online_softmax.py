"""attncore.online_softmax: the online softmax lives beside the softmax, refuses the states
no scores can produce, and the reference attention does not depend on tiled attention."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
import torch

import attncore as ac
import attncore.online_softmax as online_softmax_module
import attncore.tiled as tiled_module

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _t(x):
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


LIBS = [np.asarray, _t]


def test_public_names_are_the_same_objects_everywhere():
    for name in ("SoftmaxState", "softmax_state", "merge_softmax_states",
                 "finalize_softmax_state"):
        assert getattr(ac, name) is getattr(online_softmax_module, name)
        assert getattr(tiled_module, name) is getattr(online_softmax_module, name)


def _private_imports(path: pathlib.Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names if a.name.startswith("_")}
            if names:
                found.setdefault(node.module, set()).update(names)
    return found


def test_the_reference_imports_nothing_private_from_tiled_attention():
    found = _private_imports(ROOT / "attncore" / "attention.py")
    assert "tiled" not in found, found
    # the online softmax is below both: it imports neither of them
    below = _private_imports(ROOT / "attncore" / "online_softmax.py")
    assert not {"attention", "tiled"} & set(below), below


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("parts, words", [
    # no key seen (max = -inf), yet a sum: finalising would divide 5 by 3
    (([[-np.inf]], [[3.0]], [[5.0]]),
     r"state.sum: expected 0 where state.max is -inf .* got 3 at index \(0, 0\)"),
    # no key seen, no sum, yet an output
    (([[-np.inf]], [[0.0]], [[5.0]]),
     r"state.out: expected zeros where state.max is -inf .* got 5 at index \(0, 0\)"),
    # a key seen, but less than the exp(0) = 1 of the maximum itself
    (([[0.0], [2.0]], [[1.0], [0.5]], [[1.0], [1.0]]),
     r"state.sum: expected a sum >= 1 where state.max is finite .* got 0.5 at index "
     r"\(1, 0\)"),
    (([[0.0]], [[-1.0]], [[1.0]]), r"state.sum: expected finite sums >= 0"),
    (([[np.nan]], [[1.0]], [[1.0]]), r"state.max: expected finite row maxima"),
    (([[np.inf]], [[1.0]], [[1.0]]), r"state.max: expected finite row maxima"),
    (([[0.0]], [[np.inf]], [[1.0]]), r"state.sum: expected finite sums >= 0"),
    (([[0.0]], [[1.0]], [[np.nan]]), r"state.out: expected finite values"),
])
def test_impossible_states_are_refused_on_both_backends(lib, parts, words):
    state = ac.SoftmaxState(*(lib(p) for p in parts))
    with pytest.raises(ValueError, match=words):
        ac.finalize_softmax_state(state)
    with pytest.raises(ValueError, match=words.replace("state.", "a.")):
        ac.merge_softmax_states(state, state)
    possible = ac.softmax_state(lib(np.zeros((len(parts[0]), 2))), lib(np.ones((2, 1))))
    with pytest.raises(ValueError, match=words.replace("state.", "b.")):
        ac.merge_softmax_states(possible, state)


@pytest.mark.parametrize("lib", LIBS)
def test_every_state_the_functions_make_is_accepted(lib):
    rng = np.random.default_rng(3)
    s = rng.standard_normal((5, 9)) * 30
    s[0] = -np.inf                               # a row with no admissible key
    s[1, :8] = -np.inf                           # a row with one
    v = rng.standard_normal((9, 2))
    a = ac.softmax_state(lib(s[:, :4]), lib(v[:4]))
    b = ac.softmax_state(lib(s[:, 4:]), lib(v[4:]))
    empty = ac.softmax_state(lib(s[:, :0]), lib(v[:0]))
    merged = ac.merge_softmax_states(ac.merge_softmax_states(a, empty), b)
    out = np.asarray(ac.finalize_softmax_state(merged))
    want = np.asarray(ac.softmax(lib(s)) @ lib(v))
    assert np.abs(out - want).max() < 1e-12
    assert (out[0] == 0).all()
