"""``glue``: put a number computed in a notebook into the chapter's prose.

A sentence that interprets a run quotes the run's own number with ``{glue:text}`name``` so
that prose and outputs cannot disagree. The book's builder, myst-nb, reads what ``glue``
stores: the value's display, in a ``display_data`` output whose metadata names it.

This ``glue`` stores exactly what ``myst_nb.glue`` stores (``tests/test_glue.py`` compares the
two outputs), in the same few lines, without importing ``myst_nb.glue``'s module: that module
imports nbformat, whose schema validator builds a grammar for IRIs when it is imported, which
costs about 2 s of CPU in every kernel, the first time a chapter glues a number. It also
lets a chapter run where myst-nb is not installed (on its own, on Colab or Binder), with
stored outputs that do not depend on where it ran.

Glue short strings that are already formatted for the sentence (``f"{ratio:.2f}"``), not
raw floats, so the stored output is the same on every machine.
"""

from __future__ import annotations

from typing import Any

__all__ = ["glue"]

# The prefix myst-nb gives the MIME types of a value glued with display=False, so that
# Jupyter shows nothing for it (myst_nb.ext.glue.GLUE_PREFIX).
HIDDEN_PREFIX = "application/papermill.record/"


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Store ``variable``'s display under ``name``, as ``myst_nb.glue`` does.

    ``name`` is what the prose cites (``{glue:text}`name```); with ``display=False`` the
    notebook shows nothing and the book shows the value only where the prose cites it.
    Returns None; the value is written to the cell's outputs.
    """
    import IPython.core.formatters
    from IPython.display import display as ipy_display

    mimebundle, metadata = IPython.core.formatters.format_display_data(variable)
    mime_prefix = "" if display else HIDDEN_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=mime_prefix)
    ipy_display({mime_prefix + k: v for k, v in mimebundle.items()}, raw=True,
                metadata=metadata)
