"""Block diagrams of attention: boxes for the operations, arrows for the data, shapes on arrows.

Two drawn figures (matplotlib patches and arrows, not matrices):

* :func:`draw_attention_diagram` -- scaled dot-product attention: ``Q``, ``K``, ``V`` ->
  ``Q K^T`` -> scale by ``1/sqrt(d_k)`` -> optional mask -> row-wise softmax -> times ``V``
  -> output, with ``(n_q, d_k)``, ``(n_k, d_k)``, ``(n_k, d_v)``, ``(n_q, n_k)`` and
  ``(n_q, d_v)`` written on the arrows.
* :func:`draw_multihead_diagram` -- multi-head self-attention: ``X`` -> the projections
  ``W_Q``, ``W_K``, ``W_V`` -> split into heads, ``(B, N, d_model) -> (B, H, N, d_k)`` ->
  scaled dot-product attention in every head -> concatenate the heads -> output projection
  ``W_O`` -> ``(B, N, d_model)``.

Both are sized for the book's content column (about 7.2 inches, 720 pixels at 100 dpi) with
text of 9 points or more. Every artist carries a ``gid`` that says what it is, so tests can
read the figure back: ``"box:<name>"`` for a box and the texts written in it, ``"arrow"`` for
an arrow and ``"shape"`` for the shape written beside an arrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATTENTION_SHAPES",
    "MULTIHEAD_SHAPES",
    "draw_attention_diagram",
    "draw_multihead_diagram",
]

ATTENTION_SHAPES = ("(n_q, d_k)", "(n_k, d_k)", "(n_k, d_v)", "(n_q, n_k)", "(n_q, d_v)")
"""The shapes written on the arrows of :func:`draw_attention_diagram`, as plain text."""

MULTIHEAD_SHAPES = ("(B, N, d_model)", "(B, H, N, d_k)", "(B, H, N, d_v)", "(B, N, H d_v)")
"""The shapes written on the arrows of :func:`draw_multihead_diagram`, as plain text."""

WIDTH_IN = 7.2          # the content column, in inches at 100 dpi
TITLE_PT = 12           # the operation's name in a box
DETAIL_PT = 11          # the line under it, and the shapes on the arrows
NOTE_PT = 10.5          # notes in the margin

# Okabe-Ito hues, lightened for fills (readable with the common colour-vision deficiencies).
FILL = {"input": "#E8E8E8", "matmul": "#CFE6F5", "elementwise": "#FBE3B8",
        "softmax": "#F6D1C0", "output": "#CDEBDD", "reshape": "#E9DDF0"}
EDGE = "#333333"
ARROW = "#333333"


@dataclass(frozen=True)
class _Box:
    name: str
    x: float        # centre
    y: float
    w: float
    h: float
    stack: float = 0.0      # how far copies drawn behind the box reach above it

    @property
    def top(self) -> float:
        return self.y + self.h / 2 + self.stack

    @property
    def left(self) -> float:
        return self.x - self.w / 2

    @property
    def right(self) -> float:
        return self.x + self.w / 2

    @property
    def bottom(self) -> float:
        return self.y - self.h / 2


def _canvas(ax: Any, height: float) -> Any:
    """An axes whose data units are inches of a figure ``WIDTH_IN`` wide, frame hidden."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH_IN, height))
        ax.figure.subplots_adjust(left=0, right=1, bottom=0, top=1)
    ax.set_xlim(0, WIDTH_IN)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return ax


def _box(ax: Any, name: str, x: float, y: float, w: float, h: float, title: str,
         detail: str | None = None, kind: str = "matmul", dashed: bool = False,
         stack: int = 0) -> _Box:
    """A rounded box centred at (x, y) with a title and an optional second line.

    ``stack`` draws that many copies behind the box, offset up and to the right: one
    operation done once per head.
    """
    from matplotlib.patches import FancyBboxPatch

    pad, step = 0.06, 0.08
    for s in range(stack, 0, -1):
        ax.add_patch(FancyBboxPatch((x - w / 2 + pad + step * s, y - h / 2 + pad + step * s),
                                    w - 2 * pad, h - 2 * pad, boxstyle=f"round,pad={pad}",
                                    facecolor=FILL[kind], edgecolor=EDGE, linewidth=0.8,
                                    gid=f"box:{name}", zorder=1))
    ax.add_patch(FancyBboxPatch((x - w / 2 + pad, y - h / 2 + pad), w - 2 * pad, h - 2 * pad,
                                boxstyle=f"round,pad={pad}", facecolor=FILL[kind],
                                edgecolor=EDGE, linewidth=1.1,
                                linestyle=(0, (4, 2.5)) if dashed else "solid",
                                gid=f"box:{name}", zorder=2))
    if detail is None:
        ax.text(x, y, title, ha="center", va="center", fontsize=TITLE_PT,
                fontweight="bold", gid=f"box:{name}", zorder=3)
    else:
        ax.text(x, y + 0.11, title, ha="center", va="center", fontsize=TITLE_PT,
                fontweight="bold", gid=f"box:{name}", zorder=3)
        ax.text(x, y - 0.14, detail, ha="center", va="center", fontsize=DETAIL_PT,
                gid=f"box:{name}", zorder=3)
    return _Box(name, x, y, w, h, step * stack)


def _arrow(ax: Any, start: tuple[float, float], end: tuple[float, float],
           shape: str | None = None, side: str = "right", at: float = 0.5,
           connection: str = "arc3") -> None:
    """An arrow from ``start`` to ``end``; ``shape`` is written beside it, on ``side``."""
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=13,
                                 linewidth=1.3, color=ARROW, shrinkA=0, shrinkB=1,
                                 connectionstyle=connection, gid="arrow", zorder=2))
    if shape is not None:
        x = start[0] + at * (end[0] - start[0])
        y = start[1] + at * (end[1] - start[1])
        dx = 0.1 if side == "right" else -0.1
        ax.text(x + dx, y, _math(shape), ha="left" if side == "right" else "right",
                va="center", fontsize=DETAIL_PT, color="#1F3F66", gid="shape", zorder=3)


def _math(shape: str) -> str:
    """``"(n_q, d_k)"`` -> mathtext with proper subscripts, e.g. ``$(n_q,\\ d_k)$``."""
    body = shape.replace("d_model", r"d_{\mathrm{model}}").replace("H d_v", r"H\,d_v")
    return "$" + body.replace(", ", r",\ ") + "$"


def draw_attention_diagram(ax: Any = None) -> Any:
    """Draw scaled dot-product attention as a block diagram; return the matplotlib Axes.

    ``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V`` read from top to bottom: the
    queries ``Q`` ``(n_q, d_k)`` and keys ``K`` ``(n_k, d_k)`` meet in the product
    ``Q K^T`` ``(n_q, n_k)``, which is scaled by ``1/sqrt(d_k)``, optionally masked, and
    turned into weights by a softmax along each row; the weights ``(n_q, n_k)`` times the
    values ``V`` ``(n_k, d_v)`` give the output ``(n_q, d_v)``.

    Parameters
    ----------
    ax : matplotlib Axes, optional
        Where to draw. Its data coordinates are set to inches of a figure 7.2 inches wide
        and 6.3 high, and text keeps its size in points, so an axes of about that size
        fits best; by default a new figure of that size is made.

    Returns
    -------
    matplotlib.axes.Axes
    """
    height = 6.3
    ax = _canvas(ax, height)
    chain_x, v_x = 3.0, 6.05          # the main column, and the column of V
    bw, bh = 2.5, 0.62                # box width and height
    levels = [5.9 - 0.92 * i for i in range(7)]

    q = _box(ax, "Q", chain_x - 0.75, levels[0], 1.2, bh, "Q", "queries", kind="input")
    k = _box(ax, "K", chain_x + 0.75, levels[0], 1.2, bh, "K", "keys", kind="input")
    v = _box(ax, "V", v_x, levels[0], 1.2, bh, "V", "values", kind="input")
    scores = _box(ax, "scores", chain_x, levels[1], bw, bh, "MatMul", r"$S = QK^\top$")
    scale = _box(ax, "scale", chain_x, levels[2], bw, bh, "Scale",
                 r"$S\,/\sqrt{d_k}$", kind="elementwise")
    mask = _box(ax, "mask", chain_x, levels[3], bw, bh, "Mask (optional)",
                r"$-\infty$ where not allowed", kind="elementwise", dashed=True)
    soft = _box(ax, "softmax", chain_x, levels[4], bw, bh, "Softmax",
                "along each row", kind="softmax")
    left, right = chain_x - bw / 2, v_x + 0.6
    mix = _box(ax, "weighted_sum", (left + right) / 2, levels[5], right - left, bh,
               "MatMul", r"$A\,V$")
    out = _box(ax, "output", chain_x, levels[6], bw, bh, "Output",
               "one row per query", kind="output")

    _arrow(ax, (q.x, q.bottom), (q.x, scores.top), "(n_q, d_k)", side="left")
    _arrow(ax, (k.x, k.bottom), (k.x, scores.top), "(n_k, d_k)", side="right")
    for upper, lower in [(scores, scale), (scale, mask), (mask, soft), (soft, mix)]:
        _arrow(ax, (chain_x, upper.bottom), (chain_x, lower.top), "(n_q, n_k)")
    _arrow(ax, (v.x, v.bottom), (v.x, mix.top), "(n_k, d_v)", side="left", at=0.5)
    _arrow(ax, (chain_x, mix.bottom), (chain_x, out.top), "(n_q, d_v)")

    # What each step means, in the margin beside it.
    notes = {scores: "entry $(i, j)$ is\n$q_i \\cdot k_j$",
             soft: "weights $A$:\neach row sums to 1",
             mix: "row $i$: a weighted\naverage of $V$'s rows"}
    for box, note in notes.items():
        ax.text(0.05, box.y, note, ha="left", va="center", fontsize=NOTE_PT,
                color="#444444", gid="note", linespacing=1.3, zorder=3)
    return ax


def draw_multihead_diagram(ax: Any = None) -> Any:
    """Draw multi-head self-attention as a block diagram; return the matplotlib Axes.

    The input ``X`` ``(B, N, d_model)`` (a batch of ``B`` sequences of ``N`` tokens) is
    projected three times, ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V``; each projection is
    split into ``H`` heads, ``(B, N, d_model) -> (B, H, N, d_k)``; every head runs scaled
    dot-product attention on its own slice; the heads' outputs ``(B, H, N, d_v)`` are
    concatenated back to ``(B, N, H d_v)`` and the output projection ``W_O`` maps them to
    ``(B, N, d_model)``. Usually (and in attncore) ``d_k = d_v = d_model / H``.

    Parameters
    ----------
    ax : matplotlib Axes, optional
        Where to draw. Its data coordinates are set to inches of a figure 7.2 inches wide
        and 6.9 high, and text keeps its size in points, so an axes of about that size
        fits best; by default a new figure of that size is made.

    Returns
    -------
    matplotlib.axes.Axes
    """
    height = 6.9
    ax = _canvas(ax, height)
    cols = [1.25, 3.6, 5.75]
    bw, bh = 1.85, 0.62
    # The attention box has copies stacked behind it: a longer arrow into it.
    levels = [6.5 - 0.95 * i - (0.2 if i >= 3 else 0.0) for i in range(7)]

    x = _box(ax, "X", cols[1], levels[0], 1.85, bh, "X", "input tokens", kind="input")
    projections, splits = [], []
    for col, letter in zip(cols, "QKV"):
        projections.append(_box(ax, f"W_{letter}", col, levels[1], bw, bh,
                                f"Linear ${letter}$", rf"${letter} = X W_{letter}$"))
        splits.append(_box(ax, f"split_{letter}", col, levels[2], bw, bh, "Split heads",
                           "reshape, transpose", kind="reshape"))
    left, right = cols[0] - bw / 2, cols[2] + bw / 2 - 0.16   # room for the stacked copies
    attend = _box(ax, "attention", (left + right) / 2, levels[3], right - left, bh,
                  "Scaled dot-product attention", "in each of the $H$ heads, separately",
                  kind="softmax", stack=2)
    concat = _box(ax, "concat", cols[1], levels[4], 2.6, bh, "Concatenate heads",
                  "transpose, reshape", kind="reshape")
    w_o = _box(ax, "W_O", cols[1], levels[5], 2.6, bh, r"Linear $W_O$",
               r"$W_O$: $H\,d_v \times d_{\mathrm{model}}$")
    out = _box(ax, "output", cols[1], levels[6], 2.6, bh, "Output", "one row per token",
               kind="output")

    # X feeds all three projections: straight down to W_K, around the corners to W_Q, W_V.
    _arrow(ax, (x.x, x.bottom), (cols[1], projections[1].top), "(B, N, d_model)")
    _arrow(ax, (x.left, x.y), (cols[0], projections[0].top),
           connection="angle,angleA=180,angleB=90,rad=0")
    _arrow(ax, (x.right, x.y), (cols[2], projections[2].top),
           connection="angle,angleA=0,angleB=90,rad=0")
    head_shapes = ["(B, H, N, d_k)", "(B, H, N, d_k)", "(B, H, N, d_v)"]
    for proj, split, shape in zip(projections, splits, head_shapes):
        _arrow(ax, (proj.x, proj.bottom), (proj.x, split.top), "(B, N, d_model)")
        _arrow(ax, (split.x, split.bottom), (split.x, attend.top), shape)
    _arrow(ax, (cols[1], attend.bottom), (cols[1], concat.top), "(B, H, N, d_v)")
    _arrow(ax, (cols[1], concat.bottom), (cols[1], w_o.top), "(B, N, H d_v)")
    _arrow(ax, (cols[1], w_o.bottom), (cols[1], out.top), "(B, N, d_model)")

    ax.text(0.05, (w_o.y + out.y) / 2,
            "$B$ sequences of\n$N$ tokens, $H$ heads;\nusually "
            r"$d_k = d_v = d_{\mathrm{model}} / H$",
            ha="left", va="center", fontsize=NOTE_PT, color="#444444", gid="note",
            linespacing=1.35, zorder=3)
    return ax
