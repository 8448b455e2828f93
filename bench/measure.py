"""The measurements behind the benchmark tables, one function per figure.

Every figure is a *ratio* of two computations timed side by side in one process, in at least
nine rounds whose order rotates (:func:`attncore.lab.profiling.rotated_rounds`); each round
gives one ratio, and a figure is the median of those per-round ratios with their quartiles
(:func:`attncore.lab.profiling.ratio_spread`). The tables against a reference time each
computation with the reference alone, pair by pair (:func:`_paired_spreads`), so that each
side of a ratio follows the other as often as itself. A burst of load from another process then slows
both sides of the ratios it touches, and the quartiles show how much it moved them. No run is
picked from several. Memory is the peak of Python's allocator during one call
(``tracemalloc``, which sees NumPy's buffers).

Unless a figure says otherwise it runs on **one thread** (BLAS, PyTorch's pool), so that a
product's threads waiting for a core that another process holds do not decide the ratio; the
tables at all cores show what threads change. The load on the machine is sampled while each
figure runs (:class:`LoadMonitor`) and printed beside it.

The reference products of a ratio write into **preallocated** outputs: a fresh ``(8, 2048,
2048)`` float32 array is 128 MiB that the kernel maps and zero-fills page by page on first
touch (large allocations come straight from the operating system, without transparent huge
pages), which would count the page faults as the products' time. The tables show that cost
separately ("fresh output").
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np

from attncore._backend import check_attention_inputs
from attncore._guard import attention_guard
from attncore.attention import scaled_dot_product_attention
from attncore.lab.comparisons import random_qkv
from attncore.lab.profiling import (
    machine_description,
    peak_memory_bytes,
    quartiles,
    ratio_spread,
    rotated_rounds,
)
from attncore.tiled import tiled_attention

HEADS, D_K = 8, 64
ROUNDS = 9
# A timed sample of a fast call repeats it until it lasts this long (seconds).
MIN_SAMPLE_S = 0.02


# --- the load on the machine while a figure runs ----------------------------------------------

def _busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal: all but idle and iowait are busy
    ticks = [int(x) for x in fields[:8]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


class LoadMonitor:
    """Samples the machine's load while figures run.

    Two numbers per figure: the 1-minute load average (``os.getloadavg``) at its start and
    end and its largest sample in between (a thread reads it every ``interval`` seconds),
    and the cores that **other** processes kept busy on average: the machine's busy CPU time
    from ``/proc/stat`` minus this process's own, over the wall time.
    """

    def __init__(self, interval: float = 2.0):
        self.interval = interval
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._samples.append(os.getloadavg()[0])

    def __enter__(self) -> "LoadMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    @contextlib.contextmanager
    def figure(self, into: dict) -> Iterator[None]:
        """Record the load during the ``with`` block into ``into["load"]``."""
        start = (time.perf_counter(), time.process_time(), _busy_seconds(), os.getloadavg()[0],
                 len(self._samples))
        yield
        wall = time.perf_counter() - start[0]
        own = time.process_time() - start[1]
        busy = _busy_seconds()
        end_load = os.getloadavg()[0]
        seen = self._samples[start[4]:] + [start[3], end_load]
        into["load"] = {"loadavg_start": start[3], "loadavg_end": end_load,
                        "loadavg_max": max(seen), "wall_s": wall,
                        "others_cores": None if busy is None or start[2] is None else
                        max(0.0, (busy - start[2] - own) / wall)}


def load_text(load: dict) -> str:
    """One line for a table: the load average and the cores other processes used."""
    text = (f"load average (1 min) {load['loadavg_start']:.2f} at the start, "
            f"{load['loadavg_end']:.2f} at the end, at most {load['loadavg_max']:.2f}")
    if load.get("others_cores") is not None:
        text += (f"; other processes kept {load['others_cores']:.2f} of the "
                 f"{os.cpu_count()} cores busy on average")
    return text + f" ({load['wall_s']:.0f} s)"


# --- threads ----------------------------------------------------------------------------------

@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """Run BLAS (threadpoolctl) and PyTorch's intra-op pool on ``n`` threads (None: as is)."""
    if n is None:
        yield
        return
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(before)


# --- helpers ----------------------------------------------------------------------------------

def _spreads(times: dict[str, list[float]], against: str) -> dict[str, dict[str, float]]:
    """Every function's per-round ratio to ``against``, and its own seconds (quartiles)."""
    return {name: {**ratio_spread(times, name, against),
                   "seconds": quartiles(times[name])} for name in times}


def _paired_spreads(fns: dict[str, Callable[[], Any]], against: str, *, rounds: int,
                    device: Any = None) -> dict[str, dict[str, float]]:
    """Each function's ratio to ``against``, the two timed in their own rotated rounds.

    Timed pair by pair, the two sides of a ratio alternate (AB, BA, AB, ...), so each
    follows the other as often as itself. Timed all together in one rotation, a function
    always follows the same neighbour and always pays for what it left behind (a freed
    score matrix to fault in again, a cache full of other data), which biases its ratio.
    ``against`` gets ratio 1 and the seconds of all its samples.
    """
    reference = fns[against]
    out: dict[str, dict[str, float]] = {}
    own: list[float] = []
    for name, fn in fns.items():
        if name == against:
            continue
        times = rotated_rounds({name: fn, against: reference}, rounds=rounds,
                               min_sample_s=MIN_SAMPLE_S, device=device)
        out[name] = {**ratio_spread(times, name, against), "seconds": quartiles(times[name])}
        own += times[against]
    out[against] = {"median": 1.0, "q1": 1.0, "q3": 1.0, "rounds": rounds,
                    "seconds": quartiles(own)}
    return out


def bare_numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Softmax attention written directly in NumPy, in place, with no checks at all.

    The same arithmetic as attncore's reference: scale q, one score matrix, softmax in
    place, divide the ``n x d_v`` output instead of the ``n x n`` weights.
    """
    s = (q * np.float32(1.0 / math.sqrt(q.shape[-1]))) @ np.swapaxes(k, -1, -2)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    total = s.sum(axis=-1, keepdims=True)
    out = s @ v
    out /= total
    return out


def numpy_products(q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                   fresh: bool = False) -> Callable[[], np.ndarray]:
    """``(Q K^T) V``: attention's two products alone, into reused outputs unless ``fresh``."""
    kt = np.swapaxes(k, -1, -2)
    if fresh:
        return lambda: (q @ kt) @ v
    scores = np.empty(q.shape[:-1] + (k.shape[-2],), dtype=q.dtype)
    out = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)

    def products():
        np.matmul(q, kt, out=scores)
        return np.matmul(scores, v, out=out)

    return products


def torch_products(q: Any, k: Any, v: Any, *, fresh: bool = False) -> Callable[[], Any]:
    """The same for torch tensors."""
    import torch

    kt = k.transpose(-1, -2)
    if fresh:
        return lambda: (q @ kt) @ v
    scores = q.new_empty(q.shape[:-1] + (k.shape[-2],))
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))

    def products():
        torch.matmul(q, kt, out=scores)
        return torch.matmul(scores, v, out=out)

    return products


def attention_flop(heads: int, n: int, d: int = D_K) -> int:
    """Floating-point operations of attention's two products: ``4 n^2 d`` per head."""
    return 4 * heads * n * n * d


def _torch_qkv(shape: tuple[int, ...], device: str = "cpu", dtype: Any = None):
    import torch

    dtype = torch.float32 if dtype is None else dtype
    return tuple(torch.from_numpy(x).to(device=device, dtype=dtype) for x in random_qkv(shape))


# --- torch backend against PyTorch's fused attention, every input rank -------------------------

def torch_ranks_vs_sdpa(n: int, heads: int = 1, *, rounds: int = ROUNDS, d_k: int = D_K,
                        device: str = "cpu", dtype: Any = None) -> dict:
    """attncore's torch backend on 2-D, 3-D and 4-D inputs against ``F.sdpa`` on 4-D.

    The data are ``heads`` heads of ``(n, d_k)`` queries, keys and values; attncore gets
    them as ``(n, d_k)`` (one head only), ``(heads, n, d_k)`` and ``(1, heads, n, d_k)``
    views, ``F.scaled_dot_product_attention`` as the 4-D view, the layout its fused CPU
    kernel takes (other ranks fall back to its "math" kernel: ``F.sdpa`` on the 2-D and 3-D
    views is timed too). Also timed, each as a ratio to ``F.sdpa`` on 4-D: attncore's
    argument checks (:func:`attncore._backend.check_attention_inputs`) and value guard
    (:func:`attncore._guard.attention_guard`) alone, and PyTorch's two products into
    reused outputs and into fresh ones.
    """
    import torch
    import torch.nn.functional as F

    q4, k4, v4 = _torch_qkv((1, heads, n, d_k), device, dtype)
    views = {4: (q4, k4, v4), 3: tuple(x[0] for x in (q4, k4, v4))}
    if heads == 1:
        views[2] = tuple(x[0, 0] for x in (q4, k4, v4))
    shape = check_attention_inputs(q4, k4, v4)
    fns: dict[str, Callable[[], Any]] = {}
    for rank, (q, k, v) in views.items():
        fns[f"attncore {rank}-D"] = lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v)
        fns[f"F.sdpa {rank}-D"] = lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v)
    fns["argument checks"] = lambda: check_attention_inputs(q4, k4, v4)
    fns["value guard"] = lambda: attention_guard(q4, k4, v4, shape)
    fns["products"] = torch_products(q4, k4, v4)
    fns["products, fresh output"] = torch_products(q4, k4, v4, fresh=True)
    sync = device if str(device).startswith("cuda") else None
    with torch.no_grad():
        vs_sdpa = _paired_spreads(fns, "F.sdpa 4-D", rounds=rounds, device=sync)
    return {"n": n, "heads": heads, "dtype": str(q4.dtype).replace("torch.", ""),
            "ranks": sorted(views), "flop": attention_flop(heads, n, d_k),
            "vs_sdpa": vs_sdpa}


def multihead_unbatched_vs_batched(n: int, *, d_model: int = 512, heads: int = HEADS,
                                   rounds: int = ROUNDS) -> dict:
    """``multi_head_attention`` on torch: an unbatched ``(n, d_model)`` input against the
    same data as a batch of one, ``(1, n, d_model)``, float32."""
    import torch

    from attncore.multihead import init_multihead, multi_head_attention

    params = init_multihead(d_model, heads, dtype=torch.float32, backend="torch")
    x = torch.from_numpy(random_qkv((n, d_model))[0])
    xb = x[None]
    with torch.no_grad():
        times = rotated_rounds({"unbatched": lambda: multi_head_attention(params, x),
                                "batched": lambda: multi_head_attention(params, xb)},
                               rounds=rounds, min_sample_s=MIN_SAMPLE_S)
    return {"n": n, "d_model": d_model, "heads": heads,
            "ratio": ratio_spread(times, "unbatched", "batched")}


# --- NumPy attention against bare NumPy and against its products ------------------------------

def numpy_vs_bare(n: int, heads: int = 1, *, rounds: int = ROUNDS, d_k: int = D_K) -> dict:
    """attncore's NumPy attention against :func:`bare_numpy_attention` on the same arrays,
    with attncore's argument checks and value guard alone, each as a ratio to the bare
    expression. Shape ``(heads, n, d_k)``, float32."""
    q, k, v = random_qkv((heads, n, d_k))
    shape = check_attention_inputs(q, k, v)
    return {"n": n, "heads": heads, "vs_bare": _paired_spreads({
        "attncore": lambda: scaled_dot_product_attention(q, k, v),
        "bare NumPy": lambda: bare_numpy_attention(q, k, v),
        "argument checks": lambda: check_attention_inputs(q, k, v),
        "value guard": lambda: attention_guard(q, k, v, shape),
    }, "bare NumPy", rounds=rounds)}


def numpy_vs_products(n: int, heads: int = HEADS, *, rounds: int = ROUNDS,
                      d_k: int = D_K) -> dict:
    """attncore's NumPy attention against its own two products (reused outputs), and the
    products into fresh outputs against the same. Shape ``(1, heads, n, d_k)``, float32."""
    q, k, v = random_qkv((1, heads, n, d_k))
    return {"n": n, "heads": heads, "flop": attention_flop(heads, n, d_k),
            "vs_products": _paired_spreads({
                "attncore": lambda: scaled_dot_product_attention(q, k, v),
                "products": numpy_products(q, k, v),
                "products, fresh output": numpy_products(q, k, v, fresh=True),
            }, "products", rounds=rounds)}


def sgemm(library: str, size: int = 1024) -> Callable[[], Any]:
    """A square float32 product ``(size x size) @ (size x size)`` into a reused output:
    the rate the machine's BLAS reaches on the shape it is best at."""
    a, b = random_qkv((size, size))[:2]
    if library == "numpy":
        out = np.empty_like(a)
        return lambda: np.matmul(a, b, out=out)
    import torch

    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tout = torch.empty_like(ta)
    return lambda: torch.matmul(ta, tb, out=tout)


SGEMM_SIZE = 1024


def share_of_peak(n: int = 2048, heads: int = HEADS, *, rounds: int = ROUNDS,
                  d_k: int = D_K, block_size: int | None = None) -> dict:
    """Every implementation's flop rate as a fraction of the machine's sgemm rate.

    In each round: NumPy's and PyTorch's square float32 product (:func:`sgemm`, the peak of
    each library's BLAS on this machine), and attention on ``(1, heads, n, d_k)`` float32 by
    attncore (NumPy and torch), the bare NumPy expression, tiled attention (default block
    unless ``block_size``), ``F.sdpa``, and the two products alone (reused and fresh
    outputs) in both libraries. An attention's rate counts its two products' flops
    (``4 n^2 d_k`` per head); each round gives ``rate / sgemm rate`` of the same library.
    """
    import torch
    import torch.nn.functional as F

    q, k, v = random_qkv((1, heads, n, d_k))
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tiled_kw = {} if block_size is None else {"block_size": block_size}
    numpy_fns = {
        "sgemm NumPy": sgemm("numpy", SGEMM_SIZE),
        "attncore NumPy": lambda: scaled_dot_product_attention(q, k, v),
        "bare NumPy": lambda: bare_numpy_attention(q, k, v),
        "tiled NumPy": lambda: tiled_attention(q, k, v, **tiled_kw),
        "products NumPy": numpy_products(q, k, v),
        "products NumPy, fresh output": numpy_products(q, k, v, fresh=True),
    }
    torch_fns = {
        "sgemm torch": sgemm("torch", SGEMM_SIZE),
        "attncore torch": lambda: scaled_dot_product_attention(tq, tk, tv),
        "F.sdpa": lambda: F.scaled_dot_product_attention(tq, tk, tv),
        "products torch": torch_products(tq, tk, tv),
        "products torch, fresh output": torch_products(tq, tk, tv, fresh=True),
    }
    with torch.no_grad():
        times = rotated_rounds({**numpy_fns, **torch_fns}, rounds=rounds,
                               min_sample_s=MIN_SAMPLE_S)
    flop, peak_flop = attention_flop(heads, n, d_k), 2 * SGEMM_SIZE ** 3
    rows = {}
    for names, peak in ((numpy_fns, "sgemm NumPy"), (torch_fns, "sgemm torch")):
        peak_rate = [peak_flop / t for t in times[peak]]
        for name in names:
            work = peak_flop if name == peak else flop
            rates = [work / t for t in times[name]]
            rows[name] = {"gflops": quartiles([r / 1e9 for r in rates]),
                          "share": {**quartiles([r / p for r, p in zip(rates, peak_rate)]),
                                    "rounds": rounds},
                          "seconds": quartiles(times[name])}
    rows["attncore NumPy"]["vs_products"] = ratio_spread(times, "attncore NumPy",
                                                         "products NumPy")
    rows["F.sdpa"]["vs_products"] = ratio_spread(times, "F.sdpa", "products torch")
    rows["F.sdpa"]["vs_fresh_products"] = ratio_spread(times, "F.sdpa",
                                                       "products torch, fresh output")
    return {"n": n, "heads": heads, "sgemm_size": SGEMM_SIZE, "rows": rows}


def numpy_breakdown(n: int = 2048, heads: int = HEADS, *, rounds: int = ROUNDS,
                    d_k: int = D_K) -> dict:
    """The NumPy attention's steps, each timed alone, as ratios to the two products.

    The steps of ``attncore.attention._attention_numpy`` on ``(1, heads, n, d_k)`` float32:
    ``Q K^T`` into a fresh array (as attncore does: the score matrix's pages are touched for
    the first time) and into a reused one, the softmax's passes over the score matrix, and
    ``A V``. The elementwise passes write into a reused buffer so that repeating them does
    not change the data. Also returns the exponential's nanoseconds per element.
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
    out_buf = np.empty_like(out)
    steps = {
        "Q K^T, fresh output": lambda: qs @ kt,
        "Q K^T": lambda: np.matmul(qs, kt, out=buf),
        "row max": lambda: scores.max(axis=-1, keepdims=True),
        "subtract max": lambda: np.subtract(scores, row_max, out=buf),
        "exp": lambda: np.exp(shifted, out=buf),
        "row sum": lambda: weights.sum(axis=-1, keepdims=True),
        "A V": lambda: np.matmul(weights, v, out=out_buf),
        "divide output": lambda: np.divide(out, total, out=out_buf),
        "products": numpy_products(q, k, v),
    }
    times = rotated_rounds(steps, rounds=rounds, min_sample_s=MIN_SAMPLE_S)
    exp_ns = [t / scores.size * 1e9 for t in times["exp"]]
    return {"n": n, "heads": heads, "steps": _spreads(times, "products"),
            "exp_ns_per_element": quartiles(exp_ns), "elements": int(scores.size)}


def projection_flatten(batch: int, n: int, d_model: int = 512, *,
                       rounds: int = ROUNDS) -> dict:
    """A multi-head layer's projection ``x @ w`` on a 3-D ``(batch, n, d_model)`` NumPy
    array (one BLAS call per batch entry) against ``x.reshape(-1, d_model) @ w`` (one
    call), float32."""
    x = random_qkv((batch, n, d_model))[0]
    w = random_qkv((d_model, d_model), seed=1)[0]
    times = rotated_rounds({"3-D": lambda: x @ w,
                            "flattened": lambda: (x.reshape(-1, d_model) @ w)
                            .reshape(batch, n, d_model)},
                           rounds=rounds, min_sample_s=MIN_SAMPLE_S)
    return {"batch": batch, "n": n, "d_model": d_model,
            "ratio": ratio_spread(times, "3-D", "flattened")}


# --- tiled against naive attention: block sizes ------------------------------------------------

def tiled_blocks(n: int, heads: int = 1, blocks: tuple[int, ...] = (64, 128, 256, 512, 1024),
                 *, rounds: int = ROUNDS, d_k: int = D_K) -> dict:
    """Tiled attention for each block size against the reference (naive) attention.

    NumPy, float32, ``(heads, n, d_k)`` (``(n, d_k)`` for one head). Time: per-round ratios
    tiled / naive, each block size timed pair by pair with naive (:func:`_paired_spreads`).
    Memory: the peak of one call under tracemalloc, inputs excluded, output included, as a
    ratio to naive's.
    """
    q, k, v = random_qkv((n, d_k) if heads == 1 else (heads, n, d_k))
    naive = lambda: scaled_dot_product_attention(q, k, v)             # noqa: E731
    fns = {"naive": naive}
    for b in blocks:
        fns[b] = lambda b=b: tiled_attention(q, k, v, block_size=b)
    memory = {name: peak_memory_bytes(fn) for name, fn in fns.items()}
    # (Timed all six in one rotation, each block size always followed the same neighbour:
    # naive the largest block, which had just freed its score block. That raised the
    # tiled / naive ratios at N = 1024 from 1.04 to 1.12 for block 512.)
    spreads = _paired_spreads(fns, "naive", rounds=rounds)
    rows = [{"block_size": b,
             "time": {key: x for key, x in spreads[b].items() if key != "seconds"},
             "bytes": memory[b], "memory_ratio": memory[b] / memory["naive"]} for b in blocks]
    return {"n": n, "heads": heads, "naive_s": spreads["naive"]["seconds"],
            "naive_bytes": memory["naive"], "rows": rows}


# --- the machine -------------------------------------------------------------------------------

def blas_description() -> str:
    """The BLAS NumPy calls, with the kernel (architecture) it selected at run time."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        found = [f"{i.get('internal_api')} {i.get('version')}, kernel {i.get('architecture')}"
                 for i in threadpool_info() if i.get("user_api") == "blas"]
        if found:
            return "; ".join(found)
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas['version']}"
    except (AttributeError, KeyError):
        return "unknown"


def cpu_description() -> dict[str, str]:
    """What /proc/cpuinfo says about the CPU: model name, family and model numbers, and the
    widest vector instructions it offers."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model", "flags") and key not in info:
                    info[key] = value.strip()
                if not line.strip() and info:
                    break
    except OSError:
        return {}
    flags = set(info.pop("flags", "").split())
    vector = [f for f in ("avx512f", "avx2", "fma") if f in flags]
    info["vector instructions"] = ", ".join(vector) or "none of avx512f, avx2, fma"
    core = amd_core(info.get("cpu family", ""), info.get("model", ""))
    if core:
        info["core"] = core
    return info


def amd_core(family: str, model: str) -> str | None:
    """AMD's core generation from /proc/cpuinfo's family and model numbers (a virtual
    machine often shows only "AMD EPYC" as the model name), or None if not an AMD Zen."""
    try:
        f, m = int(family), int(model)
    except ValueError:
        return None
    if f == 23:
        return "Zen 2 (AVX2, 256-bit FMA)" if m >= 0x30 else "Zen or Zen+ (AVX2, 128-bit units)"
    if f == 25:
        zen4 = 0x10 <= m <= 0x1F or 0x60 <= m <= 0x7F or 0xA0 <= m <= 0xAF
        return "Zen 4 (AVX-512 on 256-bit units)" if zen4 else "Zen 3 (AVX2, 256-bit FMA)"
    if f == 26:
        return "Zen 5"
    return None


def machine() -> dict[str, str]:
    """CPU, cores, library versions and BLAS: what the ratios depend on."""
    info = machine_description()
    info.pop("torch threads", None)
    names = {"model name": "cpu", "cpu family": "cpu family", "model": "cpu model"}
    for key, value in cpu_description().items():
        info[names.get(key, f"cpu {key}")] = value
    info["BLAS"] = blas_description()
    return info


# --- GPUs ----------------------------------------------------------------------------------------

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


def gpu_tiled_memory(n: int, *, heads: int = HEADS, d_k: int = D_K, dtype: Any = None,
                     block_size: int | None = None) -> dict:
    """Peak CUDA memory of one call of the torch backend's reference path (weights
    requested, so the scores are materialised) against tiled attention on the GPU."""
    import torch

    q, k, v = _torch_qkv((1, heads, n, d_k), "cuda", dtype or torch.float16)
    kw = {} if block_size is None else {"block_size": block_size}

    def peak(fn: Callable[[], Any]) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        del result
        return torch.cuda.max_memory_allocated() - base

    with torch.no_grad():
        naive = peak(lambda: scaled_dot_product_attention(q, k, v, return_weights=True))
        tiled = peak(lambda: tiled_attention(q, k, v, **kw))
    return {"n": n, "heads": heads, "naive_bytes": naive, "tiled_bytes": tiled,
            "memory_ratio": tiled / naive}


# --- a training step of the capstone's language model -------------------------------------------

def training_step(d_model: int, num_layers: int, seq_len: int, batch: int, *,
                  heads: int = 4, vocab: int = 103, rounds: int = ROUNDS) -> dict:
    """One training step (forward, cross-entropy, backward, Adam) of the language model of
    chapter 11 built from attncore (:func:`attncore.lm_logits`) against the same model
    written with ``torch.nn`` modules (``nn.TransformerEncoderLayer``, the same weights,
    :func:`attncore.lab.language.torch_reference_model`), float32, the same batch and the
    same optimizer (:class:`attncore.lab.adam.Adam`)."""
    import torch
    import torch.nn.functional as F

    from attncore.language_model import init_language_model, lm_logits
    from attncore.lab.adam import Adam
    from attncore.lab.language import torch_reference_model

    model = init_language_model(vocab, d_model, heads, 4 * d_model, num_layers, seq_len,
                                dtype=torch.float32, backend="torch")
    reference = torch_reference_model(model).train()
    for t in model.tensors():
        t.requires_grad_()
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, vocab, (batch, seq_len + 1)))
    x, y = ids[:, :-1], ids[:, 1:].reshape(-1)
    ours, theirs = Adam(model.tensors(), lr=1e-4), Adam(reference.parameters(), lr=1e-4)

    def step(logits_of, opt) -> None:
        loss = F.cross_entropy(logits_of(x).reshape(-1, vocab), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    times = rotated_rounds({"attncore": lambda: step(lambda i: lm_logits(model, i), ours),
                            "torch.nn": lambda: step(reference, theirs)},
                           rounds=rounds, min_sample_s=MIN_SAMPLE_S)
    return {"d_model": d_model, "layers": num_layers, "n": seq_len, "batch": batch,
            "heads": heads, "ratio": ratio_spread(times, "attncore", "torch.nn"),
            "attncore_s": quartiles(times["attncore"]),
            "torch_s": quartiles(times["torch.nn"])}


def triton_vs_sdpa(n: int, heads: int = HEADS, *, rounds: int = ROUNDS, d_k: int = D_K,
                   dtype: Any = None, causal: bool = False, device: str = "cuda") -> dict:
    """attncore.triton's compiled flash attention against ``F.scaled_dot_product_attention``
    on the same ``(1, heads, n, d_k)`` CUDA tensors: the forward pass alone, and forward
    plus backward (a gradient of ones' shape, ``.backward`` through each).

    Runs on CUDA only: on CPU tensors the kernels run in Triton's interpreter, whose time
    says nothing about the kernel's speed, so ``device`` other than CUDA is a ValueError.
    Returns the ratios (median and interquartile range of the per-round ratios) and the
    seconds of both, with the flops of the forward pass's two products (halved, causal).
    """
    if not str(device).startswith("cuda"):
        raise ValueError(f"device: the Triton kernel is timed on CUDA only, got {device!r} "
                         f"(on a CPU it runs in Triton's interpreter: no kernel timing)")
    import torch
    import torch.nn.functional as F

    from attncore.triton import flash_attention

    q, k, v = _torch_qkv((1, heads, n, d_k), device, dtype or torch.float16)
    flash_attention(q, k, v, causal=causal)            # compiles the kernels once
    with torch.no_grad():
        forward = _paired_spreads(
            {"triton": lambda: flash_attention(q, k, v, causal=causal),
             "F.sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)},
            "F.sdpa", rounds=rounds, device=device)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    grad = torch.ones_like(q)

    def step(fn):
        def run() -> None:
            for x in leaves:
                x.grad = None
            fn(*leaves).backward(grad)
        return run

    both = _paired_spreads(
        {"triton": step(lambda a, b, c: flash_attention(a, b, c, causal=causal)),
         "F.sdpa": step(lambda a, b, c: F.scaled_dot_product_attention(a, b, c,
                                                                        is_causal=causal))},
        "F.sdpa", rounds=rounds, device=device)
    flop = attention_flop(heads, n, d_k) // (2 if causal else 1)
    return {"n": n, "heads": heads, "d_k": d_k, "causal": causal,
            "dtype": str(q.dtype).replace("torch.", ""), "flop": flop,
            "forward": forward, "forward_backward": both}


# --- a real language model: SmolLM2-135M, attncore against transformers -------------------------

def smollm2_pair() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct computed by attncore (torch, float32) and transformers'
    ``LlamaForCausalLM`` holding the same weights
    (:func:`attncore.lab.llama_reference.transformers_llama`), made once per process."""
    cached = _LLM.get("pair")
    if cached is None:
        from attncore.lab.llama_reference import transformers_llama
        from attncore.pretrained import SmolLM2

        smol = SmolLM2.load()
        cached = _LLM["pair"] = (smol, transformers_llama(smol.gguf))
    return cached


_LLM: dict[str, Any] = {}

# A prompt for the prefill: a conversation with a long system message, cut to n tokens.
LLM_TEXT = ("A transformer reads a sequence of tokens. In every layer each position attends "
            "to the earlier ones: its query is compared with their keys, and the softmax of "
            "the scores weights their values. ")
LLM_QUESTION = "What is attention in a transformer? Explain it step by step."


def llm_prefill(n: int = 256, *, rounds: int = ROUNDS) -> dict:
    """One forward pass over ``n`` tokens, logits at every position: attncore's
    ``SmolLM2.logits`` against transformers' ``model(ids, use_cache=False).logits``, the
    same weights, float32, the threads set by the caller."""
    import torch

    smol, ref = smollm2_pair()
    ids = smol.chat_ids([{"role": "system", "content": LLM_TEXT * 40},
                         {"role": "user", "content": LLM_QUESTION}])[:n]
    if len(ids) != n:
        raise ValueError(f"n: expected at most {len(ids)} prompt tokens, got {n}")
    t_ids = torch.as_tensor(ids)[None]

    def theirs() -> Any:
        with torch.no_grad():
            return ref(t_ids, use_cache=False).logits

    gap = float((smol.logits(ids) - theirs()[0]).abs().max())
    times = rotated_rounds({"attncore": lambda: smol.logits(ids), "transformers": theirs},
                           rounds=rounds)
    return {"n": n, "ratio": ratio_spread(times, "attncore", "transformers"),
            "attncore_s": quartiles(times["attncore"]),
            "transformers_s": quartiles(times["transformers"]), "max_logit_gap": gap,
            "threads": torch.get_num_threads()}


def llm_decode(n_new: int = 64, *, rounds: int = ROUNDS) -> dict:
    """Greedy decoding of ``n_new`` tokens after a chat prompt, through each library's KV
    cache: attncore's ``SmolLM2.generate`` against transformers' ``model.generate`` (greedy,
    exactly ``n_new`` tokens), the same weights, float32. Both choose the same tokens
    (checked); the time includes the prompt's own pass (about 30 tokens)."""
    import torch

    smol, ref = smollm2_pair()
    ids = smol.chat_ids(LLM_QUESTION)
    t_ids = torch.as_tensor(ids)[None]
    mask = torch.ones_like(t_ids)

    def theirs() -> Any:
        with torch.no_grad():
            return ref.generate(t_ids, attention_mask=mask, max_new_tokens=n_new,
                                min_new_tokens=n_new, do_sample=False,
                                pad_token_id=smol.eos_id)

    def ours() -> Any:
        return smol.generate(ids, n_new, stop_at_eos=False)

    same = bool(np.array_equal(ours(), theirs()[0].numpy()))
    times = rotated_rounds({"attncore": ours, "transformers": theirs}, rounds=rounds)
    return {"n_new": n_new, "prompt": len(ids),
            "ratio": ratio_spread(times, "attncore", "transformers"),
            "attncore_s": quartiles(times["attncore"]),
            "transformers_s": quartiles(times["transformers"]), "same_tokens": same,
            "threads": torch.get_num_threads()}


def llm_numpy_decode(n_new: int = 64, *, rounds: int = ROUNDS) -> dict:
    """The NumPy backend's greedy decoding of ``n_new`` tokens after the same chat prompt
    (SmolLM2 on NumPy float32 arrays, sharing the torch model's memory), against the
    torch backend in the same rounds; tokens per second of both."""
    smol, _ = smollm2_pair()
    numpy_model = smol.to("numpy")
    ids = smol.chat_ids(LLM_QUESTION)
    times = rotated_rounds(
        {"numpy": lambda: numpy_model.generate(ids, n_new, stop_at_eos=False),
         "torch": lambda: smol.generate(ids, n_new, stop_at_eos=False)}, rounds=rounds)
    return {"n_new": n_new, "prompt": len(ids), "ratio": ratio_spread(times, "numpy", "torch"),
            "numpy_s": quartiles(times["numpy"]), "torch_s": quartiles(times["torch"])}
