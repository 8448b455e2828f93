"""Tests of attncore.lab.interactive: each figure's data is what attncore computes, its output
is the same on every run, and its controls are real form controls.

The browser checks (drawn on the built site, driven by the keyboard, no console errors) are in
tests/test_site_browser.py.
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


def test_the_output_is_vega_lite_a_still_picture_and_a_plain_text_line(figures):
    import base64

    for name, fig in figures.items():
        data, metadata = fig._repr_mimebundle_()
        assert set(data) == {I.VEGALITE_MIME, "image/png", "text/plain"}, name
        assert metadata[I.VEGALITE_MIME] == {"embed_options": I.EMBED_OPTIONS}
        # JupyterLab's Vega renderer adds a picture to an output that has none, which marks
        # the notebook changed as soon as it opens: the output brings its own
        png = base64.b64decode(data["image/png"])
        assert png.startswith(b"\x89PNG\r\n\x1a\n"), name
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        shown = metadata["image/png"]
        assert (width, height) == (2 * shown["width"], 2 * shown["height"]), name   # sharp
        # no version named: each renderer compiles it with its own Vega-Lite (the site's
        # compiles to the Vega it carries, so that vega-embed finds the versions agree)
        assert "$schema" not in data[I.VEGALITE_MIME], name
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
        assert not re.findall(r"https?://[^\"\s]+", text), name
        assert not re.search(r"0x[0-9a-f]{6,}|\d{4}-\d\d-\d\dT", text), name


def test_every_control_is_a_slider_or_a_checkbox_the_notebook_leaves_its_keys_to(figures):
    # JupyterLab's notebook takes the arrow keys for its own shortcuts unless the focused
    # element (or a parent) says data-lm-suppress-shortcuts; Vega copies a binding's keys onto
    # the element only for generic inputs, hence "Range" (see the module's docstring). A
    # select would lose its arrow keys: none is used.
    for name, fig in figures.items():
        bound = [p for p in fig.spec["params"] if "bind" in p]
        assert [p["name"] for p in bound] == fig.controls and bound, name
        for p in bound:
            bind = p["bind"]
            assert bind["input"] in {"Range", "checkbox"}, (name, p)
            assert bind["name"].strip(), f"{name}: control {p['name']} has no label"
            if bind["input"] == "Range":
                assert bind["data-lm-suppress-shortcuts"] == "true", (name, p)
                assert bind["min"] <= p["value"] <= bind["max"], (name, p)
        # a slider's value reaches the chart as a string: expressions convert it
        text = json.dumps(fig.spec)
        for p in bound:
            if p["bind"]["input"] == "Range":
                assert f"toNumber({p['name']})" in text, (name, p["name"])


def test_every_chart_is_as_wide_as_the_column(figures):
    # (the site widens it to its column: tests/test_site_browser.py measures it there)
    for name, fig in figures.items():
        spec = fig.spec
        assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}, name
        views = spec.get("vconcat", [spec])
        assert all(v["width"] == I.WIDTH for v in views), name
        assert isinstance(spec["title"]["text"], dict), f"{name}: the title follows no control"


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
        removed = (r["causal"] and r["j"] > r["i"]) or r["j"] >= r["length"]
        assert r["allowed"] == (not removed) and (r["w"] is None) == removed, r
    for causal in (False, True):
        for length in (3, 6):
            for i in range(6):
                w = [r["w"] for r in rows if r["causal"] == causal and r["i"] == i
                     and r["length"] == length and r["w"] is not None]
                assert abs(sum(w) - 1) < 5e-3, (causal, length, i, w)


def test_still_pictures_are_drawn_for_every_figure(figures):
    # (what nbconvert, GitHub's preview and JupyterLab's saved output show)
    for name, fig in figures.items():
        assert len(fig.still_png()) > 10_000, name


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
    states = next(p["value"] for p in figures["online_softmax_figure"].spec["params"]
                  if p["name"] == "states")
    assert [st["m"] for st in states] == maxima
    assert abs(states[-1]["o"] - float((w @ v)[0, 0])) < 2e-3


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
