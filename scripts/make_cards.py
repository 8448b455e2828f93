#!/usr/bin/env python3
"""Draw the small pictures of the landing page's chapter cards into _static/cards/ (SVG).

Each picture is computed with attncore, like the chapter it stands for, and named by the
chapter's slug (its file name without the number: ``card_why_sqrt_dk`` draws
``_static/cards/why_sqrt_dk.svg`` for ``chapters/02_why_sqrt_dk.ipynb``), so that renumbering
the chapters cannot give a card another chapter's picture. The cards' titles and pitches are
in ``_ext/chapter_cards.py``, keyed the same way. The SVGs are committed; run this again after
changing a picture (from the repository root, with the course's environment):

    .venv/bin/python scripts/make_cards.py

The output is the same on every run (fixed seeds, fixed SVG ids, no date).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import attncore as ac  # noqa: E402

OUT = ROOT / "_static" / "cards"
SIZE = (2.4, 1.2)          # inches; shown at about 240 x 120 CSS pixels
BLUE, ORANGE, GREY = "#3b6fb6", "#d9622b", "#c8c8c8"


def _axes(ax):
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)


def _heat(ax, w):
    # vector cells (pcolormesh), not an embedded bitmap that a browser would blur
    ax.pcolormesh(w, cmap="viridis", vmin=0, vmax=1, edgecolors="white", linewidth=0.3)
    ax.set_aspect("equal")
    ax.invert_yaxis()
    _axes(ax)


def card_how_to_use(fig):
    ax = fig.add_subplot()
    for i, word in enumerate(["read", "run", "check"]):
        ax.add_patch(plt.Rectangle((i * 1.1, 0), 0.9, 0.6, color=[BLUE, ORANGE, "#2e8b57"][i]))
        ax.text(i * 1.1 + 0.45, 0.3, word, ha="center", va="center", color="white",
                fontsize=11)
    ax.set_xlim(-0.1, 3.2)
    ax.set_ylim(-0.2, 0.8)
    _axes(ax)


def card_how_a_model_is_trained(fig):
    # steps of SGD (orange) and Adam (blue) on a stretched bowl, over its contour lines
    scale = np.array([1.0, 12.0])
    ax = fig.add_subplot()
    u, w = np.meshgrid(np.linspace(-2.2, 2.2, 200), np.linspace(-1.1, 1.1, 100))
    ax.contour(u, w, scale[0] * u**2 + scale[1] * w**2, levels=6, colors=GREY,
               linewidths=0.6)
    for color, adam in ((ORANGE, False), (BLUE, True)):
        p, m, v, path = np.array([-2.0, 0.8]), np.zeros(2), np.zeros(2), []
        for t in range(1, 16):
            path.append(p.copy())
            g = 2 * scale * p
            if adam:
                m = 0.9 * m + 0.1 * g
                v = 0.999 * v + 0.001 * g * g
                p = p - 0.25 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
            else:
                p = p - 0.075 * g
        path = np.array(path)
        ax.plot(path[:, 0], path[:, 1], "-o", color=color, markersize=2.5, linewidth=1)
    ax.set_xlim(-2.3, 2.3)
    ax.set_ylim(-1.15, 1.15)
    _axes(ax)


def card_what_attention_computes(fig):
    q = np.array([[1.0, 0.2], [0.1, 1.0], [0.7, 0.7]])
    w = ac.softmax(3 * q @ q.T)
    _heat(fig.add_subplot(), w)


def card_why_sqrt_dk(fig):
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal(1024), rng.standard_normal((8, 1024))
    for col, d_k in enumerate((4, 1024)):
        ax = fig.add_subplot(1, 2, col + 1)
        ax.bar(range(8), ac.softmax(k[:, :d_k] @ q[:d_k]), color=BLUE)
        ax.set_ylim(0, 1)
        _axes(ax)
        ax.spines["bottom"].set_visible(True)


def card_matmul_views(fig):
    ax = fig.add_subplot()
    ax.add_patch(plt.Rectangle((0, 0), 1, 2, color=BLUE, alpha=0.8))
    ax.add_patch(plt.Rectangle((1.8, 0.8), 2, 1.2, color=ORANGE, alpha=0.8))
    ax.add_patch(plt.Rectangle((4.6, 0), 2, 2, color="#2e8b57", alpha=0.8))
    ax.text(1.4, 1.0, "\u00d7", ha="center", va="center", fontsize=14)
    ax.text(4.2, 1.0, "=", ha="center", va="center", fontsize=14)
    ax.set_xlim(-0.1, 6.7)
    ax.set_ylim(-0.1, 2.1)
    ax.set_aspect("equal")
    _axes(ax)


def card_scaled_dot_product_attention(fig):
    rng = np.random.default_rng(0)
    s = rng.standard_normal((6, 6))
    w = ac.softmax(np.where(ac.causal_mask(6, 6), s, -np.inf))
    ax = fig.add_subplot()
    _heat(ax, np.ma.masked_where(~ac.causal_mask(6, 6), w))
    ax.set_facecolor(GREY)


def card_multi_head_attention(fig):
    rng = np.random.default_rng(1)
    for h in range(3):
        ax = fig.add_subplot(1, 3, h + 1)
        _heat(ax, ac.softmax(2.5 * rng.standard_normal((4, 4))))


def card_rotary_positions(fig):
    ax = fig.add_subplot()
    x = np.tile([1.0, 0.0], (12, 1))
    turned = ac.rope(x, base=10000.0)
    t = np.linspace(0, 2 * math.pi, 100)
    ax.plot(np.cos(t), np.sin(t), color=GREY, lw=1)
    ax.scatter(turned[:, 0], turned[:, 1], color=BLUE, s=12)
    ax.plot([0, turned[3, 0]], [0, turned[3, 1]], color=ORANGE, lw=2)
    ax.set_aspect("equal")
    ax.set_xlim(-1.2, 1.2)
    ax.set_ylim(-1.2, 1.2)
    _axes(ax)


def card_tiled_attention(fig):
    ax = fig.add_subplot()
    n, b = 8, 2
    ax.add_patch(plt.Rectangle((0, 0), n, n, fill=False, color=GREY))
    for j in range(0, n, b):
        ax.add_patch(plt.Rectangle((j, 0), b, n, fill=False, color=GREY, lw=0.8))
    ax.add_patch(plt.Rectangle((2 * b, 0), b, n, color=BLUE, alpha=0.85))
    ax.set_xlim(-0.2, n + 0.2)
    ax.set_ylim(-0.2, n + 0.2)
    ax.set_aspect("equal")
    _axes(ax)


def card_backward_pass(fig):
    rng = np.random.default_rng(2)
    p = ac.softmax(rng.standard_normal(6) * 1.5)
    jac = np.diag(p) - np.outer(p, p)               # the softmax's Jacobian
    ax = fig.add_subplot()
    lim = np.abs(jac).max()
    ax.pcolormesh(jac, cmap="RdBu_r", vmin=-lim, vmax=lim, edgecolors="white", linewidth=0.3)
    ax.set_aspect("equal")
    ax.invert_yaxis()
    _axes(ax)


def card_inference(fig):
    ax = fig.add_subplot()
    for step in range(6):
        ax.add_patch(plt.Rectangle((step * 0.5, 0), 0.4, step + 1, color=BLUE, alpha=0.85))
        ax.add_patch(plt.Rectangle((step * 0.5, step + 1), 0.4, 0.9, color=ORANGE))
    ax.set_xlim(-0.1, 3.0)
    ax.set_ylim(0, 7.2)
    _axes(ax)


def card_inside_a_pretrained_model(fig):
    from attncore.pretrained import MiniLM

    model = MiniLM.load(dtype=np.float64)
    w = model.attention_weights("The cat sat on the mat.")
    panels = [(2, 3), (4, 5)]
    for i, (layer, head) in enumerate(panels):
        _heat(fig.add_subplot(1, 2, i + 1), w[layer, head])


def card_the_whole_transformer(fig):
    from attncore.lab import language

    _, _, losses = language.load_checkpoint(language.shipped_checkpoint())
    ax = fig.add_subplot()
    ax.plot(np.arange(len(losses)), losses, color=BLUE, linewidth=1.2)
    ax.set_ylim(0, max(losses) * 1.05)
    _axes(ax)


def card_beyond_one_device(fig):
    P = 4
    contiguous = [4 * (r + 1) for r in range(P)]     # causal blocks of c^2 per rank
    zigzag = [2 * P + 1] * P
    ax = fig.add_subplot()
    ax.bar(np.arange(P) - 0.2, contiguous, width=0.4, color=ORANGE)
    ax.bar(np.arange(P) + 0.2, zigzag, width=0.4, color=BLUE)
    _axes(ax)


def card_latent_attention_and_speculative_decoding(fig):
    d_h, heads, latent, rope, layers = 128, 128, 512, 64, 60    # DeepSeek-V2
    kib = [2 * kv * d_h * 2 * layers / 1024 for kv in (heads, 8, 1)]
    kib.append((latent + rope) * 2 * layers / 1024)              # MHA, GQA-8, MQA, MLA
    ax = fig.add_subplot()
    ax.bar(range(4), kib, color=[GREY, GREY, GREY, BLUE])
    ax.set_yscale("log")
    ax.minorticks_off()
    _axes(ax)


def card_positions(fig):
    pe = ac.sinusoidal_positions(32, 64)                 # (positions, d_model)
    ax = fig.add_subplot()
    for col, colour in zip((2, 6, 12), (ORANGE, BLUE, "#2e8b57")):   # fast to slow
        ax.plot(pe[:, col], color=colour, lw=1.6)
    _axes(ax)


def card_a_real_llm(fig):
    # SmolLM2-135M's attention: 9 query heads share 3 key-value heads (grouped-query)
    n_q, n_kv = 9, 3
    ax = fig.add_subplot()
    for h in range(n_q):
        g = h // (n_q // n_kv)
        ax.plot([h + 0.4, 3 * g + 1.4], [1.6, 0.6], color=GREY, lw=0.8)
        ax.add_patch(plt.Rectangle((h, 1.6), 0.8, 0.5, color=BLUE))
    for g in range(n_kv):
        ax.add_patch(plt.Rectangle((3 * g + 0.9, 0.1), 1.0, 0.5, color=ORANGE))
    ax.set_xlim(-0.2, 9.0)
    ax.set_ylim(0, 2.2)
    _axes(ax)


def card_the_kernel_itself(fig):
    n, b = 24, 4                                          # scores and tile size
    causal = ac.causal_mask(n, n)
    visited = causal.reshape(n // b, b, n // b, b).any(axis=(1, 3))   # tiles a program visits
    ax = fig.add_subplot()
    ax.pcolormesh(np.where(visited, 1.0, 0.0), cmap="Blues", vmin=-0.3, vmax=1.3,
                  edgecolors="white", linewidth=1.5)
    ax.set_aspect("equal")
    ax.invert_yaxis()
    _axes(ax)


def card_caches_in_serving(fig):
    # three sequences' blocks of keys and values, scattered over one pool of pages
    rng = np.random.default_rng(3)
    owner = np.full(24, -1)
    owner[rng.permutation(24)[:17]] = rng.choice(3, size=17)
    ax = fig.add_subplot()
    colours = [BLUE, ORANGE, "#2e8b57"]
    for page, who in enumerate(owner):
        ax.add_patch(plt.Rectangle((page % 8, page // 8), 0.85, 0.8,
                                   color=GREY if who < 0 else colours[who]))
    ax.set_xlim(-0.1, 8)
    ax.set_ylim(-0.1, 3)
    ax.set_aspect("equal")
    _axes(ax)


def card_windows_sinks_and_sparsity(fig):
    allowed = ac.sliding_window_mask(10, 10, 3, sink_tokens=1)
    ax = fig.add_subplot()
    ax.pcolormesh(np.where(allowed, 1.0, 0.0), cmap="Blues", vmin=-0.2, vmax=1.2,
                  edgecolors="white", linewidth=0.6)
    ax.set_aspect("equal")
    ax.invert_yaxis()
    _axes(ax)


def card_gates_and_the_delta_rule(fig):
    rng = np.random.default_rng(4)
    n, d = 4, 5
    k = rng.standard_normal((n, d))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    q, v = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    state = None
    for t in range(n):                                    # the state after each token
        _, state = ac.gated_delta_rule(q[t:t + 1], k[t:t + 1], v[t:t + 1],
                                       np.full(1, 0.8), np.full(1, 0.9),
                                       initial_state=state, return_state=True)
        ax = fig.add_subplot(1, n, t + 1)
        lim = 0.8
        ax.pcolormesh(state, cmap="RdBu_r", vmin=-lim, vmax=lim, edgecolors="white",
                      linewidth=0.3)
        ax.set_aspect("equal")
        ax.invert_yaxis()
        _axes(ax)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    plt.rcParams.update({"svg.hashsalt": "attncore-cards", "figure.facecolor": "white",
                         "svg.fonttype": "path"})
    for stale in OUT.glob("*.svg"):          # a renamed or removed chapter's picture goes
        stale.unlink()
    for name, draw in sorted(globals().items()):
        if not name.startswith("card_"):
            continue
        fig = plt.figure(figsize=SIZE, layout="constrained")
        draw(fig)
        fig.savefig(OUT / f"{name[5:]}.svg", metadata={"Date": None}, facecolor="white")
        plt.close(fig)
        print(OUT / f"{name[5:]}.svg")


if __name__ == "__main__":
    main()
