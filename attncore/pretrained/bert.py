"""The forward pass of a BERT encoder, with every attention layer run by attncore.

    x_0 = LayerNorm(word[ids] + token_type[types] + position[0..n-1])          embeddings
    for each layer (post-LN, as in BERT):
        h   = LayerNorm(x + MultiHeadAttention(x, mask))                           attncore
        x   = LayerNorm(h + GELU(h W_1 + b_1) W_2 + b_2)                     feed-forward

The same code runs on NumPy arrays and on torch tensors (the parameters' library decides).
Two interventions change the trained computation, for experiments, and two probes record
what it computes; all are keyword arguments of :func:`bert_forward`:

* ``score_scale`` -- the factor that multiplies ``q . k`` (trained: ``1/sqrt(d_head)``);
* ``ablate``      -- heads ``(layer, head)`` whose output is removed;
* ``return_attention`` / ``return_qk`` -- keep each layer's attention weights / q and k.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Any, Iterable

import numpy as np

from .._backend import backend_of, dtype_name, is_bool, is_floating, shape_of
from ..multihead import MultiHeadParams, multi_head_attention, split_heads
from .checkpoint import BertConfig, BertParams, EncoderLayerParams
from .layers import gelu, layer_norm

__all__ = ["BertOutput", "TokenBatch", "bert_forward", "check_ablate", "check_score_scale",
           "embed", "encoder_layer", "feed_forward", "intervene"]


@dataclass
class TokenBatch:
    """A tokenized, right-padded batch.

    Attributes
    ----------
    input_ids : int64 ``(batch, n)``       token ids, ``0`` ([PAD]) after each sequence's end
    token_type_ids : int64 ``(batch, n)``  all ``0`` for single sentences
    attention_mask : bool ``(batch, n)``   ``True`` at real tokens
    tokens : list of lists of str          each sequence's real tokens, as strings
    """

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    tokens: list[list[str]]

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``(batch,)``: the number of real tokens of each sequence."""
        return self.attention_mask.sum(axis=1)


@dataclass
class BertOutput:
    """What :func:`bert_forward` computed (arrays of the parameters' library and device).

    Attributes
    ----------
    hidden_states : list of ``num_layers + 1`` arrays ``(batch, n, d)``
        ``hidden_states[0]`` is the embedding layer's output, ``hidden_states[l]`` the
        output of layer ``l`` (counting from 1), as ``output_hidden_states`` in transformers.
    mask : bool ``(batch, n)``, ``True`` at real tokens.
    attention : list of ``num_layers`` arrays ``(batch, heads, n, n)``, or None
        Attention weights (row ``i``: query ``i``'s distribution over the keys).
    queries, keys : lists of ``num_layers`` arrays ``(batch, heads, n, d_head)``, or None
        Each head's queries ``x W_Q + b_Q`` and keys ``x W_K + b_K``, split into heads, as
        trained (before any ``score_scale`` change).
    """

    hidden_states: list[Any]
    mask: Any
    attention: list[Any] | None = None
    queries: list[Any] | None = None
    keys: list[Any] | None = None

    @property
    def last_hidden_state(self) -> Any:
        return self.hidden_states[-1]


def check_score_scale(score_scale: Any) -> None:
    """Raise unless ``score_scale`` is None or a finite real number (not a bool)."""
    if score_scale is None:
        return
    if isinstance(score_scale, bool) or not isinstance(score_scale, numbers.Real) \
            or not math.isfinite(score_scale):
        raise ValueError(f"score_scale: expected None (the trained 1/sqrt(d_head)) or a "
                         f"finite real number, got {score_scale!r}")


def check_ablate(ablate: Any, config: BertConfig) -> tuple[tuple[int, int], ...]:
    """``ablate`` as a tuple of ``(layer, head)`` pairs, each checked against ``config``."""
    if isinstance(ablate, (str, bytes)) or not isinstance(ablate, Iterable):
        raise TypeError(f"ablate: expected a sequence of (layer, head) pairs, got "
                        f"{type(ablate).__name__}")
    pairs = []
    for pair in ablate:
        ok = (isinstance(pair, (tuple, list)) and len(pair) == 2 and
              all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in pair))
        if not ok or not (0 <= pair[0] < config.num_layers and 0 <= pair[1] < config.num_heads):
            raise ValueError(f"ablate: expected (layer, head) pairs with 0 <= layer < "
                             f"{config.num_layers} and 0 <= head < {config.num_heads}, "
                             f"got {pair!r}")
        pairs.append((int(pair[0]), int(pair[1])))
    return tuple(pairs)


def intervene(attention: MultiHeadParams, *, layer: int, score_scale: float | None = None,
              ablate: tuple[tuple[int, int], ...] = ()) -> MultiHeadParams:
    """The attention parameters of layer ``layer`` with the interventions applied.

    * ``score_scale`` (the factor multiplying ``q . k``) is folded into the query
      projection: ``(c q) . k = c (q . k)``, so multiplying ``W_Q`` and ``b_Q`` by
      ``c = score_scale * sqrt(d_head)`` and letting attncore divide by ``sqrt(d_head)``
      multiplies the scores by ``score_scale``. (For powers of two, ``c`` is exact.)
    * Ablating head ``h`` zeroes rows ``h*d_head ... (h+1)*d_head`` of ``W_O``, the rows that
      carry that head's output into the layer's output ``sum_h head_h W_O^(h) + b_O``.

    Returns ``attention`` itself when nothing changes; otherwise a modified copy.
    """
    p = attention
    if score_scale is not None:
        factor = float(score_scale) * math.sqrt(p.d_head)
        if factor != 1.0:
            p = replace(p, w_q=p.w_q * factor, b_q=p.b_q * factor)
    heads = sorted({h for (lay, h) in ablate if lay == layer})
    if heads:
        w_o = p.w_o.copy() if isinstance(p.w_o, np.ndarray) else p.w_o.clone()
        for h in heads:
            w_o[h * p.d_head:(h + 1) * p.d_head] = 0
        p = replace(p, w_o=w_o)
    return p


def _check_inputs(params: BertParams, config: BertConfig, input_ids: Any,
                  token_type_ids: Any, attention_mask: Any) -> None:
    """The batch's arrays: one library (the parameters'), integer ids in range, a boolean
    mask, all of shape ``(batch, n)``."""
    backend_of(params=params.word_embeddings, input_ids=input_ids,
               token_type_ids=token_type_ids, attention_mask=attention_mask)
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids: expected shape (batch, n), got {shape_of(input_ids)}")
    for name, x in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if shape_of(x) != shape_of(input_ids):
            raise ValueError(f"{name}: expected the shape of input_ids "
                             f"{shape_of(input_ids)}, got {shape_of(x)}")
    if not is_bool(attention_mask):
        raise TypeError(f"attention_mask: expected a boolean array (True = real token), got "
                        f"dtype {dtype_name(attention_mask)}")
    for name, x, size in (("input_ids", input_ids, config.vocab_size),
                          ("token_type_ids", token_type_ids, config.type_vocab_size)):
        if is_bool(x) or is_floating(x):
            raise TypeError(f"{name}: expected integer ids, got dtype {dtype_name(x)}")
        count = x.size if isinstance(x, np.ndarray) else x.numel()
        if count:
            low, high = int(x.min()), int(x.max())
            if low < 0 or high >= size:
                raise ValueError(f"{name}: expected ids in [0, {size}), got values from "
                                 f"{low} to {high}")


def _arange(n: int, like: Any) -> Any:
    if isinstance(like, np.ndarray):
        return np.arange(n)
    import torch

    return torch.arange(n, device=like.device)


def embed(params: BertParams, input_ids: Any, token_type_ids: Any, *, eps: float) -> Any:
    """Token + token-type + position embeddings, then layer norm: ``(batch, n, d)``.

    ``input_ids`` and ``token_type_ids`` are integer ``(batch, n)`` arrays of the
    parameters' library (and device).
    """
    n = int(input_ids.shape[-1])
    if n > params.position_embeddings.shape[0]:
        raise ValueError(f"input_ids: expected at most {params.position_embeddings.shape[0]} "
                         f"positions, got {n}")
    x = params.word_embeddings[input_ids] + params.token_type_embeddings[token_type_ids]
    x = x + params.position_embeddings[_arange(n, input_ids)]
    return layer_norm(x, params.embedding_norm.gain, params.embedding_norm.shift, eps=eps)


def feed_forward(layer: EncoderLayerParams, h: Any) -> Any:
    """``GELU(h W_1 + b_1) W_2 + b_2``: ``(..., d)`` -> ``(..., d)`` through width ``d_ff``."""
    # One (tokens, d) matrix product instead of one per sequence: NumPy's matmul runs a
    # separate BLAS call for every leading index of a 3-d operand.
    flat = h.reshape(-1, h.shape[-1])
    out = gelu(flat @ layer.w_1 + layer.b_1) @ layer.w_2 + layer.b_2
    return out.reshape(h.shape)


def encoder_layer(layer: EncoderLayerParams, x: Any, key_mask: Any, *, eps: float,
                  attention: MultiHeadParams | None = None,
                  return_weights: bool = False) -> Any:
    """One post-LN encoder layer: ``(batch, n, d)`` -> ``(batch, n, d)``.

    Parameters
    ----------
    layer : EncoderLayerParams
    x : array ``(batch, n, d)``
    key_mask : bool ``(batch, 1, n)``, ``True`` where the key is a real token (every query
        may attend to every real key; padding keys are never attended to).
    eps : layer-norm epsilon.
    attention : MultiHeadParams, optional
        Used instead of ``layer.attention`` (for interventions, see :func:`intervene`).
    return_weights : also return the attention weights ``(batch, heads, n, n)``.
    """
    params = layer.attention if attention is None else attention
    result = multi_head_attention(params, x, mask=key_mask, return_weights=return_weights)
    attended, weights = result if return_weights else (result, None)
    h = layer_norm(x + attended, layer.attention_norm.gain, layer.attention_norm.shift, eps=eps)
    out = layer_norm(h + feed_forward(layer, h), layer.output_norm.gain,
                     layer.output_norm.shift, eps=eps)
    return (out, weights) if return_weights else out


def bert_forward(params: BertParams, config: BertConfig, input_ids: Any, token_type_ids: Any,
                 attention_mask: Any, *, score_scale: float | None = None,
                 ablate: Iterable[tuple[int, int]] = (), return_attention: bool = False,
                 return_qk: bool = False) -> BertOutput:
    """Run the encoder on a padded batch; see the module docstring for the maths.

    Parameters
    ----------
    params : BertParams (NumPy or torch; the inputs must be of the same library and device)
    config : BertConfig
    input_ids, token_type_ids : int64 ``(batch, n)``
    attention_mask : bool ``(batch, n)``, ``True`` at real tokens
    score_scale : float, optional
        The factor multiplying ``q . k`` in every layer; None keeps the trained
        ``1 / sqrt(d_head)``. ``0`` makes every attention row uniform over the real keys.
    ablate : (layer, head) pairs, counting from 0, whose output is removed (zeroed).
    return_attention, return_qk : bool
        Keep each layer's attention weights, and each layer's queries and keys.

    Returns
    -------
    BertOutput
    """
    check_score_scale(score_scale)
    ablate = check_ablate(ablate, config)
    _check_inputs(params, config, input_ids, token_type_ids, attention_mask)
    for name, flag in (("return_attention", return_attention), ("return_qk", return_qk)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected True or False, got {flag!r}")
    x = embed(params, input_ids, token_type_ids, eps=config.layer_norm_eps)
    key_mask = attention_mask[:, None, :]            # (batch, 1, n): one row for all queries
    out = BertOutput(hidden_states=[x], mask=attention_mask,
                     attention=[] if return_attention else None,
                     queries=[] if return_qk else None, keys=[] if return_qk else None)
    for i, layer in enumerate(params.layers):
        if return_qk:
            a = layer.attention
            out.queries.append(split_heads(x @ a.w_q + a.b_q, a.num_heads))
            out.keys.append(split_heads(x @ a.w_k + a.b_k, a.num_heads))
        attention = intervene(layer.attention, layer=i, score_scale=score_scale, ablate=ablate)
        result = encoder_layer(layer, x, key_mask, eps=config.layer_norm_eps,
                               attention=attention, return_weights=return_attention)
        if return_attention:
            x, weights = result
            out.attention.append(weights)
        else:
            x = result
        out.hidden_states.append(x)
    return out
