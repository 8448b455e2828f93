"""Tests of attncore.lab.view_figures: the pictures highlight exactly the cells each view reads,
and the cost helpers count what their docstrings say."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncore.matmul_views import MATMUL_VIEWS  # noqa: E402
from attncore.lab.view_figures import (  # noqa: E402
    MEMORY_FLOOR,
    PALETTE,
    draw_column_view,
    draw_convex_combination,
    draw_entry_view,
    draw_four_views,
    draw_outer_product_sum,
    draw_outer_product_view,
    draw_row_view,
    draw_view_timings,
    highlighted_cells,
    matmul_flops,
    time_matmul_views,
    words_moved,
)

A = np.array([[1.0, 2.0, 0.0], [-1.0, 3.0, 1.0], [2.0, 0.0, -2.0]])
B = np.array([[1.0, -1.0], [0.0, 2.0], [3.0, 1.0]])


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def labels_of(axes):
    """The texts written in the cells (not the operators between the panels)."""
    return [t.get_text() for ax in axes for t in ax.texts if t.get_gid() == "cell label"]


def every(rows, cols):
    return {(r, c) for r in range(rows) for c in range(cols)}


def expected_cells(view, m, p, n, index):
    """The cells of (A, B, C) that one unit of each view reads and writes."""
    if view == "entry":
        i, j = index
        return ({(i, t) for t in range(p)}, {(t, j) for t in range(p)}, {(i, j)})
    if view == "column":
        j = index
        return (every(m, p), {(t, j) for t in range(p)}, {(r, j) for r in range(m)})
    if view == "row":
        i = index
        return ({(i, t) for t in range(p)}, every(p, n), {(i, c) for c in range(n)})
    t = index
    return ({(r, t) for r in range(m)}, {(t, c) for c in range(n)}, every(m, n))


def draw(view, a, b, index, **kw):
    if view == "entry":
        return draw_entry_view(a, b, *index, **kw)
    fn = {"column": draw_column_view, "row": draw_row_view,
          "outer": draw_outer_product_view}[view]
    return fn(a, b, index, **kw)


@st.composite
def view_case(draw_, max_side=6):
    m = draw_(st.integers(1, max_side))
    p = draw_(st.integers(1, max_side))
    n = draw_(st.integers(1, max_side))
    view = draw_(st.sampled_from(["entry", "column", "row", "outer"]))
    if view == "entry":
        index = (draw_(st.integers(0, m - 1)), draw_(st.integers(0, n - 1)))
    else:
        index = draw_(st.integers(0, {"column": n, "row": m, "outer": p}[view] - 1))
    return view, m, p, n, index


@settings(max_examples=25, deadline=None)
@given(view_case())
def test_each_view_highlights_exactly_the_cells_it_reads(case):
    view, m, p, n, index = case
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (m, p)).astype(float)
    b = rng.integers(-3, 4, (p, n)).astype(float)
    fig = draw(view, a, b, index)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 3
    got = tuple(highlighted_cells(ax) for ax in fig.axes)
    assert got == expected_cells(view, m, p, n, index)
    plt.close(fig)


@pytest.mark.parametrize("view,index", [("entry", (1, 3)), ("column", 2), ("row", 4),
                                        ("outer", 300)])
def test_large_inner_dimension_uses_bands_not_cells(view, index):
    # The five-word, 512-dimensional example: more terms than colours, one band per piece.
    rng = np.random.default_rng(1)
    q, kt = rng.standard_normal((5, 512)), rng.standard_normal((512, 5))
    fig = draw(view, q, kt, index, names=("Q", "K^T", "S"))
    assert len(fig.axes) == 3
    got = tuple(highlighted_cells(ax) for ax in fig.axes)
    assert got == expected_cells(view, 5, 512, 5, index)
    # one patch per band: a 512-long row is not drawn as 512 rectangles
    assert all(sum(p.get_gid() == "highlight" for p in ax.patches) <= 1 for ax in fig.axes)


def test_terms_share_one_colour_in_a_and_b():
    fig = draw_entry_view(A, B, 2, 1)
    ax_a, ax_b, _ = fig.axes
    colours = {}
    for ax, key in ((ax_a, lambda r, c: c), (ax_b, lambda r, c: r)):
        for patch in ax.patches:
            if patch.get_gid() == "highlight":
                c, r = (int(round(v)) for v in patch.get_xy())
                colours.setdefault(key(r, c), set()).add(matplotlib.colors.to_hex(
                    patch.get_facecolor()))
    # term t: A[i, t] and B[t, j] are drawn in the same colour, PALETTE[t]
    assert colours == {t: {PALETTE[t].lower()} for t in range(3)}


def test_labels_values_symbols_none_and_auto():
    def texts(fig):
        return labels_of(fig.axes)

    values = texts(draw_row_view(A, B, 0, labels="values"))
    assert len(values) == 9 + 6 + 6
    assert values[:3] == ["1", "2", "0"] and "8" in values      # C = A @ B has c_22 = 8
    symbols = texts(draw_row_view(A, B, 0, labels="symbols"))
    assert symbols[0] == "$a_{11}$" and "$c_{32}$" in symbols
    assert texts(draw_row_view(A, B, 0, labels="none")) == []
    assert texts(draw_row_view(A, B, 0)) == values                 # small: auto = values
    big = np.ones((5, 12))
    assert texts(draw_row_view(big, big.T, 0)) == []               # large: auto = none
    fractions = texts(draw_row_view(A / 4, B, 0, labels="values"))
    assert fractions[0] == "0.25"


def test_names_appear_in_titles_and_caption():
    fig = draw_entry_view(A, B, 0, 0, names=("Q", "K", "S"))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["Q  (3×3)", "K  (3×2)", "S = QK  (3×2)"]
    assert "s_{11}" in fig._suptitle.get_text()


def test_torch_and_integer_inputs_are_accepted():
    fig = draw_column_view(torch.tensor(A), torch.tensor(B), 1)
    assert highlighted_cells(fig.axes[2]) == {(0, 1), (1, 1), (2, 1)}
    fig = draw_column_view(A.astype(int), B.astype(np.int64), 1)
    assert len(fig.axes) == 3


def test_four_views_has_twelve_axes_in_order():
    fig = draw_four_views(A, B, i=2, j=1, t=0, labels="symbols")
    assert len(fig.axes) == 12
    got = [highlighted_cells(ax) for ax in fig.axes]
    want = (expected_cells("entry", 3, 3, 2, (2, 1)) + expected_cells("column", 3, 3, 2, 1)
            + expected_cells("row", 3, 3, 2, 2) + expected_cells("outer", 3, 3, 2, 0))
    assert got == list(want)


@pytest.mark.parametrize("block_size,panels", [(1, 4), (2, 3), (3, 2)])
def test_outer_product_sum_panels(block_size, panels):
    fig = draw_outer_product_sum(A, B, block_size=block_size, labels="values", index="j")
    assert len(fig.axes) == panels
    assert all(highlighted_cells(ax) == every(3, 2) for ax in fig.axes)
    # the partial sums printed in the panels add up to the product printed in the last one
    grids = [np.array([float(s) for s in labels_of([ax])]).reshape(3, 2) for ax in fig.axes]
    assert np.array_equal(sum(grids[:-1]), grids[-1])
    assert np.array_equal(grids[-1], A @ B)
    if block_size > 1:
        assert "\\sum_{j=1}" in fig.axes[0].get_title()


def test_convex_combination_figure():
    rng = np.random.default_rng(2)
    v = rng.standard_normal((5, 4))
    w = rng.random((3, 5))
    w /= w.sum(axis=1, keepdims=True)
    fig = draw_convex_combination(v, w @ v, dims=(1, 3))
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert ax.get_xlabel() == "feature 2" and ax.get_ylabel() == "feature 4"
    hull = [p for p in ax.patches if isinstance(p, matplotlib.patches.Polygon)]
    assert len(hull) == 1
    # every output lies inside the drawn hull
    path = hull[0].get_path()
    assert all(path.contains_point(pt, radius=1e-9) for pt in (w @ v)[:, [1, 3]])


def test_hull_of_a_square_with_an_inner_point():
    from attncore.lab.view_figures import _hull

    pts = np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5], [0.5, 0.0]], float)
    hull = _hull(pts)
    assert sorted(map(tuple, hull.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("call,exc,words", [
    (lambda: draw_entry_view(A, B, 3, 0), ValueError, "i: expected a 0-based row"),
    (lambda: draw_entry_view(A, B, 0, 2), ValueError, "j: expected a 0-based column"),
    (lambda: draw_row_view(A, B, -1), ValueError, "got -1"),
    (lambda: draw_outer_product_view(A, B, True), TypeError, "t: expected an int"),
    (lambda: draw_column_view(A, A[:2]), ValueError, "inner dimensions must agree"),
    (lambda: draw_column_view(A.tolist(), B), TypeError, "a: expected a numpy.ndarray"),
    (lambda: draw_column_view(A, B[0]), ValueError, "b: expected shape (p, n)"),
    (lambda: draw_column_view(A, B > 0), TypeError, "b: expected a real numeric dtype"),
    (lambda: draw_row_view(A, B, labels="latex"), ValueError, "labels: expected one of"),
    (lambda: draw_row_view(A, B, names=("A", "B")), ValueError, "names: expected three"),
    (lambda: draw_outer_product_sum(A, B, block_size=4), ValueError, "block_size"),
    (lambda: draw_outer_product_sum(A, B, index="key"), ValueError, "index: expected one"),
    (lambda: draw_convex_combination(B, A), ValueError, "same d_v"),
    (lambda: draw_convex_combination(A, A, dims=(1, 1)), ValueError, "dims: expected two"),
    (lambda: draw_convex_combination(A, A, dims=(0, 3)), ValueError, "dims[1]"),
    (lambda: matmul_flops(0, 1, 1), ValueError, "m: expected a positive int"),
    (lambda: words_moved("diagonal", 2, 2, 2), ValueError, "view: expected one of"),
    (lambda: words_moved("blocked", 2, 2, 2, tile=0), ValueError, "tile"),
    (lambda: time_matmul_views(2, 2, 2, repeats=0), ValueError, "repeats"),
])
def test_bad_input_is_named(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300))
@settings(max_examples=50, deadline=None)
def test_flops_are_two_m_n_p(m, p, n):
    assert matmul_flops(m, p, n) == 2 * m * n * p


def test_words_moved_formulas():
    m, p, n = 4, 3, 5
    assert words_moved("entries", m, p, n) == m * n * (2 * p + 1)
    assert words_moved("columns", m, p, n) == n * p * (3 * m + 1)
    assert words_moved("rows", m, p, n) == m * p * (3 * n + 1)
    assert words_moved("outer products", m, p, n) == p * (m + n + 2 * m * n)
    assert words_moved("lower bound", m, p, n) == m * p + p * n + m * n
    # tile 2 on m=4, n=5: 2 row blocks, 3 column blocks (the last one of width 1)
    assert words_moved("blocked", m, p, n, tile=2) == p * m * 3 + p * n * 2 + m * n


@given(st.integers(1, 200), st.integers(1, 200), st.integers(1, 200), st.integers(1, 256))
@settings(max_examples=50, deadline=None)
def test_words_moved_properties(m, p, n, tile):
    low = words_moved("lower bound", m, p, n)
    for view in ("entries", "columns", "rows", "outer products", "blocked"):
        assert words_moved(view, m, p, n, tile=tile) >= low
    # one block that holds all of C reads A and B exactly once: the lower bound
    assert words_moved("blocked", m, p, n, tile=max(m, n)) == low
    # bigger tiles never move more
    assert words_moved("blocked", m, p, n, tile=tile + 1) <= words_moved("blocked", m, p, n,
                                                                       tile=tile)


def test_blocking_raises_arithmetic_intensity():
    m = p = n = 1024
    flops = matmul_flops(m, p, n)
    loop_views = ("entries", "columns", "rows", "outer products")
    assert all(flops / words_moved(v, m, p, n) <= 1.01 for v in loop_views)
    assert math.isclose(flops / words_moved("blocked", m, p, n, tile=64), 64, rel_tol=0.05)


def test_timing_helper_returns_sane_ratios():
    result = time_matmul_views(12, 10, 8, repeats=1)
    assert set(result) == {"@", MEMORY_FLOOR} | set(MATMUL_VIEWS)
    assert result["@"]["ratio"] == 1.0
    for name, row in result.items():
        assert row["seconds"] > 0 and math.isfinite(row["seconds"])
        assert row["ratio"] > 0 and math.isfinite(row["ratio"])
        # one round: the ratio is that round's, and the quartiles collapse onto it
        assert math.isclose(row["ratio"], row["seconds"] / result["@"]["seconds"])
        assert row["ratio_q1"] == row["ratio"] == row["ratio_q3"]
        if name == MEMORY_FLOOR:
            assert math.isnan(row["max_abs_error"])
        else:
            assert row["max_abs_error"] < 1e-12


def test_timing_helper_reports_the_median_round_with_its_spread():
    result = time_matmul_views(6, 5, 4, repeats=5, views={"rows": MATMUL_VIEWS["rows"]})
    for row in result.values():
        assert 0 < row["ratio_q1"] <= row["ratio"] <= row["ratio_q3"]


def test_timing_helper_runs_blas_on_one_thread_and_restores_it():
    from threadpoolctl import threadpool_info

    before = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    seen = []

    def rows_view(a, b):
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
        return MATMUL_VIEWS["rows"](a, b)

    time_matmul_views(4, 4, 4, repeats=1, views={"rows": rows_view})
    assert seen and set(seen) == {1}
    after = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert after == before


def test_timing_helper_accepts_a_subset_of_views():
    result = time_matmul_views(4, 4, 4, repeats=1, views={"rows": MATMUL_VIEWS["rows"]})
    assert set(result) == {"@", "rows", MEMORY_FLOOR}


def test_view_timings_chart_has_one_bar_per_view_and_size():
    results = {s: time_matmul_views(s, s, s, repeats=3) for s in (3, 5)}
    fig = draw_view_timings(results)
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * len(MATMUL_VIEWS)       # the floor is not drawn as a bar
    assert [t.get_text() for t in ax.get_yticklabels()] == list(MATMUL_VIEWS)
    assert ax.get_xscale() == "log"
    # tick labels at least 9 pt, and the x labels (powers of ten) do not overlap
    fig.canvas.draw()
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert all(t.get_fontsize() >= 9 for t in labels + ax.get_yticklabels())
    boxes = sorted((t.get_window_extent() for t in labels), key=lambda b: b.x0)
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:]))
    with pytest.raises(ValueError, match="results"):
        draw_view_timings({})


def test_labels_of_close_points_are_pushed_apart():
    from attncore.lab.view_figures import _label_offsets

    pts = np.array([[0.0, 0.0], [1.0, 1.0], [0.50, 0.50], [0.52, 0.50]])
    offsets = np.array(_label_offsets(pts))
    # the two nearly equal points get labels on opposite sides
    assert offsets[2, 0] < 0 < offsets[3, 0]
    assert np.allclose(np.linalg.norm(offsets, axis=1), 13.0)


def test_a_transposed_factor_is_labelled_by_the_untransposed_entries():
    # Entry (t, j) of K^T is k_{jt}: the cells of K^T read k_{11}, k_{21}, ... along row 1, and
    # the caption of the row view names row t of K^T as column t of K, transposed.
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    fig = draw_row_view(q, k.T, 0, labels="symbols", names=("Q", "Kᵀ", "S"))
    row_one = labels_of([fig.axes[1]])[:4]
    assert row_one == ["$k_{11}$", "$k_{21}$", "$k_{31}$", "$k_{41}$"]
    assert "\\mathbf{k}_{:,t}^\\top" in fig._suptitle.get_text()
    assert fig.axes[2].get_title() == "S = QKᵀ  (4×4)"


@pytest.mark.parametrize("draw", [
    lambda: draw_four_views(A, B, labels="symbols"),
    lambda: draw_entry_view(A, B, 0, 1),
    lambda: draw_entry_view(np.ones((5, 512)), np.ones((512, 5)), 1, 3),
    lambda: draw_outer_product_sum(np.ones((5, 5)), np.ones((5, 4)) / 3, block_size=3),
    lambda: draw_convex_combination(B.T @ A.T, (B.T @ A.T)[:1]),
])
def test_figures_fit_the_content_column_with_legible_text(draw):
    # The book's content column is about 7.5 inches at 100 dpi: a wider figure is scaled
    # down, and its 9-point labels with it.
    fig = draw()
    assert fig.get_size_inches()[0] <= 7.5
    fig.canvas.draw()
    texts = [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()
             + ax.texts if t.get_text()]
    assert texts and min(t.get_fontsize() for t in texts) >= 9
