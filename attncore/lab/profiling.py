"""Measuring time and memory the same way everywhere: the benchmark and the chapters.

Figures in this course are ratios measured side by side in one process (the absolute numbers
depend on the machine; the ratios much less), each the median of several repetitions after a
warm-up, so that one slow run (a page fault, another process) does not move the result.
"""

from __future__ import annotations

import math
import platform
import statistics
import sys
import time
import tracemalloc
from contextlib import contextmanager
from typing import Any, Callable, Iterator


def _sync(device: Any) -> None:
    # CUDA kernels run asynchronously; a timer read without synchronising measures the launch.
    torch = sys.modules.get("torch")
    if torch is not None and device is not None and str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch on one CPU thread inside the ``with`` block, then restore the count.

    Timings then measure a kernel's own efficiency, not how threads share a busy machine,
    and training's sums are done in one fixed order.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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


def check_rounds(rounds: Any) -> int:
    """``rounds`` if it is an integer of at least 9 (the course's rule for a reported
    ratio), else ``ValueError``."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 9:
        raise ValueError(f"rounds: expected at least 9 rotated rounds, got {rounds!r}")
    return rounds


def rotated_rounds(fns: dict[str, Callable[[], Any]], *, rounds: int = 9,
                   min_sample_s: float = 0.0, device: Any = None) -> dict[str, list[float]]:
    """Seconds per call of each function, measured in ``rounds`` rounds whose order rotates.

    Each function is called once first (a warm-up: allocations, lazy initialisation,
    caches). Round ``r`` then times every function once, starting with the ``r``-th (modulo
    their number): for two functions the order is AB, BA, AB, ..., so a drift in the
    machine's speed favours neither. A ratio of two functions is taken **per round** (see
    :func:`ratio_spread`), so a burst of load that slows one round slows both sides of its
    ratio. ``min_sample_s`` > 0 repeats a fast call within each sample until the sample
    lasts about that long (the count is fixed per function from its warm-up), so that the
    clock's resolution and the timer's own cost do not show; the sample is divided by the
    count. ``rounds`` must be at least 9, the course's rule for a reported ratio.
    Pass ``device`` (e.g. ``"cuda"``) to synchronise before each reading of the clock.
    """
    check_rounds(rounds)
    counts = {}
    for name, fn in fns.items():
        first = median_time(fn, repeats=1, warmup=0, device=device)
        counts[name] = max(1, math.ceil(min_sample_s / first)) if first > 0 else 1
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            fn, number = fns[name], counts[name]
            _sync(device)
            start = time.perf_counter()
            for _ in range(number):
                fn()
            _sync(device)
            times[name].append((time.perf_counter() - start) / number)
    return times


def quartiles(values: list[float]) -> dict[str, float]:
    """Median and quartiles (``median``, ``q1``, ``q3``) of at least two numbers."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median, "q1": q1, "q3": q3}


def ratio_spread(times: dict[str, list[float]], a: str, b: str) -> dict[str, float]:
    """The per-round ratios ``times[a] / times[b]`` of :func:`rotated_rounds`: their
    ``median``, quartiles ``q1`` and ``q3``, and the number of ``rounds``."""
    ratios = [x / y for x, y in zip(times[a], times[b])]
    return {**quartiles(ratios), "rounds": len(ratios)}


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
