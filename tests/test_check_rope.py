"""attncore.testing.check_rope: attncore's RoPE and a hand-written one pass, the classic
mistakes are each caught by the property that names them, and a function that raises,
returns the wrong thing or takes other arguments gets one sentence, never the right
answer's values."""

from __future__ import annotations

import numpy as np
import pytest

import attncore as ac
from attncore.testing import check_rope
from attncore.testing.rope import PROPERTIES, rotate


def hand_written(x, positions, base=10000.0):
    """What a learner writes, in the rotate-half convention."""
    d = x.shape[-1]
    freqs = base ** (-np.arange(0, d, 2) / d)
    angles = positions[:, None] * freqs
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


# --- broken RoPEs, each with one classic mistake --------------------------------------

def interleaved(x, positions, base=10000.0):
    return rotate(x, positions, base, pairing="interleaved")


def off_by_one(x, positions, base=10000.0):
    return hand_written(x, positions + 1, base)


def index_not_position(x, positions, base=10000.0):
    return hand_written(x, np.arange(x.shape[-2]), base)


def exponent_i_over_d(x, positions, base=10000.0):
    return rotate(x, positions, base, exponent="i/d")


def not_a_rotation(x, positions, base=10000.0):
    d = x.shape[-1]
    angles = positions[:, None] * base ** (-np.arange(0, d, 2) / d)
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * np.cos(angles) - b * np.sin(angles),
                           a * np.sin(angles) - b * np.cos(angles)], axis=-1)


def base_ignored(x, positions, base=10000.0):
    return hand_written(x, positions)


def clockwise(x, positions, base=10000.0):
    return rotate(x, positions, base, sign=-1)


def float64_always(x, positions, base=10000.0):
    return hand_written(x.astype(np.float64), positions, base)


def in_place(x, positions, base=10000.0):
    out = hand_written(x, positions, base)
    positions += 1
    return out


BROKEN = {
    interleaved: ("pairing", "interleaved"),
    off_by_one: ("position_zero", "one too large"),
    index_not_position: ("uses_positions", "positions ignored"),
    exponent_i_over_d: ("frequencies", "base ** (-i / d)"),
    not_a_rotation: ("keeps_norms", "keeps lengths"),
    base_ignored: ("uses_base", "the base is ignored"),
    clockwise: ("frequencies", "clockwise"),
    float64_always: ("preserves_dtype", "dtype float32"),
    in_place: ("inputs_unchanged", "changed its argument positions"),
}


@pytest.mark.parametrize("fn", [ac.rope, hand_written], ids=["attncore", "hand-written"])
def test_correct_ropes_pass(fn):
    report = check_rope(fn)
    report.assert_passed()
    assert [r.name for r in report.results] == list(PROPERTIES)


def test_the_switchable_rope_is_right_by_default():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 8))
    positions = np.array([3, 0, 7, 1, 2])
    for base in (10000.0, 50.0):
        np.testing.assert_allclose(rotate(x, positions, base),
                                   ac.rope(x, positions, base=base), atol=1e-12)


@pytest.mark.parametrize("fn", list(BROKEN), ids=lambda f: f.__name__)
def test_each_mistake_is_caught_by_its_property(fn):
    name, words = BROKEN[fn]
    report = check_rope(fn)
    assert name in report.failed, report.summary()
    assert words in report.summary(), report.summary()


def test_one_error_reads_as_one_cause():
    def raises(x, positions, base=10000.0):
        return x @ np.ones((x.shape[-1] + 1, x.shape[-1]))
    report = check_rope(raises)
    assert set(report.failed) == set(PROPERTIES)
    assert report.summary().count("raised ValueError") == 1


@pytest.mark.parametrize("fn, words", [
    (lambda x, positions, base=10000.0: None, "got None"),
    (lambda x, positions, base=10000.0: x.tolist(), "got list"),
    (lambda x, positions, base=10000.0: x[..., :-1], "expected shape"),
    (lambda x, positions, base=10000.0: x * np.nan, "NaN"),
    (lambda x, positions, base=10000.0: x.astype(int), "dtype"),
    (lambda x: x, "takes other arguments"),
], ids=["None", "list", "shape", "nan", "int", "signature"])
def test_a_bad_return_or_signature_is_one_sentence(fn, words):
    report = check_rope(fn)
    detail = report["output_shape"].detail
    assert words in detail
    assert "Traceback" not in report.summary()
    assert "\n" not in detail


def test_the_report_never_prints_the_reference_values():
    rng = np.random.default_rng([0, 10])
    x = rng.standard_normal((5, 8))
    positions = rng.permutation(15)[:5]
    positions[0] = max(1, positions[0])
    ref = ac.rope(x, positions)
    for fn in BROKEN:
        text = check_rope(fn).summary()
        for value in ref.ravel()[:12]:
            for digits in (3, 4, 6):
                assert f"{value:.{digits}f}" not in text


def test_bad_arguments_to_the_check():
    with pytest.raises(TypeError, match="fn: expected a callable"):
        check_rope("rope")
    with pytest.raises(ValueError, match="seed"):
        check_rope(ac.rope, seed=-1)


def test_the_module_example_runs():
    import doctest

    import attncore.testing.rope as module
    assert doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
