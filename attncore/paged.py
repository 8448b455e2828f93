"""A paged KV cache: fixed-size blocks from a shared pool and a block table per sequence.

A contiguous cache must reserve, for each sequence, room for the longest it may become,
before anyone knows how long it will be. Most of that room is never used. The paged cache of
vLLM (Kwon et al., 2023) stores keys and values in blocks of ``block_size`` positions taken
from one pool shared by all sequences, as an operating system pages memory: a sequence
takes a new block only when its last one is full, so at most ``block_size - 1`` slots per
sequence are reserved and unused, and its **block table** (the list of its blocks, in
order) says where position ``j`` lives: block ``table[j // block_size]``, slot ``j %
block_size``.

* :class:`BlockPool`     -- the physical blocks, and which are free
* :class:`PagedKVCache`  -- one sequence's cache: a block table into a pool. It is a
  :class:`~attncore.BaseKVCache`, so :func:`~attncore.decode_step` and
  :func:`~attncore.decode` use it as they use a :class:`~attncore.KVCache`, with the same
  results bit for bit: the keys and values it gives back are exactly the ones appended,
  and ``decode_step`` hands attention the keys and values of every cache in the same
  memory layout (contiguous rows), so the same numbers give the same rounding.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from ._backend import NUMPY, check_size, dtype_name
from .kvcache import BaseKVCache, buffer_nbytes, check_cache_layout, check_truncate, numbers_of

__all__ = ["BlockPool", "PagedKVCache"]


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` positions, for keys and values.

    Parameters
    ----------
    num_blocks : int
        Blocks in the pool, ``>= 0``.
    block_size : int
        Positions per block, ``>= 1`` (vLLM's default is 16).
    batch_shape : tuple of int
        The rows of each position, for a layer ``(n_kv_heads,)``.
    d_k : int
        Key width, ``>= 1``.
    d_v : int, optional
        Value width, ``>= 0`` (default ``d_k``).
    dtype, backend, device
        As in :class:`~attncore.KVCache`.

    Attributes
    ----------
    num_free, num_used : int
        Blocks free and held by caches.
    nbytes : int
        Bytes of the key and value blocks: ``num_blocks * block_size * prod(batch_shape) *
        (d_k + d_v)`` numbers.

    Raises
    ------
    TypeError, ValueError
        As :class:`~attncore.KVCache`.
    """

    def __init__(self, num_blocks: int, block_size: int, batch_shape: tuple[int, ...],
                 d_k: int, d_v: int | None = None, *, dtype: Any = np.float64,
                 backend: str = NUMPY, device: Any = None) -> None:
        self.num_blocks = check_size("num_blocks", num_blocks, minimum=0)
        self.block_size = check_size("block_size", block_size)
        self.batch_shape, self.d_k, self.d_v, np_dtype = check_cache_layout(
            batch_shape, d_k, d_v, dtype, backend, device)
        lead = (self.num_blocks,) + self.batch_shape + (self.block_size,)
        if backend == NUMPY:
            self._k = np.zeros(lead + (self.d_k,), np_dtype)
            self._v = np.zeros(lead + (self.d_v,), np_dtype)
        else:
            import torch

            tdtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np_dtype.name)
            self._k = torch.zeros(lead + (self.d_k,), dtype=tdtype, device=device)
            self._v = torch.zeros(lead + (self.d_v,), dtype=tdtype, device=device)
        self._free = list(range(self.num_blocks - 1, -1, -1))    # pop() gives block 0 first
        # the PagedKVCache holding each block it took (weakly: a cache no one holds any
        # more does not keep its blocks from release)
        self._holder: dict[int, weakref.ref] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def nbytes(self) -> int:
        return buffer_nbytes(self._k, self._v)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks; a ``ValueError`` (and nothing taken) if fewer are free."""
        n = check_size("n", n, minimum=0)
        if n > len(self._free):
            raise ValueError(f"n: cannot allocate {n} blocks from a BlockPool with "
                             f"{len(self._free)} of its {self.num_blocks} blocks free; make "
                             f"the pool larger or release finished sequences")
        return [self._free.pop() for _ in range(n)]

    def release(self, blocks: list[int]) -> None:
        """Give ``blocks`` (taken with :meth:`allocate`) back to the pool.

        A block that a :class:`PagedKVCache` still holds is refused: the next sequence
        to take it would overwrite that cache's keys and values. Such a cache gives its
        blocks back itself (:meth:`PagedKVCache.truncate`, :meth:`~PagedKVCache.reset`).
        On error nothing is given back.

        Raises
        ------
        ValueError
            A block that is not a used block of this pool (out of range, free, or named
            twice), or one a live :class:`PagedKVCache` holds.
        """
        seen = set()
        for b in blocks:
            if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, np.integer)) or \
                    not 0 <= b < self.num_blocks or b in self._free or b in seen:
                raise ValueError(f"blocks: block {b!r} is not a used block of this pool")
            seen.add(b)
            holder = self._holder.get(int(b))
            cache = None if holder is None else holder()
            if cache is not None:
                raise ValueError(f"blocks: block {b} is held by a PagedKVCache (block_table "
                                 f"{cache.block_table}); truncate or reset that cache, "
                                 f"which gives its blocks back")
        self._give_back(blocks)

    def _take(self, n: int, cache: "PagedKVCache") -> list[int]:
        """:meth:`allocate` for ``cache``, which then holds the blocks."""
        blocks = self.allocate(n)
        for b in blocks:
            self._holder[b] = weakref.ref(cache)
        return blocks

    def _give_back(self, blocks: list[int]) -> None:
        for b in blocks:
            self._holder.pop(int(b), None)
            self._free.append(int(b))

    def __repr__(self) -> str:
        return (f"BlockPool(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"free={self.num_free}, batch_shape={self.batch_shape}, d_k={self.d_k}, "
                f"d_v={self.d_v}, dtype={dtype_name(self._k)})")


class PagedKVCache(BaseKVCache):
    """One sequence's KV cache, stored in blocks of a :class:`BlockPool`.

    Appending fills the last block and takes new blocks from the pool only as needed;
    :meth:`truncate` gives back the blocks it no longer needs. :attr:`keys` and
    :attr:`values` gather the blocks named by :attr:`block_table` into arrays of shape
    ``batch_shape + (length, d)`` (a copy: the blocks are not adjacent in memory), equal
    to what was appended.

    Parameters
    ----------
    pool : BlockPool
        Where the blocks come from; its ``batch_shape``, widths, dtype and device are the
        cache's.
    max_length : int, optional
        Positions this sequence may hold at most (default: as many as the pool allows).

    Attributes
    ----------
    block_table : tuple of int
        The sequence's blocks in order: position ``j`` is slot ``j % block_size`` of
        block ``block_table[j // block_size]``.
    reserved : int
        Slots held by the sequence, ``len(block_table) * block_size``.
    capacity : int
        Positions it can hold now: ``length`` plus the free slots of its last block and
        of the pool's free blocks (at most ``max_length``).

    Raises
    ------
    TypeError, ValueError
        ``pool`` is not a :class:`BlockPool`; ``max_length`` not a non-negative integer.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> pool = ac.BlockPool(8, 4, (1,), d_k=2)
    >>> cache = ac.PagedKVCache(pool)
    >>> _ = cache.append(np.ones((1, 6, 2)), np.ones((1, 6, 2)))
    >>> cache.block_table, cache.reserved, pool.num_free
    ((0, 1), 8, 6)
    """

    def __init__(self, pool: BlockPool, max_length: int | None = None) -> None:
        if not isinstance(pool, BlockPool):
            raise TypeError(f"pool: expected a BlockPool, got {type(pool).__name__}")
        self.pool = pool
        self.max_length = None if max_length is None else \
            check_size("max_length", max_length, minimum=0)
        self.batch_shape, self.d_k, self.d_v = pool.batch_shape, pool.d_k, pool.d_v
        self._table: list[int] = []
        self.length = 0
        self.rope_base = None

    def _like(self) -> Any:
        return self.pool._k

    @property
    def block_table(self) -> tuple[int, ...]:
        return tuple(self._table)

    @property
    def reserved(self) -> int:
        return len(self._table) * self.pool.block_size

    @property
    def capacity(self) -> int:
        room = self.reserved + self.pool.num_free * self.pool.block_size
        return room if self.max_length is None else min(room, self.max_length)

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks this sequence holds."""
        per_block = self.pool.nbytes // self.pool.num_blocks if self.pool.num_blocks else 0
        return len(self._table) * per_block

    def _gather(self, buffer: Any) -> Any:
        nb = len(self._table)
        b = self.batch_shape
        if isinstance(buffer, np.ndarray):
            blocks = np.moveaxis(buffer[np.asarray(self._table, dtype=np.intp)], 0, -3)
        else:
            import torch

            index = torch.as_tensor(self._table, dtype=torch.long, device=buffer.device)
            blocks = buffer[index].movedim(0, -3)
        flat = blocks.reshape(b + (nb * self.pool.block_size, buffer.shape[-1]))
        return flat[..., :self.length, :]

    @property
    def keys(self) -> Any:
        return self._traced(self._gather(self.pool._k), 1)

    @property
    def values(self) -> Any:
        return self._traced(self._gather(self.pool._v), 2)

    def append(self, k: Any, v: Any) -> tuple[Any, Any]:
        """Store ``n`` new positions (shapes ``batch_shape + (n, d_k)`` and ``(..., d_v)``),
        taking blocks from the pool as needed; return :attr:`keys` and :attr:`values`.
        Raises as :meth:`attncore.KVCache.append`; on error nothing changes."""
        n = self._check_kv(k, v)
        bs = self.pool.block_size
        need = math.ceil((self.length + n) / bs) - len(self._table)
        self._table += self.pool._take(max(need, 0), self)
        kn, vn = numbers_of(k), numbers_of(v)
        pos = self.length
        while pos < self.length + n:
            block, slot = self._table[pos // bs], pos % bs
            m = min(bs - slot, self.length + n - pos)
            src = slice(pos - self.length, pos - self.length + m)
            self.pool._k[block][..., slot:slot + m, :] = kn[..., src, :]
            self.pool._v[block][..., slot:slot + m, :] = vn[..., src, :]
            pos += m
        self._record(self.length, k, v)
        self.length += n
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions and give back the blocks no longer needed."""
        length = check_truncate(self, length)
        keep = math.ceil(length / self.pool.block_size)
        self.pool._give_back(self._table[keep:])
        del self._table[keep:]
        self.length = length
        self._forget(length)

    def __repr__(self) -> str:
        return (f"PagedKVCache(length={self.length}, blocks={len(self._table)}, "
                f"block_size={self.pool.block_size}, batch_shape={self.batch_shape}, "
                f"d_k={self.d_k}, d_v={self.d_v})")
