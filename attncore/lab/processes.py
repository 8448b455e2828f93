"""Run one function on several local processes joined by ``torch.distributed`` (gloo).

The chapter on ring attention and its tests start a small process group on one machine:
:func:`run_ranks` starts ``world_size`` processes, joins them in a gloo process group that
listens on the loopback address only (``127.0.0.1``, on a port the system reports free),
calls ``fn(rank, world_size, *args)`` in each and returns what each returned, in rank
order. Everything is bounded in time: the group's own timeout makes a rank that waits on
a message that never comes fail, and the caller's deadline terminates every process that
is still alive. Whatever happens, no process outlives the call.

Processes are forked on Linux: a forked child starts in
milliseconds, where a fresh interpreter must import torch again (seconds). Elsewhere they
are spawned, and ``fn`` must then be importable (a module's top-level function).
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue as queue_module
import socket
import sys
import time
import traceback
from typing import Any, Callable

__all__ = ["free_port", "loopback_interface", "run_ranks"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the system reports free (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS)."""
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    return None


def _worker(fn: Callable[..., Any], rank: int, world_size: int, port: int,
            timeout_s: float, threads: int, args: tuple, results: Any) -> None:
    # gloo connects the ranks to each other on the interface named here: loopback only.
    iface = loopback_interface()
    if iface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = iface
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
            world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
    except BaseException:       # the group never formed: the parent may try a fresh port
        results.put((rank, _SETUP_FAILED, traceback.format_exc()))
        return
    try:
        try:
            results.put((rank, True, fn(rank, world_size, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException:                           # report it to the parent, then exit
        results.put((rank, False, traceback.format_exc()))


# What a rank reports when init_process_group itself failed (not fn).
_SETUP_FAILED = "setup failed"

# How many times a group whose set-up failed is formed again, on a fresh port. Forming a
# gloo group on one machine now and then fails for reasons outside the computation: the
# port the system reported free is taken in between by another process, or a connection of
# gloo's full mesh is reset while the ranks start (seen as "Connection closed by peer").
SETUP_ATTEMPTS = 3


class _SetupFailed(Exception):
    pass


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any,
              timeout_s: float = 60.0, threads: int = 1) -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` on ``world_size`` processes in one gloo group.

    Parameters
    ----------
    fn : callable
        Runs in every process, after ``torch.distributed.init_process_group``; the default
        group is the ring of all ``world_size`` ranks. Its return value must be picklable
        (NumPy arrays, numbers, tuples: not tensors that share memory).
    world_size : int
        Number of processes, ``>= 1``.
    *args
        Passed to ``fn`` after ``rank`` and ``world_size``.
    timeout_s : float, default 60
        Deadline for the whole run, and the process group's timeout for any one
        collective or point-to-point wait.
    threads : int, default 1
        ``torch.set_num_threads`` in each process (the processes share the machine).

    Returns
    -------
    list
        ``fn``'s return values, rank 0 first.

    Raises
    ------
    RuntimeError
        A rank raised (its traceback is quoted), a process died without reporting, the
        group could not be formed in :data:`SETUP_ATTEMPTS` tries (each on a fresh port),
        or the deadline passed; every process has been stopped by then.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size: expected a positive integer, got {world_size!r}")
    deadline = time.monotonic() + timeout_s
    for attempt in range(1, SETUP_ATTEMPTS + 1):
        try:
            return _run_once(fn, world_size, args, timeout_s, threads, deadline)
        except _SetupFailed as failed:
            if attempt == SETUP_ATTEMPTS or time.monotonic() >= deadline:
                raise RuntimeError(f"run_ranks: the process group could not be formed in "
                                   f"{attempt} tries; the last error:\n{failed}") from None
    raise AssertionError("unreachable")


def _run_once(fn: Callable[..., Any], world_size: int, args: tuple, timeout_s: float,
              threads: int, deadline: float) -> list[Any]:
    """One try of :func:`run_ranks`: raises :class:`_SetupFailed` if the group did not
    form (every process stopped), RuntimeError for everything else."""
    # fork only where it is safe with threads running in the parent (Linux); macOS lists
    # fork too, but its system libraries may not survive it
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    ctx = mp.get_context(method)
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(fn, rank, world_size, port, timeout_s, threads, args,
                               results))
             for rank in range(world_size)]
    found: dict[int, Any] = {}
    try:
        for p in procs:
            p.start()
        while len(found) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"run_ranks: no result from ranks "
                                   f"{sorted(set(range(world_size)) - set(found))} within "
                                   f"{timeout_s} s; all processes were stopped")
            try:
                rank, ok, value = results.get(timeout=min(left, 0.5))
            except queue_module.Empty:
                dead = [r for r, p in enumerate(procs)
                        if r not in found and p.exitcode is not None]
                if dead and results.empty():
                    time.sleep(0.2)         # a result may still be in the pipe
                    if results.empty():
                        raise RuntimeError(f"run_ranks: ranks {dead} exited (codes "
                                           f"{[procs[r].exitcode for r in dead]}) without "
                                           f"a result")
                continue
            if ok == _SETUP_FAILED:
                raise _SetupFailed(f"rank {rank} of {world_size}:\n{value}")
            if not ok:
                raise RuntimeError(f"run_ranks: rank {rank} of {world_size} raised:\n{value}")
            found[rank] = value
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        results.close()
        results.join_thread()
    return [found[r] for r in range(world_size)]
