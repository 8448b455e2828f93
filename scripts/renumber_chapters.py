#!/usr/bin/env python3
"""Give every chapter notebook the number the sidebar shows, and rewrite what refers to it.

A chapter file is ``chapters/NN_slug.ipynb``, where ``NN`` is its number in the book's sidebar
(numbering runs on across the numbered parts of ``_toc.yml``). To insert, split, move or drop a
chapter, edit ``_toc.yml`` only (a new chapter may be listed with any name, e.g.
``chapters/a_real_llm`` or ``chapters/12_a_real_llm``), then run

    python3 scripts/renumber_chapters.py          # show what would change
    python3 scripts/renumber_chapters.py --write  # do it (git mv, then rewrite references)

With ``--write`` it

* renames each chapter notebook whose number is not its sidebar number (``git mv``), and
  rewrites every occurrence of the old stem (``06_positions``) in the repository's tracked text
  files (notebooks, Markdown, Python, YAML, shell scripts) and in ``_toc.yml``;
* in every Markdown link to a chapter, ``[chapter 7, Tiled attention](08_tiled_attention.ipynb)``,
  puts the target's new number into the link's words (only where the words name one chapter
  number);
* lists what it cannot decide for you: "chapter N" written outside a link in files that are not
  notebooks or Markdown pages (tests, scripts, docstrings), and each chapter's "Next:" line, which
  must name the chapter that now follows it.

It never edits a notebook's outputs or a chapter's prose beyond the stem and the link words.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".ipynb", ".md", ".py", ".yml", ".yaml", ".cfg", ".toml", ".txt", ".sh", ""}
NUMBERED = re.compile(r"^(\d\d)_(.+)$")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
CHAPTER_WORD = re.compile(r"\b([Cc]hapters?) (\d+)\b")


def toc_chapters() -> list[tuple[int, str]]:
    """(sidebar number, stem as listed) for every chapter of the numbered parts, in order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    out, n = [], 0
    for part in toc["parts"]:
        if part.get("numbered"):
            for chapter in part.get("chapters") or []:
                n += 1
                out.append((n, chapter["file"]))
    return out


def plan() -> dict[str, str]:
    """Old stem (``chapters/06_positions``) -> new stem, for the chapters that move."""
    moves = {}
    for number, stem in toc_chapters():
        path = Path(stem)
        m = NUMBERED.match(path.name)
        slug = m.group(2) if m else path.name
        new = str(path.with_name(f"{number:02d}_{slug}"))
        if new != stem:
            moves[stem] = new
        # A chapter's own pages (its "Going further" notebook, listed under it as a section)
        # carry the chapter's number.
        for section in toc_sections().get(stem, []):
            spath = Path(section)
            sm = NUMBERED.match(spath.name)
            snew = str(spath.with_name(f"{number:02d}_{sm.group(2) if sm else spath.name}"))
            if snew != section:
                moves[section] = snew
    return moves


def toc_sections() -> dict[str, list[str]]:
    """Chapter stem -> the stems of the pages listed under it (``sections:``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    out = {}
    for part in toc["parts"]:
        for chapter in part.get("chapters") or []:
            out[chapter["file"]] = [s["file"] for s in chapter.get("sections") or []]
    return out


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split("\0")
    files = []
    for name in names:
        p = ROOT / name
        if (name and p.is_file() and p.suffix in TEXT_SUFFIXES and p.stat().st_size < 5_000_000
                and p != Path(__file__).resolve()):      # its own examples stay as written
            files.append(p)
    return files


def stem_pattern(moves: dict[str, str]) -> tuple[re.Pattern, dict[str, str]]:
    names = {Path(old).name: Path(new).name for old, new in moves.items()}
    alternation = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    return re.compile(rf"(?<![0-9A-Za-z_])({alternation})(?![0-9A-Za-z_])"), names


def chapter_numbers_by_name() -> dict[str, int]:
    """New file name (no suffix) -> sidebar number."""
    out = {}
    for number, stem in toc_chapters():
        path = Path(stem)
        m = NUMBERED.match(path.name)
        slug = m.group(2) if m else path.name
        out[f"{number:02d}_{slug}"] = number
    return out


def fix_link_words(text: str, numbers: dict[str, int]) -> str:
    def one(m: re.Match) -> str:
        words, target = m.group(1), m.group(2)
        path = target.split("#")[0]
        # A link within the page ("#label") or to no file names no chapter.
        name = Path(path).with_suffix("").name if Path(path).name else ""
        if name not in numbers or len(CHAPTER_WORD.findall(words)) != 1:
            return m.group(0)
        words = CHAPTER_WORD.sub(lambda w: f"{w.group(1)} {numbers[name]}", words)
        return f"[{words}]({target})"
    return LINK.sub(one, text)


def rewrite_notebook(text: str, pattern, names, numbers) -> str:
    nb = json.loads(text)
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        new = pattern.sub(lambda m: names[m.group(1)], src)
        if cell["cell_type"] == "markdown":
            new = fix_link_words(new, numbers)
        if new != src:
            lines = new.split("\n")
            cell["source"] = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rename and rewrite (default: show)")
    args = parser.parse_args(argv)

    moves = plan()
    numbers = chapter_numbers_by_name()
    for old, new in moves.items():
        print(f"{old}.ipynb -> {new}.ipynb")
    if not moves:
        print("every chapter already carries its sidebar number")
    if not args.write:
        return 0

    # Rename through temporary names: 13 -> 14 and 14 -> 15 must not collide.
    for i, old in enumerate(moves):
        subprocess.run(["git", "mv", f"{old}.ipynb", f"{old}.renumbering-{i}.ipynb"],
                       cwd=ROOT, check=True)
    for i, (old, new) in enumerate(moves.items()):
        subprocess.run(["git", "mv", f"{old}.renumbering-{i}.ipynb", f"{new}.ipynb"],
                       cwd=ROOT, check=True)

    if moves:
        pattern, names = stem_pattern(moves)
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if path.suffix == ".ipynb":
            new = rewrite_notebook(text, pattern, names, numbers) if moves else \
                rewrite_notebook(text, re.compile(r"(?!)"), {}, numbers)
        else:
            new = pattern.sub(lambda m: names[m.group(1)], text) if moves else text
            if path.suffix == ".md":
                new = fix_link_words(new, numbers)
        if new != text:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
            print(f"rewrote {path.relative_to(ROOT)}")

    # What a person must look at.
    for path in tracked_text_files():
        if path.suffix in (".ipynb", ".md"):
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8",
                                                     errors="surrogateescape").splitlines(), 1):
            if CHAPTER_WORD.search(line):
                print(f"check by hand: {path.relative_to(ROOT)}:{lineno}: {line.strip()[:90]}")
    print("check by hand: each chapter's 'Next:' line names the chapter that now follows it "
          "(tests/test_book_structure.py checks it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
