"""A KV cache for sliding-window attention: a ring buffer of the last ``W`` positions, plus
the first ``S`` (StreamingLLM's sink tokens).

With a window of ``W``, the query at position ``t`` sees the keys ``t - W < j <= t``
only, so a decoder never needs more than the last ``W`` keys and values: the cache's
memory is fixed, ``O(W)``, however long the sequence (Mistral, Gemma's local layers,
gpt-oss's windowed layers). StreamingLLM (Xiao et al., 2024) found that a model trained
with full attention breaks down when the first tokens leave such a cache, because it
parks attention on them, and that keeping the first ``S = 4`` positions as well
("attention sinks") restores it. :class:`SlidingWindowKVCache` keeps both:

* the first ``S`` positions, in rows ``0 .. S-1``, never evicted;
* the later positions in a ring of ``W`` rows: position ``p >= S`` lives in row
  ``S + (p - S) % W``, overwriting the position ``W`` before it.

The mask it implements is :func:`~attncore.sliding_window_mask` with ``sink_tokens=S``:
query ``t`` sees key ``j`` when ``j <= t`` and (``t - j < W`` or ``j < S``).

Positions (and RoPE). The cache's ``length`` is the number of positions seen, the
position of the next token, as for :class:`~attncore.KVCache`; :attr:`positions` gives
the position of each row it holds. With ``rope_base``, :func:`~attncore.decode_step`
rotates each key at its **absolute** position before caching it, so decoding through
this cache equals recomputation over the whole sequence with the same mask::

    decode(params, x, cache=SlidingWindowKVCache.for_layer(params, W, sink_tokens=S),
           rope_base=b)
    == rope_multi_head_attention(params, x, base=b,
                                 mask=sliding_window_mask(n, n, W, sink_tokens=S))

This is the semantics of the models trained with windows (Mistral, Gemma, gpt-oss). It
differs from StreamingLLM's, which assigns positions *within the cache* (the sinks
``0 .. S-1``, then the window's keys ``S, S+1, ...``) and so has to keep keys unrotated and
rotate them again at every step; no single mask over the whole sequence reproduces that,
because the distance between two tokens changes as the window slides. With absolute
positions the distance from a query to the sink tokens grows with the sequence; a model
used far beyond the context it was trained on then sees distances it never saw.

Order. The rows of :attr:`keys` are not in position order once the ring has wrapped.
Attention does not care: it is a weighted sum over keys, the same for any order of the
(key, value) pairs (:attr:`positions` says which row is which), so one new token attends to
the buffer as it lies, with no copy.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np

from ._backend import NUMPY, check_size, dtype_name
from .kvcache import (
    BaseKVCache,
    buffer_nbytes,
    check_batch_shape,
    check_cache_layout,
    check_truncate,
    numbers_of,
)
from .masks import _as_library, window_allowed
from .multihead import MultiHeadParams

__all__ = ["SlidingWindowKVCache"]


class _Undo(NamedTuple):
    """What the last append overwrote, so that ``truncate`` to its start restores it
    (and the differentiable buffers before it, see ``_grad``)."""

    length: int
    rows: Any
    keys: Any
    values: Any
    grad: Any


class SlidingWindowKVCache(BaseKVCache):
    """Keys and values of the last ``window`` positions (a ring buffer), plus the first
    ``sink_tokens`` positions, for one attention layer.

    It is a :class:`~attncore.BaseKVCache`: :func:`~attncore.decode_step` and
    :func:`~attncore.decode` use it as they use a :class:`~attncore.KVCache`, and then
    compute sliding-window attention, equal (up to rounding) to
    ``multi_head_attention(params, x, mask=sliding_window_mask(n, n, window,
    sink_tokens=sink_tokens))`` (see the module docstring for RoPE). Its memory is
    allocated once, for ``sink_tokens + window`` positions, and never grows: there is no
    capacity to run out of.

    Parameters
    ----------
    window : int
        ``W >= 1``: each query sees the last ``W`` positions, its own included.
    batch_shape : tuple of int
        The leading axes of the keys and values, for a layer ``(..., n_kv_heads)``.
    d_k : int
        Width of a key, ``>= 1``.
    d_v : int, optional
        Width of a value, ``>= 0`` (default ``d_k``).
    sink_tokens : int, default 0
        ``S >= 0``: the first ``S`` positions stay in the cache, visible to every query.
    dtype, backend, device
        As in :class:`~attncore.KVCache`.

    Attributes
    ----------
    keys, values : arrays, shapes ``batch_shape + (held, d_k)`` and ``(..., d_v)``
        The positions held, ``held = min(length, sink_tokens + window)`` rows: views of
        the buffer, the sink tokens first, then the ring (not in position order once it
        has wrapped).
    positions : numpy.ndarray of int64, shape ``(held,)``
        The position of each row of :attr:`keys`.
    length : int
        Positions seen (also ``len(cache)``): the position of the next token.
    capacity : int
        ``sys.maxsize``: a ring buffer always has room.
    nbytes : int
        Bytes of the two buffers, ``(sink_tokens + window) * prod(batch_shape) * (d_k +
        d_v)`` numbers, whatever the length.

    Notes
    -----
    Gradients (torch), as :class:`~attncore.BaseKVCache` promises: the buffers hold
    numbers only. While it holds keys and values that autograd recorded, :attr:`keys` and
    :attr:`values` give them back with their history (from copies of the buffers made out
    of place at each append); :meth:`reset` drops that history, so a cache emptied after a
    backward pass is filled and differentiated again.

    Raises
    ------
    TypeError, ValueError
        As :class:`~attncore.KVCache`; a ``window`` below 1 or a negative
        ``sink_tokens``.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> cache = ac.SlidingWindowKVCache(3, (1,), d_k=2, sink_tokens=1)
    >>> for t in range(6):
    ...     _ = cache.append(np.full((1, 1, 2), float(t)), np.zeros((1, 1, 2)))
    >>> cache.positions, cache.keys[0, :, 0]
    (array([0, 4, 5, 3]), array([0., 4., 5., 3.]))
    """

    def __init__(self, window: int, batch_shape: tuple[int, ...], d_k: int,
                 d_v: int | None = None, *, sink_tokens: int = 0, dtype: Any = np.float64,
                 backend: str = NUMPY, device: Any = None) -> None:
        self.window = check_size("window", window)
        self.sink_tokens = check_size("sink_tokens", sink_tokens, minimum=0)
        self.batch_shape, self.d_k, self.d_v, np_dtype = check_cache_layout(
            batch_shape, d_k, d_v, dtype, backend, device)
        rows = self.sink_tokens + self.window
        k_shape = self.batch_shape + (rows, self.d_k)
        v_shape = self.batch_shape + (rows, self.d_v)
        if backend == NUMPY:
            self._k, self._v = np.zeros(k_shape, np_dtype), np.zeros(v_shape, np_dtype)
        else:
            import torch

            tdtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np_dtype.name)
            self._k = torch.zeros(k_shape, dtype=tdtype, device=device)
            self._v = torch.zeros(v_shape, dtype=tdtype, device=device)
        self.length = 0
        self.rope_base = None
        self._undo: _Undo | None = None
        self._seen = np.zeros(0, dtype=np.int64)   # positions of what append returned
        # The buffers hold numbers only (as every cache's, see BaseKVCache's Notes). While
        # appends that autograd records are held, ``_grad`` is ``(keys, values)``: the
        # buffers rebuilt out of place with each append's rows, carrying their history;
        # None otherwise. A reset drops it, so nothing of a finished sequence's graph
        # stays attached to the cache.
        self._grad: tuple[Any, Any] | None = None

    @classmethod
    def for_layer(cls, params: MultiHeadParams, window: int,
                  batch_shape: tuple[int, ...] = (), *,
                  sink_tokens: int = 0) -> "SlidingWindowKVCache":
        """An empty cache for the self-attention layer ``params``: ``batch_shape +
        (params.n_kv_heads,)`` rows of width ``params.d_head``, in the parameters'
        library, dtype and device (as :meth:`attncore.KVCache.for_layer`)."""
        if not isinstance(params, MultiHeadParams):
            raise TypeError(f"params: expected a MultiHeadParams, got {type(params).__name__}")
        check_batch_shape(batch_shape)
        device = None if params.backend == NUMPY else params.w_q.device
        return cls(window, batch_shape + (params.n_kv_heads,), params.d_head,
                   sink_tokens=sink_tokens, dtype=params.w_q.dtype, backend=params.backend,
                   device=device)

    # --- reading -------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return sys.maxsize

    def _like(self) -> Any:
        return self._k

    @property
    def held(self) -> int:
        """Rows held: ``min(length, sink_tokens + window)``."""
        return min(self.length, self.sink_tokens + self.window)

    def _buffers(self) -> tuple[Any, Any]:
        """The buffers to read: with their autograd history while it is recorded."""
        if self._grad is not None and sys.modules["torch"].is_grad_enabled():
            return self._grad
        return self._k, self._v

    @property
    def keys(self) -> Any:
        return self._buffers()[0][..., :self.held, :]

    @property
    def values(self) -> Any:
        return self._buffers()[1][..., :self.held, :]

    @property
    def positions(self) -> np.ndarray:
        return self._positions_held(self.length)

    def _positions_held(self, length: int) -> np.ndarray:
        """The position in each row after ``length`` positions were appended."""
        s, w = self.sink_tokens, self.window
        rows = np.arange(min(length, s + w), dtype=np.int64)
        last = length - 1
        # ring row r holds the latest position p <= last with p = S + (r - S) mod W
        ring = last - (last - rows) % w
        return np.where(rows < s, rows, ring)

    def _row(self, positions: np.ndarray) -> np.ndarray:
        s = self.sink_tokens
        return np.where(positions < s, positions, s + (positions - s) % self.window)

    @property
    def nbytes(self) -> int:
        return buffer_nbytes(self._k, self._v)

    def __repr__(self) -> str:
        return (f"SlidingWindowKVCache(length={self.length}, window={self.window}, "
                f"sink_tokens={self.sink_tokens}, batch_shape={self.batch_shape}, "
                f"d_k={self.d_k}, d_v={self.d_v}, dtype={dtype_name(self._k)})")

    # --- writing -------------------------------------------------------------------------

    def append(self, k: Any, v: Any) -> tuple[Any, Any]:
        """Store ``n`` new positions; return the keys and values the new queries need.

        Parameters
        ----------
        k : array, shape ``batch_shape + (n, d_k)``
        v : array, shape ``batch_shape + (n, d_v)``
            The cache's library, device and dtype; ``n >= 0``.

        Returns
        -------
        keys, values : arrays, shapes ``batch_shape + (m, d_k)`` and ``(..., d_v)``
            For ``n = 1``: :attr:`keys` and :attr:`values` after the append (views),
            every one of which the new query sees. For ``n > 1``: the positions held
            before the append followed by the ``n`` new ones (a copy), since the first
            new queries still see positions that the last ones evict; the mask of
            :func:`~attncore.decode_step` (:meth:`_decode_mask`) says which query sees
            which.

        Raises
        ------
        TypeError, ValueError
            As :meth:`attncore.KVCache.append`; the cache is then unchanged.
        """
        n = self._check_kv(k, v)
        start, end = self.length, self.length + n
        new = np.arange(start, end, dtype=np.int64)
        if n > 1:
            before = (self.keys, self.values, self.positions)
            keys, values = (_concat(old, x) for old, x in zip(before[:2], (k, v)))
            self._seen = np.concatenate([before[2], new])
        # Only the sink tokens and the last W window positions are stored (an earlier
        # one would be overwritten within this same append).
        stored = (new < self.sink_tokens) | (new >= end - self.window)
        src = np.flatnonzero(stored)
        rows = self._row(new[src])
        self._undo = _Undo(start, rows, *(_take_rows(b, rows) for b in (self._k, self._v)),
                           self._grad)
        _put_rows(self._k, rows, numbers_of(k), src)
        _put_rows(self._v, rows, numbers_of(v), src)
        self._grad = _grad_rows(self._grad, (self._k, self._v), rows, (k, v), src)
        self.length = end
        if n > 1:
            return keys, values
        self._seen = self.positions
        return self.keys, self.values

    def _decode_mask(self, n_new: int, like: Any) -> tuple[Any, bool]:
        """The mask of the ``n_new`` queries just appended (positions ``length - n_new
        .. length - 1``) against the keys :meth:`append` returned: the sliding window with
        sink tokens, on their positions. None when every query sees every key (one new
        token always does)."""
        q_pos = np.arange(self.length - n_new, self.length, dtype=np.int64).reshape(-1, 1)
        allowed = window_allowed(q_pos, self._seen, self.window, self.sink_tokens)
        if allowed.all():
            return None, False
        return _as_library(allowed, like), False

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on.

        A ring buffer has overwritten what it evicted, so only these are possible:
        ``length`` equal to the current length; 0 (:meth:`reset`); the length before the
        last :meth:`append` (that append is undone: :func:`~attncore.decode_step` does
        this when it fails, so the cache is unchanged by any error); and any
        ``length`` while nothing has been evicted (``length <= sink_tokens + window``
        before the call). Anything else is a ``ValueError`` and changes nothing.
        """
        length = check_truncate(self, length)
        if length == self.length:
            return
        undo = self._undo
        if length == 0 or self.length <= self.sink_tokens + self.window:
            pass
        elif undo is not None and length == undo.length:
            _put_rows(self._k, undo.rows, undo.keys, None)
            _put_rows(self._v, undo.rows, undo.values, None)
            self._grad = undo.grad
        else:
            raise ValueError(
                f"length: a SlidingWindowKVCache of window {self.window} holding positions "
                f"up to {self.length - 1} has overwritten the positions that a length of "
                f"{length} would need again (from {max(self.sink_tokens, length - self.window)}"
                f" on); it can go back only to {undo.length if undo else self.length} (the "
                f"last append undone), or to 0")
        self.length = length
        if length == 0:
            self._grad = None
        self._undo = None
        self._seen = self.positions


def _concat(a: Any, b: Any) -> Any:
    if isinstance(a, np.ndarray):
        return np.concatenate([a, b], axis=-2)
    return sys.modules["torch"].cat([a, b], dim=-2)


def _grad_rows(grad: tuple[Any, Any] | None, buffers: tuple[Any, Any], rows: np.ndarray,
               new: tuple[Any, Any], src: np.ndarray) -> tuple[Any, Any] | None:
    """The differentiable buffers after an append of ``new`` (keys, values) into
    ``rows``: None while no append was recorded by autograd; else the previous ones (or
    the buffers' numbers) with the new rows copied in out of place, so that each keeps
    the history of what it holds and nothing is overwritten under autograd's feet."""
    if isinstance(buffers[0], np.ndarray):
        return None
    torch = sys.modules["torch"]
    recorded = torch.is_grad_enabled() and any(x.requires_grad for x in new)
    if grad is None and not recorded:
        return None
    start = grad if grad is not None else tuple(b.clone() for b in buffers)
    index = torch.as_tensor(rows, device=buffers[0].device)
    pick = torch.as_tensor(src, device=buffers[0].device)
    with torch.enable_grad():            # keep the history of the rows held before
        return tuple(b.index_copy(b.dim() - 2, index, x.index_select(x.dim() - 2, pick))
                     for b, x in zip(start, new))


def _take_rows(buffer: Any, rows: np.ndarray) -> Any:
    """Copies of ``buffer[..., rows, :]``."""
    if isinstance(buffer, np.ndarray):
        return buffer[..., rows, :]
    torch = sys.modules["torch"]
    return buffer[..., torch.as_tensor(rows, device=buffer.device), :]


def _put_rows(buffer: Any, rows: np.ndarray, x: Any, src: np.ndarray | None) -> None:
    """``buffer[..., rows, :] = x[..., src, :]`` (all of ``x`` when ``src`` is None)."""
    if isinstance(buffer, np.ndarray):
        buffer[..., rows, :] = x if src is None else x[..., src, :]
        return
    torch = sys.modules["torch"]
    index = torch.as_tensor(rows, device=buffer.device)
    buffer[..., index, :] = x if src is None else \
        x[..., torch.as_tensor(src, device=x.device), :]
