"""Grade learners' copies of the chapters: which exercises pass their self-checks.

Usage::

    python -m attncore.grade NOTEBOOK [NOTEBOOK ...] [--json FILE] [--timeout S]

Each notebook (a learner's copy of a chapter, or of a going-further page) is run from top to
bottom in a fresh Python kernel (nbclient), in its own folder, each cell under a time limit
(``--timeout``, 120 s by default; a cell that runs longer is interrupted and the run goes
on). The file itself is only read, never written. Then every exercise of the notebook (every
``{exercise}`` box with a ``<!-- label: ex-... -->`` comment) gets one of four results:

``passed``
    its check cell printed "Correct.";
``failed``
    its check cell printed "Not yet: ..." (the property or hint the check gave is shown), or
    the cell raised an error (its type and message are shown), or did not finish;
``not answered``
    its answer is still ``None``, or its check cell is missing from the notebook;
``needs a person``
    the exercise has no self-check (a proof or an explanation): a teacher reads the answer.

The results are printed, one line per exercise; ``--json FILE`` writes the same as data::

    {"notebooks": [{"notebook": "01_what_attention_computes.ipynb",
                    "exercises": [{"label": "ex-...", "status": "passed",
                                   "message": "", "details": []}, ...],
                    "summary": {"passed": 1, "failed": 0, ...},
                    "errors": [{"cell": 12, "error": "raised NameError: ..."}]}]}

``errors`` lists every cell that raised or ran past its time limit, numbered from 0 as in
the notebook's JSON ("raised NameError: ...", "ran past the time limit ..."). The
notebooks are checked before any is run: one that does not exist, is not a notebook (JSON) or
has no exercises stops the grader with a message naming it (exit status 2), and nothing is
run. The exit status is 0 once every notebook is graded, whatever its results.

The check cells' verdicts are read from inside the kernel: ``check_exercise`` remembers the
latest verdict of each exercise, and the grader runs one more cell of its own, at the end of
its in-memory copy, that prints them as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["GradeError", "STATUSES", "exercises_of", "grade_notebook", "main", "report"]

STATUSES = ("passed", "failed", "not answered", "needs a person")
DEFAULT_TIMEOUT_S = 120

_LABEL = re.compile(r"<!--\s*label:\s*(ex-[\w-]+)\s*-->")
_EXERCISE = re.compile(r"^:{3,}\{exercise\}", re.M)
_CHECK = re.compile(r"""check_exercise\(\s*["'](ex-[\w-]+)["']""")
_MARK = "attncore-grade-results:"
# The grader's own last cell: the verdicts that check_exercise remembered, and which
# exercises have a checker at all, as one line of JSON.
_READ_RESULTS = f"""\
import json as _grade_json
from attncore.lab.exercises import checked_exercises as _grade_checked
from attncore.lab.exercises import registered_exercises as _grade_registered
print({_MARK!r} + _grade_json.dumps({{
    "checked": {{k: [v.status, v.message, list(v.details)]
                for k, v in _grade_checked().items()}},
    "registered": _grade_registered()}}))
"""


class GradeError(ValueError):
    """A notebook that cannot be graded: missing, not a notebook, or without exercises."""


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _read(path: Path) -> dict:
    """The notebook at ``path`` as a dict (nbformat 4), or a GradeError naming it."""
    if not path.exists():
        raise GradeError(f"{path}: no such file")
    if not path.is_file():
        raise GradeError(f"{path}: not a file (expected a notebook, .ipynb)")
    try:
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GradeError(f"{path}: not a notebook: it is not JSON ({err})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise GradeError(f"{path}: not a notebook: its JSON has no list of cells")
    return nb


def exercises_of(nb: dict) -> tuple[list[str], dict[str, int]]:
    """The exercise labels of the notebook ``nb`` in order, and label -> index of the code
    cell that checks it (``check_exercise("<label>", ...)``), for those that have one."""
    labels: list[str] = []
    checks: dict[str, int] = {}
    for i, cell in enumerate(nb["cells"]):
        src = _source(cell)
        if cell.get("cell_type") == "markdown":
            for block in _EXERCISE.split(src)[1:]:
                m = _LABEL.search(block)
                if m and m.group(1) not in labels:
                    labels.append(m.group(1))
        elif cell.get("cell_type") == "code":
            for label in _CHECK.findall(src):
                checks.setdefault(label, i)
    return labels, checks


def _error_text(output: dict) -> str:
    value = str(output.get("evalue", "")).strip()
    return f"{output.get('ename', 'Error')}: {value}" if value else output.get("ename", "Error")


def _cell_errors(cell: dict, timeout: float) -> list[str]:
    # A cell interrupted at its time limit shows a KeyboardInterrupt: say what happened.
    return [f"ran past the time limit of {timeout:g} s and was interrupted"
            if o.get("ename") == "KeyboardInterrupt" else f"raised {_error_text(o)}"
            for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def grade_notebook(path: str | Path, *, timeout: float = DEFAULT_TIMEOUT_S,
                   kernel_name: str = "python3") -> dict[str, Any]:
    """Run the notebook at ``path`` in a fresh kernel and grade its exercises.

    Parameters
    ----------
    path : str or Path
        A learner's copy of a chapter (``.ipynb``). It is read, never written.
    timeout : float
        Seconds each cell may run before it is interrupted (the run goes on).
    kernel_name : str
        The Jupyter kernel to run it in.

    Returns
    -------
    dict
        ``{"notebook": str, "exercises": [{"label", "status", "message", "details"}, ...],
        "summary": {status: count}, "errors": [{"cell": int, "error": str}, ...]}``, the
        statuses being those of ``STATUSES``.

    Raises
    ------
    GradeError
        If ``path`` does not exist, is not a notebook (JSON with cells), or has no exercises.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    path = Path(path)
    labels, checks = exercises_of(_read(path))
    if not labels:
        raise GradeError(f"{path}: no exercises (no {{exercise}} box with a "
                         "<!-- label: ex-... --> comment): nothing to grade")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise GradeError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    n_cells = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(_READ_RESULTS))
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name, allow_errors=True,
                            interrupt_on_timeout=True, record_timing=False,
                            resources={"metadata": {"path": str(path.resolve().parent)}})
    died = ""
    try:
        client.execute()
    except DeadKernelError as err:
        died = f"the kernel died ({err})".strip()

    found: dict[str, Any] = {}
    for out in nb.cells[-1].get("outputs", []):
        for line in str(out.get("text", "")).splitlines():
            if line.startswith(_MARK):
                found = json.loads(line[len(_MARK):])
    checked = found.get("checked", {})
    registered = set(found.get("registered", []))

    results = []
    for label in labels:
        message, details = "", []
        if label not in checks:
            if label in registered:
                status, message = "not answered", "its check cell is missing from the notebook"
            else:
                status = "needs a person"
        else:
            cell = nb.cells[checks[label]]
            errors = _cell_errors(cell, timeout)
            if errors:
                status, message = "failed", f"the check cell {errors[-1]}"
            elif label in checked:
                status, message, details = checked[label]
            else:
                status = "failed"
                message = died or "the check cell did not run to its end"
        results.append({"label": label, "status": status, "message": message,
                        "details": list(details)})
    errors = [{"cell": i, "error": e} for i, cell in enumerate(nb.cells[:n_cells])
              for e in _cell_errors(cell, timeout)]
    if died:
        errors.append({"cell": None, "error": f"stopped: {died}"})
    summary = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    return {"notebook": str(path), "exercises": results, "summary": summary,
            "errors": errors}


def report(graded: dict[str, Any]) -> str:
    """The text the grader prints for one graded notebook."""
    counts = ", ".join(f"{n} {s}" for s, n in graded["summary"].items())
    lines = [f"{graded['notebook']}: {counts}"]
    width = max(len(r["label"]) for r in graded["exercises"])
    for r in graded["exercises"]:
        text = r["status"] + (f": {r['message']}" if r["message"] else "")
        if r["status"] == "needs a person":
            text += " (no self-check: a proof or an explanation)"
        lines.append(f"  {r['label']:<{width}}  {text}")
        lines += [f"  {'':<{width}}    {d}" for d in r["details"]]
    for e in graded["errors"]:
        where = "the run" if e["cell"] is None else f"cell {e['cell']}"
        lines.append(f"  {where} {e['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attncore.grade",
        description="Run learners' copies of the course's chapters in a fresh kernel and "
                    "say, for every exercise, passed, failed (and why), not answered, or "
                    "needs a person. The notebooks are never modified.")
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", type=Path)
    parser.add_argument("--json", metavar="FILE", type=Path,
                        help="also write the results to FILE as JSON")
    parser.add_argument("--timeout", metavar="S", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds each cell may run (default {DEFAULT_TIMEOUT_S})")
    args = parser.parse_args(argv)
    try:
        if args.timeout <= 0:
            raise GradeError(f"--timeout: expected a positive number of seconds, "
                             f"got {args.timeout:g}")
        for path in args.notebooks:           # every notebook checked before any is run
            if not exercises_of(_read(path))[0]:
                raise GradeError(f"{path}: no exercises (no {{exercise}} box with a "
                                 "<!-- label: ex-... --> comment): nothing to grade")
        graded = []
        for path in args.notebooks:
            graded.append(grade_notebook(path, timeout=args.timeout))
            print(report(graded[-1]), flush=True)
    except GradeError as err:
        print(f"grade: {err}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps({"notebooks": graded}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
