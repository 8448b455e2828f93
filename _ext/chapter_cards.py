"""The landing page's chapter cards, and what the landing page says with or without a repository.

``:::{chapter-cards}`` writes one card per chapter of ``_toc.yml``, in its order and under
its part's caption, as the sidebar groups them: the number the sidebar gives it, its title
(the notebook's first heading, up to a colon), the one-line pitch and the picture's alt
text below (``CARDS``), and its picture,
``_static/cards/<slug>.svg``, drawn by ``scripts/make_cards.py``. Everything is keyed by the
chapter's slug (the file name without its number), so that renumbering the chapters cannot
give a card another chapter's picture; a chapter without an entry here, or an entry without
a chapter, stops the build (tests/test_site.py checks the same).

``:::{with-repository}`` and ``:::{without-repository}`` show their content only when the
course's repository is named (``repository.url`` in _config.yml, set by
``scripts/set-repository``) or only when it is not: the landing page promises a launch
button and a clone only where the site has them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[1]
CARD_DIR = "_static/cards"

# slug: (one-line pitch, alt text of the picture). Going-further pages listed under a chapter
# in _toc.yml (its "sections") get no card of their own.
CARDS: dict[str, tuple[str, str]] = {
    "how_to_use": (
        "How the pages, the notebooks, the exercises and their self-checks work.",
        "Three coloured boxes labelled read, run and check."),
    "how_a_model_is_trained": (
        "The loss, its gradient, one step of SGD and of Adam, and the training loop in five "
        "lines, on a model that trains in a second.",
        "Two paths of steps down a stretched bowl drawn as contour lines: gradient descent "
        "zigzags across the valley, Adam curves smoothly along it."),
    "what_attention_computes": (
        "Work a soft dictionary lookup by hand, then write it for a whole sequence in "
        "matrix form.",
        "A three by three heatmap of attention weights."),
    "why_sqrt_dk": (
        "Prove that the scores' variance grows with $d_k$, and see the softmax saturate "
        "without the scale.",
        "Two bar charts of softmax weights, spread out at small d_k and one-hot at large "
        "d_k."),
    "matmul_views": (
        "Read $QK^\\top$ and $AV$ as dot products, as mixtures of rows, and as sums of outer "
        "products.",
        "A tall matrix times a wide matrix equals a square matrix."),
    "scaled_dot_product_attention": (
        "Build attention end to end with every shape written out, a stable softmax, and "
        "masks.",
        "A lower-triangular heatmap of causal attention weights, the upper triangle grey."),
    "multi_head_attention": (
        "Split the model into heads, join them with the output projection, and see what "
        "heads learn.",
        "Three small heatmaps, one per head, each with a different pattern."),
    "positions": (
        "Prove that attention ignores order, then give it positions: sinusoids and learned "
        "embeddings.",
        "Sinusoids of four frequencies over the positions, slow to fast."),
    "rotary_positions": (
        "Rotate queries and keys so that scores depend on relative position, and stretch "
        "RoPE to longer contexts.",
        "Points on a circle, a vector rotated to one of them."),
    "tiled_attention": (
        "Compute exact attention one block of keys at a time, never holding the "
        "$N \\times N$ matrix.",
        "A square score matrix cut into column blocks, one block highlighted."),
    "backward_pass": (
        "Derive the gradients of attention, check them against autograd, and recompute them "
        "in tiles.",
        "A heatmap of the softmax Jacobian, positive on the diagonal and negative off it."),
    "inference": (
        "Decode with a key-value cache, and share keys and values across heads (MQA and "
        "GQA).",
        "Bars that grow by one block per decoding step, the newest block highlighted."),
    "inside_a_pretrained_model": (
        "Recompute MiniLM with the course's code, match the reference, and read what its "
        "heads do.",
        "Two heatmaps of real attention heads of MiniLM on one sentence."),
    "the_whole_transformer": (
        "Assemble a transformer block, train a small language model on the CPU, and sample "
        "it through the cache.",
        "The falling training loss of the course's small language model."),
    "a_real_llm": (
        "Run SmolLM2-135M, a real language model, through the course's own attention, and "
        "match transformers token for token.",
        "Thirty bars, one per layer of SmolLM2, each split into its query heads and their "
        "shared key-value heads."),
    "beyond_one_device": (
        "Run ring attention across processes, balance its causal work, and trade the "
        "softmax for a linear-time recurrence.",
        "Bars of causal work per rank, rising with contiguous shards and level with zigzag "
        "shards."),
    "the_kernel_itself": (
        "Write flash attention as Triton kernels, forward and backward, and run them on a "
        "CPU with Triton's interpreter.",
        "A grid of programs over the tiles of causal scores, the tiles below the diagonal "
        "filled."),
    "caches_in_serving": (
        "Cache keys with RoPE, page the cache into blocks, and store it in int8, each "
        "checked against the plain cache.",
        "Cache blocks of three sequences scattered over a shared pool of pages."),
    "latent_attention_and_speculative_decoding": (
        "Shrink the cache with multi-head latent attention, and decode several tokens per "
        "step with speculative decoding.",
        "Cache bytes per token on a log scale for multi-head, grouped-query, multi-query "
        "and latent attention."),
    "windows_sinks_and_sparsity": (
        "Choose which keys to attend to: sliding windows, attention sinks, and learned "
        "sparse attention.",
        "A causal mask limited to a band along the diagonal, plus the first key for every "
        "query."),
    "gates_and_the_delta_rule": (
        "Replace the softmax's growing cache with a fixed-size state: gated linear "
        "attention and the delta rule.",
        "A fixed-size state matrix updated token by token, old entries fading."),
}


def parts(root: Path = ROOT) -> list[tuple[str, list[tuple[int, str, str]]]]:
    """(caption, its chapters) for every part of _toc.yml that holds a chapter, in order; a
    chapter is (sidebar number, slug, notebook stem). The number is the file's NN prefix
    (the structure test checks it equals the sidebar's); going-further pages (a chapter's
    ``sections``) and pages outside ``chapters/`` are left out."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    found = []
    for part in toc.get("parts", []):
        listed = []
        for entry in part.get("chapters", []):
            m = re.fullmatch(r"chapters/(\d+)_(\w+)", entry.get("file", ""))
            if m:
                listed.append((int(m.group(1)), m.group(2), f"{m.group(1)}_{m.group(2)}"))
        if listed:
            found.append((part.get("caption", ""), listed))
    return found


def chapters(root: Path = ROOT) -> list[tuple[int, str, str]]:
    """(sidebar number, slug, notebook stem) of every chapter in _toc.yml, in order."""
    return [chapter for _, listed in parts(root) for chapter in listed]


def full_title(stem: str, root: Path = ROOT) -> str:
    """The notebook's first heading."""
    nb = json.loads((root / "chapters" / f"{stem}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.search(r"^#\s+(.+)$", "".join(cell["source"]), re.M)
            if m:
                return m.group(1).strip()
    raise ExtensionError(f"chapter-cards: {stem}.ipynb has no title")


def chapter_title(stem: str, root: Path = ROOT) -> str:
    """The notebook's first heading, up to a colon (a card's title is short)."""
    return full_title(stem, root).split(":")[0].strip()


def check(root: Path = ROOT) -> list[str]:
    """What does not match between _toc.yml, CARDS and the pictures: a list of problems."""
    slugs = [slug for _, slug, _ in chapters(root)]
    pictures = {p.stem for p in (root / CARD_DIR).glob("*.svg")}
    problems = [f"chapter {s!r} has no card" for s in slugs if s not in CARDS]
    problems += [f"card {s!r} is for no chapter of _toc.yml" for s in CARDS if s not in slugs]
    problems += [f"chapter {s!r} has no picture {CARD_DIR}/{s}.svg" for s in slugs
                 if s not in pictures]
    problems += [f"picture {CARD_DIR}/{s}.svg is for no chapter" for s in sorted(pictures)
                 if s not in slugs]
    return problems


def cards_markdown(root: Path = ROOT) -> str:
    """The MyST text of the cards: under each part's caption (as the sidebar groups them),
    a grid of its chapters' cards."""
    blocks = [":::::{container} attncore-cards", ""]
    for caption, listed in parts(root):
        blocks += [f"::::{{rubric}} {caption}", "::::", "",
                   "::::{grid} 1 2 2 3", ":gutter: 3", ""]
        for number, slug, stem in listed:
            pitch, alt = CARDS[slug]
            title = chapter_title(stem, root)
            heading = title if number == 0 else f"{number} \u00b7 {title}"
            blocks += [f":::{{grid-item-card}} {heading}", f":link: chapters/{stem}",
                       ":link-type: doc", f":img-top: {CARD_DIR}/{slug}.svg",
                       f":img-alt: {alt}", "", pitch, ":::", ""]
        blocks += ["::::", ""]
    blocks.append(":::::")
    return "\n".join(blocks)


class ChapterCards(SphinxDirective):
    """``:::{chapter-cards}``: a card for every chapter of _toc.yml."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        problems = check()
        if problems:
            raise self.error("chapter-cards: " + "; ".join(problems))
        for _, _, stem in chapters():
            self.env.note_dependency(str(ROOT / "chapters" / f"{stem}.ipynb"))
        container = nodes.container()
        self.state.nested_parse(self.content.__class__(cards_markdown().splitlines()),
                                self.content_offset, container)
        return container.children


def repository_named(config) -> bool:
    options = getattr(config, "html_theme_options", None) or {}
    return bool(options.get("repository_url"))


class _Only(SphinxDirective):
    has_content = True
    shown_with_repository = True

    def run(self) -> list[nodes.Node]:
        if repository_named(self.config) != self.shown_with_repository:
            return []
        container = nodes.container()
        self.state.nested_parse(self.content, self.content_offset, container)
        return container.children


class WithRepository(_Only):
    """``:::{with-repository}``: its content only when the course's repository is named."""

    shown_with_repository = True


class WithoutRepository(_Only):
    """``:::{without-repository}``: its content only when no repository is named."""

    shown_with_repository = False


def setup(app: Sphinx) -> dict:
    app.add_directive("chapter-cards", ChapterCards)
    app.add_directive("with-repository", WithRepository)
    app.add_directive("without-repository", WithoutRepository)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
