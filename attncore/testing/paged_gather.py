"""A conformance check for reading a sequence's keys out of a paged cache.

A paged KV cache (:class:`attncore.PagedKVCache`, vLLM's paged attention) keeps the keys
of many sequences in one pool of blocks of ``block_size`` positions; a sequence's **block
table** lists its blocks in order, and position ``j`` lives in slot ``j % block_size`` of
block ``block_table[j // block_size]``. :func:`check_gather_pages` checks a function that
turns the pool and one table into the sequence's keys, contiguous, as attention reads
them::

    >>> import numpy as np
    >>> from attncore.testing import check_gather_pages
    >>> def gather(key_blocks, block_table, length):
    ...     d = key_blocks.shape[-1]
    ...     rows = key_blocks[np.asarray(block_table, dtype=int)].reshape(-1, d)
    ...     return rows[:length]
    >>> check_gather_pages(gather).passed
    True

**The calling convention.** ``fn(key_blocks, block_table, length)`` with

* ``key_blocks`` a NumPy array ``(num_blocks, block_size, d)``, float64 or float32: the
  pool's keys (a :class:`attncore.BlockPool` with ``batch_shape=()`` stores them so). The
  slots that belong to no sequence, and those of a sequence's last block past its
  length, hold numbers left by earlier sequences;
* ``block_table`` a tuple of ints, the sequence's blocks in order (not necessarily
  increasing, nor adjacent);
* ``length`` an int, the positions the sequence holds, ``0 <= length <= block_size *
  len(block_table)``.

It must return an array ``(length, d)`` of ``key_blocks``' dtype whose row ``j`` is the
key of position ``j``, exactly (a copy of the stored numbers), and leave its arguments
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._backend import check_size
from .report import CheckReport, PropertyResult
from .runner import Failure, call, expect_array, run_properties, with_properties

__all__ = ["GatherPagesCheck", "PROPERTIES", "PropertyResult", "check_gather_pages"]

PROPERTIES = {
    "output_shape": "returns an array of shape (length, d) with the dtype of key_blocks, "
                    "for lengths that fill their last block and lengths that do not",
    "matches_contiguous_cache": "through PagedKVCache on a fresh BlockPool, the gathered "
                                "keys equal the keys appended, bit for bit, which is what "
                                "a contiguous cache holds",
    "partial_last_block": "a last block that is partly filled gives only its first "
                          "length % block_size slots, not the numbers left after them",
    "empty_sequence": "length 0 gives an empty array of shape (0, d)",
    "block_sizes": "block sizes 1, 2, 3, 5 and 16, with lengths below, at and above a "
                   "multiple of the block size",
    "blocks_out_of_order": "a block table that is not increasing, such as (5, 2, 7): "
                           "position j is read from block block_table[j // block_size]",
    "shared_pool": "several sequences with interleaved blocks in one pool: each table "
                   "gives its own sequence's keys and none of the others'",
    "float32": "float32 blocks give float32 keys, the stored numbers exactly",
    "inputs_unchanged": "leaves key_blocks as it was",
}
"""The properties :func:`check_gather_pages` checks, by name, with what each one asserts."""

__doc__ = with_properties(__doc__, PROPERTIES)

SIGNATURE = "fn(key_blocks, block_table, length)"


@dataclass(frozen=True)
class GatherPagesCheck(CheckReport):
    """The report of :func:`check_gather_pages`: one result per property of
    :data:`PROPERTIES` (see :class:`~attncore.testing.report.CheckReport`)."""

    check: str = "check_gather_pages"


def check_gather_pages(fn: Callable[..., Any], *, seed: int = 0) -> GatherPagesCheck:
    """Run the paged-cache reading properties on ``fn`` and report which hold.

    Parameters
    ----------
    fn : callable
        ``fn(key_blocks, block_table, length) -> keys``; see the calling convention in
        this module's description.
    seed : int, default 0
        Seed of the random pools and keys.

    Returns
    -------
    GatherPagesCheck
        ``.passed``, ``.failed`` (names), ``.results`` (one per property of
        :data:`PROPERTIES`) and a printable summary, which names the failing property
        and the small input, never the expected keys.

    Raises
    ------
    TypeError, ValueError
        Bad arguments to ``check_gather_pages`` itself (``fn`` not callable, a negative
        seed). Whatever ``fn`` raises or returns is reported as the failure of the
        property that called it, not raised.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a function {SIGNATURE}, got {type(fn).__name__}")
    seed = check_size("seed", seed, minimum=0)
    report = run_properties("check_gather_pages", fn, PROPERTIES, _Runner(fn, seed))
    return GatherPagesCheck(report.function, report.results)


class _Runner:
    """Builds pools and tables and runs the properties (one method per property)."""

    def __init__(self, fn: Callable[..., Any], seed: int) -> None:
        self.fn, self.seed = fn, seed

    # --- inputs and calls ------------------------------------------------------------

    def pool(self, table: tuple[int, ...], length: int, *, block_size: int, d: int = 3,
             num_blocks: int | None = None, dtype: Any = np.float64, offset: int = 0):
        """A pool of noise (numbers left by earlier sequences) holding one sequence's
        ``length`` keys in the blocks of ``table``; returns ``(key_blocks, keys)``."""
        rng = np.random.default_rng([self.seed, offset, block_size, length])
        n = num_blocks if num_blocks is not None else max(table, default=-1) + 2
        blocks = (rng.standard_normal((n, block_size, d)) * 100).astype(dtype)
        keys = rng.standard_normal((length, d)).astype(dtype)
        for j in range(length):
            blocks[table[j // block_size], j % block_size] = keys[j]
        return blocks, keys

    @staticmethod
    def describe(blocks: np.ndarray, table: tuple[int, ...], length: int,
                 note: str = "") -> str:
        n, bs, d = blocks.shape
        text = (f"key_blocks of shape ({n}, {bs}, {d})"
                + ("" if blocks.dtype == np.float64 else f" and dtype {blocks.dtype}")
                + f", block_table={table}, length={length}")
        return text + (f" ({note})" if note else "")

    def gather(self, blocks: np.ndarray, table: tuple[int, ...], length: int,
               where: str) -> np.ndarray:
        out = call(self.fn, (blocks.copy(), tuple(table), length), where=where,
                   signature=SIGNATURE)
        return expect_array(out, name="keys", shape=(length, blocks.shape[-1]),
                            dtype=str(blocks.dtype), where=where)

    def same(self, got: np.ndarray, keys: np.ndarray, where: str, what: str = "") -> None:
        bad = np.flatnonzero((got != keys).any(axis=-1))
        if bad.size:
            raise Failure(f"row {int(bad[0])} is not the key stored for position "
                          f"{int(bad[0])}{what}", where)

    def case(self, table: tuple[int, ...], length: int, block_size: int, *,
             note: str = "", **kw: Any) -> None:
        blocks, keys = self.pool(table, length, block_size=block_size, **kw)
        where = self.describe(blocks, table, length, note)
        self.same(self.gather(blocks, table, length, where), keys, where)

    # --- the properties ----------------------------------------------------------------

    def output_shape(self):
        for table, length in (((0, 1), 8), ((0, 1), 6)):
            blocks, _ = self.pool(table, length, block_size=4)
            self.gather(blocks, table, length, self.describe(blocks, table, length))

    def matches_contiguous_cache(self):
        from ..paged import BlockPool, PagedKVCache

        rng = np.random.default_rng([self.seed, 1])
        for length in (4, 8, 11):
            pool = BlockPool(4, 4, (), 3)
            cache = PagedKVCache(pool)
            keys = rng.standard_normal((length, 3))
            for start in range(0, length, 3):                # appended a few at a time
                part = keys[start:start + 3]
                cache.append(part, part)
            blocks = np.array(pool._k)
            where = self.describe(blocks, cache.block_table, length,
                                  "filled by PagedKVCache.append")
            self.same(self.gather(blocks, cache.block_table, length, where), keys, where)

    def partial_last_block(self):
        for length in (5, 6, 7):
            self.case((2, 0), length, 4, note="the last block partly filled")

    def empty_sequence(self):
        for table in ((), (3,)):
            blocks, keys = self.pool(table, 0, block_size=4, num_blocks=4)
            where = self.describe(blocks, table, 0)
            self.same(self.gather(blocks, table, 0, where), keys, where)

    def block_sizes(self):
        for block_size in (1, 2, 3, 5, 16):
            for length in (2 * block_size - 1, 2 * block_size, 2 * block_size + 1):
                n_used = -(-length // block_size)
                table = tuple(range(n_used))
                self.case(table, length, block_size, offset=2)

    def blocks_out_of_order(self):
        for table, length, block_size in (((5, 2, 7), 10, 4), ((1, 0), 4, 2),
                                          ((3, 1, 2, 0), 4, 1)):
            self.case(table, length, block_size, note="blocks out of order", offset=3)

    def shared_pool(self):
        rng = np.random.default_rng([self.seed, 4])
        block_size, d = 3, 2
        tables = ((0, 3, 6), (1, 4), (2, 5, 7))
        lengths = (8, 6, 7)
        blocks = rng.standard_normal((9, block_size, d)) * 100
        keys = [rng.standard_normal((n, d)) for n in lengths]
        for table, seq in zip(tables, keys):
            for j in range(len(seq)):
                blocks[table[j // block_size], j % block_size] = seq[j]
        for s, (table, length) in enumerate(zip(tables, lengths)):
            where = self.describe(blocks, table, length,
                                  f"sequence {s} of 3 sharing the pool")
            self.same(self.gather(blocks, table, length, where), keys[s], where)

    def float32(self):
        for table, length in (((1, 0), 7), ((2,), 3)):
            self.case(table, length, 4, dtype=np.float32, offset=5)

    def inputs_unchanged(self):
        table, length = (2, 0, 1), 9
        blocks, _ = self.pool(table, length, block_size=4, offset=6)
        given = blocks.copy()
        where = self.describe(blocks, table, length)
        call(self.fn, (given, table, length), where=where, signature=SIGNATURE)
        if not np.array_equal(given, blocks):
            raise Failure("key_blocks changed during the call", where)
