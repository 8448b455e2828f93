"""The course bundle: every chapter, attncore as a wheel, and what to install, in one zip.

The site publishes it at ``course/attention-course.zip`` (``BUNDLE_PATH``), built after the
HTML pages, and every page with a download menu (every chapter) gets a link to it there; the
front page links it in its text. Unzipped, it is one folder::

    attention-course/
        README.txt            three lines: install, then open the chapters
        requirements.txt      torch, attncore's wheel with what the chapters import, JupyterLab
        attncore-*.whl        built from this checkout
        _course_setup.py      what each chapter's set-up cell calls (chapters/_course_setup.py)
        00_how_to_use.ipynb ...   the chapter notebooks as stored, with their outputs

A chapter opened there whose Python lacks attncore installs it from the wheel beside it (its
set-up cell calls ``_course_setup.set_up``). ``python _ext/course_bundle.py OUT.zip`` builds
the bundle alone (the tests do).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

BUNDLE_PATH = "course/attention-course.zip"     # under the site's root: a stable address
FOLDER = "attention-course"                      # the one folder inside the zip
HELPER = "_course_setup.py"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# What the bundle's requirements.txt takes from the course's own requirements.txt, with its
# pins: torch, and JupyterLab with what renders the chapters' MyST markdown in it.
FROM_REQUIREMENTS = ("torch", "jupyterlab", "jupyterlab-myst")
# A fixed date for the zip's entries, so that the same checkout gives the same zip.
DATE = (2026, 1, 1, 0, 0, 0)


def _readme(first: str) -> str:
    return (
        "Attention, from the proof up: every chapter as a notebook, and attncore, the "
        "course's package.\n"
        "In this folder, in a fresh virtual environment: pip install -r requirements.txt "
        f"(for torch's CPU build, first: pip install torch --index-url {TORCH_CPU_INDEX}).\n"
        f"Then run jupyter lab here and open {first}.\n")


def _requirements(root: Path, wheel: str, extras: str) -> str:
    pins = {}
    for line in (root / "requirements.txt").read_text().splitlines():
        name = re.split(r"[<>=!~ ;\[#]", line.strip(), maxsplit=1)[0].lower()
        if name in FROM_REQUIREMENTS:
            pins[name] = line.strip()
    lines = ["# What the chapters need: run  pip install -r requirements.txt  in this folder.",
             "# PyPI's torch for Linux carries CUDA libraries (gigabytes); for the CPU build",
             f"# run first:  pip install torch --index-url {TORCH_CPU_INDEX}",
             *(pins[name] for name in FROM_REQUIREMENTS if name in pins),
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


def build_bundle(root: Path, out: Path) -> Path:
    """Write the course bundle of the checkout at ``root`` to ``out`` (a .zip); returns it."""
    chapters = sorted((root / "chapters").glob("*.ipynb"))
    if not chapters:
        raise RuntimeError(f"no chapter notebooks under {root / 'chapters'}")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(root, Path(tmp))
        # Every chapter runs in the bundle: all of attncore's extras that set-up cells name
        # (chapter 10's real model needs `pretrained`).
        extras = ",".join(_helper(root).MODULES)
        files = {
            "README.txt": _readme(chapters[0].name).encode(),
            "requirements.txt": _requirements(root, wheel.name, extras).encode(),
            wheel.name: wheel.read_bytes(),
            HELPER: (root / "chapters" / HELPER).read_bytes(),
            **{nb.name: nb.read_bytes() for nb in chapters},
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
