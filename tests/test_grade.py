"""The class grader, python -m attncore.grade, and what check_exercise returns.

The grader runs a learner's copy of a chapter in a fresh kernel; the tests use chapter 1
(a short chapter, a few seconds a run): as shipped, with the right answers of
tests/exercise_answers.py put into its answer cells, and a tiny notebook with a wrong answer
and an answer that raises. The notebooks are never written.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from attncore import grade
from attncore.lab.exercises import Checked, check_exercise, checked_exercises
from exercise_answers import ANSWERS

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "01_what_attention_computes.ipynb"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(tmp_path: Path, name: str = CHAPTER.name) -> Path:
    out = tmp_path / name
    shutil.copy2(CHAPTER, out)
    return out


def _checked_labels(path: Path) -> tuple[list[str], list[str]]:
    labels, checks = grade.exercises_of(json.loads(path.read_text()))
    return [lb for lb in labels if lb in checks], [lb for lb in labels if lb not in checks]


# --- check_exercise returns its verdict, and displays as nothing ------------------------------

def test_check_exercise_returns_what_it_prints(capsys):
    label = next(iter(ANSWERS))
    result = check_exercise(label, None)
    assert isinstance(result, Checked) and result.status == "not answered"
    assert checked_exercises()[label] is result
    assert capsys.readouterr().out.startswith("Not answered yet")


def test_the_returned_verdict_adds_no_output_in_a_notebook():
    from IPython.core.formatters import DisplayFormatter

    data, metadata = DisplayFormatter().format(Checked("ex-x", "passed"))
    assert data == {} and metadata == {}


# --- grading a chapter --------------------------------------------------------------------------

def test_a_chapter_as_shipped_is_not_answered(tmp_path):
    nb = _copy(tmp_path)
    before = _digest(nb)
    result = grade.grade_notebook(nb)
    assert _digest(nb) == before, "the grader changed the notebook"
    checked, unchecked = _checked_labels(nb)
    assert checked and unchecked, "chapter 1 should have checked and unchecked exercises"
    status = {r["label"]: r["status"] for r in result["exercises"]}
    assert status == {**{lb: "not answered" for lb in checked},
                      **{lb: "needs a person" for lb in unchecked}}
    assert result["errors"] == []


def _inject_right_answers(path: Path) -> None:
    from test_exercises import inject

    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        m = re.search(r"""check_exercise\(\s*["'](ex-[\w-]+)""", src)
        if cell["cell_type"] == "code" and m:
            cell["source"] = inject(src, ANSWERS[m.group(1)].right)
    path.write_text(json.dumps(nb))


def test_the_right_answers_pass_and_the_cli_writes_json(tmp_path, capsys):
    nb = _copy(tmp_path)
    _inject_right_answers(nb)
    before = _digest(nb)
    out = tmp_path / "grades.json"
    assert grade.main([str(nb), "--json", str(out)]) == 0
    assert _digest(nb) == before
    checked, unchecked = _checked_labels(nb)
    data = json.loads(out.read_text())
    (result,) = data["notebooks"]
    status = {r["label"]: r["status"] for r in result["exercises"]}
    assert status == {**{lb: "passed" for lb in checked},
                      **{lb: "needs a person" for lb in unchecked}}
    assert result["summary"]["passed"] == len(checked)
    printed = capsys.readouterr().out
    for label in checked:
        assert re.search(rf"{label}\s+passed", printed), printed
    for label in unchecked:
        assert re.search(rf"{label}\s+needs a person", printed), printed


def _tiny_notebook(tmp_path: Path, answer_cells: list[str]) -> Path:
    """A notebook with one exercise per answer cell, the labels of chapter 1's checked
    exercises."""
    checked, _ = _checked_labels(CHAPTER)
    cells = [nbformat.v4.new_code_cell("from attncore.lab.exercises import check_exercise")]
    for label, src in zip(checked, answer_cells):
        cells.append(nbformat.v4.new_markdown_cell(
            f":::{{exercise}}\n<!-- label: {label} -->\n\nAn exercise.\n:::"))
        cells.append(nbformat.v4.new_code_cell(src.format(label=label)))
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / "learner.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_wrong_answer_fails_with_the_checks_hint_and_an_error_is_named(tmp_path):
    checked, _ = _checked_labels(CHAPTER)
    assert len(checked) >= 2
    first = ANSWERS[checked[0]].wrong
    wrong = "\n".join(f"{name} = {value}" if "\n" not in value else value
                      for name, value in first.items())
    path = _tiny_notebook(tmp_path, [
        wrong + '\ncheck_exercise("{label}", ' + ", ".join(first) + ")",
        'my_answer = undefined_name\ncheck_exercise("{label}", my_answer)'])
    before = _digest(path)
    result = grade.grade_notebook(path, timeout=60)
    assert _digest(path) == before
    by_label = {r["label"]: r for r in result["exercises"]}
    failed = by_label[checked[0]]
    assert failed["status"] == "failed" and failed["message"], failed
    raised = by_label[checked[1]]
    assert raised["status"] == "failed" and "NameError" in raised["message"], raised
    assert [e["cell"] for e in result["errors"]] == [4]
    assert "cell 4 raised NameError" in grade.report(result)


# --- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["missing", "not json", "no exercises", "a folder"])
def test_bad_notebooks_are_refused_before_anything_runs(tmp_path, capsys, kind):
    good = _copy(tmp_path)
    before = _digest(good)
    bad = tmp_path / "bad.ipynb"
    if kind == "not json":
        bad.write_text("this is not { json")
    elif kind == "no exercises":
        nbformat.write(nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_markdown_cell("# A page")]), bad)
    elif kind == "a folder":
        bad.mkdir()
    out = tmp_path / "grades.json"
    assert grade.main([str(good), str(bad), "--json", str(out)]) == 2
    err = capsys.readouterr().err
    words = {"missing": "no such file", "not json": "not JSON",
             "no exercises": "no exercises", "a folder": "not a file"}[kind]
    assert str(bad) in err and words in err, err
    assert "Traceback" not in err
    assert not out.exists(), "nothing is written when an input is refused"
    assert _digest(good) == before
    with pytest.raises(grade.GradeError, match=re.escape(words)):
        grade.grade_notebook(bad)


def test_a_bad_timeout_is_refused(tmp_path, capsys):
    assert grade.main([str(_copy(tmp_path)), "--timeout", "0"]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_a_cell_past_its_time_limit_is_named_so():
    # nbclient interrupts such a cell (interrupt_on_timeout): its output is a KeyboardInterrupt
    cell = {"outputs": [{"output_type": "error", "ename": "KeyboardInterrupt", "evalue": ""}]}
    assert grade._cell_errors(cell, 30) == [
        "ran past the time limit of 30 s and was interrupted"]
