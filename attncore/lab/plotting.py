"""Figures shared by the chapters: how inline figures are stored, and attention heatmaps."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy copy of an array or tensor (detached, on the CPU)."""
    if isinstance(x, np.ndarray):
        return x
    return x.detach().cpu().numpy()


def sharp_figures() -> None:
    """Store the notebook's inline figures as PNG at twice their pixel density, on white.

    Call it once in a chapter's import cell, after ``import matplotlib.pyplot``. Each figure
    is then stored as a PNG with twice the pixels of its displayed size (IPython's "retina"
    format), with the displayed width and height in the output's metadata, so that it is
    sharp on a high-density screen and shown at the same size as before. The background is
    opaque white, so that the dark text of a figure stays readable on a dark page.

    PNG rather than SVG: a figure's SVG is text that holds random clip-path ids and a date
    unless told otherwise, and path coordinates that may change in the last digit between
    machines, so the same run would not store the same output twice.

    Outside IPython (a plain script) it only sets the background.
    """
    # (The notebooks' stored outputs are compared with a fresh run; PNG data is not compared
    # byte for byte, SVG text would be.)
    import matplotlib as mpl

    mpl.rcParams.update({"figure.facecolor": "white", "savefig.facecolor": "white",
                         "savefig.transparent": False})
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is None:
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("retina")


ANNOTATION_POINTS = 9
"""Font size of the weights written in the cells: 9 pt, the course's smallest legible size."""


def plot_attention(weights: Any, *, query_labels: Sequence[str] | None = None,
                   key_labels: Sequence[str] | None = None, title: str | None = None,
                   ax: Any = None, annotate: bool | None = None, cmap: str = "viridis",
                   colorbar: bool = True) -> Any:
    """Heatmap of one attention matrix: row i is query i's distribution over the keys.

    Parameters
    ----------
    weights : NumPy array or torch tensor, shape ``(n_q, n_k)``
        Values in [0, 1].
    query_labels, key_labels : sequence of str, optional
        Tick labels of the rows and columns.
    title : str, optional
    ax : matplotlib Axes, optional
        Where to draw (default: a new figure).
    annotate : bool, optional
        Print each weight in its cell (default: when the matrix is at most 8 x 8).
    cmap : str, default "viridis"
    colorbar : bool, default True
        Draw a colour bar beside the axes; panels that share one scale can leave it to the
        last panel (the colour scale is always 0 to 1).

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    w = to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"weights: expected shape (n_q, n_k), got {w.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * w.shape[1], 0.8 + 0.5 * w.shape[0]))
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=1.0)
    ax.set_xlabel("key j (attended to)")
    ax.set_ylabel("query i (attending)")
    ax.set_xticks(range(w.shape[1]), key_labels if key_labels is not None else range(w.shape[1]))
    ax.set_yticks(range(w.shape[0]), query_labels if query_labels is not None
                  else range(w.shape[0]))
    if key_labels is not None:
        ax.tick_params(axis="x", labelrotation=45)
    if annotate is None:
        annotate = max(w.shape) <= 8
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center",
                        fontsize=ANNOTATION_POINTS,
                        color="white" if w[i, j] < 0.6 else "black")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax
