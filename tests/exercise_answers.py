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

# Chapter 13's Q4_1 round trip of one block, with the rounding of the codes as a slot.
_Q4_1 = ("def my_q4_1(block):\n"
         "    lo, hi = block.min(), block.max()\n"
         "    d = (hi - lo) / 15\n"
         "    q = np.clip({rounding}((block - lo) / d), 0, 15)\n"
         "    return np.float32(np.float16(d)) * q + np.float32(np.float16(lo))")

# Chapter 14's row log-sum-exp kernel, with the mask of the last tile of columns as a slot.
_ROW_LSE = """import triton
import triton.language as tl

@triton.jit
def row_lse_kernel(X, LSE, n_rows, n_cols, BLOCK_R: tl.constexpr,
                   BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, n_cols, BLOCK_C):
        cols = start + tl.arange(0, BLOCK_C)
        keep = (rows[:, None] < n_rows) & ({mask})
        x = tl.load(X + rows[:, None] * n_cols + cols[None, :], mask=keep,
                    other={other})
        m_new = tl.maximum(m, tl.max(x, 1))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), 1)
        m = m_new
    tl.store(LSE + rows, m + tl.log(l), mask=rows < n_rows)"""

# Chapter 8's block loop with a mask, measured from `shift` (the right answer keeps it finite).
_MASKED_TILED = """def my_masked_tiled(q, k, v, mask, block_size):
    n_q, d_v = q.shape[0], v.shape[1]
    m = np.full((n_q, 1), -np.inf)
    l, o = np.zeros((n_q, 1)), np.zeros((n_q, d_v))
    for j0 in range(0, k.shape[0], block_size):
        b = slice(j0, j0 + block_size)
        s_b = np.where(mask[:, b], q @ k[b].T / np.sqrt(q.shape[1]), -np.inf)
        m_new = np.maximum(m, s_b.max(axis=1, keepdims=True))
        shift = {shift}
        alpha, p = np.exp(m - shift), np.exp(s_b - shift)
        l = alpha * l + p.sum(axis=1, keepdims=True)
        o = alpha * o + p @ v[b]
        m = m_new
    return np.where(l > 0, o / np.where(l > 0, l, 1.0), 0.0)"""

# Chapter 19's delta rule with one gate per key channel; the right answer scales the old
# memory by the gate before the delta write reads it.
_CHANNEL_GATED = """def my_channel_gated(q, k, v, alpha, beta):
    S = np.zeros((v.shape[1], k.shape[1]))
    out = []
    for t in range(len(q)):
        S = {gated}
        S = {write} + beta[t] * np.outer(v[t] - S @ k[t], k[t])
        out.append(S @ q[t])
    return np.array(out)"""

ANSWERS: dict[str, Answers] = {
    "ex-how-to-use-shape": Answers(right={"my_shape": "(6, 3)"},
                                   wrong={"my_shape": "(6, 8)"}),
    # --- the page on training (00_how_a_model_is_trained.ipynb) -----------------------------
    # the wrong step forgets the bias correction, the most common slip
    "ex-how-a-model-is-trained-adam-step": Answers(
        right={"my_adam_step": "def my_adam_step(theta, grad, m, v, t, lr=1e-3, beta1=0.9,\n"
                               "                 beta2=0.999, eps=1e-8):\n"
                               "    m = beta1 * m + (1 - beta1) * grad\n"
                               "    v = beta2 * v + (1 - beta2) * grad**2\n"
                               "    m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)\n"
                               "    return theta - lr * m_hat / (np.sqrt(v_hat) + eps), m, v"},
        wrong={"my_adam_step": "def my_adam_step(theta, grad, m, v, t, lr=1e-3, beta1=0.9,\n"
                               "                 beta2=0.999, eps=1e-8):\n"
                               "    m = beta1 * m + (1 - beta1) * grad\n"
                               "    v = beta2 * v + (1 - beta2) * grad**2\n"
                               "    return theta - lr * m / (np.sqrt(v) + eps), m, v"}),
    # --- end of the page on training ---------------------------------------------------------
    # chapter 1, what attention computes
    "ex-what-attention-output-row": Answers(
        right={"my_weights": "(0.032, 0.087, 0.237, 0.644)", "my_output": "1.493"},
        wrong={"my_weights": "(0.25, 0.25, 0.25, 0.25)", "my_output": "0.5"}),
    "ex-what-attention-shapes": Answers(
        right={"my_shape_S": "(5, 7)", "my_shape_A": "(5, 7)", "my_shape_out": "(5, 12)"},
        wrong={"my_shape_S": "(7, 5)", "my_shape_A": "(7, 5)"}),
    # --- chapter 2, why attention divides by sqrt(d_k) (02_why_sqrt_dk.ipynb) -------------
    "ex-sqrt-dk-threshold": Answers(right={"my_threshold_d_k": "448"},
                                    wrong={"my_threshold_d_k": "384"}),
    "ex-sqrt-dk-two-keys": Answers(right={"my_gap": "5.99"},
                                   wrong={"my_gap": "4.6"}),
    "ex-sqrt-dk-mean-dominates": Answers(right={"my_d_k": "21"},
                                         # the variance without its two mean terms
                                         wrong={"my_d_k": "5"}),
    "ex-sqrt-dk-kdim": Answers(right={"my_scaled_score_var": "2 / 3"},
                               # the stacked in-projection's 1/4
                               wrong={"my_scaled_score_var": "0.25"}),
    # --- end of chapter 2 -----------------------------------------------------------------
    # --- chapter 3 (03_matmul_views) and chapter 4 (04_scaled_dot_product_attention) ---
    "ex-matmul-views-row-weights": Answers(
        right={"w": "[-1.0, 3.0, 1.0]"},
        wrong={"w": "[1.0, 2.0, 0.0]"}),                 # row 1 of A: the boxed-rows reading
    "ex-matmul-views-flops": Answers(
        right={"flops_one_head": "3 * 2 * 10 * 768 * 64 + 2 * (2 * 10 * 10 * 64)",
               "n_equal": "1152"},
        wrong={"flops_one_head": "3 * 10 * 768 * 64 + 2 * 10 * 10 * 64"}),   # MACs, not flops
    "ex-matmul-views-causal": Answers(
        right={"z3_depends_on": "[1, 2, 3]", "v5_reaches": "[5]"},
        wrong={"v5_reaches": "[1, 2, 3, 4, 5]"}),
    "ex-sdpa-tied-scores": Answers(right={"my_widths": "[3, 2, None, None]"},
                                   # (c) judged by its symmetry alone
                                   wrong={"my_widths": "[3, 2, 3, None]"}),
    "ex-sdpa-prefer-other": Answers(
        right={"my_x": "[[1.0, 0.0], [0.0, 1.0]]", "my_W_Q": "[[1.0, 0.0], [0.0, 1.0]]",
               "my_W_K": "[[0.0, 1.0], [1.0, 0.0]]"},
        wrong={"my_W_K": "[[0.0, 1.0], [1.0, 2.0]]"}),   # only token 1 prefers the other
    "ex-sdpa-your-attention": Answers(
        # (/ math.sqrt: a Python float keeps float32 scores float32; NumPy 2 promotes
        # them to float64 with np.sqrt's NumPy float64, which preserves_dtype reports)
        right={"my_attention": """def my_attention(q, k, v, mask=None, causal=False):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    allowed = np.ones(s.shape, dtype=bool)
    if mask is not None:
        allowed &= mask
    if causal:
        allowed &= np.tril(np.ones(s.shape[-2:], dtype=bool))
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return w @ v"""},
        # the mask applied after the softmax: masked keys' weight is dropped, not renormalised
        wrong={"my_attention": """def my_attention(q, k, v, mask=None, causal=False):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    if mask is not None:
        w = w * mask
    return w @ v"""}),
    # --- end of chapters 3 and 4 ---
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
    "ex-positions-which-targets": Answers(right={"my_tasks": '{"a", "c"}'},
                                          # the token one place after: needs positions
                                          wrong={"my_tasks": '{"a", "c", "d"}'}),
    # chapter 7, rotary positions (attncore/lab/exercises/rotary_positions.py)
    "ex-rope-convert": Answers(
        right={"convert_columns": (
            "def convert_columns(w, num_heads):\n"
            "    d = w.shape[-1] // num_heads\n"
            "    sigma = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])\n"
            "    order = np.concatenate([h * d + sigma for h in range(num_heads)])\n"
            "    return w[..., order]")},
        # sigma over all d_model features at once: features move between heads
        wrong={"convert_columns": (
            "def convert_columns(w, num_heads):\n"
            "    d = w.shape[-1]\n"
            "    sigma = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])\n"
            "    return w[..., sigma]")}),
    "ex-rope-alibi-reach": Answers(right={"my_heads": "2", "my_reach": "1178"},
                                   wrong={"my_reach": "1179"}),    # rounded up
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
    # --- chapter 8, tiled (flash) attention (08_tiled_attention.ipynb) -----------------------
    "ex-tiled-merge": Answers(
        right={"m_merged": "3.0", "l_merged": "1.5 * math.exp(-1) + 1.2",
               "o_merged": "[3 * math.exp(-1), 2.4]",
               "z": "np.array([3 * math.exp(-1), 2.4]) / (1.5 * math.exp(-1) + 1.2)"},
        # the classic bug: the output not rescaled by alpha when the maximum grows
        wrong={"o_merged": "[3.0, 2.4]"}),
    "ex-tiled-masked-block": Answers(
        right={"my_masked_tiled": _MASKED_TILED.format(shift="np.where(np.isneginf(m_new), 0.0, "
                                                             "m_new)")},
        # measured from the running maximum itself: -inf - (-inf) = NaN in a masked block
        wrong={"my_masked_tiled": _MASKED_TILED.format(shift="m_new")}),
    "ex-tiled-budget": Answers(right={"h_answer": "39"},
                               wrong={"h_answer": "40"}),      # rounded up: one head too many
    "ex-tiled-fp16-stall": Answers(right={"my_fraction": "2048 / 6000"},
                                   wrong={"my_fraction": "1.0"}),   # the exact sum
    # --- end of chapter 7 -----------------------------------------------------------------
    # --- chapter 8, the backward pass of attention (09_backward_pass.ipynb) ----------------
    "ex-backward-one-row": Answers(
        right={"my_ds": "[20 / 49, -18 / 49, -2 / 49]", "my_dq": "[22 / 49, -18 / 49]"},
        # the row-sum term forgotten: dS = A * dA
        wrong={"my_ds": "[4 / 7, -2 / 7, 0.0]"}),
    "ex-backward-missing-term": Answers(right={"my_wrong_gradients": '{"dq", "dk"}'},
                                        wrong={"my_wrong_gradients": '{"dq", "dk", "dv"}'}),
    "ex-backward-causal-flops": Answers(
        right={"my_causal_flops": "5 * 64 * 4096 * (4096 + 128)"},
        wrong={"my_causal_flops": "5 * 64 * 4096 * 4096"}),     # the diagonal blocks missed
    # --- end of chapter 8 -----------------------------------------------------------------
    # --- chapter 10, attention at inference (10_inference.ipynb, its Going further) ---------
    "ex-inference-cache-size": Answers(
        right={"my_tokens_gqa": "30 * 2**30 // (2 * 80 * 8 * 128 * 2 * 16)",
               "my_tokens_mha": "30 * 2**30 // (2 * 80 * 64 * 128 * 2 * 16)"},
        # the batch forgotten: the context one sequence alone could have
        wrong={"my_tokens_gqa": "30 * 2**30 // (2 * 80 * 8 * 128 * 2)"}),
    "ex-inference-batch": Answers(
        right={"my_batch": "(80 * 2**30 - 14 * 10**9) // (2 * 32 * 8 * 128 * 4096 * 2)"},
        # the window forgotten: a cache of all 8192 positions per sequence
        wrong={"my_batch": "(80 * 2**30 - 14 * 10**9) // (2 * 32 * 8 * 128 * 8192 * 2)"}),
    "ex-inference-intensity": Answers(
        right={"my_intensity": "2 * (64 / 8) / 1", "my_queries": "19"},
        wrong={"my_intensity": "2 * (64 / 8) / 2"}),     # the 16-bit cache's, not the 8-bit
    "ex-inference-window": Answers(right={"my_reach": "32 * (4096 - 1)"},
                                   # the position itself counted in each layer's reach
                                   wrong={"my_reach": "32 * 4096"}),
    # --- end of chapter 9 -----------------------------------------------------------------
    # --- chapter 11, inside a pretrained transformer (12_inside_a_pretrained_model.ipynb) ---
    "ex-inside-layer-parameters": Answers(
        right={"my_layer_parameters": "4 * 384 * 384 + 4 * 384 + 2 * 384 * 1536 + 1536 + 384"
                                      " + 2 * 2 * 384"},
        wrong={"my_layer_parameters": "4 * 384 * 384 + 4 * 384"}),
    "ex-inside-mean-pool": Answers(
        right={"my_mean_pool": "def my_mean_pool(hidden, mask):\n"
                               "    w = mask[..., None].astype(hidden.dtype)\n"
                               "    return (hidden * w).sum(axis=1) / w.sum(axis=1)"},
        wrong={"my_mean_pool": "def my_mean_pool(hidden, mask):\n"
                               "    return hidden.mean(axis=1)"}),
    "ex-inside-value-bias": Answers(
        right={"my_folded_b_o": "from attncore.pretrained import MiniLM\n"
                                "_a = MiniLM.load().params.layers[0].attention\n"
                                "my_folded_b_o = _a.b_o + _a.b_v @ _a.w_o"},
        # b_V added as it is, without passing through W_O
        wrong={"my_folded_b_o": "from attncore.pretrained import MiniLM\n"
                                "_a = MiniLM.load().params.layers[0].attention\n"
                                "my_folded_b_o = _a.b_o + _a.b_v"}),
    # its Going further notebook (12_inside_a_pretrained_model_going_further.ipynb)
    "ex-inside-scale-one-layer": Answers(
        right={"my_layer": "5", "my_cosine": "0.936"},
        wrong={"my_layer": "0", "my_cosine": "0.936"}),
    # --- chapter 12, the whole transformer (11_the_whole_transformer.ipynb) ----------------
    "ex-capstone-gpt2-parameters": Answers(
        right={"my_parameters": "12 * (4 * 768 * 768 + 4 * 768 + 2 * 768 * 3072 + 3072 + 768"
                                " + 4 * 768) + 50257 * 768 + 1024 * 768 + 2 * 768"},
        wrong={"my_parameters": "12 * (4 * 768 * 768 + 4 * 768 + 2 * 768 * 3072 + 3072 + 768"
                                " + 4 * 768) + 2 * 50257 * 768 + 1024 * 768 + 2 * 768"}),
    "ex-capstone-crossover": Answers(
        right={"my_n": "2 * 768 + 3072"},
        wrong={"my_n": "4 * 768 + 2 * 3072"}),
    "ex-capstone-cache-work": Answers(
        right={"my_recomputed": "2 * sum(range(28, 128))", "my_cached": "2 * (28 + 99)"},
        wrong={"my_recomputed": "2 * sum(range(28, 128))", "my_cached": "2 * (28 + 100)"}),
    # --- chapter 13, a real LLM (13_a_real_llm.ipynb) ------------------------------------
    "ex-real-llm-quantize": Answers(
        right={"my_q4_1": _Q4_1.format(rounding="np.round")},
        wrong={"my_q4_1": _Q4_1.format(rounding="np.floor")}),   # truncated codes
    "ex-real-llm-cache-crossover": Answers(
        right={"my_tokens": "math.ceil(96576768 / (2 * 30 * 3 * 64 * 2))"},
        wrong={"my_tokens": "math.ceil(96576768 / (2 * 30 * 9 * 64 * 2))"}),  # 9 kv heads
    "ex-real-llm-sink-score": Answers(right={"my_score": "math.log(900)"},
                                      wrong={"my_score": "math.log(9)"}),   # share / rest
    # --- chapter 14, beyond one device, beyond softmax (14_beyond_one_device.ipynb) -----
    "ex-beyond-balance": Answers(right={"my_ratio": "1.882"},
                                 wrong={"my_ratio": "8"}),   # blocks, not scores
    "ex-beyond-gqa-bytes": Answers(right={"my_ratio": "8 * 8 / (32 + 8)"},
                                   wrong={"my_ratio": "8 / 2"}),   # as if H_kv = H
    "ex-beyond-antithetic": Answers(
        right={"my_variance": "math.e * math.exp(-2.5) * (math.exp(2.5) - 1) ** 2 / 64"},
        wrong={"my_variance": "0.4750"}),            # 64 independent features
    # --- chapter 19, gates and the delta rule (19_gates_and_the_delta_rule.ipynb) ------------
    "ex-delta-forgetting": Answers(right={"my_writes": "math.log(0.5) / math.log(15 / 16)"},
                                   wrong={"my_writes": "16 * math.log(2)"}),   # large-d limit
    "ex-delta-break-even": Answers(
        right={"my_tokens": "36 * 32 * 128 * 128 / (12 * 2 * 2 * 256)"},
        wrong={"my_tokens": "36 * 32 * 128 * 128 / (12 * 2 * 256)"}),    # keys only
    "ex-delta-channel-gate": Answers(right={"my_channel_gated": _CHANNEL_GATED.format(
                                         gated="S * alpha[t]", write="S")},
                                     # the gate applied after the erase, not before it
                                     wrong={"my_channel_gated": _CHANNEL_GATED.format(
                                         gated="S", write="S * alpha[t]")}),
    # --- chapter 16, caches in serving (16_caches_in_serving.ipynb) -------------------------
    "ex-llms-left-padding": Answers(
        right={"my_new_positions": "[2, 5, 3]",
               "my_new_mask": "[[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]]"},
        # the column of the new token as its position: not the count its prompt started
        wrong={"my_new_positions": "[5, 5, 5]",
               "my_new_mask": "[[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]]"}),
    "ex-llms-int8-row": Answers(right={"my_values": "[0.3, 0.0]"},
                                wrong={"my_values": "[0.26, -0.04]"}),
    "ex-llms-int8-weights": Answers(right={"my_factor": "math.exp(2 * 0.01 * 8 / 8)"},
                                    wrong={"my_factor": "math.exp(0.01 * 8 / 8)"}),  # numerator only
    # --- chapter 17, latent attention and speculative decoding
    #     (17_latent_attention_and_speculative_decoding.ipynb) ------------------------------
    "ex-llms-gamma": Answers(right={"my_gamma": "6"},
                             wrong={"my_gamma": "20"}),     # tokens per call alone
    "ex-llms-mla-intensity": Answers(
        right={"my_intensity": "2 * 128 * (576 + 512) / (576 * 2)"},
        wrong={"my_intensity": "2 * 128 * 576 / (576 * 2)"}),   # the scores alone
    # --- chapter 18, windows, sinks and learned sparsity
    #     (18_windows_sinks_and_sparsity.ipynb) ------------------------------------------
    "ex-windows-reach": Answers(right={"my_reach": "32 * 4095"},
                                wrong={"my_reach": "32 * 4096"}),    # the window counts t
    "ex-windows-sink-logit": Answers(
        right={"my_sink": "np.log(np.exp([2.0, 1.0, 0.5, -1.0]).sum()) + np.log(3)"},
        wrong={"my_sink": "np.log(np.exp([2.0, 1.0, 0.5, -1.0]).sum())"}),  # half
    # --- chapter 15, the kernel itself (15_the_kernel_itself.ipynb) -----------------------
    "ex-kernel-row-lse": Answers(
        right={"row_lse_kernel": _ROW_LSE.format(mask="cols[None, :] < n_cols",
                                                 other='float("-inf")')},
        # masked columns read as 0, which the sum counts as exp(0 - m), instead of -inf
        wrong={"row_lse_kernel": _ROW_LSE.format(mask="cols[None, :] < n_cols",
                                                 other="0.0")}),
    "ex-kernel-causal-tiles": Answers(right={"my_pairs": "272"},
                                      wrong={"my_pairs": "256"}),   # half of all 512 pairs
    "ex-kernel-backward-traffic": Answers(right={"my_bytes": "140017664"},
                                          wrong={"my_bytes": "71303168"}),   # dK/dV alone
}
