"""``glue``: put a number computed in a notebook into the chapter's prose.

A sentence that interprets a run quotes the run's own number with ``{glue:text}`name``` so
that prose and outputs cannot disagree. This is myst-nb's ``glue``; where myst-nb is not
installed (a notebook run on its own, on Colab or Binder) a stand-in stores the same output,
so a chapter runs anywhere and its stored outputs do not depend on where it ran.

Glue short strings that are already formatted for the sentence (``f"{ratio:.2f}"``), not
raw floats, so the stored output is the same on every machine.
"""

from __future__ import annotations

from typing import Any

__all__ = ["glue"]

try:
    from myst_nb import glue
except ImportError:  # pragma: no cover - exercised only outside the book's environment
    def glue(name: str, variable: Any, display: bool = True) -> None:
        """Store ``variable``'s display under ``name``, as ``myst_nb.glue`` does."""
        import IPython.core.formatters
        from IPython.display import display as ipy_display

        mimebundle, metadata = IPython.core.formatters.format_display_data(variable)
        mime_prefix = "" if display else "application/papermill.record/"
        metadata["scrapbook"] = dict(name=name, mime_prefix=mime_prefix)
        ipy_display({mime_prefix + k: v for k, v in mimebundle.items()}, raw=True,
                    metadata=metadata)
