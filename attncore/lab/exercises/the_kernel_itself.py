"""Checkers for the exercises of chapter 15, the kernel itself (flash attention in Triton).

The kernel exercise is checked by running the reader's kernel (in Triton's interpreter where
no GPU is present) on several shapes and comparing with ``torch.logsumexp``: a last tile
that is partial, rows of large numbers (where an unshifted exponential overflows), one row
alone. The counting exercises walk the loops of :mod:`attncore.triton`'s kernels: the
tile pairs the causal forward kernel visits, and the bytes the two backward kernels load and
store. Triton is imported only when a check runs.
"""

from __future__ import annotations

import math
import warnings

from . import Verdict, exercise, real_answer

# ex-kernel-row-lse: (rows, columns, scale of the entries) of the matrices it is run on
LSE_CASES = ((5, 100, 1.0), (64, 33, 1.0), (1, 7, 1.0), (37, 130, 100.0))
LSE_BLOCKS = (16, 32)            # BLOCK_R, BLOCK_C the checker launches with
LSE_TOLERANCE = 1e-4

# ex-kernel-causal-tiles: one head, n queries and keys, the tile sizes
CAUSAL = dict(n=1000, block_m=64, block_n=32)

# ex-kernel-backward-traffic: one head, no mask, float16 inputs and gradients, float32
# L and D
BACKWARD = dict(n=4096, d=64, block_m=64, block_n=64, input_bytes=2, row_bytes=4)


@exercise("ex-kernel-row-lse")
def row_lse(kernel) -> Verdict:
    """A Triton kernel ``kernel(X, LSE, n_rows, n_cols, BLOCK_R, BLOCK_C)``: the log-sum-exp
    of each row of the contiguous float32 matrix at ``X``, written to ``LSE``."""
    import torch
    from ... import triton as attn_triton

    if not hasattr(kernel, "run") and not hasattr(kernel, "fn"):
        raise TypeError("my_row_lse_kernel should be a kernel decorated with @triton.jit, "
                        "got "
                        f"{type(kernel).__name__}")
    device = "cpu" if attn_triton.interpreting() else "cuda"
    gen = torch.Generator().manual_seed(14)
    block_r, block_c = LSE_BLOCKS
    details = []
    for rows, cols, size in LSE_CASES:
        x = (size * torch.randn(rows, cols, generator=gen)).to(device)
        out = torch.full((rows,), float("nan"), device=device)
        try:
            # (rows past n_rows may compute NaN that is never stored: not a warning)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                kernel[(attn_triton.triton.cdiv(rows, block_r),)](
                    x, out, rows, cols, BLOCK_R=block_r, BLOCK_C=block_c)
        except Exception as err:      # the reader's kernel failed: say how, not a traceback
            return Verdict(False, f"the kernel stopped on a {rows} x {cols} matrix: "
                                  f"{type(err).__name__}: {str(err)[:200]}")
        want = torch.logsumexp(x.double(), dim=1)
        err = float((out.double() - want).abs().max())
        ok = math.isfinite(err) and err <= LSE_TOLERANCE * max(1.0, float(want.abs().max()))
        details.append(f"{rows} x {cols} matrix, entries of size ~{size:g}: "
                       f"{'right' if ok else 'not yet'}")
    if all(d.endswith("right") for d in details):
        return Verdict(True, "every row's log-sum-exp matches torch.logsumexp.",
                       tuple(details))
    return Verdict(False, "some rows differ from torch.logsumexp. Is the last tile of "
                          "columns masked (to -inf, not 0)? Is the running maximum "
                          "subtracted before the exponential?", tuple(details))


def causal_tile_pairs(n: int, block_m: int, block_n: int) -> int:
    """(query tile, key tile) pairs the causal forward kernel visits: program ``p`` walks
    the key tiles that start below ``min((p + 1) * block_m, n)``."""
    total = 0
    for start_m in range(0, n, block_m):
        end = min(start_m + block_m, n)
        total += len(range(0, end, block_n))
    return total


@exercise("ex-kernel-causal-tiles")
def causal_tiles(pairs) -> Verdict:
    """The number of tile pairs the causal forward kernel visits for :data:`CAUSAL`."""
    pairs = real_answer("my_pairs", pairs)
    want = causal_tile_pairs(**CAUSAL)
    if pairs == want:
        return Verdict(True, "program p walks the key tiles below (p + 1) * BLOCK_M, and "
                             "the last program is cut off at n.")
    full = len(range(0, CAUSAL["n"], CAUSAL["block_m"])) * \
        len(range(0, CAUSAL["n"], CAUSAL["block_n"]))
    if pairs == full:
        return Verdict(False, "that is every pair: a causal program stops early.")
    return Verdict(False, "count, for each program, the key tiles its loop starts "
                          "(range(0, end, BLOCK_N)), and mind the last program.")


def backward_traffic(n: int, d: int, block_m: int, block_n: int, input_bytes: int,
                     row_bytes: int) -> tuple[int, int]:
    """Bytes the two backward kernels of :mod:`attncore.triton` load and store for one head
    of ``n`` queries and keys (no mask, ``n`` a multiple of both tiles), every load counted
    each time a program executes it: ``(dK/dV kernel, dQ kernel)``.

    A dK/dV program loads its key and value tiles, then per query tile ``q``, ``dO``, ``L``
    and ``D``, and stores its ``dK`` and ``dV`` tiles; a dQ program loads its ``q``, ``dO``,
    ``L`` and ``D``, then per key tile ``k`` and ``v``, and stores its ``dQ`` tile.
    """
    tile_m, tile_n = block_m * d * input_bytes, block_n * d * input_bytes
    rows_m = block_m * row_bytes
    dkdv = 2 * tile_n + (n // block_m) * (2 * tile_m + 2 * rows_m) + 2 * tile_n
    dq = 2 * tile_m + 2 * rows_m + (n // block_n) * 2 * tile_n + tile_m
    return (n // block_n) * dkdv, (n // block_m) * dq


@exercise("ex-kernel-backward-traffic")
def backward_bytes(n_bytes) -> Verdict:
    """The bytes both backward kernels read and write for :data:`BACKWARD`."""
    n_bytes = real_answer("my_bytes", n_bytes)
    dkdv, dq = backward_traffic(**BACKWARD)
    if n_bytes == dkdv + dq:
        return Verdict(True, "each kernel re-reads one side of the attention once per tile "
                             "of the other side, as the forward kernel re-reads K and V.")
    if n_bytes in (dkdv, dq):
        return Verdict(False, "that is one of the two kernels; count the other one too.")
    no_rows = dict(BACKWARD, row_bytes=0)
    if n_bytes == sum(backward_traffic(**no_rows)):
        return Verdict(False, "the kernels also load L and D, 4 bytes a number, in every "
                              "pass over a tile of queries.")
    return Verdict(False, "for each kernel: the tiles a program loads once, plus those it "
                          "loads in each pass of its loop, plus what it stores; then times "
                          "the number of programs.")
