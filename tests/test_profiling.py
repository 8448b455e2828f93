import numpy as np

from attncore.profiling import machine_description, median_time, peak_memory_bytes


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
