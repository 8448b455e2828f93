"""Instruments of chapter 18 (windows, sinks and learned sparsity) on the real model.

* :func:`execution_model_text` -- a passage of English prose shipped with the course
  (the "Execution model" section of Python 3.11's help, see :mod:`attncore.lab.language`),
  for perplexities without a download;
* :func:`token_losses` -- each position's negative log-likelihood of the next token;
* :func:`layer_heads` -- one layer's queries, keys and values per head, as the model's
  attention reads them (after the layer's RMSNorm, the projections and RoPE).
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

__all__ = ["execution_model_text", "layer_heads", "token_losses"]

_START = "A Python program is constructed from code blocks."


def execution_model_text() -> str:
    """The "Execution model" section of Python 3.11's help topics, from its first
    sentence, about 7,700 characters of prose (PSF License Agreement), the same on every
    Python version."""
    from .language import corpus_text

    text = corpus_text()
    start = text.index(_START)
    end = text.index("\n\n\nExceptions\n==========", start)
    return text[start:end]


def _token_ids(ids: Any, vocab: int) -> np.ndarray:
    """``ids`` as a non-empty int64 ``(n,)`` array of token ids in ``[0, vocab)``, or an error
    naming ``ids``: floats are refused rather than truncated, negative ids rather than read
    from the end of the vocabulary."""
    arr = np.asarray(ids.detach().cpu() if hasattr(ids, "detach") else ids)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"ids: expected integer token ids, got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"ids: expected a non-empty (n,) array of token ids in [0, {vocab}), "
                         f"got shape {arr.shape}")
    bad = (arr < 0) | (arr >= vocab)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"ids: expected a non-empty (n,) array of token ids in [0, {vocab}), "
                         f"got {int(arr[i])} at index {i}")
    return arr.astype(np.int64)


def token_losses(logits: Any, ids: Any) -> np.ndarray:
    """The negative log-likelihood of each next token, in nats.

    Parameters
    ----------
    logits : array or tensor, shape ``(n, vocab)``
        Row ``t`` scores the token after ``ids[t]`` (as :meth:`SmolLM2.logits` returns).
    ids : integers, shape ``(n,)``

    Returns
    -------
    numpy.ndarray of float64, shape ``(n - 1,)``
        Entry ``t`` is ``-log p(ids[t + 1] | ids[:t + 1])``; ``exp`` of a mean is a
        perplexity.

    Raises
    ------
    TypeError
        ids that are not integers (floats are not truncated).
    ValueError
        logits not of shape ``(n, vocab)``; ids not of shape ``(n,)`` or outside
        ``[0, vocab)`` (a negative id is not read from the end of the vocabulary).
    """
    if not isinstance(logits, np.ndarray):
        logits = logits.detach().cpu().double().numpy()
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 2:
        raise ValueError(f"logits: expected shape (n, vocab), got {logits.shape}")
    ids = _token_ids(ids, logits.shape[-1])
    if ids.shape != logits.shape[:1]:
        raise ValueError(f"logits, ids: expected shapes (n, vocab) and (n,), got "
                         f"{logits.shape} and {ids.shape}")
    top = logits.max(axis=-1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=-1))
    return lse[:-1] - logits[np.arange(len(ids) - 1), ids[1:]]


def layer_heads(smol: Any, ids: Any, layer: int) -> tuple[Any, Any, Any]:
    """The queries, keys and values that block ``layer``'s attention reads.

    The blocks before ``layer`` run as the model runs them (causal); then the block's
    RMSNorm, its projections and RoPE at positions ``0 .. n-1``. Keys and values are
    repeated for the query heads that share them, so that head ``h`` of the result is
    what query head ``h`` attends with.

    Parameters
    ----------
    smol : attncore.pretrained.SmolLM2
    ids : integers, shape ``(n,)``
    layer : int, ``0 <= layer < num_layers``

    Returns
    -------
    q, k, v : arrays of the model's backend and dtype, shape ``(num_heads, n, d_head)``
        ``scaled_dot_product_attention(q, k, v, causal=True)`` is the layer's attention
        per head, before the heads are merged.

    Raises
    ------
    TypeError
        A layer that is not an integer (a bool or a float included); ids that are not
        integers.
    ValueError
        A layer outside ``[0, num_layers)``; ids that are not a non-empty ``(n,)`` array
        of token ids in ``[0, vocab)``.
    """
    from contextlib import nullcontext

    import attncore as ac

    model = smol.model
    if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, numbers.Integral):
        raise TypeError(f"layer: expected an integer in [0, {len(model.blocks)}), got "
                        f"{layer!r} ({type(layer).__name__})")
    if not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer: expected an integer in [0, {len(model.blocks)}), got "
                         f"{layer!r}")
    layer = int(layer)
    ids = _token_ids(ids, len(model.tok_emb))
    torch = sys.modules.get("torch") if smol.backend == "torch" else None
    with (torch.no_grad() if torch is not None else nullcontext()):
        h = model.tok_emb[ids if torch is None else torch.as_tensor(
            ids, device=model.tok_emb.device)]       # Llama: no table of positions
        for block in model.blocks[:layer]:
            h = ac.transformer_block(block, h, causal=True)
        block = model.blocks[layer]
        p = block.attn
        x = ac.rms_norm(h, block.ln1_weight, block.eps)   # the block's first RMSNorm
        q = ac.split_heads(x @ p.w_q, p.num_heads)
        k = ac.split_heads(x @ p.w_k, p.n_kv_heads)
        v = ac.split_heads(x @ p.w_v, p.n_kv_heads)
        q, k = ac.rope(q, base=block.rope_base), ac.rope(k, base=block.rope_base)
        group = p.num_heads // p.n_kv_heads
        if torch is None:
            k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
        else:
            k = torch.repeat_interleave(k, group, dim=-3)
            v = torch.repeat_interleave(v, group, dim=-3)
    return q, k, v
