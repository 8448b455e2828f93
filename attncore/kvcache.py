"""The KV cache, and decoding a multi-head self-attention layer one step at a time with it.

A causal layer's output at position ``t`` depends on the query of ``t`` and on the keys and
values of positions ``0 .. t`` only, and a key or value of position ``j`` depends on token
``j`` only. So when tokens arrive one at a time (autoregressive decoding), each step needs
to project only the new token, and to attend with its one query to the keys and values of
every position so far, which earlier steps have already computed: keep them, in a
:class:`KVCache`, instead of recomputing them.

* :class:`KVCache`              -- keys and values per position, appended step by step and
  read as arrays; its memory is allocated once, for a stated capacity
* :class:`BaseKVCache`          -- what :func:`decode_step` needs of a cache; the paged and
  the int8 caches (:mod:`attncore.paged`, :mod:`attncore.quantized_cache`) are others
* :func:`decode_step`           -- one step of a layer: project the new token(s), append
  their keys and values to the cache, attend to the whole cache; with ``rope_base`` the
  queries and keys are rotated (RoPE) at their absolute positions, which the cache tracks
* :func:`decode`                -- a whole sequence through :func:`decode_step`, in chunks
  of ``chunk_size`` tokens; equal to ``multi_head_attention(params, x, causal=True)``
* :func:`bottom_right_causal_mask` -- the causal mask of new queries against a longer key
  sequence (the new queries come *last*), which ``causal=True`` (top-left) is not

All of it works on NumPy arrays and torch tensors, with grouped-query and multi-query
parameters (the cache then holds ``n_kv_heads`` heads, not ``num_heads``).

Positions. Row ``j`` of a cache holds the key and value of position ``j``: the cache's
length is the position of the next token, so continuing a cache continues the positions
and :meth:`KVCache.truncate` rolls them back. With RoPE the cache holds *rotated* keys,
each rotated at its own position, which later steps never change (a rotation depends on
its own position only), so caching them is exact.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    TORCH,
    AttentionShape,
    backend_of,
    check_all_finite,
    check_size,
    dtype_name,
    find_non_finite,
    non_finite_error,
    shape_of,
)
from ._guard import attention_guard
from .attention import attend, lower_triangle
from .positions import _check_base, _cos_sin, _rotate
from .sinks import check_sinks
from .multihead import (
    MultiHeadParams,
    _Layer,
    _check_layer,
    merge_heads,
    _linear,
    _numpy_float_dtype,
    _project_heads,
)

__all__ = ["BaseKVCache", "KVCache", "bottom_right_causal_mask", "decode", "decode_step"]



def buffer_nbytes(*buffers: Any) -> int:
    """Bytes held by NumPy arrays or torch tensors (a cache's buffers)."""
    return int(sum(b.nbytes if isinstance(b, np.ndarray) else b.numel() * b.element_size()
                   for b in buffers))


def check_batch_shape(batch_shape: Any) -> tuple[int, ...]:
    """``batch_shape`` checked: a tuple of non-negative integers (a cache's leading shape).

    Raises
    ------
    TypeError, ValueError
        Not a tuple, or an entry that is not a non-negative integer.
    """
    if not isinstance(batch_shape, tuple):
        raise TypeError(f"batch_shape: expected a tuple of non-negative integers, got "
                        f"{batch_shape!r} ({type(batch_shape).__name__})")
    return tuple(check_size("batch_shape", n, minimum=0) for n in batch_shape)


def check_cache_layout(batch_shape: Any, d_k: Any, d_v: Any, dtype: Any, backend: str,
                       device: Any, *, min_d_v: int = 0) -> tuple[tuple[int, ...], int, int,
                                                                  Any]:
    """The checked layout every cache shares: ``(batch_shape, d_k, d_v, NumPy dtype)``.

    ``d_v`` None means ``d_k``; ``min_d_v`` is the smallest ``d_v`` the cache can hold.

    Raises
    ------
    TypeError, ValueError
        As :func:`check_batch_shape`; ``d_k`` not a positive integer; ``d_v`` below
        ``min_d_v``; a backend other than ``"numpy"`` and ``"torch"``; a device with NumPy;
        a dtype the backend does not compute in.
    """
    batch_shape = check_batch_shape(batch_shape)
    d_k = check_size("d_k", d_k)
    d_v = d_k if d_v is None else check_size("d_v", d_v, minimum=min_d_v)
    if backend not in (NUMPY, TORCH):
        raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
    if backend == NUMPY and device is not None:
        raise ValueError(f"device: expected None for backend='numpy', got {device!r}")
    return batch_shape, d_k, d_v, _numpy_float_dtype(dtype, backend)


class BaseKVCache:
    """What :func:`decode_step` needs of a cache: the layout, ``append`` and ``truncate``
    (and ``_decode_mask``, for a cache that does not give back every position).

    A cache holds, for ``length`` positions, a key of width ``d_k`` and a value of width
    ``d_v`` per row of ``batch_shape``; row ``j`` is position ``j``. Subclasses decide how
    the numbers are stored (:class:`KVCache`: one contiguous buffer;
    :class:`attncore.PagedKVCache`: fixed-size blocks of a shared pool;
    :class:`attncore.Int8KVCache`: 8-bit integers and scales) and give them back as
    arrays of the cache's library, device and dtype.

    Attributes
    ----------
    capacity : int
        Positions the cache can hold now (held plus room).
    batch_shape : tuple of int
    d_k, d_v : int
    length : int
        Positions held (also ``len(cache)``).
    rope_base : float or None
        The RoPE base the held keys were rotated with by :func:`decode_step` (None: not
        rotated); an empty cache takes the next step's.

    Notes
    -----
    Gradients (torch). The buffers hold numbers only, never autograd history: keys and
    values appended while autograd records them (they require a gradient) are kept
    beside the buffers, and :attr:`keys` and :attr:`values` give them back with their
    history, ``d keys / d k`` the identity on the positions they hold. So a cache can be
    emptied (:meth:`reset`) and filled and differentiated again, and the sequences that
    share a :class:`~attncore.BlockPool` are differentiated independently. (For an
    :class:`~attncore.Int8KVCache` the identity is the straight-through gradient of its
    rounding.) :meth:`truncate` forgets the positions it drops.
    """

    batch_shape: tuple[int, ...]
    d_k: int
    d_v: int
    length: int
    rope_base: float | None = None
    # (start, k, v) of each append that autograd recorded, in order; None when none
    _trace: list[tuple[int, Any, Any]] | None = None

    @property
    def capacity(self) -> int:               # pragma: no cover - every subclass has one
        raise NotImplementedError

    @property
    def keys(self) -> Any:                   # pragma: no cover
        raise NotImplementedError

    @property
    def values(self) -> Any:                 # pragma: no cover
        raise NotImplementedError

    def _like(self) -> Any:                  # pragma: no cover
        """An array of the cache's library, device and dtype."""
        raise NotImplementedError

    @property
    def backend(self) -> str:
        """``"numpy"`` or ``"torch"``."""
        return NUMPY if isinstance(self._like(), np.ndarray) else TORCH

    @property
    def dtype(self) -> Any:
        """The dtype of the keys and values it gives back."""
        return self._like().dtype

    def __len__(self) -> int:
        return self.length

    def append(self, k: Any, v: Any) -> tuple[Any, Any]:     # pragma: no cover
        raise NotImplementedError

    def _append(self, k: Any, v: Any) -> tuple[Any, Any]:
        """:meth:`append` for callers that made ``k`` and ``v`` to the cache's layout
        (:func:`decode_step`, after its checks); a cache may skip its checks here."""
        return self.append(k, v)

    def truncate(self, length: int) -> None:                 # pragma: no cover
        raise NotImplementedError

    def reset(self) -> None:
        """Empty the cache (``truncate(0)``), to decode another sequence in its memory."""
        self.truncate(0)

    # --- what decode_step needs to undo a step --------------------------------------------

    def _checkpoint(self) -> Any:
        """What :meth:`_rollback` needs to return to this state after appends."""
        return self.length

    def _rollback(self, checkpoint: Any) -> None:
        """Undo the appends since :meth:`_checkpoint` gave ``checkpoint``."""
        self.truncate(checkpoint)

    # --- gradients --------------------------------------------------------------------------

    def _record(self, start: int, k: Any, v: Any) -> None:
        """Keep ``k`` and ``v`` (just stored at ``start``, without history) if autograd
        records them, for :meth:`_traced`."""
        if isinstance(k, np.ndarray):
            return
        if sys.modules["torch"].is_grad_enabled() and (k.requires_grad or v.requires_grad):
            self._trace = (self._trace or []) + [(start, k, v)]

    def _forget(self, length: int) -> None:
        """Drop what :meth:`_record` kept of the positions from ``length`` on."""
        if not self._trace:
            return
        kept = []
        for start, k, v in self._trace:
            if start < length:
                end = length - start
                kept.append((start, k[..., :end, :], v[..., :end, :]))
        self._trace = kept or None

    def _traced(self, stored: Any, which: int) -> Any:
        """``stored`` keys (``which = 1``) or values (2), as the buffers give them back,
        with the autograd history of the recorded appends: ``stored + (t - t.detach())``,
        where ``t`` holds the appended numbers (zeros where none was recorded). Its
        value is ``stored``; its derivative by an appended entry is 1 where it is held."""
        if not self._trace:
            return stored
        torch = sys.modules["torch"]
        if not torch.is_grad_enabled():
            return stored
        pieces, at = [], 0
        shape = tuple(stored.shape)
        for entry in self._trace:
            start, x = entry[0], entry[which]
            if start > at:
                pieces.append(stored.new_zeros(shape[:-2] + (start - at, shape[-1])))
            pieces.append(x - x.detach())
            at = start + x.shape[-2]
        if at < shape[-2]:
            pieces.append(stored.new_zeros(shape[:-2] + (shape[-2] - at, shape[-1])))
        return stored + torch.cat(pieces, dim=-2)

    def _decode_mask(self, n_new: int, like: Any) -> tuple[Any, bool]:
        """``(mask, causal)`` of the ``n_new`` positions just appended, as queries, against
        the keys :meth:`append` returned: here every position so far, in order, so
        causal (top-left) for a first chunk, bottom-right for a later one, and nothing for
        one new token. A cache that keeps fewer positions (a sliding window,
        :class:`attncore.SlidingWindowKVCache`) says which of its keys each query sees."""
        start = self.length - n_new
        if n_new == 1 or start == 0:
            return None, n_new > 1
        return bottom_right_causal_mask(n_new, self.length, like=like), False

    def _check_kv(self, k: Any, v: Any) -> int:
        """Check ``k``, ``v`` against the cache's layout, and their values (finite, as
        attention's inputs); return their ``n``."""
        backend_of(cache=self._like(), k=k, v=v)
        for name, x in (("k", k), ("v", v)):
            if x.dtype != self.dtype:
                raise TypeError(f"{name}: expected the cache's dtype "
                                f"{dtype_name(self._like())}, got {dtype_name(x)}")
        ks, vs = shape_of(k), shape_of(v)
        b = self.batch_shape
        for name, xs, d in (("k", ks, "d_k"), ("v", vs, "d_v")):
            width = getattr(self, d)
            if len(xs) != len(b) + 2 or xs[:-2] != b or xs[-1] != width:
                layout = "(" + "".join(f"{i}, " for i in b) + f"n, {width})"
                raise ValueError(f"{name}: expected shape batch_shape + (n, {d}) = {layout}, "
                                 f"got {xs}")
        n = ks[-2]
        if vs[-2] != n:
            raise ValueError(f"k and v must hold the same number of positions n: k has shape "
                             f"{ks} (n={n}), v has shape {vs} (n={vs[-2]})")
        if self.length + n > self.capacity:
            raise ValueError(f"k, v: cannot append {n} positions to a "
                             f"{type(self).__name__} holding {self.length} of its capacity "
                             f"{self.capacity} (room for {self.capacity - self.length}); "
                             f"make the cache with a larger capacity")
        check_all_finite(k=k, v=v)
        return n


class KVCache(BaseKVCache):
    """Keys and values of the positions decoded so far, for one attention layer.

    The memory is allocated once, for ``capacity`` positions, when the cache is made:
    appending copies only the new positions, never what the cache holds, and
    :attr:`nbytes` is the memory the cache takes from the start. This is the choice of
    serving systems that reserve their cache up front, and it makes the memory a number
    known in advance rather than one that grows (a cache that grows by reallocating copies
    all it holds each time, and briefly needs the old and the new buffer at once). Appending
    beyond the capacity is a ``ValueError`` that says how much room was asked for and how
    much is left; nothing is reallocated silently.

    Parameters
    ----------
    capacity : int
        Positions the cache can hold, ``>= 0``.
    batch_shape : tuple of int
        The leading axes of the keys and values, for a multi-head layer
        ``(..., n_kv_heads)``: one cache row per sequence and key/value head.
    d_k : int
        Width of a key, ``>= 1``.
    d_v : int, optional
        Width of a value, ``>= 0`` (default ``d_k``).
    dtype : NumPy floating dtype or torch.dtype, default numpy.float64
        As in :func:`~attncore.init_multihead`.
    backend : {"numpy", "torch"}, default "numpy"
    device : torch.device or str, optional
        Where the torch buffers live.

    Attributes
    ----------
    keys : array, shape ``batch_shape + (length, d_k)``
        The keys appended so far, a view of the cache's buffer (not a copy). (While it
        holds keys that autograd recorded, a new tensor with their history: see
        :class:`BaseKVCache`'s Notes.)
    values : array, shape ``batch_shape + (length, d_v)``
        The values appended so far, a view (likewise).
    length : int
        Positions held (also ``len(cache)``).
    nbytes : int
        Bytes of the two buffers: ``capacity * prod(batch_shape) * (d_k + d_v)`` numbers.

    Raises
    ------
    TypeError, ValueError
        A size that is not a non-negative integer (``d_k`` positive), a dtype that is not
        floating, an unknown backend, a device for the NumPy backend.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> cache = ac.KVCache(4, (2,), d_k=3)          # 2 heads, keys and values of width 3
    >>> keys, values = cache.append(np.ones((2, 1, 3)), np.zeros((2, 1, 3)))
    >>> keys.shape, len(cache), cache.nbytes         # float64: 4 * 2 * (3 + 3) * 8 bytes
    ((2, 1, 3), 1, 384)
    """

    def __init__(self, capacity: int, batch_shape: tuple[int, ...], d_k: int,
                 d_v: int | None = None, *, dtype: Any = np.float64, backend: str = NUMPY,
                 device: Any = None) -> None:
        self._capacity = check_size("capacity", capacity, minimum=0)
        self.batch_shape, self.d_k, self.d_v, np_dtype = check_cache_layout(
            batch_shape, d_k, d_v, dtype, backend, device)
        k_shape = self.batch_shape + (self._capacity, self.d_k)
        v_shape = self.batch_shape + (self._capacity, self.d_v)
        if backend == NUMPY:
            self._k, self._v = np.zeros(k_shape, np_dtype), np.zeros(v_shape, np_dtype)
        else:
            import torch

            tdtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np_dtype.name)
            self._k = torch.zeros(k_shape, dtype=tdtype, device=device)
            self._v = torch.zeros(v_shape, dtype=tdtype, device=device)
        self.length = 0
        self.rope_base = None

    @classmethod
    def for_layer(cls, params: MultiHeadParams, capacity: int,
                  batch_shape: tuple[int, ...] = ()) -> "KVCache":
        """An empty cache for the self-attention layer ``params``: ``batch_shape +
        (params.n_kv_heads,)`` rows of width ``params.d_head``, in the parameters' library,
        dtype and device. ``batch_shape`` is the leading shape of the layer's input
        (``x.shape[:-2]``)."""
        if not isinstance(params, MultiHeadParams):
            raise TypeError(f"params: expected a MultiHeadParams, got {type(params).__name__}")
        check_batch_shape(batch_shape)
        device = None if params.backend == NUMPY else params.w_q.device
        return cls(capacity, batch_shape + (params.n_kv_heads,), params.d_head,
                   dtype=params.w_q.dtype, backend=params.backend, device=device)

    # --- reading -------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Positions the cache can hold (fixed when it is made)."""
        return self._capacity

    def _like(self) -> Any:
        return self._k

    @property
    def keys(self) -> Any:
        return self._traced(self._k[..., :self.length, :], 1)

    @property
    def values(self) -> Any:
        return self._traced(self._v[..., :self.length, :], 2)

    @property
    def nbytes(self) -> int:
        return buffer_nbytes(self._k, self._v)

    def __repr__(self) -> str:
        return (f"KVCache(length={self.length}, capacity={self.capacity}, batch_shape="
                f"{self.batch_shape}, d_k={self.d_k}, d_v={self.d_v}, "
                f"dtype={dtype_name(self._k)})")

    # --- writing -------------------------------------------------------------------------

    def append(self, k: Any, v: Any) -> tuple[Any, Any]:
        """Store the keys and values of ``n`` new positions after those held.

        Parameters
        ----------
        k : array, shape ``batch_shape + (n, d_k)``
        v : array, shape ``batch_shape + (n, d_v)``
            The cache's library, device and dtype; ``n >= 0``.

        Returns
        -------
        keys, values : arrays, shapes ``batch_shape + (length, d_k)`` and ``(..., d_v)``
            Every position held after the append (:attr:`keys`, :attr:`values`: views).

        Raises
        ------
        TypeError
            A library, device or dtype other than the cache's.
        ValueError
            A shape other than ``batch_shape + (n, d)``, different ``n`` in ``k`` and ``v``,
            more positions than the capacity leaves, or a NaN or infinity in ``k`` or
            ``v``; the cache is then unchanged.
        """
        n = self._check_kv(k, v)
        start, self.length = self.length, self.length + n
        self._k[..., start:self.length, :] = numbers_of(k)
        self._v[..., start:self.length, :] = numbers_of(v)
        self._record(start, k, v)
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (``0 <= length <= self.length``), as
        when drafted tokens are rejected; the memory stays allocated."""
        self.length = check_truncate(self, length)
        self._forget(self.length)


def numbers_of(x: Any) -> Any:
    """``x`` without autograd history (a tensor detached; an array as it is): what a
    cache's buffer stores (see :class:`BaseKVCache`'s Notes)."""
    return x if isinstance(x, np.ndarray) else x.detach()


def check_truncate(cache: BaseKVCache, length: Any) -> int:
    """``length`` as an int, ``0 <= length <= cache.length`` (else a clear error)."""
    length = check_size("length", length, minimum=0)
    if length > cache.length:
        raise ValueError(f"length: expected at most the {cache.length} positions held, "
                         f"got {length}")
    if length == 0:
        cache.rope_base = None            # an empty cache holds no rotated keys
    return length


def bottom_right_causal_mask(n_q: int, n_k: int, *, like: Any = None) -> Any:
    """The causal mask of the *last* ``n_q`` positions of a sequence of ``n_k``.

    Query ``i`` stands at position ``n_k - n_q + i`` and may attend to keys ``j <= n_k -
    n_q + i``: ``tril(ones(n_q, n_k), k=n_k - n_q)``, aligned at the bottom-right corner.
    This is the mask of new tokens against a cache that also holds the earlier ones
    (PyTorch's ``torch.nn.attention.bias.causal_lower_right``). ``causal=True`` and
    :func:`~attncore.causal_mask` are aligned at the top-left, ``tril(ones(n_q, n_k))``,
    which is right only when ``n_q = n_k``: with one new query it would let it see key 0
    alone. When ``n_q > n_k`` the first ``n_q - n_k`` rows are empty.

    Parameters
    ----------
    n_q, n_k : int
        Numbers of queries and keys, ``>= 0``.
    like : numpy.ndarray or torch.Tensor, optional
        A tensor makes the result a ``torch.bool`` tensor on its device.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(n_q, n_k)``, bool

    Examples
    --------
    >>> import attncore as ac
    >>> ac.bottom_right_causal_mask(2, 4).astype(int)
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])
    """
    n_q, n_k = check_size("n_q", n_q, minimum=0), check_size("n_k", n_k, minimum=0)
    return lower_triangle(n_q, n_k, n_k - n_q, like)


def _check_cache(cache: Any, params: MultiHeadParams, x: Any,
                 rope_base: float | None = None) -> None:
    if not isinstance(cache, BaseKVCache):
        raise TypeError(f"cache: expected a KVCache (KVCache.for_layer(params, capacity, "
                        f"batch_shape)) or another BaseKVCache, got {type(cache).__name__}")
    backend_of(cache=cache._like(), x=x)
    if cache.dtype != x.dtype:
        raise TypeError(f"cache: expected the dtype of x, {dtype_name(x)}, got a cache of "
                        f"{dtype_name(cache._like())}")
    if cache.length and cache.rope_base != rope_base:
        held = "unrotated keys" if cache.rope_base is None else \
            f"keys rotated with rope_base={cache.rope_base}"
        raise ValueError(f"rope_base: the cache holds {held}, got rope_base={rope_base}; "
                         f"decode a sequence with one rope_base throughout")
    want = tuple(shape_of(x)[:-2]) + (params.n_kv_heads,)
    if cache.batch_shape != want or cache.d_k != params.d_head or cache.d_v != params.d_head:
        raise ValueError(f"cache: expected batch_shape x.shape[:-2] + (n_kv_heads,) = {want} "
                         f"and d_k = d_v = d_head = {params.d_head}, got batch_shape "
                         f"{cache.batch_shape}, d_k={cache.d_k}, d_v={cache.d_v}")
    n_new = shape_of(x)[-2]
    if cache.length + n_new > cache.capacity:
        raise ValueError(f"cache: cannot append {n_new} positions to a "
                         f"{type(cache).__name__} holding "
                         f"{cache.length} of its capacity {cache.capacity} (room for "
                         f"{cache.capacity - cache.length}); make the cache with a larger "
                         f"capacity")


def _check_self_attention(params: Any) -> None:
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params: expected a MultiHeadParams (see init_multihead), got "
                        f"{type(params).__name__}")
    if params.d_kv != params.d_model:
        raise ValueError(f"params: expected a self-attention layer (d_kv == d_model) to "
                         f"decode, got d_kv={params.d_kv}, d_model={params.d_model}")


def _check_rope_base(rope_base: Any, params: MultiHeadParams) -> float | None:
    if rope_base is None:
        return None
    rope_base = _check_base(rope_base, "rope_base")
    if params.d_head % 2:
        raise ValueError(f"params: expected an even head width d_head for RoPE (rope_base="
                         f"{rope_base}), got d_head={params.d_head}")
    return rope_base


def decode_step(params: MultiHeadParams, x: Any, cache: BaseKVCache, *,
                rope_base: float | None = None, sinks: Any = None) -> Any:
    """One step of cached decoding through a causal multi-head self-attention layer.

    The new tokens' queries, keys and values are projected; the keys and values are
    appended to ``cache``; each new query attends to every position in the cache up to its
    own (for one new token: to all of them, so no mask is needed; for several, with
    :func:`bottom_right_causal_mask`). Then the heads are merged and projected by ``W_O``.

    With ``rope_base`` the queries and keys of the new tokens are rotated by
    :func:`~attncore.rope` at their absolute positions ``cache.length, ...,
    cache.length + n - 1`` before the keys are cached; the cached keys stay as they were
    rotated (each rotation depends on its own position only).

    Parameters
    ----------
    params : MultiHeadParams
        A self-attention layer (``d_kv = d_model``), any ``n_kv_heads``.
    x : numpy.ndarray or torch.Tensor, shape ``(..., n, d_model)``
        The inputs of the ``n >= 1`` new positions (usually ``n = 1``; a prompt, or a chunk
        of one, has more).
    cache : BaseKVCache
        This layer's cache (a :class:`KVCache`, :class:`~attncore.PagedKVCache` or
        :class:`~attncore.Int8KVCache`), with ``batch_shape = x.shape[:-2] +
        (params.n_kv_heads,)``, ``d_k = d_v = params.d_head``, the library, device and
        dtype of ``x``, and room for ``n`` more positions. It holds the positions before
        ``x``'s and is extended by ``x``'s.
    rope_base : float, optional
        Rotate queries and keys with RoPE of this base (a finite number above 1; needs an
        even ``d_head``). A cache that holds positions must have been filled with the same
        ``rope_base``.
    sinks : array of shape ``(num_heads,)`` or ``()``, optional
        Attention sinks, one logit per head, as in :func:`~attncore.multi_head_attention`.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(..., n, d_model)``
        Equal, up to rounding, to the rows of ``multi_head_attention(params, x_all,
        causal=True)`` (with ``rope_base``: ``rope_multi_head_attention(params, x_all,
        causal=True, base=rope_base)``) at these positions, where ``x_all`` is every input
        so far. (An :class:`~attncore.Int8KVCache` adds its quantization error; a
        :class:`~attncore.SlidingWindowKVCache` makes the mask its window's,
        :func:`~attncore.sliding_window_mask`.)

    Raises
    ------
    TypeError, ValueError
        As :func:`~attncore.multi_head_attention` for ``params`` and ``x``; a cache of
        another layout, library or dtype, or without room. On any error the cache is
        left as it was.
    """
    rope_base, sinks = _check_decode(params, x, cache, rope_base, sinks)
    return _decode_step(params, x, cache, rope_base, sinks)


def _check_decode(params: MultiHeadParams, x: Any, cache: BaseKVCache, rope_base: Any,
                  sinks: Any) -> tuple[float | None, Any]:
    """The argument checks of :func:`decode_step`; returns ``rope_base`` and ``sinks``
    checked."""
    _check_self_attention(params)
    rope_base = _check_rope_base(rope_base, params)
    # Not certified from the norms of x and of every weight, as multi_head_attention is:
    # for one new token, reading all the weights once more would cost more than the step.
    # The attention's inputs are checked instead (attention_guard), then the output.
    layer = _check_layer(params, x, None, None, False, names=("x", "x"), certify=False)
    _check_cache(cache, params, x, rope_base)
    if layer.n_q == 0:
        raise ValueError(f"x: expected at least one new position, got shape {shape_of(x)}")
    if sinks is not None:
        sinks = check_sinks(sinks, x, layer.batch + (params.num_heads,), heads="num_heads")
    return rope_base, sinks


def _decode_step(params: MultiHeadParams, x: Any, cache: BaseKVCache,
                 rope_base: float | None, sinks: Any = None, qk_norm: Any = None,
                 gate: Any = None) -> Any:
    """:func:`decode_step` after its argument checks (the callers have made them): the
    computation, with its checks of the values. ``qk_norm`` (a function of the queries
    and keys, ``(q, k) -> (q, k)``, applied before RoPE) and ``gate`` (multiplying each
    head's output before ``W_O``) are a gated or QK-normed block's
    (:func:`attncore.block_decode_step`)."""
    *batch, n_new, _ = x.shape
    layer = _Layer(x, tuple(batch), n_new, n_new, False, False, ("x", "x"))
    q, k, v = _project_heads(params, layer, x)
    if qk_norm is not None:
        q, k = qk_norm(q, k)
    start = cache.length
    checkpoint = cache._checkpoint()
    if rope_base is not None:
        # absolute positions start .. start + n_new - 1: the cache's length is the next one
        cos, sin = _cos_sin(start, n_new, params.d_head, rope_base, q)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    try:
        keys, values = cache._append(k, v)
    except ValueError:
        _blame_projections(params, x, q, k, v)        # a NaN in x or a weight, by name
        raise
    cache.rope_base = rope_base
    # Attention reads the keys and values laid out one way whatever the cache: contiguous
    # rows. A matrix product's rounding can depend on the memory layout of its operands
    # (the kernel it picks, the order of its sums), and the contiguous cache gives views
    # of a larger buffer where the paged one gathers blocks; with one layout the same
    # numbers give the same bits, so decoding through any exact cache gives the same
    # result bit for bit.
    if isinstance(keys, np.ndarray):
        keys, values = np.ascontiguousarray(keys), np.ascontiguousarray(values)
    elif _recording(q, keys, values):
        # Autograd saves what this step's attention read, which must not be a view of the
        # cache's buffer: the next step's append overwrites it in place (an error at
        # backward time). Copies: training through decode then keeps every step's keys
        # and values, O(n^2 / chunk_size) numbers, where multi_head_attention keeps O(n).
        contiguous = sys.modules["torch"].contiguous_format
        keys = keys.clone(memory_format=contiguous)
        values = values.clone(memory_format=contiguous)
    else:
        keys, values = keys.contiguous(), values.contiguous()
    try:
        h, d = params.num_heads, params.d_head
        # The new queries are the last n_new of start + n_new positions: with an empty
        # cache that is ordinary (top-left) causal attention, otherwise bottom-right (or,
        # for a cache that keeps only some positions, the mask it gives).
        mask, causal = cache._decode_mask(n_new, x)
        shape = AttentionShape(backend_of(x=x), layer.batch + (h,), n_new,
                               shape_of(keys)[-2], d, d, 1.0 / math.sqrt(d), causal,
                               h // params.n_kv_heads)
        try:
            guard = attention_guard(q, keys, values, shape,
                                    names=("q", "cache.keys", "cache.values"),
                                    inputs="x, the cache or params",
                                    scores="q @ cache.keys^T / sqrt(d_head), per head")
        except ValueError:
            _blame_projections(params, x, q, k, v)
            raise
        heads = attend(q, keys, values, mask, shape, False, guard, None, sinks)
        if gate is not None:
            heads = heads * gate
        out = _linear(merge_heads(heads), params.w_o, params.b_o)
        if find_non_finite(out=out) is not None:
            raise ValueError(f"x, params: expected an output that fits in dtype "
                             f"{dtype_name(out)}, got an overflow in the output projection "
                             f"heads @ params.w_o; use a wider dtype or smaller inputs or "
                             f"weights")
    except Exception:
        cache._rollback(checkpoint)
        raise
    return out


def _blame_projections(params: MultiHeadParams, x: Any, q: Any, k: Any, v: Any) -> None:
    """After the attention's check failed: if the new queries, keys or values hold NaN or
    infinity, raise naming the input or weight that holds one, or else the projection
    that overflowed (the cache's earlier positions were checked when they came)."""
    if find_non_finite(q=q, k=k, v=v) is None:
        return
    inputs = {"x": x, **{f"params.{n}": getattr(params, n)
                         for n in ("w_q", "w_k", "w_v", "b_q", "b_k", "b_v")}}
    bad = find_non_finite(**inputs)
    if bad is not None:
        raise non_finite_error(bad, inputs[bad]) from None
    raise ValueError("x, params: expected projections that fit in dtype "
                     f"{dtype_name(x)}, got an overflow; use a wider dtype or smaller "
                     f"inputs or weights") from None


def _recording(*tensors: Any) -> bool:
    """Whether autograd records an operation on ``tensors`` now."""
    torch = sys.modules["torch"]
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def decode(params: MultiHeadParams, x: Any, *, chunk_size: int = 1,
           cache: BaseKVCache | None = None, rope_base: float | None = None,
           sinks: Any = None) -> Any:
    """Run a sequence through a causal self-attention layer step by step, with a KV cache.

    Positions are fed to :func:`decode_step` ``chunk_size`` at a time (1: one token per
    step, as in autoregressive generation). The result equals ``multi_head_attention(params,
    x, causal=True)`` up to rounding, on every backend and for any ``n_kv_heads``; with
    ``rope_base``, ``rope_multi_head_attention(params, x, causal=True, base=rope_base)``
    (when the cache starts empty; a cache holding ``m`` positions puts ``x`` at positions
    ``m, m + 1, ...``).

    Parameters
    ----------
    params : MultiHeadParams
        A self-attention layer.
    x : numpy.ndarray or torch.Tensor, shape ``(..., n, d_model)``
    chunk_size : int, default 1
        Positions per step, ``>= 1``.
    cache : BaseKVCache, optional
        Continue from the positions this cache holds (they come before ``x``'s), and leave
        ``x``'s keys and values in it. By default a new cache of capacity ``n``.
    rope_base : float, optional
        RoPE of this base on queries and keys, at absolute positions (see
        :func:`decode_step`).
    sinks : array of shape ``(num_heads,)`` or ``()``, optional
        Attention sinks (see :func:`decode_step`).

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(..., n, d_model)``

    Raises
    ------
    TypeError, ValueError
        As :func:`decode_step`, and a ``chunk_size`` that is not a positive integer.

    Notes
    -----
    On torch the result is differentiable for every ``chunk_size`` (with respect to
    ``x`` and the parameters): each step attends to a copy of the cache's keys and
    values when autograd records it, since the next step writes into the cache's
    buffer. That keeps every step's keys and values for the backward pass; to train,
    :func:`~attncore.multi_head_attention` with ``causal=True`` needs far less memory.
    """
    chunk_size = check_size("chunk_size", chunk_size)
    _check_self_attention(params)          # before x is measured against params.d_kv
    rope_base = _check_rope_base(rope_base, params)
    layer = _check_layer(params, x, None, None, False, names=("x", "x"))
    n = layer.n_q
    if cache is None:
        cache = KVCache.for_layer(params, n, layer.batch)
    _check_cache(cache, params, x, rope_base)
    if n == 0:
        return _linear(x, params.w_o, None)             # (..., 0, d_model)
    outs = [decode_step(params, x[..., i:i + chunk_size, :], cache, rope_base=rope_base,
                        sinks=sinks)
            for i in range(0, n, chunk_size)]
    if isinstance(x, np.ndarray):
        return np.concatenate(outs, axis=-2)
    return sys.modules["torch"].cat(outs, dim=-2)
