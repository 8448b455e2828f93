"""Measuring time and memory the same way everywhere: the benchmark and the chapters.

Figures in this course are ratios measured side by side in one process (the absolute numbers
depend on the machine; the ratios much less), each the median of several repetitions after a
warm-up, so that one slow run (a page fault, another process) does not move the result.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
import tracemalloc
from typing import Any, Callable


def _sync(device: Any) -> None:
    # CUDA kernels run asynchronously; a timer read without synchronising measures the launch.
    torch = sys.modules.get("torch")
    if torch is not None and device is not None and str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def median_time(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1,
                device: Any = None) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs.

    Pass ``device`` (e.g. ``"cuda"``) to synchronise before reading the clock.
    """
    if repeats < 1:
        raise ValueError(f"repeats: expected a positive integer, got {repeats}")
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def side_by_side(fns: dict[str, Callable[[], Any]], *, repeats: int = 5,
                 device: Any = None) -> dict[str, float]:
    """Median seconds of each function, the functions run alternately ``repeats`` times.

    Each function is called once first as a warm-up (allocations, lazy initialisation,
    caches). ``repeats`` must be at least 5, the course's rule for a reported figure.
    """
    if repeats < 5:
        raise ValueError(f"repeats: expected at least 5 repetitions, got {repeats}")
    for fn in fns.values():
        median_time(fn, repeats=1, warmup=0, device=device)          # warm-up
    rounds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            rounds[name].append(median_time(fn, repeats=1, warmup=0, device=device))
    return {name: statistics.median(ts) for name, ts in rounds.items()}


def peak_memory_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes allocated through Python's allocator while ``fn()`` runs (tracemalloc).

    NumPy reports its array buffers to tracemalloc, so this measures the temporaries of a
    NumPy computation (e.g. an N x N score matrix); the result of ``fn`` is kept alive until
    the measurement ends, so it is counted too.
    """
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    del result
    if not was_tracing:
        tracemalloc.stop()
    return peak - base


def machine_description() -> dict[str, str]:
    """CPU model, core count and library versions, to print beside a table of measurements."""
    import os

    import numpy as np

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": str(os.cpu_count()), "python": platform.python_version(),
            "numpy": np.__version__}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch threads"] = str(torch.get_num_threads())
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info
