"""Looking inside SmolLM2-135M-Instruct: attention maps, sinks, previous-token and induction
heads, and the 4-bit format of its file (chapter 13).

The maps are computed from the model's own weights, one block at a time in float64 NumPy
(:func:`attention_maps`), so that every number a chapter prints or stores is the same on every
machine; the model itself computes in float32, and the two differ by about ``1e-6``.

Loading the model takes seconds and half a gigabyte: :func:`smollm2` loads it once per
process and hands the same object to every caller (the chapter, its opening figure and its
interactive figure).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

__all__ = ["FIGURE_PROMPTS", "HeadScores", "HeadStudy", "ROLES", "attention_maps",
           "block_to_float64", "default_study", "display_tokens", "head_roles",
           "head_scores", "logits_with_block", "previous_token_weight",
           "repeated_random_tokens", "rope_interleaved", "sink_weight", "smollm2",
           "study_heads"]

FIGURE_PROMPTS: dict[str, str] = {
    "a sentence": "The cat sat on the mat because it was tired, so it slept all day.",
    "repeated text": "red fox, blue owl, green frog. red fox, blue owl, green frog.",
    "code": "def add(a, b):\n    return a + b",
}
"""The prompts of the interactive figure (each at most 24 tokens), by the name its menu
shows."""

ROLES = ("induction head", "previous-token head", "attention sink", "no single role")
"""The roles :func:`head_roles` names, in the order it tests them."""


@functools.lru_cache(maxsize=1)
def smollm2() -> Any:
    """``SmolLM2.load()`` (torch, float32, CPU), read once per process and shared.

    Raises ImportError, naming the install command, where the model's package is missing.
    """
    from attncore.pretrained import SmolLM2

    return SmolLM2.load()


def block_to_float64(block: Any) -> Any:
    """A :class:`~attncore.TransformerBlockParams` (NumPy or torch) as float64 NumPy arrays
    (a new object; the model is unchanged)."""
    def conv(a: Any) -> Any:
        if a is None:
            return None
        if not isinstance(a, np.ndarray):
            a = a.detach().cpu().numpy()
        return a.astype(np.float64)

    attn = block.attn
    attn64 = replace(attn, **{f.name: conv(getattr(attn, f.name)) for f in fields(attn)
                              if f.name.startswith(("w_", "b_"))})
    arrays = {f.name: conv(getattr(block, f.name)) for f in fields(block)
              if f.name.startswith(("ln", "w_", "b_"))}
    return replace(block, attn=attn64, **arrays)


def attention_maps(model: Any, sequences: Any) -> list[np.ndarray]:
    """The attention weights of every head of every layer of ``model`` on each sequence.

    Parameters
    ----------
    model : attncore.pretrained.SmolLM2 (any backend)
    sequences : list of integer arrays, each of shape ``(n,)``
        Token ids; the sequences are run separately (one block at a time, all sequences
        through it, so that each block is converted to float64 once).

    Returns
    -------
    list of numpy.ndarray, float64, each of shape ``(num_layers, num_heads, n, n)``
        Row ``i`` of ``[l, h]`` is query ``i``'s distribution over keys ``0 .. i`` in head
        ``h`` of layer ``l`` (zeros above the diagonal), computed in float64 from the
        model's weights.
    """
    from attncore.transformer import transformer_block

    if isinstance(sequences, np.ndarray) or not isinstance(sequences, (list, tuple)) \
            or not sequences:
        raise TypeError(f"sequences: expected a non-empty list of 1-D id arrays, got "
                        f"{type(sequences).__name__}")
    vocab = model.config.vocab_size
    emb = model.model.tok_emb
    states = []
    for k, ids in enumerate(sequences):
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"sequences[{k}]: expected a non-empty 1-D array of token ids, "
                             f"got shape {ids.shape} and dtype {ids.dtype}")
        if ids.min() < 0 or ids.max() >= vocab:
            raise ValueError(f"sequences[{k}]: expected ids in [0, {vocab}), got "
                             f"{ids.min()} to {ids.max()}")
        rows = emb[ids] if isinstance(emb, np.ndarray) else \
            emb[ids.tolist()].detach().cpu().numpy()
        states.append(np.asarray(rows, dtype=np.float64))
    found: list[list[np.ndarray]] = [[] for _ in states]
    for block in model.model.blocks:
        block64 = block_to_float64(block)
        for k, h in enumerate(states):
            states[k], w = transformer_block(block64, h, causal=True, return_weights=True)
            found[k].append(w)
    return [np.stack(w) for w in found]


def sink_weight(maps: np.ndarray) -> np.ndarray:
    """The mean weight the queries ``1 .. n-1`` put on the first token (query 0 has no
    other choice): ``(...)`` from maps ``(..., n, n)``."""
    maps = _check_maps(maps, 2)
    return maps[..., 1:, 0].mean(axis=-1)


def previous_token_weight(maps: np.ndarray) -> np.ndarray:
    """The mean weight the queries ``2 .. n-1`` put on the token just before them (query 1's
    previous token is the first token, left out so that a sink does not count):
    ``(...)`` from maps ``(..., n, n)``."""
    maps = _check_maps(maps, 3)
    return np.diagonal(maps, offset=-1, axis1=-2, axis2=-1)[..., 1:].mean(axis=-1)


def _check_maps(maps: Any, least: int) -> np.ndarray:
    maps = np.asarray(maps)
    if maps.ndim < 2 or maps.shape[-1] != maps.shape[-2] or maps.shape[-1] < least:
        raise ValueError(f"maps: expected shape (..., n, n) with n >= {least}, got "
                         f"{maps.shape}")
    return maps


def repeated_random_tokens(model: Any, length: int, *, seed: int = 0) -> np.ndarray:
    """``length`` random tokens drawn from the model's ordinary words, twice: int64
    ``(2 * length,)``.

    The words are the vocabulary's tokens made of a space and 3 to 8 lower-case letters (so
    that the text is plain words, not pieces of code or special tokens), drawn without
    repetition with ``numpy.random.default_rng(seed)``. On the first copy nothing predicts the
    next token; on the second, a model that can look back at what followed the current token
    last time predicts every one.
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise ValueError(f"length: expected an integer >= 2, got {length!r}")
    words = _plain_words(model)
    rng = np.random.default_rng(seed)
    first = rng.choice(words, size=length, replace=False)
    return np.concatenate([first, first]).astype(np.int64)


def _plain_words(model: Any) -> np.ndarray:
    vocab = model.tokenizer.get_vocab()
    return np.array(sorted(i for t, i in vocab.items()
                           if t.startswith("\u0120") and 3 <= len(t) - 1 <= 8
                           and t[1:].isascii() and t[1:].isalpha() and t[1:].islower()))


@dataclass(frozen=True)
class HeadScores:
    """What each head of a model does, measured: arrays ``(num_layers, num_heads)``.

    Attributes
    ----------
    sink : numpy.ndarray
        The mean weight on the first token (:func:`sink_weight`), averaged over the prompts.
    previous : numpy.ndarray
        The mean weight on the previous token (:func:`previous_token_weight`), averaged over
        the prompts.
    induction : numpy.ndarray
        On repeated random tokens, the mean weight that the second copy's queries put on the
        token after the earlier copy of the current token
        (:func:`attncore.lab.training.induction_score`).
    """

    sink: np.ndarray
    previous: np.ndarray
    induction: np.ndarray


def head_scores(prompt_maps: list[np.ndarray], repeated_maps: np.ndarray,
                repeated_ids: np.ndarray) -> HeadScores:
    """The three scores of every head: sink and previous-token averaged over
    ``prompt_maps`` (each ``(layers, heads, n, n)``), induction on ``repeated_maps``
    computed on ``repeated_ids``."""
    from attncore.lab.training import induction_score

    if not prompt_maps:
        raise ValueError("prompt_maps: expected at least one array of maps, got none")
    sink = np.mean([sink_weight(m) for m in prompt_maps], axis=0)
    previous = np.mean([previous_token_weight(m) for m in prompt_maps], axis=0)
    return HeadScores(sink, previous, induction_score(repeated_maps, repeated_ids))


def head_roles(scores: HeadScores, *, induction: float = 0.3, previous: float = 0.4,
               sink: float = 0.6) -> np.ndarray:
    """The role of each head, one of :data:`ROLES`: an induction head if its induction
    score reaches ``induction``, else a previous-token head if its previous-token weight
    reaches ``previous``, else a sink if its weight on the first token reaches ``sink``,
    else no single role. Returns an array of str ``(num_layers, num_heads)``."""
    roles = np.full(scores.sink.shape, ROLES[3], dtype=object)
    roles[scores.sink >= sink] = ROLES[2]
    roles[scores.previous >= previous] = ROLES[1]
    roles[scores.induction >= induction] = ROLES[0]
    return roles


def display_tokens(model: Any, ids: Any) -> list[str]:
    """Each token as text a reader can see: a leading space as ``_``, a new line as
    ``\\n``."""
    out = []
    for i in np.asarray(ids).tolist():
        text = model.tokenizer.decode([int(i)], skip_special_tokens=False)
        out.append(text.replace(" ", "_").replace("\n", "\\n") or "?")
    return out


@dataclass(frozen=True)
class HeadStudy:
    """Attention maps of a model on the figure's prompts and on repeated random tokens, and
    what each head does (:func:`study_heads` makes one).

    Attributes
    ----------
    names : list of str
        The prompts' names (the keys of :data:`FIGURE_PROMPTS`).
    ids : list of numpy.ndarray
        Each prompt's token ids, int64 ``(n,)``.
    tokens : list of list of str
        Each prompt's tokens as :func:`display_tokens` shows them.
    maps : list of numpy.ndarray
        Each prompt's attention maps, float64 ``(num_layers, num_heads, n, n)``.
    repeated_ids : numpy.ndarray
        The repeated random tokens, int64 ``(2 * length,)``.
    repeated_maps : numpy.ndarray
        Their attention maps, float64 ``(num_layers, num_heads, 2 * length, 2 * length)``.
    scores : HeadScores
        Every head's measurements (:func:`head_scores`).
    roles : numpy.ndarray
        Every head's role, str ``(num_layers, num_heads)`` (:func:`head_roles`).
    """

    names: list
    ids: list
    tokens: list
    maps: list
    repeated_ids: np.ndarray
    repeated_maps: np.ndarray
    scores: HeadScores
    roles: np.ndarray


@functools.lru_cache(maxsize=1)
def default_study() -> HeadStudy:
    """:func:`study_heads` of :func:`smollm2`, computed once per process."""
    return study_heads(smollm2())


def study_heads(model: Any, *, repeat_length: int = 16, seed: int = 2) -> HeadStudy:
    """Run ``model`` on :data:`FIGURE_PROMPTS` and on :func:`repeated_random_tokens`
    (``repeat_length`` tokens twice, ``seed``), measure every head (:func:`head_scores`) and
    name its role (:func:`head_roles`)."""
    names = list(FIGURE_PROMPTS)
    ids = [model.encode(FIGURE_PROMPTS[name]) for name in names]
    repeated = repeated_random_tokens(model, repeat_length, seed=seed)
    *maps, repeated_maps = attention_maps(model, ids + [repeated])
    scores = head_scores(maps, repeated_maps, repeated)
    return HeadStudy(names, ids, [display_tokens(model, i) for i in ids], maps, repeated,
                     repeated_maps, scores, head_roles(scores))


def rope_interleaved(x: Any, positions: Any, *, base: float = 10000.0) -> np.ndarray:
    """RoPE as llama.cpp applies it: each pair of neighbouring features ``(2i, 2i + 1)``
    rotated by ``m * base ** (-2i / d)`` at position ``m`` (:func:`attncore.rope` pairs ``i``
    with ``i + d/2`` instead).

    Parameters
    ----------
    x : numpy.ndarray, shape ``(n, d)``, ``d`` even
    positions : integers, shape ``(n,)``
    base : float, default 10000.0

    Returns
    -------
    numpy.ndarray, float64, shape ``(n, d)``
    """
    from attncore.positions import position_frequencies

    x = np.asarray(x, dtype=np.float64)
    positions = np.asarray(positions, dtype=np.float64)
    if x.ndim != 2 or x.shape[-1] % 2 or positions.shape != x.shape[:1]:
        raise ValueError(f"x, positions: expected shapes (n, d) with d even and (n,), got "
                         f"{x.shape} and {positions.shape}")
    angles = positions[:, None] * position_frequencies(x.shape[-1], base=base)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


def logits_with_block(model: Any, ids: Any, block_fn: Any) -> Any:
    """SmolLM2's next-token logits with every block computed by ``block_fn``.

    The forward pass of :meth:`attncore.pretrained.SmolLM2.logits` (token embedding, the
    30 blocks, the final RMSNorm, the head tied to the embedding), with
    ``h = block_fn(h, block)`` in place of ``attncore.transformer_block(block, h,
    causal=True)``: the way to run the real model on a block one wrote oneself.

    Parameters
    ----------
    model : attncore.pretrained.SmolLM2
        Loaded with the torch backend (:func:`smollm2`).
    ids : integers, shape ``(n,)``
        Token ids of one sequence, at positions ``0 .. n-1``.
    block_fn : callable ``(h, block) -> h``
        ``h`` a torch tensor ``(n, d_model)`` of the model's dtype (float32), ``block`` the
        block's :class:`~attncore.TransformerBlockParams` (torch tensors; queries and keys
        in attncore's rotate-half order, RoPE's pairs ``(i, i + d_head/2)``). It must
        return the block's output, a tensor of the same shape.

    Returns
    -------
    torch.Tensor, shape ``(n, vocab_size)``, float32
        Row ``t`` scores the token after ``ids[t]``.

    Raises
    ------
    TypeError, ValueError
        ``block_fn`` not callable, or returning something other than a tensor of ``h``'s
        shape (named with the block's index); ids as :meth:`SmolLM2.logits`.
    """
    import torch

    if not callable(block_fn):
        raise TypeError(f"block_fn: expected a function (h, block) -> h, got "
                        f"{type(block_fn).__name__}")
    lm = model.model
    ids = torch.as_tensor(model._ids(ids, "ids"))
    with torch.no_grad():
        h = lm.tok_emb[ids]
        for i, block in enumerate(lm.blocks):
            out = block_fn(h, block)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(h.shape):
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else \
                    type(out).__name__
                raise ValueError(f"block_fn: expected a tensor of shape {tuple(h.shape)} "
                                 f"from block {i}, got {got}")
            h = out.to(h.dtype)
        h = torch.nn.functional.rms_norm(h, (h.shape[-1],), lm.lnf_weight,
                                         lm.blocks[0].eps)
        return h @ (lm.tok_emb.T if lm.head is None else lm.head)

