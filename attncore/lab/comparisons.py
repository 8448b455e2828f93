"""Side-by-side measurements of two attention implementations, shared by the chapters and bench/.

Each returns ratios measured in one process (see :mod:`attncore.lab.profiling`), so a chapter's
figure and the benchmark's table come from the same code.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..backward import attention_backward, tiled_attention_backward
from .profiling import (
    check_rounds,
    one_torch_thread,
    peak_memory_bytes,
    ratio_spread,
    rotated_rounds,
    side_by_side,
)
from ..tiled import tiled_attention

D_K = 64


def random_qkv(shape: tuple[int, ...], dtype: Any = np.float32, seed: int = 0):
    """Three seeded standard-normal arrays ``q, k, v`` of ``shape`` (drawn in float64, cast)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape, dtype=np.float64).astype(dtype) for _ in range(3))


def naive_vs_tiled(n: int, *, block_size: int = 128, d_k: int = D_K, repeats: int = 5,
                   dtype: Any = np.float32, measure_time: bool = True,
                   blas_threads: int | None = None) -> dict[str, float]:
    """Peak memory and time of the reference against :func:`tiled_attention`, one head.

    ``q, k, v`` have shape ``(n, d_k)``. Memory is the peak of one call under tracemalloc,
    inputs excluded, output included. With ``measure_time=False`` only memory is measured.
    ``blas_threads`` (e.g. 1) limits the BLAS behind NumPy's products to that many threads
    while timing (threadpoolctl), so that on a busy machine threads waiting for each other do
    not decide the ratio; the default leaves BLAS as it is.
    """
    q, k, v = random_qkv((n, d_k), dtype)
    naive = lambda: scaled_dot_product_attention(q, k, v)           # noqa: E731
    tiled = lambda: tiled_attention(q, k, v, block_size=block_size)  # noqa: E731
    result = {"n": n, "block_size": block_size, "naive_bytes": peak_memory_bytes(naive),
              "tiled_bytes": peak_memory_bytes(tiled)}
    result["memory_ratio"] = result["tiled_bytes"] / result["naive_bytes"]
    if measure_time:
        if blas_threads is None:
            limit = contextlib.nullcontext()
        else:
            if isinstance(blas_threads, bool) or not isinstance(blas_threads, int) \
                    or blas_threads < 1:
                raise ValueError(f"blas_threads: expected a positive integer or None, "
                                 f"got {blas_threads!r}")
            from threadpoolctl import threadpool_limits

            limit = threadpool_limits(limits=blas_threads, user_api="blas")
        with limit:
            t = side_by_side({"naive": naive, "tiled": tiled}, repeats=repeats)
        result.update(naive_s=t["naive"], tiled_s=t["tiled"], time_ratio=t["tiled"] / t["naive"])
    return result


def reference_vs_tiled_backward(n: int, *, block_size: int = 128, d_k: int = D_K,
                                dtype: Any = np.float32) -> dict[str, float]:
    """Peak memory of the two backward passes of attention, one head, measured alike.

    ``q, k, v`` and the output gradient ``d_out`` have shape ``(n, d_k)``.
    :func:`~attncore.attention_backward` forms the ``(n, n)`` weights;
    :func:`~attncore.tiled_attention_backward` gets the output and row log-sum-exp of
    ``tiled_attention(..., return_lse=True)``, computed before the measurement (the forward
    pass's results, kept for the backward pass, as a training step keeps them). Each figure
    is the peak of one call under tracemalloc, inputs excluded, the three gradients
    included. Returns ``n``, ``block_size``, ``reference_bytes``, ``tiled_bytes`` and
    ``memory_ratio`` (tiled / reference).
    """
    q, k, v = random_qkv((n, d_k), dtype)
    d_out = random_qkv((n, d_k), dtype, seed=1)[0]
    out, lse = tiled_attention(q, k, v, block_size=block_size, return_lse=True)
    reference = peak_memory_bytes(lambda: attention_backward(q, k, v, d_out))
    tiled = peak_memory_bytes(lambda: tiled_attention_backward(
        q, k, v, d_out, out=out, lse=lse, block_size=block_size))
    return {"n": n, "block_size": block_size, "reference_bytes": reference,
            "tiled_bytes": tiled, "memory_ratio": tiled / reference}


def head_width_cost(n: int = 256, d_model: int = 256, widths: tuple[int, ...] = (1, 4, 16, 64),
                    *, rounds: int = 9, dtype: Any = None) -> list[dict[str, float]]:
    """Time of all heads' score products ``Q_h K_h^T`` against one head as wide as the model.

    ``d_model / w`` heads of width ``w`` do exactly the flops of one head of width
    ``d_model`` (``2 n^2 d_model``), but each product has inner dimension ``w`` and writes its
    own ``n x n`` scores: the narrower the heads, the fewer flops per number written. For each
    ``w`` in ``widths`` (each must divide ``d_model``) this times ``q @ k^T`` on torch tensors
    ``(d_model / w, n, w)``, written into a preallocated ``(d_model / w, n, n)`` output,
    against the same call with one head of width ``d_model``, on one CPU thread, in
    ``rounds`` rounds (at least 9) whose order rotates; each round gives the ratio of the
    two times.

    Returns one dict per width: ``width``, ``heads``, ``ratio`` (median of the per-round
    ratios ``time(w) / time(d_model)``), ``ratio_q1`` and ``ratio_q3`` (their quartiles), and
    ``throughput`` = ``1 / ratio``: the fraction of the wide product's flop rate that the
    narrow heads reach.
    """
    import torch

    check_rounds(rounds)
    for w in widths:
        if isinstance(w, bool) or not isinstance(w, int) or w < 1 or d_model % w:
            raise ValueError(f"widths: expected positive divisors of d_model={d_model}, "
                             f"got {w!r}")
    dtype = torch.float32 if dtype is None else dtype
    gen = torch.Generator().manual_seed(0)

    def product(w: int):
        q = torch.randn(d_model // w, n, w, generator=gen, dtype=dtype)
        k_t = torch.randn(d_model // w, w, n, generator=gen, dtype=dtype)
        # a preallocated output: the product is timed, not the page faults of a fresh buffer
        scores = torch.empty(d_model // w, n, n, dtype=dtype)
        return lambda: torch.matmul(q, k_t, out=scores)

    fns = {w: product(w) for w in (*widths, d_model)}
    with one_torch_thread():      # the kernel's own efficiency, not the threads' balance
        # (the warm-up call also touches the output's pages)
        times = rotated_rounds(fns, rounds=rounds)
    out = []
    for w in widths:
        s = ratio_spread(times, w, d_model)
        out.append({"width": w, "heads": d_model // w, "ratio": s["median"],
                    "ratio_q1": s["q1"], "ratio_q3": s["q3"], "throughput": 1.0 / s["median"]})
    return out
