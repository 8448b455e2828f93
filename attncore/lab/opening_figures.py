"""The picture each chapter opens with: its problem, stated in one figure.

One function per chapter, named after the problem it shows: 1 :func:`soft_lookup`,
2 :func:`why_sqrt_dk`, 3 :func:`four_views`, 4 :func:`causal_scores`,
5 :func:`heads_on_a_sentence`, 6 :func:`blind_to_order`, 7 :func:`rotary_scores`,
8 :func:`score_memory`, 9 :func:`softmax_gradient`, 10 :func:`kv_cache_growth`,
11 :func:`lm_loss_curve`, 12 :func:`minilm_head`, 13 :func:`next_token_of_a_real_model`,
14 :func:`causal_work_per_rank`,
15 :func:`programs_over_tiles`, 16 :func:`reserved_and_used`, 17 :func:`latent_and_speculative`,
18 :func:`windows_and_sinks`,
19 :func:`memory_that_only_adds`.
Each computes what it shows with attncore, draws it on a new white figure of 8 x 3 inches
with text at 9 pt or more, and returns the :class:`matplotlib.figure.Figure`; the same call
draws the same figure (fixed seeds, no timing). A chapter shows it with::

    from attncore.lab import opening_figures
    opening_figures.why_sqrt_dk(); plt.show()
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["soft_lookup", "why_sqrt_dk", "four_views",
           "causal_scores", "heads_on_a_sentence", "blind_to_order", "rotary_scores",
           "score_memory", "softmax_gradient", "kv_cache_growth", "minilm_head",
           "lm_loss_curve", "next_token_of_a_real_model", "causal_work_per_rank",
           "programs_over_tiles", "reserved_and_used", "latent_and_speculative",
           "memory_that_only_adds", "windows_and_sinks"]

SIZE = (8.0, 3.0)
"""Width and height of every opening figure, in inches."""

POINTS = 9
"""The smallest text size used, in points."""

_SENTENCE = ("the", "dog", "bites", "the", "man")


def _figure(ncols: int, **kwargs: Any) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    with plt.rc_context({"font.size": POINTS + 1, "axes.titlesize": POINTS + 1,
                         "axes.labelsize": POINTS + 1, "xtick.labelsize": POINTS,
                         "ytick.labelsize": POINTS, "legend.fontsize": POINTS,
                         "figure.facecolor": "white"}):
        fig, axes = plt.subplots(1, ncols, figsize=SIZE, layout="constrained", **kwargs)
    return fig, axes


def _style(ax: Any) -> None:
    """Tick labels at 9 pt or more (rc_context only covers the figure's creation)."""
    ax.tick_params(labelsize=POINTS)
    ax.title.set_fontsize(POINTS + 1)
    ax.xaxis.label.set_fontsize(POINTS + 1)
    ax.yaxis.label.set_fontsize(POINTS + 1)


def _heatmap(ax: Any, m: np.ndarray, *, rows: Any = None, cols: Any = None,
             cmap: str = "viridis", vmin: float | None = None,
             vmax: float | None = None) -> Any:
    image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    if rows is not None:
        ax.set_yticks(range(len(rows)), rows)
    if cols is not None:
        ax.set_xticks(range(len(cols)), cols, rotation=0)
    _style(ax)
    return image


def soft_lookup() -> Any:
    """Chapter 1: a hard dictionary lookup next to attention's soft one.

    One query against five keys (seeded, width 4): the hard lookup puts weight 1 on the
    best-matching key; attention's softmax of the dot products spreads the weight over
    every key.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac

    rng = np.random.default_rng(1)
    keys = rng.standard_normal((5, 4))
    query = keys[2] + 0.6 * rng.standard_normal(4)
    soft = ac.softmax(keys @ query / 2.0)          # scale 1/sqrt(4)
    hard = np.eye(5)[np.argmax(keys @ query)]
    names = [f"key {i}" for i in range(5)]
    fig, axes = _figure(2, sharey=True)
    for ax, w, title, colour in ((axes[0], hard, "dictionary: one key, weight 1", "0.5"),
                                 (axes[1], soft, "attention: every key, weights sum to 1",
                                  "tab:blue")):
        ax.bar(names, w, color=colour)
        for i, value in enumerate(w):
            ax.text(i, value + 0.02, f"{value:.2f}", ha="center", fontsize=POINTS)
        ax.set_title(title)
        ax.set_ylim(0, 1.15)
        _style(ax)
    axes[0].set_ylabel("weight of the key's value")
    return fig


def why_sqrt_dk() -> Any:
    """Chapter 2: one query's softmax weights over eight keys as d_k grows.

    Queries and keys have independent standard normal entries (seed 0). Unscaled, the
    scores' spread grows like sqrt(d_k) and the row turns one-hot; divided by sqrt(d_k)
    it keeps the same spread at every width.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac

    widths = (4, 16, 64, 256, 1024)
    rng = np.random.default_rng(0)
    unscaled, scaled = [], []
    for d_k in widths:
        q = rng.standard_normal(d_k)
        k = rng.standard_normal((8, d_k))
        unscaled.append(ac.softmax(k @ q))
        scaled.append(ac.softmax(k @ q / math.sqrt(d_k)))
    fig, axes = _figure(2)
    rows = [f"$d_k$ = {d}" for d in widths]
    for ax, w, title in ((axes[0], unscaled, r"softmax($q \cdot k$): one-hot"),
                         (axes[1], scaled, r"softmax($q \cdot k/\sqrt{d_k}$): spread")):
        image = _heatmap(ax, np.array(w), rows=rows, cols=range(8), vmin=0, vmax=1)
        ax.set_xlabel("key")
        ax.set_title(title)
    cbar = fig.colorbar(image, ax=axes, shrink=0.9, label="weight")
    cbar.ax.tick_params(labelsize=POINTS)
    return fig


def four_views() -> Any:
    """Chapter 3: the four readings of one product C = AB, as the part of C each builds.

    A 4 x 3 times 3 x 4 product of small integers: an entry is one row of A against one
    column of B; a column of C mixes A's columns; a row of C mixes B's rows; an outer
    product of a column of A and a row of B is a whole matrix, and three of them add up
    to C.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from attncore.matmul_views import matmul_by_entries

    rng = np.random.default_rng(3)
    a = rng.integers(-2, 3, (4, 3)).astype(float)
    b = rng.integers(-2, 3, (3, 4)).astype(float)
    c = matmul_by_entries(a, b)
    entry = np.full_like(c, np.nan)
    entry[1, 2] = c[1, 2]
    column = np.full_like(c, np.nan)
    column[:, 2] = c[:, 2]
    row = np.full_like(c, np.nan)
    row[1] = c[1]
    outer = np.outer(a[:, 0], b[0])
    fig, axes = _figure(4)
    limit = float(np.abs(c).max())
    panels = ((entry, "entry: row · column"), (column, "column: A times\na column of B"),
              (row, "row: a row of A\ntimes B"), (outer, "outer product:\n1 of 3 terms"))
    for ax, (m, title) in zip(axes, panels):
        _heatmap(ax, m, cmap="coolwarm", vmin=-limit, vmax=limit)
        for (i, j), value in np.ndenumerate(m):
            if not np.isnan(value):
                ax.text(j, i, f"{int(round(value))}", ha="center", va="center", fontsize=POINTS)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title)
    return fig


def causal_scores() -> Any:
    """Chapter 4: a causal layer's scores, its mask and the weights that result.

    Five tokens with seeded queries and keys of width 8: the scaled scores, the causal
    mask (a query sees itself and earlier tokens), and the softmax of the masked scores.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac

    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((5, 8)) for _ in range(3))
    scores = q @ k.T / math.sqrt(8)
    mask = ac.causal_mask(5, 5)
    _, weights = ac.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    fig, axes = _figure(3)
    _heatmap(axes[0], scores, rows=_SENTENCE, cols=_SENTENCE, cmap="coolwarm",
             vmin=-2.5, vmax=2.5)
    axes[0].set_title(r"scores $QK^\top/\sqrt{d_k}$")
    _heatmap(axes[1], mask.astype(float), rows=_SENTENCE, cols=_SENTENCE, cmap="Greys_r",
             vmin=0, vmax=1)
    axes[1].set_title("causal mask (white: allowed)")
    _heatmap(axes[2], weights, rows=_SENTENCE, cols=_SENTENCE, vmin=0, vmax=1)
    axes[2].set_title("weights: rows sum to 1")
    for ax in axes:
        ax.tick_params(axis="x", rotation=45)
    return fig


def heads_on_a_sentence() -> Any:
    """Chapter 5: four heads of one layer, each with its own map over one sentence.

    A seeded multi-head layer (width 16, four heads) on "the dog bites the man", with one
    seeded embedding per word: the same input, four different weight maps.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac

    rng = np.random.default_rng(5)
    embedding = {w: rng.standard_normal(16) * 2 for w in sorted(set(_SENTENCE))}
    x = np.stack([embedding[w] for w in _SENTENCE])
    params = ac.init_multihead(16, 4, seed=5)
    _, weights = ac.multi_head_attention(params, x, return_weights=True)
    fig, axes = _figure(4)
    for h, ax in enumerate(axes):
        _heatmap(ax, weights[h], rows=_SENTENCE if h == 0 else None, cols=_SENTENCE,
                 vmin=0, vmax=1)
        if h:
            ax.set_yticks([])
        ax.tick_params(axis="x", rotation=60)
        ax.set_title(f"head {h}")
    return fig


def blind_to_order() -> Any:
    """Chapter 6: without positions, a word's output ignores where it stands; with them not.

    "the dog bites the man" and "the man bites the dog" through one seeded multi-head
    layer: for each word of the second sentence, the largest difference between its output
    and the same word's output in the first, without positions and with the sinusoidal
    encoding added to the word vectors.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac

    rng = np.random.default_rng(6)
    first = list(_SENTENCE)
    second = ["the", "man", "bites", "the", "dog"]
    embedding = {w: rng.standard_normal(16) for w in sorted(set(first))}
    x1 = np.stack([embedding[w] for w in first])
    x2 = np.stack([embedding[w] for w in second])
    params = ac.init_multihead(16, 4, seed=6)
    positions = ac.sinusoidal_positions(5, 16)
    # Where each word of the second sentence stands in the first (the two "the" keep
    # their order).
    where = [1 if w == "dog" else 4 if w == "man" else i for i, w in enumerate(second)]
    diffs = {}
    for name, run in (("no positions", lambda x: ac.multi_head_attention(params, x)),
                      ("sinusoidal positions",
                       lambda x: ac.multi_head_attention(params, x + positions))):
        out1, out2 = run(x1), run(x2)
        diffs[name] = np.abs(out2 - out1[where]).max(axis=1)
    fig, axes = _figure(2, sharey=True)
    labels = [f"{w}\n(was {i})" for w, i in zip(second, where)]
    for ax, (name, d), colour in zip(axes, diffs.items(), ("0.5", "tab:orange")):
        ax.bar(range(5), d, color=colour)
        ax.set_xticks(range(5), labels)
        ax.set_title(f"{name}: " + ("same output, moved" if name == "no positions"
                                    else "output depends on the place"))
        _style(ax)
    top = diffs["sinusoidal positions"].max()
    axes[0].text(2, 0.5 * top, "0 (up to rounding)"
                 if diffs["no positions"].max() < 1e-12 else "not 0",
                 ha="center", fontsize=POINTS)
    axes[0].set_ylabel("largest change in the\nword's output")
    return fig


def rotary_scores() -> Any:
    """Chapter 7: with RoPE a score depends on the two positions only through their offset.

    One seeded query and one seeded key, the query placed at every position m and the key at
    every position n from 0 to 15: the score with the sinusoidal encoding added to both
    vectors, and the score with both vectors rotated by RoPE.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac

    n, d = 16, 16
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((2, d))
    pos = np.arange(n)
    pe = ac.sinusoidal_positions(n, d)
    added = (q + pe) @ (k + pe).T / math.sqrt(d)                  # [m, n]
    rotated = (ac.rope(np.tile(q, (n, 1)), pos) @ ac.rope(np.tile(k, (n, 1)), pos).T
               / math.sqrt(d))
    fig, axes = _figure(2)
    for ax, m, title in ((axes[0], added, "positions added: depends on m and n"),
                         (axes[1], rotated, "RoPE: depends on n - m only")):
        image = _heatmap(ax, m, cmap="RdBu_r", vmin=-np.abs(m).max(), vmax=np.abs(m).max())
        ax.set_xticks([0, 5, 10, 15])
        ax.set_yticks([0, 5, 10, 15])
        ax.set(xlabel="key position n", ylabel="query position m", title=title)
        _style(ax)
        fig.colorbar(image, ax=ax, shrink=0.85)
    return fig


def score_memory() -> Any:
    """Chapter 7: memory for one head's scores against the sequence length N.

    The reference computation holds all N x N scores; the tiled one holds one block of
    N x 128 at a time. Float32 (4 bytes per number), one head, d_k = 128 not counted.

    Returns
    -------
    matplotlib.figure.Figure
    """
    n = 2 ** np.arange(8, 18)
    naive = 4.0 * n * n
    tiled = 4.0 * n * 128
    fig, axes = _figure(1)
    ax = axes
    ax.loglog(n, naive, "o-", label=r"reference: all $N^2$ scores")
    ax.loglog(n, tiled, "s-", label=r"tiled: one block of $N \times 128$")
    ax.axhline(80 * 2 ** 30, color="0.5", ls="--")
    ax.text(n[0], 80 * 2 ** 30 / 2, "80 GiB, one GPU's memory", va="top", fontsize=POINTS)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("bytes of scores, one head")
    ax.set_xticks(n[::2], [f"{v:,}" for v in n[::2]])
    ax.legend(loc="lower right")
    _style(ax)
    return fig


def softmax_gradient() -> Any:
    """Chapter 8: how the gradient of the weights becomes the gradient of the scores.

    Five tokens, seeded q, k, v (width 8) and output gradient: the weights P, the
    gradient dP = dO V^T that reaches them, and the gradient dS of the scores after the
    softmax, P * (dP - rowsum(P * dP)), whose rows sum to zero.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac

    rng = np.random.default_rng(8)
    q, k, v, d_out = (rng.standard_normal((5, 8)) for _ in range(4))
    _, p = ac.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    dp = d_out @ v.T
    ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
    fig, axes = _figure(3)
    panels = ((p, "weights P", "viridis", 0.0, 1.0),
              (dp, r"$dP = dO\,V^\top$", "coolwarm", -6.0, 6.0),
              (ds, r"$dS = P \circ (dP - $rowsum$)$", "coolwarm", -1.5, 1.5))
    for ax, (m, title, cmap, lo, hi) in zip(axes, panels):
        image = _heatmap(ax, m, rows=_SENTENCE, cols=_SENTENCE, cmap=cmap, vmin=lo, vmax=hi)
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
        fig.colorbar(image, ax=ax, shrink=0.8).ax.tick_params(labelsize=POINTS)
    return fig


def kv_cache_growth() -> Any:
    """Chapter 9: the KV cache grows by one token per decoding step.

    LLaMA-2 70B's shape (80 layers, 64 query heads of width 128, 16-bit numbers) with
    64 key/value heads (multi-head), 8 (grouped-query, as released) and 1 (multi-query):
    the cache of one sequence against the decoding step, and the bytes per token.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from attncore.lab.inference import PUBLISHED, kv_cache_bytes

    model = PUBLISHED["LLaMA-2 70B"]
    kinds = {"MHA (64)": 64, "GQA (8)": 8, "MQA (1)": 1}
    steps = np.arange(0, 4097, 256)
    fig, axes = _figure(2)
    for name, kv in kinds.items():
        gib = [kv_cache_bytes(model, int(s), kv_heads=kv) / 2 ** 30 for s in steps]
        axes[0].plot(steps, gib, label=name)
    axes[0].set_xlabel("decoding step (tokens held)")
    axes[0].set_ylabel("cache, GiB")
    axes[0].set_title("one sequence's KV cache")
    axes[0].legend(title="key/value heads", title_fontsize=POINTS)
    per_token = [kv_cache_bytes(model, 1, kv_heads=kv) / 2 ** 10 for kv in kinds.values()]
    bars = axes[1].bar(list(kinds), per_token, color=["C0", "C1", "C2"])
    axes[1].bar_label(bars, [f"{b:,.0f} KiB" for b in per_token], fontsize=POINTS)
    axes[1].set_yscale("log")
    axes[1].set_ylim(top=max(per_token) * 4)
    axes[1].set_title("bytes per token")
    for ax in axes:
        _style(ax)
    return fig


def minilm_head() -> Any:
    """Chapter 10: the weights of one head of all-MiniLM-L6-v2 on one sentence.

    The head (of any layer) that puts the most weight on the previous token, on
    "the cat sat on the mat because it was tired." Needs the installed model package.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from attncore.pretrained import MiniLM

    model = MiniLM.load()
    batch = model.tokenize(["the cat sat on the mat because it was tired."])
    out = model.forward(batch, return_attention=True)
    tokens = batch.tokens[0]
    weights = np.stack([np.asarray(a[0]) for a in out.attention])  # (layers, heads, n, n)
    previous = np.diagonal(weights, offset=-1, axis1=-2, axis2=-1).mean(axis=-1)
    layer, head = (int(i) for i in np.unravel_index(np.argmax(previous), previous.shape))
    fig, axes = _figure(1)
    image = _heatmap(axes, weights[layer, head], rows=tokens, cols=tokens, vmin=0, vmax=1)
    axes.tick_params(axis="x", rotation=60)
    axes.set_title(f"layer {layer}, head {head}: each row, where one token looks")
    axes.set_xlabel("key token")
    fig.colorbar(image, ax=axes).ax.tick_params(labelsize=POINTS)
    return fig


def lm_loss_curve() -> Any:
    """Chapter 11: the course's language model learning, step by step.

    The training loss stored with the shipped checkpoint (a two-layer character model),
    its 50-step moving average, and the loss of guessing every character uniformly.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import json

    from safetensors import safe_open

    from attncore.lab import language

    # The losses are in the file's metadata: no need to build the model (or import torch).
    with safe_open(str(language.shipped_checkpoint()), framework="np") as f:
        losses = np.asarray(json.loads(f.metadata()["losses"]))
        vocab_size = f.get_slice("tok_emb").get_shape()[0]
    steps = np.arange(1, len(losses) + 1)
    smooth = np.convolve(losses, np.ones(50) / 50, mode="valid")
    fig, axes = _figure(1)
    ax = axes
    ax.plot(steps, losses, color="0.75", lw=0.8, label="loss per step")
    ax.plot(steps[49:], smooth, color="tab:blue", label="50-step average")
    ax.axhline(math.log(vocab_size), color="tab:red", ls="--",
               label=f"uniform guess over {vocab_size} characters")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.legend()
    _style(ax)
    return fig


def causal_work_per_rank() -> Any:
    """Chapter 14: causal attention's work per rank, contiguous shards against zigzag.

    16 positions on 4 ranks: each query row of the causal score matrix coloured by the
    rank that holds it, and the number of query-key pairs each rank computes.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.colors as mcolors

    import attncore as ac
    from attncore.distributed import sequence_positions

    n, world = 16, 4
    allowed = ac.causal_mask(n, n)
    fig, axes = _figure(3, width_ratios=[1, 1, 1.3])
    cmap = mcolors.ListedColormap(["white", "C0", "C1", "C2", "C3"])
    work = {}
    for ax, layout in zip(axes, ("contiguous", "zigzag")):
        owner = np.zeros((n, n))
        work[layout] = []
        for rank in range(world):
            rows = np.asarray(sequence_positions(n, world, rank, layout=layout))
            owner[rows] = rank + 1
            work[layout].append(int(allowed[rows].sum()))
        _heatmap(ax, np.where(allowed, owner, 0), cmap=cmap, vmin=-0.5, vmax=4.5)
        ax.set_title(f"{layout} shards")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    x = np.arange(world)
    axes[2].bar(x - 0.2, work["contiguous"], 0.4, label="contiguous", color="0.6")
    axes[2].bar(x + 0.2, work["zigzag"], 0.4, label="zigzag", color="tab:purple")
    axes[2].set_xticks(x, [f"rank {r}" for r in x])
    axes[2].set_ylabel("query-key pairs")
    axes[2].set_title("work per rank")
    axes[2].legend()
    _style(axes[2])
    return fig


def _cache_bars(ax: Any) -> None:
    """KV-cache KiB per token for DeepSeek-V2's sizes, four ways, as bars on ``ax``."""
    from attncore.lab.inference import ModelShape, kv_cache_bytes

    shape = ModelShape("DeepSeek-V2 sizes", 60, 128 * 128, 128, 128, 128, 236e9, 4096)
    layers, d_latent, d_rope = 60, 512, 64
    per_token = {"MHA\n128 kv heads": kv_cache_bytes(shape, 1),
                 "GQA\n8 groups": kv_cache_bytes(shape, 1, kv_heads=8),
                 "MQA\n1 kv head": kv_cache_bytes(shape, 1, kv_heads=1),
                 "MLA\nlatent 512 + 64": layers * (d_latent + d_rope) * 2}
    kib = np.array(list(per_token.values())) / 2 ** 10
    bars = ax.barh(list(per_token), kib, color=["C0", "C1", "C2", "C3"])
    ax.bar_label(bars, [f"{v:,.1f} KiB" for v in kib], fontsize=POINTS, padding=3)
    ax.set_xscale("log")
    ax.set_xlim(right=kib.max() * 8)
    ax.invert_yaxis()
    ax.set_xlabel("KV cache per token (KiB, log scale)")
    _style(ax)


def latent_and_speculative() -> Any:
    """Chapter 17: two ways to get more tokens out of each read of memory.

    Left, the KV cache per token for DeepSeek-V2's sizes (60 layers, 128 heads of width
    128, 16-bit numbers): multi-head, grouped-query with 8 groups, multi-query, and
    multi-head latent attention, which caches a latent of width 512 and a RoPE key of
    width 64 per layer. Right, speculative decoding: the expected
    tokens per call of the target model, ``(1 - a**(g + 1)) / (1 - a)``, against the
    number ``g`` of drafted tokens, for three acceptance rates ``a``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, axes = _figure(2, width_ratios=[1.25, 1])
    _cache_bars(axes[0])
    axes[0].set_title("what a step reads per cached token")
    _style(axes[0])
    gamma = np.arange(0, 9)
    for alpha, colour in ((0.6, "C4"), (0.8, "C5"), (0.9, "C6")):
        tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)
        axes[1].plot(gamma, tokens, marker="o", color=colour, label=f"{alpha}")
    axes[1].set_xlabel("tokens drafted per round")
    axes[1].set_ylabel("tokens per target call")
    axes[1].set_title("what a step emits")
    axes[1].legend(title="acceptance rate", title_fontsize=POINTS)
    _style(axes[1])
    return fig


def reserved_and_used() -> Any:
    """Chapter 16: cache memory a server reserves for sequences against what they use.

    Eight sequences whose lengths are drawn from the log-normal workload of the chapter
    (median about 150 tokens, at most 2048): a contiguous cache reserves the maximum,
    2048 positions, for each; a paged cache holds blocks of 16 positions as the sequence
    grows (:func:`attncore.lab.serving.block_usage`, from real caches).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from attncore.lab.serving import block_usage

    lengths = np.random.default_rng(11).lognormal(5.0, 1.0, size=8).astype(int)
    lengths = np.clip(lengths, 1, 2048).tolist()
    fig, axes = _figure(2, sharey=True)
    rows = np.arange(len(lengths))
    for ax, (title, held) in zip(axes, (
            ("contiguous, 2048 each", [2048] * len(lengths)),
            ("paged: blocks of 16 as needed",
             [block_usage([n], max_length=2048, block_size=16).paged for n in lengths]))):
        ax.barh(rows, held, color="0.85", label="held, unused")
        ax.barh(rows, lengths, color="C0", label="used")
        usage = 1 - sum(lengths) / sum(held)
        ax.set_title(f"{title}: {usage:.0%} unused")
        ax.set_xlim(0, 2048)
        ax.set_xticks([0, 512, 1024, 1536, 2048])
        ax.set_xlabel("cache positions")
        _style(ax)
    axes[0].set_yticks(rows, [f"seq {r}" for r in rows])
    axes[0].invert_yaxis()
    axes[1].legend(loc="lower right")
    return fig


def programs_over_tiles() -> Any:
    """Chapter 15: a flash-attention kernel's programs over the tiles of causal scores.

    128 queries and keys in tiles of 32: each program owns one row of tiles (one tile of
    queries) and walks the key tiles left to right; under a causal mask it skips the tiles
    above the diagonal and masks inside the diagonal tile. Beside it, the number of key
    tiles each program visits.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.colors as mcolors

    import attncore as ac

    n, block = 128, 32
    tiles = n // block
    allowed = ac.causal_mask(n, n)
    owner = np.zeros((n, n))
    visits = []
    for program in range(tiles):
        rows = slice(program * block, (program + 1) * block)
        # a tile is computed when any of its scores is allowed (the causal skip)
        seen = [bool(allowed[rows, k * block:(k + 1) * block].any()) for k in range(tiles)]
        visits.append(sum(seen))
        for k, used in enumerate(seen):
            if used:
                tile = owner[rows, k * block:(k + 1) * block]
                tile[allowed[rows, k * block:(k + 1) * block]] = program + 1
    fig, axes = _figure(2, width_ratios=[1, 1.3])
    cmap = mcolors.ListedColormap(["white", "C0", "C1", "C2", "C3"])
    _heatmap(axes[0], owner, cmap=cmap, vmin=-0.5, vmax=4.5)
    for edge in range(1, tiles):
        axes[0].axhline(edge * block - 0.5, color="0.3", linewidth=0.8)
        axes[0].axvline(edge * block - 0.5, color="0.3", linewidth=0.8)
    axes[0].set_title("causal scores, one colour per program")
    axes[0].set_xlabel("key")
    axes[0].set_ylabel("query")
    axes[1].bar(np.arange(tiles), visits, color=[f"C{p}" for p in range(tiles)])
    axes[1].set_xticks(np.arange(tiles), [f"program {p}" for p in range(tiles)])
    axes[1].set_yticks(np.arange(tiles + 1))
    axes[1].set_ylabel("key tiles visited")
    axes[1].set_title(f"tiles of {block}: {sum(visits)} of {tiles * tiles} computed")
    _style(axes[0])
    _style(axes[1])
    return fig


def memory_that_only_adds() -> Any:
    """Chapter 19: a memory of fixed size that only adds loses even its newest facts.

    Left, what one head holds per layer as the context grows, for heads of width 128:
    the KV cache of softmax attention (``2 n d`` numbers) against the ``d x d`` state of
    linear attention and of the delta rule. Right, associative recall in ``R^16``
    (:func:`attncore.lab.recall.recall_task`, the 20 seeds of the chapter's table): ``n``
    pairs are written one per
    token and the newest 4 are asked; the state that only adds
    (:func:`~attncore.gated_delta_rule` with ``erase=False``) against the delta rule
    (``erase=True``), both with ``g = beta = 1``, and softmax attention over the whole
    cache (scale 30).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import attncore as ac
    from attncore.lab.recall import recall_accuracy, recall_task

    fig, axes = _figure(2)
    d = 128
    tokens = np.arange(0, 4097, 256)
    axes[0].plot(tokens, 2 * tokens * d / 1e3, color="C3", label="KV cache, 2nd")
    axes[0].plot(tokens, np.full(len(tokens), d * d / 1e3), color="C0",
                 label="state, d x d")
    axes[0].set_xlabel("tokens in the context")
    axes[0].set_ylabel("thousands of numbers")
    axes[0].set_title(f"one head's memory, d = {d}")
    axes[0].legend()
    sizes, newest, seeds = (4, 8, 16, 32, 64, 128, 256), 4, range(20)
    curves = {"softmax, whole cache": [], "adds only": [], "delta rule": []}
    for n in sizes:
        accs = {name: [] for name in curves}
        for seed in seeds:
            keys, values = recall_task(n, 16, seed=seed)
            asked = np.arange(n - newest, n)
            accs["softmax, whole cache"].append(recall_accuracy(
                ac.scaled_dot_product_attention(keys[asked], keys, values, scale=30.0),
                values, asked))
            for name, erase in (("adds only", False), ("delta rule", True)):
                _, state = ac.gated_delta_rule(keys, keys, values, 1.0, 1.0,
                                               erase=erase, return_state=True)
                accs[name].append(recall_accuracy(keys[asked] @ state.T, values, asked))
        for name in curves:
            curves[name].append(np.mean(accs[name]))
    for (name, acc), colour in zip(curves.items(), ("C3", "C1", "C0")):
        axes[1].plot(sizes, acc, marker="o", color=colour, label=name)
    axes[1].set_xscale("log", base=2)
    axes[1].set_xticks(sizes, [str(n) for n in sizes])
    axes[1].set_ylim(-0.05, 1.05)
    axes[1].set_xlabel("pairs written")
    axes[1].set_ylabel("newest 4 recalled")
    axes[1].set_title("recall in 16 dimensions")
    axes[1].legend()
    for ax in axes:
        _style(ax)
    return fig


def windows_and_sinks() -> Any:
    """Chapter 18: which keys a query sees, and what that saves.

    Left, 16 positions under a sliding window of 4 with 2 sink tokens
    (:func:`attncore.sliding_window_mask`): the band of the last 4 positions, the two
    first columns kept for every query, and the causal keys the window drops. Right, the
    scores tiled attention computes (blocks of 128, :func:`attncore.tiled_attention_work`)
    against the sequence length, causal and with a window of 512: quadratic against
    linear.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.colors as mcolors

    import attncore as ac

    n, window, sinks = 16, 4, 2
    band = ac.sliding_window_mask(n, n, window)
    kept = ac.sliding_window_mask(n, n, window, sink_tokens=sinks)
    causal = ac.causal_mask(n, n)
    picture = np.where(band, 3, np.where(kept, 2, np.where(causal, 1, 0)))
    fig, axes = _figure(2, width_ratios=[1, 1.3])
    cmap = mcolors.ListedColormap(["white", "0.85", "C1", "C0"])
    ticks = list(range(0, n, 3))
    _heatmap(axes[0], picture, rows=ticks, cols=ticks, cmap=cmap, vmin=-0.5, vmax=3.5)
    axes[0].set_yticks(ticks, ticks)
    axes[0].set_xticks(ticks, ticks)
    axes[0].set_title(f"window {window} + {sinks} sink tokens")
    axes[0].set_xlabel("key")
    axes[0].set_ylabel("query")
    from matplotlib.patches import Patch

    axes[0].legend(handles=[Patch(color="C0", label="window"),
                            Patch(color="C1", label="sinks"),
                            Patch(color="0.85", label="dropped")],
                   loc="upper right", fontsize=POINTS, framealpha=1)
    lengths = [1024, 2048, 4096, 8192, 16384, 32768]
    for label, kw, colour in (("causal", {}, "C3"), ("window 512", {"window": 512}, "C0")):
        scores = [ac.tiled_attention_work(m, m, block_size=128, causal=True, **kw)
                  .score_entries for m in lengths]
        axes[1].plot(lengths, scores, marker="o", color=colour, label=label)
    axes[1].set_xscale("log", base=2)
    axes[1].set_yscale("log")
    axes[1].set_xlabel("sequence length")
    axes[1].set_ylabel("scores computed")
    axes[1].set_title("tiled attention's work, blocks of 128")
    axes[1].legend()
    _style(axes[0])
    _style(axes[1])
    return fig


def next_token_of_a_real_model() -> Any:
    """Chapter 13: a real chat model, computed by attncore: SmolLM2-135M-Instruct's
    probabilities for the token after "The capital of France is".

    The eight most likely next tokens, as :meth:`attncore.pretrained.SmolLM2.logits` (the
    model's 30 blocks computed by attncore, in float32, from its 4-bit file) gives them.
    Needs the installed model package (loaded once per process by
    :func:`attncore.lab.real_llm.smollm2`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import torch

    from attncore.lab import real_llm

    model = real_llm.smollm2()
    prompt = "The capital of France is"
    logits = model.logits(model.encode(prompt))[-1].double()
    top = torch.topk(torch.softmax(logits, -1), 8)
    labels = real_llm.display_tokens(model, top.indices.numpy())
    probs = top.values.numpy()
    fig, ax = _figure(1)
    rows = np.arange(len(labels))[::-1]
    ax.barh(rows, probs, color="tab:blue")
    ax.set_yticks(rows, labels)
    for row, prob in zip(rows, probs):
        ax.text(prob + 0.01, row, f"{prob:.2f}", va="center", fontsize=POINTS)
    ax.set_xlim(0, 1)
    ax.set_xlabel("probability of the next token")
    ax.set_title(f"SmolLM2-135M, computed by attncore: the token after {prompt!r}")
    _style(ax)
    return fig
