"""Every self-check accepts the right answer and rejects a wrong one, and gives nothing away.

Each exercise answered with code has one cell in its notebook: answer variables that start as
``None`` and one ``check_exercise("<label>", ...)`` call (see attncore/lab/exercises). This test
takes that very cell from the notebook, injects the right answer from tests/exercise_answers.py
and runs it, then a wrong answer, then the cell as stored, and reads what the check printed.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import io
import json
import linecache
import re
from pathlib import Path

import pytest

from attncore.lab.exercises import NOT_ANSWERED, registered_exercises
from exercise_answers import ANSWERS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "chapters").glob("*.ipynb"))
CHECK = re.compile(r"""^check_exercise\(\s*["']([\w-]+)["']""", re.M)
# What a notebook has imported by the time a reader reaches its exercises.
PRELUDE = ("import math\nimport numpy as np\nimport attncore as ac\n"
           "from attncore.lab.exercises import check_exercise\n")


def exercise_cells() -> dict[str, tuple[str, str]]:
    """label -> (notebook name, source of the answer-and-check cell)."""
    found: dict[str, tuple[str, str]] = {}
    for nb in NOTEBOOKS:
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] != "code" or "check_exercise(" not in src:
                continue
            labels = CHECK.findall(src)
            assert len(labels) == 1, f"{nb.name}: one check_exercise call per cell: {src!r}"
            assert labels[0] not in found, f"{labels[0]} is checked in two cells"
            found[labels[0]] = (nb.name, src)
    return found


CELLS = exercise_cells()


def answer_names(src: str) -> list[str]:
    return [t.id for node in ast.parse(src).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)]


def inject(src: str, answers: dict[str, str]) -> str:
    out = []
    for line in src.splitlines():
        m = re.fullmatch(r"(\w+) = None(\s*#.*)?", line)
        if m and m.group(1) in answers:
            value = answers[m.group(1)]
            block = "\n" in value or re.match(r"(def|class|import|from) ", value)
            line = value if block else f"{m.group(1)} = {value}"
        out.append(line)
    return "\n".join(out)


def run_cell(src: str) -> str:
    namespace: dict = {}
    buffer = io.StringIO()
    # Registered as the cell's source, as IPython does, so that inspect.getsource works on
    # what the cell defines (triton.jit reads a kernel's source).
    code = PRELUDE + src
    name = f"<exercise cell {hashlib.sha1(code.encode()).hexdigest()[:12]}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    with contextlib.redirect_stdout(buffer):
        exec(compile(code, name, "exec"), namespace)
    return buffer.getvalue()


def test_there_are_exercises_to_check():
    assert CELLS, "no check_exercise cells found in any chapter"


def test_every_exercise_has_a_checker_and_test_answers():
    labels = set(CELLS)
    assert labels <= set(registered_exercises()), \
        f"cells check exercises with no checker: {sorted(labels - set(registered_exercises()))}"
    assert labels == set(ANSWERS), (f"tests/exercise_answers.py lacks {sorted(labels - set(ANSWERS))}"
                                    f", has stale {sorted(set(ANSWERS) - labels)}")
    assert set(registered_exercises()) <= labels, \
        f"checkers for exercises no chapter asks: {sorted(set(registered_exercises()) - labels)}"


@pytest.mark.parametrize("label", sorted(CELLS))
def test_the_stored_cell_gives_no_answer_away(label):
    nb, src = CELLS[label]
    body = [line for line in src.splitlines()
            if line.strip() and not line.lstrip().startswith("#") and not CHECK.match(line)]
    # Only `name = None` lines besides comments and the check (no worked answer in view).
    for line in body:
        assert re.fullmatch(r"\w+ = None(\s*#.*)?", line), \
            f"{nb}, {label}: the answer cell must start empty, found {line!r}"
    assert body, f"{nb}, {label}: no answer variable"
    assert run_cell(src).strip() == NOT_ANSWERED


def skip_without_triton(answers: dict[str, str]) -> None:
    """Chapter 14's kernels need the optional package triton (attncore[triton])."""
    if any("import triton" in a for a in answers.values()) and \
            importlib.util.find_spec("triton") is None:
        pytest.skip("needs the optional package triton")


@pytest.mark.parametrize("label", sorted(CELLS))
def test_the_right_answer_is_accepted(label):
    nb, src = CELLS[label]
    answers = ANSWERS[label].right
    skip_without_triton(answers)
    assert set(answers) == set(answer_names(src)), f"{label}: answers for {answer_names(src)}"
    printed = run_cell(inject(src, answers))
    assert printed.startswith("Correct."), f"{nb}, {label}: right answer rejected:\n{printed}"


@pytest.mark.parametrize("label", sorted(CELLS))
def test_a_wrong_answer_is_rejected(label):
    nb, src = CELLS[label]
    answers = {**ANSWERS[label].right, **ANSWERS[label].wrong}
    skip_without_triton(answers)
    printed = run_cell(inject(src, answers))
    assert printed.startswith("Not yet:"), f"{nb}, {label}: wrong answer accepted:\n{printed}"


def test_check_exercise_refuses_an_unknown_label():
    from attncore.lab.exercises import check_exercise

    with pytest.raises(ValueError, match="label"):
        check_exercise("ex-no-such-exercise", 1)
