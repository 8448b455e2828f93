"""attncore's ``glue`` stores exactly what myst-nb's stores, and the check of the prose's numbers
(scripts/prose_numbers.py) reads what it stores."""

from __future__ import annotations

import subprocess
import sys

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from attncore.lab import glue as glue_module

VALUES = [("a-ratio", "1.05", False), ("a-count", "12", True), ("a-float", 0.25, False),
          ("a-list", [1, 2, 3], True)]


def outputs(glue) -> list:
    InteractiveShell.instance()              # display() publishes through a shell
    with capture_output() as captured:
        for name, value, display in VALUES:
            glue(name, value, display=display)
    return [(o.data, o.metadata) for o in captured.outputs]


def test_stores_what_myst_nb_glue_stores():
    from myst_nb.ext.glue import GLUE_PREFIX, glue as myst_glue

    assert glue_module.HIDDEN_PREFIX == GLUE_PREFIX
    ours, theirs = outputs(glue_module.glue), outputs(myst_glue)
    assert len(ours) == len(VALUES)
    assert ours == theirs
    hidden = ours[0][0]
    assert set(hidden) == {GLUE_PREFIX + "text/plain"}, hidden
    assert ours[0][1]["scrapbook"] == {"name": "a-ratio", "mime_prefix": GLUE_PREFIX}


def test_gluing_does_not_import_nbformat():
    # Why this module exists: myst-nb's glue module imports nbformat (and its schema
    # validator), about 2 s in every kernel.
    code = ("import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance()\nfrom attncore.lab.glue import glue\n"
            "glue('x', '1.0', display=False)\n"
            "print(sorted(m for m in ('nbformat', 'jsonschema', 'myst_nb') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_the_prose_check_reads_what_glue_stores():
    # scripts/prose_numbers.py compares the numbers written in the prose with the stored
    # glue outputs: a glued string reads as the string itself (no quotes, as the book showed
    # it), anything else as its text/plain representation.
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "prose_numbers.py"
    spec = importlib.util.spec_from_file_location("prose_numbers", path)
    prose_numbers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prose_numbers)

    cell_outputs = [{"output_type": "display_data", "data": data, "metadata": metadata}
                    for data, metadata in outputs(glue_module.glue)]
    stored = prose_numbers.glue_outputs({"cells": [{"cell_type": "code",
                                                    "outputs": cell_outputs}]})
    assert stored == {"a-ratio": "1.05", "a-count": "12", "a-float": "0.25",
                      "a-list": "[1, 2, 3]"}
