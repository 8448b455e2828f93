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


# Chapter 5's head swap, up to its last argument (the right answer adds the rows of W_O).
_SWAP_HEADS = ("def swap_heads(p):\n"
               "    from dataclasses import replace\n"
               "    d = p.d_head\n"
               "    order = np.r_[d:2 * d, 0:d]\n"
               "    return replace(p, w_q=p.w_q[:, order], w_k=p.w_k[:, order],\n"
               "                   w_v=p.w_v[:, order], b_q=p.b_q[order], b_k=p.b_k[order],\n"
               "                   b_v=p.b_v[order]")

ANSWERS: dict[str, Answers] = {
    "ex-how-to-use-shape": Answers(right={"my_shape": "(6, 3)"},
                                   wrong={"my_shape": "(6, 8)"}),
    # --- chapter 5, multi-head attention (05_multi_head_attention.ipynb) --------------------
    "ex-mha-count": Answers(
        right={"ex1_parameters": "4 * 768**2 + 4 * 768",
               "ex1_flops": "8 * 1024 * 768**2 + 4 * 1024**2 * 768"},
        wrong={"ex1_flops": "8 * 1024 * 768**2 + 4 * 1024**2 * 64"}),   # d_k for d_model
    "ex-mha-window": Answers(
        right={"ex2_window": "np.tril(np.ones((5, 5), bool)) & np.triu(np.ones((5, 5), bool), -2)",
               "ex2_attn_mask": "~(np.tril(np.ones((5, 5), bool)) "
                                "& np.triu(np.ones((5, 5), bool), -2))"},
        # the silent error of the chapter: the attncore mask passed to nn.MultiheadAttention
        wrong={"ex2_attn_mask": "np.tril(np.ones((5, 5), bool)) "
                                "& np.triu(np.ones((5, 5), bool), -2)"}),
    "ex-mha-swap": Answers(
        right={"swap_heads": _SWAP_HEADS + ",\n                   w_o=p.w_o[order, :])"},
        # the heads' projections move but what they write (the rows of W_O) does not
        wrong={"swap_heads": _SWAP_HEADS + ")"}),
    # --- end of chapter 5 -----------------------------------------------------------------
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
