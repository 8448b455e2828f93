"""Tests of attncore.lab.plotting: the heatmap shows the matrix it is given, legibly."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attncore.lab.plotting import plot_attention  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def weights(n_q=3, n_k=4, seed=0):
    w = np.random.default_rng(seed).random((n_q, n_k))
    return w / w.sum(axis=1, keepdims=True)


def test_heatmap_shows_the_matrix_with_labels_and_annotations():
    w = weights()
    ax = plot_attention(w, query_labels=["a", "b", "c"], key_labels=["w", "x", "y", "z"],
                        title="t")
    assert np.array_equal(ax.images[0].get_array(), w)
    assert ax.images[0].get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    texts = [t.get_text() for t in ax.texts]
    assert texts == [f"{v:.2f}" for v in w.ravel()]
    assert ax.get_title() == "t"
    assert len(ax.figure.axes) == 2                        # the heatmap and its colour bar


def test_text_is_at_least_nine_points():
    ax = plot_attention(weights(5, 5))
    ax.figure.canvas.draw()
    sizes = [t.get_fontsize() for t in ax.texts + ax.get_xticklabels()
             + ax.get_yticklabels()]
    assert min(sizes) >= 9


def test_colorbar_can_be_left_out_and_torch_is_accepted():
    fig, axes = plt.subplots(1, 2)
    plot_attention(torch.tensor(weights()), ax=axes[0], colorbar=False)
    plot_attention(weights(), ax=axes[1])
    assert len(fig.axes) == 3


def test_large_matrices_are_not_annotated_and_bad_shapes_are_named():
    assert not plot_attention(weights(9, 9)).texts
    with pytest.raises(ValueError, match=r"weights: expected shape \(n_q, n_k\)"):
        plot_attention(np.ones(3))


def test_sharp_figures_stores_retina_pngs_on_white():
    # In IPython: figures become PNGs with twice the pixels, shown at their 1x size through
    # the width and height metadata (nbval skips PNG data and metadata, so stored outputs
    # stay comparable), on an opaque white background that dark pages cannot swallow.
    import base64
    import io

    from IPython.core.interactiveshell import InteractiveShell

    from attncore.lab.plotting import sharp_figures

    saved = dict(matplotlib.rcParams)
    shell = InteractiveShell.instance()
    try:
        sharp_figures()
        fig, ax = plt.subplots(figsize=(2, 1), dpi=100)
        ax.plot([0, 1])
        data, metadata = shell.display_formatter.format(fig)
        plt.close(fig)
        png = data["image/png"]
        image = plt.imread(io.BytesIO(base64.b64decode(png)))
        shown = metadata["image/png"]
        assert image.shape[1] >= 2 * shown["width"] - 2 and shown["width"] <= 200
        assert "image/svg+xml" not in data
        assert matplotlib.rcParams["figure.facecolor"] == "white"
        assert image[0, 0, 3] == 1.0, "the background must be opaque"
    finally:
        InteractiveShell.clear_instance()
        matplotlib.rcParams.update(saved)
