"""The book's own promises about its notebooks, checked without running them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
NOTEBOOKS = sorted((ROOT / "chapters").rglob("*.ipynb"))
NOTEBOOKS = [p for p in NOTEBOOKS if ".ipynb_checkpoints" not in p.parts]

# A chapter's optional parts live in its own "Going further" notebook, recognised by its name:
# ``chapters/NN_slug_going_further.ipynb`` belongs to the chapter ``chapters/NN_slug.ipynb`` and
# is listed under it in _toc.yml (``sections:``). It is read after the chapter, so it has no
# learning goals, Summary or "Next" line of its own (CONTRIBUTING.md, "Going further").
GOING_FURTHER_SUFFIX = "_going_further"


def is_going_further(path: Path | str) -> bool:
    return Path(path).stem.endswith(GOING_FURTHER_SUFFIX)


def chapter_of(path: Path | str) -> Path:
    """The chapter notebook a going-further notebook belongs to (a chapter: itself)."""
    path = Path(path)
    if not is_going_further(path):
        return path
    return path.with_name(path.stem[: -len(GOING_FURTHER_SUFFIX)] + path.suffix)


CHAPTERS = [p for p in NOTEBOOKS if not is_going_further(p)]
GOING_FURTHER = [p for p in NOTEBOOKS if is_going_further(p)]
# One sitting: what a reader gets through in about an hour.
MAX_CELLS, MAX_WORDS = 60, 6000


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


def tags_of(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_ignored_outputs_state_a_reason(nb):
    # A cell whose output cannot be reproduced carries the tag `nbval-ignore-output` and says
    # why in its metadata (attncore.ignore_output_because), where no reader sees it; the
    # `# NBVAL_...` comment lines of old showed in the code readers read.
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        marked = [line for line in lines if re.match(r"\s*#\s*NBVAL_\w+", line)]
        assert not marked, (f"{nb.name} cell {i}: {marked[0]!r}; tag the cell "
                            "nbval-ignore-output and give the reason in its metadata instead")
        tags = {t for t in tags_of(cell) if t.startswith("nbval")}
        reason = cell.get("metadata", {}).get("attncore", {}).get("ignore_output_because")
        assert tags <= {"nbval-ignore-output"}, f"{nb.name} cell {i}: unexpected tags {tags}"
        if tags:
            assert isinstance(reason, str) and len(reason.split()) >= 4, \
                (f"{nb.name} cell {i} is tagged nbval-ignore-output without a reason in "
                 f"metadata attncore.ignore_output_because: {lines[:1]}")
        else:
            assert reason is None, \
                f"{nb.name} cell {i}: a reason to ignore the output, but no nbval-ignore-output tag"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_execution_timestamps(nb):
    # What Jupyter records about the last run (metadata.execution) is noise in every diff.
    stamped = [i for i, c in enumerate(json.loads(nb.read_text())["cells"])
               if "execution" in c.get("metadata", {})]
    assert not stamped, f"{nb.name}: cells {stamped} carry metadata.execution timestamps"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_shape(nb):
    cells = json.loads(nb.read_text())["cells"]
    md = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert md.lstrip().startswith("# "), f"{nb.name} must start with a title"
    title = md.lstrip().splitlines()[0]
    # Titles appear in every page's navigation, and pages without math load no MathJax.
    assert "$" not in title, f"{nb.name}: TeX in the title would show raw in the sidebar: {title}"
    kernel = json.loads(nb.read_text())["metadata"].get("kernelspec", {}).get("name")
    assert kernel == "python3", f"{nb.name} uses kernel {kernel!r}, expected python3"
    if is_going_further(nb):
        return            # its own shape: test_going_further_pages_follow_their_chapter
    assert re.search(r"learning goals", md, re.I), f"{nb.name} has no learning goals"
    assert re.search(r"^## Summary", md, re.M), f"{nb.name} has no summary section"


def markdown_words(nb: Path) -> int:
    cells = json.loads(nb.read_text())["cells"]
    return sum(len("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_one_sitting(nb):
    # A chapter longer than this goes on in its "Going further" notebook, or says less twice.
    cells = json.loads(nb.read_text())["cells"]
    assert len(cells) <= MAX_CELLS, f"{nb.name}: {len(cells)} cells, at most {MAX_CELLS}"
    words = markdown_words(nb)
    assert words <= MAX_WORDS, f"{nb.name}: {words} words of markdown, at most {MAX_WORDS}"


def going_further_problems(nb: Path) -> list[str]:
    """What a going-further notebook lacks of its conventions (CONTRIBUTING.md): its chapter
    exists and links to it before its Summary; _toc.yml lists it under that chapter; its title
    is "Going further: <the chapter's title>"; its first paragraph links back to the chapter;
    the set-up cell, then an import cell; no learning goals, Summary or Next line."""
    found = []
    chapter = chapter_of(nb)
    if not chapter.is_file():
        return [f"{nb.name}: no chapter {chapter.name} for it to belong to"]
    stem, chapter_stem = (str(p.relative_to(ROOT).with_suffix("")) for p in (nb, chapter))
    if stem not in toc_sections().get(chapter_stem, []):
        found.append(f"{nb.name}: _toc.yml must list it under {chapter_stem} (sections:)")
    cells = json.loads(nb.read_text())["cells"]
    md = [("".join(c["source"])) for c in cells if c["cell_type"] == "markdown"]
    first = md[0].strip() if md else ""
    want = f"# Going further: {chapter_title(chapter_stem)}"
    if not first.startswith(want + "\n"):
        found.append(f"{nb.name}: the title must be {want!r}, got {first.splitlines()[:1]}")
    opening = re.split(r"\n\s*\n", first, maxsplit=2)[1:2]
    if not opening or f"]({chapter.name}" not in opening[0]:
        found.append(f"{nb.name}: its first paragraph must link back to {chapter.name}")
    code = [("".join(c["source"])) for c in cells if c["cell_type"] == "code"]
    setup = _script("notebook_setup")
    if not code or not code[0].startswith(setup.MARKER):
        found.append(f"{nb.name}: the first code cell must be the set-up cell "
                     "(python3 scripts/notebook_setup.py)")
    elif len(code) < 2 or not re.search(r"^(?:import|from) \S+", code[1], re.M):
        found.append(f"{nb.name}: the set-up cell must be followed by an import cell")
    text = "\n\n".join(md)
    for what, pattern in (("learning goals", r"(?i)learning goals"),
                          ("Summary", r"(?m)^## Summary"), ("Next line", r"(?m)^Next: ")):
        if re.search(pattern, text):
            found.append(f"{nb.name}: {what} belong to the chapter, not to its going-further "
                         "page")
    chapter_md = markdown_of(chapter)
    before_summary = re.split(r"(?m)^## Summary", chapter_md, maxsplit=1)[0]
    if not re.search(rf"\]\({re.escape(nb.name)}(?:#[^)]*)?\)", before_summary):
        found.append(f"{chapter.name}: link to {nb.name} in a sentence before the Summary")
    return found


@pytest.mark.parametrize("nb", GOING_FURTHER, ids=lambda p: p.name)
def test_going_further_pages_follow_their_chapter(nb):
    found = going_further_problems(nb)
    assert not found, "\n".join(found)


def test_going_further_check_catches_what_it_should(tmp_path, monkeypatch):
    # Guards the test above: a page named like a going-further page but not written like one.
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    chapter = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": [
        "# A chapter\n\nIt says things.\n\n## Summary\n\n- things.\n"]}],
        "metadata": {}}
    (chapters / "05_thing.ipynb").write_text(json.dumps(chapter))
    page = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": [
        "# Going further on a thing\n\nMore.\n\n## Summary\n"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "source": ["x = 1"]}],
        "metadata": {}}
    (chapters / "05_thing_going_further.ipynb").write_text(json.dumps(page))
    (tmp_path / "_toc.yml").write_text(
        "root: index\nparts:\n- numbered: true\n  chapters:\n  - file: chapters/05_thing\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    found = "\n".join(going_further_problems(chapters / "05_thing_going_further.ipynb"))
    for words in ("under chapters/05_thing", "# Going further: A chapter",
                  "link back", "set-up cell", "Summary belong", "before the Summary"):
        assert words in found, (words, found)
    assert is_going_further("chapters/05_thing_going_further.ipynb")
    assert not is_going_further("chapters/05_thing.ipynb")
    assert chapter_of(chapters / "05_thing_going_further.ipynb") == chapters / "05_thing.ipynb"


def test_nbval_runs_strict():
    lax = "--nbval" + "-lax"   # spelled in two parts so that a grep for the flag finds only real uses
    for script in [ROOT / "scripts" / "test", ROOT / ".ci" / "run"]:
        assert lax not in script.read_text()
    assert "--nbval " in (ROOT / "scripts" / "test").read_text()


# --- the course's conventions (CONTRIBUTING.md): exercises, proofs, references, layout -----

PAGES_MD = sorted((ROOT / "appendix").glob("*.md")) + [ROOT / "index.md", ROOT / "performance.md",
                                                   ROOT / "glossary.md", ROOT / "notation.md"]
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
    portable = _script("portable_markdown")
    notebook = json.loads(nb.read_text())
    exercises = portable.exercises(notebook)
    assert (len(directives(md, "exercise")) >= 3 or nb.name.startswith("00_")
            or is_going_further(nb)), \
        f"{nb.name}: expected at least three {{exercise}} blocks, found {len(exercises)}"
    assert len(exercises) == len(directives(md, "exercise")), \
        f"{nb.name}: an exercise without '<!-- label: ex-... -->' after its opening line"
    assert all(label.startswith("ex-") for label in exercises), sorted(exercises)
    # Collapsed everywhere: a dropdown with MyST, a <details> box without it (the layout
    # that scripts/portable_markdown.py --check asks for, in test_the_markdown_reads_right_
    # without_myst).
    solutions = portable.solutions(notebook)
    missing = sorted(set(exercises) - set(solutions))
    assert not missing, f"{nb.name}: exercises without a solution dropdown: {missing}"
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
            # a chapter's going-further page is the chapter's too
            stem = chapter_of(Path(target.split("#")[0]).with_suffix(".ipynb")).stem
            assert int(n) in numbers and stem == Path(numbers[int(n)]).name, \
                f"{page.name}: [{text}]({target}) names chapter {n}, which is {numbers.get(int(n))}"
            linked += 1
    bare = re.sub(r"\[[^\]]*\]\([^)]*\)|\{doc\}`[^`]*`", "", md)
    loose = re.findall(r"\b[Cc]hapters? \d+\b", bare)
    assert not loose, f"{page.name}: link every chapter number to its page: {loose}"


def heading_slugs(path: Path) -> list[str]:
    """The anchors the site gives the headings (levels 1 to 3) of a page: myst-parser's
    slugs (myst_heading_anchors in _config.yml), from the heading's text and inline code, its
    maths left out: lower case, spaces to "-", other punctuation dropped, "-1", "-2", ... for
    repeats."""
    found: list[str] = []
    for line in markdown_of(path).splitlines():
        m = re.match(r"^(#{1,3}) (.+?)\s*$", line)
        if not m:
            continue
        title = re.sub(r"\$[^$]*\$", "", m.group(2))                  # maths: not text
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)        # a link: its words
        title = re.sub(r"[`*]", "", title)
        slug = re.sub(r"[^\w\u4e00-\u9fff\- ]", "", title.lower().replace(" ", "-"))
        base, i = slug, 1
        while slug in found:
            slug, i = f"{base}-{i}", i + 1
        found.append(slug)
    return found


def fragment_problems(page: Path) -> list[str]:
    """Links into another page that name a place in it (``page.md#anchor``): the anchor must
    be one of that page's heading slugs, so that the link lands on the site (and the build,
    warnings being errors, does not fail)."""
    found = []
    for words, target in re.findall(r"\[([^\]]*)\]\(([^)\s]+)\)", markdown_of(page)):
        if "#" not in target or target.startswith(("#", "http:", "https:")):
            continue
        path, fragment = target.split("#", 1)
        other = (page.parent / path).resolve()
        if not other.is_file():
            found.append(f"{page.name}: [{words}]({target}) points to no file")
        elif fragment not in heading_slugs(other):
            found.append(f"{page.name}: [{words}]({target}): {other.name} has no heading whose "
                         f"anchor is #{fragment}; its anchors: {heading_slugs(other)[:12]}")
    return found


@pytest.mark.parametrize("page", NOTEBOOKS + PAGES_MD, ids=lambda p: p.name)
def test_links_to_a_place_in_another_page_name_one_of_its_headings(page):
    found = fragment_problems(page)
    assert not found, "\n".join(found)


def test_fragment_check_catches_what_it_should(tmp_path):
    (tmp_path / "proofs.md").write_text("# Appendix\n\n## Variance\n\n### The variance of a "
                                        "sum\n\n### Variance and covariance: definitions\n\n"
                                        "## Variance\n\n## $QK^\\top$ by `entries`\n")
    assert heading_slugs(tmp_path / "proofs.md") == [
        "appendix", "variance", "the-variance-of-a-sum", "variance-and-covariance-definitions",
        "variance-1", "-by-entries"]   # as myst-parser: the maths dropped, not the space
    page = tmp_path / "chapter.md"
    page.write_text("[a sum](proofs.md#the-variance-of-a-sum), [ok](proofs.md), "
                    "[the second](proofs.md#variance-1), [case](proofs.md#The-variance-of-a-sum), "
                    "[gone](proofs.md#lem-proofs-sum), [no file](nowhere.md#x)")
    found = "\n".join(fragment_problems(page))
    for bad in ("#The-variance-of-a-sum", "#lem-proofs-sum", "nowhere.md#x"):
        assert bad in found, bad
    for good in ("#the-variance-of-a-sum)", "#variance-1)"):
        assert good not in found, good


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


# --- what JupyterLab (jupyterlab-myst) and frontends without MyST show ------------------------
# jupyterlab-myst renders colon-fence directives, same-notebook references, exercises and
# dropdown solutions, but shows raw labels for glue and cite roles, for references into other
# documents and for {numref} of figures made by code cells; frontends without MyST render
# CommonMark, where a backtick-fenced directive is a code block.


def markdown_cells(nb: Path) -> list[tuple[int, str]]:
    cells = json.loads(nb.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_directives_use_colon_fences(nb):
    for i, md in markdown_cells(nb):
        fenced = re.findall(r"^[ \t]*(?:`{3,}|~{3,})[ \t]*\{[\w:-]+\}.*$", md, re.M)
        assert not fenced, (f"{nb.name} cell {i}: {fenced[0]!r}; write directives with colon "
                            "fences (:::{name} ... :::), backtick fences only for code")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_the_markdown_reads_right_without_myst(nb):
    # scripts/portable_markdown.py --check: no role, option line, target line or comment
    # line (a frontend without MyST shows them as text), references as links with words to
    # labels of this notebook, each solution a dropdown that opens with a <details> block.
    found = _script("portable_markdown").notebook_problems(json.loads(nb.read_text()))
    assert not found, (f"{nb.name} (python3 scripts/portable_markdown.py --write converts "
                       "the older convention):\n" + "\n".join(found))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_glue_is_called_only_in_hidden_glue_cells(nb):
    # Numbers reach the prose as literal text; the calls that store them for the check sit
    # in cells hidden on the site and collapsed in JupyterLab, which show nothing else.
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        glues = bool(re.search(r"\bglue\(|attncore\.lab\.glue", source))
        hidden = "remove-cell" in tags_of(cell)
        if not glues:
            continue
        assert hidden and cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"), \
            (f"{nb.name} cell {i} calls glue in a lesson cell; move the calls into the hidden "
             "cell after it (tags remove-cell, jupyter.source_hidden)")
        shown = [o for o in cell.get("outputs", [])
                 if not o.get("metadata", {}).get("scrapbook")]
        assert not shown, f"{nb.name} cell {i}: a glue cell must show nothing: {shown[:1]}"
        assert not re.search(r"\bprint\(|\bplt\.|\bdisplay\(", source), \
            f"{nb.name} cell {i}: a glue cell only computes and stores numbers"


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # registered first: a dataclass in the script looks its module up in sys.modules
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_numbers_in_the_prose_are_the_runs(nb):
    # Each number the prose quotes is named in its cell's metadata (attncore.numbers), occurs
    # in the cell and equals the stored glue output of its label, which nbval proves equal to
    # a fresh run; every stored label is quoted somewhere.
    found = _script("prose_numbers").problems(json.loads(nb.read_text()), nb.name)
    assert not found, "\n".join(found)


def test_prose_number_check_catches_what_it_should():
    # Guards the test above against passing vacuously.
    pn = _script("prose_numbers")
    glue_out = {"output_type": "display_data", "metadata": {"scrapbook": {
        "name": "x-loss", "mime_prefix": "application/papermill.record/"}},
        "data": {"application/papermill.record/text/plain": "'1.84'"}}

    def nb(text, shown):
        return {"cells": [{"cell_type": "code", "source": [], "metadata": {},
                           "outputs": [glue_out]},
                          {"cell_type": "markdown", "source": [text],
                           "metadata": {"attncore": {"numbers": {"x-loss": shown}}}}]}
    assert not pn.problems(nb("The loss is 1.84.", "1.84"), "ok")
    assert pn.problems(nb("The loss is 1.85.", "1.85"), "stale")        # not what the run stored
    assert pn.problems(nb("The loss is 1.85.", "1.84"), "missing")      # not in the cell
    unquoted = nb("The loss is 1.84.", "1.84")
    unquoted["cells"][1]["metadata"] = {}
    assert pn.problems(unquoted, "unquoted")
    stale = nb("The loss is 1.80.", "1.80")
    assert pn.rewrite(stale, "stale") == (True, [])
    assert "".join(stale["cells"][1]["source"]) == "The loss is 1.84."
    twice = nb("1.80 and 1.80.", "1.80")
    changed, refused = pn.rewrite(twice, "twice")
    assert not changed and refused


def test_printed_number_check_catches_what_it_should():
    # The same for numbers the lesson's code prints (attncore.prints on the code cell).
    pn = _script("prose_numbers")

    def nb(text, shown, regex=r"^validation loss: (NUM)", printed="step 9\nvalidation loss: 1.84\n"):
        return {"cells": [{"cell_type": "code", "source": [],
                           "metadata": {"attncore": {"prints": {"x-loss": regex}}},
                           "outputs": [{"output_type": "stream", "name": "stdout",
                                        "text": printed}]},
                          {"cell_type": "markdown", "source": [text],
                           "metadata": {"attncore": {"numbers": {"x-loss": shown}}}}]}
    assert not pn.problems(nb("The loss is 1.84.", "1.84"), "ok")
    assert pn.problems(nb("The loss is 1.85.", "1.85"), "stale")
    assert pn.problems(nb("The loss is 1.84.", "1.84", regex=r"^(NUM)",
                          printed="1.84\n2.00\n"), "matches twice")
    assert pn.problems(nb("The loss is 1.84.", "1.84", regex=r"^val loss: (NUM)"), "no match")
    stale = nb("The loss is 1.80.", "1.80")
    assert pn.rewrite(stale, "stale") == (True, [])
    assert "".join(stale["cells"][1]["source"]) == "The loss is 1.84."


def test_migration_moves_a_glued_label_to_the_cell_that_prints_it():
    pn = _script("prose_numbers")
    glue_out = {"output_type": "display_data", "metadata": {"scrapbook": {
        "name": "x-loss", "mime_prefix": "application/papermill.record/"}},
        "data": {"application/papermill.record/text/plain": "'1.84'"}}
    book = {"cells": [
        {"cell_type": "code", "source": ["print(f'validation loss: {loss:.2f}')"], "metadata": {},
         "outputs": [{"output_type": "stream", "name": "stdout",
                      "text": "validation loss: 1.84\n"}]},
        {"cell_type": "code", "source": ["from attncore.lab.glue import glue\n",
                                         "glue('x-loss', f'{loss:.2f}', display=False)"],
         "metadata": {}, "outputs": [glue_out]},
        {"cell_type": "markdown", "source": ["The loss is 1.84."],
         "metadata": {"attncore": {"numbers": {"x-loss": "1.84"}}}}]}
    changed, left = pn.migrate(book, "m")
    assert changed and not left and len(book["cells"]) == 2
    assert not pn.problems(book, "m")


def test_chapter_references_are_current():
    # Each chapter that cites ends with a References cell listing, in full and as
    # references.bib has them, exactly the works its text cites (author-year).
    found = []
    cr = _script("chapter_references")
    for nb in NOTEBOOKS:
        found += cr.problems(nb)
    assert not found, "\n".join(found)
    # No cite role remains for the bibliography page to collect: it lists every entry.
    assert re.search(r"^:all:\s*$", (ROOT / "bibliography.md").read_text(), re.M)


# Words for the people who make the course, not for its readers.
MACHINERY = re.compile(r"\bnbval\b|NBVAL|\bglue\b|test suite|\bpytest\b|\bthe tests\b|"
                       r"inches wide|figure size|in this edition|"
                       r"\b(?:a|every|each) (?:chapter|page) that needs\b|lem-proofs-<", re.I)


@pytest.mark.parametrize("page", NOTEBOOKS + PAGES_MD, ids=lambda p: p.name)
def test_no_production_talk_where_readers_look(page):
    if page.suffix == ".md":
        texts = [("page", page.read_text())]
    else:
        cells = json.loads(page.read_text())["cells"]
        texts = [(f"cell {i}", "".join(c["source"])) for i, c in enumerate(cells)
                 if "remove-cell" not in tags_of(c)]
    found = [f"{where}: ...{text[max(0, m.start() - 50):m.end() + 30]}..."
             for where, text in texts for m in MACHINERY.finditer(text)]
    assert not found, f"{page.name} speaks about how the course is made:\n" + "\n".join(found)


def test_production_talk_check_catches_what_it_should():
    for bad in ("# NBVAL_IGNORE_OUTPUT", "not checked by the test suite", "run under nbval",
                "glue(\"x\", y)", "Figures are at most 8.5 inches wide", "not measured in this "
                "edition", "A chapter that needs a new fact adds a lemma", "compared by the tests"):
        assert MACHINERY.search(bad), bad
    for fine in ("the test set", "not tested here", "a glued joint", "the authors of GPT-2"):
        assert not MACHINERY.search(fine), fine


def test_jupyterlab_renders_myst_wherever_the_course_installs_it():
    # ./scripts/lab (requirements.txt) and Binder (binder/requirements.txt) get JupyterLab with
    # jupyterlab-myst, at a JupyterLab it works with: under 4.6 it conflicts on @jupyter/ydoc
    # and no markdown renders at all.
    for path in (ROOT / "requirements.txt", ROOT / "binder" / "requirements.txt"):
        text = path.read_text()
        assert re.search(r"^jupyterlab-myst==2\.7\.0\s*$", text, re.M), f"{path}: no jupyterlab-myst"
        assert re.search(r"^jupyterlab>=4\.5,<4\.6\s*$", text, re.M), \
            f"{path}: JupyterLab must be pinned to 4.5 for jupyterlab-myst 2.7.0"


# --- Each chapter's closing "Next" line, against the order of _toc.yml ---------------------------

def chapter_order() -> list[str]:
    """The stems (``chapters/NN_slug``) of the chapter notebooks in _toc.yml's reading order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    order = []

    def walk(node):
        if isinstance(node, dict):
            stem = str(node.get("file", ""))
            if stem.startswith("chapters/") and not is_going_further(stem):
                order.append(str(Path(stem).with_suffix("")))
            for key in ("parts", "chapters", "sections"):
                walk(node.get(key, []))
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return order


def toc_sections() -> dict[str, list[str]]:
    """Chapter stem -> the stems of the pages _toc.yml lists under it (``sections:``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return {chapter["file"]: [str(Path(s["file"]).with_suffix("")) for s in
                              chapter.get("sections") or []]
            for part in toc["parts"] for chapter in part.get("chapters") or []}


def chapter_title(stem: str) -> str:
    """The text of a chapter notebook's first ``# `` heading."""
    for _, md in markdown_cells(ROOT / f"{stem}.ipynb"):
        m = re.search(r"^# (.+)$", md, re.M)
        if m:
            return m.group(1).strip()
    raise AssertionError(f"{stem} has no '# ' title")


def summary_of(nb: Path) -> str:
    """The text of a chapter's ``## Summary`` section, up to the next ``## `` heading."""
    for _, md in markdown_cells(nb):
        m = re.search(r"^## Summary[ \t]*$", md, re.M)
        if m:
            return re.split(r"^## ", md[m.end():], maxsplit=1, flags=re.M)[0]
    raise AssertionError(f"{nb.name} has no '## Summary' section")


NEXT_LINE = re.compile(r"Next: \[chapter (\d+), ([^\]]+)\]\(([^)\s]+)\)")


def next_line_problem(summary: str, next_stem: str | None, next_title: str | None) -> str | None:
    """What is wrong with a Summary's closing "Next" paragraph; None when it is right.

    The last paragraph of the Summary reads "Next: [chapter N, Title](NN_slug.ipynb)...", where
    NN_slug is the chapter that follows in _toc.yml, N its number and Title the beginning of its
    title; the last chapter of the book has no "Next" paragraph.
    """
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", summary) if p.strip()]
    last = paragraphs[-1] if paragraphs else ""
    mentions = re.findall(r"^\s*(?:- )?Next\b.*$", summary, re.M)
    if next_stem is None:
        return f"the last chapter has a 'Next' line: {mentions}" if mentions else None
    m = NEXT_LINE.match(last)
    if not m:
        return (f"the Summary should end with a paragraph 'Next: [chapter N, Title]"
                f"({Path(next_stem).name}.ipynb)...', got {last[:80]!r}")
    number, title, target = m.groups()
    want = Path(next_stem).name
    if target != f"{want}.ipynb":
        return f"'Next' links to {target}; the next chapter in _toc.yml is {want}.ipynb"
    if int(number) != int(want[:2]):
        return f"'Next' says chapter {number}; {want} is chapter {int(want[:2])}"
    if not next_title.casefold().startswith(title.strip().casefold()):
        return f"'Next' calls it {title!r}; its title is {next_title!r}"
    if len(mentions) != 1:
        return f"the Summary has {len(mentions)} 'Next' lines: {mentions}"
    return None


def side_pages() -> set[str]:
    """The stems of the chapter pages read beside the main line: those that follow another
    page in an unnumbered part of _toc.yml (the page on training after chapter 0). The page
    before one does not point to it with its "Next" line; it points, as the side page does,
    to the next chapter of the main line."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return {str(Path(c["file"]).with_suffix("")) for part in toc["parts"]
            if not part.get("numbered") for c in (part.get("chapters") or [])[1:]
            if str(c["file"]).startswith("chapters/")}


@pytest.mark.parametrize("stem", chapter_order(), ids=lambda s: Path(s).name)
def test_each_chapter_ends_its_summary_with_the_next_chapter(stem):
    order = chapter_order()
    i = order.index(stem)
    main_line = [s for s in order[i + 1:] if s not in side_pages()]
    following = main_line[0] if main_line else None
    problem = next_line_problem(summary_of(ROOT / f"{stem}.ipynb"), following,
                                following and chapter_title(following))
    assert problem is None, f"{Path(stem).name}: {problem}"


def test_next_line_check_catches_what_it_should():
    good = "- a point.\n\nNext: [chapter 5, Multi-head attention](05_multi_head_attention.ipynb):\nmore."
    args = ("chapters/05_multi_head_attention", "Multi-head attention")
    assert next_line_problem(good, *args) is None
    for bad in (good.replace("05_multi", "06_multi"),                # the wrong file
                good.replace("chapter 5,", "chapter 7,"),            # the wrong number
                good.replace("Multi-head attention]", "Positions]"),  # the wrong title
                "- a point.\n- Next: [chapter 5](05_multi_head_attention.ipynb) says more.",
                good + "\n\n- one more point after it.",                # not the last paragraph
                "- a point."):                                          # no Next line at all
        assert next_line_problem(bad, *args) is not None, bad
    assert next_line_problem("- a point.", None, None) is None        # the last chapter
    assert next_line_problem(good, None, None) is not None


def test_side_pages_are_the_unnumbered_pages_after_chapter_0():
    assert "chapters/00_how_a_model_is_trained" in side_pages()
    assert not side_pages() & {"chapters/00_how_to_use", "chapters/01_what_attention_computes"}


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_inline_formula_is_broken_by_a_list_marker(nb):
    """Markdown reads a line that opens with ``+ ``, ``- ``, ``* `` or ``1. `` as a list item,
    even in the middle of a ``$...$`` formula that the previous line began: the formula is
    cut in two and its TeX shows as text on every page (site, JupyterLab, GitHub). Such a
    line break goes before the operator, never after it."""
    import re

    broken = []
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        open_formula, display = False, False
        for line in "".join(cell["source"]).split("\n"):
            if line.strip() == "$$":
                display = not display
                continue
            if display:
                continue
            if not line.strip():
                open_formula = False
            elif open_formula and re.match(r"\s*(?:[+*-]|\d+[.)])\s", line):
                broken.append(f"cell {i}: {line.strip()[:50]}")
            text = re.sub(r"`[^`]*`", "", line).replace("\\$", "").replace("$$", "")
            if text.count("$") % 2:
                open_formula = not open_formula
    assert not broken, f"{nb.name}: a formula cut by a list marker: {broken}"
