"""Writes the line that opens every chapter and going-further page: where it fits.

    .venv/bin/python scripts/chapter_paths.py --write   # insert or update the line everywhere
    .venv/bin/python scripts/chapter_paths.py --check   # exit 1 where a line is missing or stale
    .venv/bin/python scripts/chapter_paths.py           # print each notebook's line

The line says what the chapter needs (the chapters it builds on, linked, and the mathematics
it uses besides), which paths and tracks it is on, and whether a first reading can skip it;
on a going-further page, whether a later chapter depends on the page. It is written from
``course_paths.yml``, the file the page "Ways through the book" is written from too
(scripts/study_time.py), so that the two cannot disagree.

It goes at the end of the notebook's first cell (the title and the first paragraph), between
the lines ``<!-- where it fits -->`` and ``<!-- end of where it fits -->``, which every
frontend hides; ``--write`` adds them where they are missing and replaces what is between
them, and changes nothing else. ``--root DIR`` works on another checkout (the tests use a
copy).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_time  # noqa: E402  (course_paths.yml and the notebooks' keys)

ROOT = Path(__file__).resolve().parents[1]
START = study_time.FITS_START
END = study_time.FITS_END
WIDTH = 95
WAYS_PAGE = f"../{study_time.PAGE}"
NBSP = "\u0000"          # stands for a space inside a link while the line is wrapped


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _chapter_link(n: int, nbs: dict[str, Path]) -> str:
    return f"[chapter {n}]({nbs[str(n)].name})"


def _on(key: str, data: dict) -> str:
    paths = [p["title"].removeprefix("The ").lower() for p in data["paths"].values()
             if any(str(n) == key for week in p["weeks"] for n in week)]
    tracks = [name for name, t in data["tracks"].items() if int(key) in t["chapters"]]
    parts = []
    if paths:
        names = [p.removesuffix(" path") for p in paths]
        parts.append(f"on the {_and(names)} path" + ("s" if len(names) > 1 else ""))
    if tracks:
        parts.append("in " + _and([f"the {t} track" for t in tracks]) + " (elective)")
    return "It is " + " and ".join(parts) if parts else "It is on no path"


def line(key: str, data: dict, nbs: dict[str, Path]) -> str:
    """The markdown of the line for the notebook ``key`` ("2", "2gf"), wrapped at WIDTH."""
    facts = data["chapters"][key]
    maths = facts["maths"]
    maths = "" if maths == "none" else f". Mathematics: {maths}"
    if key.endswith("gf"):
        own = int(key[:-2])
        others = [_chapter_link(n, nbs) for n in facts["needs"] if n != own]
        text = (f"**[Where this page fits]({WAYS_PAGE}).** It continues {_chapter_link(own, nbs)}"
                + (f" and needs {_and(others)}" if others else "") + maths + ". "
                + ("Nothing in the later chapters depends on it, so a first reading can skip "
                   "it." if not facts["later"] else
                   "A later chapter depends on it: a first reading should not skip it."))
    else:
        needs = [_chapter_link(n, nbs) for n in facts["needs"]]
        text = (f"**[Where this chapter fits]({WAYS_PAGE}).** "
                + (f"It builds on {_and(needs)}" if needs else "It builds on no earlier chapter")
                + maths + f". {_on(key, data)}. "
                + ("A first reading can skip it." if facts["skip"]
                   else "A first reading should not skip it."))
    # (the heading links to the page "Ways through the book", which says the rest)
    # Wrap without breaking a link's words ("chapter 1" stays on one line).
    protected = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(" ", NBSP), text)
    wrapped = textwrap.fill(protected, WIDTH, break_long_words=False, break_on_hyphens=False)
    return wrapped.replace(NBSP, " ")


def with_line(source: str, block: str) -> str:
    """The first cell's ``source`` with ``block`` between the markers (added at its end where
    missing); ValueError where the markers are repeated or out of order."""
    starts, ends = source.count(START), source.count(END)
    if starts == ends == 0:
        return source.rstrip("\n") + f"\n\n{START}\n{block}\n{END}"
    if starts != 1 or ends != 1 or source.index(START) > source.index(END):
        raise ValueError(f"expected one {START!r} line and one {END!r} line after it")
    before, rest = source.split(START, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{START}\n{block}\n{END}{after}"


def _source_list(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def run(root: Path, *, write: bool) -> list[str]:
    """The notebooks whose line is missing or stale (written where ``write``); problems of
    course_paths.yml first, as they are."""
    found = study_time.problems(root)
    if found:
        return found
    data, nbs = study_time.load(root), study_time.notebooks(root)
    stale = []
    for key, path in nbs.items():
        nb = json.loads(path.read_text())
        first = nb["cells"][0]
        if first["cell_type"] != "markdown" or not "".join(first["source"]).startswith("# "):
            stale.append(f"{path.name}: its first cell is not the title cell")
            continue
        source = "".join(first["source"])
        try:
            new = with_line(source, line(key, data, nbs))
        except ValueError as err:
            stale.append(f"{path.name}, cell 0: {err}")
            continue
        if new != source:
            stale.append(f"{path.name}: the line 'Where this chapter fits' is "
                         + ("missing" if START not in source else "stale"))
            if write:
                first["source"] = _source_list(new)
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                                encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="insert or update every line")
    mode.add_argument("--check", action="store_true", help="exit 1 where a line is stale")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the checkout to work on (default: this one)")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        found = study_time.problems(args.root)
        if found:
            print("\n".join(found))
            return 1
        data, nbs = study_time.load(args.root), study_time.notebooks(args.root)
        for key, path in nbs.items():
            print(f"{path.name}:\n{line(key, data, nbs)}\n")
        return 0
    found = run(args.root, write=args.write)
    if args.write:
        problems = [f for f in found if "is missing" not in f and "is stale" not in f]
        for f in found:
            print(f if f in problems else f + " (written)")
        return 1 if problems else 0
    if found:
        print("\n".join(found) + "\nrun: python scripts/chapter_paths.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
