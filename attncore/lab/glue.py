"""``glue``: store a number computed in a notebook, so that a check can hold the prose to it.

A sentence that interprets a run writes the run's number literally, so that it reads the same
on the website, in JupyterLab and in any notebook viewer, and names it in its markdown cell's
metadata, ``{"attncore": {"numbers": {"sqrt-dk-ratio-512": "0.031"}}}``. A hidden code cell
right after the computation (tags ``remove-cell``, ``jupyter.source_hidden``), which holds
only glue calls, stores the number under that label: ``glue("sqrt-dk-ratio-512",
f"{ratio:.3f}", display=False)``. nbval proves that the stored output equals a fresh run, and
``scripts/prose_numbers.py --check`` that the prose equals the stored output
(``--write`` puts a re-run's numbers into the prose).

The output is exactly what ``myst_nb.glue`` stores (``tests/test_glue.py`` compares the two):
the value's display, in a ``display_data`` output whose metadata names it. This module does
not import ``myst_nb.glue``'s module: that module imports nbformat, whose schema validator
builds a grammar for IRIs when it is imported, which costs about 2 s of CPU in every kernel,
the first time a chapter glues a number. It also lets a chapter run where myst-nb is not
installed (on its own, on Colab or Binder), with stored outputs that do not depend on where
it ran.

Glue short strings that are already formatted for the sentence (``f"{ratio:.2f}"``), not
raw floats, so the stored output is the same on every machine and the prose can quote it
exactly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["glue"]

# The prefix myst-nb gives the MIME types of a value glued with display=False, so that
# Jupyter shows nothing for it (myst_nb.ext.glue.GLUE_PREFIX).
HIDDEN_PREFIX = "application/papermill.record/"


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Store ``variable``'s display under ``name``, as ``myst_nb.glue`` does.

    ``name`` is the label a markdown cell's ``attncore.numbers`` metadata gives the number it
    quotes; with ``display=False`` the notebook shows nothing.
    Returns None; the value is written to the cell's outputs.
    """
    import IPython.core.formatters
    from IPython.display import display as ipy_display

    mimebundle, metadata = IPython.core.formatters.format_display_data(variable)
    mime_prefix = "" if display else HIDDEN_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=mime_prefix)
    ipy_display({mime_prefix + k: v for k, v in mimebundle.items()}, raw=True,
                metadata=metadata)
