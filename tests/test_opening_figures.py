"""Each chapter's opening figure: a matplotlib Figure, the same on every call."""

import io
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncore.lab import opening_figures  # noqa: E402


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=50, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


@pytest.mark.parametrize("name", opening_figures.__all__)
def test_opening_figure_is_a_deterministic_figure(name):
    # two calls, each drawn to a PNG: the first also answers the type and size checks
    fig = getattr(opening_figures, name)()
    assert isinstance(fig, Figure)
    width, height = fig.get_size_inches()
    assert (width, height) == opening_figures.SIZE
    first = _png(fig)
    fig = getattr(opening_figures, name)()
    assert isinstance(fig, Figure)
    assert _png(fig) == first


def test_each_function_opens_one_chapter():
    # A chapter's opening cell calls its function as ``opening_figures.NAME()``; counting
    # the calls, not the functions, lets chapters be added, split or renumbered.
    chapters = sorted((Path(__file__).resolve().parents[1] / "chapters").glob("*.ipynb"))
    users = {name: [] for name in opening_figures.__all__}
    for nb in chapters:
        for name in re.findall(r"opening_figures\.(\w+)\(", nb.read_text()):
            assert name in users, f"{nb.name} calls opening_figures.{name}, not in __all__"
            users[name].append(nb.name)
    for name, opened in users.items():
        assert getattr(opening_figures, name).__doc__
        assert len(opened) == 1, f"opening_figures.{name} opens {opened or 'no chapter'}"
