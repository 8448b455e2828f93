"""A small decoder-only language model built from attncore's pieces, and sampling from it.

    h_0     = E[ids] + P[:n]                      token embedding + learned positions
    h_l     = Block_l(h_{l-1}), causal            l = 1 .. num_layers, pre-norm blocks
    logits  = LN_f(h_L) E^T                       final LayerNorm, output head tied to E

The output head is the token embedding itself, transposed (weight tying): the logit of
token ``t`` is the dot product of the final state with ``t``'s embedding row ``E[t]``.

:func:`generate` samples a continuation one token at a time through a
:class:`~attncore.KVCache` per block (:func:`~attncore.transformer.block_decode_step`);
with ``use_cache=False`` it recomputes the whole prefix at every step instead. Both take
the same random draws, so they choose the same tokens.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._backend import NUMPY, backend_of, check_flag, check_real, check_size, shape_of
from .dropout import check_dropout
from .kvcache import KVCache
from .multihead import _numpy_float_dtype
from .transformer import (
    TransformerBlockParams,
    block_decode_step,
    init_transformer_block,
    layer_norm,
    transformer_block,
)

__all__ = ["LanguageModel", "generate", "init_language_model", "lm_logits"]


@dataclass
class LanguageModel:
    """Weights of a decoder-only language model (all NumPy arrays or all torch tensors).

    Attributes
    ----------
    tok_emb : array, shape ``(vocab_size, d_model)``
        Token embedding ``E``; also the output head (``logits = h E^T``).
    pos_emb : array, shape ``(max_len, d_model)``
        Learned position embedding ``P``: the model reads at most ``max_len`` tokens.
    blocks : list of TransformerBlockParams
        Pre-norm blocks, applied causally.
    lnf_weight, lnf_bias : arrays of shape ``(d_model,)`` (the bias may be None)
        The final LayerNorm.
    """

    tok_emb: Any
    pos_emb: Any
    blocks: list[TransformerBlockParams]
    lnf_weight: Any
    lnf_bias: Any

    def __post_init__(self) -> None:
        backend_of(tok_emb=self.tok_emb, pos_emb=self.pos_emb, lnf_weight=self.lnf_weight,
                   lnf_bias=self.lnf_bias)
        if not self.blocks or not all(isinstance(b, TransformerBlockParams)
                                      for b in self.blocks):
            raise TypeError("blocks: expected a non-empty list of TransformerBlockParams")
        d = self.blocks[0].d_model
        for name, x in (("tok_emb", self.tok_emb), ("pos_emb", self.pos_emb)):
            s = shape_of(x)
            if len(s) != 2 or s[1] != d or s[0] < 1:
                raise ValueError(f"{name}: expected shape (rows, d_model={d}) with rows >= 1, "
                                 f"got {s}")
        for name, x in (("lnf_weight", self.lnf_weight), ("lnf_bias", self.lnf_bias)):
            if x is not None and shape_of(x) != (d,):
                raise ValueError(f"{name}: expected shape ({d},), got {shape_of(x)}")
        for i, b in enumerate(self.blocks):
            if b.d_model != d or b.backend != self.blocks[0].backend:
                raise ValueError(f"blocks[{i}]: expected d_model={d} and the backend of "
                                 f"blocks[0], got d_model={b.d_model}, {b.backend}")
            if not b.norm_first:
                raise ValueError(f"blocks[{i}]: expected a pre-norm block (norm_first=True): "
                                 f"the final LayerNorm belongs to pre-norm models")

    @property
    def vocab_size(self) -> int:
        return int(self.tok_emb.shape[0])

    @property
    def max_len(self) -> int:
        return int(self.pos_emb.shape[0])

    @property
    def d_model(self) -> int:
        return int(self.tok_emb.shape[1])

    @property
    def backend(self) -> str:
        return self.blocks[0].backend

    def tensors(self) -> list[Any]:
        """Every weight, each once (the tied head is ``tok_emb``), in a fixed order."""
        out = [self.tok_emb, self.pos_emb]
        for b in self.blocks:
            out.extend(b.tensors())
        out.append(self.lnf_weight)
        if self.lnf_bias is not None:
            out.append(self.lnf_bias)
        return out

    def num_parameters(self) -> int:
        """Number of scalars in the weights, the tied head counted once."""
        return sum(int(np.prod(shape_of(x))) for x in self.tensors())


def init_language_model(vocab_size: int, d_model: int, num_heads: int, d_ff: int,
                        num_layers: int, max_len: int, *, activation: str = "gelu",
                        bias: bool = True, n_kv_heads: int | None = None, seed: int = 0,
                        dtype: Any = np.float64, backend: str = NUMPY,
                        device: Any = None) -> LanguageModel:
    """Seeded weights of a :class:`LanguageModel`.

    Embeddings are ``N(0, 0.02^2)`` (GPT-2's choice: small, so that the tied head starts
    with near-uniform predictions); block ``l`` is :func:`init_transformer_block` with a
    seed drawn from NumPy's ``default_rng(seed)``, the same numbers on every backend.

    Parameters
    ----------
    vocab_size, d_model, num_heads, d_ff, num_layers, max_len : int
        Sizes, each ``>= 1`` (``num_heads`` dividing ``d_model``).
    activation, bias, n_kv_heads
        Of every block (:func:`~attncore.transformer.init_transformer_block`).
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
    rng = np.random.default_rng(seed)
    tok = rng.normal(0.0, 0.02, (sizes["vocab_size"], sizes["d_model"]))
    pos = rng.normal(0.0, 0.02, (sizes["max_len"], sizes["d_model"]))
    blocks = [init_transformer_block(d_model, num_heads, d_ff, norm_first=True,
                                     activation=activation, bias=bias, n_kv_heads=n_kv_heads,
                                     seed=int(rng.integers(0, 2**31 - 2)), dtype=dtype,
                                     backend=backend, device=device)
              for _ in range(sizes["num_layers"])]
    like = blocks[0].ln1_weight
    if backend == NUMPY:
        np_dtype = _numpy_float_dtype(dtype, backend)
        conv = lambda a: a.astype(np_dtype)                      # noqa: E731
    else:
        import torch

        conv = lambda a: torch.tensor(a, dtype=like.dtype, device=like.device)  # noqa: E731
    lnf_bias = conv(np.zeros(sizes["d_model"])) if bias else None
    return LanguageModel(conv(tok), conv(pos), blocks, conv(np.ones(sizes["d_model"])),
                         lnf_bias)


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


def lm_logits(model: LanguageModel, ids: Any, *, dropout_p: float = 0.0,
              generator: Any = None) -> Any:
    """Next-token logits at every position, the whole sequence in one causal pass.

    Parameters
    ----------
    model : LanguageModel
    ids : integer array or tensor, shape ``(..., n)``
        Token ids in ``[0, vocab_size)``, ``n <= max_len``.
    dropout_p : real number in ``[0, 1)``, default 0.0
        Dropout in every block (and on the embeddings), for training; 0 at inference.
    generator : numpy.random.Generator or torch.Generator, optional
        The source of the dropout draws.

    Returns
    -------
    array or tensor, shape ``(..., n, vocab_size)``, the model's dtype
        Row ``t`` scores the token that follows ``ids[..., t]``, from ``ids[..., :t+1]``.
    """
    ids = _check_ids(model, ids, "ids")
    drop = check_dropout(dropout_p, generator, model.backend,
                         like=None if model.backend == NUMPY else model.tok_emb)
    n = ids.shape[-1]
    h = model.tok_emb[ids] + model.pos_emb[:n]
    if drop is not None:
        from .dropout import apply_dropout

        h = apply_dropout(h, drop)
    for block in model.blocks:
        h = transformer_block(block, h, causal=True, dropout_p=dropout_p, generator=generator)
    return _head(model, h)


def _head(model: LanguageModel, h: Any) -> Any:
    """Final LayerNorm, then the tied head: ``LN_f(h) E^T``."""
    h = layer_norm(h, model.lnf_weight, model.lnf_bias, model.blocks[0].eps)
    return h @ model.tok_emb.T


def _sample(logits: np.ndarray, u: np.ndarray, temperature: float,
            top_k: int | None) -> np.ndarray:
    """One token per row of ``logits`` (float64, ``(batch, vocab)``) by inverting the
    cumulative distribution at the uniform draws ``u`` (``(batch,)``)."""
    if temperature == 0.0:
        return logits.argmax(axis=-1)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.sort(z, axis=-1)[:, -top_k][:, None]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    cdf = np.cumsum(p, axis=-1)
    cdf /= cdf[:, -1:]
    chosen = (cdf <= u[:, None]).sum(axis=-1)
    return np.minimum(chosen, logits.shape[-1] - 1)


def generate(model: LanguageModel, prompt_ids: Any, n_new: int, *, temperature: float = 1.0,
             top_k: int | None = None, generator: Any = None,
             use_cache: bool = True) -> np.ndarray:
    """Extend ``prompt_ids`` by ``n_new`` sampled tokens.

    At each step the logits of the last position are divided by ``temperature``, all but
    the ``top_k`` largest set to ``-inf`` (if given), turned into probabilities by a
    softmax, and one token is drawn by inverting their cumulative sum at a uniform number
    from ``generator``. With ``use_cache`` (the default) the prompt runs through the model
    once, filling one :class:`~attncore.KVCache` per block, and then each new token alone
    (:func:`~attncore.transformer.block_decode_step`): a step costs ``O(t)`` instead of
    recomputing all ``t`` positions. ``use_cache=False`` recomputes the whole prefix at every
    step (:func:`lm_logits`); it takes the same draws and chooses the same tokens.

    Parameters
    ----------
    model : LanguageModel
    prompt_ids : integer array or tensor, shape ``(n0,)`` or ``(batch, n0)``, ``n0 >= 1``
    n_new : int, ``>= 0``; ``n0 + n_new <= model.max_len``
    temperature : real number ``>= 0``, default 1.0
        0 means greedy decoding (the arg-max; no draws are taken).
    top_k : int, optional
        Sample only among the ``top_k >= 1`` most likely tokens (ties with the ``top_k``-th
        are kept).
    generator : numpy.random.Generator or torch.Generator, optional
        Matching the model's library; ``None`` uses the library's default source.
    use_cache : bool, default True

    Returns
    -------
    numpy.ndarray of int64, shape of ``prompt_ids`` with ``n0 + n_new`` on the last axis
        The prompt followed by the new tokens.

    Raises
    ------
    TypeError, ValueError
        A model that is not a :class:`LanguageModel`; ids outside the vocabulary or not
        integers; more positions than ``max_len``; a bad ``temperature``, ``top_k``,
        ``n_new`` or generator.
    """
    ids = _check_ids(model, prompt_ids, "prompt_ids")
    n_new = check_size("n_new", n_new, minimum=0)
    use_cache = check_flag("use_cache", use_cache)
    temperature = check_real("temperature", temperature, minimum=0)
    if top_k is not None:
        top_k = check_size("top_k", top_k)
    check_dropout(0.0, generator, model.backend)       # the generator's library
    one = ids.ndim == 1
    if one:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[-1] < 1:
        raise ValueError(f"prompt_ids: expected shape (n0,) or (batch, n0) with n0 >= 1, got "
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
    grad = torch.no_grad() if torch is not None else None
    if grad is not None:
        grad.__enter__()
    try:
        caches = [KVCache.for_layer(b.attn, n0 + n_new, (batch,)) for b in model.blocks] \
            if use_cache else None
        new = ids
        for _ in range(n_new):
            t = tokens.shape[1]
            if use_cache:
                start = t - new.shape[1]
                h = model.tok_emb[new] + model.pos_emb[start:t]
                for block, cache in zip(model.blocks, caches):
                    h = block_decode_step(block, h, cache)
                logits = _head(model, h[:, -1:])[:, 0]
            else:
                logits = lm_logits(model, tokens)[:, -1]
            if torch is not None:
                logits = logits.detach().cpu().double().numpy()
            chosen = _sample(np.asarray(logits, dtype=np.float64), uniform(), float(temperature),
                             top_k)
            tokens = np.concatenate([tokens, chosen[:, None].astype(np.int64)], axis=1)
            new = chosen[:, None].astype(np.int64)
            if torch is not None:
                new = torch.as_tensor(new, device=model.tok_emb.device)
    finally:
        if grad is not None:
            grad.__exit__(None, None, None)
    return tokens[0] if one else tokens
