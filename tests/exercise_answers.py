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
    # chapter 6, positions (attncore/lab/exercises/positions.py)
    "ex-positions-offset-matrix": Answers(
        right={"offset_matrix": (
            "def offset_matrix(k, d):\n"
            "    t = np.zeros((d, d))\n"
            "    for i, w in enumerate(ac.position_frequencies(d)):\n"
            "        c, s = math.cos(k * w), math.sin(k * w)\n"
            "        t[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]\n"
            "    return t")},
        wrong={"offset_matrix": (
            "def offset_matrix(k, d):\n"
            "    t = np.zeros((d, d))\n"
            "    for i, w in enumerate(ac.position_frequencies(d)):\n"
            "        c, s = math.cos(k * w), math.sin(k * w)\n"
            "        t[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]\n"
            "    return t")}),
    "ex-positions-ntk-base": Answers(right={"my_base": "10000 * 4 ** (128 / 126)"},
                                    wrong={"my_base": "40000"}),
}
