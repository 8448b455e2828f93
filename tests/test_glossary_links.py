"""The glossary (glossary.md) and scripts/glossary_links.py, which links the first use of each
of its terms in each chapter to its entry, tried on small made-up notebooks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import glossary_links as gl  # noqa: E402

GLOSSARY = """# Glossary

## Logits
<!-- glossary: logits, logit -->

Raw scores. [How a model is trained](chapters/00_how_a_model_is_trained.ipynb) has them.

## Key-value cache
<!-- glossary: key-value cache, KV cache -->

Kept keys and values.

## Adam
<!-- glossary: Adam -->

An optimiser.

## Cache
<!-- glossary: cache -->

Anything kept.
"""


def notebook(tmp_path: Path, *cells: str, name: str = "05_x.ipynb") -> Path:
    (tmp_path / "chapters").mkdir(exist_ok=True)
    path = tmp_path / "chapters" / name
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": c.splitlines(True)}
                    for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return path


def markdown(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]


@pytest.fixture
def glossary(tmp_path: Path) -> Path:
    path = tmp_path / "glossary.md"
    path.write_text(GLOSSARY)
    return path


def test_write_links_the_first_use_in_prose_only(tmp_path, glossary):
    nb = notebook(
        tmp_path,
        "# Logits and the KV cache\n\nThe `logits` in code, $logits$ in maths, and\n"
        "```python\nlogits = 1\n```\n<!-- logits in a comment -->\n"
        ":::{note} Logits in a directive line\nAn [existing link to logits](a.md) and "
        "<span title='logits'>x</span>.\n:::\n\nHere the Logits come, then logits again.",
        "adam in lower case is not Adam; the key-value\ncache is split over two lines; the "
        "KV cache once more; a cache.",
        "## References\n\n- Adam Roberts, Logits of old.")
    assert gl.link_notebook(nb, glossary) == 4
    first, second, refs = markdown(nb)
    assert first.count("](../glossary.md#logits)") == 1
    assert "the [Logits](../glossary.md#logits) come, then logits again" in first
    assert "`logits` in code, $logits$ in maths" in first          # code and maths untouched
    assert "# Logits and the KV cache\n" in first                   # the title untouched
    assert ":::{note} Logits in a directive line" in first
    assert "[Adam](../glossary.md#adam); the " in second and "adam in lower" in second
    assert "[key-value\ncache](../glossary.md#key-value-cache) is split" in second
    assert "the KV cache once more" in second                        # only the first use
    # the longer form wins where two overlap: "cache" is linked where it stands alone
    assert "a [cache](../glossary.md#cache)." in second
    assert refs == "## References\n\n- Adam Roberts, Logits of old."
    assert gl.problems(nb, glossary) == []
    before = nb.read_text()
    assert gl.link_notebook(nb, glossary) == 0 and nb.read_text() == before   # idempotent


def test_check_reports_an_unlinked_first_use_and_a_dead_anchor(tmp_path, glossary):
    nb = notebook(tmp_path, "The logits, then [the logits](../glossary.md#logits).",
                  "A [word](../glossary.md#no-such-term) and Adam.")
    found = "\n".join(gl.problems(nb, glossary))
    assert "cell 0: the first use of 'Logits', 'logits', is not linked" in found
    assert "the first use of 'Adam', 'Adam', is not linked" in found
    assert "../glossary.md#no-such-term names no heading of glossary.md" in found
    assert gl.main(["--check", "--glossary", str(glossary), str(nb)]) == 1


def test_the_chapter_that_treats_a_term_does_not_link_it_back(tmp_path, glossary):
    nb = notebook(tmp_path, "The logits and Adam.", name="00_how_a_model_is_trained.ipynb")
    gl.link_notebook(nb, glossary)
    assert markdown(nb) == ["The logits and [Adam](../glossary.md#adam)."]
    assert gl.problems(nb, glossary) == []


def test_the_glossary_defines_enough_terms_each_with_forms_and_real_links():
    from test_book_structure import heading_slugs

    glossary = ROOT / "glossary.md"
    terms = gl.terms(glossary)
    entries = [s for s in heading_slugs(glossary)[1:]]
    assert len(terms) >= 30 and len(terms) == len(entries), (len(terms), len(entries))
    assert len(set(entries)) == len(entries)
    assert {t.anchor for t in terms} == set(entries)
    for term in terms:
        for name in term.treated_in:
            assert (ROOT / "chapters" / name).is_file(), (term.heading, name)
    forms = [f.lower() for t in terms for f in t.forms]
    assert len(forms) == len(set(forms)), "a form is listed under two terms"


def test_the_chapters_link_their_first_uses():
    # The links are written into the chapters by `python3 scripts/glossary_links.py --write`;
    # every chapter must keep them current.
    notebooks = gl.chapter_notebooks()
    found = [p for nb in notebooks for p in gl.problems(nb, ROOT / "glossary.md")]
    assert not found, "\n".join(found[:20])
