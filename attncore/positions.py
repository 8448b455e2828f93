"""Positions for attention: sinusoidal encodings and rotary position embeddings (RoPE).

Attention alone cannot see order: self-attention without positions is permutation-equivariant
(chapter 6 proves it). Two ways of telling it where each token sits live here.

* :func:`sinusoidal_positions` -- the fixed absolute encoding of Vaswani et al. (2017), one row
  per position, added to the token embeddings before the first layer::

      PE[p, 2i]     = sin(p * w_i)
      PE[p, 2i + 1] = cos(p * w_i),        w_i = base ** (-2i / d),  i = 0 .. d/2 - 1

* :func:`rope` -- the rotary position embedding of Su et al. (RoFormer), applied to the queries
  and the keys of every head after the projections (never to the values): the features of the
  row at position ``m`` are split into ``d/2`` pairs and pair ``i`` is rotated by the angle
  ``m * w_i``, with the same frequencies ``w_i``.

Both use :func:`position_frequencies` for ``w_i``. :func:`rope_multi_head_attention` is a
multi-head self-attention layer with RoPE in its place: after the projections, in every head.

RoPE's pairing convention
-------------------------
:func:`rope` uses the **rotate-half** convention of GPT-NeoX and of Hugging Face's LLaMA code
(``transformers.models.llama.modeling_llama.apply_rotary_pos_emb``): feature ``i`` is paired
with feature ``i + d/2``. With ``h = d/2``, ``c = cos(m * w)`` and ``s = sin(m * w)`` (each of
length ``h``)::

    out[..., :h] = x[..., :h] * c - x[..., h:] * s
    out[..., h:] = x[..., h:] * c + x[..., :h] * s

The RoFormer paper and Meta's original LLaMA code pair neighbours instead, feature ``2i`` with
``2i + 1`` ("interleaved"), rotating pair ``i`` by the same angle ``m * w_i``. The two are the
same function up to a fixed permutation of the feature axis: with
``perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]`` (even features first, then odd ones),

    interleaved(x) = rope(x[..., perm])[..., argsort(perm)].

Dot products do not change when both vectors are permuted the same way, so attention scores
agree if queries and keys are permuted together; this is why converting a checkpoint from one
convention to the other permutes the columns of ``W_Q`` and ``W_K`` (and nothing else).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    backend_of,
    check_all_finite,
    check_flag,
    check_floating,
    check_min_rank,
    check_size,
    dtype_name,
    is_bool,
    is_floating,
    shape_of,
)
from .dropout import check_dropout
from .multihead import MultiHeadParams, _attend_heads, _check_layer, _project_heads

__all__ = ["check_positions", "position_frequencies", "rope", "rope_multi_head_attention",
           "sinusoidal_positions"]


def _check_count(name: str, value: Any, *, even: bool = False) -> int:
    value = check_size(name, value)
    if even and value % 2:
        raise ValueError(f"{name}: expected an even number (features rotate in pairs "
                         f"of sines and cosines), got {name}={value}")
    return value


def _check_base(base: Any, name: str = "base") -> float:
    if isinstance(base, (bool, np.bool_)) or not isinstance(base, numbers.Real) \
            or not math.isfinite(base) or base <= 1:
        raise ValueError(f"{name}: expected a finite number greater than 1, got {base!r}")
    return float(base)


def position_frequencies(d: int, *, base: float = 10000.0) -> np.ndarray:
    """The ``d/2`` angular frequencies ``w_i = base ** (-2i / d)``, for ``i`` from 0 to ``d/2 - 1``.

    Shared by :func:`sinusoidal_positions` and :func:`rope`: pair ``i`` of features turns by
    ``w_i`` radians per position, so it repeats every ``2 pi / w_i`` positions (its
    wavelength), from ``2 pi`` for ``i = 0`` to ``2 pi * base ** ((d - 2) / d)`` for the last.

    Parameters
    ----------
    d : int
        Width of the encoded vectors; a positive even integer.
    base : float
        A finite number greater than 1 (10000 in the original Transformer and in RoPE).

    Returns
    -------
    float64 NumPy array ``(d // 2,)``, decreasing from 1.
    """
    d = _check_count("d", d, even=True)
    base = _check_base(base)
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def sinusoidal_positions(n: int, d: int, *, base: float = 10000.0, like: Any = None) -> Any:
    """The sinusoidal position encoding of the original Transformer, one row per position.

    ``PE[p, 2i] = sin(p * w_i)`` and ``PE[p, 2i + 1] = cos(p * w_i)`` with
    ``w_i = base ** (-2i / d)`` (:func:`position_frequencies`), for positions
    ``p = 0 .. n - 1``. It is added to the token embeddings, ``x + PE``, before the first
    layer. A shift of every position by ``k`` is one fixed linear map of the encoding (a
    rotation of each (sin, cos) pair by ``k * w_i``), whatever ``p`` is.

    Parameters
    ----------
    n : int
        Number of positions, ``>= 1``.
    d : int
        Width of the encoding (the model width), a positive even integer.
    base : float
        A finite number greater than 1; 10000 in the original Transformer.
    like : numpy.ndarray or torch.Tensor with a floating dtype, optional
        The result takes ``like``'s library, device and dtype, so that
        ``x + sinusoidal_positions(n, d, like=x)`` adds two arrays of one kind. Without
        ``like`` the result is a float64 NumPy array.

    Returns
    -------
    array ``(n, d)``. The angles are computed in float64 and rounded once to the result's
    dtype.

    Raises
    ------
    TypeError
        ``n`` or ``d`` is not an integer; ``like`` is not an array or has no floating dtype.
    ValueError
        ``n`` or ``d`` below 1, ``d`` odd, ``base`` not a finite number above 1.
    """
    n = _check_count("n", n)
    freqs = position_frequencies(d, base=base)
    if like is not None:
        backend_of(like=like)
        check_floating("like", like)
    angles = np.arange(n, dtype=np.float64)[:, None] * freqs           # (n, d/2)
    pe = np.empty((n, len(freqs) * 2), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    if like is None:
        return pe
    if isinstance(like, np.ndarray):
        return pe.astype(like.dtype)
    import torch

    return torch.as_tensor(pe, device=like.device).to(like.dtype)


def check_positions(positions: Any, rows: tuple[int, ...], *, of: str = "x",
                    hint: str = "") -> None:
    """Check ``positions`` against the rows ``rows = x.shape[:-1] = (..., n)`` it numbers.

    The one rule for positions, on every path that takes them (:func:`rope`,
    :func:`rope_multi_head_attention`), the rule :func:`attncore.scaled_dot_product_attention`
    applies to masks: ``positions`` has shape ``(n,)`` (the same positions for every
    sequence), or exactly one axis per axis of ``rows``, each of size 1 or equal to it
    (per-sequence positions; nothing is enlarged). A shape in between, such as ``(batch,
    n)`` against rows ``(batch, heads, n)``, would be matched from the right, its batch axis
    with the heads axis, a silent wrong answer when ``batch == heads``; it is refused
    unless its leading axes all have size 1. ``of`` names the array whose rows these are,
    ``hint`` is added to the messages. Raises ``TypeError`` (dtype) or ``ValueError``.
    """
    if is_bool(positions) or not (is_floating(positions) or _is_integer(positions)):
        raise TypeError(f"positions: expected an integer or floating array, got dtype "
                        f"{dtype_name(positions)}")
    n = rows[-1]
    ps = shape_of(positions)
    try:
        joint = np.broadcast_shapes(ps, rows)
    except ValueError:
        joint = None
    # The last axis must be n itself: a size-1 axis would give every row one position.
    if len(ps) < 1 or ps[-1] != n or joint != rows:
        raise ValueError(f"positions: expected shape (n,) = ({n},), or one axis per axis of "
                         f"{of}'s rows {rows}, each of size 1 or equal (broadcastable "
                         f"without enlarging it), got {ps}{hint}")
    if 1 < len(ps) < len(rows) and any(size != 1 for size in ps[:-1]):
        missing = len(rows) - len(ps)
        raise ValueError(
            f"positions: expected {len(rows)} dimensions (one per axis of {of}'s rows "
            f"{rows}) or 1, got shape {ps}: its leading axes would be matched with the "
            f"last {len(ps) - 1} of the {len(rows) - 1} batch axes of {of}, which is "
            f"ambiguous; insert the missing axes (for per-sequence positions of shape "
            f"(batch, n) against {of} of shape (batch, heads, n, d): "
            f"positions[:, {', '.join(['None'] * missing)}]){hint}")
    if is_floating(positions):
        check_all_finite(positions=positions)


def _is_integer(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return np.issubdtype(x.dtype, np.integer)
    return not x.dtype.is_floating_point and not x.dtype.is_complex and not is_bool(x)


def rope(x: Any, positions: Any = None, *, base: float = 10000.0) -> Any:
    """Rotary position embedding: rotate each pair of features of ``x`` by its position's angle.

    The row of ``x`` at position ``m`` has its features paired as ``(i, i + d/2)``
    ("rotate-half", the convention of GPT-NeoX and Hugging Face LLaMA; see the module's
    notes for the interleaved ``(2i, 2i+1)`` convention), and pair ``i`` is rotated by the
    angle ``m * w_i``, ``w_i = base ** (-2i / d)``. Apply it to the queries and the keys of
    each head, after the projections; then the score ``rope(q)_m . rope(k)_n`` depends on the
    positions only through ``m - n``, and every row keeps its norm.

    Parameters
    ----------
    x : array ``(..., n, d)`` with a floating dtype, NumPy or torch (any device)
        Queries or keys, one row per position; ``d`` must be even.
    positions : array ``(n,)`` or ``(..., n)``, optional
        The position of each row, integers or real numbers (fractional positions are how
        position interpolation stretches a context). Default ``0 .. n - 1``. Same library
        and device as ``x``. Shape ``(n,)``: the same positions for every sequence. Per
        sequence (left padding, a cache offset): one axis per axis of ``x.shape[:-1]``,
        each of size 1 or equal, e.g. ``(batch, 1, n)`` for ``x`` of shape ``(batch,
        heads, n, d)``. A shape in between, ``(batch, n)`` for that ``x``, is refused:
        broadcasting from the right would line the batch up with the heads (a wrong
        answer when ``batch == heads``), so write ``positions[:, None]``. Its last axis
        is always ``n``. (The same rule as for the masks of attention.)
    base : float
        A finite number greater than 1; 10000 in RoFormer and LLaMA 1 and 2.

    Returns
    -------
    array like ``x`` (same shape, dtype, library and device). The angles, their cosines and
    sines are computed in float64 and rounded once to ``x``'s dtype.

    Raises
    ------
    TypeError
        ``x`` is not a floating array; ``positions`` is of another library than ``x``, or
        not of an integer or floating dtype.
    ValueError
        ``x`` has fewer than 2 axes or a last axis ``d`` that is odd or 0; ``positions``
        has the wrong or an ambiguous shape; ``x`` or ``positions`` holds NaN or
        infinity; ``base`` is not above 1.
    """
    backend = backend_of(x=x, positions=positions)
    check_floating("x", x)
    check_min_rank("x", x, 2, "(..., n, d)")
    x_shape = shape_of(x)
    d = x_shape[-1]
    if d % 2 or d == 0:
        raise ValueError(f"x: expected a positive even last axis d (RoPE rotates pairs of "
                         f"features), got shape {x_shape} with d={d}")
    freqs = position_frequencies(d, base=base)
    if positions is not None:
        check_positions(positions, x_shape[:-1])
    check_all_finite(x=x)
    n = x_shape[-2]
    if positions is None:                    # 0 .. n-1: from the table of cosines and sines
        return _rotate(x, *_cos_sin(0, n, d, base, x))
    if backend == NUMPY:
        return _rotate(x, *_angles_cos_sin(positions.astype(np.float64), freqs, x))
    return _rotate(x, *_angles_cos_sin(positions, freqs, x))


def _angles_cos_sin(pos: Any, freqs: np.ndarray, like: Any) -> tuple[Any, Any]:
    """``cos`` and ``sin`` of the angles ``pos * freqs``, ``(..., n, d/2)``, computed in
    float64 in ``like``'s library and on its device, rounded once to its dtype."""
    if isinstance(like, np.ndarray):
        angles = pos[..., None] * freqs                               # (..., n, d/2)
        return np.cos(angles).astype(like.dtype), np.sin(angles).astype(like.dtype)
    import torch

    # float64 angles: at position 10^5 a float32 angle is off by ~0.01 rad. (Backends without
    # float64, such as Apple's MPS, get float32 angles.)
    work = torch.float64 if like.device.type != "mps" else torch.float32
    w = torch.as_tensor(freqs, device=like.device).to(work)
    angles = pos.to(device=like.device, dtype=work)[..., None] * w
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    """Rotate-half RoPE of ``x`` ``(..., n, d)`` with ``cos``, ``sin`` ``(..., n, d/2)``."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    if isinstance(x, np.ndarray):
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    import torch

    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


# The cosines and sines of positions 0, 1, 2, ... per (base, d, library, device, dtype), so
# that decoding, which rotates one new position per step and layer, does not recompute
# them: the same numbers as computing them for the positions asked for (an angle depends
# on its own position only), grown by doubling as longer sequences come.
_TABLES: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def _cos_sin(start: int, n: int, d: int, base: float, like: Any) -> tuple[Any, Any]:
    """``cos`` and ``sin`` ``(n, d/2)`` of positions ``start .. start + n - 1`` for
    :func:`rope` of width ``d`` and ``base``, in ``like``'s library, device and dtype."""
    numpy = isinstance(like, np.ndarray)
    key = (float(base), d, "numpy" if numpy else str(like.device), like.dtype)
    table = _TABLES.get(key)
    if table is None or table[0].shape[0] < start + n:
        size = max(start + n, 256, 0 if table is None else 2 * table[0].shape[0])
        freqs = position_frequencies(d, base=base)
        if numpy:
            pos = np.arange(size, dtype=np.float64)
        else:
            import torch

            pos = torch.arange(size, dtype=torch.float64 if like.device.type != "mps"
                               else torch.float32, device=like.device)
        table = _TABLES[key] = _angles_cos_sin(pos, freqs, like)
    return table[0][start:start + n], table[1][start:start + n]


def rope_multi_head_attention(params: Any, x: Any, positions: Any = None, *,
                              base: float = 10000.0, mask: Any = None, causal: bool = False,
                              return_weights: bool = False, dropout_p: float = 0.0,
                              generator: Any = None) -> Any:
    """Multi-head self-attention with rotary position embeddings, as in LLaMA-style models.

    The layer of :func:`attncore.multi_head_attention` with one step added: after the
    projections and the split into heads, the queries and the keys of every head (width
    ``d_head``, which must be even) are rotated by :func:`rope`; the values are not::

        q, k, v = split_heads(x W_Q + b_Q), split_heads(x W_K + b_K), split_heads(x W_V + b_V)
        out     = merge_heads(Attention(rope(q), rope(k), v)) W_O + b_O

    Parameters
    ----------
    params : :class:`attncore.MultiHeadParams` for self-attention (``d_kv = d_model``)
    x : array ``(..., n, d_model)``, the same library, device and dtype as ``params``
    positions : array ``(n,)`` or ``(..., n)``, optional
        The positions of ``x``'s rows, by the rule of :func:`rope` applied to ``x``:
        ``(n,)``, or per sequence one axis per axis of ``x.shape[:-1]``, e.g. ``(batch,
        n)`` for ``x`` of shape ``(batch, n, d_model)``, each of size 1 or equal; the
        layer inserts the heads axis itself. A shape in between is refused as
        ambiguous. Default ``0 .. n - 1``.
    base, mask, causal, return_weights, dropout_p, generator : as in :func:`rope` and
        :func:`attncore.multi_head_attention`

    Returns
    -------
    out : array ``(..., n, d_model)``; with ``return_weights`` also the weights
    ``(..., num_heads, n, n)``.

    Raises
    ------
    TypeError, ValueError
        As :func:`attncore.multi_head_attention` and :func:`rope`; an odd ``d_head``.
    """
    return_weights = check_flag("return_weights", return_weights)
    if isinstance(params, MultiHeadParams) and params.d_kv != params.d_model \
            and hasattr(x, "shape"):
        raise ValueError(f"x: expected last axis d_model={params.d_model} of a "
                         f"self-attention layer, got shape {shape_of(x)} (layer d_kv="
                         f"{params.d_kv})")
    layer = _check_layer(params, x, None, mask, causal, names=("x", "x"))
    backend_of(x=x, positions=positions)
    if params.d_head % 2:
        raise ValueError(f"params: expected an even head width d_head for RoPE, got "
                         f"d_head={params.d_head} (d_model={params.d_model}, "
                         f"num_heads={params.num_heads})")
    if positions is not None:
        check_positions(positions, shape_of(x)[:-1],
                        hint=" (the layer inserts the heads axis itself)")
        if positions.ndim > 1:                   # (..., n) -> (..., 1, n): one per head
            positions = positions[..., None, :]
    drop = check_dropout(dropout_p, generator, params.backend, like=x)
    base = _check_base(base)
    q, k, v = _project_heads(params, layer, x)
    # (q and k come from checked inputs: their values are checked with v's when the
    # layer's certificate fails, in _attend_heads; rope's own check would repeat it)
    if positions is None:
        cos, sin = _cos_sin(0, layer.n_q, params.d_head, base, q)
    else:
        pos = positions.astype(np.float64) if isinstance(positions, np.ndarray) \
            else positions
        cos, sin = _angles_cos_sin(pos, position_frequencies(params.d_head, base=base), q)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    return _attend_heads(params, layer, q, k, v, mask, return_weights, drop)
