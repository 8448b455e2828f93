"""Interactive figures: Vega-Lite charts of data computed here, driven by form controls.

Each function computes its data with attncore (NumPy, float64, seeded) and returns an
:class:`InteractiveFigure`. Its output is a Vega-Lite 5 specification with that data inlined,
a still picture of the figure in its starting state (PNG, drawn with matplotlib) and a line
of plain text. The chart's controls are Vega-Lite parameters bound to HTML sliders and
checkboxes, so the figure needs no kernel once it is drawn: every state it can show is
precomputed, and the controls only filter the data. The chart is as wide as the page's column
(``WIDTH``; the website widens it to its column on any screen), and states what the controls
chose in its title.

Where it renders:

* JupyterLab draws the ``application/vnd.vegalite.v5+json`` output with its built-in Vega
  renderer, in trusted and untrusted notebooks alike (it is not HTML with scripts, which
  JupyterLab runs only in notebooks the reader has trusted), in its dark theme too; VS Code
  and nteract do the same. That renderer stores a picture of a chart beside it when the
  output has none, which would mark a notebook changed as soon as it is opened: the still
  picture is there so that it has one.
* The course's website draws it with the Vega, Vega-Lite and vega-embed scripts that the site
  serves itself (``_ext/offline_vega.py``), in the page's light or dark colours.
* A frontend with no Vega renderer (nbconvert's HTML, GitHub's preview) shows the still
  picture.

Keyboard: a slider is written as the generic input ``"Range"`` (HTML reads the type as
``range``), because Vega copies the attributes of a generic input onto the element and not
those of its own range input: ``data-lm-suppress-shortcuts`` then keeps JupyterLab's
notebook shortcuts (arrow keys move between cells) off the focused slider, so its arrow keys
move the slider, in JupyterLab as in a browser. Such a slider hands its value to the chart as
a string: the chart's expressions read it through ``toNumber``. Checkboxes keep Vega's own
element (Space, which toggles them, is no notebook shortcut); menus (``select``) are not used,
as JupyterLab takes their arrow keys.

The output holds no ids, timestamps or memory addresses and its numbers are rounded, so a fresh
run stores exactly the same specification.
"""

from __future__ import annotations

import base64
import io
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

VEGALITE_MIME = "application/vnd.vegalite.v5+json"
"""The MIME type of the figures' rich output (JupyterLab 4 renders Vega-Lite 3 to 5)."""

EMBED_OPTIONS = {"actions": False, "renderer": "svg"}
"""vega-embed options: no export menu; SVG, so that what is drawn can be read and compared."""

STILL_INCHES = (6.4, 3.2)
"""The still picture's size in inches; stored at 200 dpi and shown at 100 (sharp on 2x)."""

_CONFIG = {
    "axis": {"labelFontSize": 11, "titleFontSize": 12},
    "title": {"fontSize": 13, "anchor": "start"},
    "view": {"stroke": None},
}
WIDTH = 660
"""The chart's width in pixels, axes included: the website's column (whose script widens the
chart to the column's width, ``"container"``, whatever the screen); JupyterLab draws an output
before it is on the page, where a ``"container"`` width would be measured as 0."""
# The width includes the axes and the title.
_FIT = {"autosize": {"type": "fit-x", "contains": "padding"}}
_BAR = "#3b6fb6"          # readable on a light page and on a dark one
_ACCENT = "#d9622b"
_GREY = "#a0a0a0"         # removed or not yet seen: a mid grey, visible on white and on #333


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
    still : callable, optional
        Draws the figure's starting state on a matplotlib ``Figure`` (the ``image/png``
        output); ``None`` leaves the picture out.
    """

    spec: dict
    description: str
    controls: list[str] = field(default_factory=list)
    still: Callable[[Any], None] | None = field(default=None, repr=False, compare=False)

    def still_png(self) -> bytes:
        """The still picture, PNG bytes: 200 dpi, white background, no date or version."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=STILL_INCHES, layout="constrained", facecolor="white")
        self.still(fig)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=200, facecolor="white",
                    metadata={"Software": None})
        return buffer.getvalue()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        data = {VEGALITE_MIME: self.spec, "text/plain": self.description}
        metadata: dict = {VEGALITE_MIME: {"embed_options": dict(EMBED_OPTIONS)}}
        if self.still is not None:
            data["image/png"] = base64.b64encode(self.still_png()).decode("ascii")
            # shown at 100 dpi: half its pixels, like the chapters' retina figures
            metadata["image/png"] = {"width": int(STILL_INCHES[0] * 100),
                                     "height": int(STILL_INCHES[1] * 100)}
        return data, metadata


def _figure(title: Any, description: str, params: list[dict], body: dict,
            data: list[dict], controls: list[str],
            still: Callable[[Any], None] | None = None) -> InteractiveFigure:
    title = dict(title)
    narrow_break = title.pop("narrow_break", None)
    spec = {"description": description, "title": title, "data": {"values": data},
            "params": params, "config": _CONFIG, **_FIT, **body}
    if narrow_break:
        # read by the website's script only (Vega-Lite leaves usermeta alone)
        spec["usermeta"] = {"narrowTitleBreak": narrow_break}
    # (the plain-text stand-in, in lines that fit the content column)
    text = textwrap.fill(f"Interactive figure: {description}.", width=78)
    return InteractiveFigure(spec, text, controls, still)


def _range(name: str, label: str, lo: int, hi: int, value: int, step: int = 1) -> dict:
    # "Range", not "range": see the module's docstring (keyboard)
    return {"name": name, "value": value,
            "bind": {"input": "Range", "min": lo, "max": hi, "step": step, "name": label,
                     "data-lm-suppress-shortcuts": "true"}}


def _checkbox(name: str, label: str, value: bool) -> dict:
    return {"name": name, "value": value, "bind": {"input": "checkbox", "name": label}}


def _title(expr: str, narrow_break: str | None = None) -> dict:
    """A title that the chart's expression ``expr`` writes (it follows the controls).

    ``narrow_break``: where a title too long for a phone's column breaks into lines (every
    occurrence, which is dropped); the website breaks it there when the column is narrower
    than ``WIDTH``, JupyterLab (whose output is ``WIDTH`` wide) never."""
    title: dict = {"text": {"expr": expr}}
    if narrow_break:
        title["narrow_break"] = narrow_break
    return title


# --- chapter 2: the softmax saturates as d_k grows ---------------------------------------

def softmax_saturation_figure(*, n_keys: int = 10, max_log2_d_k: int = 10,
                              seed: int = 0) -> InteractiveFigure:
    """One query's softmax weights over ``n_keys`` keys as ``d_k`` grows, scaled or not.

    The query and keys have independent standard normal components; ``d_k`` runs over the
    powers of two up to ``2 ** max_log2_d_k``, each using the first ``d_k`` components of the
    same vectors. Controls: a slider for ``log2 d_k`` and a checkbox that divides the
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
    rows, start = [], min(6, max_log2_d_k)
    for e in range(max_log2_d_k + 1):
        d_k = 2 ** e
        s = k[:, :d_k] @ q[:d_k]                                    # (n_keys,)
        raw, scaled = softmax(s), softmax(s / math.sqrt(d_k))
        for j in range(n_keys):
            rows.append({"e": e, "d_k": d_k, "key": j + 1, "raw": _r(raw[j]),
                         "scaled": _r(scaled[j])})
    params = [_range("log2_dk", "log\u2082 d\u2096 ", 0, max_log2_d_k, start),
              _checkbox("divide", "divide the scores by \u221ad\u2096 ", False)]
    pick = [{"filter": "datum.e == toNumber(log2_dk)"},
            {"calculate": "divide ? datum.scaled : datum.raw", "as": "weight"}]
    bars = {"mark": {"type": "bar", "color": _BAR},
            "encoding": {"x": {"field": "key", "type": "ordinal", "title": "key j",
                               "axis": {"labelAngle": 0}},
                         "y": {"field": "weight", "type": "quantitative",
                               "title": "softmax weight",
                               "scale": {"domain": [0, 1]}}}}
    body = {"width": WIDTH, "height": 200, "transform": pick, "layer": [bars]}
    title = _title("'One query\u2019s softmax weights at d\u2096 = ' + pow(2, toNumber(log2_dk))"
                   " + (divide ? ', scores divided by \u221ad\u2096' : ', raw scores')",
                   narrow_break=", ")

    def still(fig):
        ax = fig.subplots()
        picked = [r["raw"] for r in rows if r["e"] == start]
        ax.bar(range(1, n_keys + 1), picked, color=_BAR)
        ax.set(ylim=(0, 1), xlabel="key j", ylabel="softmax weight",
               title=f"One query\u2019s softmax weights at d\u2096 = {2 ** start}, raw scores")
        ax.set_xticks(range(1, n_keys + 1))

    return _figure(title, f"softmax weights of one query over {n_keys} keys as d_k grows, "
                   "with and without dividing the scores by sqrt(d_k)", params, body, rows,
                   ["log2_dk", "divide"], still)


# --- chapter 4: what a mask removes --------------------------------------------------------

def mask_figure(*, n: int = 6, d_k: int = 4, seed: int = 0) -> InteractiveFigure:
    """The attention weights of ``n`` tokens under a causal mask, a padding mask, or both.

    Controls: a checkbox for the causal mask and a slider for the number of real (unpadded)
    keys: the keys from that number on are padding, and the padding mask removes them (with
    every key real, there is no padding). The masks combine by logical AND. Removed cells are
    drawn grey and empty; every row of the weights sums to 1 over the keys it may see.

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
    rows, grids = [], {}
    for causal in (False, True):
        for length in range(1, n + 1):
            allowed = padding_mask([length], n, n_q=n)[0]
            if causal:
                allowed = allowed & causal_mask(n, n)
            w = softmax(np.where(allowed, scores, -np.inf))
            grids[causal, length] = np.where(allowed, w, np.nan)
            for i in range(n):
                for j in range(n):
                    rows.append({"causal": causal, "length": length, "i": i, "j": j,
                                 "allowed": bool(allowed[i, j]),
                                 "w": _r(w[i, j], 3) if allowed[i, j] else None})
    params = [_checkbox("causal", "causal mask ", True),
              _range("length", "real keys (the rest is padding) ", 1, n, n)]
    pick = [{"filter": "datum.causal == causal && datum.length == toNumber(length)"}]
    x = {"field": "j", "type": "ordinal", "title": "key j", "axis": {"labelAngle": 0}}
    y = {"field": "i", "type": "ordinal", "title": "query i"}
    cells = {"mark": {"type": "rect"},
             "encoding": {"x": x, "y": y,
                          "color": {"condition": {"test": "datum.allowed", "field": "w",
                                                  "type": "quantitative",
                                                  "scale": {"domain": [0, 1],
                                                            "scheme": "viridis"},
                                                  "title": "weight"},
                                    "value": _GREY}}}
    text = {"transform": [{"filter": "datum.allowed"}],
            "mark": {"type": "text", "fontSize": 11},
            "encoding": {"x": x, "y": y, "text": {"field": "w", "format": ".2f"},
                         "color": {"condition": {"test": "datum.w < 0.6", "value": "white"},
                                   "value": "black"}}}
    body = {"width": WIDTH, "height": 260, "transform": pick, "layer": [cells, text],
            "config": {**_CONFIG, "scale": {"bandPaddingInner": 0.06}}}
    title = _title(f"(causal ? 'Causal mask' : 'No causal mask') + (toNumber(length) < {n}"
                   f" ? ', padding from key ' + length : ', no padding') + ' (grey: removed)'",
                   narrow_break=", ")

    def still(fig):
        import matplotlib as mpl

        ax, w = fig.subplots(), grids[True, n]
        cmap = mpl.colormaps["viridis"].with_extremes(bad=_GREY)
        image = ax.imshow(np.ma.masked_invalid(w), cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for i, j in zip(*np.nonzero(~np.isnan(w))):
            ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if w[i, j] < 0.6 else "black")
        ax.set(xticks=range(n), yticks=range(n), xlabel="key j", ylabel="query i",
               title="Causal mask, no padding (grey: removed)")
        fig.colorbar(image, ax=ax, label="weight")

    return _figure(title, f"attention weights of {n} tokens under a causal mask, a padding "
                   "mask or both", params, body, rows, ["causal", "length"], still)


# --- chapter 7: how RoPE turns a pair of coordinates -------------------------------------

def rope_rotation_figure(*, d: int = 8, n_positions: int = 32,
                         base: float = 10000.0) -> InteractiveFigure:
    """Where RoPE moves one pair of coordinates of a fixed vector, position by position.

    The same vector sits at positions ``0 .. n_positions - 1`` and goes through
    :func:`attncore.rope`; pair ``i`` holds coordinates ``(i, i + d/2)`` and turns by
    ``m * base ** (-2i / d)`` at position ``m``. Controls: sliders for the position and for
    the pair. The pale dots are the pair at every position.

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
    start = min(3, n_positions - 1)
    params = [_range("position", "position m ", 0, n_positions - 1, start),
              _range("pair", "pair i ", 0, half - 1, 0),
              {"name": "omegas", "value": [_r(f, 8) for f in freqs]}]
    # y spans [-1.2, 1.2]; x as much more as the chart is wider than high, so that a circle
    # stays round at any width
    y_axis = {"scale": {"domain": [-1.2, 1.2]}, "type": "quantitative"}
    x_axis = {"scale": {"domainMin": {"expr": "-1.2 * width / height"},
                        "domainMax": {"expr": "1.2 * width / height"}},
              "type": "quantitative"}
    trail = {"transform": [{"filter": "datum.pair == toNumber(pair)"}],
             "mark": {"type": "point", "filled": True, "size": 30, "opacity": 0.5,
                      "color": _BAR},
             "encoding": {"x": {"field": "x", **x_axis, "title": "coordinate i"},
                          "y": {"field": "y", **y_axis, "title": "coordinate i + d/2"}}}
    now = [{"filter": "datum.pair == toNumber(pair) && datum.m == toNumber(position)"},
           {"calculate": "0", "as": "x0"}, {"calculate": "0", "as": "y0"}]
    arrow = {"transform": now, "mark": {"type": "rule", "strokeWidth": 3, "color": _ACCENT},
             "encoding": {"x": {"field": "x0", **x_axis}, "y": {"field": "y0", **y_axis},
                          "x2": {"field": "x"}, "y2": {"field": "y"}}}
    head = {"transform": now, "mark": {"type": "point", "filled": True, "size": 120,
                                       "color": _ACCENT},
            "encoding": {"x": {"field": "x", **x_axis}, "y": {"field": "y", **y_axis}}}
    body = {"width": WIDTH, "height": 300, "layer": [trail, arrow, head]}
    title = _title("'Pair ' + pair + ' (\u03c9 = ' + format(omegas[toNumber(pair)], '.3g')"
                   " + ') at position ' + position + ': turned by m\u03c9 = '"
                   " + format(toNumber(position) * omegas[toNumber(pair)], '.2f') + ' rad'",
                   narrow_break=": ")

    def still(fig):
        ax = fig.subplots()
        pts = [(r["x"], r["y"]) for r in rows if r["pair"] == 0]
        ax.scatter(*zip(*pts), s=14, alpha=0.5, color=_BAR)
        tip = next((r["x"], r["y"]) for r in rows if r["pair"] == 0 and r["m"] == start)
        ax.plot([0, tip[0]], [0, tip[1]], color=_ACCENT, lw=3)
        ax.scatter([tip[0]], [tip[1]], s=60, color=_ACCENT)
        ax.set(ylim=(-1.2, 1.2), aspect="equal", adjustable="datalim", xlabel="coordinate i",
               ylabel="coordinate i + d/2",
               title=f"Pair 0 (\u03c9 = {freqs[0]:.3g}) at position {start}: "
                     f"turned by m\u03c9 = {start * freqs[0]:.2f} rad")

    return _figure(title, f"one pair of coordinates of a vector in {d} dimensions, turned "
                   f"by RoPE at positions 0 to {n_positions - 1}", params, body, rows,
                   ["position", "pair"], still)


# --- chapter 8: the online softmax, block by block ---------------------------------------

def online_softmax_figure(*, n_keys: int = 16, block_size: int = 4,
                          seed: int = 0) -> InteractiveFigure:
    """The running state ``(m, l, o)`` of one query row after each block of keys (the
    chapter's ``(m, ell, o)``).

    The state of each block comes from :func:`attncore.softmax_state` and the running state
    from :func:`attncore.merge_softmax_states`; values ``v_j`` are scalars. The top panel shows
    the scores, the keys seen so far and the running maximum ``m``; the bottom panel the
    weights ``exp(s_j - m) / l`` the state implies so far, against the final ones (ticks);
    the title gives ``m``, ``l`` and the output ``o / l`` so far.
    Control: a slider for the number of blocks seen.

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
    rows, states, state = [], [], None
    for t in range(1, n_blocks + 1):
        lo, hi = (t - 1) * block_size, t * block_size
        part = softmax_state(s[:, lo:hi], v[lo:hi])
        state = part if state is None else merge_softmax_states(state, part)
        m, l = float(state.max[0, 0]), float(state.sum[0, 0])
        out = float(finalize_softmax_state(state)[0, 0])
        states.append({"m": _r(m, 3), "l": _r(l, 3), "o": _r(out, 3)})
        for j in range(n_keys):
            seen = j < hi
            rows.append({"t": t, "key": j + 1, "s": _r(s[0, j], 3), "seen": seen,
                         "w": _r(math.exp(s[0, j] - m) / l, 3) if seen else 0.0,
                         "final": _r(final[j], 3), "m": _r(m, 3)})
    params = [_range("blocks", "blocks of keys seen ", 1, n_blocks, 1),
              {"name": "states", "value": states}]
    x = {"field": "key", "type": "ordinal", "title": "key j", "axis": {"labelAngle": 0}}
    score_bars = {"mark": {"type": "bar"},
                  "encoding": {"x": x, "y": {"field": "s", "type": "quantitative",
                                             "title": "score s\u2c7c"},
                               "color": {"condition": {"test": "datum.seen",
                                                       "value": _BAR},
                                         "value": _GREY}}}
    max_rule = {"transform": [{"filter": "datum.key == 1"}],
                "mark": {"type": "rule", "color": _ACCENT, "strokeWidth": 2,
                         "strokeDash": [6, 3]},
                "encoding": {"y": {"field": "m", "type": "quantitative"}}}
    top = {"width": WIDTH, "height": 130, "layer": [score_bars, max_rule]}
    weight_bars = {"mark": {"type": "bar", "color": _BAR},
                   "encoding": {"x": x, "y": {"field": "w", "type": "quantitative",
                                              "title": "weight so far",
                                              "scale": {"domain": [0, 1]}}}}
    final_ticks = {"mark": {"type": "tick", "color": _ACCENT, "thickness": 2},
                   "encoding": {"x": x, "y": {"field": "final", "type": "quantitative"}}}
    bottom = {"width": WIDTH, "height": 130, "layer": [weight_bars, final_ticks]}
    body = {"transform": [{"filter": "datum.t == toNumber(blocks)"}], "vconcat": [top, bottom]}
    now = "states[toNumber(blocks) - 1]"
    title = _title(f"'After ' + blocks + ' of {n_blocks} blocks: m = ' + format({now}.m, '.2f')"
                   f" + ',  \u2113 = ' + format({now}.l, '.3f') + ',  o / \u2113 = '"
                   f" + format({now}.o, '.3f')", narrow_break=": ")

    def still(fig):
        top_ax, bottom_ax = fig.subplots(2, 1, sharex=True)
        first = [r for r in rows if r["t"] == 1]
        keys = [r["key"] for r in first]
        top_ax.bar(keys, [r["s"] for r in first],
                   color=[_BAR if r["seen"] else _GREY for r in first])
        top_ax.axhline(states[0]["m"], color=_ACCENT, lw=2, ls="--")
        top_ax.set(ylabel="score s\u2c7c",
                   title=f"After 1 of {n_blocks} blocks: m = {states[0]['m']:.2f},  "
                         f"\u2113 = {states[0]['l']:.3f},  o / \u2113 = {states[0]['o']:.3f}")
        bottom_ax.bar(keys, [r["w"] for r in first], color=_BAR)
        bottom_ax.scatter(keys, [r["final"] for r in first], marker="_", s=120,
                          color=_ACCENT)
        bottom_ax.set(ylim=(0, 1), xlabel="key j", ylabel="weight so far", xticks=keys)

    return _figure(title, f"the running maximum, sum and output of the online softmax of one "
                   f"query over {n_keys} keys in blocks of {block_size}", params, body, rows,
                   ["blocks"], still)


# --- chapter 11: what each MiniLM head looks at ------------------------------------------

DEFAULT_SENTENCE = "The cat sat on the mat because it was tired."


def minilm_heads_figure(text: str = DEFAULT_SENTENCE, *, model: Any = None) -> InteractiveFigure:
    """Every head's attention weights on one sentence, as MiniLM computes them.

    The weights come from :meth:`attncore.pretrained.MiniLM.attention_weights` in float64
    (loaded from the model's package unless ``model`` is given). Controls: sliders for the
    layer and the head. Each layer's weights travel as one flat list per head, which the
    chart unpacks.

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
    unpack = [{"filter": "datum.layer == toNumber(layer) && datum.head == toNumber(head)"},
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
    body = {"width": WIDTH, "height": 320, "transform": unpack, "layer": [cells]}
    title = _title("'What head ' + head + ' of layer ' + layer + ' attends to'")

    def still(fig):
        from attncore.lab.plotting import plot_attention

        ax = plot_attention(weights[0, 0], query_labels=tokens, key_labels=tokens,
                            ax=fig.subplots(), title="What head 1 of layer 1 attends to")
        ax.set_aspect("auto")
        for label in ax.get_xticklabels():
            label.set(rotation=50, ha="right", rotation_mode="anchor")

    return _figure(title, f"attention weights of each of MiniLM's {layers * heads} heads on "
                   f"the sentence {text!r}", params, body, rows, ["layer", "head"], still)


# --- chapter 13: what each head of a real LLM attends to -----------------------------------

def real_llm_heads_figure(study: Any = None) -> InteractiveFigure:
    """Every head's attention weights on a few short prompts, as SmolLM2-135M computes them,
    with the role its measurements give it.

    ``study`` is :func:`attncore.lab.real_llm.study_heads` of the model (when None,
    :func:`~attncore.lab.real_llm.default_study`, computed once per process). Controls:
    sliders for the prompt, the layer and the head (the title names the prompt). Each map travels as its
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
                # two short lines, so that they fit a phone's column
                role = (f"{study.roles[layer, head]}:\nfirst token {s.sink[layer, head]:.2f}, "
                        f"previous {s.previous[layer, head]:.2f}, induction "
                        f"{s.induction[layer, head]:.2f}")
                percents = (str(int(round(100 * w))) for w in maps[layer, head][low])
                rows.append({"p": p, "layer": layer, "head": head, "role": role,
                             "w": " ".join(percents)})
    params = [_range("prompt", "prompt ", 0, len(study.names) - 1, 0),
              _range("layer", "layer ", 0, layers - 1, 0),
              _range("head", "head ", 0, heads - 1, 0),
              {"name": "tokens", "value": [list(t) for t in study.tokens]},
              {"name": "names", "value": list(study.names)}]
    # one string of whole percents per map (compact in the stored notebook); lower-triangle
    # index k (from 0) -> row i, column j
    unpack = [{"calculate": "split(datum.w, ' ')", "as": "ws"},
              {"flatten": ["ws"]},
              {"window": [{"op": "row_number", "as": "k"}]},
              {"calculate": "floor((sqrt(8 * (datum.k - 1) + 1) - 1) / 2)", "as": "i"},
              {"calculate": "datum.k - 1 - datum.i * (datum.i + 1) / 2", "as": "j"},
              {"calculate": "toNumber(datum.ws) / 100", "as": "weight"}]
    x = {"field": "j", "type": "ordinal", "title": "key (attended to)",
         "axis": {"labelExpr": "tokens[toNumber(prompt)][datum.value]", "labelAngle": -50}}
    y = {"field": "i", "type": "ordinal", "title": "query (attending)",
         "axis": {"labelExpr": "tokens[toNumber(prompt)][datum.value]"}}
    cells = {"transform": unpack, "mark": "rect", "width": WIDTH, "height": 280,
             "encoding": {"x": x, "y": y,
                          "color": {"field": "weight", "type": "quantitative",
                                    "title": "weight",
                                    "scale": {"domain": [0, 1], "scheme": "viridis"},
                                    # below the map, not beside it: it stays in a
                                    # phone's column
                                    "legend": {"orient": "bottom",
                                               "direction": "horizontal"}}}}
    role = {"mark": {"type": "text", "align": "left", "baseline": "top", "fontSize": 12,
                     "lineBreak": "\n"},
            "encoding": {"text": {"field": "role"}, "x": {"value": 0}, "y": {"value": 0}},
            "width": WIDTH, "height": 32}
    body = {"transform": [{"filter": "datum.p == toNumber(prompt) && "
                                     "datum.layer == toNumber(layer) && "
                                     "datum.head == toNumber(head)"}],
            "vconcat": [role, cells]}
    title = _title("'Head ' + head + ' of layer ' + layer + ', prompt: ' + "
                   "names[toNumber(prompt)]", narrow_break=", ")

    def still(fig):
        from attncore.lab.plotting import plot_attention

        tokens = list(study.tokens[0])
        ax = plot_attention(study.maps[0][0, 0], query_labels=tokens, key_labels=tokens,
                            ax=fig.subplots(),
                            title=f"Head 0 of layer 0, prompt: {study.names[0]}")
        ax.set_aspect("auto")
        for label in ax.get_xticklabels():
            label.set(rotation=50, ha="right", rotation_mode="anchor")

    return _figure(title,
                   f"attention weights of each of SmolLM2's {layers * heads} heads on "
                   f"{len(study.names)} short prompts, with each head's measured role",
                   params, body, rows, ["prompt", "layer", "head"], still)


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
