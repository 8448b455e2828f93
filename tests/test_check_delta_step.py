"""attncore.testing.check_delta_step: the reference passes, each mistake learners make in
one step of the gated delta rule fails the property it breaks, and whatever the learner's
function does wrong is one sentence in the report, never the right values."""

from __future__ import annotations

import numpy as np
import pytest

import attncore as ac
from attncore.testing.delta_step import PROPERTIES, check_delta_step


def _parts(g, beta, S):
    return np.asarray(g, S.dtype)[..., None, None], np.asarray(beta, S.dtype)[..., None, None]


def reference(S, q, k, v, g, beta):
    """The read-then-correct form: u = beta (v - g S k), S_new = g S + u k^T."""
    g, beta = _parts(g, beta, S)
    gated = g * S
    u = beta * (v[..., :, None] - gated @ k[..., :, None])
    new = gated + u * k[..., None, :]
    return (new @ q[..., :, None])[..., 0], new


def gate_after_update(S, q, k, v, g, beta):
    """S_new = g (S (I - beta k k^T) + beta v k^T): the gate also scales the new write."""
    g, beta = _parts(g, beta, S)
    u = beta * (v[..., :, None] - S @ k[..., :, None])
    new = g * (S + u * k[..., None, :])
    return (new @ q[..., :, None])[..., 0], new


def erase_with_v(S, q, k, v, g, beta):
    """The erase term built from v instead of the memory's reading S k."""
    g, beta = _parts(g, beta, S)
    vk = v[..., :, None] * k[..., None, :]
    kk = k[..., :, None] * k[..., None, :]
    new = g * S + beta * vk - beta * vk @ kk
    return (new @ q[..., :, None])[..., 0], new


def beta_missing(S, q, k, v, g, beta):
    """The strength forgotten: S_new = g S (I - k k^T) + v k^T."""
    g, _ = _parts(g, beta, S)
    gated = g * S
    u = v[..., :, None] - gated @ k[..., :, None]
    new = gated + u * k[..., None, :]
    return (new @ q[..., :, None])[..., 0], new


def reads_old_memory(S, q, k, v, g, beta):
    """o = S q with the memory before the write."""
    _, new = reference(S, q, k, v, g, beta)
    return S @ q if S.ndim == 2 else np.einsum("...ij,...j->...i", S, q), new


def one_gate_for_all_heads(S, q, k, v, g, beta):
    """Right for one head; with batch axes, uses the first head's gates for every head."""
    if np.ndim(g):
        g, beta = np.ravel(g)[0], np.ravel(beta)[0]
    return reference(S, q, k, v, g, beta)


def test_the_reference_and_attncore_pass():
    for fn in (reference, ac.gated_delta_rule_step):
        report = check_delta_step(fn)
        assert report.passed, str(report)
        assert [r.name for r in report.results] == list(PROPERTIES)


@pytest.mark.parametrize("fn, broken", [
    (gate_after_update, "reads_back_the_value"),
    (erase_with_v, "reads_back_the_value"),
    (beta_missing, "zero_strength_only_forgets"),
    (reads_old_memory, "output_reads_new_memory"),
    (one_gate_for_all_heads, "batch_axes"),
])
def test_each_mistake_fails_the_property_it_breaks(fn, broken):
    report = check_delta_step(fn)
    assert broken in report.failed, str(report)
    assert "matches_reference" in report.failed or broken == "batch_axes"
    assert "d_k = " in report[broken].input


def test_no_output_value_of_the_reference_is_printed():
    text = "\n".join(str(check_delta_step(fn)) for fn in (gate_after_update, erase_with_v,
                                                          beta_missing, reads_old_memory))
    rng = np.random.default_rng([0, 4])          # the inputs of reads_back_the_value
    S, q, k, v = (rng.standard_normal(s) for s in ((2, 3), (3,), (3,), (2,)))
    k /= np.linalg.norm(k)
    o, new = reference(S, q, k, v, 0.5, 1.0)
    for x in np.concatenate([o.ravel(), new.ravel(), v]):
        for digits in (2, 3, 4):
            assert f"{x:.{digits}f}" not in text


@pytest.mark.parametrize("fn, words", [
    (lambda S, q, k, v, g, beta: 1 / 0, "raised ZeroDivisionError"),
    (lambda S, q, k, v: (q, S), "takes other arguments than the check passes"),
    (lambda S, q, k, v, g, beta: None, "expected a pair (o, S_new), got NoneType"),
    (lambda S, q, k, v, g, beta: (v, S[..., :1]), "S_new: expected shape"),
    (lambda S, q, k, v, g, beta: (v.astype(np.float16), S), "o: expected dtype"),
    (lambda S, q, k, v, g, beta: (v * np.nan, S), "o: expected finite numbers"),
    (lambda S, q, k, v, g, beta: (list(v), S), "o: expected a NumPy array"),
])
def test_what_the_learner_gets_wrong_is_one_sentence(fn, words):
    report = check_delta_step(fn)
    result = report["returns_pair"]
    assert result.status == "failed" and words in result.detail, result
    assert "Traceback" not in str(report) and "\n" not in result.detail


def test_the_inputs_must_be_left_alone():
    def in_place(S, q, k, v, g, beta):
        o, new = reference(S, q, k, v, g, beta)
        S[...] = new
        return o, S
    assert "inputs_unchanged" in check_delta_step(in_place).failed


@pytest.mark.parametrize("kwargs, exc", [({"fn": 3}, TypeError),
                                         ({"fn": reference, "seed": -1}, ValueError),
                                         ({"fn": reference, "atol": 0}, ValueError)])
def test_bad_arguments_to_the_check(kwargs, exc):
    fn = kwargs.pop("fn")
    with pytest.raises(exc):
        check_delta_step(fn, **kwargs)
