"""No exercise's answer is shown before the exercise.

For every self-checked exercise, the numbers of its right answer (tests/exercise_answers.py,
evaluated) that have four or more significant digits must not appear in what the reader sees
before the exercise, in any of the forms a reader would see them: 1408, 1,408, 1 408 (any
space), 1\\,408 or 1{,}408 (TeX), 92_617, 1.408e3, 40890 for 40890.13 (a number shown to fewer
decimals counts when it is the answer rounded to them, if it keeps four significant digits),
0.4096, or 40.96 % for 0.4096.

"Before the exercise" is exact: every cell above the markdown cell that holds the exercise's
label (``<!-- label: ex-... -->``, or an older ``:label:`` option), and the part of that cell
above the exercise's directive. In those cells "what the
reader sees" is

- a markdown cell's text, with any ``{glue:text}`` role replaced by the text the run glued (so
  that the check means the same on chapters written before and after the glue roles went);
- a code cell's outputs: printed text, and text/plain, text/markdown, text/html and text/latex
  data (not the records that glue stores, which no frontend shows);
- a figure's caption and alt text (cell metadata ``mystnb.figure.caption``,
  ``mystnb.image.alt``), which the site shows.

Code cells' source is not searched: a literal in code is the author's, not a result.

An answer that is an integer of two or three digits (10 to 999: a threshold, a count, a
length) is searched for as well, as a whole number standing alone: 448 or 448.0, not 4480,
0.448, 1,448, float16 or H100. A one-digit answer is not: a digit stands in nearly every
sentence.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np
import pytest

import notebook_fixtures
from exercise_answers import ANSWERS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import portable_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
MIN_SIGNIFICANT = 4
TEXT_MIMETYPES = ("text/plain", "text/markdown", "text/html", "text/latex")


# --- the answers ------------------------------------------------------------------------------

def _numbers(value) -> list:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float, np.integer, np.floating)):
        return [value.item() if isinstance(value, np.generic) else value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        return [v.item() for v in value.ravel()]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _numbers(v)]
    return []


def significant_digits(value: int | float) -> int:
    """1408 -> 4, 1400 -> 2, 0.4096 -> 4, 5.99 -> 3 (of the shortest repr of a float)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return len(Decimal(repr(value)).normalize().as_tuple().digits)


def _answer_values(answers: dict[str, str]) -> list[int | float]:
    """Every finite number in an exercise's right answers (each an expression, evaluated as
    the exercise cell would; a ``def`` is not a number)."""
    found = []
    for source in answers.values():
        try:
            value = eval(compile(source, "<answer>", "eval"), {"math": math, "np": np})
        except SyntaxError:
            continue                                  # a statement: a def, not a number
        found += [n for n in _numbers(value) if math.isfinite(n)]
    return found


def answer_numbers(answers: dict[str, str]) -> list[int | float]:
    """The numbers of four or more significant digits in an exercise's right answers."""
    return [n for n in _answer_values(answers) if significant_digits(n) >= MIN_SIGNIFICANT]


SMALL_INTEGERS = range(10, 1000)


def answer_small_integers(answers: dict[str, str]) -> list[int]:
    """The integers of two or three digits in an exercise's right answers (a count, a length,
    a threshold; a float that happens to be whole, a ratio of 16.0 say, is a measurement)."""
    return [n for n in _answer_values(answers)
            if isinstance(n, int) and abs(n) in SMALL_INTEGERS]


# --- numbers in text --------------------------------------------------------------------------

# A plain number, possibly in e-notation; not the middle of another number (a digit or
# "<digit>." just before it; a comma before it is fine: "(1408,2048)").
PLAIN = re.compile(r"(?<!\d)(?<!\d\.)(?P<int>\d+)(?:\.(?P<frac>\d+))?"
                   r"(?:[eE](?P<exp>[-+]?\d+))?(?!\d)(?P<pct>\s?%)?")
# Digits in groups of three: 1,408, 1 408 (any space), 1\,408 and 1{,}408 (TeX), 92_617.
GROUPED = [re.compile(r"(?<![\d.])(?P<int>\d{1,3}(?:" + sep + r"\d{3}(?!\d))+)"
                      r"(?:\.(?P<frac>\d+))?(?P<pct>\s?%)?")
           for sep in (",", r"[ \u00a0\u2009\u202f]", r"\\,", r"\{,\}", "_")]


def shown_numbers(text: str):
    """(shown value as a Decimal, decimals shown, significant digits shown, (start, end)) for
    every number in ``text``, read plainly and, where digits are grouped, as one number."""
    for pattern in (PLAIN, *GROUPED):
        for m in pattern.finditer(text):
            digits = re.sub(r"\D", "", m.group("int"))
            frac = m.group("frac") or ""
            exp = int(m.groupdict().get("exp") or 0)
            value = Decimal(f"{digits}.{frac or 0}").scaleb(exp)
            decimals = len(frac) - exp
            mantissa = (digits + frac).lstrip("0")
            significant = len(mantissa if frac or exp else mantissa.rstrip("0"))
            yield value, decimals, significant, m.span()
            if m.group("pct"):                        # 40.96 % is 0.4096
                yield value.scaleb(-2), decimals + 2, significant, m.span()


def shows(text: str, answer: int | float) -> list[tuple[int, int]]:
    """Where ``text`` shows ``answer`` to four or more significant digits."""
    exact = Decimal(answer)                           # a float's exact binary value
    spans = []
    for value, decimals, significant, span in shown_numbers(text):
        if significant < MIN_SIGNIFICANT:
            continue
        rounded = exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN)
        if rounded == value:
            spans.append(span)
    return spans


# A whole number standing alone: no letter, digit, "_" or "." just before it (float16, H100,
# 0.448), not an exponent (1e-12), no digit or letter just after it, possibly with zero
# decimals (448.00).
WHOLE = re.compile(r"(?<![\w.])(?<![eE][-+])(?P<int>\d+)(?:\.(?P<frac>0+))?(?![\w]|\.\d)")


def shows_integer(text: str, answer: int) -> list[tuple[int, int]]:
    """Where ``text`` shows the whole number ``answer`` (its sign aside) standing alone, not as
    a group of a longer number (1,448)."""
    grouped = [m.span() for pattern in GROUPED for m in pattern.finditer(text)
               if re.search(r"\D", m.group("int"))]
    return [m.span() for m in WHOLE.finditer(text)
            if int(m.group("int")) == abs(answer)
            and not any(a <= m.start() and m.end() <= b for a, b in grouped)]


# --- what a reader sees before an exercise ----------------------------------------------------

GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)(?::[^`]*)?`")


def glued(nb: dict) -> dict[str, str]:
    """glue label -> the text the run stored for it."""
    values = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            record = out.get("data", {}).get("application/papermill.record/text/plain")
            if name and record is not None:
                text = "".join(record)
                try:
                    text = str(ast.literal_eval(text))
                except (ValueError, SyntaxError):
                    pass
                values[name] = text
    return values


def exercise_cell(nb: dict, label: str) -> tuple[int, int] | None:
    """(index of the markdown cell that defines exercise ``label``, offset in its source of
    the line that opens the directive), or None if the notebook has no such exercise."""
    target = portable_markdown.notebook_targets(nb).get(label)
    if target is None or target.kind != "exercise":
        return None
    lines = "".join(nb["cells"][target.cell]["source"]).split("\n")
    return target.cell, sum(len(line) + 1 for line in lines[:target.line])


def seen_text(cell: dict, values: dict[str, str]) -> list[tuple[str, str]]:
    """(where, text) for what the reader sees of ``cell``."""
    texts = []
    if cell["cell_type"] == "markdown":
        texts.append(("markdown", GLUE_ROLE.sub(lambda m: values.get(m.group(1), m.group(0)),
                                                "".join(cell["source"]))))
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append(("printed output", "".join(out["text"])))
        for mime in TEXT_MIMETYPES:
            if mime in out.get("data", {}):
                texts.append((f"{mime} output", "".join(out["data"][mime])))
    mystnb = cell.get("metadata", {}).get("mystnb", {})
    for key, part in (("figure", "caption"), ("image", "alt")):
        text = mystnb.get(key, {}).get(part)
        if text:
            texts.append((f"figure {part}", text))
    return texts


def leaks(nb: dict, label: str, numbers: list, small: list = ()) -> list[str]:
    """Every place before exercise ``label`` in ``nb`` that shows one of ``numbers`` (to four
    or more significant digits) or one of the whole numbers ``small`` (standing alone)."""
    at = exercise_cell(nb, label)
    if at is None:
        return []
    index, offset = at
    values = glued(nb)
    found = []
    for i, cell in enumerate(nb["cells"][:index + 1]):
        for where, text in seen_text(cell, values):
            if i == index:
                text = text[:offset]                  # the exercise cell, above the exercise
            spans = [(n, span) for n in numbers for span in shows(text, n)]
            spans += [(n, span) for n in small for span in shows_integer(text, n)]
            for n, (start, end) in spans:
                context = " ".join(text[max(0, start - 50):end + 30].split())
                found.append(f"cells[{i}], {where}: {text[start:end]!r} is the answer "
                             f"{n:g}: ...{context}...")
    return found


# --- the chapters -----------------------------------------------------------------------------

CHECKED = {label: answer_numbers(a.right) for label, a in ANSWERS.items()}
CHECKED = {label: numbers for label, numbers in CHECKED.items() if numbers}
SMALL = {label: answer_small_integers(a.right) for label, a in ANSWERS.items()}
SMALL = {label: numbers for label, numbers in SMALL.items() if numbers}


def _chapters() -> dict[str, dict]:
    return {nb.name: json.loads(nb.read_text()) for nb in NOTEBOOKS}


def test_every_checked_exercise_with_a_long_answer_is_in_a_chapter():
    # Guards the test below: an exercise it cannot find is one it cannot check.
    chapters = _chapters()
    missing = [label for label in CHECKED
               if not any(exercise_cell(nb, label) for nb in chapters.values())]
    assert not missing, f"exercises not found in any chapter: {missing}"
    assert len(CHECKED) >= 10, CHECKED


@pytest.mark.parametrize("label", sorted(set(CHECKED) | set(SMALL)))
def test_no_answer_before_its_exercise(label):
    found = []
    numbers, small = CHECKED.get(label, []), SMALL.get(label, [])
    for name, nb in _chapters().items():
        found += [f"{name}, {leak}" for leak in leaks(nb, label, numbers, small)]
    assert not found, (f"{label}'s answer ({', '.join(f'{n:g}' for n in numbers + small)}) "
                       "is shown before the exercise:\n" + "\n".join(found))


def test_every_checked_exercise_with_a_small_whole_answer_is_in_a_chapter():
    chapters = _chapters()
    missing = [label for label in SMALL
               if not any(exercise_cell(nb, label) for nb in chapters.values())]
    assert not missing, f"exercises not found in any chapter: {missing}"
    assert len(SMALL) >= 3, SMALL


# --- the check itself -------------------------------------------------------------------------

def test_the_forms_a_reader_sees():
    for text in ("1408", "x = 1,408.", "1 408", "1\u202f408", "$1\\,408$", "$1{,}408$",
                 "1.408e+03", "1408.0", "(1408, 2048)", "[1408 2048]", "-1408"):
        assert shows(text, 1408), text
    for text in ("14080", "21,408", "1408.5", "0.1408", "1.408", "14,08", "1408e2"):
        assert not shows(text, 1408), text
    ntk = 10000 * 4 ** (128 / 126)
    for text in ("40,890", "40890", "40889.9", "4.089e4", "a base of 40 890"):
        assert shows(text, ntk), text
    assert not shows("40,000", ntk) and not shows("4.09e4", ntk)    # three digits or fewer
    assert shows("0.4096", 0.4096) and shows("40.96 %", 0.4096) and not shows("0.41", 0.4096)
    assert shows("1.851", 1.8509) and not shows("1.85", 1.8509)
    assert shows("1,774,464 parameters", 1774464)
    assert answer_numbers({"a": "4 * 384 * 384 + 4 * 384", "b": "512", "c": "5.99",
                           "d": "[20 / 49, 0.5]", "f": "def f():\n    return 1408"}) == \
        [4 * 384 * 384 + 4 * 384, 20 / 49]


def test_the_forms_of_a_small_whole_answer():
    for text in ("448", "d_k = 448.", "(448, 512)", "448.0", "-448", "448 %", "$448$",
                 "448-dimensional", "from 448 on"):
        assert shows_integer(text, 448), text
    for text in ("4480", "0.448", "44.8", "448.5", "1,448", "1 448", "float448", "H448",
                 "448e2", "4.48e2", "fig-x448", "1448", "1e-448", "2E+448"):
        assert not shows_integer(text, 448), text
    assert shows_integer("a mean of -32.00", -32)
    assert answer_small_integers({"a": "448", "b": "2 * (64 / 8) / 1", "c": "[1, 2, 3]",
                                  "d": "5.99", "e": "1152", "f": "-32"}) == [448, -32]


def test_the_check_catches_a_small_whole_answer_and_passes_a_clean_chapter():
    # A fixture chapter whose exercise asks for a threshold of 448: the number printed in a
    # table above the exercise is caught; the same chapter without that row is not, and
    # neither are 4480, 0.448 and float448 above it, nor 448 in the solution below it.
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

    nb = notebook_fixtures.conventions_notebook()
    ex = next(i for i, c in enumerate(nb.cells) if "<!-- label: ex-fixture-sum -->" in c.source)
    innocent = new_code_cell("show()", outputs=[new_output(
        "stream", name="stdout", text="sizes 4480 and 0.448, dtype float448\n")])
    nb.cells.insert(ex, innocent)
    nb.cells.append(new_markdown_cell("The threshold is 448."))
    clean = json.loads(json.dumps(nb))
    assert not leaks(clean, "ex-fixture-sum", [], [448])
    table = new_code_cell("table()", outputs=[new_output(
        "stream", name="stdout", text="d_k   ratio\n384   2.1%\n448   1.9%\n")])
    nb.cells.insert(ex, table)
    found = leaks(json.loads(json.dumps(nb)), "ex-fixture-sum", [], [448])
    assert [f.split(":")[0] for f in found] == [f"cells[{ex}], printed output"], found


def test_the_check_sees_what_comes_before_the_exercise_and_nothing_after():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

    nb = notebook_fixtures.conventions_notebook()
    ex = next(i for i, c in enumerate(nb.cells) if "<!-- label: ex-fixture-sum -->" in c.source)
    assert not leaks(json.loads(json.dumps(nb)), "ex-fixture-sum", [1408])
    early = new_code_cell("print(total)", outputs=[
        new_output("stream", name="stdout", text="total: 1,408\n")])
    figure = new_code_cell("plot()", metadata={"mystnb": {"figure": {"caption": "Up to 1408."}}})
    glue_record = new_output("display_data", data={
        "application/papermill.record/text/plain": "'1408'"},
        metadata={"scrapbook": {"name": "fixture-total", "mime_prefix": ""}})
    hidden = new_code_cell('glue("fixture-total", "1408", display=False)',
                           outputs=[glue_record])
    prose = new_markdown_cell("The total is {glue:text}`fixture-total`.")
    late = new_code_cell("print(total)", outputs=[
        new_output("stream", name="stdout", text="1408\n")])
    nb.cells[ex:ex] = [early, figure, hidden, prose]
    nb.cells[ex + 4].source = "Above the exercise, 1 408.\n\n" + nb.cells[ex + 4].source
    nb.cells.append(late)
    found = leaks(json.loads(json.dumps(nb)), "ex-fixture-sum", [1408])
    assert [f.split(":")[0] for f in found] == [
        f"cells[{ex}], printed output", f"cells[{ex + 1}], figure caption",
        f"cells[{ex + 3}], markdown", f"cells[{ex + 4}], markdown"], found
