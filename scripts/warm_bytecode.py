"""Compile the modules that a test run imports, early, on a core that would otherwise wait.

Python compiles a module the first time a process imports it and keeps the result in
``.venv/pycache`` (scripts/_setup.sh sets PYTHONPYCACHEPREFIX); every later process reads
it. After a fresh set-up that cache is empty, and a run of ``scripts/test`` compiles about
140 MB of bytecode for the packages it imports. Some of it twice: the site's two builds start
together on the two workers and both compile Sphinx, the two JupyterLab servers start
together and both compile jupyter_server. Meanwhile, for the first seconds of the run, one
core waits: pytest's controller imports tests/conftest.py (torch) alone before it starts the
workers.

scripts/test starts this script in the background, at the lowest priority, when the cache
is new (its stamp, below, is not the set-up's). It imports the packages of GROUPS, each
group in a process of its own that then exits, in the order in which the run needs them,
so that the compiling is done on the waiting core and done once. At the lowest priority it
takes the time that no other process of the run wants. It stops when the process that
started it is gone (pytest, which scripts/test becomes; on Linux and macOS, where such a
process gets a new parent), and writes its stamp after the
last group. What it imports and does not need costs time only: nothing is tested here.

Usage: warm_bytecode.py STAMP_FILE STAMP
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

# Each group is imported in a process of its own. The packages the controller imports
# (torch, numpy, matplotlib's core, hypothesis, pytest) are left to it; the models' group,
# which imports torch too, comes last, when the controller has compiled torch.
GROUPS = (
    # the site's build and the build with a repository (tests/built_site.py,
    # tests/test_site_repository.py), which the two workers start together
    ("jupyter_book.cli.main", "sphinx.application", "sphinx.builders.html",
     "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon", "myst_nb",
     "sphinx_book_theme", "sphinx_design", "sphinx_togglebutton", "sphinx_copybutton",
     "sphinx_external_toc", "sphinxcontrib.bibtex", "sphinx_proof", "sphinx_exercise",
     "jupyter_cache.cache.main"),
    # the notebooks' kernels and the figures
    ("matplotlib.pyplot", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger"),
    # attncore's wheel, built with pip for the course's bundle (_ext/course_bundle.py)
    ("setuptools.build_meta", "pip._internal.cli.main", "pip._internal.commands.wheel",
     "pip._internal.commands.install"),
    # JupyterLab's two servers and nbconvert (tests/test_jupyterlab.py)
    ("jupyterlab.labapp", "jupyter_server.serverapp", "nbconvert", "nbclient"),
    # the PDF, the printable pages and the interactive figures
    ("bs4", "soupsieve", "pypdfium2", "vl_convert", "gguf"),
    # the reference models (tests/test_pretrained.py, tests/test_smollm2.py and others)
    ("transformers.models.llama.modeling_llama", "transformers.models.bert.modeling_bert",
     "sentence_transformers"),
)

# How often the script looks whether the process that started it is still there.
POLL_S = 0.5


def _import(group: tuple[str, ...]) -> list[str]:
    """The command that imports ``group`` (a module that fails to import is passed over)."""
    code = ("import importlib\n"
            f"for name in {list(group)!r}:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except Exception:\n"
            "        pass\n")
    return [sys.executable, "-c", code]


def warm(stamp_file: str, stamp: str) -> bool:
    """Import GROUPS, one process each; write ``stamp`` to ``stamp_file`` after the last.
    Returns False, with the group's process killed, as soon as the parent process is gone."""
    parent = os.getppid()
    if hasattr(os, "nice"):
        os.nice(19)                      # the children inherit it
    for group in GROUPS:
        proc = subprocess.Popen(_import(group), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            if os.getppid() != parent:
                proc.kill()
                proc.wait()
                return False
            time.sleep(POLL_S)
    with open(stamp_file, "w") as f:
        f.write(stamp + "\n")
    return True


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.rsplit("Usage: ", 1)[1].strip())
    raise SystemExit(0 if warm(sys.argv[1], sys.argv[2]) else 1)
