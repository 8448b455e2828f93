"""A decoder-only language model built from attncore's pieces, and sampling from it.

GPT-2's form (chapter 11's model)::

    h_0     = E[ids] + P[:n]                      token embedding + learned positions
    h_l     = Block_l(h_{l-1}), causal            l = 1 .. num_layers, pre-norm blocks
    logits  = LN_f(h_L) E^T                       final LayerNorm, output head tied to E

Llama's form has no position table (``pos_emb=None``): every block rotates its queries
and keys with RoPE instead (``rope_base``), the final normalisation is an RMSNorm like the
blocks' own, and the output head may be a matrix of its own (``head``, untied)::

    h_0     = E[ids]
    h_l     = Block_l(h_{l-1}), causal            RoPE inside each block's attention
    logits  = RMS_f(h_L) W_head                   W_head = E^T when tied

With the head tied, the logit of token ``t`` is the dot product of the final state with
``t``'s embedding row ``E[t]``.

:func:`generate` samples a continuation one token at a time through a
:class:`~attncore.KVCache` per block (:func:`~attncore.transformer.block_decode_step`;
with RoPE the cache's length is the next token's position); with ``use_cache=False`` it
recomputes the whole prefix at every step instead. Both take the same random draws, so they
choose the same tokens.

Sliding windows. ``window=W`` (and ``sink_tokens=S``) runs a model trained with full
attention as if every layer saw only the last ``W`` positions (plus the first ``S``,
StreamingLLM's attention sinks): :func:`lm_logits` masks each block's attention with
:func:`~attncore.sliding_window_mask`, and :func:`generate` decodes through one
:class:`~attncore.SlidingWindowKVCache` per block, of fixed memory, which computes the
same thing (positions stay absolute: RoPE rotates each key at its place in the sequence).
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._backend import NUMPY, backend_of, check_all_finite, check_flag, check_floating, \
    check_real, check_size, dtype_name, find_non_finite, shape_of, under_vmap
from .dropout import check_dropout
from .kvcache import BaseKVCache, KVCache, _check_cache
from .masks import sliding_window_mask
from .layers import _layer_norm, _rms_norm
from .multihead import _numpy_float_dtype
from .transformer import (
    TransformerBlockParams,
    _decode_block,
    init_transformer_block,
    transformer_block,
)

__all__ = ["LanguageModel", "generate", "init_language_model", "lm_decode", "lm_logits"]


@dataclass
class LanguageModel:
    """Weights of a decoder-only language model (all NumPy arrays or all torch tensors).

    Attributes
    ----------
    tok_emb : array, shape ``(vocab_size, d_model)``
        Token embedding ``E``; also the output head when ``head`` is None
        (``logits = h E^T``).
    pos_emb : array of shape ``(max_len, d_model)``, or None
        Learned position embedding ``P`` (GPT-2): the model reads at most ``max_len``
        tokens. None for a model whose blocks rotate queries and keys with RoPE (every
        block must then have a ``rope_base``).
    blocks : list of TransformerBlockParams
        Pre-norm blocks, applied causally, all with the same ``norm`` and ``eps``.
    lnf_weight, lnf_bias : arrays of shape ``(d_model,)`` (the bias may be None)
        The final normalisation, of the blocks' kind (LayerNorm, or RMSNorm without a
        bias).
    head : array of shape ``(d_model, vocab_size)``, or None
        An untied output head, ``logits = h W_head`` (attncore's ``(in, out)`` layout);
        None ties it to the embedding, ``W_head = E^T``.
    max_len : int, optional
        The most positions the model reads: the rows of ``pos_emb`` (the default, and it
        must agree), or the trained context length of a RoPE model (required there).

    Raises
    ------
    TypeError, ValueError
        Mixed libraries, shapes that do not fit, blocks that differ in width, backend,
        normalisation or ``eps``, a post-norm block, a model without positions (no
        ``pos_emb`` and blocks without RoPE), a missing or inconsistent ``max_len``.
    """

    tok_emb: Any
    pos_emb: Any
    blocks: list[TransformerBlockParams]
    lnf_weight: Any
    lnf_bias: Any
    head: Any = None
    max_len: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.blocks, (list, tuple)) or not self.blocks or \
                not all(isinstance(b, TransformerBlockParams) for b in self.blocks):
            raise TypeError("blocks: expected a non-empty list of TransformerBlockParams")
        self.blocks = list(self.blocks)
        first = self.blocks[0]
        backend_of(tok_emb=self.tok_emb, pos_emb=self.pos_emb, lnf_weight=self.lnf_weight,
                   lnf_bias=self.lnf_bias, head=self.head, blocks=first.attn.w_q)
        d = first.d_model
        for name, x in (("tok_emb", self.tok_emb), ("pos_emb", self.pos_emb)):
            if x is None and name == "pos_emb":
                continue
            check_floating(name, x)
            s = shape_of(x)
            if len(s) != 2 or s[1] != d or s[0] < 1:
                raise ValueError(f"{name}: expected shape (rows, d_model={d}) with rows >= 1, "
                                 f"got {s}")
        for name, x in (("lnf_weight", self.lnf_weight), ("lnf_bias", self.lnf_bias)):
            if x is not None and shape_of(x) != (d,):
                raise ValueError(f"{name}: expected shape ({d},), got {shape_of(x)}")
        if self.lnf_weight is None:
            raise TypeError("lnf_weight: expected an array of shape (d_model,), got None")
        if self.head is not None and shape_of(self.head) != (d, self.vocab_size):
            raise ValueError(f"head: expected shape (d_model, vocab_size) = ({d}, "
                             f"{self.vocab_size}) or None (tied to tok_emb), got "
                             f"{shape_of(self.head)}")
        for i, b in enumerate(self.blocks):
            if b.d_model != d or b.backend != first.backend:
                raise ValueError(f"blocks[{i}]: expected d_model={d} and the backend of "
                                 f"blocks[0], got d_model={b.d_model}, {b.backend}")
            if not b.norm_first:
                raise ValueError(f"blocks[{i}]: expected a pre-norm block (norm_first=True): "
                                 f"the final normalisation belongs to pre-norm models")
            if (b.norm, b.eps) != (first.norm, first.eps):
                raise ValueError(f"blocks[{i}]: expected norm={first.norm!r}, eps={first.eps} "
                                 f"as blocks[0] (the final normalisation is theirs), got "
                                 f"norm={b.norm!r}, eps={b.eps}")
            if self.pos_emb is None and b.rope_base is None:
                raise ValueError(f"pos_emb: expected a position table, or blocks with RoPE "
                                 f"(rope_base) to tell the model where each token stands; "
                                 f"got pos_emb=None and blocks[{i}].rope_base=None")
        if first.norm == "rms" and self.lnf_bias is not None:
            raise ValueError("lnf_bias: expected None with RMSNorm blocks (no shift)")
        check_same = [self.tok_emb, self.lnf_weight] + \
            [x for x in (self.pos_emb, self.lnf_bias, self.head) if x is not None]
        if any(x.dtype != first.attn.w_q.dtype for x in check_same):
            raise TypeError(f"tok_emb, pos_emb, lnf_weight, lnf_bias, head: expected the "
                            f"blocks' dtype {first.attn.w_q.dtype}, got "
                            f"{sorted({str(x.dtype) for x in check_same})}")
        if self.pos_emb is not None:
            rows = int(self.pos_emb.shape[0])
            if self.max_len is not None and check_size("max_len", self.max_len) != rows:
                raise ValueError(f"max_len: expected the rows of pos_emb, {rows}, or None, "
                                 f"got {self.max_len}")
            self.max_len = rows
        elif self.max_len is None:
            raise ValueError("max_len: expected the model's context length (an integer >= 1) "
                             "for a model without a position table, got None")
        else:
            self.max_len = check_size("max_len", self.max_len)

    @property
    def vocab_size(self) -> int:
        return int(self.tok_emb.shape[0])

    @property
    def d_model(self) -> int:
        return int(self.tok_emb.shape[1])

    @property
    def backend(self) -> str:
        return self.blocks[0].backend

    @property
    def tied(self) -> bool:
        """Whether the output head is the token embedding (``head`` is None)."""
        return self.head is None

    def tensors(self) -> list[Any]:
        """Every weight, each once (a tied head is ``tok_emb``), in a fixed order."""
        out = [self.tok_emb] + ([] if self.pos_emb is None else [self.pos_emb])
        for b in self.blocks:
            out.extend(b.tensors())
        out.append(self.lnf_weight)
        if self.lnf_bias is not None:
            out.append(self.lnf_bias)
        if self.head is not None:
            out.append(self.head)
        return out

    def num_parameters(self) -> int:
        """Number of scalars in the weights, a tied head counted once."""
        return sum(int(np.prod(shape_of(x))) for x in self.tensors())


def init_language_model(vocab_size: int, d_model: int, num_heads: int, d_ff: int,
                        num_layers: int, max_len: int, *, activation: str = "gelu",
                        bias: bool = True, n_kv_heads: int | None = None, norm: str = "layer",
                        rope_base: float | None = None, gate: bool = False,
                        qk_norm: bool = False, tie_head: bool = True, seed: int = 0,
                        dtype: Any = np.float64, backend: str = NUMPY,
                        device: Any = None) -> LanguageModel:
    """Seeded weights of a :class:`LanguageModel`: GPT-2's form by default, Llama's with
    ``norm="rms", activation="swiglu", bias=False, rope_base=...`` (and ``n_kv_heads``,
    ``tie_head``).

    Embeddings are ``N(0, 0.02^2)`` (GPT-2's choice: small, so that the tied head starts
    with near-uniform predictions), an untied head too; block ``l`` is
    :func:`init_transformer_block` with a seed drawn from NumPy's ``default_rng(seed)``, the
    same numbers on every backend. With ``rope_base`` there is no position table.

    Parameters
    ----------
    vocab_size, d_model, num_heads, d_ff, num_layers, max_len : int
        Sizes, each ``>= 1`` (``num_heads`` dividing ``d_model``); ``max_len`` is the rows
        of the position table, or with RoPE the context length.
    activation, bias, n_kv_heads, norm, rope_base, gate, qk_norm
        Of every block (:func:`~attncore.transformer.init_transformer_block`).
    tie_head : bool, default True
        The output head is the token embedding (True) or a matrix of its own.
    seed : int, default 0
    dtype, backend, device
        As in :func:`~attncore.init_multihead`.

    Returns
    -------
    LanguageModel
    """
    sizes = {"vocab_size": vocab_size, "d_model": d_model, "d_ff": d_ff,
             "num_layers": num_layers, "max_len": max_len}
    sizes = {n: check_size(n, v) for n, v in sizes.items()}
    seed = check_size("seed", seed, minimum=0)
    tie_head = check_flag("tie_head", tie_head)
    rng = np.random.default_rng(seed)
    tok = rng.normal(0.0, 0.02, (sizes["vocab_size"], sizes["d_model"]))
    pos = rng.normal(0.0, 0.02, (sizes["max_len"], sizes["d_model"])) if rope_base is None \
        else None
    blocks = [init_transformer_block(d_model, num_heads, d_ff, norm_first=True,
                                     activation=activation, bias=bias, n_kv_heads=n_kv_heads,
                                     norm=norm, rope_base=rope_base, gate=gate,
                                     qk_norm=qk_norm,
                                     seed=int(rng.integers(0, 2**31 - 2)), dtype=dtype,
                                     backend=backend, device=device)
              for _ in range(sizes["num_layers"])]
    head = None if tie_head else rng.normal(0.0, 0.02, (sizes["d_model"], sizes["vocab_size"]))
    like = blocks[0].ln1_weight
    if backend == NUMPY:
        np_dtype = _numpy_float_dtype(dtype, backend)
        conv = lambda a: a.astype(np_dtype)                      # noqa: E731
    else:
        import torch

        conv = lambda a: torch.tensor(a, dtype=like.dtype, device=like.device)  # noqa: E731
    lnf_bias = conv(np.zeros(sizes["d_model"])) if blocks[0].ln1_bias is not None else None
    return LanguageModel(conv(tok), None if pos is None else conv(pos), blocks,
                         conv(np.ones(sizes["d_model"])), lnf_bias,
                         head=None if head is None else conv(head), max_len=sizes["max_len"])


def _check_ids(model: Any, ids: Any, name: str) -> Any:
    """``ids`` as an int64 array (NumPy) or tensor (torch, on the model's device) of shape
    ``(..., n)``, checked against the vocabulary and ``max_len``."""
    if not isinstance(model, LanguageModel):
        raise TypeError(f"model: expected a LanguageModel (see init_language_model), got "
                        f"{type(model).__name__}")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids)
    if ids.ndim < 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
        raise ValueError(f"{name}: expected integer token ids of shape (..., n), got dtype "
                         f"{ids.dtype} and shape {ids.shape}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= model.vocab_size):
        # a negative id would silently pick an embedding row from the end of the table
        raise ValueError(f"{name}: expected ids in [0, {model.vocab_size}), got "
                         f"[{int(ids.min())}, {int(ids.max())}]")
    if ids.shape[-1] > model.max_len:
        raise ValueError(f"{name}: expected at most max_len={model.max_len} positions, got "
                         f"{ids.shape[-1]}")
    ids = ids.astype(np.int64)
    if model.backend == NUMPY:
        return ids
    return torch.as_tensor(ids, device=model.tok_emb.device)


def check_window_args(window: Any, sink_tokens: Any) -> tuple[int | None, int]:
    """``window`` (None or ``>= 1``) and ``sink_tokens`` (``>= 0``, and 0 without a
    window: sink tokens are what a window keeps besides its band)."""
    sink_tokens = check_size("sink_tokens", sink_tokens, minimum=0)
    if window is None:
        if sink_tokens:
            raise ValueError(f"sink_tokens: expected 0 without a window (every position "
                             f"is seen already), got {sink_tokens}")
        return None, 0
    return check_size("window", window), sink_tokens


def lm_logits(model: LanguageModel, ids: Any, *, dropout_p: float = 0.0,
              generator: Any = None, window: int | None = None,
              sink_tokens: int = 0) -> Any:
    """Next-token logits at every position, the whole sequence in one causal pass.

    Parameters
    ----------
    model : LanguageModel
    ids : integer array or tensor, shape ``(..., n)``
        Token ids in ``[0, vocab_size)``, ``n <= max_len``, at positions ``0 .. n-1``.
    dropout_p : real number in ``[0, 1)``, default 0.0
        Dropout in every block (and on the embeddings), for training; 0 at inference.
    generator : numpy.random.Generator or torch.Generator, optional
        The source of the dropout draws.
    window : int, optional
        ``W >= 1``: every block's attention sees only the last ``W`` positions, its own
        included (:func:`~attncore.sliding_window_mask`); None is full causal attention.
    sink_tokens : int, default 0
        With ``window``: the first ``S`` positions stay visible to every query too.

    Returns
    -------
    array or tensor, shape ``(..., n, vocab_size)``, the model's dtype
        Row ``t`` scores the token that follows ``ids[..., t]``, from ``ids[..., :t+1]``
        (with a window, from the positions the window and the sink tokens keep).

    Raises
    ------
    TypeError, ValueError
        A model that is not a :class:`LanguageModel`; ids that are not integers or lie
        outside ``[0, vocab_size)``; more than ``max_len`` positions; a bad ``dropout_p``
        or generator; an overflow: in attention (as :func:`~attncore.multi_head_attention`),
        in a feed-forward layer or the residual stream (named ``blocks[i]: params.w_ff1,
        ...``) or in the head (named ``head``, or ``tok_emb`` when tied); a ``window``
        below 1, negative ``sink_tokens``, or sink tokens without a window.
    """
    ids = _check_ids(model, ids, "ids")
    drop = check_dropout(dropout_p, generator, model.backend,
                         like=None if model.backend == NUMPY else model.tok_emb)
    window, sink_tokens = check_window_args(window, sink_tokens)
    h = _embed(model, ids, 0)
    mask = None
    if window is not None:
        n = int(ids.shape[-1])
        mask = sliding_window_mask(n, n, window, sink_tokens=sink_tokens, like=h)
    if drop is not None:
        from .dropout import apply_dropout

        h = apply_dropout(h, drop)
    for i, block in enumerate(model.blocks):
        with _in_block(i):
            h = transformer_block(block, h, mask=mask, causal=True, dropout_p=dropout_p,
                                  generator=generator)
    return _head(model, h)


def lm_decode(model: LanguageModel, ids: Any, caches: Any) -> Any:
    """Next-token logits of new tokens, read through one KV cache per block.

    The tokens ``ids`` stand at positions ``len(caches[0]), ...``: their keys and values
    are appended to the caches and each attends to every position held so far, up to its
    own (:func:`~attncore.transformer.block_decode_step` in each block). Equal, up to
    rounding, to the last ``n`` rows of :func:`lm_logits` on every token so far (with a
    :class:`~attncore.KVCache`; an :class:`~attncore.Int8KVCache` gives the logits of its
    rounded keys and values). What :func:`generate` does one token at a time, for any
    number of tokens at once: a prompt, or the tokens of a speculative proposal to
    verify (then :meth:`~attncore.KVCache.truncate` forgets those rejected).

    Parameters
    ----------
    model : LanguageModel
    ids : integer array or tensor, shape ``(..., n)``, ``n >= 1``
        In ``[0, vocab_size)``; ``len(caches[0]) + n <= max_len``.
    caches : list of BaseKVCache, one per block, all of the same length
        Block ``l``'s made for its attention layer, e.g. ``[KVCache.for_layer(b.attn,
        capacity, ids.shape[:-1]) for b in model.blocks]`` (or
        ``Int8KVCache.for_layer``), in the model's library, dtype and device.

    Returns
    -------
    array or tensor, shape ``(..., n, vocab_size)``, the model's dtype
        Row ``t`` scores the token that follows ``ids[..., t]``.

    Raises
    ------
    TypeError, ValueError
        A model that is not a :class:`LanguageModel`; bad ids (as :func:`lm_logits`); not
        one cache per block, caches of different lengths, a cache of the wrong layout,
        library or dtype or without room for ``n`` positions; more than ``max_len``
        positions in all. On any error every cache is left as it was.
    """
    ids = _check_ids(model, ids, "ids")
    if ids.ndim < 1 or ids.shape[-1] < 1:
        raise ValueError(f"ids: expected shape (..., n) with n >= 1, got "
                         f"{tuple(ids.shape)}")
    if not isinstance(caches, (list, tuple)) or len(caches) != len(model.blocks):
        got = f"{len(caches)} caches" if isinstance(caches, (list, tuple)) else \
            type(caches).__name__
        raise ValueError(f"caches: expected a list of {len(model.blocks)} caches, one per "
                         f"block, got {got}")
    for i, cache in enumerate(caches):
        if not isinstance(cache, BaseKVCache):
            raise TypeError(f"caches: expected KV caches (KVCache.for_layer(block.attn, "
                            f"capacity, batch_shape)), got {type(cache).__name__} at "
                            f"index {i}")
    lengths = {len(c) for c in caches}
    if len(lengths) != 1:
        raise ValueError(f"caches: expected every block's cache to hold the same number of "
                         f"positions, got lengths {[len(c) for c in caches]}")
    start, n = lengths.pop(), int(ids.shape[-1])
    if start + n > model.max_len:
        raise ValueError(f"ids: expected at most max_len={model.max_len} positions with the "
                         f"{start} the caches hold, got {start} + {n}")
    h = _embed(model, ids, start)
    for i, (block, cache) in enumerate(zip(model.blocks, caches)):
        try:
            _check_cache(cache, block.attn, h, block.rope_base)
        except (TypeError, ValueError) as e:
            raise type(e)(f"caches[{i}]: {e}") from None
    checkpoints = [c._checkpoint() for c in caches]
    try:
        for i, (block, cache) in enumerate(zip(model.blocks, caches)):
            with _in_block(i):
                h = _decode_block(block, h, cache)
    except Exception:
        for cache, checkpoint in zip(caches, checkpoints):
            if len(cache) != start:
                cache._rollback(checkpoint)
        raise
    return _head(model, h)


def _embed(model: LanguageModel, ids: Any, start: int) -> Any:
    """The token embeddings of ``ids`` (checked), plus the learned positions ``start,
    start + 1, ...`` if the model has them."""
    h = model.tok_emb[ids]
    if model.pos_emb is not None:
        h = h + model.pos_emb[start:start + ids.shape[-1]]
    return h


class _in_block:
    """Prefix ``blocks[i]: `` to a ValueError raised inside block ``i``: the arguments of
    the model's functions are ids and settings, so a value that goes wrong inside the
    stack (an overflow) is named by the block and weight where it happened."""

    def __init__(self, i: int) -> None:
        self.i = i

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, err: Any, tb: Any) -> bool:
        if kind is ValueError:
            raise ValueError(f"blocks[{self.i}]: {err}") from None
        return False


def _head(model: LanguageModel, h: Any) -> Any:
    """The final normalisation, then the head: ``LN_f(h) W_head`` (``W_head = E^T`` when
    tied), checked for an overflow (NaN or infinite logits would make :func:`generate`
    choose a token of probability 0)."""
    first = model.blocks[0]
    with np.errstate(over="ignore", invalid="ignore"):
        if first.norm == "rms":
            h = _rms_norm(h, model.lnf_weight, first.eps)
        else:
            h = _layer_norm(h, model.lnf_weight, model.lnf_bias, first.eps)
        logits = h @ (model.tok_emb.T if model.head is None else model.head)
    if not under_vmap(logits) and find_non_finite(logits=logits) is not None:
        name = "tok_emb (the tied head)" if model.head is None else "head"
        check_all_finite(**{"lnf_weight": model.lnf_weight, "lnf_bias": model.lnf_bias,
                            name: model.tok_emb if model.head is None else model.head})
        raise ValueError(f"{name}: the head overflowed {dtype_name(logits)}: the logits "
                         f"LN_f(h) @ W_head hold NaN or infinity for finite input; compute "
                         f"in a wider dtype or use smaller weights")
    return logits


def _sample(logits: np.ndarray, u: np.ndarray, temperature: float,
            top_k: int | None) -> np.ndarray:
    """One token per row of ``logits`` (float64, ``(batch, vocab)``) by inverting the
    cumulative distribution at the uniform draws ``u`` (``(batch,)``)."""
    if temperature == 0.0:
        return logits.argmax(axis=-1)
    # The largest logit is subtracted *before* dividing by the temperature: the quotients
    # are then <= 0, and a tiny temperature (1e-310) sends them to 0 at the maxima and to
    # -inf elsewhere, never to +inf - inf = NaN. That is the limit of sampling as the
    # temperature goes to 0: greedy decoding, ties drawn evenly.
    with np.errstate(over="ignore", divide="ignore"):
        z = (logits - logits.max(axis=-1, keepdims=True)) / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.sort(z, axis=-1)[:, -top_k][:, None]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z)
    cdf = np.cumsum(p, axis=-1)
    cdf /= cdf[:, -1:]
    chosen = (cdf <= u[:, None]).sum(axis=-1)
    return np.minimum(chosen, logits.shape[-1] - 1)


def generate(model: LanguageModel, prompt_ids: Any, n_new: int, *, temperature: float = 1.0,
             top_k: int | None = None, generator: Any = None,
             use_cache: bool = True, window: int | None = None,
             sink_tokens: int = 0) -> np.ndarray:
    """Extend ``prompt_ids`` by ``n_new`` sampled tokens.

    At each step the logits of the last position are divided by ``temperature``, all but
    the ``top_k`` largest set to ``-inf`` (if given), turned into probabilities by a
    softmax, and one token is drawn by inverting their cumulative sum at a uniform number
    from ``generator``. With ``use_cache`` (the default) the prompt runs through the model
    once, filling one :class:`~attncore.KVCache` per block, and then each new token alone
    (:func:`~attncore.transformer.block_decode_step`, its arguments checked once for all
    steps; with RoPE the cache's length is the new token's position): a step costs
    ``O(t)`` instead of recomputing all ``t`` positions. ``use_cache=False`` recomputes
    the whole prefix at every step (:func:`lm_logits`); it takes the same draws and
    chooses the same tokens.

    Works for both forms of :class:`LanguageModel` (learned positions or RoPE, tied or
    untied head).

    Parameters
    ----------
    model : LanguageModel
    prompt_ids : integer array or tensor, shape ``(n0,)`` or ``(batch, n0)``, ``n0 >= 1``
    n_new : int, ``>= 0``; ``n0 + n_new <= model.max_len``
    temperature : real number ``>= 0``, default 1.0
        0 means greedy decoding (the arg-max; no draws are taken). Any positive
        temperature, however small, samples; as it goes to 0 the distribution becomes
        the arg-max (a temperature such as 1e-310, whose quotients overflow, gives
        exactly that, ties drawn evenly; never NaN).
    top_k : int, optional
        Sample only among the ``top_k >= 1`` most likely tokens (ties with the ``top_k``-th
        are kept).
    generator : numpy.random.Generator or torch.Generator, optional
        Matching the model's library; ``None`` uses the library's default source.
    use_cache : bool, default True
    window : int, optional
        ``W >= 1``: every block attends to the last ``W`` positions only (and the first
        ``sink_tokens``); the cache is then a :class:`~attncore.SlidingWindowKVCache` per
        block, whose memory stays ``W + sink_tokens`` positions however long the text,
        and ``use_cache=False`` recomputes with :func:`lm_logits`'s same ``window``.
    sink_tokens : int, default 0
        With ``window``: StreamingLLM's attention sinks, the first positions kept.

    Returns
    -------
    numpy.ndarray of int64, shape of ``prompt_ids`` with ``n0 + n_new`` on the last axis
        The prompt followed by the new tokens.

    Raises
    ------
    TypeError, ValueError
        A model that is not a :class:`LanguageModel`; ids outside the vocabulary or not
        integers; more positions than ``max_len``; a bad ``temperature``, ``top_k``,
        ``n_new``, generator, ``window`` or ``sink_tokens``.
    """
    steps = _token_steps(model, prompt_ids, n_new, temperature=temperature, top_k=top_k,
                         generator=generator, use_cache=use_cache, window=window,
                         sink_tokens=sink_tokens)
    tokens, one = next(steps)
    new = [chosen for chosen in steps]
    if new:
        tokens = np.concatenate([tokens] + [c[:, None] for c in new], axis=1)
    return tokens[0] if one else tokens


def _token_steps(model: LanguageModel, prompt_ids: Any, n_new: int, *,
                 temperature: Any = 1.0, top_k: Any = None, generator: Any = None,
                 use_cache: Any = True, name: str = "prompt_ids", window: Any = None,
                 sink_tokens: Any = 0) -> Any:
    """:func:`generate`, one step at a time: checks the arguments, yields ``(prompt,
    one)`` (the prompt as an int64 ``(batch, n0)`` array, and whether it was 1-D), then
    the ``(batch,)`` tokens chosen at each of the ``n_new`` steps, as they are chosen
    (for streaming text as it is generated). ``name`` is the caller's name for the
    prompt, in error messages."""
    ids = _check_ids(model, prompt_ids, name)
    n_new = check_size("n_new", n_new, minimum=0)
    use_cache = check_flag("use_cache", use_cache)
    window, sink_tokens = check_window_args(window, sink_tokens)
    temperature = check_real("temperature", temperature, minimum=0)
    if top_k is not None:
        top_k = check_size("top_k", top_k)
    check_dropout(0.0, generator, model.backend)       # the generator's library
    one = ids.ndim == 1
    if one:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[-1] < 1:
        raise ValueError(f"{name}: expected shape (n0,) or (batch, n0) with n0 >= 1, got "
                         f"{tuple(prompt_ids.shape) if hasattr(prompt_ids, 'shape') else ''}")
    batch, n0 = int(ids.shape[0]), int(ids.shape[1])
    if n0 + n_new > model.max_len:
        raise ValueError(f"n_new: expected n0 + n_new <= max_len={model.max_len}, got {n0} + "
                         f"{n_new}")
    torch = sys.modules.get("torch") if model.backend != NUMPY else None
    if generator is None and temperature != 0.0:
        generator = np.random.default_rng() if torch is None else torch.default_generator

    def uniform() -> np.ndarray:
        if temperature == 0.0:
            return np.zeros(batch)
        if torch is None:
            return generator.random(batch)
        return torch.rand(batch, generator=generator, dtype=torch.float64,
                          device=generator.device).cpu().numpy()

    tokens = np.asarray(ids.cpu() if torch is not None else ids)
    yield tokens, one
    if n_new == 0:
        return
    logits_of = _cached_logits(model, batch, n0 + n_new, window, sink_tokens) \
        if use_cache else (lambda all_ids, new_ids: lm_logits(
            model, all_ids, window=window, sink_tokens=sink_tokens)[:, -1])
    grad = torch.no_grad() if torch is not None else None
    new = ids
    for _ in range(n_new):
        if grad is not None:
            with grad:
                logits = logits_of(tokens, new)
            logits = logits.detach().cpu().double().numpy()
        else:
            logits = logits_of(tokens, new)
        chosen = _sample(np.asarray(logits, dtype=np.float64), uniform(), temperature, top_k)
        chosen = chosen.astype(np.int64)
        tokens = np.concatenate([tokens, chosen[:, None]], axis=1)
        new = chosen[:, None] if torch is None else \
            torch.as_tensor(chosen[:, None], device=model.tok_emb.device)
        yield chosen


def _cached_logits(model: LanguageModel, batch: int, capacity: int,
                   window: int | None = None, sink_tokens: int = 0) -> Callable[..., Any]:
    """``logits_of(all_ids, new_ids)``: the last position's logits ``(batch, vocab)``,
    running only the new tokens through the blocks, one :class:`~attncore.KVCache` per
    block holding the earlier ones (a :class:`~attncore.SlidingWindowKVCache` of
    ``window`` and ``sink_tokens`` with a window)."""
    if window is None:
        caches = [KVCache.for_layer(b.attn, capacity, (batch,)) for b in model.blocks]
    else:
        from .window_cache import SlidingWindowKVCache

        caches = [SlidingWindowKVCache.for_layer(b.attn, window, (batch,),
                                                 sink_tokens=sink_tokens)
                  for b in model.blocks]

    def logits_of(all_ids: Any, new_ids: Any) -> Any:
        h = _embed(model, new_ids, caches[0].length)
        for i, (block, cache) in enumerate(zip(model.blocks, caches)):
            with _in_block(i):
                h = _decode_block(block, h, cache)    # block_decode_step, checked once
        return _head(model, h[:, -1:])[:, 0]

    return logits_of
