"""Marks on the website the outputs that are the building machine's measurements.

Every output a chapter stores is what a fresh run prints, on any machine, except those of the
cells that time code or measure memory (the cells nbval skips, tagged
``nbval-ignore-output``, each with its reason in its metadata). Chapter 0 says so; this
extension puts a line under each such cell's output on the site, so that a reader knows
which numbers are this run's, on the machine that built the page.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx

TAG_CLASS = "tag_nbval-ignore-output"
NOTE = ("Measured on the machine that built this page: a run on yours prints its own "
        "numbers.")


def _mark(app: Sphinx, doctree: nodes.document) -> None:
    for cell in list(doctree.findall(nodes.container)):
        if cell.get("nb_element") == "cell_code" and TAG_CLASS in cell["classes"]:
            if any(c.get("nb_element") == "cell_code_output"
                   for c in cell.findall(nodes.container)):
                cell += nodes.paragraph("", NOTE, classes=["attncore-measured"])


def setup(app: Sphinx) -> dict:
    app.connect("doctree-read", _mark)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
