"""Tests of attncore.lab.interactive: each figure's data is what attncore computes, its output
is the same on every run, and its controls are real form controls.

The browser checks (drawn on the built site, driven by the keyboard, no console errors) are in
tests/test_site.py.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from attncore.lab import interactive as I

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def figures():
    return {name: make() for name, make in I.FIGURES.items()}


def _rows(figure):
    return figure.spec["data"]["values"]


def test_the_output_is_vega_lite_and_a_plain_text_line(figures):
    for name, fig in figures.items():
        data, metadata = fig._repr_mimebundle_()
        assert set(data) == {I.VEGALITE_MIME, "text/plain"}, name
        assert metadata == {I.VEGALITE_MIME: {"embed_options": I.EMBED_OPTIONS}}
        assert data[I.VEGALITE_MIME]["$schema"].endswith("/vega-lite/v5.json")
        lines = data["text/plain"].splitlines()
        assert lines[0].startswith("Interactive figure: ") and all(len(x) <= 80 for x in lines)


def test_the_output_is_the_same_on_every_run_and_survives_json(figures):
    # nbval compares the stored output with a fresh run's: it must be plain JSON (no NumPy
    # scalars, tuples or NaN) and hold no ids, dates or addresses.
    for name, fig in figures.items():
        again = I.FIGURES[name]()
        assert again.spec == fig.spec and again.description == fig.description, name
        text = json.dumps(fig.spec, allow_nan=False)
        assert json.loads(text) == fig.spec, name
        urls = set(re.findall(r"https?://[^\"\s]+", text))
        assert urls == {I.SCHEMA}, f"{name}: {urls}"
        assert not re.search(r"0x[0-9a-f]{6,}|\d{4}-\d\d-\d\dT", text), name


def test_every_control_is_a_form_control(figures):
    for name, fig in figures.items():
        bound = [p for p in fig.spec["params"] if "bind" in p]
        assert [p["name"] for p in bound] == fig.controls and bound, name
        for p in bound:
            assert p["bind"]["input"] in {"range", "select", "checkbox"}, (name, p)
            assert p["bind"]["name"].strip(), f"{name}: control {p['name']} has no label"


def test_saturation_figure_weights_are_softmax_rows(figures):
    rows = _rows(figures["softmax_saturation_figure"])
    by_e = {}
    for r in rows:
        by_e.setdefault(r["e"], []).append(r)
    assert sorted(by_e) == list(range(11))
    for e, keys in by_e.items():
        assert abs(sum(r["raw"] for r in keys) - 1) < 1e-3
        assert abs(sum(r["scaled"] for r in keys) - 1) < 1e-3
    top = max(r["raw"] for r in by_e[10])
    assert top > 0.99, "unscaled, the row should be one-hot at d_k = 1024"
    assert max(r["scaled"] for r in by_e[10]) < 0.9


def test_mask_figure_removes_what_each_mask_removes(figures):
    rows = _rows(figures["mask_figure"])
    for r in rows:
        removed = {"none": False, "causal": r["j"] > r["i"],
                   "padding": r["j"] >= r["length"]}[r["mask"]]
        assert r["allowed"] == (not removed) and (r["w"] is None) == removed, r
    for kind in ("none", "causal", "padding"):
        for i in range(6):
            w = [r["w"] for r in rows if r["mask"] == kind and r["i"] == i
                 and r["length"] == (3 if kind == "padding" else 0) and r["w"] is not None]
            assert abs(sum(w) - 1) < 5e-3, (kind, i, w)


def test_rope_figure_turns_each_pair_by_m_omega_and_keeps_its_length(figures):
    from attncore.positions import position_frequencies

    freqs = position_frequencies(8)
    for r in _rows(figures["rope_rotation_figure"]):
        assert math.isclose(r["x"] ** 2 + r["y"] ** 2, 1.09, abs_tol=1e-3)
        turned = math.atan2(r["y"], r["x"]) - math.atan2(0.3, 1.0)
        expected = r["m"] * freqs[r["pair"]]
        assert abs(math.remainder(turned - expected, 2 * math.pi)) < 1e-3, r


def test_online_softmax_figure_ends_at_the_softmax(figures):
    rows = _rows(figures["online_softmax_figure"])
    last = [r for r in rows if r["t"] == 4]
    assert all(abs(r["w"] - r["final"]) < 2e-3 for r in last)
    maxima = [next(r["m"] for r in rows if r["t"] == t) for t in range(1, 5)]
    assert maxima == sorted(maxima), "the running maximum never decreases"
    seen = [max(r["s"] for r in rows if r["t"] == t and r["seen"]) for t in range(1, 5)]
    assert np.allclose(maxima, seen, atol=1e-3)
    # o / l after the last block is attention's output for this query
    rng = np.random.default_rng(0)
    s, v = 2.0 * rng.standard_normal((1, 16)), rng.standard_normal((16, 1))
    w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    assert abs(last[0]["o"] - float((w @ v)[0, 0])) < 2e-3


def test_minilm_figure_has_every_head_and_softmax_rows(figures):
    fig = figures["minilm_heads_figure"]
    rows = _rows(fig)
    tokens = next(p["value"] for p in fig.spec["params"] if p["name"] == "tokens")
    n = len(tokens)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert len(rows) == 6 * 12
    for r in rows:
        w = np.array(r["w"]).reshape(n, n)
        assert np.allclose(w.sum(axis=1), 1, atol=5e-3), (r["layer"], r["head"])


@pytest.mark.parametrize("call, argument", [
    (lambda: I.softmax_saturation_figure(n_keys=0), "n_keys"),
    (lambda: I.mask_figure(n=1), "n"),
    (lambda: I.rope_rotation_figure(d=7), "d"),
    (lambda: I.online_softmax_figure(n_keys=10, block_size=4), "n_keys"),
    (lambda: I.minilm_heads_figure(""), "text"),
])
def test_bad_arguments_are_refused_by_name(call, argument):
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        call()


def test_the_site_renders_the_output_as_a_spec_that_cannot_end_its_script():
    sys.path.insert(0, str(ROOT / "_ext"))
    import offline_vega

    class Data:
        mime_type = I.VEGALITE_MIME
        content = {"title": "</script><script>alert(1)</script>"}
        output_metadata = {I.VEGALITE_MIME: {"embed_options": {"renderer": "svg"}}}

    [node] = offline_vega.VegaLiteRenderer.handle_mime(None, Data, False)
    markup = node.astext()
    assert markup.count("</script>") == 1 and "<\\/script>" in markup
    assert 'data-embed-options="{&quot;renderer&quot;: &quot;svg&quot;}"' in markup
    assert offline_vega.VegaLiteRenderer.handle_mime(None, type("T", (), {
        "mime_type": "text/html", "content": "", "output_metadata": {}}), False) is None
