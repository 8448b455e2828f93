"""Remove attention heads of a pretrained encoder and see what the sentence embeddings do.

Removing heads (zeroing their rows of ``W_O``, see
:func:`attncore.pretrained.bert.intervene`) whose earliest layer is ``l`` leaves layers
``0 .. l-1`` unchanged, so the sweep computes the trained hidden states once and reruns only
layers ``l`` onwards for each group of heads.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..pretrained.bert import check_ablate, encoder_layer, intervene
from ..pretrained.layers import l2_normalize, mean_pool

__all__ = ["ablation_sweep"]


def ablation_sweep(model: Any, texts: Sequence[str],
                   groups: Sequence[Sequence[tuple[int, int]]]) -> np.ndarray:
    """Sentence embeddings with each group of heads removed in turn (NumPy backend).

    Parameters
    ----------
    model : attncore.pretrained.MiniLM
    texts : list of str
    groups : each a non-empty sequence of ``(layer, head)`` pairs removed together, e.g.
        ``[[(5, 3)], [(2, h) for h in range(12)]]`` (head 5.3 alone; all of layer 2).

    Returns
    -------
    float ``(len(groups), len(texts), d)``: row ``[i]`` equals
    ``model.encode(texts, ablate=groups[i])`` (to float rounding).
    """
    config = model.config
    checked = [check_ablate(group, config) for group in groups]
    if any(len(group) == 0 for group in checked):
        raise ValueError("groups: expected each group to name at least one (layer, head)")
    out = model.forward(list(texts))
    key_mask = out.mask[:, None, :]
    result = []
    for group in checked:
        start = min(lay for lay, _ in group)
        x = out.hidden_states[start]
        for i in range(start, config.num_layers):
            layer = model.params.layers[i]
            attention = intervene(layer.attention, layer=i, ablate=group)
            x = encoder_layer(layer, x, key_mask, eps=config.layer_norm_eps,
                              attention=attention)
        result.append(l2_normalize(mean_pool(x, out.mask)))
    return np.stack(result)
