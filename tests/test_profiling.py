import numpy as np

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
