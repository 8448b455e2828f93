"""What a chapter computes does not depend on the Python that runs it.

The course declares Python 3.11 to 3.14 (pyproject.toml). Chapter 12 once trained and
sampled its model on ``pydoc_data.topics``, the help text that ships with the interpreter and
differs from version to version (a different length on each, a 104th character on 3.12): on
any Python but 3.11 its stored outputs changed and the shipped model read the wrong
characters. Three checks keep such data out:

- no module of attncore and no code cell of a chapter reads what the interpreter's version,
  or the process, decides: the standard library's data that changes between versions
  (``pydoc_data``, ``keyword``, ``unicodedata``, ``token``/``tokenize``), the standard
  library's ``random`` (its algorithms have changed between versions: NumPy's seeded
  generators, pinned by NumPy's version, are the course's), string hashes (``hash``, salted
  per process), and branches on the interpreter's version;
- chapter 12's corpus is the text attncore ships, the same bytes everywhere, and it is read
  without ``pydoc_data``;
- the corpus and its vocabulary come out the same under two different string-hash seeds.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Module -> why what it gives differs between Python versions (or processes).
VERSION_DEPENDENT = {
    "pydoc_data": "the help text generated from each version's documentation",
    "keyword": "the keyword lists change between versions",
    "unicodedata": "each Python ships its own version of the Unicode database",
    "token": "token numbers change between versions",
    "tokenize": "the tokenizer's output changes between versions",
    "random": "the standard library's random algorithms have changed between versions; "
              "use NumPy's seeded generators",
}
# The shipped corpus: Python 3.11.7's help topics (attncore/lab/python311_help_topics.txt.gz).
CORPUS_CHARACTERS, CORPUS_VOCABULARY = 464_970, 103
CORPUS_SHA256 = "37d06970fc926e60c16dff401e441b84752446a36b6b64516c229fdec77e992c"


def _problems(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in VERSION_DEPENDENT:
                found.append(f"{where}:{node.lineno} imports {name}: {VERSION_DEPENDENT[top]}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "hash":
            found.append(f"{where}:{node.lineno} calls hash(): string hashes are salted "
                         "per process")
        if isinstance(node, ast.Attribute) and node.attr in ("version_info", "version") \
                and isinstance(node.value, ast.Name) and node.value.id == "sys":
            found.append(f"{where}:{node.lineno} reads sys.{node.attr}: a chapter computes "
                         "the same on every Python")
    return found


def _chapter_code(path: Path) -> str:
    """A chapter's code cells (IPython's magics and shell lines left out), as one module."""
    cells = json.loads(path.read_text())["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code":
            lines += [line for line in "".join(cell["source"]).splitlines()
                      if not line.lstrip().startswith(("%", "!"))] + [""]
    return "\n".join(lines)


def test_no_chapter_or_module_reads_what_the_interpreter_decides():
    problems = []
    for path in sorted((ROOT / "attncore").rglob("*.py")):
        problems += _problems(path.read_text(), str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        problems += _problems(_chapter_code(path), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_the_check_catches_what_it_should():
    # what chapter 12's corpus once was, and the other ways in
    caught = _problems("from pydoc_data.topics import topics\nimport random\n"
                       "import unicodedata as u\nx = hash('a')\n"
                       "if sys.version_info >= (3, 12): pass\n", "example")
    assert len(caught) == 5, caught
    assert not _problems("import numpy as np\nrng = np.random.default_rng(0)\n"
                         "chars = sorted(set('text'))\n", "example")


def test_the_corpus_is_the_shipped_text_without_pydoc_data():
    # In a process where pydoc_data cannot be imported, the corpus is still the 3.11 text.
    code = ("import sys; sys.modules['pydoc_data'] = None\n"
            "import hashlib\n"
            "from attncore.lab.language import corpus_text, CharTokenizer\n"
            "text = corpus_text()\n"
            "print(len(text), CharTokenizer(text).vocab_size,"
            " hashlib.sha256(text.encode()).hexdigest())\n")
    outputs = set()
    for seed in ("1", "2"):                 # two string-hash seeds: the same text, the same ids
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout.strip())
    assert outputs == {f"{CORPUS_CHARACTERS} {CORPUS_VOCABULARY} {CORPUS_SHA256}"}, outputs


def test_the_corpus_ships_with_its_licence():
    lab = ROOT / "attncore" / "lab"
    licence = (lab / "python311_help_topics.LICENSE.txt").read_text()
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence and "Python Software Foundation" in licence
    data = (ROOT / "pyproject.toml").read_text()
    assert '"*.txt.gz"' in data and '"*.LICENSE.txt"' in data       # in the wheel too


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("*.ipynb")),
                         ids=lambda p: p.name)
def test_no_stored_output_names_the_interpreters_version(path):
    # A printed Python version would differ on every other Python.
    version = ".".join(map(str, sys.version_info[:3]))
    for cell in json.loads(path.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) + json.dumps(out.get("data", {}).get(
                "text/plain", ""))
            assert f"Python {version}" not in text, path.name
