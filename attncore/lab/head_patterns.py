"""What each attention head of a trained model does, measured on a corpus.

The measurements take a model's attention weights on a padded batch: a list with one
``(batch, heads, n, n)`` array per layer (``BertOutput.attention``) and the boolean
``(batch, n)`` mask of real tokens. Every average is over the real tokens of the corpus (each
query row counts once), never over padding.

* :func:`head_statistics` -- per head: mean weight on the previous token, the next token,
  itself, the first token ([CLS]) and the last ([SEP]), and the mean entropy of a row
* :func:`relation_accuracy` -- per head: how often a token's most-attended word is its
  partner in an annotated relation, against the best fixed-offset guess
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .scaling import row_entropy

__all__ = ["HeadStatistics", "head_statistics", "relation_accuracy", "sequences"]


def sequences(attention: Sequence[Any], mask: Any) -> list[np.ndarray]:
    """The unpadded weights of each sequence: arrays ``(layers, heads, len_b, len_b)``."""
    weights = np.stack([np.asarray(a) for a in attention])          # (L, B, H, n, n)
    mask = np.asarray(mask)
    if weights.ndim != 5 or weights.shape[1] != mask.shape[0] or \
            weights.shape[-1] != mask.shape[1]:
        raise ValueError(f"attention and mask: expected layers of shape (batch, heads, n, n) "
                         f"and a mask (batch, n), got {weights.shape[1:]} and {mask.shape}")
    return [weights[:, b, :, :m, :m] for b, m in enumerate(mask.sum(axis=1))]


@dataclass
class HeadStatistics:
    """Per-head averages, each an array ``(layers, heads)``.

    previous, next, self : mean weight that token ``i`` puts on ``i - 1``, ``i + 1``, ``i``
    first, last : mean weight on the sequence's first token ([CLS]) and last ([SEP])
    entropy : mean entropy of a row, in nats (0: all weight on one token)
    uniform_entropy : float, the mean of ``log(length)`` over the rows: a uniform head's entropy
    """

    previous: np.ndarray
    next: np.ndarray
    self: np.ndarray
    first: np.ndarray
    last: np.ndarray
    entropy: np.ndarray
    uniform_entropy: float


def head_statistics(attention: Sequence[Any], mask: Any) -> HeadStatistics:
    """Measure every head on a batch (see the module docstring for the inputs)."""
    seqs = sequences(attention, mask)
    sums = {k: 0.0 for k in ("previous", "next", "self", "first", "last", "entropy")}
    rows = offsets = 0
    uniform = 0.0
    for w in seqs:
        n = w.shape[-1]
        sums["previous"] = sums["previous"] + np.diagonal(w, -1, -2, -1).sum(-1)
        sums["next"] = sums["next"] + np.diagonal(w, 1, -2, -1).sum(-1)
        sums["self"] = sums["self"] + np.diagonal(w, 0, -2, -1).sum(-1)
        sums["first"] = sums["first"] + w[..., :, 0].sum(-1)
        sums["last"] = sums["last"] + w[..., :, n - 1].sum(-1)
        sums["entropy"] = sums["entropy"] + row_entropy(w.astype(np.float64)).sum(-1)
        rows += n
        offsets += n - 1
        uniform += n * np.log(n)
    return HeadStatistics(previous=sums["previous"] / offsets, next=sums["next"] / offsets,
                          self=sums["self"] / rows, first=sums["first"] / rows,
                          last=sums["last"] / rows, entropy=sums["entropy"] / rows,
                          uniform_entropy=float(uniform / rows))


def relation_accuracy(attention: Sequence[Any], mask: Any,
                      pairs: Sequence[tuple[int, int, int]]) -> tuple[np.ndarray, float]:
    """How often each head's most-attended word is the annotated partner.

    Parameters
    ----------
    attention, mask : the batch's attention weights and mask (module docstring)
    pairs : ``(sequence, from_token, to_token)`` triples: the token at ``from_token`` should
        attend to ``to_token`` (for example a determiner to its noun)

    Returns
    -------
    accuracy : ``(layers, heads)``, the fraction of pairs for which the head's largest
        weight in row ``from_token``, ignoring the first token ([CLS]), the last ([SEP])
        and the token itself, falls on ``to_token``.
    baseline : float, the best accuracy of a fixed offset (always guessing
        ``from_token + k`` for the one ``k`` that is right most often): what a purely
        positional head could reach on these pairs.
    """
    seqs = sequences(attention, mask)
    if not pairs:
        raise ValueError("pairs: expected at least one (sequence, from, to) triple")
    hits = np.zeros(seqs[0].shape[:2])
    offsets: dict[int, int] = {}
    for s, i, j in pairs:
        w = seqs[s][:, :, i, :].copy()                     # (L, H, len)
        n = w.shape[-1]
        if not (0 < i < n - 1 and 0 < j < n - 1 and i != j):
            raise ValueError(f"pairs: expected word tokens (not [CLS]/[SEP]) of sequence {s} "
                             f"(length {n}), got ({s}, {i}, {j})")
        w[..., [0, n - 1, i]] = -1.0
        hits += w.argmax(axis=-1) == j
        offsets[j - i] = offsets.get(j - i, 0) + 1
    return hits / len(pairs), max(offsets.values()) / len(pairs)
