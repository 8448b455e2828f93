"""scripts/portable_markdown.py: the older markup converted, once, and read back for the site.

The chapters themselves are checked by tests/test_book_structure.py (``--check``) and read in
a browser by tests/test_jupyterlab.py; the website's build (tests/test_site.py) reads them
through ``to_sphinx``. Here the conversion itself: what it writes, that a second run changes
nothing, and that ``to_sphinx`` gives back the MyST that sphinx-proof and sphinx-exercise read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import portable_markdown as pm  # noqa: E402

# A chapter in the older convention: one cell per case.
OLD = [
    "# A chapter\n\n:::{admonition} Learning goals\n:class: tip\n- Read.\n:::",
    ":::{prf:theorem} A bound\n:label: thm-old-bound\n\nFor every real $x$, $x^2 \\ge 0$.\n:::",
    "(old-section)=\n## A section\n\n{prf:ref}`thm-old-bound` holds; by {prf:ref}`thm-old-bound`"
    ", and {prf:ref}`(B) <thm-old-bound>`. See {ref}`old-section`.\n\n"
    "- {ref}`ex-old-sum` asks for it.\n\n```md\n:label: kept-in-code\n{prf:ref}`kept`\n```",
    ":::{exercise}\n:label: ex-old-sum\n\nWhat is $1000 + 408$?\n:::",
    "% <details><summary>Solution</summary>\n\n::::{solution} ex-old-sum\n:class: dropdown\n\n"
    "It is 1408.\n\n:::{prf:proof}\nAdd.\n:::\n::::\n\n% </details>\n## Summary\n\n"
    "As {ref}`ex-old-sum` showed.",
]
NEW = [
    "# A chapter\n\n:::{tip} Learning goals\n- Read.\n:::",
    ":::{prf:theorem} A bound\n<!-- label: thm-old-bound -->\n\n"
    "For every real $x$, $x^2 \\ge 0$.\n:::",
    "<!-- label: old-section -->\n## A section\n\n"
    '[Theorem "A bound"](#thm-old-bound) holds; by [Theorem "A bound"](#thm-old-bound), '
    'and [(B)](#thm-old-bound). See [the section "A section"](#old-section).\n\n'
    "- [An exercise below](#ex-old-sum) asks for it.\n\n"
    "```md\n:label: kept-in-code\n{prf:ref}`kept`\n```",
    ":::{exercise}\n<!-- label: ex-old-sum -->\n\nWhat is $1000 + 408$?\n:::",
    "::::{dropdown} Solution\n<details><summary></summary><!-- solution: ex-old-sum -->\n\n"
    "It is 1408.\n\n:::{prf:proof}\nAdd.\n:::\n::::\n\n</details>\n\n## Summary\n\n"
    "As [an exercise above](#ex-old-sum) showed.",
]
# What the site's build reads: the older MyST, with references as links.
SPHINX = [
    "# A chapter\n\n:::{admonition} Learning goals\n:class: tip\n- Read.\n:::",
    ":::{prf:theorem} A bound\n:label: thm-old-bound\n\nFor every real $x$, $x^2 \\ge 0$.\n:::",
    "(old-section)=\n" + NEW[2].split("\n", 1)[1],
    ":::{exercise}\n:label: ex-old-sum\n\nWhat is $1000 + 408$?\n:::",
    "::::{solution} ex-old-sum\n:class: dropdown\n\nIt is 1408.\n\n:::{prf:proof}\nAdd.\n:::\n"
    "::::\n\n\n## Summary\n\nAs [an exercise above](#ex-old-sum) showed.",
]


def notebook(sources: list[str]) -> dict:
    cells = [{"cell_type": "markdown", "id": f"c{i}", "metadata": {},
              "source": s.splitlines(keepends=True)} for i, s in enumerate(sources)]
    cells.insert(4, {"cell_type": "code", "execution_count": 1, "id": "answer", "metadata": {},
                     "outputs": [], "source": ["my_sum = None"]})
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def sources(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def test_the_older_convention_is_converted():
    old = notebook(OLD)
    new = pm.convert_notebook(old)
    assert sources(new) == NEW
    assert new["cells"][4] == old["cells"][4]            # only markdown cells change
    assert pm.notebook_problems(new) == []
    assert len(pm.notebook_problems(old)) >= 8          # each older form is reported


def test_a_converted_notebook_is_left_unchanged():
    new = pm.convert_notebook(notebook(OLD))
    assert pm.convert_notebook(new) == new


def test_the_site_reads_the_myst_it_needs():
    assert [pm.to_sphinx(s) for s in NEW] == SPHINX


def test_what_cannot_be_converted_is_reported():
    # a reference to another notebook's label keeps its role, and --check says so
    nb = pm.convert_notebook(notebook(["See {prf:ref}`thm-elsewhere`.", *OLD[1:]]))
    assert sources(nb)[0] == "See {prf:ref}`thm-elsewhere`."
    assert any("{prf:ref} role" in p for p in pm.notebook_problems(nb))


def test_the_command_writes_and_checks(tmp_path):
    path = tmp_path / "chapter.ipynb"
    path.write_text(pm.dump(notebook(OLD)))
    script = [sys.executable, str(ROOT / "scripts" / "portable_markdown.py")]
    check = subprocess.run([*script, "--check", str(path)], capture_output=True, text=True)
    assert check.returncode == 1 and "a :label: option" in check.stdout, check.stdout
    write = subprocess.run([*script, "--write", str(path)], capture_output=True, text=True)
    assert write.returncode == 0 and "converted" in write.stdout, write.stdout
    assert sources(json.loads(path.read_text())) == NEW
    again = subprocess.run([*script, "--write", str(path)], capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout == "", again.stdout


def test_a_bare_solution_gets_its_details_box():
    cell = ":::{solution} ex-old-sum\n:class: dropdown\n\nIt is 1408.\n:::\nNext."
    nb = pm.convert_notebook(notebook([*OLD[:4], cell]))
    assert sources(nb)[4] == (":::{dropdown} Solution\n"
                              "<details><summary></summary><!-- solution: ex-old-sum -->\n\n"
                              "It is 1408.\n:::\n\n</details>\n\nNext.")
    assert pm.notebook_problems(nb) == []
