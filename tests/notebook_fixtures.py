"""Small notebooks that follow the course's notebook conventions, or break them on purpose.

The tests that read chapters the way a reader does (tests/test_jupyterlab.py,
tests/test_spoilers.py) run on these too, so that each of their checks is seen to pass on a
notebook written by the conventions and to fail on one that breaks them: a check that cannot
fail proves nothing. They are built here, in Python, and written to a temporary folder when a
test needs them (a ``.ipynb`` under tests/ would be collected and run by nbval).

The conventions (CONTRIBUTING.md, scripts/portable_markdown.py): directives use colon fences
and carry no option lines (an admonition is named by its class, ``:::{tip} Title``); a label is
an HTML comment, ``<!-- label: NAME -->``; a reference is a Markdown link with words; a
solution is a ``{dropdown} Solution`` whose body opens with a ``<details>`` HTML block closed
after the dropdown, so that it is collapsed with MyST and without it; a number from the run is
written in the prose and the markdown cell's metadata ``attncore.numbers`` maps its glue label
to it; no roles at all (a frontend without MyST shows them as text).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

# Texts that only the solutions hold, so a test can tell whether a solution is readable.
SOLUTION_TEXTS = ("The sum is fourteen hundred and eight", "Square both sides of the bound")

# The numbers the good notebook's prose takes from its run (glue label -> text).
NUMBERS = {"fixture-loss": "1.84", "fixture-ratio": "0.731"}


def _solution(label: str, body: str) -> str:
    return (":::{dropdown} Solution\n"
            f"<details><summary></summary><!-- solution: {label} -->\n\n{body}\n:::\n\n"
            "</details>")


def conventions_notebook() -> nbformat.NotebookNode:
    """A short chapter written by the conventions: everything a reader sees renders."""
    cells = [
        new_markdown_cell("# A fixture chapter\n\n"
                          ":::{tip} Learning goals\n"
                          "- Read a theorem.\n- Do an exercise.\n:::"),
        new_markdown_cell("<!-- label: sec-fixture-theorem -->\n## A theorem\n\n"
                          ":::{prf:theorem} A bound\n<!-- label: thm-fixture-bound -->\n\n"
                          "For every real $x$, $x^2 \\geq 0$.\n:::\n\n"
                          ":::{prf:proof}\nA square of a real number is not negative.\n:::\n\n"
                          'By [Theorem "A bound"](#thm-fixture-bound) the loss cannot be '
                          "negative; the run below ends at a loss of 1.84, and 0.731 of the "
                          "weight is on one key. [Chapter 1](01_what_attention_computes.ipynb) "
                          "has more."),
        new_code_cell('glue("fixture-loss", "1.84", display=False)\n'
                      'glue("fixture-ratio", "0.731", display=False)',
                      metadata={"tags": ["remove-cell"], "jupyter": {"source_hidden": True}}),
        new_markdown_cell(":::{exercise}\n<!-- label: ex-fixture-sum -->\n\n"
                          "What is $1000 + 408$? [The section above]"
                          "(#sec-fixture-theorem) has no help.\n:::"),
        new_code_cell("# Your answer: replace None, then run this cell.\nmy_sum = None"),
        new_markdown_cell(_solution("ex-fixture-sum", SOLUTION_TEXTS[0] + ".")),
        new_markdown_cell(":::{exercise}\n<!-- label: ex-fixture-proof -->\n\n"
                          "Prove that $|x| \\geq 0$.\n:::\n\n"
                          + _solution("ex-fixture-proof", SOLUTION_TEXTS[1]
                                      + ": $|x|^2 = x^2 \\geq 0$.")),
        new_markdown_cell("## References\n\n- Vaswani, A. et al. (2017). Attention is all you "
                          "need. *NeurIPS*.",
                          metadata={"attncore": {"references": ["vaswani2017attention"]}}),
    ]
    cells[1].metadata["attncore"] = {"numbers": dict(NUMBERS)}
    return _notebook(cells)


# What the broken notebook breaks, each in one cell (the tests expect each to be reported).
BROKEN = {
    "backtick directive": "```{admonition} Learning goals\n:class: tip\n\nRead it.\n```",
    "glue role": "The loss ends at {glue:text}`fixture-loss`.",
    "cite role": "As shown by {cite}`vaswani2017attention`.",
    "reference to a missing label": "See {prf:ref}`thm-fixture-nowhere`.",
    "numref of a figure made by code": "See {numref}`fig-fixture-made-by-code`.",
    "solution outside details": (":::{exercise}\n<!-- label: ex-fixture-bare -->\n\n"
                                 "What is 2 + 2?\n:::\n\n"
                                 ":::{solution} ex-fixture-bare\n:class: dropdown\n\n"
                                 "Four, the bare solution says.\n:::"),
    # The older convention, which MyST and JupyterLab's own renderer collapse but nbconvert
    # and GitHub do not (they close the <details> at the end of its paragraph).
    "solution in comment lines": (":::{exercise}\n<!-- label: ex-fixture-old -->\n\n"
                                  "What is 3 + 3?\n:::\n\n"
                                  "% <details><summary>Solution</summary>\n\n"
                                  ":::{solution} ex-fixture-old\n:class: dropdown\n\n"
                                  "Six, the older wrapping says.\n:::\n\n% </details>"),
    "label option": (":::{prf:lemma} Shown label\n:label: lem-fixture-shown\n\n"
                     "A lemma whose label a frontend without MyST shows.\n:::"),
    "target line": "(sec-fixture-shown)=\n## A section whose target shows",
    "number missing from its cell": "The run ends at a loss of 1.85.",
}
BROKEN_SOLUTION_TEXT = "Four, the bare solution says"


def broken_notebook() -> nbformat.NotebookNode:
    """A notebook with one break of the conventions per markdown cell (see BROKEN)."""
    cells = [new_markdown_cell(source) for source in BROKEN.values()]
    cells[-1].metadata["attncore"] = {"numbers": {"fixture-loss": "1.84"}}
    return _notebook(cells)


def _notebook(cells) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python",
                                 "name": "python3"}
    nbformat.validate(nb)
    return nb


def write(nb: nbformat.NotebookNode, path: Path) -> Path:
    nbformat.write(nb, str(path))
    return path
