"""Peak memory of torch code, on the CPU as well as on CUDA.

:func:`attncore.lab.profiling.peak_memory_bytes` uses ``tracemalloc``, which sees NumPy's
buffers but not torch's: torch allocates CPU tensors through its own allocator, outside
Python's. This module measures torch the way torch can be measured:

* on a CUDA device, with the caching allocator's own counters
  (``torch.cuda.max_memory_allocated``);
* on the CPU, with the PyTorch profiler's memory events (``profile_memory=True``): every
  allocation and every free of a tensor buffer is recorded with its size and a timestamp,
  and the peak is the largest running total.

Both count tensor buffers only (not the interpreter, not library workspaces that bypass
torch's allocator), exactly like ``peak_memory_bytes`` counts NumPy buffers, so the two can
be plotted side by side.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from typing import Any, Callable, Iterator, NamedTuple

__all__ = ["SavedTensors", "saved_for_backward", "torch_peak_memory_bytes"]


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null while the profiler starts or stops.

    The profiler's C++ side logs a line to the process's stderr at each start and stop; a
    notebook would show them, and the book build treats stderr output as an error. Only
    the profiler's own start and stop run inside this; ``fn`` never does.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):          # no real fd 2 (unusual embedding): do nothing
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_peak(fn: Callable[[], Any]) -> int:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    # Collect garbage first: a tensor from before the call, freed while the profiler runs,
    # has a size the profiler never saw (it would only log a warning about it).
    gc.collect()
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():                  # the profiler's C++ start/stop log lines
        prof.start()
    try:
        result = fn()
        del result
    finally:
        with _quiet_stderr():
            prof.stop()
    events = prof.profiler.kineto_results.events()
    changes = sorted((e.start_ns(), e.nbytes()) for e in events
                     if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    current = peak = 0
    for _, nbytes in changes:
        current += nbytes
        peak = max(peak, current)
    return peak


def _cuda_peak(fn: Callable[[], Any], device: Any) -> int:
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del result
    return peak - base


def torch_peak_memory_bytes(fn: Callable[[], Any], *, device: Any = "cpu") -> int:
    """Peak bytes of torch tensor memory allocated while ``fn()`` runs, above the start.

    Parameters
    ----------
    fn : callable with no arguments
        The computation to measure. Its result is kept alive until ``fn`` returns, so the
        output tensor is counted, as in :func:`attncore.lab.profiling.peak_memory_bytes`.
    device : ``"cpu"`` (default), ``"cuda"``, ``"cuda:N"`` or a ``torch.device``
        Where the tensors of ``fn`` live. On the CPU the PyTorch profiler records every
        allocation and free; on CUDA the allocator's peak counter is reset and read.

    Returns
    -------
    int
        The largest total of bytes allocated (and not yet freed) by torch on ``device`` at any
        moment during ``fn()``, counted from zero at the start: memory allocated before the
        call is not counted. (Freeing such memory inside ``fn`` lowers the CUDA count but
        not the CPU one, whose profiler never saw the allocation and so cannot know its
        size; measure functions that allocate what they free, as a computation does.)

    Raises
    ------
    ValueError
        ``device`` is neither the CPU nor a CUDA device, or CUDA is not available.
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:N' or a torch.device, got "
                         f"{device!r}") from err
    if dev.type == "cpu":
        return _cpu_peak(fn)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device: got {device!r}, but CUDA is not available")
        return _cuda_peak(fn, dev)
    raise ValueError(f"device: expected the CPU or a CUDA device, got {device!r}")


class SavedTensors(NamedTuple):
    """What autograd keeps from a forward pass for its backward pass.

    Attributes
    ----------
    shapes : list of tuple
        The shape of each distinct tensor saved, in the order they were saved (a tensor
        saved twice, or a view of one already saved, is listed once, with the shape it
        was first saved with).
    nbytes : int
        The bytes of their storage, each storage counted once.
    """

    shapes: list
    nbytes: int

    def trimmed_shapes(self) -> list:
        """``shapes`` with the leading axes of size 1 of each shape left out, in order.

        For one head of one sequence, ``(1, 1, n, d)`` reads ``(n, d)``; trailing and inner
        axes of size 1 stay, ``(1, 1, n, 1)`` reads ``(n, 1)``, and a shape of ones only
        reads ``()``. Returns a list of tuples of ints, one per saved tensor.
        """
        trimmed = []
        for shape in self.shapes:
            start = 0
            while start < len(shape) and shape[start] == 1:
                start += 1
            trimmed.append(tuple(shape[start:]))
        return trimmed


def saved_for_backward(fn: Callable[[], Any]) -> SavedTensors:
    """The tensors that autograd saves while ``fn()`` runs, for the backward pass.

    Runs ``fn`` under ``torch.autograd.graph.saved_tensors_hooks`` and records every
    tensor an operation saves for its gradient (inputs, intermediate results, statistics),
    each storage once: views of one tensor share its storage. Inputs that ``fn`` uses
    from outside are counted too when saved, since the backward pass needs them kept.

    Returns
    -------
    SavedTensors
        ``shapes`` (list of tuples) and ``nbytes`` (int).
    """
    import torch

    seen: dict[int, tuple] = {}
    total = 0

    def pack(t: Any) -> Any:
        nonlocal total
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in seen:
            seen[key] = tuple(t.shape)
            total += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    del result
    return SavedTensors(list(seen.values()), total)
