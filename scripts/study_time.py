"""Writes the tables of the page "Ways through the book" from course_paths.yml and the notebooks.

    .venv/bin/python scripts/study_time.py --write   # rewrite the tables of the page
    .venv/bin/python scripts/study_time.py --check   # exit 1 if they are stale (a test runs it)
    .venv/bin/python scripts/study_time.py           # print each chapter's estimate

The paths, tracks and what each chapter needs come from ``course_paths.yml`` (the one place
for them; scripts/chapter_paths.py writes each chapter's opening line from it too). Each
chapter's study time is estimated from its notebook, at the rates below (RATES), which the
page states:

- reading and running: the words of its markdown, less the collapsed solutions, the
  References, the line "Where this chapter fits" and HTML comments, at WORDS_PER_MINUTE;
  plus CODE_CELL_MINUTES for each code cell a reader runs and reads (all but the set-up
  cell and the exercises' check cells);
- exercises: by kind, an answer its self-check checks (a number, a shape, a set), a
  function to write (its text shows a ``def``, or asks to write a signature: FUNCTION),
  and a proof or an explanation (no self-check);

each rounded to ROUND_TO minutes. The tables go between ``<!-- study-time: NAME -->`` and
``<!-- end of study-time: NAME -->`` in ways_through_the_book.md; the rest of the page is
written by hand.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = "course_paths.yml"
PAGE = "ways_through_the_book.md"

WORDS_PER_MINUTE = 150
CODE_CELL_MINUTES = 1.5
EXERCISE_MINUTES = {"answer": 10, "function": 25, "proof": 20}
EXERCISE_KINDS = {"answer": "an answer its self-check checks (a number, a shape, a set)",
                  "function": "a function to write, checked by its self-check",
                  "proof": "a proof or an explanation, which has no self-check"}
ROUND_TO = 5
SETUP_MARKER = "# Set-up: "          # the first line of every set-up cell (notebook_setup.py)

# The line "Where this chapter fits" (scripts/chapter_paths.py writes it between these): not
# counted, so that writing it does not change the estimates.
FITS_START = "<!-- where it fits -->"
FITS_END = "<!-- end of where it fits -->"
FITS = re.compile(re.escape(FITS_START) + ".*?" + re.escape(FITS_END), re.S)
SOLUTION = re.compile(r"^:{3,}\{dropdown\} Solution\n.*?^</details>\s*$", re.M | re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
EXERCISE = re.compile(r"^(:{3,})\{exercise\}[^\n]*\n(.*?)^\1\s*$", re.M | re.S)
LABEL = re.compile(r"<!--\s*label:\s*(ex-[\w-]+)\s*-->")
# An exercise whose answer is a function: its text shows a ``def``, a kernel's decorator, or
# asks for a signature (``Write `f(x, y)` ...``, ``with a function `f(x, y)```).
FUNCTION = re.compile(r"\bdef\b|@triton\.jit|\b(?:[Ww]rite|with a function) [^.]*?`\w+\([^`]*\)`")
CHECK = re.compile(r"""check_exercise\(\s*["'](ex-[\w-]+)["']""")


# --- the data --------------------------------------------------------------------------------

def load(root: Path = ROOT) -> dict:
    """course_paths.yml, with its keys checked: chapter keys as strings ("2", "2gf")."""
    data = yaml.safe_load((root / DATA).read_text())
    data["chapters"] = {str(k): v for k, v in data["chapters"].items()}
    for key, facts in data["chapters"].items():
        missing = {"needs", "maths"} - set(facts)
        missing |= {"later"} - set(facts) if key.endswith("gf") else {"skip"} - set(facts)
        if missing:
            raise ValueError(f"{DATA}: chapter {key} lacks {sorted(missing)}")
    return data


def notebooks(root: Path = ROOT) -> dict[str, Path]:
    """Key of course_paths.yml ("2", "2gf") -> its notebook, for every notebook of chapters/."""
    found = {}
    for nb in sorted((root / "chapters").glob("[0-9][0-9]_*.ipynb")):
        number = str(int(nb.name[:2]))
        found[number + "gf" if nb.stem.endswith("_going_further") else number] = nb
    return found


def title(nb: Path) -> str:
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.search(r"^#\s+(.+)$", "".join(cell["source"]), re.M)
            if m:
                return m.group(1).strip()
    raise ValueError(f"{nb.name} has no title")


def problems(root: Path = ROOT) -> list[str]:
    """Where course_paths.yml and chapters/ disagree."""
    data, nbs = load(root), notebooks(root)
    found = [f"{DATA}: {nbs[k].name} has no entry" for k in nbs if k not in data["chapters"]]
    found += [f"{DATA}: chapter {k} has no notebook" for k in data["chapters"] if k not in nbs]
    for key, facts in data["chapters"].items():
        for n in facts["needs"]:
            if str(n) not in nbs:
                found.append(f"{DATA}: chapter {key} needs chapter {n}, which does not exist")
    chapters_of_paths = [n for p in data["paths"].values() for week in p["weeks"] for n in week]
    chapters_of_paths += [n for t in data["tracks"].values() for n in t["chapters"]]
    found += [f"{DATA}: a path or track names chapter {n}, which does not exist"
              for n in chapters_of_paths if n != "track" and str(n) not in nbs]
    return found


# --- the estimate ----------------------------------------------------------------------------

def _round(minutes: float) -> int:
    return int(ROUND_TO * round(minutes / ROUND_TO))


def estimate(nb: Path) -> dict:
    """The study time of one notebook: words, code cells and exercises by kind, and minutes
    (``read``, ``exercises``, ``total``) at the module's rates."""
    cells = json.loads(nb.read_text())["cells"]
    words, code_cells = 0, 0
    kinds = dict.fromkeys(EXERCISE_MINUTES, 0)
    checked = {m for c in cells if c["cell_type"] == "code"
               for m in CHECK.findall("".join(c["source"]))}
    for cell in cells:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            if cell.get("metadata", {}).get("attncore", {}).get("references") is not None \
                    or src.lstrip().startswith("## References"):
                continue
            words += len(COMMENT.sub(" ", SOLUTION.sub(" ", FITS.sub(" ", src))).split())
            for _, body in EXERCISE.findall(src):
                label = LABEL.search(body)
                if label and label.group(1) in checked:
                    kinds["function" if FUNCTION.search(body) else "answer"] += 1
                else:
                    kinds["proof"] += 1
        elif cell["cell_type"] == "code":
            if not src.startswith(SETUP_MARKER) and not CHECK.search(src):
                code_cells += 1
    read = _round(words / WORDS_PER_MINUTE + code_cells * CODE_CELL_MINUTES)
    exercises = _round(sum(EXERCISE_MINUTES[k] * n for k, n in kinds.items()))
    return {"words": words, "code_cells": code_cells, "exercises_by_kind": kinds,
            "read": read, "exercises": exercises, "total": read + exercises}


def hours(minutes: int) -> str:
    h, m = divmod(int(minutes), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


# --- the page --------------------------------------------------------------------------------

def _link(key: str, nbs: dict[str, Path]) -> str:
    nb = nbs[key]
    name = title(nb)
    if not key.endswith("gf"):
        name = f"{key}. {name}"
    return f"[{name}](chapters/{nb.name})"


def _paths_of(data: dict) -> dict[str, list[str]]:
    """chapter key -> the paths and tracks it is on, as words."""
    on: dict[str, list[str]] = {}
    for name, path in data["paths"].items():
        for week in path["weeks"]:
            for n in week:
                if n != "track" and name not in on.setdefault(str(n), []):
                    on[str(n)].append(name)
    for name, track in data["tracks"].items():
        for n in track["chapters"]:
            on.setdefault(str(n), []).append(f"{name} track")
    return on


def tables(root: Path = ROOT) -> dict[str, str]:
    """The generated blocks of the page, by marker name."""
    data, nbs = load(root), notebooks(root)
    est = {k: estimate(nb) for k, nb in nbs.items()}
    blocks = {}
    for name, path in data["paths"].items():
        taken = {str(n) for week in path["weeks"] for n in week if n != "track"}
        rows = ["| Week | Chapters | Study time |", "|---|---|---|"]
        total = 0
        for i, week in enumerate(path["weeks"], 1):
            keys = [str(n) for n in week if n != "track"]
            if "track" in week:
                extra = [sum(est[str(n)]["total"] for n in t["chapters"] if str(n) not in taken)
                         for t in data["tracks"].values()]
                n_track = sum(n == "track" for week in path["weeks"] for n in week)
                share = (min(extra) / n_track, max(extra) / n_track)
                rows.append(f"| {i} | an elective track (below), the chapters this path has "
                            f"not read yet | {hours(_round(share[0]))} to "
                            f"{hours(_round(share[1]))} |")
                total += sum(share) / 2
                continue
            minutes = sum(est[k]["total"] for k in keys)
            total += minutes
            rows.append(f"| {i} | {', '.join(_link(k, nbs) for k in keys)} | {hours(minutes)} |")
        rows.append(f"| | in all, about | {hours(_round(total))} |")
        blocks[name] = "\n".join(rows)
    rows = ["| Track | Chapters, in order | Study time |", "|---|---|---|"]
    for t in data["tracks"].values():
        minutes = sum(est[str(n)]["total"] for n in t["chapters"])
        chain = " → ".join(_link(str(n), nbs) for n in t["chapters"])
        rows.append(f"| {t['title']} | {chain} | {hours(minutes)} |")
    blocks["tracks"] = "\n".join(rows)
    on = _paths_of(data)
    rows = ["| Chapter | Needs chapters | Mathematics | Read and run | Exercises | Total "
            "| Paths and tracks | First reading |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted(nbs, key=lambda k: (int(k.rstrip("gf")), k.endswith("gf"))):
        facts, e = data["chapters"][key], est[key]
        needs = ", ".join(str(n) for n in facts["needs"]) or "none"
        if key.endswith("gf"):
            paths = "going further"
            first = "can skip (no later chapter depends on it)" if not facts["later"] \
                else "a later chapter depends on it"
        else:
            paths = ", ".join(on.get(key, [])) or "none"
            first = "can skip" if facts["skip"] else "read it"
        rows.append(f"| {_link(key, nbs)} | {needs} | {facts['maths']} | {e['read']} min "
                    f"| {e['exercises']} min | {hours(e['total'])} | {paths} | {first} |")
    blocks["chapters"] = "\n".join(rows)
    rates = ("**How the times are estimated.** They are counted from each chapter's notebook, "
             f"not measured on readers: reading at {WORDS_PER_MINUTE} words a minute (the "
             "prose, without the collapsed solutions and the references), "
             f"{CODE_CELL_MINUTES:g} minutes for each code cell "
             "you run and read, and for each exercise "
             + "; ".join(f"{EXERCISE_MINUTES[k]} minutes for {EXERCISE_KINDS[k]}"
                         for k in EXERCISE_MINUTES)
             + f"; each estimate rounded to {ROUND_TO} minutes. A first reading of a proof "
             "can take longer; a reader fluent in the mathematics needs less.")
    blocks["rates"] = rates
    return blocks


def start(name: str) -> str:
    return f"<!-- study-time: {name} -->"


def end(name: str) -> str:
    return f"<!-- end of study-time: {name} -->"


def updated(page: str, blocks: dict[str, str]) -> str:
    """``page`` with each block between its markers replaced; ValueError where a marker is
    missing or repeated."""
    for name, block in blocks.items():
        pattern = re.compile(re.escape(start(name)) + r"\n.*?" + re.escape(end(name)), re.S)
        if len(pattern.findall(page)) != 1:
            raise ValueError(f"{PAGE} needs one {start(name)!r} line and one {end(name)!r} "
                             "line after it")
        page = pattern.sub(lambda m: f"{start(name)}\n{block}\n{end(name)}", page)
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite the tables of {PAGE}")
    mode.add_argument("--check", action="store_true", help="exit 1 if the tables are stale")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.root
    found = problems(root)
    if found:
        print("\n".join(found))
        return 1
    if not (args.write or args.check):
        for key, nb in notebooks(root).items():
            e = estimate(nb)
            print(f"{nb.name}: {e['words']} words, {e['code_cells']} code cells, "
                  f"exercises {e['exercises_by_kind']}: {e['read']} + {e['exercises']} min")
        return 0
    page_path = root / PAGE
    page = page_path.read_text()
    try:
        new = updated(page, tables(root))
    except ValueError as err:
        print(err)
        return 1
    if args.check:
        if new != page:
            print(f"{PAGE}: the study times or paths are stale; run "
                  "python scripts/study_time.py --write")
            return 1
        return 0
    if new != page:
        page_path.write_text(new)
        print(f"{PAGE}: tables rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
