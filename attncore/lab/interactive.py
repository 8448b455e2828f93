"""Interactive figures: Vega-Lite charts of data computed here, driven by form controls.

Each function computes its data with attncore (NumPy, float64, seeded) and returns an
:class:`InteractiveFigure`, whose only rich output is a Vega-Lite 5 specification with that data
inlined. The chart's controls (range inputs, selects, checkboxes) are Vega-Lite parameters bound
to HTML form controls, so the figure needs no kernel once it is drawn: every state it can show
is precomputed, and the controls only filter the data.

Where it renders:

* JupyterLab draws the ``application/vnd.vegalite.v5+json`` output with its built-in Vega
  renderer, in trusted and untrusted notebooks alike (it is not HTML with scripts, which
  JupyterLab runs only in notebooks the reader has trusted), in its dark theme too; VS Code
  and nteract do the same. In JupyterLab, Tab reaches the controls, but while a notebook is
  in command mode its shortcuts take the arrow keys and Space: Home and End move a slider
  from the keyboard there, and the mouse does the rest.
* The course's website draws it with the Vega, Vega-Lite and vega-embed scripts that the site
  serves itself (``_ext/offline_vega.py``).
* A frontend with no Vega renderer shows the ``text/plain`` line, which says what the figure is.

The output holds no ids, timestamps or memory addresses and its numbers are rounded, so a fresh
run stores exactly the same output.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

VEGALITE_MIME = "application/vnd.vegalite.v5+json"
"""The MIME type of the figures' rich output (JupyterLab 4 renders Vega-Lite 3 to 5)."""

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"

EMBED_OPTIONS = {"actions": False, "renderer": "svg"}
"""vega-embed options: no export menu; SVG, so that what is drawn can be read and compared."""

_CONFIG = {
    "axis": {"labelFontSize": 11, "titleFontSize": 12},
    "title": {"fontSize": 13},
    "view": {"stroke": None},
}
_BAR = "#3b6fb6"          # readable on a light page and on JupyterLab's dark theme
_ACCENT = "#d9622b"


def _r(x: Any, digits: int = 4) -> float:
    """A Python float rounded for the stored output (identical on every machine)."""
    value = round(float(x), digits)
    return 0.0 if value == 0 else value          # no "-0.0"


@dataclass
class InteractiveFigure:
    """A Vega-Lite chart with its data inlined, shown by Jupyter as a rich output.

    Attributes
    ----------
    spec : dict
        The Vega-Lite 5 specification (JSON-compatible: dicts, lists, str, float, int, bool).
    description : str
        What the figure shows, for frontends without a Vega renderer (the ``text/plain``
        output), in lines of at most 78 characters.
    controls : list of str
        The names of the parameters bound to form controls.
    """

    spec: dict
    description: str
    controls: list[str] = field(default_factory=list)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        data = {VEGALITE_MIME: self.spec, "text/plain": self.description}
        return data, {VEGALITE_MIME: {"embed_options": dict(EMBED_OPTIONS)}}


def _figure(title: str, description: str, params: list[dict], body: dict,
            data: list[dict], controls: list[str]) -> InteractiveFigure:
    spec = {"$schema": SCHEMA, "description": description, "title": title,
            "data": {"values": data}, "params": params, "config": _CONFIG, **body}
    # (the plain-text stand-in, in lines that fit the content column)
    text = textwrap.fill(f"Interactive figure: {description}.", width=78)
    return InteractiveFigure(spec, text, controls)


def _range(name: str, label: str, lo: int, hi: int, value: int, step: int = 1) -> dict:
    return {"name": name, "value": value,
            "bind": {"input": "range", "min": lo, "max": hi, "step": step, "name": label}}


# --- chapter 2: the softmax saturates as d_k grows ---------------------------------------

def softmax_saturation_figure(*, n_keys: int = 10, max_log2_d_k: int = 10,
                              seed: int = 0) -> InteractiveFigure:
    """One query's softmax weights over ``n_keys`` keys as ``d_k`` grows, scaled or not.

    The query and keys have independent standard normal components; ``d_k`` runs over the
    powers of two up to ``2 ** max_log2_d_k``, each using the first ``d_k`` components of the
    same vectors. Controls: a range input for ``log2 d_k`` and a checkbox that divides the
    scores by ``sqrt(d_k)``.

    Returns
    -------
    InteractiveFigure
    """
    from attncore.softmax import softmax

    if not (1 <= n_keys <= 32 and 1 <= max_log2_d_k <= 12):
        raise ValueError(f"n_keys, max_log2_d_k: expected 1..32 and 1..12, "
                         f"got {n_keys} and {max_log2_d_k}")
    rng = np.random.default_rng(seed)
    d_max = 2 ** max_log2_d_k
    q = rng.standard_normal(d_max)
    k = rng.standard_normal((n_keys, d_max))
    rows = []
    for e in range(max_log2_d_k + 1):
        d_k = 2 ** e
        s = k[:, :d_k] @ q[:d_k]                                    # (n_keys,)
        raw, scaled = softmax(s), softmax(s / math.sqrt(d_k))
        for j in range(n_keys):
            rows.append({"e": e, "d_k": d_k, "key": j + 1, "raw": _r(raw[j]),
                         "scaled": _r(scaled[j])})
    params = [_range("log2_dk", "log\u2082 d\u2096 ", 0, max_log2_d_k, 6),
              {"name": "divide", "value": False,
               "bind": {"input": "checkbox", "name": "divide the scores by \u221ad\u2096 "}}]
    pick = [{"filter": "datum.e == log2_dk"},
            {"calculate": "divide ? datum.scaled : datum.raw", "as": "weight"}]
    bars = {"mark": {"type": "bar", "color": _BAR},
            "encoding": {"x": {"field": "key", "type": "ordinal", "title": "key j",
                               "axis": {"labelAngle": 0}},
                         "y": {"field": "weight", "type": "quantitative",
                               "title": "softmax weight",
                               "scale": {"domain": [0, 1]}}}}
    label = {"transform": [{"aggregate": [{"op": "max", "field": "weight", "as": "top"},
                                          {"op": "max", "field": "d_k", "as": "dk"}]},
                           {"calculate": "'d\u2096 = ' + datum.dk + ', largest weight '"
                                         " + format(datum.top, '.2f')", "as": "text"}],
             "mark": {"type": "text", "align": "left", "x": 4, "y": -8, "fontSize": 12},
             "encoding": {"text": {"field": "text"}}}
    body = {"width": 300, "height": 180, "transform": pick, "layer": [bars, label]}
    return _figure("One query's softmax weights over its keys",
                   "softmax weights of one query over 10 keys as d_k grows, with and "
                   "without dividing the scores by sqrt(d_k)", params, body, rows,
                   ["log2_dk", "divide"])


# --- chapter 4: what a mask removes --------------------------------------------------------

def mask_figure(*, n: int = 6, d_k: int = 4, seed: int = 0) -> InteractiveFigure:
    """The attention weights of ``n`` tokens with no mask, a causal mask or a padding mask.

    Controls: a select for the mask and a range input for the number of real (unpadded)
    keys, which the padding mask uses. Masked cells are drawn grey and empty; every row of
    the weights sums to 1 over the keys it may see.

    Returns
    -------
    InteractiveFigure
    """
    from attncore.attention import causal_mask
    from attncore.masks import padding_mask
    from attncore.softmax import softmax

    if not 2 <= n <= 10:
        raise ValueError(f"n: expected 2..10 tokens, got {n}")
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((n, d_k)), rng.standard_normal((n, d_k))
    scores = q @ k.T / math.sqrt(d_k)
    cases = [("none", 0, np.ones((n, n), dtype=bool)), ("causal", 0, causal_mask(n, n))]
    cases += [("padding", length, padding_mask([length], n, n_q=n)[0])
              for length in range(1, n + 1)]
    rows = []
    for kind, length, allowed in cases:
        w = softmax(np.where(allowed, scores, -np.inf))
        for i in range(n):
            for j in range(n):
                rows.append({"mask": kind, "length": length, "i": i, "j": j,
                             "allowed": bool(allowed[i, j]),
                             "w": _r(w[i, j], 3) if allowed[i, j] else None})
    params = [{"name": "mask", "value": "causal",
               "bind": {"input": "select", "options": ["none", "causal", "padding"],
                        "name": "mask "}},
              _range("length", "real keys (padding mask) ", 1, n, n - 2)]
    pick = [{"filter": "datum.mask == mask && (mask != 'padding' || datum.length == length)"}]
    x = {"field": "j", "type": "ordinal", "title": "key j", "axis": {"labelAngle": 0}}
    y = {"field": "i", "type": "ordinal", "title": "query i"}
    cells = {"mark": {"type": "rect", "stroke": "white", "strokeWidth": 1},
             "encoding": {"x": x, "y": y,
                          "color": {"condition": {"test": "datum.allowed", "field": "w",
                                                  "type": "quantitative",
                                                  "scale": {"domain": [0, 1],
                                                            "scheme": "viridis"},
                                                  "title": "weight"},
                                    "value": "#c8c8c8"}}}
    text = {"transform": [{"filter": "datum.allowed"}],
            "mark": {"type": "text", "fontSize": 11},
            "encoding": {"x": x, "y": y, "text": {"field": "w", "format": ".2f"},
                         "color": {"condition": {"test": "datum.w < 0.6", "value": "white"},
                                   "value": "black"}}}
    body = {"width": 260, "height": 260, "transform": pick, "layer": [cells, text]}
    return _figure("Attention weights under a mask (grey: removed)",
                   f"attention weights of {n} tokens with no mask, a causal mask or a "
                   "padding mask", params, body, rows, ["mask", "length"])


# --- chapter 6: how RoPE turns a pair of coordinates -------------------------------------

def rope_rotation_figure(*, d: int = 8, n_positions: int = 32,
                         base: float = 10000.0) -> InteractiveFigure:
    """Where RoPE moves one pair of coordinates of a fixed vector, position by position.

    The same vector sits at positions ``0 .. n_positions - 1`` and goes through
    :func:`attncore.rope`; pair ``i`` holds coordinates ``(i, i + d/2)`` and turns by
    ``m * base ** (-2i / d)`` at position ``m``. Controls: a range input for the position
    and a select for the pair. The pale dots are the pair at every position.

    Returns
    -------
    InteractiveFigure
    """
    from attncore.positions import position_frequencies, rope

    if d % 2 or not 2 <= d <= 16 or not 2 <= n_positions <= 128:
        raise ValueError(f"d, n_positions: expected an even d in 2..16 and 2..128 "
                         f"positions, got {d} and {n_positions}")
    half = d // 2
    x0 = np.concatenate([np.ones(half), np.full(half, 0.3)])       # every pair at (1, 0.3)
    x = np.tile(x0, (n_positions, 1))                                # (n_positions, d)
    turned = rope(x, base=base)
    freqs = position_frequencies(d, base=base)
    rows = []
    for m in range(n_positions):
        for i in range(half):
            rows.append({"m": m, "pair": i, "x": _r(turned[m, i]),
                         "y": _r(turned[m, i + half]), "angle": _r(m * freqs[i], 3)})
    labels = [f"{i}: \u03c9 = {freqs[i]:.3g}" for i in range(half)]
    params = [_range("position", "position m ", 0, n_positions - 1, 3),
              {"name": "pair", "value": 0,
               "bind": {"input": "select", "options": list(range(half)), "labels": labels,
                        "name": "pair i "}}]
    axis = {"scale": {"domain": [-1.2, 1.2]}, "type": "quantitative"}
    trail = {"transform": [{"filter": "datum.pair == pair"}],
             "mark": {"type": "point", "filled": True, "size": 30, "opacity": 0.35,
                      "color": _BAR},
             "encoding": {"x": {"field": "x", **axis, "title": "coordinate i"},
                          "y": {"field": "y", **axis, "title": "coordinate i + d/2"}}}
    now = [{"filter": "datum.pair == pair && datum.m == position"},
           {"calculate": "0", "as": "x0"}, {"calculate": "0", "as": "y0"}]
    arrow = {"transform": now, "mark": {"type": "rule", "strokeWidth": 3, "color": _ACCENT},
             "encoding": {"x": {"field": "x0", **axis}, "y": {"field": "y0", **axis},
                          "x2": {"field": "x"}, "y2": {"field": "y"}}}
    head = {"transform": now, "mark": {"type": "point", "filled": True, "size": 120,
                                       "color": _ACCENT},
            "encoding": {"x": {"field": "x", **axis}, "y": {"field": "y", **axis}}}
    text = {"transform": now + [{"calculate": "'angle m\u03c9 = ' + format(datum.angle, '.2f')"
                                              " + ' rad'", "as": "text"}],
            "mark": {"type": "text", "align": "left", "x": 4, "y": 10, "fontSize": 12},
            "encoding": {"text": {"field": "text"}}}
    body = {"width": 260, "height": 260, "layer": [trail, arrow, head, text]}
    return _figure("RoPE turns each pair of coordinates by m\u03c9",
                   f"one pair of coordinates of a {d}-dimensional vector, turned by RoPE at "
                   f"positions 0 to {n_positions - 1}", params, body, rows,
                   ["position", "pair"])


# --- chapter 7: the online softmax, block by block ---------------------------------------

def online_softmax_figure(*, n_keys: int = 16, block_size: int = 4,
                          seed: int = 0) -> InteractiveFigure:
    """The running state ``(m, l, o)`` of one query row after each block of keys (the
    chapter's ``(m, ell, o)``).

    The state of each block comes from :func:`attncore.softmax_state` and the running state
    from :func:`attncore.merge_softmax_states`; values ``v_j`` are scalars. The top panel shows
    the scores, the keys seen so far and the running maximum ``m``; the bottom panel the
    weights ``exp(s_j - m) / l`` the state implies so far, against the final ones (ticks);
    above it, ``m``, ``l`` and the output ``o / l`` so far.
    Control: a range input for the number of blocks seen.

    Returns
    -------
    InteractiveFigure
    """
    from attncore.tiled import finalize_softmax_state, merge_softmax_states, softmax_state

    if n_keys % block_size or not 1 <= n_keys // block_size <= 16:
        raise ValueError(f"n_keys, block_size: expected n_keys a multiple of block_size with "
                         f"1..16 blocks, got {n_keys} and {block_size}")
    rng = np.random.default_rng(seed)
    s = 2.0 * rng.standard_normal((1, n_keys))                      # one query row
    v = rng.standard_normal((n_keys, 1))                              # scalar values
    n_blocks = n_keys // block_size
    final = np.exp(s[0] - s.max()) / np.exp(s[0] - s.max()).sum()
    rows, state = [], None
    for t in range(1, n_blocks + 1):
        lo, hi = (t - 1) * block_size, t * block_size
        part = softmax_state(s[:, lo:hi], v[lo:hi])
        state = part if state is None else merge_softmax_states(state, part)
        m, l = float(state.max[0, 0]), float(state.sum[0, 0])
        out = float(finalize_softmax_state(state)[0, 0])
        for j in range(n_keys):
            seen = j < hi
            rows.append({"t": t, "key": j + 1, "s": _r(s[0, j], 3), "seen": seen,
                         "w": _r(math.exp(s[0, j] - m) / l, 3) if seen else 0.0,
                         "final": _r(final[j], 3), "m": _r(m, 3), "l": _r(l, 3),
                         "o": _r(out, 3)})
    params = [_range("blocks", "blocks of keys seen ", 1, n_blocks, 1)]
    x = {"field": "key", "type": "ordinal", "title": "key j", "axis": {"labelAngle": 0}}
    score_bars = {"mark": {"type": "bar"},
                  "encoding": {"x": x, "y": {"field": "s", "type": "quantitative",
                                             "title": "score s\u2c7c"},
                               "color": {"condition": {"test": "datum.seen",
                                                       "value": _BAR},
                                         "value": "#c8c8c8"}}}
    max_rule = {"transform": [{"filter": "datum.key == 1"}],
                "mark": {"type": "rule", "color": _ACCENT, "strokeWidth": 2,
                         "strokeDash": [6, 3]},
                "encoding": {"y": {"field": "m", "type": "quantitative"}}}
    state_text = {"transform": [{"filter": "datum.key == 1"},
                                {"calculate": "'m = ' + format(datum.m, '.2f') + ',  \u2113 = '"
                                              " + format(datum.l, '.3f') + ',  o / \u2113 = '"
                                              " + format(datum.o, '.3f')", "as": "text"}],
                  "mark": {"type": "text", "align": "left", "x": 4, "y": -8, "fontSize": 12},
                  "encoding": {"text": {"field": "text"}}}
    top = {"width": 320, "height": 130, "layer": [score_bars, max_rule, state_text]}
    weight_bars = {"mark": {"type": "bar", "color": _BAR},
                   "encoding": {"x": x, "y": {"field": "w", "type": "quantitative",
                                              "title": "weight so far",
                                              "scale": {"domain": [0, 1]}}}}
    final_ticks = {"mark": {"type": "tick", "color": _ACCENT, "thickness": 2},
                   "encoding": {"x": x, "y": {"field": "final", "type": "quantitative"}}}
    bottom = {"width": 320, "height": 130, "layer": [weight_bars, final_ticks]}
    body = {"transform": [{"filter": "datum.t == blocks"}], "vconcat": [top, bottom]}
    return _figure("The online softmax, one block of keys at a time",
                   f"the running maximum, sum and output of the online softmax of one "
                   f"query over {n_keys} keys in blocks of {block_size}", params, body, rows,
                   ["blocks"])


# --- chapter 10: what each MiniLM head looks at ------------------------------------------

DEFAULT_SENTENCE = "The cat sat on the mat because it was tired."


def minilm_heads_figure(text: str = DEFAULT_SENTENCE, *, model: Any = None) -> InteractiveFigure:
    """Every head's attention weights on one sentence, as MiniLM computes them.

    The weights come from :meth:`attncore.pretrained.MiniLM.attention_weights` in float64
    (loaded from the model's package unless ``model`` is given). Controls: range inputs
    for the layer and the head. Each layer's weights travel as one flat list per head,
    which the chart unpacks.

    Returns
    -------
    InteractiveFigure
    """
    from attncore.pretrained import MiniLM

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text: expected a non-empty sentence, got {text!r}")
    if model is None:
        model = MiniLM.load(dtype=np.float64)
    weights = np.asarray(model.attention_weights(text), dtype=np.float64)
    tokens = model.tokenize([text]).tokens[0]
    layers, heads, n, _ = weights.shape
    if n > 24:
        raise ValueError(f"text: expected at most 22 word pieces, got {n - 2}")
    rows = [{"layer": layer + 1, "head": head + 1,
             "w": [_r(w, 3) for w in weights[layer, head].ravel()]}
            for layer in range(layers) for head in range(heads)]
    params = [_range("layer", "layer ", 1, layers, 1),
              _range("head", "head ", 1, heads, 1),
              {"name": "tokens", "value": list(tokens)}]
    unpack = [{"filter": "datum.layer == layer && datum.head == head"},
              {"flatten": ["w"]},
              {"window": [{"op": "row_number", "as": "k"}]},
              {"calculate": f"floor((datum.k - 1) / {n})", "as": "i"},
              {"calculate": f"(datum.k - 1) % {n}", "as": "j"}]
    x = {"field": "j", "type": "ordinal", "title": "key (attended to)",
         "axis": {"labelExpr": "tokens[datum.value]", "labelAngle": -50}}
    y = {"field": "i", "type": "ordinal", "title": "query (attending)",
         "axis": {"labelExpr": "tokens[datum.value]"}}
    cells = {"mark": "rect",
             "encoding": {"x": x, "y": y,
                          "color": {"field": "w", "type": "quantitative", "title": "weight",
                                    "scale": {"domain": [0, 1], "scheme": "viridis"}}}}
    body = {"width": 250, "height": 250, "transform": unpack, "layer": [cells]}
    return _figure("What one MiniLM head attends to",
                   f"attention weights of each of MiniLM's {layers * heads} heads on the "
                   f"sentence {text!r}", params, body, rows, ["layer", "head"])


# --- chapter 13: what each head of a real LLM attends to -----------------------------------

def real_llm_heads_figure(study: Any = None) -> InteractiveFigure:
    """Every head's attention weights on a few short prompts, as SmolLM2-135M computes them,
    with the role its measurements give it.

    ``study`` is :func:`attncore.lab.real_llm.study_heads` of the model (when None,
    :func:`~attncore.lab.real_llm.default_study`, computed once per process). Controls: a
    menu for the prompt, range inputs for the layer and the head. Each map travels as its
    lower triangle in whole percents, one string of numbers per map.

    Returns
    -------
    InteractiveFigure
    """
    from attncore.lab import real_llm

    if study is None:
        study = real_llm.default_study()
    layers, heads = study.roles.shape
    s = study.scores
    rows = []
    for p, maps in enumerate(study.maps):
        low = np.tril_indices(maps.shape[-1])
        for layer in range(layers):
            for head in range(heads):
                role = (f"{study.roles[layer, head]}: first token {s.sink[layer, head]:.2f}, "
                        f"previous {s.previous[layer, head]:.2f}, induction "
                        f"{s.induction[layer, head]:.2f}")
                percents = (str(int(round(100 * w))) for w in maps[layer, head][low])
                rows.append({"p": p, "layer": layer, "head": head, "role": role,
                             "w": " ".join(percents)})
    params = [{"name": "prompt", "value": 0,
               "bind": {"input": "select", "options": list(range(len(study.names))),
                        "labels": list(study.names), "name": "prompt "}},
              _range("layer", "layer ", 0, layers - 1, 0),
              _range("head", "head ", 0, heads - 1, 0),
              {"name": "tokens", "value": [list(t) for t in study.tokens]}]
    # one string of whole percents per map (compact in the stored notebook); lower-triangle
    # index k (from 0) -> row i, column j
    unpack = [{"calculate": "split(datum.w, ' ')", "as": "ws"},
              {"flatten": ["ws"]},
              {"window": [{"op": "row_number", "as": "k"}]},
              {"calculate": "floor((sqrt(8 * (datum.k - 1) + 1) - 1) / 2)", "as": "i"},
              {"calculate": "datum.k - 1 - datum.i * (datum.i + 1) / 2", "as": "j"},
              {"calculate": "toNumber(datum.ws) / 100", "as": "weight"}]
    x = {"field": "j", "type": "ordinal", "title": "key (attended to)",
         "axis": {"labelExpr": "tokens[prompt][datum.value]", "labelAngle": -50}}
    y = {"field": "i", "type": "ordinal", "title": "query (attending)",
         "axis": {"labelExpr": "tokens[prompt][datum.value]"}}
    cells = {"transform": unpack, "mark": "rect", "width": 280, "height": 280,
             "encoding": {"x": x, "y": y,
                          "color": {"field": "weight", "type": "quantitative",
                                    "title": "weight",
                                    "scale": {"domain": [0, 1], "scheme": "viridis"}}}}
    role = {"mark": {"type": "text", "align": "left", "fontSize": 12},
            "encoding": {"text": {"field": "role"}, "x": {"value": 0}},
            "width": 280, "height": 16}
    body = {"transform": [{"filter": "datum.p == prompt && datum.layer == layer && "
                                     "datum.head == head"}],
            "vconcat": [role, cells]}
    return _figure("What one head of SmolLM2 attends to",
                   f"attention weights of each of SmolLM2's {layers * heads} heads on "
                   f"{len(study.names)} short prompts, with each head's measured role",
                   params, body, rows, ["prompt", "layer", "head"])


FIGURES: dict[str, Any] = {
    "softmax_saturation_figure": softmax_saturation_figure,
    "mask_figure": mask_figure,
    "rope_rotation_figure": rope_rotation_figure,
    "online_softmax_figure": online_softmax_figure,
    "minilm_heads_figure": minilm_heads_figure,
    "real_llm_heads_figure": real_llm_heads_figure,
}
"""Every figure of this module by name (the tests draw each one)."""

__all__: Sequence[str] = ["InteractiveFigure", "VEGALITE_MIME", *FIGURES]
