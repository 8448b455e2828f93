"""Side-by-side measurements of two attention implementations, shared by the chapters and bench/.

Each returns ratios measured in one process (see :mod:`attncore.lab.profiling`), so a chapter's
figure and the benchmark's table come from the same code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from .profiling import peak_memory_bytes, side_by_side
from ..tiled import tiled_attention

D_K = 64


def random_qkv(shape: tuple[int, ...], dtype: Any = np.float32, seed: int = 0):
    """Three seeded standard-normal arrays ``q, k, v`` of ``shape`` (drawn in float64, cast)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape, dtype=np.float64).astype(dtype) for _ in range(3))


def naive_vs_tiled(n: int, *, block_size: int = 128, d_k: int = D_K, repeats: int = 5,
                   dtype: Any = np.float32, measure_time: bool = True) -> dict[str, float]:
    """Peak memory and time of the reference against :func:`tiled_attention`, one head.

    ``q, k, v`` have shape ``(n, d_k)``. Memory is the peak of one call under tracemalloc,
    inputs excluded, output included. With ``measure_time=False`` only memory is measured.
    """
    q, k, v = random_qkv((n, d_k), dtype)
    naive = lambda: scaled_dot_product_attention(q, k, v)           # noqa: E731
    tiled = lambda: tiled_attention(q, k, v, block_size=block_size)  # noqa: E731
    result = {"n": n, "block_size": block_size, "naive_bytes": peak_memory_bytes(naive),
              "tiled_bytes": peak_memory_bytes(tiled)}
    result["memory_ratio"] = result["tiled_bytes"] / result["naive_bytes"]
    if measure_time:
        t = side_by_side({"naive": naive, "tiled": tiled}, repeats=repeats)
        result.update(naive_s=t["naive"], tiled_s=t["tiled"], time_ratio=t["tiled"] / t["naive"])
    return result
