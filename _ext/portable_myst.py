"""Reads the chapters' portable markdown as the full MyST that the site's extensions need.

The chapter notebooks are written so that they read right in every frontend, with MyST and
without it (scripts/portable_markdown.py, which also says why): labels are HTML comments,
references are Markdown links with words, and each solution is a dropdown that opens with a
``<details>`` HTML block. This extension gives Sphinx what sphinx-proof and sphinx-exercise
expect, without changing the files:

- when Sphinx reads a notebook (``source-read``), every markdown cell goes through
  ``portable_markdown.to_sphinx``: a label comment becomes the directive's ``:label:`` option
  or a ``(NAME)=`` target, and a solution dropdown becomes the exercise's numbered
  ``{solution}`` (collapsed: ``:class: dropdown``), its ``<details>`` lines dropped;
- a link ``[words](#label)`` to a theorem, lemma or other sphinx-proof box is resolved to
  that box (myst-parser resolves links to sections and exercises itself, but asks
  sphinx-proof only about ``{prf:ref}`` roles), keeping the link's words.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.nodes import make_refnode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import portable_markdown  # noqa: E402


def _read_as_myst(app: Sphinx, docname: str, source: list[str]) -> None:
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    nb = json.loads(source[0])
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            text = "".join(cell["source"])
            myst = portable_markdown.to_sphinx(text)
            if myst != text:
                cell["source"] = myst
    source[0] = json.dumps(nb)


class ProofLinks(SphinxPostTransform):
    """``[words](#label)`` to a sphinx-proof box: a link to the box, with the words."""

    default_priority = 8        # before myst-parser's resolver (9), which would warn

    def run(self, **kwargs) -> None:
        proofs = getattr(self.env, "proof_list", {})
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain") == "doc":
                continue
            target = proofs.get(node["reftarget"])
            if target is None:
                continue
            content = node[0].deepcopy() if len(node) else nodes.Text(node["reftarget"])
            ref = make_refnode(self.app.builder, node.get("refdoc", self.env.docname),
                               target["docname"], node["reftarget"], content)
            node.replace_self(ref)


def setup(app: Sphinx) -> dict:
    app.connect("source-read", _read_as_myst)
    app.add_post_transform(ProofLinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
