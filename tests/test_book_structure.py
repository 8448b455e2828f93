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


# --- the course's conventions (CONTRIBUTING.md): exercises, proofs, references, layout -----

PAGES_MD = sorted((ROOT / "appendix").glob("*.md")) + [ROOT / "index.md", ROOT / "performance.md"]
LINE_LIMIT = 80     # characters of code and printed output that show whole in the content column


def markdown_of(path: Path) -> str:
    if path.suffix == ".md":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def directives(md: str, name: str) -> list[tuple[str, str]]:
    """(argument, body) of every ```{name} argument ... ``` block (backtick or colon fences)."""
    pattern = rf"^(`{{3,}}|:{{3,}})\{{{name}\}}[ \t]*(.*?)\n(.*?)^\1[ \t]*$"
    return [(m.group(2).strip(), m.group(3)) for m in re.finditer(pattern, md, re.M | re.S)]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_are_numbered_with_collapsed_solutions(nb):
    md = markdown_of(nb)
    exercises = directives(md, "exercise")
    assert len(exercises) >= 3 or nb.name.startswith("00_"), \
        f"{nb.name}: expected at least three {{exercise}} blocks, found {len(exercises)}"
    labels = []
    for _, body in exercises:
        m = re.search(r"^:label:\s*(ex-[\w-]+)\s*$", body, re.M)
        assert m, f"{nb.name}: an exercise without a ':label: ex-...': {body[:80]!r}"
        labels.append(m.group(1))
    solutions = {arg: body for arg, body in directives(md, "solution")}
    for label in labels:
        assert label in solutions, f"{nb.name}: exercise {label} has no {{solution}} {label}"
        assert re.search(r"^:class:\s*dropdown\s*$", solutions[label], re.M), \
            f"{nb.name}: the solution of {label} must be collapsed (:class: dropdown)"
    # The old style: admonitions titled Exercise/Solution, bold hand-made exercise labels.
    assert not re.search(r"\{admonition\}\s*(Solution|Exercise)", md), \
        f"{nb.name}: exercises and solutions use {{exercise}}/{{solution}}, not admonitions"
    assert not re.search(r"\*\*Exercise \d", md), f"{nb.name}: a hand-numbered exercise"


@pytest.mark.parametrize("page", NOTEBOOKS + PAGES_MD, ids=lambda p: p.name)
def test_theorems_and_proofs_use_sphinx_proof(page):
    md = markdown_of(page)
    hand_made = re.findall(r"^\*\*(Theorem|Lemma|Proposition|Corollary|Definition|Proof|"
                           r"Assumption)\b[^*]*\*\*", md, re.M)
    assert not hand_made, (f"{page.name}: write {hand_made} with sphinx-proof directives "
                           "({prf:theorem}, {prf:lemma}, {prf:proof}, ...)")


UNSEEN = re.compile(r"source note|the notes?\b(?! that)|commissioned|planning notes|"
                    r"background notes|the note's|seed notes", re.I)


@pytest.mark.parametrize("page", NOTEBOOKS + PAGES_MD, ids=lambda p: p.name)
def test_no_reference_to_notes_the_reader_cannot_see(page):
    text = markdown_of(page)
    if page.suffix == ".ipynb":
        cells = json.loads(page.read_text())["cells"]
        text += "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    found = sorted({m.group(0) for m in UNSEEN.finditer(text)})
    assert not found, (f"{page.name} refers to notes the reader never sees: {found}; quote "
                       "the mistake in full as a common mistake instead")


def chapter_numbers() -> dict[int, str]:
    """Sidebar number -> page stem, as Jupyter Book numbers the numbered parts of _toc.yml."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    numbers, n = {}, 0
    for part in toc["parts"]:
        if part.get("numbered"):
            for chapter in part["chapters"]:
                n += 1
                numbers[n] = chapter["file"]
    return numbers


def test_chapter_files_carry_their_sidebar_number():
    for number, stem in chapter_numbers().items():
        assert Path(stem).name.startswith(f"{number:02d}_"), \
            f"the sidebar numbers {stem} as chapter {number}; name the file {number:02d}_..."


@pytest.mark.parametrize("page", NOTEBOOKS + PAGES_MD, ids=lambda p: p.name)
def test_chapter_numbers_in_the_text_match_the_sidebar(page):
    # Every "chapter N" is a link to chapter N's page, so the number cannot drift from the
    # sidebar: [chapter 3](04_...) is caught here.
    md = markdown_of(page)
    numbers = chapter_numbers()
    links = [(m.group(1), m.group(2)) for m in re.finditer(r"\[([^\]]*)\]\(([^)\s]+)\)", md)]
    links += [(m.group(1), m.group(2)) for m in re.finditer(r"\{doc\}`([^`<]*)<([^>`]+)>`", md)]
    linked = 0
    for text, target in links:
        for n in re.findall(r"\b[Cc]hapters? (\d+)\b", text):
            stem = Path(target.split("#")[0]).with_suffix("").name
            assert int(n) in numbers and stem == Path(numbers[int(n)]).name, \
                f"{page.name}: [{text}]({target}) names chapter {n}, which is {numbers.get(int(n))}"
            linked += 1
    bare = re.sub(r"\[[^\]]*\]\([^)]*\)|\{doc\}`[^`]*`", "", md)
    loose = re.findall(r"\b[Cc]hapters? \d+\b", bare)
    assert not loose, f"{page.name}: link every chapter number to its page: {loose}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_code_and_printed_lines_fit_the_content_column(nb):
    too_long = []
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            if out.get("output_type") != "error" and "image/png" not in out.get("data", {}):
                lines += "".join(text).splitlines()
        too_long += [(i, line) for line in lines if len(line) > LINE_LIMIT]
    assert not too_long, (f"{nb.name}: {len(too_long)} lines over {LINE_LIMIT} characters "
                          f"(cell, line): {too_long[:3]}")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_figures_have_numbers_captions_and_alt_text(nb):
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "code" or not any(
                "image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            continue
        meta = cell.get("metadata", {}).get("mystnb", {})
        figure, image = meta.get("figure", {}), meta.get("image", {})
        assert figure.get("caption") and figure.get("name", "").startswith("fig-"), \
            f"{nb.name} cell {i}: a figure needs metadata mystnb.figure.caption and .name (fig-...)"
        assert len(str(image.get("alt", "")).split()) >= 4, \
            f"{nb.name} cell {i}: a figure needs mystnb.image.alt describing what it shows"
