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

# Chapter 5's multi-head forward pass, with the width that scales the scores as a slot.
_MY_MULTI_HEAD = """def my_multi_head(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    *batch, n, d_model = x.shape
    d_k = d_model // num_heads

    def split(y):
        return np.swapaxes(y.reshape(*batch, n, num_heads, d_k), -2, -3)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt({width})
    if causal:
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    z = (e / e.sum(axis=-1, keepdims=True)) @ v
    return np.swapaxes(z, -2, -3).reshape(*batch, n, d_model) @ w_o"""

# Chapter 6's sinusoidal table, with the exponent of the frequencies as a slot.
_MY_SINUSOIDAL = """def my_sinusoidal(n, d, base=10000.0):
    omega = base ** (-{exponent})
    angles = np.arange(n)[:, None] * omega
    pe = np.empty((n, d))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    return pe"""

# Chapter 7's RoPE, with the second half of the rotation as a slot.
_MY_ROPE = """def my_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d)
    angles = positions[:, None] * theta
    cos = np.cos(angles).astype(x.dtype)
    sin = np.sin(angles).astype(x.dtype)
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, {second}], axis=-1)"""

# Chapter 13's Q4_1 round trip of one block, with the rounding of the codes as a slot.
_Q4_1 = ("def my_q4_1(block):\n"
         "    lo, hi = block.min(), block.max()\n"
         "    d = (hi - lo) / 15\n"
         "    q = np.clip({rounding}((block - lo) / d), 0, 15)\n"
         "    return np.float32(np.float16(d)) * q + np.float32(np.float16(lo))")

# Chapter 12's post-LN encoder layer in NumPy, and the pre-norm layer of GPT-2 as the wrong
# answer.
_ENCODER_LAYER = ("import math\nimport numpy as np\nfrom attncore.pretrained import erf\n\n"
                "def my_encoder_layer(x, mask, layer, eps):\n"
                "    a = layer.attention\n"
                "    b, n, d = x.shape\n"
                "    h, d_h = a.num_heads, d // a.num_heads\n"
                "\n"
                "    def layer_norm(z, norm):\n"
                "        mu = z.mean(-1, keepdims=True)\n"
                "        var = ((z - mu) ** 2).mean(-1, keepdims=True)\n"
                "        return (z - mu) / np.sqrt(var + eps) * norm.gain + norm.shift\n"
                "\n"
                "    def heads(z):                     # (b, n, d) -> (b, h, n, d_h)\n"
                "        return z.reshape(b, n, h, d_h).transpose(0, 2, 1, 3)\n"
                "\n"
                "    q, k, v = (heads(x @ w + bias) for w, bias in\n"
                "               ((a.w_q, a.b_q), (a.w_k, a.b_k), (a.w_v, a.b_v)))\n"
                "    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d_h)\n"
                "    scores = np.where(mask[:, None, None, :], scores, -np.inf)\n"
                "    weights = np.exp(scores - scores.max(-1, keepdims=True))\n"
                "    weights /= weights.sum(-1, keepdims=True)\n"
                "    attended = (weights @ v).transpose(0, 2, 1, 3).reshape(b, n, d)\n"
                "    x = layer_norm(x + attended @ a.w_o + a.b_o, layer.attention_norm)\n"
                "    z = x @ layer.w_1 + layer.b_1\n"
                "    phi = 0.5 * (1 + erf(z / math.sqrt(2)))     # attncore.pretrained.erf\n"
                "    ffn = (z * phi) @ layer.w_2 + layer.b_2\n"
                "    return layer_norm(x + ffn, layer.output_norm)\n"
                  )
_PRE_NORM_ENCODER_LAYER = (
    "import math\nimport attncore as ac\n"
    "from attncore.pretrained import erf, layer_norm as _ln\n\n"
    "def my_encoder_layer(x, mask, layer, eps):\n"
    "    n1, n2 = layer.attention_norm, layer.output_norm\n"
    "    h = x + ac.multi_head_attention(layer.attention, _ln(x, n1.gain, n1.shift, "
    "eps=eps), mask=mask[:, None, :])\n"
    "    z = _ln(h, n2.gain, n2.shift, eps=eps) @ layer.w_1 + layer.b_1\n"
    "    return h + (z * 0.5 * (1 + erf(z / math.sqrt(2)))) @ layer.w_2 + layer.b_2")

# Chapter 11's training step over micro-batches, with the first zero_grad as a slot.
_TRAIN_STEP = ("import torch.nn.functional as F\n\n"
               "def my_train_step(model, opt, x, y, micro_batches):\n"
               "    {zero_grad}\n"
               "    total = 0.0\n"
               "    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):\n"
               "        logits = ac.lm_logits(model, xs)\n"
               "        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),\n"
               "                               ys.reshape(-1))\n"
               "        (loss / micro_batches).backward()\n"
               "        total += loss.item() / micro_batches\n"
               "    opt.step()\n"
               "    return total")

# Chapter 13's Llama block, with the grouping of the query heads onto the key/value heads as a
# slot (repeat_interleave: consecutive query heads share a key/value head, attncore's order).
_LLAMA_BLOCK = ("import math\nimport torch\n\n"
                "def my_llama_block(x, block):\n"
                "    a, (n, d) = block.attn, x.shape\n"
                "    h, h_kv, d_h = a.num_heads, a.n_kv_heads, a.d_head\n"
                "\n"
                "    def rms_norm(z, gain):\n"
                "        ms = z.pow(2).mean(-1, keepdim=True)\n"
                "        return z / torch.sqrt(ms + block.eps) * gain\n"
                "\n"
                "    def rope(z):                      # pairs (i, i + d_h / 2)\n"
                "        half = d_h // 2\n"
                "        i = torch.arange(half, dtype=torch.float64)\n"
                "        w = block.rope_base ** (-i / half)\n"
                "        angle = torch.arange(n, dtype=torch.float64)[:, None] * w\n"
                "        cos, sin = angle.cos().to(z.dtype), angle.sin().to(z.dtype)\n"
                "        z1, z2 = z[..., :half], z[..., half:]\n"
                "        return torch.cat([z1 * cos - z2 * sin, z1 * sin + z2 * cos], -1)\n"
                "\n"
                "    def heads(z, count):              # (n, count * d_h) -> (count, n, d_h)\n"
                "        return z.reshape(n, count, d_h).transpose(0, 1)\n"
                "\n"
                "    r = rms_norm(x, block.ln1_weight)\n"
                "    q = rope(heads(r @ a.w_q, h))\n"
                "    k = rope(heads(r @ a.w_k, h_kv)).{grouping}(h // h_kv, 0)\n"
                "    v = heads(r @ a.w_v, h_kv).{grouping}(h // h_kv, 0)\n"
                "    scores = q @ k.transpose(-1, -2) / math.sqrt(d_h)\n"
                "    later = torch.ones(n, n, dtype=torch.bool).triu(1)\n"
                "    weights = scores.masked_fill(later, float(\"-inf\")).softmax(-1)\n"
                "    x = x + (weights @ v).transpose(0, 1).reshape(n, d) @ a.w_o\n"
                "    r = rms_norm(x, block.ln2_weight)\n"
                "    gate = r @ block.w_ff1\n"
                "    up = r @ block.w_ff3\n"
                "    return x + (gate * torch.sigmoid(gate) * up) @ block.w_ff2\n"
                )

# Chapter 14's row log-sum-exp kernel, with the mask of the last tile of columns as a slot.
_ROW_LSE = """import triton
import triton.language as tl

@triton.jit
def my_row_lse_kernel(X, LSE, n_rows, n_cols, BLOCK_R: tl.constexpr,
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

# Chapter 9's tiled backward pass, with the gradient of the scores as a slot.
_TILED_BACKWARD = """def my_attention_backward(q, k, v, d_out, causal=False):
    out, lse = ac.tiled_attention(q, k, v, causal=causal, return_lse=True)
    c = q.shape[-1] ** -0.5
    D = (d_out * out).sum(axis=-1, keepdims=True)
    L = lse[..., None]
    rows = np.arange(q.shape[-2])[:, None]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for j0 in range(0, k.shape[-2], 2):
        b = slice(j0, j0 + 2)
        s = c * q @ np.swapaxes(k[..., b, :], -1, -2)
        if causal:
            cols = np.arange(j0, j0 + s.shape[-1])
            s = np.where(cols <= rows, s, -np.inf)
        p = np.exp(s - L)
        dv[..., b, :] = np.swapaxes(p, -1, -2) @ d_out
        dp = d_out @ np.swapaxes(v[..., b, :], -1, -2)
        ds = {ds}
        dq += c * ds @ k[..., b, :]
        dk[..., b, :] = c * np.swapaxes(ds, -1, -2) @ q
    return dq, dk, dv"""

# Chapter 10's decoding step with a KV cache and grouped-query attention, with the way the
# key/value heads are spread over the query heads as a slot.
_DECODE_STEP = """def my_decode_step(q_new, k_new, v_new, k_cache, v_cache):
    k = np.concatenate([k_cache, k_new], axis=-2)
    v = np.concatenate([v_cache, v_new], axis=-2)
    g = q_new.shape[-3] // k.shape[-3]
    k_rep, v_rep = ({repeat} for x in (k, v))
    s = q_new @ np.swapaxes(k_rep, -1, -2) / math.sqrt(q_new.shape[-1])
    a = np.exp(s - s.max(axis=-1, keepdims=True))
    a /= a.sum(axis=-1, keepdims=True)
    return a @ v_rep, k, v"""

# Chapter 16's read of a sequence's keys through its block table, the blocks as a slot.
_GATHER_PAGES = """def my_gather_pages(key_blocks, block_table, length):
    table = np.asarray(block_table, dtype=int)
    return {blocks}.reshape(-1, key_blocks.shape[-1])[:length]"""

# Chapter 17's round of speculative sampling around the chapter's one-token rule, with what
# a rejected token is replaced from as a slot.
_SPECULATIVE_ROUND = """def sample(dist, u):
    cdf = np.cumsum(dist)
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(dist) - 1)

def verify_one(p, q, x, rng):
    if rng.random() * q[x] < p[x]:
        return x, True
    return sample(np.maximum({residual}, 0.0), rng.random()), False

def my_speculative_round(p_target, p_draft, draft_tokens, rng):
    out = []
    for i, x in enumerate(draft_tokens):
        token, kept = verify_one(p_target[i], p_draft[i], int(x), rng)
        out.append(token)
        if not kept:
            return out
    return out + [sample(p_target[len(draft_tokens)], rng.random())]"""

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

# Chapter 14's merge of two partial attention results; the right answer shifts by a finite
# log-sum-exp (0 where a query saw no key in either block), the wrong one by -inf there.
_MERGE = """def my_merge(out_a, lse_a, out_b, lse_b):
    lse = np.logaddexp(lse_a, lse_b)
    shift = {shift}
    w_a = np.exp(lse_a - shift)[:, None]
    w_b = np.exp(lse_b - shift)[:, None]
    return w_a * out_a + w_b * out_b, lse"""

# Chapter 18's sliding-window mask with sink tokens, with the window's edge as a slot.
_WINDOW_MASK = """def my_window_mask(n, window, sinks):
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    return (j <= i) & (({edge}) | (j < sinks))"""

# Chapter 19's step of the gated delta rule, with where the gate acts as a slot.
_DELTA_STEP = """def my_delta_step(S, q, k, v, g, beta):
    g = np.asarray(g)[..., None, None]
    beta = np.asarray(beta)[..., None]
    old = {old}
    u = beta * (v - np.einsum("...ij,...j->...i", old, k))
    new = {new} + u[..., :, None] * k[..., None, :]
    return np.einsum("...ij,...j->...i", new, q), new"""

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
    "ex-what-attention-lookup": Answers(
        right={"my_lookup": """def my_lookup(q, keys, values):
    scores = keys @ q / np.sqrt(q.shape[0])
    return ac.softmax(scores) @ values"""},
        # the hard lookup: only the best key's value
        wrong={"my_lookup": """def my_lookup(q, keys, values):
    return values[np.argmax(keys @ q)]"""}),
    "ex-what-attention-all-queries": Answers(
        right={"my_attention_rows": """def my_attention_rows(Q, K, V):
    S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    return ac.softmax(S, axis=-1) @ V"""},
        # K.T reverses every axis: right without batch axes only
        wrong={"my_attention_rows": """def my_attention_rows(Q, K, V):
    S = Q @ K.T / np.sqrt(Q.shape[-1])
    return ac.softmax(S, axis=-1) @ V"""}),
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
    "ex-sqrt-dk-stable-softmax": Answers(
        right={"my_softmax": """def my_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(m), m, 0))
    total = e.sum(axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)"""},
        # no max subtracted: exp overflows
        wrong={"my_softmax": """def my_softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)"""}),
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
    "ex-matmul-views-outer": Answers(
        right={"my_matmul_outer": """def my_matmul_outer(A, B):
    C = np.zeros(A.shape[:-1] + B.shape[-1:], dtype=A.dtype)
    for t in range(A.shape[-1]):
        C += A[..., :, t, None] * B[..., None, t, :]
    return C"""},
        # np.outer flattens its arguments: right without batch axes only
        wrong={"my_matmul_outer": """def my_matmul_outer(A, B):
    return sum(np.outer(A[:, t], B[t, :]) for t in range(A.shape[1]))"""}),
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
            "    h = d // 2\n"
            "    t = np.zeros((d, d))\n"
            "    for i, w in enumerate(ac.position_frequencies(d)):\n"
            "        c, s = math.cos(k * w), math.sin(k * w)\n"
            "        t[i, i], t[i, i + h], t[i + h, i], t[i + h, i + h] = c, -s, s, c\n"
            "    return t")},
        # the theorem's matrix copied: right for the interleaved layout, not for this one
        wrong={"offset_matrix": (
            "def offset_matrix(k, d):\n"
            "    t = np.zeros((d, d))\n"
            "    for i, w in enumerate(ac.position_frequencies(d)):\n"
            "        c, s = math.cos(k * w), math.sin(k * w)\n"
            "        t[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]\n"
            "    return t")}),
    "ex-positions-your-sinusoidal": Answers(
        right={"my_sinusoidal": _MY_SINUSOIDAL.format(exponent="np.arange(0, d, 2) / d")},
        # one frequency per feature index instead of per pair: base^(-i/d)
        wrong={"my_sinusoidal": _MY_SINUSOIDAL.format(exponent="np.arange(d // 2) / d")}),
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
    "ex-rope-your-rope": Answers(
        right={"my_rope": _MY_ROPE.format(second="a * sin + b * cos")},
        # the sine's sign swapped in the second half only: not a rotation (lengths change)
        wrong={"my_rope": _MY_ROPE.format(second="-a * sin + b * cos")}),
    "ex-rope-alibi-reach": Answers(right={"my_heads": "2", "my_reach": "1178"},
                                   wrong={"my_reach": "1179"}),    # rounded up
    # --- chapter 5, multi-head attention (05_multi_head_attention.ipynb) --------------------
    "ex-mha-count": Answers(
        right={"ex1_parameters": "4 * 768**2 + 4 * 768",
               "ex1_flops": "8 * 1024 * 768**2 + 4 * 1024**2 * 768"},
        wrong={"ex1_flops": "8 * 1024 * 768**2 + 4 * 1024**2 * 64"}),   # d_k for d_model
    "ex-mha-window": Answers(
        right={"ex2_window": "np.tril(np.ones((5, 5), bool)) & np.triu(np.ones((5, 5), bool), -2)",
               "ex2_attn_mask": "np.where(np.tril(np.ones((5, 5), bool)) "
                                "& np.triu(np.ones((5, 5), bool), -2), 0.0, -np.inf)"},
        # the boolean attn_mask turned into numbers: 1 is added to the forbidden scores,
        # which forbids nothing
        wrong={"ex2_attn_mask": "(~(np.tril(np.ones((5, 5), bool)) "
                                "& np.triu(np.ones((5, 5), bool), -2))).astype(float)"}),
    "ex-mha-swap": Answers(
        right={"swap_heads": _SWAP_HEADS + ",\n                   w_o=p.w_o[order, :])"},
        # the heads' projections move but what they write (the rows of W_O) does not
        wrong={"swap_heads": _SWAP_HEADS + ")"}),
    "ex-mha-your-layer": Answers(
        right={"my_multi_head": _MY_MULTI_HEAD.format(width="d_k")},
        # each head's scores divided by sqrt(d_model), not by sqrt(d_k) of one head
        wrong={"my_multi_head": _MY_MULTI_HEAD.format(width="d_model")}),
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
    # --- end of chapter 8 -----------------------------------------------------------------
    # --- chapter 9, the backward pass of attention (09_backward_pass.ipynb) ----------------
    "ex-backward-tiled": Answers(
        right={"my_attention_backward": _TILED_BACKWARD.format(ds="p * (dp - D)")},
        # the row-sum term forgotten: dS = P * dP
        wrong={"my_attention_backward": _TILED_BACKWARD.format(ds="p * dp")}),
    "ex-backward-one-row": Answers(
        right={"my_ds": "[20 / 49, -18 / 49, -2 / 49]", "my_dq": "[22 / 49, -18 / 49]"},
        # the row-sum term forgotten: dS = A * dA
        wrong={"my_ds": "[4 / 7, -2 / 7, 0.0]"}),
    "ex-backward-missing-term": Answers(right={"my_wrong_gradients": '{"dq", "dk"}'},
                                        wrong={"my_wrong_gradients": '{"dq", "dk", "dv"}'}),
    "ex-backward-causal-flops": Answers(
        right={"my_causal_flops": "5 * 64 * 4096 * (4096 + 128)"},
        wrong={"my_causal_flops": "5 * 64 * 4096 * 4096"}),     # the diagonal blocks missed
    # --- end of chapter 9 -----------------------------------------------------------------
    # --- chapter 10, attention at inference (10_inference.ipynb) --------------------------
    "ex-inference-cache-size": Answers(
        right={"my_tokens_gqa": "30 * 2**30 // (2 * 80 * 8 * 128 * 2 * 16)",
               "my_tokens_mha": "30 * 2**30 // (2 * 80 * 64 * 128 * 2 * 16)"},
        # the batch forgotten: the context one sequence alone could have
        wrong={"my_tokens_gqa": "30 * 2**30 // (2 * 80 * 8 * 128 * 2)"}),
    "ex-inference-batch": Answers(
        right={"my_batch": "2 * ((80 * 2**30 - 14 * 10**9) "
                           "// (2 * 32 * 8 * 128 * (3000 + 4096) * 2))"},
        # the window forgotten: a cache of all 12000 positions per long sequence
        wrong={"my_batch": "2 * ((80 * 2**30 - 14 * 10**9) "
                           "// (2 * 32 * 8 * 128 * (3000 + 12000) * 2))"}),
    "ex-inference-intensity": Answers(
        right={"my_intensity": "2 * (64 / 8) / 1", "my_queries": "19"},
        wrong={"my_intensity": "2 * (64 / 8) / 2"}),     # the 16-bit cache's, not the 8-bit
    "ex-inference-decode-step": Answers(
        right={"my_decode_step": _DECODE_STEP.format(repeat="np.repeat(x, g, axis=-3)")},
        # query head i paired with key/value head i % h_kv: the group tiled, not repeated
        wrong={"my_decode_step": _DECODE_STEP.format(
            repeat="np.concatenate([x] * g, axis=-3)")}),
    # --- end of chapter 10 -----------------------------------------------------------------
    # --- chapter 11, inside a pretrained transformer (12_inside_a_pretrained_model.ipynb) ---
    "ex-inside-encoder-layer": Answers(
        right={"my_encoder_layer": _ENCODER_LAYER},
        # pre-norm: each sub-layer reads a normalised copy, the stream is never normalised
        wrong={"my_encoder_layer": _PRE_NORM_ENCODER_LAYER}),
    "ex-inside-max-pool": Answers(
        right={"my_max_pool": "def my_max_pool(hidden, mask):\n"
                              "    return np.where(mask[..., None], hidden, -np.inf).max(axis=1)"},
        # the mean pooling's trick: padding multiplied by 0, which still competes
        wrong={"my_max_pool": "def my_max_pool(hidden, mask):\n"
                              "    return (hidden * mask[..., None]).max(axis=1)"}),
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
    "ex-capstone-block": Answers(
        right={"my_block": "def my_block(x, params):\n"
                           "    p = params\n"
                           "    h = ac.layer_norm(x, p.ln1_weight, p.ln1_bias, eps=p.eps)\n"
                           "    x = x + ac.multi_head_attention(p.attn, h, causal=True)\n"
                           "    h = ac.layer_norm(x, p.ln2_weight, p.ln2_bias, eps=p.eps)\n"
                           "    return x + ac.feed_forward(h, p.w_ff1, p.b_ff1, p.w_ff2, "
                           "p.b_ff2)"},
        # post-norm: the stream normalised after each sum
        wrong={"my_block": "def my_block(x, params):\n"
                           "    p = params\n"
                           "    x = ac.layer_norm(x + ac.multi_head_attention(p.attn, x, "
                           "causal=True), p.ln1_weight, p.ln1_bias, eps=p.eps)\n"
                           "    return ac.layer_norm(x + ac.feed_forward(x, p.w_ff1, "
                           "p.b_ff1, p.w_ff2, p.b_ff2), p.ln2_weight, p.ln2_bias, "
                           "eps=p.eps)"}),
    "ex-capstone-accumulate": Answers(
        right={"my_train_step": _TRAIN_STEP.format(zero_grad="opt.zero_grad()")},
        # no zero_grad: the gradients of an earlier step are added in
        wrong={"my_train_step": _TRAIN_STEP.format(zero_grad="pass")}),
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
    "ex-real-llm-llama-block": Answers(
        right={"my_llama_block": _LLAMA_BLOCK.format(grouping="repeat_interleave")},
        # query head i reads key/value head i % n_kv_heads
        wrong={"my_llama_block": _LLAMA_BLOCK.format(grouping="repeat")}),
    "ex-real-llm-quantize": Answers(
        right={"my_q4_1": _Q4_1.format(rounding="np.round")},
        wrong={"my_q4_1": _Q4_1.format(rounding="np.floor")}),   # truncated codes
    "ex-real-llm-cache-crossover": Answers(
        right={"my_tokens": "math.ceil(96576768 / (2 * 30 * 3 * 64 * 2))"},
        wrong={"my_tokens": "math.ceil(96576768 / (2 * 30 * 9 * 64 * 2))"}),  # 9 kv heads
    # --- chapter 14, beyond one device, beyond softmax (14_beyond_one_device.ipynb) -----
    "ex-beyond-balance": Answers(right={"my_ratio": "1.882"},
                                 wrong={"my_ratio": "8"}),   # blocks, not scores
    "ex-beyond-gqa-bytes": Answers(right={"my_ratio": "8 * 8 / (32 + 8)"},
                                   wrong={"my_ratio": "8 / 2"}),   # as if H_kv = H
    "ex-beyond-antithetic": Answers(
        right={"my_variance": "math.e * math.exp(-2.5) * (math.exp(2.5) - 1) ** 2 / 64"},
        wrong={"my_variance": "0.4750"}),            # 64 independent features
    "ex-beyond-merge": Answers(
        right={"my_merge": _MERGE.format(shift="np.where(np.isfinite(lse), lse, 0.0)")},
        # shifting by lse itself: a query with no key in either block gets -inf - -inf
        wrong={"my_merge": _MERGE.format(shift="lse")}),
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
    "ex-delta-step": Answers(right={"my_delta_step": _DELTA_STEP.format(old="g * S",
                                                                       new="old")},
                             # the gate applied after the read: the write erases S k, not g S k
                             wrong={"my_delta_step": _DELTA_STEP.format(old="S",
                                                                        new="g * old")}),
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
    "ex-llms-gather-pages": Answers(
        right={"my_gather_pages": _GATHER_PAGES.format(blocks="key_blocks[table]")},
        # the first blocks of the pool, not the table's
        wrong={"my_gather_pages": _GATHER_PAGES.format(
            blocks="key_blocks[:len(table)]")}),
    # --- chapter 17, latent attention and speculative decoding
    #     (17_latent_attention_and_speculative_decoding.ipynb) ------------------------------
    "ex-llms-gamma": Answers(right={"my_gamma": "6"},
                             wrong={"my_gamma": "20"}),     # tokens per call alone
    "ex-llms-mla-intensity": Answers(
        right={"my_intensity": "2 * 128 * (576 + 512) / (576 * 2)"},
        wrong={"my_intensity": "2 * 128 * 576 / (576 * 2)"}),   # the scores alone
    "ex-llms-speculative-round": Answers(
        right={"my_speculative_round": _SPECULATIVE_ROUND.format(residual="p - q")},
        # a rejected token replaced from the target's p, not from the residual
        wrong={"my_speculative_round": _SPECULATIVE_ROUND.format(residual="p")}),
    # --- chapter 18, windows, sinks and learned sparsity
    #     (18_windows_sinks_and_sparsity.ipynb) ------------------------------------------
    "ex-windows-reach": Answers(right={"my_reach": "32 * 4095"},
                                wrong={"my_reach": "32 * 4096"}),    # the window counts t
    "ex-windows-sink-logit": Answers(
        right={"my_sink": "np.log(np.exp([2.0, 1.0, 0.5, -1.0]).sum()) + np.log(3)"},
        wrong={"my_sink": "np.log(np.exp([2.0, 1.0, 0.5, -1.0]).sum())"}),  # half
    "ex-windows-mask": Answers(
        right={"my_window_mask": _WINDOW_MASK.format(edge="i - window < j")},
        wrong={"my_window_mask": _WINDOW_MASK.format(edge="i - window <= j")}),  # W + 1 keys
    # --- chapter 15, the kernel itself (15_the_kernel_itself.ipynb) -----------------------
    "ex-kernel-row-lse": Answers(
        right={"my_row_lse_kernel": _ROW_LSE.format(mask="cols[None, :] < n_cols",
                                                 other='float("-inf")')},
        # masked columns read as 0, which the sum counts as exp(0 - m), instead of -inf
        wrong={"my_row_lse_kernel": _ROW_LSE.format(mask="cols[None, :] < n_cols",
                                                 other="0.0")}),
    "ex-kernel-causal-tiles": Answers(right={"my_pairs": "272"},
                                      wrong={"my_pairs": "256"}),   # half of all 512 pairs
    "ex-kernel-backward-traffic": Answers(right={"my_bytes": "140017664"},
                                          wrong={"my_bytes": "71303168"}),   # dK/dV alone
}
