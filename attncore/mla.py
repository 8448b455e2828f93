"""Multi-head latent attention (MLA), the attention of DeepSeek-V2 (DeepSeek-AI, 2024).

Keys and values are not projected from the token directly: the token is first compressed
into one latent vector ``c`` of width ``d_latent_kv``, shared by every head, and each head
up-projects its key and value from it. With tokens as rows, for a head ``h``::

    c       = x W_DKV                       (n, d_latent_kv)     -- what the cache holds
    k_h     = c W_UK[h]                     (n, d_head)
    v_h     = c W_UV[h]                     (n, d_head)
    q_h     = c_q W_UQ[h],  c_q = x W_DQ    (n, d_head)          (c_q = x without W_DQ)

RoPE cannot be applied to ``k_h`` without undoing what makes the latent cheap (see
:func:`absorbed_weights`), so a *decoupled* RoPE part is concatenated: one rotated key of
width ``d_rope`` per token, shared by all heads, and a rotated query part per head::

    k_R     = rope(x W_KR)                  (n, d_rope)          -- cached too
    q_R[h]  = rope(c_q W_QR[h])             (n, d_rope)
    score   = ([q_h, q_R[h]] . [k_h, k_R]) / sqrt(d_head + d_rope)
    out     = concat_h(softmax(scores_h) v_h) W_O

* :class:`MLAParams`, :func:`init_mla` -- the weights, seeded
* :func:`mla` -- the layer; ``absorbed=True`` computes the same with ``W_UK`` folded into
  the queries and ``W_UV`` into the output projection, attending to the latent itself
* :func:`absorbed_weights` -- those folded matrices
* :func:`mla_decode` -- decoding with a cache of ``d_latent_kv + d_rope`` numbers per token
  (instead of ``2 * num_heads * d_head``), equal to ``mla(params, x)``

The biases and the normalisations DeepSeek-V2 applies to the latents are left out: they
change neither the factorisation nor the cache.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    TORCH,
    backend_of,
    check_all_finite,
    check_flag,
    check_floating,
    check_min_rank,
    check_same_dtype,
    check_size,
    dtype_name,
    find_non_finite,
    shape_of,
)
from .attention import scaled_dot_product_attention
from .kvcache import KVCache, bottom_right_causal_mask, check_batch_shape
from .multihead import _linear, _numpy_float_dtype, _on_backend, merge_heads, split_heads
from .positions import _check_base, rope

__all__ = ["MLAParams", "absorbed_weights", "init_mla", "mla", "mla_decode"]

_WEIGHTS = ("w_dq", "w_uq", "w_qr", "w_dkv", "w_uk", "w_uv", "w_kr", "w_o")


@dataclass
class MLAParams:
    """Weights of one multi-head latent attention layer (all NumPy or all torch, one dtype).

    Attributes
    ----------
    w_dq : array ``(d_model, d_latent_q)``, or None
        Query down-projection (None: the queries are projected from ``x`` directly, as in
        DeepSeek-V2-Lite).
    w_uq : array ``(d_q, num_heads * d_head)``
        Query up-projection; ``d_q`` is ``d_latent_q``, or ``d_model`` without ``w_dq``.
    w_qr : array ``(d_q, num_heads * d_rope)``
        The queries' RoPE part, one block of ``d_rope`` columns per head.
    w_dkv : array ``(d_model, d_latent_kv)``
        The joint key/value down-projection to the latent.
    w_uk, w_uv : arrays ``(d_latent_kv, num_heads * d_head)``
        Key and value up-projections from the latent, column block ``h`` for head ``h``.
    w_kr : array ``(d_model, d_rope)``
        The decoupled RoPE key, one for all heads.
    w_o : array ``(num_heads * d_head, d_model)``
        Output projection.
    num_heads : int
    rope_base : float, default 10000.0
        Base of the RoPE frequencies.

    Raises
    ------
    TypeError, ValueError
        Mixed libraries or dtypes, a non-floating array, shapes that do not fit together,
        an odd ``d_rope``, a base that is not a finite number above 1.
    """

    w_dq: Any
    w_uq: Any
    w_qr: Any
    w_dkv: Any
    w_uk: Any
    w_uv: Any
    w_kr: Any
    w_o: Any
    num_heads: int
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        arrays = {n: getattr(self, n) for n in _WEIGHTS}
        for name, a in arrays.items():
            if a is None and name != "w_dq":
                raise TypeError(f"{name}: expected a numpy.ndarray or a torch.Tensor, got "
                                f"None (only w_dq may be None)")
        backend_of(**arrays)
        for name, a in arrays.items():
            if a is not None:
                check_floating(name, a)
                if len(shape_of(a)) != 2:
                    raise ValueError(f"{name}: expected a matrix, got shape {shape_of(a)}")
        check_same_dtype(**arrays)
        h = check_size("num_heads", self.num_heads)
        self.rope_base = _check_base(self.rope_base, "rope_base")
        d_model, d_c = shape_of(self.w_dkv)
        d_q = d_model if self.w_dq is None else shape_of(self.w_dq)[1]
        hd, d_r = shape_of(self.w_uk)[1], shape_of(self.w_kr)[1]
        if hd % h or hd == 0:
            raise ValueError(f"w_uk: expected num_heads * d_head = {h} * d_head columns, "
                             f"got shape {shape_of(self.w_uk)}")
        if d_r % 2 or d_r == 0:
            raise ValueError(f"w_kr: expected an even, positive RoPE width d_rope, got "
                             f"shape {shape_of(self.w_kr)}")
        expected = {"w_dq": (d_model, d_q), "w_uq": (d_q, hd), "w_qr": (d_q, h * d_r),
                    "w_uk": (d_c, hd), "w_uv": (d_c, hd), "w_kr": (d_model, d_r),
                    "w_o": (hd, d_model)}
        for name, shape in expected.items():
            a = getattr(self, name)
            if a is not None and shape_of(a) != shape:
                raise ValueError(f"{name}: expected shape {shape} (d_model={d_model}, "
                                 f"d_latent_kv={d_c}, num_heads={h}, d_head={hd // h}, "
                                 f"d_rope={d_r}), got {shape_of(a)}")

    @property
    def d_model(self) -> int:
        return int(self.w_dkv.shape[0])

    @property
    def d_latent_kv(self) -> int:
        return int(self.w_dkv.shape[1])

    @property
    def d_latent_q(self) -> int | None:
        return None if self.w_dq is None else int(self.w_dq.shape[1])

    @property
    def d_head(self) -> int:
        return int(self.w_uk.shape[1]) // self.num_heads

    @property
    def d_rope(self) -> int:
        return int(self.w_kr.shape[1])

    @property
    def backend(self) -> str:
        """``"numpy"`` or ``"torch"``."""
        return NUMPY if isinstance(self.w_dkv, np.ndarray) else TORCH

    @property
    def cache_width(self) -> int:
        """Numbers cached per token: the latent and the RoPE key, ``d_latent_kv + d_rope``."""
        return self.d_latent_kv + self.d_rope

    def new_cache(self, capacity: int, batch_shape: tuple[int, ...] = ()) -> KVCache:
        """An empty cache for :func:`mla_decode`: ``batch_shape + (1,)`` rows holding
        ``[c, k_R]`` (width :attr:`cache_width`) per position and no values (the values
        are the latent itself)."""
        check_batch_shape(batch_shape)
        device = None if self.backend == NUMPY else self.w_dkv.device
        return KVCache(capacity, batch_shape + (1,), self.cache_width, 0,
                       dtype=self.w_dkv.dtype, backend=self.backend, device=device)


def init_mla(d_model: int, num_heads: int, *, d_latent_kv: int, d_latent_q: int | None = None,
             d_rope: int, d_head: int | None = None, rope_base: float = 10000.0,
             seed: int = 0, dtype: Any = np.float64, backend: str = NUMPY,
             device: Any = None) -> MLAParams:
    """Seeded weights for a multi-head latent attention layer (Xavier-uniform, as
    :func:`~attncore.init_multihead`; the same seed gives the same numbers on every backend).

    Parameters
    ----------
    d_model : int
        Width of the input and output, ``>= 1``.
    num_heads : int
        Number of heads, ``>= 1``.
    d_latent_kv : int
        Width of the key/value latent ``c``, ``>= 1``.
    d_latent_q : int, optional
        Width of the query latent; None projects the queries from ``x`` directly.
    d_rope : int
        Width of the decoupled RoPE part of queries and keys, positive and even.
    d_head : int, optional
        Width of a head's key (without the RoPE part) and value; default
        ``d_model // num_heads`` (then ``num_heads`` must divide ``d_model``).
    rope_base : float, default 10000.0
    seed : int, default 0
    dtype, backend, device
        As in :func:`~attncore.init_multihead`.

    Returns
    -------
    MLAParams

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, an odd ``d_rope``, ``num_heads`` that does
        not divide ``d_model`` when ``d_head`` is not given, a bad dtype, backend or device.
    """
    d_model = check_size("d_model", d_model)
    h = check_size("num_heads", num_heads)
    d_c = check_size("d_latent_kv", d_latent_kv)
    d_cq = None if d_latent_q is None else check_size("d_latent_q", d_latent_q)
    d_r = check_size("d_rope", d_rope)
    if d_r % 2:
        raise ValueError(f"d_rope: expected an even number (RoPE rotates pairs), got {d_r}")
    if d_head is None:
        if d_model % h:
            raise ValueError(f"num_heads: expected a divisor of d_model={d_model} when "
                             f"d_head is not given, got {h}")
        d_head = d_model // h
    d_head = check_size("d_head", d_head)
    seed = check_size("seed", seed, minimum=0)
    if backend not in (NUMPY, TORCH):
        raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
    if backend == NUMPY and device is not None:
        raise ValueError(f"device: expected None for backend='numpy', got {device!r}")
    np_dtype = _numpy_float_dtype(dtype, backend)
    rng = np.random.default_rng(seed)

    def xavier(fan_in: int, fan_out: int) -> np.ndarray:
        a = math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, size=(fan_in, fan_out))

    d_q = d_model if d_cq is None else d_cq
    arrays = {"w_dq": None if d_cq is None else xavier(d_model, d_cq),
              "w_uq": xavier(d_q, h * d_head), "w_qr": xavier(d_q, h * d_r),
              "w_dkv": xavier(d_model, d_c), "w_uk": xavier(d_c, h * d_head),
              "w_uv": xavier(d_c, h * d_head), "w_kr": xavier(d_model, d_r),
              "w_o": xavier(h * d_head, d_model)}
    conv = _on_backend(arrays, dtype, np_dtype, backend, device)
    return MLAParams(num_heads=h, rope_base=rope_base, **conv)


def _check_mla(params: Any, x: Any) -> tuple[int, ...]:
    if not isinstance(params, MLAParams):
        raise TypeError(f"params: expected an MLAParams (see init_mla), got "
                        f"{type(params).__name__}")
    backend_of(params=params.w_dkv, x=x)
    check_floating("x", x)
    check_min_rank("x", x, 2, "(..., n, d_model)")
    check_same_dtype(params=params.w_dkv, x=x)
    xs = shape_of(x)
    if xs[-1] != params.d_model:
        raise ValueError(f"x: expected last axis d_model={params.d_model}, got shape {xs}")
    check_all_finite(x=x)
    return xs


def _einsum(spec: str, *arrays: Any) -> Any:
    if isinstance(arrays[0], np.ndarray):
        return np.einsum(spec, *arrays, optimize=True)
    return sys.modules["torch"].einsum(spec, *arrays)


def _cat(arrays: list[Any]) -> Any:
    if isinstance(arrays[0], np.ndarray):
        return np.concatenate(arrays, axis=-1)
    return sys.modules["torch"].cat(arrays, dim=-1)


def _expand(x: Any, shape: tuple[int, ...]) -> Any:
    return np.broadcast_to(x, shape) if isinstance(x, np.ndarray) else x.expand(shape)


def _positions(x: Any, start: int, n: int) -> Any:
    if isinstance(x, np.ndarray):
        return np.arange(start, start + n)
    return sys.modules["torch"].arange(start, start + n, device=x.device)


def absorbed_weights(params: MLAParams) -> tuple[Any, Any]:
    """The key up-projection folded into the queries, the value up-projection into the output.

    A head's content score is ``q_h . k_h = (c_q W_UQ[h]) (c W_UK[h])^T = c_q (W_UQ[h]
    W_UK[h]^T) c^T``, and its output, projected, ``softmax(.) (c W_UV[h]) W_O[h] =
    softmax(.) c (W_UV[h] W_O[h])``: so a head can score against the latent ``c`` itself
    and average it, without ever forming keys or values. (With RoPE on ``k_h`` a rotation
    that depends on the key's position would sit between ``W_UQ[h]`` and ``W_UK[h]^T``,
    and no fixed matrix could be folded; hence the decoupled RoPE part.)

    Parameters
    ----------
    params : MLAParams

    Returns
    -------
    w_q_absorbed : array ``(num_heads, d_q, d_latent_kv)``
        ``W_UQ[h] W_UK[h]^T`` per head (``d_q``: ``d_latent_q``, or ``d_model``).
    w_o_absorbed : array ``(num_heads, d_latent_kv, d_model)``
        ``W_UV[h] W_O[h]`` per head, ``W_O[h]`` the rows of ``W_O`` that head ``h`` feeds.
    """
    if not isinstance(params, MLAParams):
        raise TypeError(f"params: expected an MLAParams (see init_mla), got "
                        f"{type(params).__name__}")
    h, d = params.num_heads, params.d_head
    d_c = params.d_latent_kv
    w_uq = params.w_uq.reshape(-1, h, d)
    w_uk = params.w_uk.reshape(d_c, h, d)
    w_uv = params.w_uv.reshape(d_c, h, d)
    w_o = params.w_o.reshape(h, d, params.d_model)
    return _einsum("qhd,chd->hqc", w_uq, w_uk), _einsum("chd,hdm->hcm", w_uv, w_o)


def _query_parts(params: MLAParams, x: Any, pos: Any) -> tuple[Any, Any, Any]:
    """``c_q`` (..., n, d_q), the content queries' input, and the rotated query parts
    ``q_R`` (..., num_heads, n, d_rope)."""
    c_q = x if params.w_dq is None else _linear(x, params.w_dq, None)
    q_r = rope(split_heads(_linear(c_q, params.w_qr, None), params.num_heads), pos,
               base=params.rope_base)
    return c_q, q_r, _linear(x, params.w_dkv, None)


def _check_projections(**arrays: Any) -> None:
    bad = find_non_finite(**arrays)
    if bad is not None:
        raise ValueError(f"x, params: expected projections that fit in dtype "
                         f"{dtype_name(arrays[bad])}, got an overflow in {bad}; use a "
                         f"wider dtype or smaller inputs or weights")


def mla(params: MLAParams, x: Any, *, causal: bool = True, absorbed: bool = False) -> Any:
    """Multi-head latent attention over a whole sequence.

    Parameters
    ----------
    params : MLAParams
    x : array ``(..., n, d_model)``, the library, device and dtype of ``params``
        Token ``i`` of each sequence stands at position ``i`` (for RoPE).
    causal : bool, default True
        Each position attends to itself and the earlier ones only.
    absorbed : bool, default False
        False: up-project the latent to every head's keys and values and attend as
        multi-head attention does. True: score the queries, with ``W_UK`` folded in,
        against the latent itself, average the latent, and apply ``W_UV`` folded into
        ``W_O`` (:func:`absorbed_weights`); the same function, a different order of the
        products.

    Returns
    -------
    array ``(..., n, d_model)``

    Raises
    ------
    TypeError, ValueError
        ``params`` not an :class:`MLAParams`; ``x`` of another library or dtype, the
        wrong width, fewer than 2 axes, non-finite; a flag that is not a bool; an
        overflow.
    """
    causal = check_flag("causal", causal)
    absorbed = check_flag("absorbed", absorbed)
    xs = _check_mla(params, x)
    n, h = xs[-2], params.num_heads
    scale = 1.0 / math.sqrt(params.d_head + params.d_rope)
    pos = _positions(x, 0, n)
    c_q, q_r, c = _query_parts(params, x, pos)
    k_r = rope(_linear(x, params.w_kr, None), pos, base=params.rope_base)[..., None, :, :]
    _check_projections(c_q=c_q, q_r=q_r, c=c, k_r=k_r)
    if not absorbed:
        q = _cat([split_heads(_linear(c_q, params.w_uq, None), h), q_r])
        k_c = split_heads(_linear(c, params.w_uk, None), h)
        v = split_heads(_linear(c, params.w_uv, None), h)
        k = _cat([k_c, _expand(k_r, shape_of(k_c)[:-1] + (params.d_rope,))])
        heads = scaled_dot_product_attention(q, k, v, causal=causal, scale=scale)
        return _linear(merge_heads(heads), params.w_o, None)
    w_q_abs, w_o_abs = absorbed_weights(params)
    return _absorbed_attention(c_q, q_r, _cat([c, k_r[..., 0, :, :]])[..., None, :, :],
                               w_q_abs, w_o_abs, params, None, causal, scale)


def _absorbed_attention(c_q: Any, q_r: Any, cached: Any, w_q_abs: Any, w_o_abs: Any,
                        params: MLAParams, mask: Any, causal: bool, scale: float) -> Any:
    """Queries ``[c_q W_UQ[h] W_UK[h]^T, q_R[h]]`` against the cached rows ``[c, k_R]``
    (..., 1, n_k, d_latent_kv + d_rope): one key/value head shared by all query heads,
    whose values are the latents; the heads' averages go through ``W_UV[h] W_O[h]``."""
    q = _cat([_einsum("...nq,hqc->...hnc", c_q, w_q_abs), q_r])
    latents = cached[..., :params.d_latent_kv]
    heads = scaled_dot_product_attention(q, cached, latents, mask=mask, causal=causal,
                                         scale=scale, enable_gqa=True)
    return _einsum("...hnc,hcm->...nm", heads, w_o_abs)


def mla_decode(params: MLAParams, x: Any, *, chunk_size: int = 1,
               cache: KVCache | None = None) -> Any:
    """Decode a sequence through an MLA layer ``chunk_size`` tokens at a time, caching only
    the latent ``c`` and the rotated key ``k_R`` of each token.

    Each step computes the new tokens' ``[c, k_R]`` (``d_latent_kv + d_rope`` numbers per
    token, for all heads together), appends them to the cache, and attends in absorbed
    form (:func:`absorbed_weights`): queries with ``W_UK`` folded in score against the
    cached rows, the heads average the cached latents, and ``W_UV W_O`` maps them to the
    output. No key or value of any head is ever formed.

    Parameters
    ----------
    params : MLAParams
    x : array ``(..., n, d_model)``
    chunk_size : int, default 1
        Positions per step.
    cache : KVCache, optional
        From :meth:`MLAParams.new_cache`; continue after the positions it holds (RoPE
        positions continue too). Default: a new cache of capacity ``n``.

    Returns
    -------
    array ``(..., n, d_model)``
        Equal, up to rounding, to ``mla(params, x)`` (causal), or with a cache holding
        ``m`` positions to the last ``n`` rows of ``mla`` over all ``m + n`` inputs.

    Raises
    ------
    TypeError, ValueError
        As :func:`mla`; a ``chunk_size`` that is not a positive integer; a cache of
        another layout, library or dtype, or without room for ``n`` positions.
    """
    chunk_size = check_size("chunk_size", chunk_size)
    xs = _check_mla(params, x)
    batch, n = xs[:-2], xs[-2]
    if cache is None:
        cache = params.new_cache(n, batch)
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache: expected a KVCache from params.new_cache, got "
                        f"{type(cache).__name__}")
    backend_of(cache=cache.keys, x=x)
    want = (batch + (1,), params.cache_width, 0)
    if (cache.batch_shape, cache.d_k, cache.d_v) != want or cache.dtype != x.dtype:
        raise ValueError(f"cache: expected params.new_cache(capacity, {batch}) (batch_shape "
                         f"{want[0]}, d_k={want[1]}, d_v=0, dtype {dtype_name(x)}), got "
                         f"batch_shape {cache.batch_shape}, d_k={cache.d_k}, "
                         f"d_v={cache.d_v}, dtype {dtype_name(cache.keys)}")
    if cache.length + n > cache.capacity:
        raise ValueError(f"cache: cannot append {n} positions to a cache holding "
                         f"{cache.length} of its capacity {cache.capacity}")
    scale = 1.0 / math.sqrt(params.d_head + params.d_rope)
    w_q_abs, w_o_abs = absorbed_weights(params)
    outs = []
    for i in range(0, n, chunk_size):
        xi = x[..., i:i + chunk_size, :]
        m, start = shape_of(xi)[-2], cache.length
        pos = _positions(x, start, m)
        c_q, q_r, c = _query_parts(params, xi, pos)
        k_r = rope(_linear(xi, params.w_kr, None), pos, base=params.rope_base)
        _check_projections(c_q=c_q, q_r=q_r, c=c, k_r=k_r)
        row = _cat([c, k_r])[..., None, :, :]
        cached, _ = cache.append(row, row[..., :0])
        mask = None if m == 1 else bottom_right_causal_mask(m, start + m, like=x)
        outs.append(_absorbed_attention(c_q, q_r, cached, w_q_abs, w_o_abs, params, mask,
                                        False, scale))
    if not outs:
        return x * 0                                     # (..., 0, d_model)
    if isinstance(x, np.ndarray):
        return np.concatenate(outs, axis=-2)
    return sys.modules["torch"].cat(outs, dim=-2)
