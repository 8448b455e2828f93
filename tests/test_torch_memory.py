"""Tests of attncore.lab.torch_memory.torch_peak_memory_bytes on known allocation patterns."""

from __future__ import annotations

import pytest
import torch

from attncore.lab.torch_memory import torch_peak_memory_bytes

N = 1 << 18                                     # float32 elements: 1 MiB


def test_one_tensor_is_counted_exactly():
    assert torch_peak_memory_bytes(lambda: torch.empty(N)) == 4 * N


def test_nothing_allocated_is_zero():
    assert torch_peak_memory_bytes(lambda: None) == 0


def test_peak_not_total_and_not_final():
    def pattern():
        a = torch.empty(N)
        b = torch.empty(N)             # 2 alive: the peak
        del a
        c = torch.empty(N)             # back to 2 alive, 3 allocated in total
        del b, c
        return torch.empty(N // 2)     # 0.5 alive at the end

    assert torch_peak_memory_bytes(pattern) == 8 * N


def test_temporaries_inside_one_op_are_seen():
    x = torch.randn(256, 256)
    # x @ x allocates its 256 x 256 result; softmax another; the first is freed inside.
    peak = torch_peak_memory_bytes(lambda: torch.softmax(x @ x, dim=-1))
    assert peak >= 2 * 256 * 256 * 4


def test_memory_existing_before_is_not_counted():
    keep = torch.empty(4 * N)                   # noqa: F841  (alive during the call)
    assert torch_peak_memory_bytes(lambda: torch.empty(N)) == 4 * N


def test_scales_with_the_size_of_what_is_allocated():
    small = torch_peak_memory_bytes(lambda: torch.ones(256, 256) * 2)
    large = torch_peak_memory_bytes(lambda: torch.ones(512, 512) * 2)
    # two N x N float32 buffers alive at once, plus a few bytes for the scalar 2
    assert 2 * 256 * 256 * 4 <= small < 2 * 256 * 256 * 4 + 64
    assert 2 * 512 * 512 * 4 <= large < 2 * 512 * 512 * 4 + 64


@pytest.mark.parametrize("device, words", [("tpu", ["device", "'tpu'"]),
                                           (3.5, ["device", "3.5"])])
def test_bad_device(device, words):
    with pytest.raises(ValueError) as info:
        torch_peak_memory_bytes(lambda: None, device=device)
    for w in words:
        assert w in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_requested_without_cuda():
    with pytest.raises(ValueError, match="CUDA is not available"):
        torch_peak_memory_bytes(lambda: None, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_counts_one_tensor():
    peak = torch_peak_memory_bytes(lambda: torch.empty(N, device="cuda"), device="cuda")
    assert 4 * N <= peak < 4 * N + (1 << 20)


def test_saved_for_backward_counts_each_storage_once():
    from attncore.lab.torch_memory import saved_for_backward

    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    saved = saved_for_backward(lambda: (x @ w).exp().sum())
    # matmul saves x and w; exp saves its result (4, 5)
    assert sorted(saved.shapes) == [(3, 5), (4, 3), (4, 5)]
    assert saved.nbytes == 4 * (12 + 15 + 20)
    # a view of a saved tensor adds nothing; nothing requires grad: nothing saved
    assert saved_for_backward(lambda: (x.T.T @ w) + (x @ w)).nbytes == 4 * (12 + 15)
    assert saved_for_backward(lambda: x.detach() @ w.detach()) == ([], 0)


def test_trimmed_shapes_leave_out_leading_axes_of_size_one_only():
    from attncore.lab.torch_memory import SavedTensors

    saved = SavedTensors([(1, 1, 8, 4), (1, 1, 8, 1), (8, 1, 4), (1, 1), (3,)], 0)
    assert saved.trimmed_shapes() == [(8, 4), (8, 1), (8, 1, 4), (), (3,)]
