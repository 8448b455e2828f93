"""Ring attention and DeepSpeed-Ulysses against attention on the whole sequence.

Each world size (2, 3 and 4 processes) is one process group, started once by
:func:`attncore.lab.processes.run_ranks` (gloo on 127.0.0.1, bounded in time); every case
runs inside it and the ranks return their errors for the assertions here. A group of
forked processes starts in well under a second.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import attncore as ac  # noqa: E402
from attncore.distributed import (  # noqa: E402
    record,
    ring_attention,
    sequence_positions,
    shard_sequence,
    ulysses_attention,
    unshard_sequence,
)
from attncore.lab.processes import run_ranks  # noqa: E402

if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

CASES = [(causal, layout) for causal in (False, True) for layout in ("contiguous", "zigzag")]


def _full(shape, seed, dtype=torch.float64):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _compare(rank, world_size):
    """Every case on this rank: the largest error of forward and gradients, per case."""
    b, h, n, d = 2, 12, 24, 8            # 12 heads: divisible by 2, 3 and 4 ranks
    q, k, v, w = (_full((b, h, n, d), seed) for seed in range(4))
    found = {}
    for causal, layout in CASES:
        full = [x.clone().requires_grad_() for x in (q, k, v)]
        ref = ac.scaled_dot_product_attention(*full, causal=causal)
        (ref * w).sum().backward()
        mine = [shard_sequence(x, world_size, rank, layout=layout).requires_grad_()
                for x in (q, k, v)]
        w_mine = shard_sequence(w, world_size, rank, layout=layout)
        want = shard_sequence(ref.detach(), world_size, rank, layout=layout)
        for name, fn in (("ring", ring_attention), ("ulysses", ulysses_attention)):
            for x in mine:
                x.grad = None
            out = fn(*mine, causal=causal, layout=layout)
            (out * w_mine).sum().backward()
            errors = [float((out.detach() - want).abs().max())]
            errors += [float((x.grad - shard_sequence(g.grad, world_size, rank,
                                                      layout=layout)).abs().max())
                       for x, g in zip(mine, full)]
            found[(name, causal, layout)] = max(errors)
    # float32, 3-D inputs (no heads axis) for the ring, and every shard gathered back
    q32, k32, v32 = (_full((3, n, 4), seed, torch.float32) for seed in range(3))
    out = ring_attention(*(shard_sequence(x, world_size, rank) for x in (q32, k32, v32)),
                         causal=True)
    found["float32"] = float((out - shard_sequence(
        ac.scaled_dot_product_attention(q32, k32, v32, causal=True), world_size,
        rank)).abs().max())
    return found, out.numpy()


@pytest.fixture(scope="module", params=[2, 3, 4])
def world(request):
    return request.param, run_ranks(_compare, request.param, timeout_s=120)


def test_ring_and_ulysses_equal_attention_on_the_whole_sequence(world):
    world_size, results = world
    for rank, (found, _) in enumerate(results):
        for case, error in found.items():
            tol = 1e-5 if case == "float32" else 1e-12
            assert error < tol, f"{world_size} ranks, rank {rank}, {case}: error {error:.2e}"


def test_the_shards_make_up_the_whole_output(world):
    world_size, results = world
    n = 24
    q, k, v = (_full((3, n, 4), seed, torch.float32) for seed in range(3))
    whole = unshard_sequence([torch.from_numpy(out) for _, out in results])
    ref = ac.scaled_dot_product_attention(q, k, v, causal=True)
    assert float((whole - ref).abs().max()) < 1e-5


def _counts(rank, world_size):
    """Bytes and scores of one forward pass per case, and the chunk pairs computed."""
    n, d = 8 * world_size, 4
    x = _full((1, n, d), 0, torch.float32)
    found = {}
    for causal, layout in CASES:
        shard = shard_sequence(x, world_size, rank, layout=layout)
        with record() as traffic:
            ring_attention(shard, shard, shard, causal=causal, layout=layout)
        with record() as heads:
            h = shard.expand(world_size, -1, -1).contiguous()    # P heads
            ulysses_attention(h, h, h, causal=causal, layout=layout)
        found[(causal, layout)] = (traffic.bytes_sent, traffic.scores,
                                   list(traffic.blocks), heads.bytes_sent)
    return found


def test_communication_and_work_are_what_the_formulas_say():
    world_size = 4
    results = run_ranks(_counts, world_size, timeout_s=60)
    n, d, b = 8 * world_size, 4, 4                 # float32: 4 bytes
    c = n // world_size
    for rank, found in enumerate(results):
        for (causal, layout), (ring_bytes, scores, blocks, uly_bytes) in found.items():
            # ring: P - 1 hops of this rank's k and v
            assert ring_bytes == (world_size - 1) * c * 2 * d * b
            # Ulysses, P heads: q, k, v and the output, each all but 1/P of it sent
            assert uly_bytes == 4 * (world_size - 1) * c * d * b
            if not causal:
                assert scores == c * n
            elif layout == "contiguous":
                assert scores == (rank + 1) * c * c
                assert blocks == [(rank, rank - s) for s in range(rank + 1)]
            else:
                assert scores == (2 * world_size + 1) * (c // 2) ** 2


def _mismatch(rank, world_size):
    n = 4 if rank == 0 else 6
    x = torch.zeros(1, n, 2)
    try:
        ring_attention(x, x, x)
    except ValueError as e:
        return str(e)
    return None


def _bad_values(rank, world_size):
    x = torch.zeros(1, 4, 2)
    q = x.clone()
    if rank == 1:
        q[0, 0, 0] = float("nan")
    try:
        ring_attention(q, x, x)
    except ValueError as e:
        return str(e)
    return None


def _subgroup(rank, world_size):
    group = dist.new_group([0, 2])
    if rank not in (0, 2):
        return None
    member = [0, 2].index(rank)
    q, k, v = (_full((2, 8, 4), seed) for seed in range(3))
    out = ring_attention(*(shard_sequence(x, 2, member) for x in (q, k, v)),
                         causal=True, group=group)
    want = shard_sequence(ac.scaled_dot_product_attention(q, k, v, causal=True), 2, member)
    return float((out - want).abs().max())


def test_errors_are_the_same_on_every_rank_and_groups_work():
    messages = run_ranks(_mismatch, 2, timeout_s=30)
    assert all(m and "every rank" in m for m in messages), messages
    messages = run_ranks(_bad_values, 2, timeout_s=30)
    assert messages[1].startswith("q: expected finite values"), messages
    assert "rank 1" in messages[0], messages
    errors = run_ranks(_subgroup, 4, timeout_s=30)
    assert errors[1] is None and errors[3] is None
    assert errors[0] < 1e-12 and errors[2] < 1e-12


def _raise_on_one(rank, world_size):
    if rank == 1:
        raise KeyError("rank one fails")
    return rank


def _wait_forever(rank, world_size):
    if rank == 0:
        dist.recv(torch.zeros(1), src=1)      # rank 1 never sends
    else:
        import time

        time.sleep(60)                        # nor finishes before the deadline
    return rank


def test_run_ranks_reports_failures_and_stops_every_process():
    import multiprocessing

    with pytest.raises(RuntimeError, match="rank 1 of 2 raised"):
        run_ranks(_raise_on_one, 2, timeout_s=30)
    with pytest.raises(RuntimeError, match="within 1.5 s"):
        run_ranks(_wait_forever, 2, timeout_s=1.5)
    assert not multiprocessing.active_children()


def test_checks_that_need_no_process_group():
    x = torch.zeros(1, 4, 2)
    with pytest.raises(TypeError, match="q: expected a torch.Tensor"):
        ring_attention(np.zeros((4, 2)), x, x)
    with pytest.raises(TypeError, match="causal"):
        ring_attention(x, x, x, causal="yes")
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_attention(x, x, x)
    with pytest.raises(ValueError, match="layout"):
        ring_attention(x, x, x, layout="striped")


def test_layouts_shard_and_unshard():
    assert sequence_positions(8, 2, 1, layout="zigzag").tolist() == [2, 3, 4, 5]
    assert sequence_positions(6, 3, 2).tolist() == [4, 5]
    x = np.arange(24.0).reshape(12, 2)
    for layout in ("contiguous", "zigzag"):
        shards = [shard_sequence(x, 3, r, layout=layout) for r in range(3)]
        assert np.array_equal(unshard_sequence(shards, layout=layout), x)
    with pytest.raises(ValueError, match="divisible by 6"):
        sequence_positions(9, 3, 0, layout="zigzag")
    with pytest.raises(ValueError, match="rank"):
        sequence_positions(8, 2, 2)
    with pytest.raises(ValueError, match="one shape"):
        unshard_sequence([x[:4], x[:6]])
