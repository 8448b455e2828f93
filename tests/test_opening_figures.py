"""Each chapter's opening figure: a matplotlib Figure, the same on every call."""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncore.lab import opening_figures  # noqa: E402



def _png(name: str) -> bytes:
    fig = getattr(opening_figures, name)()
    assert isinstance(fig, Figure)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=50, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


@pytest.mark.parametrize("name", opening_figures.__all__)
def test_opening_figure_is_a_deterministic_figure(name):
    fig = getattr(opening_figures, name)()
    assert isinstance(fig, Figure)
    width, height = fig.get_size_inches()
    assert (width, height) == opening_figures.SIZE
    plt.close(fig)
    assert _png(name) == _png(name)


def test_every_chapter_has_one():
    assert len(opening_figures.__all__) == 15
    for name in opening_figures.__all__:
        assert getattr(opening_figures, name).__doc__
