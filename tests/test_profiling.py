import numpy as np
import pytest

from attncore.lab.profiling import machine_description, median_time, peak_memory_bytes


def test_peak_memory_sees_numpy_temporaries():
    n = 512
    peak = peak_memory_bytes(lambda: np.ones((n, n)) @ np.ones((n, n)))
    # three n x n float64 arrays are alive at the peak (two inputs and the product)
    assert 2 * n * n * 8 <= peak <= 4 * n * n * 8 + 1_000_000


def test_median_time_counts_calls():
    calls = []
    t = median_time(lambda: calls.append(1), repeats=5, warmup=2)
    assert len(calls) == 7 and t >= 0


def test_machine_description_names_the_libraries():
    info = machine_description()
    assert {"cpu", "cores", "python", "numpy"} <= set(info)


def test_side_by_side_alternates_and_requires_five_rounds():
    import pytest

    from attncore.lab.profiling import side_by_side

    order = []
    t = side_by_side({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=5)
    assert set(t) == {"a", "b"} and order == ["a", "b"] * 6   # one warm-up each, then rounds
    with pytest.raises(ValueError, match="repeats: expected at least 5"):
        side_by_side({"a": lambda: None}, repeats=3)


def test_naive_vs_tiled_memory_ratio_falls_with_n():
    from attncore.lab.comparisons import naive_vs_tiled

    # Tiled memory grows like n (block_size + 3 d), naive like n (n + d): the ratio falls
    # roughly like 1/n once n is well above block_size + 2 d (at n = 256 they are about equal).
    small = naive_vs_tiled(512, block_size=64, measure_time=False)
    large = naive_vs_tiled(2048, block_size=64, measure_time=False)
    assert large["memory_ratio"] < 0.5 * small["memory_ratio"] < 0.5
    assert large["naive_bytes"] >= 2048 * 2048 * 4     # the float32 score matrix, at least


def test_rotated_rounds_rotate_the_order_and_time_every_round():
    import pytest

    from attncore.lab.profiling import rotated_rounds

    order = []
    times = rotated_rounds({name: (lambda name=name: order.append(name)) for name in "abc"},
                           rounds=9)
    assert order[:3] == ["a", "b", "c"]                      # one warm-up call each
    rounds = [order[3 + 3 * r:6 + 3 * r] for r in range(9)]
    assert rounds[:4] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert all(len(times[name]) == 9 for name in "abc")
    for bad in (8, 9.0, True):
        with pytest.raises(ValueError, match="rounds: expected at least 9"):
            rotated_rounds({"a": lambda: None}, rounds=bad)


def test_rotated_rounds_repeat_fast_calls_within_a_sample(monkeypatch):
    # A fake clock that advances 1 ms per call of `fast` and not otherwise: the count per
    # sample comes from the warm-up's 1 ms, whatever the machine's load (with a real sleep
    # a busy machine stretched the warm-up past 5 ms and the count fell to 1).
    from attncore.lab import profiling

    now = [0.0]
    monkeypatch.setattr(profiling.time, "perf_counter", lambda: now[0])
    calls = []

    def fast():
        calls.append(1)
        now[0] += 0.001

    times = profiling.rotated_rounds({"fast": fast}, rounds=9, min_sample_s=0.005)
    assert len(calls) == 1 + 9 * 5              # 5 calls per sample of at least 5 ms
    assert times["fast"] == [pytest.approx(0.001)] * 9   # each sample divided by its count


def test_ratio_spread_takes_the_ratio_of_each_round():
    from attncore.lab.profiling import ratio_spread

    times = {"a": [2.0, 4.0, 6.0, 8.0, 10.0], "b": [1.0, 1.0, 2.0, 2.0, 1.0]}
    s = ratio_spread(times, "a", "b")
    # per-round ratios 2, 4, 3, 4, 10: median 4, quartiles 3 and 4 (not 6 / 2 = 3)
    assert (s["median"], s["q1"], s["q3"], s["rounds"]) == (4.0, 3.0, 4.0, 5)


def test_one_torch_thread_restores_the_thread_count_even_after_an_error(torch_threads):
    import torch

    from attncore.lab.profiling import one_torch_thread

    before = torch_threads
    with pytest.raises(RuntimeError):
        with one_torch_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
