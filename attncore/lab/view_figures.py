"""Pictures of the four views of ``C = A B``, and the numbers that tell them apart in practice.

The four functions of :mod:`attncore.matmul_views` compute the same matrix; this module draws
what each one *reads*. Every figure shows ``A`` (``m x p``), ``B`` (``p x n``) and ``C``
(``m x n``) as grids of cells, colours the pieces of ``A`` and ``B`` that one unit of the view
uses, and outlines the part of ``C`` they make:

* :func:`draw_entry_view`         -- row i of A and column j of B make the entry ``C[i, j]``
* :func:`draw_column_view`        -- the columns of A, weighted by column j of B: column j of C
* :func:`draw_row_view`           -- the rows of B, weighted by row i of A: row i of C
* :func:`draw_outer_product_view` -- column t of A times row t of B adds to every entry of C
* :func:`draw_four_views`         -- the four above, one row each, in one figure
* :func:`draw_outer_product_sum`  -- C as a sum of rank-one terms (or of blocks of them)
* :func:`draw_convex_combination` -- output rows of ``A V`` inside the convex hull of V's rows

Within one figure the colour of a cell of A or B says which term ``t`` of the sum
``C[i, j] = sum_t A[i, t] B[t, j]`` it belongs to: two cells of the same colour are multiplied
together. :func:`highlighted_cells` reads the highlighted cells back from an axes (for tests).

Figure indices are written 1-based, as in the mathematics (``a_{11}`` is ``A[0, 0]``); the
arguments ``i``, ``j``, ``t`` of the functions are 0-based Python indices.

Three small helpers for the cost of the views:

* :func:`matmul_flops` -- ``2 m n p``, the same for every view
* :func:`words_moved`  -- numbers read and written under a simple memory model, per view
* :func:`time_matmul_views` -- wall-clock time of each loop view as a multiple of ``A @ B``,
  measured side by side (median of per-round ratios, with the interquartile range)
* :func:`draw_view_timings` -- those ratios at several sizes, as a bar chart

Inputs may be NumPy arrays or torch tensors (copied to NumPy for drawing) of a real numeric
dtype. Every drawing function returns the :class:`matplotlib.figure.Figure` it drew on.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .._backend import backend_of, check_rank, shape_of
from ..matmul_views import MATMUL_VIEWS

__all__ = [
    "MEMORY_FLOOR",
    "PALETTE",
    "draw_column_view",
    "draw_convex_combination",
    "draw_entry_view",
    "draw_four_views",
    "draw_outer_product_sum",
    "draw_outer_product_view",
    "draw_row_view",
    "draw_view_timings",
    "highlighted_cells",
    "matmul_flops",
    "time_matmul_views",
    "words_moved",
]

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
"""Okabe-Ito colours (readable with the common colour-vision deficiencies), one per term t."""

_TARGET = "#B8B8B8"       # fill of the part of C being made: a mixture of all the colours
_BACKGROUND = "#F4F4F4"   # cells that the highlighted unit does not use
_HIGHLIGHT_GID = "highlight"
_LABEL_GID = "cell label"
_MAX_LABELLED = 8         # "auto" labels: write entries only if no side exceeds this
_MAX_GRIDDED = 40         # draw cell borders only if no side exceeds this
_LABEL_CHOICES = ("auto", "values", "symbols", "none")


# --------------------------------------------------------------------------- validation

def _as_matrix(name: str, x: Any, layout: str) -> np.ndarray:
    """``x`` as a 2-D float64 NumPy array; errors name the argument, what it got and what
    was expected."""
    backend_of(**{name: x})                 # TypeError unless ndarray or torch.Tensor
    check_rank(name, x, 2, layout)
    if not isinstance(x, np.ndarray):
        x = x.detach().cpu().numpy()
    if x.dtype == np.bool_ or not (np.issubdtype(x.dtype, np.integer)
                                   or np.issubdtype(x.dtype, np.floating)):
        raise TypeError(f"{name}: expected a real numeric dtype (integer or floating), "
                        f"got {x.dtype}")
    if 0 in x.shape:
        raise ValueError(f"{name}: expected a non-empty matrix {layout}, got shape {x.shape}")
    return np.asarray(x, dtype=np.float64)


def _pair(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    a = _as_matrix("a", a, "(m, p)")
    b = _as_matrix("b", b, "(p, n)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b: inner dimensions must agree, a has shape {shape_of(a)} "
                         f"(p={a.shape[1]}), b has shape {shape_of(b)} (p={b.shape[0]})")
    return a, b


def _index(name: str, value: Any, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int (a 0-based {what} index), "
                        f"got {type(value).__name__}")
    if not 0 <= value < size:
        raise ValueError(f"{name}: expected a 0-based {what} index in [0, {size - 1}], "
                         f"got {value}")
    return int(value)


def _names(names: Sequence[str]) -> tuple[str, str, str]:
    if isinstance(names, str) or len(names) != 3 or not all(isinstance(s, str) and s
                                                            for s in names):
        raise ValueError(f"names: expected three non-empty strings (left factor, right "
                         f"factor, product), got {names!r}")
    return tuple(names)  # type: ignore[return-value]


def _labels_mode(labels: str, *shapes: tuple[int, int]) -> str:
    if labels not in _LABEL_CHOICES:
        raise ValueError(f"labels: expected one of {_LABEL_CHOICES}, got {labels!r}")
    if labels == "auto":
        small = max(max(s) for s in shapes) <= _MAX_LABELLED
        return "values" if small else "none"
    return labels


# --------------------------------------------------------------------------- drawing

def _fmt(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e6:
        return f"{int(x)}"
    return f"{x:.2f}"


_TRANSPOSE_MARKS = ("ᵀ", "^T", "^\\top")


def _letter(name: str) -> tuple[str, bool]:
    """How the entries of the matrix ``name`` are written: ``(letter, transposed)``.

    ``"A"`` -> ``("a", False)``, entries ``a_{12}``; a transposed name ``"Kᵀ"`` or ``"K^T"``
    -> ``("k", True)``: entry (t, j) of ``K^T`` is ``k_{jt}``, written that way.
    """
    for mark in _TRANSPOSE_MARKS:
        if name.endswith(mark) and len(name) > len(mark):
            return name[0].lower(), True
    return name[0].lower(), False


def _ent(L: tuple[str, bool], r: str, c: str) -> str:
    """Mathtext (no $) for entry (r, c) of the matrix written ``L``."""
    letter, tr = L
    r, c = (c, r) if tr else (r, c)
    sep = "," if len(r) > 1 or len(c) > 1 else ""
    return f"{letter}_{{{r}{sep}{c}}}"


def _rowvec(L: tuple[str, bool], r: str) -> str:
    """Mathtext for row r (a row vector) of the matrix written ``L``."""
    letter, tr = L
    # row r of K^T is column r of K, transposed
    return (f"\\mathbf{{{letter}}}_{{:,{r}}}^\\top" if tr
            else f"\\mathbf{{{letter}}}_{{{r},:}}")


def _colvec(L: tuple[str, bool], c: str) -> str:
    """Mathtext for column c (a column vector) of the matrix written ``L``."""
    letter, tr = L
    # column c of K^T is row c of K (key c), transposed
    return (f"\\mathbf{{{letter}}}_{{{c},:}}^\\top" if tr
            else f"\\mathbf{{{letter}}}_{{:,{c}}}")


def _sym(L: tuple[str, bool], r: int, c: int) -> str:
    return f"${_ent(L, str(r + 1), str(c + 1))}$"


def _colour(t: int, p: int) -> str:
    """Colour of term t; one colour for all terms when there are more terms than colours."""
    return PALETTE[t % len(PALETTE)] if p <= len(PALETTE) else PALETTE[0]


def _highlight(ax, r0: int, r1: int, c0: int, c1: int, colour: str, *,
               target: bool = False, alpha: float = 0.75) -> None:
    """Fill the cells rows r0..r1-1, columns c0..c1-1 (a rectangle of cells)."""
    from matplotlib.patches import Rectangle

    patch = Rectangle((c0, r0), c1 - c0, r1 - r0, facecolor=colour,
                      alpha=1.0 if target else alpha,
                      edgecolor="black" if target else "none",
                      linewidth=2.2 if target else 0, zorder=4.5 if target else 2,
                      clip_on=not target)
    patch.set_gid(_HIGHLIGHT_GID)
    ax.add_patch(patch)


def _grid(ax, x: np.ndarray, title: str, letter: tuple[str, bool], mode: str) -> None:
    """Draw matrix ``x`` as a grid of cells on ``ax``; cell (r, c) is [c, c+1] x [r, r+1]."""
    from matplotlib.patches import Rectangle

    rows, cols = x.shape
    ax.add_patch(Rectangle((0, 0), cols, rows, facecolor=_BACKGROUND, edgecolor="none",
                           zorder=0))
    if max(rows, cols) <= _MAX_GRIDDED:
        ax.hlines(np.arange(rows + 1), 0, cols, colors="white", linewidth=2.0, zorder=4)
        ax.vlines(np.arange(cols + 1), 0, rows, colors="white", linewidth=2.0, zorder=4)
    ax.add_patch(Rectangle((0, 0), cols, rows, facecolor="none", edgecolor="#555555",
                           linewidth=1.0, zorder=5, clip_on=False))
    if mode != "none":
        texts = [[_fmt(x[r, c]) if mode == "values" else _sym(letter, r, c)
                  for c in range(cols)] for r in range(rows)]
        longest = max(len(t) for row in texts for t in row)
        # never below 9 pt: the figure is shown at its natural size in the content column
        size = 12 if mode == "symbols" else 11 if longest <= 3 else 9
        for r in range(rows):
            for c in range(cols):
                text = texts[r][c]
                ax.text(c + 0.5, r + 0.5, text, ha="center", va="center", fontsize=size,
                        zorder=6, gid=_LABEL_GID)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    small = max(rows, cols) <= _MAX_GRIDDED
    # y-units per x-unit such that the drawn height : width is _length(rows) : _length(cols)
    ax.set_aspect((_length(rows) / rows) / (_length(cols) / cols))
    if mode == "symbols":              # the subscripts already number the rows and columns
        ax.set_xticks([])
        ax.set_yticks([])
    elif small:
        ax.set_xticks(np.arange(cols) + 0.5, [str(c + 1) for c in range(cols)])
        ax.set_yticks(np.arange(rows) + 0.5, [str(r + 1) for r in range(rows)])
    else:
        ax.set_xticks([0.5, cols - 0.5], ["1", str(cols)])
        ax.set_yticks([0.5, rows - 0.5], ["1", str(rows)])
    ax.xaxis.tick_top()
    ax.tick_params(length=0, labelsize=9, colors="#555555")
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=12, pad=8 if mode == "symbols" else 16)


def _length(cells: int) -> float:
    """Drawn length of a side of ``cells`` cells, in cell units: true up to 8, then logarithmic.

    A 512-wide matrix is drawn 20 units wide rather than 512, so that ``(5, 512) @ (512, 5)``
    fits on a page while still looking long and thin.
    """
    return float(cells) if cells <= 8 else 8.0 + 2.0 * math.log2(cells / 8)


_MAX_WIDTH_INCHES = 6.6   # panels' width; with margins the figure stays within the book's
                          # content column (about 7.5 in at 100 dpi), so it is never scaled down


def _cell_inches(width_units: float, height_units: float) -> float:
    return min(0.48, _MAX_WIDTH_INCHES / width_units, 6.5 / height_units)


def _operator(fig_like, left_ax, right_ax, symbol: str) -> None:
    """Write ``symbol`` midway between two axes (computed at draw time, after aspect)."""
    from matplotlib.transforms import Bbox

    def between(renderer):
        l = left_ax.get_window_extent(renderer)
        r = right_ax.get_window_extent(renderer)
        y = (l.y0 + l.y1 + r.y0 + r.y1) / 4
        return Bbox.from_extents(l.x1, y, r.x0, y + 1)

    left_ax.annotate(symbol, xy=(0.5, 0.0), xycoords=between, ha="center", va="center",
                     fontsize=20, color="#333333", annotation_clip=False)


_TITLE_INCHES = 1.05      # room above a row of panels for the caption and matrix titles


def _panel_size(m: int, p: int, n: int) -> tuple[float, float]:
    """(width, height) in inches of one row A x B = C."""
    width_units = _length(p) + 2 * _length(n) + 4.5
    height_units = max(_length(m), _length(p))
    cell = _cell_inches(width_units, height_units)
    return max(6.5, width_units * cell + 0.8), height_units * cell + _TITLE_INCHES + 0.15


def _three_panels(container, a: np.ndarray, b: np.ndarray, names, mode: str):
    m, p = a.shape
    n = b.shape[1]
    ws = [_length(p), _length(n), _length(n)]
    axes = container.subplots(1, 3, gridspec_kw={"width_ratios": ws, "wspace": 0.55})
    c = a @ b
    la, lb, lc = (_letter(s) for s in names)
    _grid(axes[0], a, f"{names[0]}  ({m}×{p})", la, mode)
    _grid(axes[1], b, f"{names[1]}  ({p}×{n})", lb, mode)
    _grid(axes[2], c, f"{names[2]} = {names[0]}{names[1]}  ({m}×{n})", lc, mode)
    _operator(container, axes[0], axes[1], "×")
    _operator(container, axes[1], axes[2], "=")
    return axes


def _finish(container, caption: str, height_in: float) -> None:
    container.suptitle(caption, fontsize=12.5)
    container.subplots_adjust(left=0.06, right=0.97, top=1 - _TITLE_INCHES / height_in,
                              bottom=0.12 / height_in)


def _view(kind: str, a: Any, b: Any, index: int, *, labels: str, names: Sequence[str],
          container=None):
    a, b = _pair(a, b)
    names = _names(names)
    m, p = a.shape
    n = b.shape[1]
    mode = _labels_mode(labels, a.shape, b.shape)
    la, lb, lc = (_letter(s) for s in names)
    if kind == "entry":
        i, j = index
        i = _index("i", i, m, f"row of {names[0]}")
        j = _index("j", j, n, f"column of {names[1]}")
    elif kind == "column":
        j = _index("j", index, n, f"column of {names[1]}")
    elif kind == "row":
        i = _index("i", index, m, f"row of {names[0]}")
    else:
        t = _index("t", index, p, f"column of {names[0]} (and row of {names[1]})")

    own = container is None
    width_in, height_in = _panel_size(m, p, n)
    if own:
        import matplotlib.pyplot as plt

        container = plt.figure(figsize=(width_in, height_in))
    ax_a, ax_b, ax_c = _three_panels(container, a, b, names, mode)

    if kind == "entry":
        if p <= len(PALETTE):
            for s in range(p):
                _highlight(ax_a, i, i + 1, s, s + 1, _colour(s, p))
                _highlight(ax_b, s, s + 1, j, j + 1, _colour(s, p))
        else:
            _highlight(ax_a, i, i + 1, 0, p, PALETTE[0])
            _highlight(ax_b, 0, p, j, j + 1, PALETTE[0])
        _highlight(ax_c, i, i + 1, j, j + 1, _TARGET, target=True)
        caption = (f"entry view:  ${_ent(lc, str(i + 1), str(j + 1))} = \\sum_t\\, "
                   f"{_ent(la, str(i + 1), 't')}\\,{_ent(lb, 't', str(j + 1))}$  "
                   f"(row {i + 1} of {names[0]} · column {j + 1} "
                   f"of {names[1]})")
    elif kind == "column":
        if p <= len(PALETTE):
            for s in range(p):
                _highlight(ax_a, 0, m, s, s + 1, _colour(s, p))
                _highlight(ax_b, s, s + 1, j, j + 1, _colour(s, p))
        else:
            _highlight(ax_a, 0, m, 0, p, PALETTE[0])
            _highlight(ax_b, 0, p, j, j + 1, PALETTE[0])
        _highlight(ax_c, 0, m, j, j + 1, _TARGET, target=True)
        caption = (f"column view:  ${_colvec(lc, str(j + 1))} = \\sum_t\\, "
                   f"{_ent(lb, 't', str(j + 1))}\\,{_colvec(la, 't')}$  (columns of {names[0]}, "
                   f"weighted by column {j + 1} of {names[1]})")
    elif kind == "row":
        if p <= len(PALETTE):
            for s in range(p):
                _highlight(ax_a, i, i + 1, s, s + 1, _colour(s, p))
                _highlight(ax_b, s, s + 1, 0, n, _colour(s, p))
        else:
            _highlight(ax_a, i, i + 1, 0, p, PALETTE[0])
            _highlight(ax_b, 0, p, 0, n, PALETTE[0])
        _highlight(ax_c, i, i + 1, 0, n, _TARGET, target=True)
        caption = (f"row view:  ${_rowvec(lc, str(i + 1))} = \\sum_t\\, "
                   f"{_ent(la, str(i + 1), 't')}\\,{_rowvec(lb, 't')}$  (rows of {names[1]}, "
                   f"weighted by row {i + 1} of {names[0]})")
    else:
        colour = _colour(t, p)
        _highlight(ax_a, 0, m, t, t + 1, colour)
        _highlight(ax_b, t, t + 1, 0, n, colour)
        _highlight(ax_c, 0, m, 0, n, colour, alpha=0.35)
        caption = (f"outer-product view:  term $t={t + 1}$,  ${_colvec(la, str(t + 1))}\\,"
                   f"{_rowvec(lb, str(t + 1))}$, adds to every entry of {names[2]}")
    _finish(container, caption, height_in)
    return container if own else container.figure


def draw_entry_view(a: Any, b: Any, i: int = 0, j: int = 0, *, labels: str = "auto",
                    names: Sequence[str] = ("A", "B", "C")):
    """Draw ``C[i, j] = A[i, :] . B[:, j]``: row i of A and column j of B make one entry of C.

    Parameters
    ----------
    a, b : NumPy array or torch tensor, shapes ``(m, p)`` and ``(p, n)``, real numeric
    i, j : int
        0-based row of A and column of B.
    labels : {"auto", "values", "symbols", "none"}
        ``"auto"``: values if no side exceeds 8; ``"symbols"``: ``a_{11}`` ...
    names : sequence of three str
        The names of the left factor, right factor and product, e.g.
        ``("Q", "Kᵀ", "S")``; entries are written with the first letter lower-cased
        (``q_{12}``), or, for a name ending in ``ᵀ`` or ``^T``, as an entry of that
        transpose (``(Kᵀ)_{12}``).

    Returns
    -------
    matplotlib.figure.Figure
        Three axes (A, B, C). In A and B, the pair of cells multiplied for term t share
        colour t; the entry of C is grey with a black outline.
    """
    return _view("entry", a, b, (i, j), labels=labels, names=names)


def draw_column_view(a: Any, b: Any, j: int = 0, *, labels: str = "auto",
                     names: Sequence[str] = ("A", "B", "C")):
    """Draw ``C[:, j] = sum_t B[t, j] A[:, t]``: column j of C combines all columns of A.

    a : ``(m, p)``, b : ``(p, n)``; j : 0-based column of B and C. Other arguments as in
    :func:`draw_entry_view`. Returns the Figure with three axes; column t of A and its weight
    ``B[t, j]`` share colour t.
    """
    return _view("column", a, b, j, labels=labels, names=names)


def draw_row_view(a: Any, b: Any, i: int = 0, *, labels: str = "auto",
                  names: Sequence[str] = ("A", "B", "C")):
    """Draw ``C[i, :] = sum_t A[i, t] B[t, :]``: row i of C combines all rows of B.

    a : ``(m, p)``, b : ``(p, n)``; i : 0-based row of A and C. Other arguments as in
    :func:`draw_entry_view`. Returns the Figure with three axes; row t of B and its weight
    ``A[i, t]`` share colour t.
    """
    return _view("row", a, b, i, labels=labels, names=names)


def draw_outer_product_view(a: Any, b: Any, t: int = 0, *, labels: str = "auto",
                            names: Sequence[str] = ("A", "B", "C")):
    """Draw term t of ``C = sum_t outer(A[:, t], B[t, :])``: it touches every entry of C.

    a : ``(m, p)``, b : ``(p, n)``; t : 0-based column of A and row of B. Other arguments as
    in :func:`draw_entry_view`. Returns the Figure with three axes; column t of A, row t of B
    and (lighter) all of C share colour t.
    """
    return _view("outer", a, b, t, labels=labels, names=names)


def draw_four_views(a: Any, b: Any, *, i: int = 0, j: int = 0, t: int = 0,
                    labels: str = "auto", names: Sequence[str] = ("A", "B", "C")):
    """The four views of one product in one figure, a row each: entry (i, j), column j, row i,
    outer-product term t.

    a : ``(m, p)``, b : ``(p, n)``. Returns the Figure with twelve axes (A, B, C per row).
    """
    import matplotlib.pyplot as plt

    a, b = _pair(a, b)
    m, p = a.shape
    n = b.shape[1]
    width_in, height_in = _panel_size(m, p, n)
    fig = plt.figure(figsize=(width_in, 4 * height_in))
    rows = fig.subfigures(4, 1)
    _view("entry", a, b, (i, j), labels=labels, names=names, container=rows[0])
    _view("column", a, b, j, labels=labels, names=names, container=rows[1])
    _view("row", a, b, i, labels=labels, names=names, container=rows[2])
    _view("outer", a, b, t, labels=labels, names=names, container=rows[3])
    return fig


def draw_outer_product_sum(a: Any, b: Any, *, block_size: int = 1, labels: str = "auto",
                           names: Sequence[str] = ("A", "B", "C"), index: str = "t"):
    """Draw ``C`` as the sum of its outer-product terms, grouped in blocks of ``block_size``.

    Panel k is ``A[:, T_k] @ B[T_k, :]`` for the block ``T_k`` of consecutive indices t
    (one rank-one matrix when ``block_size == 1``); the last panel is their sum, ``C``. With
    ``A`` the attention weights and ``B = V``, the blocks are blocks of keys: the idea the
    tiled-attention chapter builds on.

    a : ``(m, p)``, b : ``(p, n)``; block_size : int in ``[1, p]``; index : the letter of the
    summation index in the panel titles (``"j"`` for keys). Returns the Figure with
    ``ceil(p / block_size) + 1`` axes.
    """
    import matplotlib.pyplot as plt

    a, b = _pair(a, b)
    names = _names(names)
    m, p = a.shape
    n = b.shape[1]
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) \
            or not 1 <= block_size <= p:
        raise ValueError(f"block_size: expected an int in [1, {p}] (p = columns of a), "
                         f"got {block_size!r}")
    if not (isinstance(index, str) and len(index) == 1 and index.isalpha()):
        raise ValueError(f"index: expected one letter, got {index!r}")
    mode = _labels_mode(labels, (m, n))
    la, lb, lc = (_letter(s) for s in names)
    blocks = [list(range(s, min(s + block_size, p))) for s in range(0, p, block_size)]
    panels = len(blocks) + 1
    width_units = panels * (_length(n) + 1.3)
    cell = _cell_inches(width_units, _length(m))
    width_in = max(6.0, width_units * cell + 0.8)
    height_in = _length(m) * cell + _TITLE_INCHES + 0.25
    fig = plt.figure(figsize=(width_in, height_in))
    axes = fig.subplots(1, panels, gridspec_kw={"wspace": 0.55})
    axes = np.atleast_1d(axes)
    for k, blk in enumerate(blocks):
        part = a[:, blk] @ b[blk, :]
        lo, hi = blk[0] + 1, blk[-1] + 1
        if lo == hi:
            title = f"${_colvec(la, str(lo))}\\,{_rowvec(lb, str(lo))}$"
        else:
            title = (f"$\\sum_{{{index}={lo}}}^{{{hi}}} {_colvec(la, index)}\\,"
                     f"{_rowvec(lb, index)}$")
        _grid(axes[k], part, title, lc, "values" if mode == "values" else "none")
        _highlight(axes[k], 0, m, 0, n, _colour(k, len(blocks)), alpha=0.35)
        if k > 0:
            _operator(fig, axes[k - 1], axes[k], "+")
    c = a @ b
    _grid(axes[-1], c, f"{names[2]} = {names[0]}{names[1]}", lc,
          "values" if mode == "values" else "none")
    _highlight(axes[-1], 0, m, 0, n, _TARGET, target=True)
    _operator(fig, axes[-2], axes[-1], "=")
    unit = "rank-one terms" if block_size == 1 else f"blocks of {block_size} terms"
    fig.suptitle(f"{names[2]} = {names[0]}{names[1]} as a sum of {unit} "
                 f"(column block of {names[0]} × row block of {names[1]})", fontsize=12.5)
    fig.subplots_adjust(left=0.04, right=0.98, top=1 - (_TITLE_INCHES + 0.1) / height_in,
                        bottom=0.12 / height_in)
    return fig


def _hull(points: np.ndarray) -> np.ndarray:
    """Convex hull of 2-D points, counter-clockwise (Andrew's monotone chain)."""
    pts = sorted(set(map(tuple, points.tolist())))
    if len(pts) <= 2:
        return np.array(pts)

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list = []
    for q in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], q) <= 0:
            lower.pop()
        lower.append(q)
    upper: list = []
    for q in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], q) <= 0:
            upper.pop()
        upper.append(q)
    return np.array(lower[:-1] + upper[:-1])


def _label_offsets(points: np.ndarray, distance: float = 13.0) -> list[tuple[float, float]]:
    """An offset in points for the label of each 2-D point, away from its nearest neighbour.

    Labels placed at one fixed offset collide when two points are close (two outputs that
    are nearly the same average); pushing each label away from the closest other point
    keeps them apart. Coordinates are first scaled to the unit square, as the axes show
    them.
    """
    span = np.ptp(points, axis=0)
    unit = (points - points.min(axis=0)) / np.where(span > 0, span, 1.0)
    offsets = []
    for k, here in enumerate(unit):
        others = np.delete(unit, k, axis=0)
        if len(others) == 0:
            offsets.append((distance * 0.7, distance * 0.7))
            continue
        away = here - others[np.argmin(np.linalg.norm(others - here, axis=1))]
        norm = np.linalg.norm(away)
        direction = away / norm if norm > 1e-12 else np.array([0.7071, 0.7071])
        offsets.append((float(distance * direction[0]), float(distance * direction[1])))
    return offsets


def draw_convex_combination(values: Any, outputs: Any, *, dims: tuple[int, int] = (0, 1),
                            value_name: str = "v", output_name: str = "z"):
    """Plot value rows and output rows in two chosen coordinates, with the values' convex hull.

    values : ``(n_k, d_v)``, the rows ``v_j``; outputs : ``(n_q, d_v)``, the rows ``z_i``
    (e.g. ``A @ V`` with a row-stochastic ``A``); dims : two distinct 0-based feature indices.
    When every row of the weights is a probability distribution, every ``z_i`` lies inside
    the shaded hull. Returns the Figure with one axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon

    v = _as_matrix("values", values, "(n_k, d_v)")
    z = _as_matrix("outputs", outputs, "(n_q, d_v)")
    if v.shape[1] != z.shape[1]:
        raise ValueError(f"values and outputs: expected the same d_v (columns), got values "
                         f"{shape_of(v)} and outputs {shape_of(z)}")
    if len(dims) != 2 or dims[0] == dims[1]:
        raise ValueError(f"dims: expected two distinct feature indices, got {dims!r}")
    d0 = _index("dims[0]", dims[0], v.shape[1], "feature")
    d1 = _index("dims[1]", dims[1], v.shape[1], "feature")
    pv, pz = v[:, [d0, d1]], z[:, [d0, d1]]
    fig, ax = plt.subplots(figsize=(6.0, 5.0))
    hull = _hull(pv)
    if len(hull) >= 3:
        ax.add_patch(Polygon(hull, closed=True, facecolor=PALETTE[0], alpha=0.12,
                             edgecolor=PALETTE[0], linewidth=1.5,
                             label=f"convex hull of the ${value_name}_j$"))
    ax.scatter(pv[:, 0], pv[:, 1], s=70, color=PALETTE[0], zorder=3,
               label=f"value rows ${value_name}_j$")
    ax.scatter(pz[:, 0], pz[:, 1], s=80, marker="X", color=PALETTE[5], zorder=4,
               label=f"outputs ${output_name}_i$")
    points = np.vstack([pv, pz])
    offsets = _label_offsets(points)
    for k, (x, y) in enumerate(pv):
        ax.annotate(f"${value_name}_{{{k + 1}}}$", (x, y), xytext=offsets[k],
                    textcoords="offset points", color=PALETTE[0], fontsize=12,
                    ha="center", va="center")
    for k, (x, y) in enumerate(pz):
        ax.annotate(f"${output_name}_{{{k + 1}}}$", (x, y), xytext=offsets[len(pv) + k],
                    textcoords="offset points", color=PALETTE[5], fontsize=11,
                    ha="center", va="center")
    ax.set_xlabel(f"feature {d0 + 1}")
    ax.set_ylabel(f"feature {d1 + 1}")
    ax.set_title("Each output row is a weighted average of the value rows")
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    ax.grid(alpha=0.3)
    ax.margins(0.12)
    fig.tight_layout()
    return fig


def highlighted_cells(ax) -> set[tuple[int, int]]:
    """The cells ``(row, column)`` (0-based) that a figure of this module highlights on ``ax``."""
    cells: set[tuple[int, int]] = set()
    for patch in ax.patches:
        if patch.get_gid() != _HIGHLIGHT_GID:
            continue
        c0, r0 = (int(round(v)) for v in patch.get_xy())
        c1 = c0 + int(round(patch.get_width()))
        r1 = r0 + int(round(patch.get_height()))
        cells.update((r, c) for r in range(r0, r1) for c in range(c0, c1))
    return cells


# --------------------------------------------------------------------------- cost

def _dims(m: Any, p: Any, n: Any) -> tuple[int, int, int]:
    for name, v in (("m", m), ("p", p), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    return int(m), int(p), int(n)


def matmul_flops(m: int, p: int, n: int) -> int:
    """Floating-point operations of ``(m, p) @ (p, n)``: ``m n p`` multiplies and ``m n p``
    adds (accumulating into a zero-initialised ``C``), ``2 m n p`` in all, for every view."""
    m, p, n = _dims(m, p, n)
    return 2 * m * n * p


MEMORY_FLOOR = "p passes over C"
"""Key of :func:`time_matmul_views`'s memory-traffic floor of the outer-product view."""

_VIEW_NAMES = ("entries", "columns", "rows", "outer products", "blocked", "lower bound")


def words_moved(view: str, m: int, p: int, n: int, *, tile: int = 64) -> int:
    """Numbers read from and written to slow memory by ``(m, p) @ (p, n)``, in a simple model.

    The model: one unit of the view (one dot product, one column update, one row update, one
    rank-one update) reads its operands from slow memory and writes its result back; nothing
    stays in fast memory from one unit to the next.

    * ``"entries"``        -- ``m n`` dot products, each reads ``2p`` and writes 1
    * ``"columns"``        -- ``n p`` updates ``C[:, j] += B[t, j] A[:, t]``: read ``m + 1``,
      read and write ``C[:, j]`` (``2m``)
    * ``"rows"``           -- ``m p`` updates ``C[i, :] += A[i, t] B[t, :]``: ``3n + 1``
    * ``"outer products"`` -- ``p`` updates ``C += A[:, t] B[t, :]``: ``m + n + 2 m n``
    * ``"blocked"``        -- C cut into ``tile x tile`` blocks; each block stays in fast
      memory while the ``tile`` rows of A and ``tile`` columns of B it needs stream past
      once: about ``2 m n p / tile + m n`` (exactly ``p m ceil(n/tile) + p n ceil(m/tile)
      + m n``, edge blocks being smaller)
    * ``"lower bound"``    -- read A and B once, write C once: ``m p + p n + m n``

    Returns an int. ``matmul_flops(m, p, n) / words_moved(...)`` is the arithmetic intensity.
    """
    m, p, n = _dims(m, p, n)
    if view not in _VIEW_NAMES:
        raise ValueError(f"view: expected one of {_VIEW_NAMES}, got {view!r}")
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"tile: expected a positive int, got {tile!r}")
    if view == "entries":
        return m * n * (2 * p + 1)
    if view == "columns":
        return n * p * (3 * m + 1)
    if view == "rows":
        return m * p * (3 * n + 1)
    if view == "outer products":
        return p * (m + n + 2 * m * n)
    if view == "blocked":
        return p * m * math.ceil(n / tile) + p * n * math.ceil(m / tile) + m * n
    return m * p + p * n + m * n


def time_matmul_views(m: int, p: int, n: int, *, repeats: int = 5, seed: int = 0,
                      views: Mapping[str, Callable[[Any, Any], Any]] | None = None
                      ) -> dict[str, dict[str, float]]:
    """Time each loop view of ``(m, p) @ (p, n)`` against ``A @ B``, side by side.

    ``A`` and ``B`` are float64 NumPy arrays drawn with ``seed``. The BLAS behind ``A @ B``
    runs on one thread, as the Python loops do: the comparison is one core against one core,
    and it cannot be spoiled by BLAS threads competing with other processes for the cores
    (on a busy two-core machine that can make a threaded ``A @ B`` a hundred times slower).
    Each of ``repeats`` rounds
    times ``A @ B`` and then every view once, so that the ratios of one round compare runs
    made under the same load on the machine; the reported ratio is the median of the
    per-round ratios, with its interquartile range. One ``A @ B`` can be shorter than the
    clock's resolution, so it is timed as a batch of calls lasting about a millisecond.

    Returns ``{name: {"seconds", "ratio", "ratio_q1", "ratio_q3", "max_abs_error"}}`` for
    each view in ``views`` (default :data:`attncore.matmul_views.MATMUL_VIEWS`), for
    ``"@"`` itself (ratio 1) and for :data:`MEMORY_FLOOR`, ``p`` in-place updates
    ``C += X`` of an ``(m, n)`` array: the outer-product view's memory traffic (every step
    reads and writes all of ``C``) without its arithmetic, a floor under that view's time.
    The numbers are the median seconds of one call, the median, first and third quartile
    of the per-round ratios, and the largest difference from ``A @ B`` (NaN for the floor).
    Wall-clock numbers depend on the machine and its load: print them, do not test them.
    """
    from threadpoolctl import threadpool_limits

    m, p, n = _dims(m, p, n)
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
        raise ValueError(f"repeats: expected a positive int, got {repeats!r}")
    views = MATMUL_VIEWS if views is None else views
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, p))
    b = rng.standard_normal((p, n))
    with threadpool_limits(limits=1, user_api="blas"):
        return _time_views(a, b, repeats, views)


def _time_views(a: np.ndarray, b: np.ndarray, repeats: int,
                views: Mapping[str, Callable[[Any, Any], Any]]) -> dict[str, dict[str, float]]:
    reference = a @ b

    start = time.perf_counter()
    a @ b                                                    # also the warm-up
    once = max(time.perf_counter() - start, 1e-7)
    inner = int(min(1000, max(1, math.ceil(1e-3 / once))))

    def clock(fn: Callable[[], Any], calls: int = 1) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls

    c = np.zeros_like(reference)
    x = np.ones_like(reference)

    def stream_c():
        # The outer-product view's memory traffic without its arithmetic: p passes that
        # read and write all of C.
        for _ in range(b.shape[0]):
            np.add(c, x, out=c)

    errors = {name: float(np.max(np.abs(np.asarray(fn(a, b)) - reference)))   # warm-up
              for name, fn in views.items()}
    stream_c()
    seconds: dict[str, list[float]] = {"@": [], **{name: [] for name in views},
                                       MEMORY_FLOOR: []}
    for _ in range(repeats):
        seconds["@"].append(clock(lambda: a @ b, inner))
        for name, fn in views.items():
            seconds[name].append(clock(lambda: fn(a, b)))
        seconds[MEMORY_FLOOR].append(clock(stream_c))
    base = np.array(seconds["@"])
    out = {"@": {"seconds": float(np.median(base)), "ratio": 1.0, "ratio_q1": 1.0,
                 "ratio_q3": 1.0, "max_abs_error": 0.0}}
    for name in [*views, MEMORY_FLOOR]:
        ratios = np.array(seconds[name]) / base
        q1, median, q3 = np.percentile(ratios, [25, 50, 75])
        out[name] = {"seconds": float(np.median(seconds[name])), "ratio": float(median),
                     "ratio_q1": float(q1), "ratio_q3": float(q3),
                     "max_abs_error": errors.get(name, float("nan"))}
    return out


def draw_view_timings(results: Mapping[int, Mapping[str, Mapping[str, float]]], *,
                      title: str = "Loop views against A @ B: same flops, different speed"):
    """Bar chart of :func:`time_matmul_views` results at several sizes.

    results : ``{size: time_matmul_views(size, size, size)}``, square products. One group of
    bars per view (``"@"`` left out), one bar per size, on a logarithmic axis of "time as a
    multiple of ``A @ B``"; the whiskers span each ratio's interquartile range.
    Returns the Figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    if not results:
        raise ValueError("results: expected at least one size, got none")
    sizes = list(results)
    names = [name for name in next(iter(results.values())) if name not in ("@", MEMORY_FLOOR)]
    fig, ax = plt.subplots(figsize=(7.2, 0.9 + 0.75 * len(names) + 0.2 * len(sizes)))
    height = 0.8 / len(sizes)
    for k, size in enumerate(sizes):
        rows = [results[size][name] for name in names]
        median = np.array([r["ratio"] for r in rows])
        low = median - np.array([r.get("ratio_q1", r["ratio"]) for r in rows])
        high = np.array([r.get("ratio_q3", r["ratio"]) for r in rows]) - median
        ax.barh(np.arange(len(names)) + height * (k - (len(sizes) - 1) / 2), median,
                height=height * 0.9, xerr=[low, high], capsize=2,
                color=PALETTE[k % len(PALETTE)], label=f"{size}×{size}×{size}",
                error_kw={"elinewidth": 1, "ecolor": "#333333"})
    ax.set_yticks(np.arange(len(names)), names, fontsize=10)
    ax.invert_yaxis()
    ax.set_xscale("log")
    # one label per power of ten, no minor labels: nothing can overlap
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=12))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    ax.tick_params(axis="x", labelsize=10)
    lo = min(results[s][v].get("ratio_q1", results[s][v]["ratio"]) for s in sizes
             for v in names)
    hi = max(results[s][v].get("ratio_q3", results[s][v]["ratio"]) for s in sizes
             for v in names)
    ax.set_xlim(10 ** math.floor(math.log10(min(lo, 1.0))),
                10 ** math.ceil(math.log10(hi) + 0.05))
    ax.axvline(1.0, color="#333333", linewidth=1, linestyle=":")
    ax.set_xlabel("time as a multiple of the time of A @ B (log scale)", fontsize=10)
    ax.set_title(title, fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(title="size m×p×n", fontsize=9, title_fontsize=9, loc="best",
              framealpha=0.95)
    fig.tight_layout()
    return fig
