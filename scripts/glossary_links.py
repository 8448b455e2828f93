#!/usr/bin/env python3
"""Links the first use of each glossary term in each chapter to its entry in glossary.md.

    python3 scripts/glossary_links.py --write    # link the first use of each term, per notebook
    python3 scripts/glossary_links.py --check    # exit 1 where a first use is not linked, or
                                                 # a link names no entry of the glossary
    python3 scripts/glossary_links.py --check chapters/05_multi_head_attention.ipynb ...

The terms come from the glossary itself: each entry is a ``## Term`` heading followed by a
comment that lists the forms to look for, ``<!-- glossary: logits, logit -->``. A form with a
capital letter (``Adam``, ``KV cache``) matches as written, an all-lower-case one in any case;
words may be split across lines. The link is a Markdown link with the words as they stand,
``[logits](../glossary.md#logits)``, to the anchor the site gives the entry's heading
(``myst_heading_anchors``), so that it works in every frontend.

Only prose is linked. Skipped: code (fenced and inline), maths (``$...$``, ``$$...$$``),
headings (the title included), existing links and images, directive opening lines
(``:::{...}``), MyST targets and ``%`` comments, HTML comments and tags, URLs, and the
References cell. Where two forms overlap, the one that starts first (then the longer) wins.
A chapter that the entry itself links to as the place that treats the term is not linked
back for that term. ``--check`` reports, per notebook, each term whose first use in prose
comes before any link to its entry, and each link to the glossary whose anchor is none of
its headings. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = "glossary.md"

# What is never linked, in the order the alternatives are tried (multi-line ones first).
PROTECTED = re.compile("|".join([
    # the line scripts/chapter_paths.py writes and rewrites, between its markers
    r"<!-- where it fits -->.*?<!-- end of where it fits -->",
    r"```.*?```", r"~~~.*?~~~",                          # fenced code
    r"\$\$.*?\$\$",                                      # display maths
    r"<!--.*?-->",                                       # HTML comments
    r"^[ \t]*(?:#{1,6}[ \t]|:{3,}|\(\S+\)=|%)[^\n]*",    # headings, directives, targets, %
    r"!\[[^\]]*\]\([^)]*\)",                             # images
    r"\[(?:[^\[\]]|\[[^\]]*\])*\]\([^)\s]*\)",           # links
    r"``.+?``", r"`[^`\n]+`",                            # inline code
    r"(?<!\\)\$[^$]+?\$",                                # inline maths
    r"<[^>\n]+>",                                        # HTML tags
    r"https?://\S+",                                     # bare addresses
]), re.S | re.M)
LINK = re.compile(r"^\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]*)\)$", re.S)


@dataclass(frozen=True)
class Term:
    anchor: str                 # the slug of the entry's heading
    heading: str
    forms: tuple[str, ...]
    treated_in: tuple[str, ...]  # file names of the chapters the entry links to

    def pattern(self) -> re.Pattern:
        alternatives = []
        for form in sorted(self.forms, key=len, reverse=True):
            words = r"\s+".join(re.escape(w) for w in form.split())
            flags = "" if any(c.isupper() for c in form) else "(?i:"
            alternatives.append(f"{flags}{words})" if flags else words)
        # ("tensor cores" are hardware, not tensors)
        return re.compile(r"(?<![\w-])(?:" + "|".join(alternatives) + r")(?![\w-])"
                          r"(?!\s+cores?\b)")


def slug(title: str) -> str:
    """The anchor myst-parser gives a heading (as tests/test_book_structure.py computes it)."""
    title = re.sub(r"\$[^$]*\$", "", title)
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    title = re.sub(r"[`*]", "", title)
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", title.lower().replace(" ", "-"))


def anchors(glossary: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,3} (.+?)\s*$", glossary.read_text(),
                                                   re.M)}


def terms(glossary: Path) -> list[Term]:
    """The entries of the glossary that list forms to link."""
    found = []
    text = glossary.read_text()
    for m in re.finditer(r"^## (.+?)\s*\n<!-- glossary: (.*?) -->\n(.*?)(?=^## |\Z)", text,
                         re.M | re.S):
        forms = tuple(f.strip() for f in m.group(2).split(",") if f.strip())
        treated = tuple(sorted({Path(t).name for t in
                                re.findall(r"\]\(([^)#\s]+\.ipynb)", m.group(3))}))
        if forms:
            found.append(Term(slug(m.group(1)), m.group(1), forms, treated))
    return found


def segments(text: str):
    """(kind, start, end) pieces of a cell's markdown: "text", "skip", or "link"."""
    pos = 0
    for m in PROTECTED.finditer(text):
        if m.start() > pos:
            yield "text", pos, m.start()
        yield ("link" if LINK.match(m.group(0)) else "skip"), m.start(), m.end()
        pos = m.end()
    if pos < len(text):
        yield "text", pos, len(text)


def _matches(text: str, start: int, end: int, patterns: list[tuple[Term, re.Pattern]]):
    """Non-overlapping (start, end, term) of every form in text[start:end]: the earliest
    first, then the longest."""
    found = sorted(((m.start(), -m.end(), t) for t, p in patterns
                    for m in p.finditer(text, start, end)), key=lambda x: (x[0], x[1]))
    last, chosen = -1, []
    for s, neg_e, term in found:
        if s >= last:
            chosen.append((s, -neg_e, term))
            last = -neg_e
    return chosen


def _glossary_anchor(target: str, glossary_name: str = GLOSSARY) -> str | None:
    path, _, fragment = target.partition("#")
    return fragment if Path(path).name == glossary_name else None


def is_references(cell: dict) -> bool:
    return ("references" in cell.get("metadata", {}).get("attncore", {})
            or "".join(cell["source"]).lstrip().startswith("## References"))


def first_uses(cells: list[dict], all_terms: list[Term], notebook_name: str):
    """For each term, the first event in the notebook's prose: ("link", cell, start, end) for
    a link to its entry, ("text", cell, start, end) for a use that is not linked."""
    active = [(t, t.pattern()) for t in all_terms if notebook_name not in t.treated_in]
    by_anchor = {t.anchor: t for t, _ in active}
    events: dict[str, tuple] = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown" or is_references(cell):
            continue
        text = "".join(cell["source"])
        for kind, start, end in segments(text):
            if kind == "link":
                anchor = _glossary_anchor(LINK.match(text[start:end]).group(2))
                if anchor in by_anchor and anchor not in events:
                    events[anchor] = ("link", i, start, end)
            elif kind == "text":
                for s, e, term in _matches(text, start, end, active):
                    events.setdefault(term.anchor, ("text", i, s, e))
    return events


def link_notebook(path: Path, glossary: Path) -> int:
    """Link the first unlinked use of each term in ``path``; return how many links it wrote."""
    nb = json.loads(path.read_text())
    rel = os.path.relpath(glossary, path.parent).replace(os.sep, "/")
    events = first_uses(nb["cells"], terms(glossary), path.name)
    edits: dict[int, list[tuple[int, int, str]]] = {}
    for anchor, (kind, i, s, e) in events.items():
        if kind == "text":
            edits.setdefault(i, []).append((s, e, anchor))
    for i, spans in edits.items():
        text = "".join(nb["cells"][i]["source"])
        for s, e, anchor in sorted(spans, reverse=True):
            text = f"{text[:s]}[{text[s:e]}]({rel}#{anchor}){text[e:]}"
        nb["cells"][i]["source"] = text.splitlines(keepends=True)
    if edits:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return sum(len(v) for v in edits.values())


def problems(path: Path, glossary: Path) -> list[str]:
    """What --check reports for one notebook."""
    nb = json.loads(path.read_text())
    found = []
    known = anchors(glossary)
    by_anchor = {t.anchor: t for t in terms(glossary)}
    events = first_uses(nb["cells"], terms(glossary), path.name)
    for anchor, (kind, i, s, e) in sorted(events.items(), key=lambda kv: kv[1][1:]):
        if kind == "text":
            text = "".join(nb["cells"][i]["source"])
            found.append(f"{path.name}: cell {i}: the first use of "
                         f"{by_anchor[anchor].heading!r}, {text[s:e]!r}, is not linked to "
                         f"{GLOSSARY}#{anchor}")
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for target in re.findall(r"\]\(([^)\s]*)\)", "".join(cell["source"])):
            anchor = _glossary_anchor(target)
            if anchor is not None and anchor not in known:
                found.append(f"{path.name}: the link {target} names no heading of {GLOSSARY}")
    return found


def chapter_notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "chapters").glob("*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--glossary", type=Path, default=ROOT / GLOSSARY)
    args = parser.parse_args(argv)
    notebooks = args.notebooks or chapter_notebooks()
    if args.write:
        for nb in notebooks:
            n = link_notebook(nb, args.glossary)
            if n:
                print(f"{nb.name}: linked {n} terms to the glossary")
        return 0
    found = [p for nb in notebooks for p in problems(nb, args.glossary)]
    print("\n".join(found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
