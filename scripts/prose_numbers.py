#!/usr/bin/env python3
"""Numbers in a chapter's prose that come from its run: check them, or rewrite them.

A sentence that quotes a number the run computed writes it literally, so that it reads the
same on the website, in JupyterLab and in any notebook viewer. The markdown cell's metadata
names where each number comes from:

    "metadata": {"attncore": {"numbers": {"capstone-val-loss": "1.84"}}}

and a hidden code cell (tags ``remove-cell``, collapsed in JupyterLab) stores it with
``glue("capstone-val-loss", f"{loss:.2f}", display=False)`` (``attncore.lab.glue``). nbval
proves that the stored glue outputs equal a fresh run; this script proves that the prose
equals the stored glue outputs.

    python3 scripts/prose_numbers.py --check   # exit 1 on any mismatch
    python3 scripts/prose_numbers.py --write   # after re-executing a notebook: put the run's
                                               # numbers into the prose

``--check`` fails when a cell's metadata names a label that the run did not store, when the
text in the metadata differs from the stored output, when the text does not occur in the cell,
and when a stored label is quoted by no cell. ``--write`` replaces, in each cell, the old text
of every label whose stored output changed with the new one and updates the metadata; it
refuses (and changes nothing in that notebook) where the old text occurs more than once in the
cell, since it cannot tell which occurrence is the number: write that one by hand.
"""

from __future__ import annotations

import argparse
import ast
import json
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


def numbers_of(cell: dict) -> dict[str, str]:
    return cell.get("metadata", {}).get("attncore", {}).get("numbers", {})


def source_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def problems(nb: dict, name: str) -> list[str]:
    stored = glue_outputs(nb)
    out, quoted = [], set()
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
                out.append(f"{name} cell {i}: '{label}' is not stored by any glue call")
            elif stored[label] != shown:
                out.append(f"{name} cell {i}: '{label}' is {shown!r} in the metadata but the "
                           f"run stored {stored[label]!r} (run scripts/prose_numbers.py --write)")
            if shown not in text:
                out.append(f"{name} cell {i}: the text {shown!r} of '{label}' is not in the cell")
    for label in stored:
        if label not in quoted:
            out.append(f"{name}: the run stores '{label}' but no cell quotes it")
    return out


def rewrite(nb: dict, name: str) -> tuple[bool, list[str]]:
    """Put the stored numbers into the prose. Returns (changed, refusals)."""
    stored = glue_outputs(nb)
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


def chapters() -> list[Path]:
    return sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="report, change nothing")
    mode.add_argument("--write", action="store_true",
                      help="rewrite the prose's numbers from the stored glue outputs")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    status = 0
    for path in args.notebooks or chapters():
        nb = json.loads(path.read_text(encoding="utf-8"))
        if args.write:
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
