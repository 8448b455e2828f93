"""Tests of attncore.lab.diagrams: the block diagrams draw, carry their shapes, and are legible
(no text too small, no text on top of other text, a box or an arrow, nothing cut off)."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402
from matplotlib.path import Path  # noqa: E402

from attncore.lab.diagrams import (  # noqa: E402
    ATTENTION_SHAPES,
    MULTIHEAD_SHAPES,
    draw_attention_diagram,
    draw_multihead_diagram,
)

DIAGRAMS = {"attention": (draw_attention_diagram, ATTENTION_SHAPES),
            "multihead": (draw_multihead_diagram, MULTIHEAD_SHAPES)}
CONTENT_WIDTH_IN = 7.2      # the book's content column: 720 px at 100 dpi


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def plain(text: str) -> str:
    """Mathtext as plain text: ``$(n_q,\\ d_{\\mathrm{model}})$`` -> ``(n_q, d_model)``."""
    text = re.sub(r"\\mathrm\{(\w+)\}", r"\1", text)
    text = re.sub(r"_\{(\w+)\}", r"_\1", text)
    text = text.replace("$", "").replace(r"\ ", " ").replace(r"\,", " ")
    return re.sub(r"\s+", " ", text).strip()


def drawn(name):
    draw, _ = DIAGRAMS[name]
    ax = draw()
    ax.figure.canvas.draw()
    return ax


def extents(ax, artists):
    renderer = ax.figure.canvas.get_renderer()
    return [(a, a.get_window_extent(renderer)) for a in artists]


@pytest.mark.parametrize("name", DIAGRAMS)
def test_draws_on_agg_and_returns_the_axes(name):
    draw, _ = DIAGRAMS[name]
    ax = draw()
    assert isinstance(ax, matplotlib.axes.Axes)
    ax.figure.canvas.draw()
    # Also into an axes the caller made, e.g. a panel of a larger figure.
    fig, axes = plt.subplots(1, 2, figsize=(14.4, 7))
    assert draw(ax=axes[1]) is axes[1]
    assert axes[1].patches and axes[1].texts and not axes[0].patches
    fig.canvas.draw()


@pytest.mark.parametrize("name", DIAGRAMS)
def test_every_shape_is_written_on_an_arrow(name):
    ax = drawn(name)
    _, shapes = DIAGRAMS[name]
    written = {plain(t.get_text()) for t in ax.texts if t.get_gid() == "shape"}
    assert set(shapes) == written
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len([t for t in ax.texts if t.get_gid() == "shape"]) <= len(arrows)


def test_the_attention_diagram_names_its_steps():
    ax = drawn("attention")
    texts = " | ".join(plain(t.get_text()) for t in ax.texts)
    for step in ["Q", "K", "V", r"QK^\top", r"\sqrt{d_k}", "Mask (optional)", "Softmax",
                 "along each row", "A V", "Output"]:
        assert step in texts, f"{step!r} missing from the diagram: {texts}"
    dashed = [p for p in ax.patches if p.get_gid() == "box:mask"]
    assert dashed and dashed[0].get_linestyle() != "-", "the optional mask is drawn dashed"


def test_the_multihead_diagram_names_its_steps():
    ax = drawn("multihead")
    texts = " | ".join(plain(t.get_text()) for t in ax.texts)
    for step in ["X", "W_Q", "W_K", "W_V", "Split heads", "Scaled dot-product attention",
                 "Concatenate heads", "W_O", "Output"]:
        assert step in texts, f"{step!r} missing from the diagram: {texts}"
    # One attention box per head drawn, stacked: more than one patch for that box.
    assert len([p for p in ax.patches if p.get_gid() == "box:attention"]) >= 2


@pytest.mark.parametrize("name", DIAGRAMS)
def test_fits_the_content_column_with_text_of_9_points_or_more(name):
    ax = drawn(name)
    assert ax.figure.get_figwidth() <= CONTENT_WIDTH_IN
    small = [(t.get_text(), t.get_fontsize()) for t in ax.texts if t.get_fontsize() < 9]
    assert not small, f"text below 9 pt: {small}"


def overlapping_texts(ax) -> list[tuple[str, str]]:
    """Pairs of texts whose drawn bounding boxes intersect."""
    found = []
    boxes = extents(ax, ax.texts)
    for i, (a, ea) in enumerate(boxes):
        found += [(a.get_text(), b.get_text()) for b, eb in boxes[i + 1:] if ea.overlaps(eb)]
    return found


def misplaced_texts(ax) -> list[tuple[str, str]]:
    """Texts outside their own box, or on another box, or crossed by an arrow's line."""
    found = []
    boxes = [(p, e) for p, e in extents(ax, ax.patches) if isinstance(p, FancyBboxPatch)]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    for text, et in extents(ax, ax.texts):
        own = [e for p, e in boxes if p.get_gid() == text.get_gid()]
        if own and not any(e.x0 <= et.x0 and et.x1 <= e.x1 and e.y0 <= et.y0
                           and et.y1 <= e.y1 for e in own):
            found.append((text.get_text(), "sticks out of its box"))
        found += [(text.get_text(), f"lies on {p.get_gid()}") for p, e in boxes
                  if p.get_gid() != text.get_gid() and et.overlaps(e)]
        for arrow in arrows:
            # The drawn line and head, in display coordinates (not the arrow's bounding box,
            # which for an arrow around a corner covers empty space).
            drawn_path = arrow.get_transform().transform_path(arrow.get_path())
            # One polyline per piece (Path.intersects_bbox misreads the CLOSEPOLY vertex).
            pieces = [Path(p) for p in drawn_path.to_polygons(closed_only=False)]
            if any(piece.intersects_bbox(et, filled=False) for piece in pieces):
                found.append((text.get_text(), "is crossed by an arrow"))
    return found


@pytest.mark.parametrize("name", DIAGRAMS)
def test_no_text_overlaps_other_text(name):
    assert not overlapping_texts(drawn(name))


@pytest.mark.parametrize("name", DIAGRAMS)
def test_text_sits_in_its_own_box_and_clear_of_other_boxes_and_arrows(name):
    assert not misplaced_texts(drawn(name))


@pytest.mark.parametrize("name", DIAGRAMS)
def test_nothing_is_cut_off_at_the_edges(name):
    ax = drawn(name)
    frame = ax.figure.bbox
    cut = [artist for artist, e in extents(ax, list(ax.texts) + list(ax.patches))
           if not (frame.x0 <= e.x0 and e.x1 <= frame.x1 and frame.y0 <= e.y0
                   and e.y1 <= frame.y1)]
    assert not cut, f"cut off at the figure's edge: {cut}"


def test_the_overlap_checks_catch_an_overlap():
    # Guards the two tests above against passing vacuously.
    ax = drawn("attention")
    shape = next(t for t in ax.texts if t.get_gid() == "shape")
    ax.text(*shape.get_position(), "on top", fontsize=10)
    scale = next(p for p in ax.patches if p.get_gid() == "box:scale")
    x, y = ax.transData.inverted().transform(scale.get_window_extent().get_points().mean(0))
    ax.text(x, y + 0.25, "across the scale box", fontsize=10, gid="note")
    arrow = next(p for p in ax.patches if isinstance(p, FancyArrowPatch))
    x, y = ax.transData.inverted().transform(arrow.get_window_extent().get_points().mean(0))
    ax.text(x, y, "on an arrow", fontsize=10, ha="center", gid="note")
    ax.figure.canvas.draw()
    assert overlapping_texts(ax)
    why = {w for _, w in misplaced_texts(ax)}
    assert "lies on box:scale" in why and "is crossed by an arrow" in why
