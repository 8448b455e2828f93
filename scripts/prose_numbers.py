#!/usr/bin/env python3
"""Numbers in a chapter's prose that come from its run: check them, or rewrite them.

A sentence that quotes a number the run computed writes it literally, so that it reads the
same on the website, in JupyterLab and in any notebook viewer. The markdown cell's metadata
names each number by a label:

    "metadata": {"attncore": {"numbers": {"capstone-val-loss": "1.84"}}}

and the code cell that PRINTS the number says, in its own metadata, where in its printed output
the label's value stands: a regular expression with one group, searched line by line in the
cell's stored text output (``print`` output and the text of a displayed result), which must
match exactly once:

    "metadata": {"attncore": {"prints": {"capstone-val-loss": "^validation loss: (NUM)"}}}

``NUM`` in a pattern stands for a number as Python formats one (``-1,234.5``, ``3e-05``,
``97%``). So every number the prose quotes is one the reader sees printed by the lesson's own
code, and no cell exists only to store numbers. nbval proves that the stored outputs equal a
fresh run; this script proves that the prose equals the stored outputs.

    python3 scripts/prose_numbers.py --check   # exit 1 on any mismatch
    python3 scripts/prose_numbers.py --write   # after re-executing a notebook: put the run's
                                               # numbers into the prose

``--check`` fails when a cell's metadata names a label that no cell prints, when a pattern does
not match exactly once, when the text in the metadata differs from the printed value, when the
text does not occur in the cell, and when a printed label is quoted by no cell. ``--write``
replaces, in each cell, the old text of every label whose printed value changed with the new
one and updates the metadata; it refuses (and changes nothing in that notebook) where the old
text occurs more than once in the cell, since it cannot tell which occurrence is the number:
write that one by hand.

Chapters written before this convention store numbers with hidden glue cells
(``attncore.lab.glue``); those are still read, and ``--migrate NOTEBOOK`` moves each glued
label to the cell that prints the same value (adding its pattern and deleting the glue call
and, once empty, the glue cell). A label whose value no cell prints is reported: print it
in the lesson cell that computes it, re-execute, and migrate again.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def glue_outputs(nb: dict) -> dict[str, str]:
    """label -> the text the prose shows for it, from the stored glue outputs.

    A glued string is shown without its quotes (as myst-nb's ``{glue:text}`` showed it); any
    other value as its ``text/plain`` representation.
    """
    values = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook")
            if not scrap:
                continue
            text = out["data"][scrap.get("mime_prefix", "") + "text/plain"]
            text = "".join(text) if isinstance(text, list) else text
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = None
            values[scrap["name"]] = value if isinstance(value, str) else text
    return values


# A number as Python formats one: sign, thousands separators, decimals, exponent, percent.
NUM = r"[-+\u2212]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?%?"


def printed_text(cell: dict) -> str:
    """What a code cell printed and displayed as text (its stored outputs, not glue records)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stdout":
            parts.append("".join(out["text"]) if isinstance(out["text"], list) else out["text"])
        elif out.get("output_type") in ("execute_result", "display_data"):
            if out.get("metadata", {}).get("scrapbook"):
                continue
            text = out.get("data", {}).get("text/plain")
            if text is not None:
                parts.append("".join(text) if isinstance(text, list) else text)
                parts.append("\n")
    return "".join(parts)


def prints_of(cell: dict) -> dict[str, str]:
    return cell.get("metadata", {}).get("attncore", {}).get("prints", {})


def pattern(regex: str) -> re.Pattern:
    return re.compile(regex.replace("NUM", NUM), re.M)


def printed_values(nb: dict, name: str = "") -> tuple[dict[str, str], list[str]]:
    """label -> the value its code cell printed, and the problems found on the way."""
    values, found = {}, []
    for i, cell in enumerate(nb["cells"]):
        prints = prints_of(cell)
        if prints and cell["cell_type"] != "code":
            found.append(f"{name} cell {i}: attncore.prints on a {cell['cell_type']} cell")
            continue
        text = printed_text(cell)
        for label, regex in prints.items():
            try:
                matches = list(pattern(regex).finditer(text))
            except re.error as e:
                found.append(f"{name} cell {i}: the pattern of '{label}' is not a regex: {e}")
                continue
            if len(matches) != 1 or pattern(regex).groups != 1:
                found.append(f"{name} cell {i}: the pattern {regex!r} of '{label}' must have one "
                             f"group and match the printed output once; it matches "
                             f"{len(matches)} times")
                continue
            if label in values:
                found.append(f"{name} cell {i}: '{label}' is printed by two cells")
            values[label] = matches[0].group(1)
    return values, found


def stored_values(nb: dict, name: str = "") -> tuple[dict[str, str], list[str]]:
    """label -> value, from printed outputs and (older chapters) glue records."""
    values, found = printed_values(nb, name)
    for label, value in glue_outputs(nb).items():
        if label in values:
            found.append(f"{name}: '{label}' is both printed and glued")
        values[label] = value
    return values, found


def numbers_of(cell: dict) -> dict[str, str]:
    return cell.get("metadata", {}).get("attncore", {}).get("numbers", {})


def source_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def problems(nb: dict, name: str) -> list[str]:
    stored, out = stored_values(nb, name)
    quoted = set()
    for i, cell in enumerate(nb["cells"]):
        numbers = numbers_of(cell)
        if not numbers:
            continue
        if cell["cell_type"] != "markdown":
            out.append(f"{name} cell {i}: attncore.numbers on a {cell['cell_type']} cell")
            continue
        text = "".join(cell["source"])
        for label, shown in numbers.items():
            quoted.add(label)
            if label not in stored:
                out.append(f"{name} cell {i}: '{label}' is printed by no cell (attncore.prints)")
            elif stored[label] != shown:
                out.append(f"{name} cell {i}: '{label}' is {shown!r} in the metadata but the "
                           f"run printed {stored[label]!r} (run scripts/prose_numbers.py --write)")
            if shown not in text:
                out.append(f"{name} cell {i}: the text {shown!r} of '{label}' is not in the cell")
    for label in stored:
        if label not in quoted:
            out.append(f"{name}: the run prints '{label}' but no cell quotes it")
    return out


def rewrite(nb: dict, name: str) -> tuple[bool, list[str]]:
    """Put the printed numbers into the prose. Returns (changed, refusals)."""
    stored, _ = stored_values(nb, name)
    changed, refusals = False, []
    new_sources = {}
    for i, cell in enumerate(nb["cells"]):
        numbers = numbers_of(cell)
        if not numbers or cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        for label, old in numbers.items():
            new = stored.get(label)
            if new is None or new == old:
                continue
            if text.count(old) != 1:
                refusals.append(f"{name} cell {i}: {old!r} ('{label}') occurs "
                                f"{text.count(old)} times in the cell; edit it by hand")
                continue
            text = text.replace(old, new)
            numbers[label] = new
            changed = True
        new_sources[i] = text
    if refusals:
        return False, refusals
    for i, text in new_sources.items():
        nb["cells"][i]["source"] = source_lines(text)
    return changed, []


def _glue_calls(source: str) -> list[tuple[str, int, int]]:
    """(label, first line, last line) of each ``glue("label", ...)`` call, 1-based lines."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "glue"
                and node.args and isinstance(node.args[0], ast.Constant)):
            calls.append((node.args[0].value, node.lineno, node.end_lineno))
    return calls


def _is_glue_cell(cell: dict) -> bool:
    return cell["cell_type"] == "code" and bool(re.search(r"\bglue\(", "".join(cell["source"])))


def pattern_for(line: str, start: int, value: str, loose_prefix: bool) -> str:
    """A pattern that finds ``value`` at ``line[start:]`` again after a re-run: the text
    before it literally (numbers too, unless ``loose_prefix``), runs of spaces as ' +'."""
    prefix = re.escape(line[:start])
    if loose_prefix:
        prefix = re.sub(re.escape("NUM_PLACEHOLDER"), "NUM",
                        re.escape(re.sub(NUM, "NUM_PLACEHOLDER", line[:start])))
    prefix = re.sub(r"(?:\\ )+", " +", prefix)
    group = "(NUM)" if re.fullmatch(NUM, value) else f"({re.escape(value)})"
    return "^" + prefix + group


def migrate(nb: dict, name: str) -> tuple[bool, list[str]]:
    """Move glued labels to the cells that print their values. Returns (changed, left)."""
    glued = glue_outputs(nb)
    changed, left = False, []
    i = 0
    while i < len(nb["cells"]):
        cell = nb["cells"][i]
        if not _is_glue_cell(cell):
            i += 1
            continue
        source = "".join(cell["source"])
        drop_lines, moved = set(), set()
        if len(_glue_calls(source)) < len(re.findall(r"\bglue\(", source)):
            left.append(f"{name} cell {i}: a glue call whose label is computed: print those "
                        "values in the lesson cell and write their patterns by hand")
        for label, first, last in _glue_calls(source):
            value = glued.get(label)
            target = None
            for j in range(i - 1, max(-1, i - 6), -1):      # the lesson cells just before
                lesson = nb["cells"][j]
                if lesson["cell_type"] != "code" or _is_glue_cell(lesson):
                    continue
                text = printed_text(lesson)
                for line in text.splitlines():
                    for m in re.finditer(re.escape(value or "\0"), line):
                        before, after = line[:m.start()], line[m.end():]
                        if re.search(r"[\w.]$", before) or re.match(r"[\w]", after):
                            continue                        # part of a longer number or word
                        # Other numbers before it may change in a re-run: match them as
                        # numbers where that still finds one line, literally otherwise.
                        for loose in (True, False):
                            regex = pattern_for(line, m.start(), value, loose)
                            found = list(pattern(regex).finditer(text))
                            if len(found) == 1 and found[0].group(1) == value:
                                target = (j, regex)
                                break
                        if target:
                            break
                    if target:
                        break
                if target:
                    break
            if target is None:
                left.append(f"{name} cell {i}: '{label}' ({value!r}) is printed by no cell "
                            "just before it: print it there, re-execute, migrate again")
                continue
            j, regex = target
            meta = nb["cells"][j].setdefault("metadata", {}).setdefault("attncore", {})
            meta.setdefault("prints", {})[label] = regex
            drop_lines.update(range(first, last + 1))
            moved.add(label)
        if not moved:
            i += 1
            continue
        changed = True
        cell["outputs"] = [o for o in cell.get("outputs", [])
                           if o.get("metadata", {}).get("scrapbook", {}).get("name") not in moved]
        kept = [line for n, line in enumerate(source.split("\n"), 1) if n not in drop_lines]
        if not re.search(r"\bglue\(", "\n".join(kept)):
            del nb["cells"][i]                              # nothing left to store
            continue
        cell["source"] = source_lines("\n".join(kept))
        i += 1
    return changed, left


def chapters() -> list[Path]:
    return sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="report, change nothing")
    mode.add_argument("--write", action="store_true",
                      help="rewrite the prose's numbers from the printed outputs")
    mode.add_argument("--migrate", action="store_true",
                      help="move glued labels to the cells that print their values")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    status = 0
    for path in args.notebooks or chapters():
        nb = json.loads(path.read_text(encoding="utf-8"))
        if args.migrate:
            changed, left = migrate(nb, path.name)
            if changed:
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                                encoding="utf-8")
                print(f"{path.name}: glued labels moved to the cells that print them")
            found = left
        elif args.write:
            changed, refusals = rewrite(nb, path.name)
            if changed:
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                                encoding="utf-8")
                print(f"{path.name}: numbers rewritten")
            found = refusals + problems(nb, path.name)
        else:
            found = problems(nb, path.name)
        for line in found:
            print(line)
        status = status or bool(found)
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
