"""What each rank runs in the chapter's experiments with ring attention and Ulysses.

:func:`attend_on_ranks` is called on every rank of a process group (by
:func:`attncore.lab.processes.run_ranks`): it builds the same whole sequence on every rank
from a seed, keeps its own shard, runs :func:`attncore.distributed.ring_attention` (forward
and backward) and :func:`attncore.distributed.ulysses_attention` on it, and returns the
shards of the results with what :func:`attncore.distributed.record` counted, as NumPy
arrays and numbers that the notebook compares with attention on the whole sequence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["attend_on_ranks", "whole_sequence"]


def whole_sequence(n: int, heads: int, d: int, seed: int) -> tuple[np.ndarray, ...]:
    """``q, k, v`` and an output weight ``w``, each of shape ``(heads, n, d)``, float64:
    the loss ``sum(out * w)`` gives the backward pass something to differentiate."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((heads, n, d)) for _ in range(4))


def attend_on_ranks(rank: int, world_size: int, n: int, heads: int, d: int, seed: int,
                    causal: bool, layout: str) -> dict[str, Any]:
    """One rank's shard of ring attention (output and gradients) and of Ulysses' output.

    Returns a dict: ``ring``, ``ulysses`` (shape ``(heads, n / P, d)``), ``grads`` (the
    gradients of ``q, k, v`` through the ring), ``ring_bytes``, ``ulysses_bytes`` (sent by
    this rank in the forward pass), ``scores`` and ``blocks`` (computed by the ring).
    """
    import torch

    from ..distributed import record, ring_attention, shard_sequence, ulysses_attention

    q, k, v, w = (torch.from_numpy(x) for x in whole_sequence(n, heads, d, seed))
    mine = [shard_sequence(x, world_size, rank, layout=layout).requires_grad_()
            for x in (q, k, v)]
    with record() as ring:
        out = ring_attention(*mine, causal=causal, layout=layout)
    (out * shard_sequence(w, world_size, rank, layout=layout)).sum().backward()
    with record() as uly:
        out_u = ulysses_attention(*(x.detach() for x in mine), causal=causal,
                                  layout=layout)
    return {"ring": out.detach().numpy(), "ulysses": out_u.numpy(),
            "grads": [x.grad.numpy() for x in mine], "ring_bytes": ring.bytes_sent,
            "ulysses_bytes": uly.bytes_sent, "scores": ring.scores,
            "blocks": list(ring.blocks)}
