"""The ways through the book: course_paths.yml, the page written from it
(scripts/study_time.py) and the line that opens every chapter (scripts/chapter_paths.py).

chapter_paths.py --write is tried on a copy of the chapters in a temporary folder: it adds
the line to the first cell of each notebook and changes nothing else."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import chapter_paths  # noqa: E402
import portable_markdown  # noqa: E402
import study_time  # noqa: E402

MAX_WORDS = 6000      # tests/test_book_structure.py's one sitting


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    shutil.copytree(ROOT / "chapters", root / "chapters",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    for name in (study_time.DATA, study_time.PAGE):
        shutil.copy2(ROOT / name, root / name)
    return root


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], text=True,
                          capture_output=True, cwd=ROOT)


# --- the data and the page ----------------------------------------------------------------

def test_the_data_names_every_notebook_and_only_those():
    assert study_time.problems(ROOT) == []


def test_the_tracks_are_those_the_course_offers():
    data = yaml.safe_load((ROOT / study_time.DATA).read_text())
    assert {n: t["chapters"] for n, t in data["tracks"].items()} == {
        "kernels": [8, 9, 15], "long context": [14, 18, 19], "serving": [10, 16, 17]}
    assert len(data["paths"]["minimum"]["weeks"]) == 6
    assert len(data["paths"]["semester"]["weeks"]) == 14


def test_the_page_is_in_the_front_matter_after_chapter_0():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for c in toc["parts"][0]["chapters"]]
    assert files[:2] == ["chapters/00_how_to_use", "ways_through_the_book"]


def test_the_pages_tables_are_current():
    proc = _script("study_time.py", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_estimate_follows_the_stated_rates(tmp_path):
    words = " ".join(["word"] * 300)
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": f"# Title\n\n{words}"},
        {"cell_type": "code", "metadata": {}, "source": study_time.SETUP_MARKER + "x",
         "outputs": [], "execution_count": None},
        {"cell_type": "code", "metadata": {}, "source": "print(1)", "outputs": [],
         "execution_count": None},
        {"cell_type": "markdown", "metadata": {}, "source":
            ":::{exercise}\n<!-- label: ex-a -->\n\nWrite `def my_f(x)`.\n:::\n\n"
            ":::{dropdown} Solution\n<details><summary></summary><!-- solution: ex-a -->\n\n"
            + " ".join(["hidden"] * 600) + "\n:::\n\n</details>\n\n"
            ":::{exercise}\n<!-- label: ex-b -->\n\nProve it.\n:::"},
        {"cell_type": "code", "metadata": {}, "source": 'my_f = None\ncheck_exercise("ex-a", '
         'my_f)', "outputs": [], "execution_count": None}]
    nb = tmp_path / "01_x.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                              "nbformat_minor": 5}))
    e = study_time.estimate(nb)
    assert e["code_cells"] == 1                         # not the set-up or the check cell
    assert e["exercises_by_kind"] == {"answer": 0, "function": 1, "proof": 1}
    assert e["words"] < 330                             # the solution's words are not read
    minutes = e["words"] / study_time.WORDS_PER_MINUTE + study_time.CODE_CELL_MINUTES
    assert e["read"] == study_time._round(minutes)
    assert e["exercises"] == study_time._round(study_time.EXERCISE_MINUTES["function"]
                                               + study_time.EXERCISE_MINUTES["proof"])
    page = (ROOT / study_time.PAGE).read_text()
    assert f"{study_time.WORDS_PER_MINUTE} words a minute" in page


def test_the_page_links_every_chapter_number_and_speaks_to_readers():
    page = (ROOT / study_time.PAGE).read_text()
    bare = re.sub(r"\[[^\]]*\]\([^)]*\)", "", page)
    assert not re.findall(r"\b[Cc]hapters? \d+\b", bare)
    for text, target in re.findall(r"\[([^\]]*)\]\(([^)\s]+)\)", page):
        m = re.match(r"(?:[Cc]hapter )?(\d+)[. ]", text)
        if m:
            assert Path(target).name.startswith(f"{int(m.group(1)):02d}_"), (text, target)
        assert (ROOT / target).is_file(), target
    assert not re.search(r"\bnbval\b|\btest suite\b|\bpytest\b|\bthe tests\b", page, re.I)


def test_a_stale_page_fails_the_check_and_markers_are_required(tmp_path):
    root = _copy(tmp_path)
    page = root / study_time.PAGE
    page.write_text(page.read_text().replace("| 1 |", "| 1 (edited) |", 1))
    assert study_time.main(["--check", "--root", str(root)]) == 1
    assert study_time.main(["--write", "--root", str(root)]) == 0
    assert study_time.main(["--check", "--root", str(root)]) == 0
    page.write_text(page.read_text().replace("<!-- end of study-time: tracks -->", ""))
    assert study_time.main(["--write", "--root", str(root)]) == 1


# --- the line that opens each chapter -----------------------------------------------------------

def _without_lines(root: Path) -> None:
    """Take the lines out of the copy's chapters (where they are already written)."""
    block = re.compile(r"\n*" + re.escape(chapter_paths.START) + ".*?"
                       + re.escape(chapter_paths.END), re.S)
    for path in (root / "chapters").glob("*.ipynb"):
        nb = json.loads(path.read_text())
        source = "".join(nb["cells"][0]["source"])
        if chapter_paths.START in source:
            nb["cells"][0]["source"] = block.sub("", source).splitlines(keepends=True)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def test_write_adds_the_line_to_the_first_cell_only_and_check_passes(tmp_path):
    root = _copy(tmp_path)
    _without_lines(root)
    before = {p.name: json.loads(p.read_text()) for p in (root / "chapters").glob("*.ipynb")}
    assert chapter_paths.main(["--check", "--root", str(root)]) == 1
    assert chapter_paths.main(["--write", "--root", str(root)]) == 0
    assert chapter_paths.main(["--check", "--root", str(root)]) == 0
    data, nbs = study_time.load(root), study_time.notebooks(root)
    assert set(p.name for p in nbs.values()) <= set(before)
    for key, path in nbs.items():
        nb, old = json.loads(path.read_text()), before[path.name]
        assert nb["cells"][1:] == old["cells"][1:] and nb["metadata"] == old["metadata"]
        first, old_first = "".join(nb["cells"][0]["source"]), "".join(old["cells"][0]["source"])
        assert first.startswith(old_first.rstrip("\n")), path.name   # the title cell, kept
        block = first.split(chapter_paths.START)[1].split(chapter_paths.END)[0]
        flat = " ".join(block.split())
        # what it needs, as links to the right chapters; its tracks; whether to skip it
        for n in data["chapters"][key]["needs"]:
            assert f"[chapter {n}]({nbs[str(n)].name})" in block, (path.name, n)
        for text, target in re.findall(r"\[([^\]]*)\]\(([^)\s]+)\)", block):
            m = re.fullmatch(r"chapter (\d+)", text)
            if m:
                assert target.startswith(f"{int(m.group(1)):02d}_"), (path.name, text)
            assert (path.parent / target).resolve().is_file(), (path.name, target)
        if key.endswith("gf"):
            assert "Nothing in the later chapters depends on it" in flat, path.name
        else:
            skip = data["chapters"][key]["skip"]
            assert ("can skip it" if skip else "should not skip it") in flat, path.name
            for name, track in data["tracks"].items():
                assert (f"the {name} track" in flat) == (
                    int(key) in track["chapters"]), (path.name, name)
        # the conventions of the chapters' markdown, and one sitting
        assert portable_markdown.notebook_problems(nb) == portable_markdown.notebook_problems(
            old), path.name
        words = sum(len("".join(c["source"]).split()) for c in nb["cells"]
                    if c["cell_type"] == "markdown")
        assert words <= MAX_WORDS, f"{path.name}: {words} words"
    # a second run changes nothing; a changed fact is written over the old line
    texts = {p: p.read_text() for p in nbs.values()}
    assert chapter_paths.main(["--write", "--root", str(root)]) == 0
    assert all(p.read_text() == t for p, t in texts.items())
    data_file = root / study_time.DATA
    data_file.write_text(data_file.read_text().replace(
        "8:  {needs: [3, 4]", "8:  {needs: [3, 4, 5]"))
    assert chapter_paths.main(["--check", "--root", str(root)]) == 1
    assert chapter_paths.main(["--write", "--root", str(root)]) == 0
    text = "".join(json.loads(nbs["8"].read_text())["cells"][0]["source"])
    assert text.count(chapter_paths.START) == 1 and "[chapter 5](" in text


def test_repeated_markers_are_refused_and_nothing_is_written(tmp_path):
    root = _copy(tmp_path)
    _without_lines(root)
    path = study_time.notebooks(root)["3"]
    nb = json.loads(path.read_text())
    nb["cells"][0]["source"] = "".join(nb["cells"][0]["source"]) + (
        f"\n\n{chapter_paths.START}\nx\n{chapter_paths.END}\n{chapter_paths.START}\n")
    path.write_text(json.dumps(nb))
    text = path.read_text()
    assert chapter_paths.main(["--write", "--root", str(root)]) == 1
    assert path.read_text() == text


def test_every_chapter_of_the_book_opens_with_its_line():
    stale = chapter_paths.run(ROOT, write=False)
    assert stale == [], "\n".join(stale) + "\nrun: python scripts/chapter_paths.py --write"
