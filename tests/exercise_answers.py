"""Right and wrong answers for every self-checked exercise, for tests/test_exercises.py.

The notebooks store every answer as ``None`` (the website shows no answer outside the collapsed
solutions); these answers live with the tests, not in the package or the book. Each entry maps
the answer variables of the exercise's cell to Python source: an expression, which replaces
``None`` in ``name = None``, or a whole statement block (a ``def``, say) that replaces that line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answers:
    right: dict[str, str]
    wrong: dict[str, str]


ANSWERS: dict[str, Answers] = {
    "ex-how-to-use-shape": Answers(right={"my_shape": "(6, 3)"},
                                   wrong={"my_shape": "(6, 8)"}),
}
