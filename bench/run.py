"""Run the benchmark and write its tables and plot.

    .venv/bin/python -m bench.run            # CPU figures -> bench/results/cpu.md, cpu.png
    .venv/bin/python -m bench.run --quick    # smaller sizes, -> bench/results/raw/quick/
    .venv/bin/python -m bench.run --gpu      # also the GPU figures (needs CUDA) -> gpu.md

Every figure is a ratio of two computations timed side by side in this one process (median
of at least five alternating repetitions after a warm-up; see bench/measure.py). The raw
numbers also go to ``<out>/raw/*.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):                 # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import measure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"numpy_ratio": 1.3, "torch_ratio": 1.1, "memory_ratio": 0.1, "time_ratio": 1.5}


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "**missed**"


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.1f}"


def run_cpu(quick: bool, repeats: int, log) -> dict:
    import torch

    ns = (256, 512, 1024) if quick else (512, 1024, 2048, 4096)
    n_breakdown = 1024 if quick else 2048
    n_tiled = 4096 if quick else 16384
    results: dict = {"quick": quick, "repeats": repeats, "machine": measure.machine()}
    results["numpy"] = []
    for n in ns:
        log(f"NumPy attention vs its two matmuls, N={n}")
        results["numpy"].append(measure.numpy_vs_matmuls(n, repeats=repeats))
    log(f"NumPy step breakdown, N={n_breakdown}")
    results["breakdown"] = {"n": n_breakdown,
                            "steps": measure.numpy_breakdown(n_breakdown, repeats=repeats)}
    results["torch"] = []
    for n in ns:
        log(f"torch backend vs F.scaled_dot_product_attention, N={n}")
        results["torch"].append(measure.torch_vs_sdpa(n, repeats=repeats))
    log(f"tiled vs naive, N={n_tiled} (the slowest part)")
    results["tiled"] = measure.naive_vs_tiled(n_tiled, repeats=repeats)
    results["machine"]["torch threads"] = str(torch.get_num_threads())
    results["machine"]["load average (1 min) at end"] = f"{__import__('os').getloadavg()[0]:.2f}"
    return results


def cpu_markdown(r: dict, command: str) -> str:
    lines = []
    target_n = 2048
    lines += ["**NumPy `scaled_dot_product_attention` against its own two matrix products** "
              f"(`Q K^T` and `A V` alone, same shapes, same run). float32, batch 1, "
              f"{measure.HEADS} heads, d_k = {measure.D_K}. "
              f"Target: at most {TARGETS['numpy_ratio']} at N = {target_n}.", "",
              "| N | attention (ms) | two matmuls (ms) | ratio | target |",
              "|---:|---:|---:|---:|:---|"]
    for row in r["numpy"]:
        t = verdict(row["ratio"], TARGETS["numpy_ratio"]) if row["n"] == target_n else ""
        lines.append(f"| {row['n']} | {row['attention_s'] * 1e3:,.1f} | "
                     f"{row['matmuls_s'] * 1e3:,.1f} | {row['ratio']:.2f} | {t} |")
    b = r["breakdown"]
    mm = b["steps"]["Q K^T"] + b["steps"]["A V"]
    lines += ["", f"**Where the NumPy attention's time goes** (N = {b['n']}, each step timed "
              "alone, median of the repetitions; the elementwise steps run on one core, the "
              "products on all):", "",
              "| step | ms | relative to the two products |", "|:---|---:|---:|"]
    for name, sec in b["steps"].items():
        lines.append(f"| {name} | {sec * 1e3:,.1f} | {sec / mm:.2f} |")
    lines += ["", "**attncore's torch backend against `torch.nn.functional."
              "scaled_dot_product_attention`** on the same CPU tensors (float32, batch 1, "
              f"{measure.HEADS} heads, d_k = {measure.D_K}). Target: at most "
              f"{TARGETS['torch_ratio']}. Input checks = attncore's validation alone; the last "
              "column shows what PyTorch's fused kernel costs relative to its own two matmuls.",
              "", "| N | attncore (ms) | F.sdpa (ms) | ratio | target | input checks (ms) | "
              "F.sdpa / torch matmuls |", "|---:|---:|---:|---:|:---|---:|---:|"]
    for row in r["torch"]:
        lines.append(f"| {row['n']} | {row['attncore_s'] * 1e3:,.1f} | "
                     f"{row['sdpa_s'] * 1e3:,.1f} | {row['ratio']:.2f} | "
                     f"{verdict(row['ratio'], TARGETS['torch_ratio'])} | "
                     f"{row['checks_s'] * 1e3:,.2f} | {row['sdpa_over_matmuls']:.2f} |")
    t = r["tiled"]
    lines += ["", f"**Tiled against naive attention** (NumPy, float32, one head, N = {t['n']}, "
              f"d_k = {measure.D_K}, block size {t['block_size']}; memory = peak of one call "
              "under tracemalloc, output included).", "",
              "| | naive | tiled | tiled / naive | target |", "|:---|---:|---:|---:|:---|",
              f"| peak memory (MiB) | {mib(t['naive_bytes'])} | {mib(t['tiled_bytes'])} | "
              f"{t['memory_ratio']:.3f} | at most {TARGETS['memory_ratio']}: "
              f"{verdict(t['memory_ratio'], TARGETS['memory_ratio'])} |",
              f"| time (s) | {t['naive_s']:.2f} | {t['tiled_s']:.2f} | {t['time_ratio']:.2f} | "
              f"at most {TARGETS['time_ratio']}: {verdict(t['time_ratio'], TARGETS['time_ratio'])} |",
              "", f"**Machine** (median of {r['repeats']} alternating repetitions after one "
              f"warm-up; produced by `{command}`):", ""]
    for key, value in r["machine"].items():
        lines.append(f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def _ratio_panel(ax, ns: list[int], target: float, target_label: str, title: str) -> None:
    """Finish a panel of time ratios against N: target line, parity line, log-N axis."""
    ax.axhline(target, color="tab:red", ls="--", label=target_label)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(xscale="log", xlabel="sequence length N", ylabel="time ratio", title=title)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.legend()


def cpu_plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0, 0]
    ns = [row["n"] for row in r["numpy"]]
    ax.plot(ns, [row["ratio"] for row in r["numpy"]], "o-", label="attncore NumPy / two matmuls")
    _ratio_panel(ax, ns, TARGETS["numpy_ratio"], "target (at N = 2048)",
                 "NumPy attention vs its two matmuls")

    ax = axes[0, 1]
    steps = r["breakdown"]["steps"]
    names = list(steps)
    ax.barh(names[::-1], [steps[n] * 1e3 for n in names[::-1]],
            color=["tab:blue" if n in ("Q K^T", "A V") else "tab:orange" for n in names[::-1]])
    ax.set(xlabel="milliseconds", title=f"NumPy attention step by step, N = {r['breakdown']['n']}"
           "\n(blue: BLAS products, orange: softmax passes)")

    ax = axes[1, 0]
    ns = [row["n"] for row in r["torch"]]
    ax.plot(ns, [row["ratio"] for row in r["torch"]], "o-", label="attncore torch / F.sdpa")
    ax.plot(ns, [row["sdpa_over_matmuls"] for row in r["torch"]], "s--",
            label="F.sdpa / torch two matmuls")
    _ratio_panel(ax, ns, TARGETS["torch_ratio"], "target",
                 "torch backend vs PyTorch's fused attention (CPU)")

    ax = axes[1, 1]
    t = r["tiled"]
    bars = ax.bar(["peak memory", "time"], [t["memory_ratio"], t["time_ratio"]],
                  color=["tab:green", "tab:purple"])
    ax.bar_label(bars, fmt="%.3f")
    for x, target in ((0, TARGETS["memory_ratio"]), (1, TARGETS["time_ratio"])):
        ax.hlines(target, x - 0.4, x + 0.4, color="tab:red", ls="--")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(ylabel="tiled / naive", title=f"Tiled vs naive, N = {t['n']}, one head"
           "\n(red dashes: targets)")
    fig.suptitle(f"attncore benchmark on {r['machine']['cpu']}, {r['machine']['cores']} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_gpu(quick: bool, repeats: int, log) -> dict:
    import torch

    device = "cuda"
    name = torch.cuda.get_device_name(0)
    peak = measure.gpu_peak_tflops(name)
    ns = (1024, 4096) if quick else (1024, 4096, 16384)
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for n in ns:
            log(f"GPU {name}: torch backend vs F.sdpa, {dtype}, N={n}")
            rows.append(measure.torch_vs_sdpa(n, repeats=repeats, device=device, dtype=dtype))
    info = measure.machine()
    info["gpu"] = name
    info["torch CUDA"] = str(torch.version.cuda)
    return {"gpu": name, "peak_tflops": peak, "rows": rows, "machine": info, "repeats": repeats}


def gpu_markdown(r: dict, command: str) -> str:
    peak = r["peak_tflops"]
    peak_text = f"{peak:g} TFLOP/s (dense float16/bfloat16, data sheet)" if peak else "unknown"
    lines = [f"**attncore's torch backend against `F.scaled_dot_product_attention` on "
             f"{r['gpu']}** (batch 1, {measure.HEADS} heads, d_k = {measure.D_K}; TFLOP/s count "
             f"the two products, 4 N^2 d_k per head; peak: {peak_text}). Target: ratio at most "
             f"{TARGETS['torch_ratio']}.", "",
             "| dtype | N | attncore (ms) | F.sdpa (ms) | ratio | target | attncore TFLOP/s | "
             "F.sdpa TFLOP/s | F.sdpa share of peak |",
             "|:---|---:|---:|---:|---:|:---|---:|---:|---:|"]
    for row in r["rows"]:
        share = f"{row['sdpa_tflops'] / peak:.0%}" if peak else "n/a"
        lines.append(f"| {row['dtype']} | {row['n']} | {row['attncore_s'] * 1e3:.3f} | "
                     f"{row['sdpa_s'] * 1e3:.3f} | {row['ratio']:.2f} | "
                     f"{verdict(row['ratio'], TARGETS['torch_ratio'])} | "
                     f"{row['attncore_tflops']:.1f} | {row['sdpa_tflops']:.1f} | {share} |")
    lines += ["", f"**Machine** (median of {r['repeats']} alternating repetitions after one "
              f"warm-up; produced by `{command}`):", ""]
    lines += [f"- {key}: {value}" for key, value in r["machine"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes (about a minute); writes under <out>/raw/quick "
                             "so the committed results stay as they are")
    parser.add_argument("--gpu", action="store_true",
                        help="also run the GPU figures when torch.cuda.is_available()")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU figures")
    parser.add_argument("--repeats", type=int, default=7,
                        help="repetitions per figure, at least 5 (default 7)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default bench/results, or bench/results/raw/quick)")
    args = parser.parse_args(argv)
    if args.repeats < 5:
        parser.error("--repeats: at least 5 repetitions, the course's rule for a figure")
    out = args.out or (ROOT / "bench" / "results" / ("raw/quick" if args.quick else ""))
    (out / "raw").mkdir(parents=True, exist_ok=True)
    command = "python -m bench.run" + " --quick" * args.quick
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {message}", flush=True)

    if not args.no_cpu:
        r = run_cpu(args.quick, args.repeats, log)
        (out / "raw" / "cpu.json").write_text(json.dumps(r, indent=1))
        (out / "cpu.md").write_text(cpu_markdown(r, command))
        cpu_plot(r, out / "cpu.png")
        log(f"wrote {out / 'cpu.md'} and {out / 'cpu.png'}")
    if args.gpu:
        import torch

        if torch.cuda.is_available():
            r = run_gpu(args.quick, args.repeats, log)
            (out / "raw" / "gpu.json").write_text(json.dumps(r, indent=1))
            (out / "gpu.md").write_text(gpu_markdown(r, command + " --gpu"))
            log(f"wrote {out / 'gpu.md'}")
        else:
            log("--gpu: no CUDA device here (torch.cuda.is_available() is False); "
                "GPU figures skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
