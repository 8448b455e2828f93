"""The book's own promises about its notebooks, checked without running them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").rglob("*.ipynb"))
NOTEBOOKS = [p for p in NOTEBOOKS if ".ipynb_checkpoints" not in p.parts]


def toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = {toc["root"]}

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.add(str(Path(node["file"]).with_suffix("")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return found


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks found under chapters/"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_in_the_table_of_contents(nb):
    stem = str(nb.relative_to(ROOT).with_suffix(""))
    assert stem in toc_files(), f"{stem} is not listed in _toc.yml"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_stored_outputs(nb):
    # nbval strict compares stored outputs with a fresh run; a notebook saved without outputs
    # would pass vacuously.
    cells = json.loads(nb.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code, f"{nb.name} has no code cells"
    assert any(c.get("outputs") for c in code), f"{nb.name} has no stored outputs"
    unexecuted = [i for i, c in enumerate(code) if c.get("execution_count") is None
                  and "".join(c["source"]).strip()]
    assert not unexecuted, f"{nb.name}: code cells {unexecuted} were never executed"
    counts = [c["execution_count"] for c in code if c.get("execution_count") is not None]
    assert counts == sorted(counts), f"{nb.name}: cells were executed out of order {counts}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_ignored_outputs_state_a_reason(nb):
    # nbval recognises a marker comment only when it stands alone on its line
    # (`# NBVAL_IGNORE_OUTPUT`), or the cell tag `nbval-ignore-output`; either way the cell
    # must say why in a comment: after the marker on its line, or on the next line.
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        tags = {t for t in cell.get("metadata", {}).get("tags", []) if t.startswith("nbval")}
        marked = [i for i, line in enumerate(lines) if re.match(r"\s*#\s*NBVAL_\w+", line)]
        if tags and not marked:
            pytest.fail(f"{nb.name}: a cell tagged {sorted(tags)} has no `# NBVAL_...` comment "
                        f"giving the reason: {lines[:1]}")
        for i in marked:
            reason = re.sub(r"^\s*#\s*NBVAL_\w+", "", lines[i])
            if i + 1 < len(lines) and lines[i + 1].lstrip().startswith("#"):
                reason += " " + lines[i + 1].lstrip("# ")
            assert len(reason.strip(": -").split()) >= 4, \
                f"{nb.name}: an NBVAL marker without a stated reason: {lines[i]!r}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_shape(nb):
    cells = json.loads(nb.read_text())["cells"]
    md = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert md.lstrip().startswith("# "), f"{nb.name} must start with a title"
    title = md.lstrip().splitlines()[0]
    # Titles appear in every page's navigation, and pages without math load no MathJax.
    assert "$" not in title, f"{nb.name}: TeX in the title would show raw in the sidebar: {title}"
    assert re.search(r"learning goals", md, re.I), f"{nb.name} has no learning goals"
    assert re.search(r"^## Summary", md, re.M), f"{nb.name} has no summary section"
    kernel = json.loads(nb.read_text())["metadata"].get("kernelspec", {}).get("name")
    assert kernel == "python3", f"{nb.name} uses kernel {kernel!r}, expected python3"


def test_nbval_runs_strict():
    lax = "--nbval" + "-lax"   # spelled in two parts so that a grep for the flag finds only real uses
    for script in [ROOT / "scripts" / "test", ROOT / ".ci" / "run"]:
        assert lax not in script.read_text()
    assert "--nbval " in (ROOT / "scripts" / "test").read_text()
