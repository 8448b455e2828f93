"""Spend less of the build in Python's garbage collector.

Sphinx builds one large doctree per page, full of reference cycles (every node points to its
parent), and the API page's autodoc imports attncore and torch: several hundred thousand
long-lived objects that every full collection scans again, though none of them is ever
garbage. Measured on this book (13 pages, one process, time inside gc callbacks): 7.7 s of a
28 s build went to collecting. Moving what exists once Sphinx has started, and again once
every page is read, into the permanent generation (``gc.freeze``), and collecting the
youngest generation every 10,000 allocations rather than 700, cut that to 3.4 s with the
same peak memory (0.24 GB). The garbage is still collected; only the scans of objects that
stay alive are saved.
"""

from __future__ import annotations

import gc

from sphinx.application import Sphinx


def _freeze_survivors(*_args) -> None:
    gc.collect()          # free what is garbage now, so that only live objects are frozen
    gc.freeze()


def setup(app: Sphinx) -> dict:
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(10_000, older, oldest)
    app.connect("builder-inited", _freeze_survivors)
    app.connect("env-updated", lambda app, env: _freeze_survivors())
    return {"parallel_read_safe": True, "parallel_write_safe": True}
