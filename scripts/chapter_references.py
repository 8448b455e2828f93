#!/usr/bin/env python3
"""Each chapter's ``## References`` cell, written from references.bib.

A chapter cites in plain text ("Vaswani et al. (2017)", "(Vaswani et al., 2017)"), so that
the citation reads the same on the website, in JupyterLab and in a notebook viewer without
MyST. It ends with a markdown cell headed ``## References`` whose metadata lists the keys of
the works it cites, ``{"attncore": {"references": ["vaswani2017attention", ...]}}``; the body
of that cell lists each work in full, formatted from references.bib exactly as the
bibliography page formats it, under the same author-year label
(``_ext/author_year_bibliography.py``).

    python3 scripts/chapter_references.py --write   # rewrite every References cell's body
    python3 scripts/chapter_references.py --check   # exit 1 if any chapter is out of date

``--check`` (run by tests/test_book_structure.py) also fails when a key is missing from
references.bib, when a listed work is never cited in the chapter's text, or when the text
cites a work ("Ba et al., 2016" / "Ba et al. (2016)") that the list lacks.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## References"


@lru_cache(maxsize=None)
def bibliography() -> dict[str, tuple[str, str]]:
    """key -> (label "Vaswani et al., 2017", the work in full as one Markdown line).

    Sorted as the bibliography page sorts it (by author, year, title).
    """
    sys.path.insert(0, str(ROOT))
    from pybtex.database import parse_file

    from _ext.author_year_bibliography import AuthorYearStyle

    bib = parse_file(str(ROOT / "references.bib"))
    out = {}
    for entry in AuthorYearStyle().format_entries(bib.entries.values()):
        text = entry.text.render_as("markdown")
        # pybtex escapes every punctuation mark; keep only the escapes Markdown needs.
        text = re.sub(r"\\([.\-(),:;#!?'\"/+=])", r"\1", text)
        text = text.replace("&amp;", "&")
        out[entry.key] = (entry.label, " ".join(text.split()))
    return out


def textual(label: str) -> str:
    """ "Vaswani et al., 2017" -> "Vaswani et al. (2017)" (a citation that is the subject)."""
    who, year = label.rsplit(", ", 1)
    return f"{who} ({year})"


def parenthetical(label: str) -> str:
    """ "Vaswani et al., 2017" -> "(Vaswani et al., 2017)"."""
    return f"({label})"


def cite(keys: list[str], textual_form: bool) -> str:
    """The plain-text citation of ``keys``, as ``{cite:t}`` or ``{cite:p}`` rendered it."""
    bib = bibliography()
    labels = [bib[k][0] for k in keys]
    if textual_form:
        parts = [textual(lab) for lab in labels]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return "(" + "; ".join(labels) + ")"


def references_source(keys: list[str]) -> str:
    """The body of a chapter's References cell: each work in full, in bibliography order."""
    bib = bibliography()
    unknown = [k for k in keys if k not in bib]
    if unknown:
        raise KeyError(f"not in references.bib: {', '.join(unknown)}")
    lines = [HEADING, ""]
    for key in bib:                      # bibliography order
        if key in keys:
            label, text = bib[key]
            lines.append(f"- {textual(label)}. {text}")
    return "\n".join(lines)


def source_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


def chapters() -> list[Path]:
    return sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def problems(path: Path, write: bool = False) -> list[str]:
    """What is wrong with ``path``'s References cell (and fix the body when ``write``)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb["cells"]
    ref_cells = [i for i, c in enumerate(cells)
                 if c["cell_type"] == "markdown"
                 and "".join(c["source"]).startswith(HEADING)]
    text = "\n".join("".join(c["source"]) for i, c in enumerate(cells)
                     if c["cell_type"] == "markdown" and i not in ref_cells)
    # A citation may be broken across source lines: Markdown reads a line break as a space.
    text = " ".join(text.split())
    bib = bibliography()
    cited = [k for k, (label, _) in bib.items()
             if label in text or textual(label) in text]
    name = path.name
    if not ref_cells:
        return [f"{name}: cites {', '.join(cited)} but has no '{HEADING}' cell"] if cited else []
    out = []
    if len(ref_cells) > 1:
        out.append(f"{name}: {len(ref_cells)} '{HEADING}' cells, expected one")
    index = ref_cells[-1]
    if index != len(cells) - 1:
        out.append(f"{name}: the '{HEADING}' cell is cell {index}, not the last cell")
    cell = cells[index]
    keys = cell.get("metadata", {}).get("attncore", {}).get("references")
    if not isinstance(keys, list) or not keys:
        return out + [f"{name}: the '{HEADING}' cell has no metadata attncore.references"]
    unknown = [k for k in keys if k not in bib]
    if unknown:
        return out + [f"{name}: references not in references.bib: {', '.join(unknown)}"]
    for k in keys:
        if k not in cited:
            out.append(f"{name}: lists {k} but its text never cites "
                       f"'{textual(bib[k][0])}' or '({bib[k][0]})'")
    for k in cited:
        if k not in keys:
            out.append(f"{name}: cites {bib[k][0]} ({k}) but its references do not list it")
    want = references_source(keys)
    if "".join(cell["source"]) != want:
        if write:
            cell["source"] = source_lines(want)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                            encoding="utf-8")
        else:
            out.append(f"{name}: the '{HEADING}' cell is out of date with references.bib "
                       "(run scripts/chapter_references.py --write)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="report, change nothing")
    mode.add_argument("--write", action="store_true", help="rewrite the References cells")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    found = []
    for path in args.notebooks or chapters():
        found += problems(path, write=args.write)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
