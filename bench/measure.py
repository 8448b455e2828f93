"""The measurements behind the benchmark tables, one function per figure.

Every figure is a *ratio* of two computations timed side by side in one process: the two are
run alternately, round after round, after one warm-up call each, and each gets the median of
its rounds (so that a burst of load from another process hits both, not one). Memory is the
peak of Python's allocator during one call (``tracemalloc``, which sees NumPy's buffers).

The measuring primitives live in :mod:`attncore.lab.profiling` (``side_by_side``) and
:mod:`attncore.lab.comparisons` (``naive_vs_tiled``, ``random_qkv``), where the chapters import them
too, so the book's figures and the benchmark's come from the same code.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from attncore.attention import scaled_dot_product_attention
from attncore.lab.comparisons import naive_vs_tiled, random_qkv  # noqa: F401  (figure 3)
from attncore.lab.profiling import machine_description, median_time, side_by_side

HEADS, D_K = 8, 64


# --- figure 1: NumPy attention against its own two matrix products -------------------------

def numpy_vs_matmuls(n: int, *, repeats: int = 5, heads: int = HEADS,
                     d_k: int = D_K) -> dict[str, float]:
    """attncore's NumPy attention against ``Q K^T`` and ``A V`` alone, float32, batch 1."""
    q, k, v = random_qkv((1, heads, n, d_k))
    kt = np.swapaxes(k, -1, -2)

    def matmuls():
        scores = q @ kt
        return scores @ v

    t = side_by_side({"attention": lambda: scaled_dot_product_attention(q, k, v),
                      "matmuls": matmuls}, repeats=repeats)
    return {"n": n, "attention_s": t["attention"], "matmuls_s": t["matmuls"],
            "ratio": t["attention"] / t["matmuls"]}


def numpy_breakdown(n: int, *, repeats: int = 5, heads: int = HEADS,
                    d_k: int = D_K) -> dict[str, float]:
    """Seconds of each step of the NumPy attention, timed alone (median of ``repeats``).

    The steps are those of ``attncore.attention._attention_numpy``: the two products, and the
    softmax's passes over the ``(heads, n, n)`` score matrix. The elementwise passes write
    into a preallocated buffer (not in place) so that repeating them does not change the data.
    """
    q, k, v = random_qkv((1, heads, n, d_k))
    qs = q * np.float32(1 / np.sqrt(d_k))
    kt = np.swapaxes(k, -1, -2)
    scores = qs @ kt
    row_max = scores.max(axis=-1, keepdims=True)
    shifted = scores - row_max
    weights = np.exp(shifted)
    buf = np.empty_like(scores)
    total = weights.sum(axis=-1, keepdims=True)
    out = weights @ v
    steps = {
        "Q K^T": lambda: qs @ kt,
        "row max": lambda: scores.max(axis=-1, keepdims=True),
        "subtract max": lambda: np.subtract(scores, row_max, out=buf),
        "exp": lambda: np.exp(shifted, out=buf),
        "row sum": lambda: weights.sum(axis=-1, keepdims=True),
        "A V": lambda: weights @ v,
        "divide output": lambda: np.divide(out, total, out=np.empty_like(out)),
    }
    return {name: median_time(fn, repeats=repeats, warmup=1) for name, fn in steps.items()}


# --- figure 2: attncore's torch backend against PyTorch's fused attention ------------------

def torch_vs_sdpa(n: int, *, repeats: int = 5, heads: int = HEADS, d_k: int = D_K,
                  device: str = "cpu", dtype: Any = None) -> dict[str, float]:
    """attncore's torch backend against ``F.scaled_dot_product_attention`` on the same tensors.

    Also times PyTorch's own two matrix products and attncore's input checks alone, to show
    where a difference comes from. Returns seconds, ratios and achieved TFLOP/s (the two
    products count ``4 * heads * n^2 * d_k`` floating-point operations).
    """
    import torch
    import torch.nn.functional as F

    from attncore.attention import check_attention_inputs

    dtype = torch.float32 if dtype is None else dtype
    q, k, v = (torch.from_numpy(x).to(device=device, dtype=dtype)
               for x in random_qkv((1, heads, n, d_k)))
    sync = device if str(device).startswith("cuda") else None
    with torch.no_grad():
        t = side_by_side({
            "attncore": lambda: scaled_dot_product_attention(q, k, v),
            "F.sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
            "matmuls": lambda: (q @ k.transpose(-1, -2)) @ v,
            "checks": lambda: check_attention_inputs(q, k, v),
        }, repeats=repeats, device=sync)
    flop = 4 * heads * n * n * d_k
    return {"n": n, "dtype": str(dtype).replace("torch.", ""), "attncore_s": t["attncore"],
            "sdpa_s": t["F.sdpa"], "matmuls_s": t["matmuls"], "checks_s": t["checks"],
            "ratio": t["attncore"] / t["F.sdpa"], "sdpa_over_matmuls": t["F.sdpa"] / t["matmuls"],
            "attncore_tflops": flop / t["attncore"] / 1e12, "sdpa_tflops": flop / t["F.sdpa"] / 1e12}


# --- figure 3: tiled against naive attention, memory and time ------------------------------

# --- the machine -----------------------------------------------------------------------------

def blas_description() -> str:
    """The BLAS NumPy calls, with the kernel (architecture) it selected at run time."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        found = [f"{i.get('internal_api')} {i.get('version')}, kernel {i.get('architecture')}, "
                 f"{i.get('num_threads')} threads" for i in threadpool_info()
                 if i.get("user_api") == "blas"]
        if found:
            return "; ".join(found) + " (threadpoolctl)"
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas['version']} (build information; install threadpoolctl " \
               f"to see the kernel chosen at run time)"
    except (AttributeError, KeyError):
        return "unknown"


def machine() -> dict[str, str]:
    """:func:`attncore.lab.profiling.machine_description` plus what moves BLAS timings."""
    info = machine_description()
    info["BLAS"] = blas_description()
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                "OMP_NUM_THREADS"):
        info[var] = os.environ.get(var, "(not set)")
    info["load average (1 min) at start"] = f"{os.getloadavg()[0]:.2f}"
    return info


# --- GPUs -------------------------------------------------------------------------------------

# Dense float16/bfloat16 tensor-core peaks (TFLOP/s, no sparsity) from the vendors' data sheets.
# The first name contained in the device name wins, so specific names come first.
GPU_PEAK_TFLOPS = [
    ("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("GH200", 989.4),
    ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10", 125.0), ("V100", 125.0),
    ("T4", 65.0),
]


def gpu_peak_tflops(name: str) -> float | None:
    for key, peak in GPU_PEAK_TFLOPS:
        if key in name:
            return peak
    return None
