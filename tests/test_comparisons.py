"""attncore.lab.comparisons: what its side-by-side measurements return (never how fast)."""

import pytest

from attncore.lab.comparisons import head_width_cost, naive_vs_tiled


def test_head_width_cost_reports_every_width_with_its_spread():
    rows = head_width_cost(n=32, d_model=16, widths=(1, 4), rounds=9)
    assert [r["width"] for r in rows] == [1, 4]
    assert [r["heads"] for r in rows] == [16, 4]
    for r in rows:
        assert 0 < r["ratio_q1"] <= r["ratio"] <= r["ratio_q3"]
        assert r["throughput"] == pytest.approx(1 / r["ratio"])


@pytest.mark.parametrize("kwargs, match", [
    (dict(widths=(3,)), "widths"),
    (dict(widths=(0,)), "widths"),
    (dict(widths=(True,)), "widths"),
    (dict(rounds=5), "rounds"),
])
def test_head_width_cost_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        head_width_cost(n=8, d_model=16, **kwargs)


def test_naive_vs_tiled_on_one_blas_thread_restores_the_threads():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    # Two BLAS threads to start from (scripts/test gives each worker one), so that a count
    # left at one would be seen.
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = [i["num_threads"] for i in threadpoolctl.threadpool_info()
                  if i["user_api"] == "blas"]
        assert before and set(before) == {2}
        r = naive_vs_tiled(64, block_size=16, repeats=5, blas_threads=1)
        assert {"naive_s", "tiled_s", "time_ratio"} <= set(r) and r["time_ratio"] > 0
        after = [i["num_threads"] for i in threadpoolctl.threadpool_info()
                 if i["user_api"] == "blas"]
        assert after == before
    with pytest.raises(ValueError, match="blas_threads"):
        naive_vs_tiled(64, block_size=16, blas_threads=0)


def test_reference_vs_tiled_backward_measures_both_backward_passes():
    from attncore.lab.comparisons import reference_vs_tiled_backward

    r = reference_vs_tiled_backward(512, block_size=32, d_k=16)
    assert r["n"] == 512 and r["block_size"] == 32
    # the reference holds (n, n) arrays, the tiled pass (n, block) blocks
    assert r["reference_bytes"] > 2 * 512 * 512 * 4 > 5 * r["tiled_bytes"]
    assert r["memory_ratio"] == r["tiled_bytes"] / r["reference_bytes"]
