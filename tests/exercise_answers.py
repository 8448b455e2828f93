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
    # --- chapter 7, tiled (flash) attention (07_tiled_attention.ipynb) -----------------------
    "ex-tiled-merge": Answers(
        right={"m_merged": "3.0", "l_merged": "1.5 * math.exp(-1) + 1.2",
               "o_merged": "[3 * math.exp(-1), 2.4]",
               "z": "np.array([3 * math.exp(-1), 2.4]) / (1.5 * math.exp(-1) + 1.2)"},
        # the classic bug: the output not rescaled by alpha when the maximum grows
        wrong={"o_merged": "[3.0, 2.4]"}),
    "ex-tiled-budget": Answers(right={"n_answer": "92_617"},
                               wrong={"n_answer": "92_618"}),      # one token too many
    "ex-tiled-fp16-stall": Answers(right={"my_stall": "2048"},
                                   wrong={"my_stall": "65504"}),   # overflow, not the stall
    # --- end of chapter 7 -----------------------------------------------------------------
}
