"""Runs what a change touches: the quick loop while you work. ``./scripts/test`` stays the full
check (CI runs it); this picks, from what differs from git's ``HEAD`` (staged, unstaged and new
files), or from ``--since REF``:

- a changed test file: that file; a changed helper of the tests (``tests/x.py``): the test
  files that import it;
- a changed module of ``attncore``: the test files and notebooks that use it, or use a module
  that imports it (a notebook that calls ``ac.decode_step`` uses ``attncore.kvcache``, which
  imports ``attncore.attention``: a change to either runs the notebook). What "uses" means is
  read from the code, not run: the names a file takes from ``attncore`` (``ac.name``,
  ``ac.lab.module``, ``from attncore.x import y``), resolved through the package's imports;
- a changed notebook: that notebook under nbval, and its tests in ``tests/test_book_structure.py``,
  ``tests/test_exercises.py`` and ``tests/test_spoilers.py``; the same for the chapter a changed
  exercise checker (``attncore/lab/exercises/<chapter>.py``) belongs to;
- a changed script (``scripts/x.py``): the test files that name it.

What it cannot run quickly it names: a change to the site's build (``_ext/``, ``_config.yml``,
``_toc.yml``, a page of the book) needs the site's tests, which build the book (a few minutes:
``./scripts/test tests/test_site.py tests/test_site_browser.py tests/test_site_pdf.py``, or on a
site already built with ``ATTNCORE_BUILT_SITE=_build/html``); a change to ``tests/conftest.py``
or to the requirements needs the full suite.

    ./scripts/quick                       # what differs from HEAD
    ./scripts/quick --since main          # what differs from main
    ./scripts/quick --list                # what it would run, nothing run
    ./scripts/quick -- -x -k softmax      # after --: more arguments for pytest
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "attncore"
# the test files that check one notebook at a time, by its name in their test ids
PER_NOTEBOOK_TESTS = ("tests/test_book_structure.py", "tests/test_exercises.py",
                      "tests/test_spoilers.py")
SITE_SOURCES = re.compile(r"^(_ext/|_config\.yml$|_toc\.yml$|_static/|references\.bib$|"
                          r"[^/]+\.md$|appendix/)")
WHOLE_SUITE = re.compile(r"^(tests/conftest\.py|requirements[^/]*\.txt|pyproject\.toml|"
                         r"install\.py|nbval_sanitize\.cfg)$")


def changed_files(since: str) -> list[str]:
    """Paths, relative to the repository, that differ from ``since`` (new files included)."""
    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
        return [line for line in out.splitlines() if line]

    return sorted(set(git("diff", "--name-only", since))
                  | set(git("ls-files", "--others", "--exclude-standard")))


# --- what imports what -------------------------------------------------------------------------

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _absolute(module: str, level: int, here: str, is_package: bool) -> str:
    if not level:
        return module
    base = here.split(".") if is_package else here.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _imported(node: ast.AST, here: str, is_package: bool) -> set[str]:
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            found |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = _absolute(n.module or "", n.level, here, is_package)
            found.add(base)
            found |= {f"{base}.{a.name}" for a in n.names}
    return found


def imports_of(path: Path, modules: dict[str, Path]) -> tuple[set[str], dict[str, set[str]]]:
    """The package's modules that ``path`` imports: (at its top level, {name of a top-level
    function or class: inside it}). A name imported from a package that is itself a module
    counts as that module. A chapter that calls one function of a module depends on the
    module's top-level imports and that function's own, not on its siblings' (the opening
    figures import each chapter's modules inside that chapter's function)."""
    here = module_name(path) if path.is_relative_to(ROOT / PACKAGE) else ""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top, inner = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner[node.name] = _imported(node, here, is_package) & modules.keys()
        else:
            top |= _imported(node, here, is_package)
    return top & modules.keys(), inner


def exported_names(modules: dict[str, Path]) -> dict[str, dict[str, str]]:
    """For each package: the names it takes from its modules (``from .x import name``), as
    name -> module, so that ``ac.name`` resolves to the module that defines it."""
    names: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        table = names.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(node.module or "", node.level, name, True)
                for a in node.names:
                    full = f"{base}.{a.name}"
                    table[a.asname or a.name] = full if full in modules else base
    return names


def uses(text: str, modules: dict[str, Path],
         exported: dict[str, dict[str, str]]) -> set[tuple[str, str | None]]:
    """The modules whose names ``text`` (Python, or a notebook's code) uses, each with the
    attribute used (None: the module as a whole): dotted paths (``ac.lab.serving.f``,
    ``attncore.kvcache``), names taken from a package (``ac.decode_step``), and names
    imported (``from attncore.lab import opening_figures`` then ``opening_figures.f()``)."""
    used = set()

    def dotted(parts: list[str]) -> None:
        for n in range(len(parts), 0, -1):            # the longest prefix that is a module
            name = ".".join(parts[:n])
            if name in modules:
                attr = parts[n] if n < len(parts) else None
                if attr in exported.get(name, {}):
                    target = exported[name][attr]
                    used.add((target, None) if target in modules and target != name
                             else (name, attr))
                else:
                    used.add((name, attr))
                return

    for tail in re.findall(r"\b(?:attncore|ac)((?:\.\w+)+)", text):
        dotted([PACKAGE] + tail.strip(".").split("."))
    for base, names in re.findall(r"from\s+(attncore[\w.]*)\s+import\s+\(?([\w\s,]+)\)?",
                                  text):
        if base not in modules:
            continue
        for n in re.findall(r"\w+", names):
            if f"{base}.{n}" in modules:               # a module: which of its names?
                attrs = set(re.findall(rf"\b{n}\.(\w+)", text)) or {None}
                used |= {(f"{base}.{n}", a) for a in attrs}
            else:
                dotted(base.split(".") + [n])
    return used


def exercise_labels(modules: dict[str, Path]) -> dict[str, set[str]]:
    """The labels each module of attncore.lab.exercises registers (``@exercise("ex-...")``)."""
    prefix = f"{PACKAGE}.lab.exercises."
    return {name: set(re.findall(r'@exercise\(\s*"([^"]+)"', path.read_text(encoding="utf-8")))
            for name, path in modules.items() if name.startswith(prefix)}


def closure(start: set[str], graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


# --- choosing ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def index() -> tuple[list[Path], list[Path], dict[Path, str], dict[Path, set[str]]]:
    """(test files, notebooks, their code, the package's modules each depends on)."""
    modules = package_modules()
    top, inner = {}, {}
    for name, path in modules.items():
        top[name], inner[name] = imports_of(path, modules)
    # one module using another uses all of it (which of its names, a static reading cannot
    # follow); a package's __init__ imports its modules for its names, which is no use of
    # them (a notebook that uses ac.softmax does not use attncore.kvcache)
    graph = {name: set() if modules[name].name == "__init__.py" else
             (top[name] | set().union(*inner[name].values())) - {name} for name in modules}

    def depends_on(used: set[tuple[str, str | None]]) -> set[str]:
        found = set()
        for module, attr in used:
            if attr in inner[module]:
                entry = top[module] | inner[module][attr]
            elif attr is None:
                entry = graph[module]
            else:
                entry = top[module]
            found |= {module} | closure(entry, graph)
        return found

    exported = exported_names(modules)
    tests = sorted(p for p in (ROOT / "tests").glob("test_*.py"))
    notebooks = sorted((ROOT / "chapters").glob("*.ipynb"))
    texts = {p: p.read_text(encoding="utf-8") for p in tests}
    texts.update({p: notebook_code(p) for p in notebooks})
    depends = {p: depends_on(uses(t, modules, exported)) for p, t in texts.items()}
    # check_exercise("ex-...") finds its checker at run time, by the label the checker's
    # module registers: a notebook that names the label uses that module
    for checker, labels in exercise_labels(modules).items():
        for nb in notebooks:
            if any(f'"{label}"' in texts[nb] for label in labels):
                depends[nb] |= {checker} | closure(graph[checker], graph)

    return tests, notebooks, texts, depends


def choose(changed: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(test files, notebooks, what needs more than this quick run) for the changed paths."""
    tests, notebooks, texts, depends = index()
    chosen_tests, chosen_nbs, more = set(), set(), []
    changed_modules = {module_name(ROOT / c) for c in changed
                       if c.startswith(f"{PACKAGE}/") and c.endswith(".py")}
    for path, deps in depends.items():
        if deps & changed_modules:
            (chosen_nbs if path.suffix == ".ipynb" else chosen_tests).add(path)
    for c in changed:
        path = ROOT / c
        if c.startswith("tests/test_") and c.endswith(".py") and path.exists():
            chosen_tests.add(path)
        elif c.startswith("tests/") and c.endswith(".py") and not WHOLE_SUITE.match(c):
            helper = path.stem
            chosen_tests |= {t for t in tests if re.search(
                rf"^\s*(from|import)\s+{helper}\b", texts[t], re.M)}
        elif c.startswith("chapters/") and c.endswith(".ipynb") and path.exists():
            chosen_nbs.add(path)
        elif c.startswith("scripts/"):
            name = re.escape(Path(c).stem)
            named = re.compile(rf"scripts/{name}\b|\b{name}\.py\b|^\s*import {name}\b|"
                               rf"^\s*from {name} import", re.M)
            chosen_tests |= {t for t in tests if named.search(texts[t])}
        if SITE_SOURCES.match(c):
            more.append(f"{c}: the site's tests (they build the book): ./scripts/test "
                        "tests/test_site.py tests/test_site_browser.py tests/test_site_pdf.py "
                        "tests/test_site_repository.py")
        elif WHOLE_SUITE.match(c):
            more.append(f"{c}: the whole suite, ./scripts/test")
    # slow files that need a built site or a server are never chosen for a module change
    site = {t for t in chosen_tests if t.name.startswith("test_site")}
    if site - {ROOT / c for c in changed}:
        more.append("the site's tests also use a changed module: ./scripts/test "
                    + " ".join(sorted(str(t.relative_to(ROOT)) for t in site)))
    chosen_tests -= site - {ROOT / c for c in changed}
    return ([str(t.relative_to(ROOT)) for t in sorted(chosen_tests)],
            [str(n.relative_to(ROOT)) for n in sorted(chosen_nbs)], more)


def per_notebook_ids(notebooks: list[str]) -> list[str]:
    """The ids of the tests in PER_NOTEBOOK_TESTS that name one of ``notebooks``."""
    if not notebooks:
        return []
    # Collected without tests/conftest.py, whose fixtures these files do not use
    # (tests/test_quick.py checks): the same ids, in 1.6 s of CPU against 5.5-6 s with it,
    # which imports torch.
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--noconftest", "--collect-only", "-q", *PER_NOTEBOOK_TESTS],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"quick: collecting {' '.join(PER_NOTEBOOK_TESTS)} failed:\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    out = done.stdout
    stems = [Path(n).stem for n in notebooks]
    return [line for line in out.splitlines() if "::" in line and any(
        re.search(rf"[\[/_-]{re.escape(s)}(\.ipynb)?[\]\-]", line) for s in stems)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", default="HEAD", help="the git revision to compare with "
                        "(default: HEAD, i.e. what is not committed yet)")
    parser.add_argument("--list", action="store_true", help="say what would run; run nothing")
    args = parser.parse_args(argv)
    changed = changed_files(args.since)
    tests, notebooks, more = choose(changed)
    ids = per_notebook_ids(notebooks)
    ids = [i for i in ids if i.split("::")[0] not in tests]
    print(f"changed since {args.since}: {len(changed)} file(s)")
    for what, items in (("test files", tests), ("notebooks under nbval", notebooks),
                        ("their structure, exercise and spoiler tests", ids)):
        if items:
            shown = items if what != "their structure, exercise and spoiler tests" else \
                [f"{len(items)} tests"]
            print(f"  {what}: " + ", ".join(shown))
    for line in more:
        print(f"  not run here: {line}")
    if args.list or not (tests or notebooks or ids):
        if not (tests or notebooks or ids):
            print("nothing to run")
        return 0
    workers = max(1, min(2, os.cpu_count() or 1))
    command = [sys.executable, "-m", "pytest", "-p", "xdist", "-p", "nbval.plugin",
               "-p", "_hypothesis_pytestplugin", "-n", str(workers), "--dist", "loadfile",
               "-p", "no:cacheprovider", "-q"]
    if notebooks:
        command += ["--nbval", "--nbval-sanitize-with", "nbval_sanitize.cfg",
                    "--nbval-cell-timeout", "300"]
    command += [*tests, *notebooks, *ids, *extra]
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
