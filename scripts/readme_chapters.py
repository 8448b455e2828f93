#!/usr/bin/env python3
"""Writes the README's list of chapters from _toc.yml, so that it cannot fall behind the book.

    .venv/bin/python scripts/readme_chapters.py --write   # rewrite the list in README.md
    .venv/bin/python scripts/readme_chapters.py --check   # exit 1 if it is out of date

The list sits between the README's ``<!-- chapters -->`` and ``<!-- end of chapters -->``
lines: under each part's caption, one line per chapter with the number the sidebar shows (a bullet for an unnumbered page), the
notebook's title and the one-line pitch of its card on the landing page
(``_ext/chapter_cards.py``, ``CARDS``). Run ``--write`` after adding, renaming or renumbering a
chapter (``scripts/renumber_chapters.py``); tests/test_chapter_lists.py runs ``--check``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import chapter_cards  # noqa: E402  (the landing page's cards: one source for both lists)

START = "<!-- chapters -->"
END = "<!-- end of chapters -->"
WIDTH = 95                       # the README's line length


def chapter_list(root: Path = ROOT) -> str:
    """The Markdown of the list: a bold caption per part, then its chapters, numbered."""
    lines = []
    for caption, listed in chapter_cards.parts(root):
        lines += [f"**{caption}**", ""]
        for number, slug, stem in listed:
            pitch = chapter_cards.CARDS[slug][0]
            # the unnumbered pages (00_...) as bullets: two items "0." would render as 0, 1
            marker = f"{number}." if number else "-"
            item = f"{marker} {chapter_cards.full_title(stem, root)}. {pitch}"
            lines.append(textwrap.fill(item, WIDTH, subsequent_indent=" " * len(f"{marker} "),
                                       break_long_words=False, break_on_hyphens=False))
        lines.append("")
    return "\n".join(lines)


def updated(readme: str, root: Path = ROOT) -> str:
    """``readme`` with its list replaced by the current one; ValueError without the markers."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"README.md needs one {START!r} line and one {END!r} line")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{chapter_list(root)}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    path = ROOT / "README.md"
    text = path.read_text()
    new = updated(text)
    if args.check:
        if new != text:
            print("README.md: the list of chapters does not follow _toc.yml; run "
                  ".venv/bin/python scripts/readme_chapters.py --write")
            return 1
        return 0
    if new != text:
        path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
