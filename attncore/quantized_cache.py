"""An int8 KV cache: keys and values as 8-bit integers with a scale, and its error bound.

A number ``x`` of a group that shares the scale ``s = max|group| / 127`` is stored as the
integer ``q = round(x / s)`` in ``[-127, 127]`` and read back as ``q * s``. Rounding moves
``x / s`` by at most 1/2, so

    |q * s - x| <= s / 2                          (in exact arithmetic)

for every stored number: an absolute error of half a quantization step, where the step is
set by the largest magnitude in the group. The cache stores one byte per number plus one
scale per group, instead of two (float16) or four (float32) bytes.

Which numbers share a scale decides the error. :class:`Int8KVCache` gives each **token**
its own scale (a row of a head's keys or values), or, for the keys, each **channel** its
own scale over a group of ``group_size`` tokens (as KIVI does, Liu et al., 2024). Keys of
trained models have a few channels of much larger magnitude than the rest; a per-token
scale is set by those outliers and rounds every other channel of the token coarsely,
while a per-channel scale confines them to their own channels. Values have no such
channels and are scaled per token. Per-channel key scales need ``group_size`` tokens
before they exist, so the last, incomplete group of keys is held unquantized (in the
cache's dtype) until it fills.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backend import NUMPY, check_size
from .kvcache import BaseKVCache, buffer_nbytes, check_batch_shape, check_cache_layout, \
    check_truncate, numbers_of
from .multihead import MultiHeadParams

__all__ = ["Int8KVCache"]


_BITS = {2: "int16", 4: "int32", 8: "int64"}


def _rounded_up(scale: Any, top: Any) -> Any:
    """``scale`` (``top / 127`` rounded to nearest in the dtype) moved one step up where it
    fell below ``top / 127``, so that ``|x / scale| <= 127`` for every ``|x| <= top``.

    In the normal range the rounding is a relative ``eps / 2``, which moves ``x / s`` by
    far less than the half step that would make the int8 code clip; but a subnormal
    scale carries an absolute error of up to half the subnormal spacing, which can be
    half the scale itself (and a scale below the smallest subnormal rounds to 0, which
    reads every number back as 0). The comparison is exact in float64 for every dtype
    but float64, whose subnormal scales are below any number a cache holds in practice.
    The next number up of a positive float is the one whose bits, read as an integer,
    are one more (0 goes to the smallest subnormal).
    """
    if isinstance(scale, np.ndarray):
        low = scale.astype(np.float64) * 127 < top.astype(np.float64)
        if not low.any():
            return scale
        up = (scale.view(_BITS[scale.dtype.itemsize]) + 1).view(scale.dtype)
        return np.where(low, up, scale)
    torch = __import__("torch")
    low = scale.double() * 127 < top.double()
    up = (scale.view(getattr(torch, _BITS[scale.element_size()])) + 1).view(scale.dtype)
    return torch.where(low, up, scale)


def _cat(arrays: list[Any], axis: int) -> Any:
    if isinstance(arrays[0], np.ndarray):
        return np.concatenate(arrays, axis=axis)
    import torch

    return torch.cat(arrays, dim=axis)


class Int8KVCache(BaseKVCache):
    """A KV cache that stores keys and values as int8 with one scale per group of numbers.

    Usable by :func:`~attncore.decode_step` and :func:`~attncore.decode` like a
    :class:`~attncore.KVCache`; the keys and values it gives back differ from those
    appended by at most :meth:`error_bounds`.

    Parameters
    ----------
    capacity : int
        Positions the cache can hold, ``>= 0``.
    batch_shape : tuple of int
        As in :class:`~attncore.KVCache` (for a layer ``x.shape[:-2] + (n_kv_heads,)``).
    d_k : int
    d_v : int, optional
        ``>= 1``, default ``d_k``.
    key_scale : {"token", "channel"}, default "token"
        "token": one scale per position and row (over its ``d_k`` channels). "channel":
        one scale per channel over each group of ``group_size`` positions; the last,
        incomplete group is held unquantized. Values always have a scale per token.
    group_size : int, default 32
        Positions per key group for ``key_scale="channel"``.
    dtype, backend, device
        The dtype of the scales and of the arrays given back, as in
        :class:`~attncore.KVCache`.

    Attributes
    ----------
    nbytes : int
        Bytes of the int8 buffers, the scales and the unquantized key group.

    Raises
    ------
    TypeError, ValueError
        As :class:`~attncore.KVCache`; an unknown ``key_scale``.

    Notes
    -----
    Gradients (torch). Rounding has derivative 0 wherever it is differentiable, so
    autograd through it would pass nothing to the keys and values but what flows through
    the scales: a silently wrong gradient. The cache passes gradients straight through
    the rounding instead (the straight-through estimator of Bengio et al., 2013): the
    keys and values it gives back have the rounded values, and the derivative of each
    by the number appended in its place is 1, as if it had been stored exactly (see
    :class:`~attncore.BaseKVCache`'s Notes). That is the gradient of the computation
    without quantization, evaluated at the quantized numbers.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> cache = ac.Int8KVCache(4, (), d_k=2)
    >>> keys, _ = cache.append(np.array([[1.0, -0.5]]), np.array([[0.25, 0.125]]))
    >>> print(np.round(keys, 4))
    [[ 1.     -0.5039]]
    """

    def __init__(self, capacity: int, batch_shape: tuple[int, ...], d_k: int,
                 d_v: int | None = None, *, key_scale: str = "token", group_size: int = 32,
                 dtype: Any = np.float64, backend: str = NUMPY, device: Any = None) -> None:
        self._capacity = check_size("capacity", capacity, minimum=0)
        # a scale is the largest magnitude of its group: a value needs at least one number
        self.batch_shape, self.d_k, self.d_v, np_dtype = check_cache_layout(
            batch_shape, d_k, d_v, dtype, backend, device, min_d_v=1)
        if key_scale not in ("token", "channel"):
            raise ValueError(f"key_scale: expected 'token' or 'channel', got {key_scale!r}")
        self.key_scale = key_scale
        self.group_size = check_size("group_size", group_size)
        b, cap, g = self.batch_shape, self._capacity, self.group_size
        key_scales = (cap, 1) if key_scale == "token" else (-(-cap // g), self.d_k)
        shapes = {"_qk": (b + (cap, self.d_k), "int8"), "_qv": (b + (cap, self.d_v), "int8"),
                  "_sk": (b + key_scales, "float"), "_sv": (b + (cap, 1), "float"),
                  "_rk": (b + ((g if key_scale == "channel" else 0), self.d_k), "float")}
        if backend == NUMPY:
            for name, (shape, kind) in shapes.items():
                setattr(self, name, np.zeros(shape, np.int8 if kind == "int8" else np_dtype))
            self._eps = float(np.finfo(np_dtype).eps)
            self._step = float(np.finfo(np_dtype).smallest_subnormal)
        else:
            import torch

            tdtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np_dtype.name)
            for name, (shape, kind) in shapes.items():
                setattr(self, name, torch.zeros(shape, device=device, dtype=torch.int8
                                                if kind == "int8" else tdtype))
            self._eps = float(torch.finfo(tdtype).eps)
            self._step = float(torch.finfo(tdtype).tiny) * self._eps   # smallest subnormal
        self.length = 0
        self.rope_base = None

    @classmethod
    def for_layer(cls, params: Any, capacity: int, batch_shape: tuple[int, ...] = (), *,
                  key_scale: str = "token", group_size: int = 32) -> "Int8KVCache":
        """An empty int8 cache for the self-attention layer ``params``, as
        :meth:`attncore.KVCache.for_layer` makes a full-precision one: ``batch_shape +
        (params.n_kv_heads,)`` rows of width ``params.d_head``, the scales in the
        parameters' dtype, on their library and device; ``key_scale`` and ``group_size``
        as in the class."""
        if not isinstance(params, MultiHeadParams):
            raise TypeError(f"params: expected a MultiHeadParams, got {type(params).__name__}")
        check_batch_shape(batch_shape)
        device = None if params.backend == NUMPY else params.w_q.device
        return cls(capacity, tuple(batch_shape) + (params.n_kv_heads,), params.d_head,
                   key_scale=key_scale, group_size=group_size, dtype=params.w_q.dtype,
                   backend=params.backend, device=device)

    # --- layout --------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    def _like(self) -> Any:
        return self._sv

    @property
    def nbytes(self) -> int:
        return buffer_nbytes(self._qk, self._qv, self._sk, self._sv, self._rk)

    @property
    def _quantized_keys(self) -> int:
        """Positions whose keys are quantized (all, or the complete groups)."""
        if self.key_scale == "token":
            return self.length
        return self.length // self.group_size * self.group_size

    # --- quantization --------------------------------------------------------------------

    @staticmethod
    def _quantize(x: Any, axis: int) -> tuple[Any, Any]:
        """int8 codes and the scales ``max|x| / 127`` along ``axis`` (kept as size 1),
        each scale rounded up to the dtype (see :meth:`error_bounds`)."""
        if isinstance(x, np.ndarray):
            top = np.abs(x).max(axis=axis, keepdims=True)
            scale = _rounded_up(top / np.asarray(127, dtype=top.dtype), top)
            safe = np.where(scale > 0, scale, 1)
            return np.clip(np.rint(x / safe), -127, 127).astype(np.int8), scale
        import torch

        top = x.abs().amax(dim=axis, keepdim=True)
        scale = _rounded_up(top / 127, top)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        return torch.round(x / safe).clamp(-127, 127).to(torch.int8), scale

    def _decode(self, q: Any, scale: Any) -> Any:
        dtype = self._sv.dtype
        return (q.astype(dtype) if isinstance(q, np.ndarray) else q.to(dtype)) * scale

    # --- reading -------------------------------------------------------------------------

    @property
    def keys(self) -> Any:
        n = self.length
        if self.key_scale == "token":
            return self._traced(self._decode(self._qk[..., :n, :], self._sk[..., :n, :]), 1)
        g, done = self.group_size, self._quantized_keys
        groups = self._qk[..., :done, :].reshape(self.batch_shape + (done // g, g, self.d_k))
        full = self._decode(groups, self._sk[..., :done // g, None, :])
        full = full.reshape(self.batch_shape + (done, self.d_k))
        return self._traced(_cat([full, self._rk[..., :n - done, :]], -2), 1)

    @property
    def values(self) -> Any:
        n = self.length
        return self._traced(self._decode(self._qv[..., :n, :], self._sv[..., :n, :]), 2)

    def error_bounds(self) -> tuple[Any, Any]:
        """How far each key and value given back may be from the one appended.

        Returns
        -------
        keys_bound, values_bound : arrays shaped like :attr:`keys` and :attr:`values`
            ``s * (1/2 + 256 * eps) + step`` for a number stored with scale ``s``: half a
            step, plus the rounding of ``x / s`` and ``q * s`` in the dtype (``eps``: its
            machine epsilon; ``|x / s| <= 127`` makes each relative rounding at most
            ``127 eps`` steps), plus ``step``, the spacing of the dtype's subnormal
            numbers, for a product ``q * s`` that lands among them (whose rounding is
            absolute, not relative); 0 for keys held unquantized. ``|x / s| <= 127``
            holds because each scale is ``max|group| / 127`` rounded *up* to the dtype:
            rounded to nearest, a subnormal scale could be far too small (and one below
            the smallest subnormal 0).
        """
        factor = 0.5 + 256 * self._eps
        n = self.length
        zeros_like = np.zeros_like if isinstance(self._sv, np.ndarray) else \
            __import__("torch").zeros_like
        vb = zeros_like(self.values) + (self._sv[..., :n, :] * factor + self._step)
        if self.key_scale == "token":
            kb = zeros_like(self.keys) + (self._sk[..., :n, :] * factor + self._step)
            return kb, vb
        g, done = self.group_size, self._quantized_keys
        kb = zeros_like(self.keys)
        steps = self._sk[..., :done // g, None, :] * factor + self._step
        grouped = zeros_like(kb[..., :done, :].reshape(self.batch_shape + (done // g, g,
                                                                           self.d_k))) + steps
        kb[..., :done, :] = grouped.reshape(self.batch_shape + (done, self.d_k))
        return kb, vb

    # --- writing -------------------------------------------------------------------------

    def append(self, k: Any, v: Any) -> tuple[Any, Any]:
        """Quantize and store ``n`` new positions (shapes ``batch_shape + (n, d_k)`` and
        ``(..., d_v)``); return :attr:`keys` and :attr:`values` (dequantized). Raises as
        :meth:`attncore.KVCache.append`; on error nothing changes. Gradients pass
        straight through the rounding (see the Notes above)."""
        n = self._check_kv(k, v)
        start, end = self.length, self.length + n
        self._record(start, k, v)
        k, v = numbers_of(k), numbers_of(v)
        qv, sv = self._quantize(v, -1)
        self._qv[..., start:end, :], self._sv[..., start:end, :] = qv, sv
        if self.key_scale == "token":
            qk, sk = self._quantize(k, -1)
            self._qk[..., start:end, :], self._sk[..., start:end, :] = qk, sk
            self.length = end
            return self.keys, self.values
        g, pos = self.group_size, start
        while pos < end:
            slot = pos % g
            m = min(g - slot, end - pos)
            self._rk[..., slot:slot + m, :] = k[..., pos - start:pos - start + m, :]
            pos += m
            if pos % g == 0:                    # a group is complete: quantize per channel
                qk, sk = self._quantize(self._rk, -2)
                self._qk[..., pos - g:pos, :] = qk
                self._sk[..., pos // g - 1:pos // g, :] = sk
        self.length = end
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions. With ``key_scale="channel"`` a length inside
        a quantized key group (not a multiple of ``group_size`` and below the quantized
        length) is refused: its per-channel scales cover tokens being dropped, and the
        original keys are gone."""
        length = check_truncate(self, length)
        if self.key_scale == "channel" and length < self._quantized_keys \
                and length % self.group_size:
            raise ValueError(f"length: expected a multiple of group_size={self.group_size} "
                             f"or at least the {self._quantized_keys} positions whose keys "
                             f"are quantized per channel, got {length}")
        self.length = length
        self._forget(length)

    def _checkpoint(self) -> Any:
        # With per-channel key scales an append can complete the open group, which a
        # truncate cannot reopen (its original keys are gone): keep them to restore.
        if self.key_scale == "token":
            return self.length, None
        rk = self._rk.copy() if isinstance(self._rk, np.ndarray) else self._rk.clone()
        return self.length, rk

    def _rollback(self, checkpoint: Any) -> None:
        length, rk = checkpoint
        if rk is not None:
            self._rk[...] = rk        # the open group's keys, as they were before
        # (the codes and scales written since lie beyond the length, or in the group that
        # is open again, and are never read)
        self.length = length
        self._forget(length)
        if length == 0:
            self.rope_base = None

    def __repr__(self) -> str:
        return (f"Int8KVCache(length={self.length}, capacity={self.capacity}, batch_shape="
                f"{self.batch_shape}, d_k={self.d_k}, d_v={self.d_v}, "
                f"key_scale={self.key_scale!r})")
