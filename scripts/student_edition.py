"""The student edition: the course bundle and the PDF without the solutions.

    scripts/student-edition OUT            # the bundle and the PDF (needs the built site)
    scripts/student-edition OUT --no-pdf   # the bundle alone

For a teacher who grades the exercises. It writes into the new folder ``OUT``:

- ``attention-course-student.zip``, the course bundle (_ext/course_bundle.py) whose notebooks
  have no solutions: every collapsed solution, from its ``:::{dropdown} Solution`` line to
  its ``</details>`` line, is removed from the markdown, and a markdown cell left empty is
  removed. The exercises and their check cells stay; every code cell and its outputs are
  exactly as in the course, so the notebooks run as the course's do.
- ``attention-from-the-proof-up-student.pdf``, the book's PDF (_ext/book_pdf.py) without its
  part "Solutions to the exercises", printed from the site that ``./scripts/build-book``
  built into ``_build/html`` (with Chromium, as the book's PDF is).

The published site and bundle keep their solutions. It refuses, and writes nothing, where
``OUT`` exists and is not empty, where a notebook's solution markers do not pair up (naming
the notebook and the cell), and, for the PDF, where the site is not built or Chromium is
missing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import book_pdf  # noqa: E402
import browser  # noqa: E402
import course_bundle  # noqa: E402

BUNDLE = "attention-course-student.zip"
PDF = "attention-from-the-proof-up-student.pdf"
OPEN = re.compile(r"^:{3,}\{dropdown\} Solution\s*$")
SOLUTION_LINE = re.compile(r"^<details><summary></summary><!-- solution: [\w.-]+ -->\s*$")
CLOSE = "</details>"
NOTE = ("This is the student edition of the course: the notebooks hold the exercises\n"
        "and their self-checks, but not the solutions, which your teacher keeps.")


class EditionError(ValueError):
    """A notebook or a folder that the student edition refuses."""


def without_solutions(source: str, where: str) -> str:
    """The markdown ``source`` without its solutions; EditionError naming ``where`` (the
    notebook and the cell) where an opening and a ``</details>`` line do not pair up."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == CLOSE:
            raise EditionError(f"{where}, line {i + 1}: a {CLOSE} line with no "
                               "':::{dropdown} Solution' line before it")
        if not OPEN.match(line):
            out.append(line)
            i += 1
            continue
        nxt = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
        if nxt is None or not SOLUTION_LINE.match(lines[nxt]):
            raise EditionError(f"{where}, line {i + 1}: the solution does not open with a "
                               "'<details><summary></summary><!-- solution: ... -->' line")
        end = next((j for j in range(nxt + 1, len(lines))
                    if lines[j].strip() == CLOSE or OPEN.match(lines[j])), None)
        if end is None or OPEN.match(lines[end]):
            raise EditionError(f"{where}, line {i + 1}: the solution has no {CLOSE} line "
                               "after it")
        i = end + 1
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out))
    return text.strip("\n") + ("\n" if source.endswith("\n") and text.strip() else "")


def student_notebook(path: Path) -> dict:
    """The notebook at ``path`` without its solutions (EditionError where they do not pair
    up); its code cells are the same objects as in the file."""
    nb = json.loads(path.read_text())
    cells = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            new = without_solutions(source, f"{path.name}, cell {i}")
            if new != source:
                if not new.strip():
                    continue
                cell = {**cell, "source": new.splitlines(keepends=True)}
        cells.append(cell)
    return {**nb, "cells": cells}


def _refuse_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EditionError(f"OUT: {out} exists and is not an empty folder; name a new one")


def build(out: Path, *, pdf: bool = True, root: Path = ROOT,
          site: Path | None = None) -> list[Path]:
    """Write the student edition into ``out``; return the files written."""
    out = Path(out)
    _refuse_out(out)
    site = Path(site) if site is not None else root / "_build" / "html"
    chromium = None
    if pdf:
        if not (site / "index.html").is_file():
            raise EditionError(f"the PDF is printed from the built site, and {site} has none: "
                               "run ./scripts/build-book first, or pass --no-pdf")
        # the browser the book's PDF is printed with (_ext/browser.py: ATTNCORE_BROWSER, then
        # a headless shell, Chromium or Chrome)
        chromium, why = browser.browser_or_none()
        if chromium is None:
            raise EditionError(f"the PDF is printed by a Chromium-family browser: {why}; "
                               "or pass --no-pdf")
    notebooks = sorted((root / "chapters").glob("*.ipynb"))
    students = {nb.name: student_notebook(nb) for nb in notebooks}   # all checked first
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "chapters"
        folder.mkdir()
        for name, nb in students.items():
            (folder / name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
        out.mkdir(parents=True, exist_ok=True)
        written.append(course_bundle.build_bundle(
            root, out / BUNDLE, chapters=sorted(folder.glob("*.ipynb")), note=NOTE))
    if pdf:
        page = book_pdf.assemble(site, root, solutions=False,
                                filename=book_pdf.STUDENT_FILE)
        book_pdf.print_pdf(page, out / PDF, chromium)
        written.append(out / PDF)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/student-edition",
        description="Write the course bundle and the PDF without the solutions into the new "
                    "folder OUT, for a class whose exercises are graded.")
    parser.add_argument("out", metavar="OUT", type=Path, help="a folder that does not exist "
                        "yet, or is empty")
    parser.add_argument("--no-pdf", action="store_true", help="write the bundle alone")
    args = parser.parse_args(argv)
    try:
        for path in build(args.out, pdf=not args.no_pdf):
            print(f"student edition: {path}")
    except EditionError as err:
        print(f"student-edition: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
