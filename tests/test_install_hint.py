"""install.py on a Python the course does not run on (Ubuntu 22.04's python3 is 3.10) stops,
and says what to run instead: a supported Python it found, or how to get one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import install  # noqa: E402


def test_a_supported_python_on_path_is_named_with_the_commands():
    hint = install.other_python_hint("Linux", ["python3.13", "python3.11"])
    assert "python3.13, found on PATH" in hint
    assert "rm -rf .venv\n    python3.13 -m venv .venv\n    .venv/bin/python install.py" in hint
    win = install.other_python_hint("Windows", ["python3.12"])
    assert "py -3.12 -m venv .venv" in win and ".venv\\Scripts\\python install.py" in win


@pytest.mark.parametrize("system, words", [("Linux", "sudo apt install python3.11"),
                                           ("Darwin", "brew install python@3.12"),
                                           ("Windows", "winget install Python.Python.3.12")])
def test_without_one_it_says_how_to_get_one(system, words):
    hint = install.other_python_hint(system, [])
    assert words in hint and "-m venv .venv" in hint


def test_an_unsupported_python_stops_with_the_hint(tmp_path):
    # The version check runs before anything is installed; run it with the version patched.
    code = ("import sys, install; install.PYTHONS = ((3, 99), (3, 100)); "
            "install.main([])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "The course runs on Python 3.99 to 3.100" in done.stderr
    assert "-m venv .venv" in done.stderr
