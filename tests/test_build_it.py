"""The learner writes the core: every chapter (1 to the last) has at least one exercise in
which the learner implements a function, from its signature, in the exercise's answer cell
(``my_name = None`` until answered), checked by ``check_exercise`` property by property; the
exercise's text or its answer cell's comment gives the signature, ``def my_name(...)``, and its right answer in
tests/exercise_answers.py is a function (tests/test_exercises.py injects it and checks that
the check accepts it, and that a wrong one is rejected)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")
                  if not p.stem.endswith("_going_further") and not p.name.startswith("00_"))
CHECK = re.compile(r"""check_exercise\(\s*["']([\w-]+)["']\s*,\s*([A-Za-z_]\w*)""")


def build_it_exercises(nb: Path) -> list[str]:
    """Labels of the exercises in ``nb`` whose answer is a function the learner writes."""
    cells = json.loads(nb.read_text())["cells"]
    found = []
    text_before = ""
    for cell in cells:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            text_before += src
            continue
        m = CHECK.search(src)
        if m and re.search(rf"^{m.group(2)} = None\b", src, re.M) and \
                re.search(rf"\bdef {m.group(2)}\(", text_before + src):
            found.append(m.group(1))
        text_before = ""
    return found


@pytest.mark.parametrize("nb", CHAPTERS, ids=lambda p: p.name)
def test_every_chapter_has_an_exercise_where_the_learner_writes_code(nb):
    assert build_it_exercises(nb), (
        f"{nb.name}: no exercise asks the learner to write the chapter's step: an exercise "
        f"whose text gives `def my_name(...)` and whose answer cell holds `my_name = None` "
        f"and check_exercise('ex-...', my_name)")


def test_the_finder_sees_what_it_should(tmp_path):
    def notebook(md, code):
        nb = {"cells": [{"cell_type": "markdown", "source": md, "metadata": {}},
                        {"cell_type": "code", "source": code, "metadata": {}, "outputs": [],
                         "execution_count": None}],
              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        path = tmp_path / "01_x.ipynb"
        path.write_text(json.dumps(nb))
        return path

    good = notebook("Write `def my_f(x):` ...", 'my_f = None\n\ncheck_exercise("ex-a", my_f)')
    assert build_it_exercises(good) == ["ex-a"]
    for md, code in [("Write `my_f`.", 'my_f = None\ncheck_exercise("ex-a", my_f)'),
                     ("Write `def my_f(x):`", 'my_f = 3\ncheck_exercise("ex-a", my_f)'),
                     ("Write `def my_f(x):`", "my_f = None"),
                     ("Write `def my_g(x):`", 'my_f = None\ncheck_exercise("ex-a", my_f)')]:
        assert build_it_exercises(notebook(md, code)) == []
