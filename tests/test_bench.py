"""bench/: the benchmark runs end to end and writes its tables (never how fast anything is).

The sizes are made tiny, so this checks the code that produces the committed results (and
the GPU tables' code, run on the CPU here), not the results.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("threadpoolctl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import measure, run  # noqa: E402

TINY = {"torch": [(32, 1), (16, 2)], "multihead": [8], "bare": [(32, 1), (16, 2)],
        "products": [16, 32], "peak": 16, "breakdown": 16, "projection": [(2, 8)],
        "tiled": [(64, 1), (32, 2)], "gpu": [16, 32], "training": [(16, 1, 8, 2)],
        "llm": None}           # (the SmolLM2 table: test_the_llm_table_is_written_from_its_rows)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(run, "sizes", lambda quick: TINY)
    monkeypatch.setattr(measure, "MIN_SAMPLE_S", 0.0)
    monkeypatch.setattr(measure, "SGEMM_SIZE", 16)


def test_the_cpu_benchmark_writes_its_tables_and_plot(tiny, tmp_path):
    assert run.main(["--out", str(tmp_path)]) == 0
    md = (tmp_path / "cpu.md").read_text()
    assert (tmp_path / "cpu.png").stat().st_size > 10_000
    assert (tmp_path / "raw" / "cpu.json").is_file()
    # every figure is a median with its interquartile range, and says what load it ran under
    assert re.search(r"\| \d+\.\d\d \[\d+\.\d\d-\d+\.\d\d\] \|", md)
    assert md.count("Load during this table: load average (1 min)") >= 6
    assert "sgemm" in md and "ns per float32 element" in md
    # the targets come first, one row per figure, each met or missed
    targets = md.split("### The targets")[1].split("###")[0]
    assert targets.count(" | met |") + targets.count(" | **missed** |") >= len(TINY["torch"]) + 5
    rows = [line for line in targets.splitlines() if line.startswith("| ") and "at most" in line]
    assert rows and all(line.endswith(("| below the target |", "| above the target |",
                                       "| on both sides |", "| one call |")) for line in rows)
    for target in ("at most 1.25", "at most 1.05", "at most 1.15", "at most 1.3"):
        assert target in md
    assert f"default block ({run.default_block_size()})" in md


def test_the_training_table_runs_alone(tiny, tmp_path):
    assert run.main(["--only", "training", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "training.md").read_text()
    assert "attncore / torch.nn" in md and "Load during this table" in md
    assert re.search(r"\| \d+\.\d\d \[\d+\.\d\d-\d+\.\d\d\] \|", md)


def test_the_quartiles_column_says_which_side_of_the_target_they_lie():
    def stat(q1, q3):
        return {"median": (q1 + q3) / 2, "q1": q1, "q3": q3}

    assert run.quartiles_side([("2-D", stat(1.01, 1.04)), ("3-D", stat(1.02, 1.05))],
                              1.05) == "below the target"
    # one rank wholly above decides the row, whatever the others do
    assert run.quartiles_side([("2-D", stat(1.01, 1.04)), ("3-D", stat(1.06, 1.08))],
                              1.05) == "above the target"
    assert run.quartiles_side([("", stat(1.04, 1.06))], 1.05) == "on both sides"
    assert run.quartiles_side([("", stat(1.05, 1.07))], 1.05) == "on both sides"


def test_the_gpu_tables_are_written_from_a_run(tiny):
    torch = pytest.importorskip("torch")
    r = run.run_gpu(True, 9, lambda message: None, device="cpu")
    md = run.gpu_markdown(r, "python -m bench.run --gpu")
    assert md.count("| float16 |") == 2 and md.count("| bfloat16 |") == 2
    assert "target" in md and "Load during the run" in md
    del torch


def test_the_triton_table_times_compiled_kernels_only(tiny):
    torch = pytest.importorskip("torch")
    # without CUDA the GPU tables say that the kernel was not timed, and why
    r = run.run_gpu(True, 9, lambda message: None, device="cpu")
    assert isinstance(r["triton"], str)
    assert "Not measured: no CUDA device" in run.gpu_markdown(r, "python -m bench.run --gpu")
    with pytest.raises(ValueError, match="CUDA only"):
        measure.triton_vs_sdpa(16, device="cpu")
    # the table, from rows shaped as triton_vs_sdpa returns them
    stat = {"median": 1.1, "q1": 1.0, "q3": 1.2, "seconds": {"median": 2e-3}}
    row = {"n": 4096, "heads": 8, "d_k": 64, "causal": True, "dtype": "float16",
           "flop": 10**9, "forward": {"triton": stat}, "forward_backward": {"triton": stat}}
    md = "\n".join(run.triton_table({"triton": [row], "peak_tflops": 100.0, "gpu": "X"}))
    assert "| float16 | True | 4096 | 1.10 [1.00-1.20] | 1.10 [1.00-1.20] |" in md
    assert "| 0.5 | 0% |" in md or "| 0.5 | 1% |" in md
    del torch


def test_rounds_below_nine_are_refused(capsys):
    with pytest.raises(SystemExit):
        run.main(["--rounds", "5"])
    assert "at least 9" in capsys.readouterr().err


def test_the_performance_page_quotes_the_committed_run():
    """The page's prose interprets the committed run; its precise numbers (two or three
    decimals, as the tables print ratios and medians) must be numbers of that run, so that a
    new run cannot be committed under the old run's words. (One-decimal numbers are the
    prose's own roundings and differences, "about 0.4".)"""
    root = Path(__file__).resolve().parents[1]
    # the CPU run, and the training-step table run on its own (bench/run.py --only training)
    committed = "\n".join((root / "bench" / "results" / name).read_text()
                          for name in ("cpu.md", "training.md"))
    page = (root / "performance.md").read_text()
    # The prose and the directives' text (a figure's alt text and caption), not code blocks.
    prose, fence = [], None
    for line in page.splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
        elif fence is None or fence.startswith("{"):
            prose.append(line)
    prose = "\n".join(prose)
    number = r"(?<![\d.])\d+\.\d{2,3}(?![\d.])"    # whole numbers only: 1.07 is not in 1.075
    quoted = set(re.findall(number, prose))
    assert len(quoted) >= 5, "the check would see too little of the page"
    missing = sorted(quoted - set(re.findall(number, committed)))
    assert not missing, f"performance.md quotes numbers that the committed runs lack: {missing}"


def test_the_llm_table_is_written_from_its_rows(tiny, tmp_path, monkeypatch):
    """The SmolLM2 figures' code, end to end, on a tiny random Llama written as a GGUF file
    (tests/tiny_gguf.py) instead of the real model."""
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from attncore.lab.llama_reference import transformers_llama
    from attncore.pretrained import SmolLM2
    from tiny_gguf import write_tiny_llama

    small = SmolLM2.load(write_tiny_llama(tmp_path / "tiny.gguf", context=256))
    pair = (small, transformers_llama(small.gguf))
    monkeypatch.setattr(measure, "smollm2_pair", lambda: pair)
    monkeypatch.setattr(run, "sizes", lambda quick: {**TINY, "llm": {"prefill": 12,
                                                                     "decode": 3}})
    monkeypatch.setattr(run, "llm_available", lambda: True)
    assert run.main(["--only", "llm", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "llm.md").read_text()
    assert md.count("| prefill |") == md.count("| decoding |") >= 1
    assert "The NumPy backend decodes" in md and "Load during this table" in md
    assert "different tokens" not in md                 # both chose the same tokens
    assert re.search(r"\| \d+\.\d\d \[\d+\.\d\d-\d+\.\d\d\] \|", md)
