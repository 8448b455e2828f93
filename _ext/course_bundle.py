"""The course bundle: every chapter, attncore as a wheel, and how to install, in one zip.

The site publishes it at ``course/attention-course.zip`` (``BUNDLE_PATH``), built after the
HTML pages, and every page with a download menu (every chapter) gets a link to it there; the
front page links it in its text. Unzipped, it is one folder::

    attention-course/
        README.txt            how to install (two commands, the same as in a clone), and open
        AGENTS.md             for AI coding assistants: tutor the exercises, do not solve them
        LICENSE               the course's licences: CC BY 4.0 (text, figures, notebooks), MIT
                              (code), and the models' and data's own
        install.py            the repository's installer (its README's two commands)
        requirements.txt      torch, Triton (Linux only), JupyterLab, attncore's wheel with
                              every extra the chapters use, with the repository's pins
        requirements-no-deps.txt   the real models' packages (installed with --no-deps)
        attncore-*.whl        built from this checkout
        _course_setup.py      what each chapter's set-up cell calls (chapters/_course_setup.py)
        00_how_to_use.ipynb ...   the chapter notebooks as stored, with their outputs
        appendix/proofs.ipynb, performance.ipynb   the pages the chapters link to

The chapters' links to the book's pages point at the pages' notebooks in the bundle
(``bundle_pages``), so no link in it is dead. A chapter opened there whose Python lacks
attncore installs it from the wheel beside it (its set-up cell calls
``_course_setup.set_up``). ``python _ext/course_bundle.py OUT.zip`` builds the bundle alone
(the tests do).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bundle_pages  # noqa: E402

BUNDLE_PATH = "course/attention-course.zip"     # under the site's root: a stable address
FOLDER = "attention-course"                      # the one folder inside the zip
HELPER = "_course_setup.py"
INSTALLER = "install.py"
NO_DEPS = "requirements-no-deps.txt"
AGENTS = "AGENTS.md"
LICENSE = "LICENSE"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# What the bundle's requirements.txt takes from the course's own requirements.txt, with its
# pins, besides what attncore's extras name: torch, and JupyterLab with what renders the
# chapters' MyST markdown in it.
FROM_REQUIREMENTS = ("torch", "jupyterlab", "jupyterlab-myst")
# A fixed date for the zip's entries, so that the same checkout gives the same zip.
DATE = (2026, 1, 1, 0, 0, 0)
# The size of the environment install.py makes from the bundle (measured on Linux with the
# CPU build of torch, Python 3.11: du -sm of the virtual environment, 2,340 MB, Triton
# 691 MB of it), for the README.
ENVIRONMENT_SIZE = "about 2.3 GB on Linux, 0.7 GB of it Triton, which only Linux gets"


def _readme(first: str) -> str:
    return f"""\
Attention, from the proof up: every chapter as a notebook, and attncore, the course's package.
It runs on Linux, macOS 14 or newer on Apple silicon, and Windows, with Python 3.11 to 3.14.

Install, in this folder (two commands; the second takes a few minutes and installs
{ENVIRONMENT_SIZE}):

    python3 -m venv .venv
    .venv/bin/python install.py

On Windows: py -m venv .venv, then .venv\\Scripts\\python install.py. install.py installs torch's
CPU build on Linux and Windows; on Linux with an NVIDIA GPU, run install.py --gpu instead.

Then open the chapters: .venv/bin/jupyter lab (Windows: .venv\\Scripts\\jupyter lab), and
start with {first}.

{AGENTS} asks AI coding assistants (Copilot, Claude Code, Cursor, ...) that read this folder
to tutor you through the exercises with hints and questions rather than solve them for you.

Licence ({LICENSE} has the full texts): the text, figures and notebooks are under Creative
Commons Attribution 4.0 (CC BY 4.0), the code (attncore, install.py) under the MIT licence;
the pretrained models (SmolLM2, all-MiniLM-L6-v2: Apache-2.0) and Python's help text (PSF
License Agreement) keep their own licences.
"""


def _requirement_name(line: str) -> str:
    return re.split(r"[<>=!~ ;\[#]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _extras(root: Path) -> dict[str, list[str]]:
    """attncore's optional dependencies (pyproject.toml): extra -> requirements."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]


def _requirements(root: Path, wheel: str, extras: str) -> str:
    """The bundle's requirements.txt: the repository's pins of torch, JupyterLab and of every
    distribution that attncore's ``extras`` name, then attncore's wheel with those extras."""
    names = list(FROM_REQUIREMENTS)
    pending = extras.split(",")
    optional = _extras(root)
    while pending:
        for req in optional[pending.pop(0)]:
            name = _requirement_name(req)
            if name == "attncore":
                pending += re.search(r"\[(.*?)\]", req).group(1).split(",")
            elif name not in names:
                names.append(name)
    pins = {}
    for line in (root / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            pins.setdefault(_requirement_name(line), line.strip())
    lines = ["# What the chapters need. Install with install.py (see README.txt), which also",
             f"# installs {NO_DEPS} with --no-deps, and torch first: its CPU build",
             f"# on Linux and Windows, from {TORCH_CPU_INDEX}",
             *(pins[name] for name in names if name in pins),
             "# attncore, the course's package, with what the chapters import",
             f"./{wheel}[{extras}]"]
    return "\n".join(lines) + "\n"


def _helper(root: Path):
    """chapters/_course_setup.py of ``root``, loaded as a module."""
    spec = importlib.util.spec_from_file_location("_course_setup_of_bundle",
                                                  root / "chapters" / HELPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_wheel(root: Path, dest: Path) -> Path:
    """attncore's wheel built from ``root`` (a copy of its package and pyproject.toml, so that
    the checkout gets no build/ folder), written into ``dest``; offline, no build isolation."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        shutil.copy2(root / "pyproject.toml", src / "pyproject.toml")
        shutil.copy2(root / LICENSE, src / LICENSE)         # pyproject's license-files
        shutil.copytree(root / "attncore", src / "attncore",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
                   SOURCE_DATE_EPOCH="1767225600")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
             "--no-build-isolation", "--wheel-dir", str(dest), str(src)],
            env=env, cwd=tmp, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"building attncore's wheel failed:\n{proc.stdout[-3000:]}")
    wheels = sorted(dest.glob("attncore-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one attncore wheel in {dest}, found {wheels}")
    return wheels[0]


def build_bundle(root: Path, out: Path, *, chapters: list[Path] | None = None,
                 note: str = "") -> Path:
    """Write the course bundle of the checkout at ``root`` to ``out`` (a .zip); returns it.

    ``chapters`` are the notebooks to ship (by default ``root/chapters/*.ipynb``; the student
    edition, scripts/student-edition, passes copies without the solutions), and ``note`` a
    paragraph added to README.txt and AGENTS.md."""
    chapters = sorted(chapters if chapters is not None else (root / "chapters").glob("*.ipynb"))
    if not chapters:
        raise RuntimeError(f"no chapter notebooks under {root / 'chapters'}")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(root, Path(tmp))
        # Every chapter runs in the bundle: all of attncore's extras that set-up cells name
        # (MiniLM needs `pretrained`, the real LLM `llm`, the kernels `triton`).
        extras = ",".join(_helper(root).MODULES)
        pages = bundle_pages.linked_pages(root, chapters)
        files = {
            "README.txt": (_readme(chapters[0].name) + (f"\n{note}\n" if note else "")).encode(),
            AGENTS: (Path(__file__).resolve().parent / "bundle_agents.md").read_bytes()
            + (f"\n{note}\n".encode() if note else b""),
            LICENSE: (root / LICENSE).read_bytes(),
            INSTALLER: (root / INSTALLER).read_bytes(),
            "requirements.txt": _requirements(root, wheel.name, extras).encode(),
            NO_DEPS: (root / NO_DEPS).read_bytes(),
            wheel.name: wheel.read_bytes(),
            HELPER: (root / "chapters" / HELPER).read_bytes(),
            **{nb.name: bundle_pages.chapter_for_bundle(nb) for nb in chapters},
            **{bundle_pages.bundle_path(page): bundle_pages.dump(
                bundle_pages.page_notebook(root, page)).encode() for page in pages},
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in files.items():
                info = zipfile.ZipInfo(f"{FOLDER}/{name}", DATE)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        partial.replace(out)
    return out


# --- the Sphinx side ----------------------------------------------------------------------------

def _link_in_download_menu(app, pagename, templatename, context, doctree) -> None:
    """Add the bundle to the theme's download menu (the page's .ipynb is already there)."""
    for button in context.get("header_buttons", []):
        if button.get("label") == "download-buttons":
            button["buttons"].insert(0, {
                "type": "link", "url": context["pathto"](BUNDLE_PATH, 1),
                "text": "course (.zip)", "icon": "fas fa-file-archive",
                "tooltip": "Download every chapter with the course's package",
                "label": "download-course-bundle-button"})


def _write_bundle(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        build_bundle(Path(app.srcdir), Path(app.outdir) / BUNDLE_PATH)


def setup(app) -> dict:
    # After sphinx-book-theme has made its buttons (priority 501).
    app.connect("html-page-context", _link_in_download_menu, priority=600)
    app.connect("build-finished", _write_bundle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python _ext/course_bundle.py OUT.zip")
    print(build_bundle(Path(__file__).resolve().parent.parent, Path(sys.argv[1])))
