"""The student edition (scripts/student-edition): the bundle and the PDF without solutions.

The bundle is built once (a few seconds: attncore's wheel); its notebooks must hold no
solution, every exercise and check cell, and code cells and outputs identical to the
course's (which the suite runs under nbval), and one short notebook runs under nbval. The
PDF's page is assembled from a small site here; tests/test_site_pdf.py assembles it from the
built site (without printing it again)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from built_site import small_site

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "_ext"))
import book_pdf  # noqa: E402
import bundle_pages  # noqa: E402
import portable_markdown  # noqa: E402
import student_edition  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
FOLDER = "attention-course"


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    """The student bundle, unzipped."""
    out = tmp_path_factory.mktemp("edition") / "out"
    written = student_edition.build(out, pdf=False)
    assert written == [out / student_edition.BUNDLE]
    unzipped = out.parent / "unzipped"
    with zipfile.ZipFile(written[0]) as zf:
        zf.extractall(unzipped)
    return unzipped / FOLDER


def _markdown(nb: dict) -> str:
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _solution_lines(nb: dict) -> list[str]:
    """Distinctive lines of the notebook's solutions (long enough not to occur elsewhere)."""
    found = []
    for _, body in portable_markdown.solutions(nb).values():
        found += [ln.strip() for ln in body.splitlines() if len(ln.strip()) >= 40]
    return found


def test_no_solution_in_the_student_notebooks(edition):
    assert sum(len(portable_markdown.solutions(json.loads(p.read_text()))) for p in CHAPTERS)
    for path in CHAPTERS:
        original = json.loads(path.read_text())
        student = json.loads((edition / path.name).read_text())
        assert portable_markdown.solutions(student) == {}, path.name
        assert "<!-- solution:" not in json.dumps(student), path.name
        prose = _markdown(student)
        outside = _markdown({**original, "cells": [c for c in original["cells"]
                                                   if c["cell_type"] == "markdown"]})
        for line in _solution_lines(original):
            # a line of a solution that the chapter's other text does not also hold
            if outside.count(line) == 1:
                assert line not in prose, f"{path.name}: a solution's line is left: {line}"


def test_every_exercise_and_code_cell_is_kept_as_it_is(edition):
    for path in CHAPTERS:
        shipped = json.loads(bundle_pages.chapter_for_bundle(path))
        student = json.loads((edition / path.name).read_text())
        code = [c for c in shipped["cells"] if c["cell_type"] == "code"]
        assert [c for c in student["cells"] if c["cell_type"] == "code"] == code, path.name
        labels = portable_markdown.exercises(shipped)
        assert portable_markdown.exercises(student).keys() == labels.keys(), path.name
        checks = [c for c in code if "check_exercise(" in "".join(c["source"])]
        assert all(c in student["cells"] for c in checks), path.name
        assert student["metadata"] == shipped["metadata"], path.name


def test_the_bundle_says_it_is_the_student_edition(edition):
    assert student_edition.NOTE in (edition / "README.txt").read_text()
    assert student_edition.NOTE in (edition / "AGENTS.md").read_text()
    assert (edition / "LICENSE").is_file()


def test_a_student_notebook_runs_under_nbval(edition):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        # (nbval named: scripts/test turns plugin auto-loading off for every pytest)
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "nbval.plugin",
         "-q", "--nbval",
         "--nbval-sanitize-with", str(ROOT / "nbval_sanitize.cfg"),
         str(edition / "00_how_to_use.ipynb")],
        cwd=edition, env=env, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


# --- removing solutions, and what is refused --------------------------------------------------

SOLVED = """Intro.

:::{exercise}
<!-- label: ex-x-one -->

Compute it.
:::

:::{dropdown} Solution
<details><summary></summary><!-- solution: ex-x-one -->

The secret answer is forty-two.
:::

</details>

After.
"""


def test_a_solution_is_removed_and_the_rest_kept():
    out = student_edition.without_solutions(SOLVED, "x.ipynb, cell 3")
    assert "secret" not in out and "<details>" not in out and "Solution" not in out
    assert out.startswith("Intro.") and "Compute it." in out and out.endswith("After.\n")


@pytest.mark.parametrize("broken, words", [
    (SOLVED.replace("</details>\n", ""), "has no </details> line"),
    (SOLVED.replace("<details><summary></summary><!-- solution: ex-x-one -->\n", ""),
     "does not open with"),
    ("Text.\n\n</details>\n", "with no ':::{dropdown} Solution' line before it"),
])
def test_unpaired_markers_are_refused_naming_the_cell(broken, words):
    with pytest.raises(student_edition.EditionError, match=re.escape(words)) as err:
        student_edition.without_solutions(broken, "x.ipynb, cell 3")
    assert "x.ipynb, cell 3" in str(err.value)


def _fake_root(tmp_path: Path, source: str) -> Path:
    root = tmp_path / "course"
    (root / "chapters").mkdir(parents=True)
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# T\n"},
                    {"cell_type": "markdown", "metadata": {}, "source": source}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (root / "chapters" / "01_x.ipynb").write_text(json.dumps(nb))
    return root


def test_a_broken_notebook_or_a_used_folder_writes_nothing(tmp_path, capsys):
    root = _fake_root(tmp_path, SOLVED.replace("</details>\n", ""))
    out = tmp_path / "out"
    with pytest.raises(student_edition.EditionError, match=r"01_x\.ipynb, cell 1"):
        student_edition.build(out, pdf=False, root=root)
    assert not out.exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "mine.txt").write_text("keep")
    assert student_edition.main([str(used), "--no-pdf"]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in used.iterdir()] == ["mine.txt"]


def test_the_pdf_needs_the_built_site(tmp_path):
    with pytest.raises(student_edition.EditionError, match="--no-pdf"):
        student_edition.build(tmp_path / "out", root=ROOT, site=tmp_path / "no-site")
    assert not (tmp_path / "out").exists()


def test_the_pdf_is_printed_by_the_browser_the_book_uses(tmp_path, monkeypatch):
    # The one lookup of _ext/browser.py (a variable set wrong is an error that names it),
    # not a search of its own for a program called chromium.
    root = tmp_path / "course"
    root.mkdir()
    site = small_site(root, [(None, [("01_x", "One", "<p>x</p>")])])
    monkeypatch.setenv("ATTNCORE_BROWSER", str(tmp_path / "no-browser"))
    with pytest.raises(student_edition.EditionError,
                       match=r"ATTNCORE_BROWSER=.*no-browser.*: no such file.*--no-pdf"):
        student_edition.build(tmp_path / "out", root=ROOT, site=site)
    assert not (tmp_path / "out").exists()


def test_the_pdf_page_leaves_the_solutions_out(tmp_path):
    # A two-page site as Sphinx writes it: the printable page of the student edition holds
    # the exercise but neither the solution nor the part "Solutions to the exercises".
    root = tmp_path / "course"
    root.mkdir()
    site = small_site(root, [(None, [("01_x", "One",
                                       '<div class="exercise"><p>Compute it.</p></div>'
                                       '<div class="solution"><p>The secret answer.</p></div>'
                                       )])], title_suffix=" \u2014 Attention, from the proof up")
    full = book_pdf.assemble(site, root).read_text()
    assert "secret" in full and "Solutions to the exercises" in full
    # the build's page without solutions (written beside the book's, from the same reading)
    # is the one scripts/student-edition assembles
    beside = (site.parent / "print" / book_pdf.STUDENT_FILE).read_text()
    student = book_pdf.assemble(site, root, solutions=False, filename="student.html").read_text()
    assert beside == student
    assert "Compute it." in student and "secret" not in student
    assert "Solutions to the exercises" not in student
    assert "CC BY 4.0" in student
    assert (site.parent / "print" / "book.html").read_text() == full, "the book's page is kept"
