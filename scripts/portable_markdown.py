#!/usr/bin/env python3
"""Writes the chapters' markdown so that it reads right with MyST and without it.

    python3 scripts/portable_markdown.py --write     # convert chapters/*.ipynb in place
    python3 scripts/portable_markdown.py --check     # list what does not follow the convention
    python3 scripts/portable_markdown.py --write PATH ...   # only these notebooks

A chapter is read on the website (Sphinx: myst-nb, sphinx-proof, sphinx-exercise), in
JupyterLab with jupyterlab-myst, and in frontends that know CommonMark and HTML but not MyST
(JupyterLab without the extension, nbconvert's HTML, GitHub, nbviewer, VS Code, Colab). What
MyST reads as markup those show as text, so the notebooks keep only the markup that every
frontend can live with, and the website's build (``_ext/portable_myst.py``) turns it back into
the full MyST that sphinx-proof and sphinx-exercise need:

- **A directive has no option lines** (``:label: ...``, ``:class: ...``), which a frontend
  without MyST shows as text in the box's first line. An admonition is named by its class,
  ``:::{tip} Learning goals``, ``:::{warning} Common mistake`` (jupyterlab-myst draws the same
  box; the build makes it ``{admonition}`` with ``:class: tip``).
- **A label** is an HTML comment, invisible everywhere: ``<!-- label: NAME -->`` on the line
  after a directive's opening line, or on the line before a heading. The build makes it the
  directive's ``:label:`` option, or a ``(NAME)=`` target.
- **A reference** is a Markdown link with words, ``[Theorem "Title"](#thm-...)``: the site
  links it to the box, JupyterLab shows the words, and so does every other frontend. The
  words never hold a number: the site numbers boxes by chapter (Theorem 2.1), jupyterlab-myst
  by notebook (Theorem 1), and a frontend without MyST not at all.
- **A solution** is a MyST dropdown whose body opens with a real ``<details>`` HTML block::

      :::{dropdown} Solution
      <details><summary></summary><!-- solution: ex-sqrt-dk-threshold -->

      ...
      :::

      </details>

  jupyterlab-myst shows the dropdown, collapsed, with typeset maths (the HTML lines are
  empty there: one sits inside the dropdown, the other closes nothing). Without MyST the
  ``<details>`` block, which starts a line and so is an HTML block in every CommonMark
  renderer (nbconvert and GitHub re-balance HTML written inside a paragraph, which is why the
  older ``% <details>`` comment lines failed there), collapses everything up to
  ``</details>`` under a triangle, right below the line ``:::{dropdown} Solution``. The site
  build makes it the exercise's sphinx-exercise ``{solution}``, a numbered dropdown.

``--write`` converts the older convention (``:label:`` options, ``(NAME)=`` targets,
``{prf:ref}``/``{ref}``/``{numref}`` roles, solutions wrapped in ``% <details>`` comment
lines, ``{admonition}`` with ``:class: tip``) and leaves a notebook that follows this one
unchanged; it changes markdown cells only, and reports (as ``--check`` does) what it cannot
convert, such as a reference to another notebook's label.
A bare reference gets words from its target: ``Theorem "Title"`` for a box with a title,
``the section "Heading"`` for a section, ``an exercise below`` (or above) for an exercise.

Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# --- the pieces of the convention -------------------------------------------------------------

FENCE = re.compile(r"^(?P<colons>:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*?)[ \t]*$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*?)[ \t]*$")
LABEL_COMMENT = re.compile(r"^<!-- label: (?P<label>[\w.-]+) -->[ \t]*$")
SOLUTION_TITLE = "Solution"
SOLUTION_OPEN = re.compile(
    r"^<details><summary></summary><!-- solution: (?P<label>[\w.-]+) -->[ \t]*$")
SOLUTION_CLOSE = "</details>"
HEADING = re.compile(r"^#{1,6}[ \t]+(?P<title>.+?)[ \t]*#*[ \t]*$")
CODE_FENCE = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})")
LINK_TO_LABEL = re.compile(r"\]\(#(?P<label>[\w.-]+)\)")
# The older convention
OLD_TARGET = re.compile(r"^\((?P<label>[\w.-]+)\)=[ \t]*$")
OLD_SOLUTION_OPEN = "% <details><summary>Solution</summary>"
OLD_SOLUTION_CLOSE = "% </details>"
ROLE = re.compile(r"\{(?P<role>[a-z][\w:-]*)\}`(?P<body>[^`]*)`")
REFERENCE_ROLES = ("prf:ref", "ref", "numref")
# Admonitions written as ``:::{tip} Title`` rather than ``:::{admonition} Title`` with
# ``:class: tip`` (the same box in jupyterlab-myst, one line less of markup without MyST).
ADMONITION_KINDS = ("attention", "caution", "danger", "error", "hint", "important", "note",
                    "seealso", "tip", "warning")


def solution_open(label: str) -> str:
    return f"<details><summary></summary><!-- solution: {label} -->"


def label_comment(label: str) -> str:
    return f"<!-- label: {label} -->"


def code_lines(lines: list[str]) -> set[int]:
    """Indices of the lines inside backtick or tilde code blocks (fences included)."""
    return _code_blocks(lines)[0]


def code_block_openings(lines: list[str]) -> list[int]:
    """Indices of the lines that open a backtick or tilde code block."""
    return _code_blocks(lines)[1]


def _code_blocks(lines: list[str]) -> tuple[set[int], list[int]]:
    inside, openings, fence = set(), [], None
    for i, line in enumerate(lines):
        m = CODE_FENCE.match(line)
        if fence is None and m:
            fence = m.group("fence")
            inside.add(i)
            openings.append(i)
        elif fence is not None:
            inside.add(i)
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
    return inside, openings


def option_end(lines: list[str], start: int) -> int:
    """The index of the first line after the ``:option:`` lines that follow line ``start``."""
    j = start + 1
    while j < len(lines) and OPTION.match(lines[j]):
        j += 1
    return j


def closing_fence(lines: list[str], start: int, colons: str, skip: set[int]) -> int | None:
    """The index of the line that closes the directive opened at ``start``."""
    for j in range(start + 1, len(lines)):
        if j not in skip and lines[j].rstrip() == colons:
            return j
    return None


# --- what a notebook labels ------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """A labelled thing a reference can name: a directive's box or a section."""

    kind: str            # the directive's name ("prf:theorem", "exercise"), or "section"
    title: str           # the directive's argument or the heading; may be ""
    cell: int            # index of the notebook cell that holds it
    line: int            # index of its line in that cell's source


def cell_targets(source: str, cell: int) -> dict[str, Target]:
    """label -> Target for every label in one markdown cell, in either convention."""
    lines = source.split("\n")
    skip = code_lines(lines)
    found = {}
    for i, line in enumerate(lines):
        if i in skip:
            continue
        m = FENCE.match(line)
        if m:
            end = option_end(lines, i)
            labels = [OPTION.match(o).group("value") for o in lines[i + 1:end]
                      if OPTION.match(o).group("key") == "label"]
            if end < len(lines) and LABEL_COMMENT.match(lines[end]):
                labels.append(LABEL_COMMENT.match(lines[end]).group("label"))
            for label in labels:
                found[label] = Target(m.group("name"), m.group("arg"), cell, i)
            continue
        m = OLD_TARGET.match(line) or LABEL_COMMENT.match(line)
        if m and not _after_directive_options(lines, i):
            heading = next((HEADING.match(x) for x in lines[i + 1:] if x.strip()), None)
            found[m.group("label")] = Target("section", heading.group("title") if heading
                                             else "", cell, i)
    return found


def _after_directive_options(lines: list[str], i: int) -> bool:
    """Whether line ``i`` directly follows a directive's opening line and options."""
    j = i - 1
    while j >= 0 and OPTION.match(lines[j]):
        j -= 1
    return j >= 0 and bool(FENCE.match(lines[j]))


def notebook_targets(nb: dict) -> dict[str, Target]:
    found = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            found.update(cell_targets("".join(cell["source"]), i))
    return found


# --- the older convention -> this one ---------------------------------------------------------

KIND_WORDS = {"prf:algorithm": "Algorithm", "prf:assumption": "Assumption",
              "prf:axiom": "Axiom", "prf:conjecture": "Conjecture",
              "prf:corollary": "Corollary", "prf:criterion": "Criterion",
              "prf:definition": "Definition", "prf:example": "Example", "prf:lemma": "Lemma",
              "prf:observation": "Observation", "prf:proposition": "Proposition",
              "prf:property": "Property", "prf:remark": "Remark", "prf:theorem": "Theorem"}


def reference_words(target: Target, cell: int) -> str:
    """Words for a reference that names no text of its own (see the module's docstring)."""
    where = "below" if (target.cell, target.line) > (cell, -1) else "above"
    if target.kind == "section":
        return f'the section "{target.title}"' if target.title else f"the section {where}"
    if target.kind == "exercise":
        return f"an exercise {where}"
    kind = KIND_WORDS.get(target.kind, target.kind.split(":")[-1].capitalize())
    return f'{kind} "{target.title}"' if target.title else f"the {kind.lower()} {where}"


def _starts_sentence(before: str) -> bool:
    """Whether text that follows ``before`` starts a sentence (or a list item)."""
    text = before.rstrip().rstrip("*_")
    if not text or text.endswith((".", "!", "?")):
        return True
    return bool(re.fullmatch(r"[ \t]*(?:[-*+]|\d+\.)[ \t]+", before.split("\n")[-1]))


def roles_outside_code(source: str) -> list[re.Match]:
    """The roles in ``source`` that MyST would read: not in a code block or inline code."""
    lines = source.split("\n")
    skip = code_lines(lines)
    text = "\n".join(" " * len(line) if i in skip else line for i, line in enumerate(lines))
    found, i = [], 0
    while i < len(text):
        m = ROLE.match(text, i)
        if m:
            found.append(m)
            i = m.end()
        elif text[i] == "`":
            run = re.match(r"`+", text[i:]).group(0)
            close = re.compile(r"(?<!`)" + run + r"(?!`)").search(text, i + len(run))
            i = close.end() if close else i + len(run)
        else:
            i += 1
    return found


def convert_references(source: str, targets: dict[str, Target], cell: int) -> str:
    """Every {prf:ref}, {ref} and {numref} role as a Markdown link with words."""
    pieces, last = [], 0
    for m in roles_outside_code(source):
        if m.group("role") not in REFERENCE_ROLES:
            continue
        body = m.group("body")
        explicit = re.fullmatch(r"(?s)(?P<text>.*?)\s*<(?P<label>[^<>]+)>\s*", body)
        if explicit:
            text, label = explicit.group("text"), explicit.group("label").strip()
        else:
            label = body.strip()
            if label not in targets:
                continue                        # --check reports it; nothing to name it by
            text = reference_words(targets[label], cell)
            if _starts_sentence(source[:m.start()]):
                text = text[0].upper() + text[1:]
        pieces += [source[last:m.start()], f"[{text}](#{label})"]
        last = m.end()
    return "".join(pieces) + source[last:]


def convert_cell(source: str, targets: dict[str, Target], cell: int) -> str:
    """One markdown cell in this convention; a cell that follows it comes back unchanged."""
    lines = source.split("\n")
    skip = code_lines(lines)
    out: list[str] = []
    # closing fences of solutions that no "% </details>" line follows: </details> goes there
    unclosed = set()
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if i not in skip and m and m.group("name") == "solution":
            close = closing_fence(lines, i, m.group("colons"), skip)
            after = [x for x in lines[close + 1:] if x.strip()] if close is not None else []
            if close is not None and (not after or after[0].rstrip() != OLD_SOLUTION_CLOSE):
                unclosed.add(close)
    i = 0
    while i < len(lines):
        line = lines[i]
        if i in unclosed:
            out += [line, "", SOLUTION_CLOSE]
            if i + 1 < len(lines) and lines[i + 1].strip():
                out.append("")
            i += 1
            continue
        if i in skip:
            out.append(line)
            i += 1
            continue
        if line.rstrip() == OLD_SOLUTION_OPEN:
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1                                  # the blank line after it
            continue
        if line.rstrip() == OLD_SOLUTION_CLOSE:
            out.append(SOLUTION_CLOSE)
            if i + 1 < len(lines) and lines[i + 1].strip():
                out.append("")                  # the HTML block ends at a blank line
            i += 1
            continue
        m = OLD_TARGET.match(line)
        if m:
            out.append(label_comment(m.group("label")))
            i += 1
            continue
        m = FENCE.match(line)
        if m:
            end = option_end(lines, i)
            options = lines[i + 1:end]
            labels = [OPTION.match(o).group("value") for o in options
                      if OPTION.match(o).group("key") == "label"]
            options = [o for o in options if OPTION.match(o).group("key") != "label"]
            if m.group("name") == "solution":
                exercise = m.group("arg")
                options = [o for o in options
                           if OPTION.match(o).group(0).replace(" ", "") != ":class:dropdown"]
                out.append(f"{m.group('colons')}{{dropdown}} {SOLUTION_TITLE}")
                out += options
                out.append(solution_open(exercise))
            elif (m.group("name") == "admonition" and m.group("arg") and len(options) == 1
                  and OPTION.match(options[0]).group("key") == "class"
                  and OPTION.match(options[0]).group("value") in ADMONITION_KINDS):
                kind = OPTION.match(options[0]).group("value")
                out.append(f"{m.group('colons')}{{{kind}}} {m.group('arg')}")
                out += [label_comment(label) for label in labels]
            else:
                out.append(line)
                out += options
                out += [label_comment(label) for label in labels]
            i = end
            continue
        out.append(line)
        i += 1
    return convert_references("\n".join(out), targets, cell)


def convert_notebook(nb: dict) -> dict:
    """``nb`` with every markdown cell in this convention; nothing else changes."""
    targets = notebook_targets(nb)
    cells = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            new = convert_cell(source, targets, i)
            if new != source:
                cell = {**cell, "source": new.splitlines(keepends=True)}
        cells.append(cell)
    return {**nb, "cells": cells}


# --- this convention -> the website's MyST ----------------------------------------------------

def to_sphinx(source: str) -> str:
    """The MyST that sphinx-proof and sphinx-exercise read, from a cell in this convention:
    label comments become ``:label:`` options and ``(NAME)=`` targets, each solution
    dropdown with its ``<details>`` lines becomes ``{solution} LABEL`` with
    ``:class: dropdown``, and ``:::{tip} Title`` becomes ``:::{admonition} Title`` with
    ``:class: tip`` (docutils' named admonitions take no title). Links to labels stay links
    (the build resolves them)."""
    lines = source.split("\n")
    skip = code_lines(lines)
    out: list[str] = []
    open_solutions = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if i in skip:
            out.append(line)
            i += 1
            continue
        m = FENCE.match(line)
        if m:
            end = option_end(lines, i)
            options = lines[i + 1:end]
            nxt = lines[end] if end < len(lines) else ""
            solution = SOLUTION_OPEN.match(nxt)
            label = LABEL_COMMENT.match(nxt)
            if m.group("name") == "dropdown" and m.group("arg") == SOLUTION_TITLE and solution:
                out.append(f"{m.group('colons')}{{solution}} {solution.group('label')}")
                out += options + [":class: dropdown"]
                open_solutions += 1
                i = end + 1
            else:
                if m.group("name") in ADMONITION_KINDS and m.group("arg"):
                    line = f"{m.group('colons')}{{admonition}} {m.group('arg')}"
                    options = [*options, f":class: {m.group('name')}"]
                out += [line, *options]
                if label:
                    out.append(f":label: {label.group('label')}")
                i = end + 1 if label else end
            continue
        m = LABEL_COMMENT.match(line)
        if m:
            out.append(f"({m.group('label')})=")
        elif line.rstrip() == SOLUTION_CLOSE and open_solutions:
            open_solutions -= 1
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


# --- the check ----------------------------------------------------------------------------------

def _outside_code(source: str) -> str:
    """``source`` without its code blocks and inline code (what is read as markup)."""
    lines = source.split("\n")
    skip = code_lines(lines)
    text = "\n".join("" if i in skip else line for i, line in enumerate(lines))
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", text, flags=re.S)


def cell_problems(source: str, labels: set[str]) -> list[str]:
    """What a frontend without MyST would show wrong in one markdown cell, or what the site's
    build could not turn back into MyST."""
    found = []
    lines = source.split("\n")
    skip = code_lines(lines)
    for i in code_block_openings(lines):
        if re.match(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*\{", lines[i]):
            found.append(f"line {i + 1}: a directive in a backtick fence, a code block "
                         f"without MyST: {lines[i].strip()[:40]!r} (use a colon fence)")
    for i, line in enumerate(lines):
        if i in skip:
            continue
        where = f"line {i + 1}"
        m = FENCE.match(line)
        if m:
            end = option_end(lines, i)
            name = m.group("name")
            nxt = lines[end] if end < len(lines) else ""
            keys = [OPTION.match(o).group("key") for o in lines[i + 1:end]]
            if "label" in keys:
                found.append(f"{where}: a :label: option (write <!-- label: NAME --> on the line "
                             "after the directive's opening line)")
            elif name == "exercise" and not LABEL_COMMENT.match(nxt):
                found.append(f"{where}: an exercise without <!-- label: ex-... --> on the line "
                             "after its opening line (its check cell and solution name it)")
            if name == "solution":
                found.append(f"{where}: a {{solution}} directive (write the solution as a "
                             f"dropdown opening with {solution_open(m.group('arg'))!r})")
            for key in keys:
                if key != "label" and name != "solution":
                    found.append(f"{where}: a :{key}: option line, shown as text without MyST "
                                 "(an admonition's class is its name: :::{tip} Title)")
            if name == "dropdown" and m.group("arg") == SOLUTION_TITLE:
                if not SOLUTION_OPEN.match(nxt):
                    found.append(f"{where}: a solution dropdown whose next line is not "
                                 f"{solution_open('LABEL')!r}")
                elif end + 1 < len(lines) and lines[end + 1].strip():
                    found.append(f"{where}: a blank line must follow the <details> line")
                close = closing_fence(lines, i, m.group("colons"), skip)
                after = [x for x in lines[close + 1:] if x.strip()] if close is not None else []
                if close is None or not after or after[0].rstrip() != SOLUTION_CLOSE:
                    found.append(f"{where}: the solution's closing fence is not followed by "
                                 f"a {SOLUTION_CLOSE} line")
                else:
                    k = close + 1 + next(n for n, x in enumerate(lines[close + 1:]) if x.strip())
                    if k + 1 < len(lines) and lines[k + 1].strip():
                        found.append(f"line {k + 1}: a blank line must follow {SOLUTION_CLOSE}")
                    if lines[close + 1].strip():
                        found.append(f"line {close + 1}: a blank line must come before "
                                     f"{SOLUTION_CLOSE}")
        elif OLD_TARGET.match(line):
            found.append(f"{where}: a ({OLD_TARGET.match(line).group('label')})= target "
                         "(write <!-- label: NAME --> before the heading)")
        elif line.startswith("%"):
            found.append(f"{where}: a MyST comment line, shown as text without MyST: "
                         f"{line[:50]!r}")
        elif LABEL_COMMENT.match(line) and not _after_directive_options(lines, i):
            heading = next((x for x in lines[i + 1:] if x.strip()), "")
            if not HEADING.match(heading):
                found.append(f"{where}: a label comment that is neither after a directive's "
                             "options nor before a heading")
    for m in roles_outside_code(source):
        advice = ("a Markdown link with words" if m.group("role") in REFERENCE_ROLES
                  else "the number, the citation or a link with words instead")
        found.append(f"a {{{m.group('role')}}} role, shown as text without MyST: "
                     f"{m.group(0)[:60]!r} (write {advice})")
    for m in LINK_TO_LABEL.finditer(_outside_code(source)):
        if m.group("label") not in labels:
            found.append(f"a link to #{m.group('label')}, which this notebook does not label")
    return found


def solutions(nb: dict) -> dict[str, tuple[int, str]]:
    """exercise label -> (cell index, body) of each solution in this convention."""
    found = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        lines = "".join(cell["source"]).split("\n")
        skip = code_lines(lines)
        for j, line in enumerate(lines):
            m = FENCE.match(line)
            if j in skip or not m or m.group("name") != "dropdown":
                continue
            end = option_end(lines, j)
            opening = SOLUTION_OPEN.match(lines[end]) if end < len(lines) else None
            close = closing_fence(lines, j, m.group("colons"), skip)
            if opening and close is not None:
                found[opening.group("label")] = (i, "\n".join(lines[end + 1:close]))
    return found


def exercises(nb: dict) -> dict[str, int]:
    """exercise label -> index of the cell that holds the exercise."""
    return {label: t.cell for label, t in notebook_targets(nb).items() if t.kind == "exercise"}


def notebook_problems(nb: dict) -> list[str]:
    """Every break of the convention in ``nb``, as 'cells[i]: what'."""
    labels = set(notebook_targets(nb))
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            found += [f"cells[{i}]: {p}" for p in cell_problems("".join(cell["source"]), labels)]
    answered = solutions(nb)
    for label, cell in exercises(nb).items():
        if label not in answered:
            found.append(f"cells[{cell}]: exercise {label} has no solution dropdown")
        elif answered[label][0] < cell:
            found.append(f"cells[{answered[label][0]}]: the solution of {label} comes before it")
    for label, (cell, _) in answered.items():
        if label not in exercises(nb):
            found.append(f"cells[{cell}]: a solution of {label}, which is no exercise here")
    return found


# --- the command --------------------------------------------------------------------------------

def dump(nb: dict) -> str:
    """A notebook as Jupyter writes it (so that rewriting changes only what changed)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def chapter_notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "chapters").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks (default: every notebook under chapters/)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true",
                        help="convert the notebooks in place")
    action.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a notebook breaks the convention")
    args = parser.parse_args(argv)
    status = 0
    for path in args.notebooks or chapter_notebooks():
        text = path.read_text()
        nb = json.loads(text)
        if args.write:
            new = dump(convert_notebook(nb))
            if new != text:
                path.write_text(new)
                print(f"converted: {path}")
            nb = json.loads(new)
        for problem in notebook_problems(nb):
            print(f"{path}: {problem}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
