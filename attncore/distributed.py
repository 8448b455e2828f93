"""Attention over a sequence split across processes: ring attention and DeepSpeed-Ulysses.

When a sequence is too long for one device, each of ``P`` processes (ranks) holds a shard
of the tokens: its own queries, keys and values. Attention needs every query to meet every
key, so something must travel. Two answers, both exact:

* :func:`ring_attention` (Liu et al., 2023) keeps the queries where they are and passes the
  key/value blocks around the ring of ranks, ``P - 1`` hops. Each rank summarises what its
  queries have seen so far in an online-softmax state (:class:`attncore.SoftmaxState`) and
  merges in each block that arrives; the merge is associative and commutative, so the
  order in which the blocks arrive does not matter. Under a causal mask a rank skips the
  blocks of later tokens, and :func:`sequence_positions` offers a *zigzag* sharding that
  gives every rank the same amount of work. Its backward pass sends the blocks around the
  ring once more, with their gradients travelling beside them.
* :func:`ulysses_attention` (Jacobs et al., 2023) swaps what is split: one all-to-all turns
  "every rank has all heads of ``n / P`` tokens" into "every rank has ``H / P`` heads of
  all ``n`` tokens", attention runs locally, and a second all-to-all swaps back.

Both take torch tensors, use the default process group or ``group`` (gloo on the CPU,
NCCL on GPUs), and return the calling rank's shard of the same result that
:func:`attncore.scaled_dot_product_attention` computes on the whole sequence. Every rank
must call them with shards of the same shape, dtype and flags; this is checked with one
small all-gather, so that a mismatch, or a NaN on one rank, is the same ``ValueError`` on
every rank rather than a rank waiting forever. (An argument that a rank refuses on its
own, a NumPy array say, raises there before any message is sent; the other ranks then
fail when the process group's timeout expires.) float16 and bfloat16 inputs are computed,
and sent, in float32.

:func:`record` counts, in the calling process, the bytes these functions send and the
scores they compute, which is how the chapter measures communication and load balance.
"""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from . import SoftmaxState, finalize_softmax_state, merge_softmax_states, softmax_state
from ._backend import (
    check_attention_inputs,
    check_size,
    dtype_name,
    find_non_finite,
    is_torch_tensor,
    non_finite_error,
    shape_of,
)
from ._guard import _MARGIN, overflow_error
from .attention import scaled_dot_product_attention

__all__ = ["LAYOUTS", "Traffic", "record", "ring_attention", "sequence_positions",
           "shard_sequence", "ulysses_attention", "unshard_sequence"]

LAYOUTS = ("contiguous", "zigzag")


# --- how the sequence is split: layouts -----------------------------------------------------

def _check_layout(layout: Any) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    return layout


def _chunks(rank: int, world_size: int, layout: str) -> tuple[int, ...]:
    """The chunk numbers rank ``rank`` holds, in order: of ``P`` chunks (contiguous) or
    ``2P`` chunks (zigzag, chunk ``r`` and its mirror ``2P - 1 - r``)."""
    if layout == "contiguous":
        return (rank,)
    return (rank, 2 * world_size - 1 - rank)


def _check_split(n: int, world_size: int, layout: str) -> int:
    """The chunk length; ``ValueError`` unless the chunks divide ``n`` evenly."""
    parts = world_size * len(_chunks(0, world_size, layout))
    if n % parts:
        raise ValueError(f"n: expected a sequence length divisible by {parts} (the {layout} "
                         f"layout cuts it into {parts} equal chunks for {world_size} ranks), "
                         f"got {n}")
    return n // parts


def sequence_positions(n: int, world_size: int, rank: int, *,
                       layout: str = "contiguous") -> np.ndarray:
    """The positions of the tokens that rank ``rank`` holds, in the order it holds them.

    Parameters
    ----------
    n : int
        Length of the whole sequence; divisible by ``world_size`` (contiguous) or by
        ``2 * world_size`` (zigzag).
    world_size : int
        Number of ranks ``P >= 1``.
    rank : int
        ``0 <= rank < P``.
    layout : {"contiguous", "zigzag"}
        ``"contiguous"``: rank ``r`` holds tokens ``r n / P`` to ``(r + 1) n / P - 1``.
        ``"zigzag"``: the sequence is cut into ``2P`` chunks and rank ``r`` holds chunk
        ``r`` followed by chunk ``2P - 1 - r``, an early chunk and a late one, so that under
        a causal mask every rank has the same number of scores to compute.

    Returns
    -------
    numpy.ndarray, shape ``(n // P,)``, int64

    Examples
    --------
    >>> from attncore.distributed import sequence_positions
    >>> sequence_positions(8, 2, 0, layout="zigzag")
    array([0, 1, 6, 7])
    """
    n = check_size("n", n, minimum=0)
    world_size = check_size("world_size", world_size)
    rank = check_size("rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank: expected 0 <= rank < world_size = {world_size}, got {rank}")
    layout = _check_layout(layout)
    c = _check_split(n, world_size, layout)
    return np.concatenate([np.arange(a * c, (a + 1) * c)
                           for a in _chunks(rank, world_size, layout)]).astype(np.int64)


def shard_sequence(x: Any, world_size: int, rank: int, *,
                   layout: str = "contiguous") -> Any:
    """Rank ``rank``'s shard of ``x`` along the sequence axis (-2).

    ``x`` is a NumPy array or torch tensor of shape ``(..., n, d)``; returns shape
    ``(..., n // P, d)``, the rows :func:`sequence_positions` names, as a copy.
    """
    _check_rows("x", x)
    positions = sequence_positions(shape_of(x)[-2], world_size, rank, layout=layout)
    if isinstance(x, np.ndarray):
        return x[..., positions, :].copy()
    return x[..., positions.tolist(), :].clone()


def unshard_sequence(shards: Any, *, layout: str = "contiguous") -> Any:
    """The inverse of :func:`shard_sequence`: the whole sequence from every rank's shard.

    ``shards`` is a list of ``P`` arrays (all NumPy or all torch), rank 0 first, each of
    shape ``(..., n // P, d)``; returns shape ``(..., n, d)`` in the tokens' order.
    """
    if not isinstance(shards, (list, tuple)) or not shards:
        raise TypeError(f"shards: expected a non-empty list of arrays, one per rank, got "
                        f"{type(shards).__name__}")
    for r, s in enumerate(shards):
        _check_rows(f"shards[{r}]", s)
    shapes = {shape_of(s) for s in shards}
    if len(shapes) != 1:
        raise ValueError(f"shards: expected shards of one shape, got {sorted(shapes)}")
    world_size = len(shards)
    n = shape_of(shards[0])[-2] * world_size
    order = np.concatenate([sequence_positions(n, world_size, r, layout=layout)
                            for r in range(world_size)])
    inverse = np.argsort(order)
    if isinstance(shards[0], np.ndarray):
        return np.concatenate(list(shards), axis=-2)[..., inverse, :]
    torch = sys.modules["torch"]
    return torch.cat(list(shards), dim=-2)[..., inverse.tolist(), :]


def _check_rows(name: str, x: Any) -> None:
    if not (isinstance(x, np.ndarray) or is_torch_tensor(x)):
        raise TypeError(f"{name}: expected a numpy.ndarray or a torch.Tensor, got "
                        f"{type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"{name}: expected shape (..., n, d) (at least 2 dimensions), got "
                         f"shape {shape_of(x)} with {x.ndim}")


# --- what a process sent and computed -------------------------------------------------------

@dataclass
class Traffic:
    """What the calling process did inside :func:`record`.

    Attributes
    ----------
    bytes_sent : int
        Bytes this rank sent to other ranks (a block it keeps is not counted).
    scores : int
        Query-key scores this rank computed, ``n_q * n_k`` per block and batch entry
        (head, sequence...) (a block on the
        diagonal of a causal mask counts whole: it is computed, then masked).
    blocks : list of tuple
        ``(query chunk, key chunk)`` of every block computed, in order.
    """

    bytes_sent: int = 0
    scores: int = 0
    blocks: list = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.blocks is None:
            self.blocks = []


_ACTIVE: list[Traffic] = []


@contextmanager
def record() -> Iterator[Traffic]:
    """Count the bytes sent and scores computed by the ring and Ulysses functions.

    >>> from attncore.distributed import record
    >>> with record() as traffic:
    ...     pass
    >>> traffic.bytes_sent, traffic.scores
    (0, 0)
    """
    traffic = Traffic()
    _ACTIVE.append(traffic)
    try:
        yield traffic
    finally:
        _ACTIVE.remove(traffic)


def _count_sent(*tensors: Any) -> None:
    sent = sum(t.numel() * t.element_size() for t in tensors)
    for traffic in _ACTIVE:
        traffic.bytes_sent += sent


def _count_block(a: int, b: int, scores: int) -> None:
    for traffic in _ACTIVE:
        traffic.scores += scores
        traffic.blocks.append((a, b))


# --- the checks every rank makes, and agrees on ----------------------------------------------

class _Setup:
    """What both algorithms need to know about one call, checked on every rank."""

    def __init__(self, q: Any, k: Any, v: Any, causal: Any, scale: Any, group: Any,
                 layout: Any, heads: bool) -> None:
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not is_torch_tensor(x):
                raise TypeError(f"{name}: expected a torch.Tensor (torch.distributed sends "
                                f"tensors), got {type(x).__name__}")
        shape = check_attention_inputs(q, k, v, causal=causal, scale=scale)
        self.layout = _check_layout(layout)
        torch = sys.modules["torch"]
        self.dist = torch.distributed
        if not self.dist.is_available() or not self.dist.is_initialized():
            raise RuntimeError("torch.distributed: expected an initialised process group "
                               "(torch.distributed.init_process_group), found none")
        self.group = group
        self.rank = self.dist.get_rank(group)
        self.world_size = self.dist.get_world_size(group)
        if shape.n_q != shape.n_k:
            raise ValueError(f"q and k: expected shards of the same tokens (n_q = n_k), got "
                             f"q of shape {shape_of(q)} and k of shape {shape_of(k)}")
        if heads and (q.ndim < 3 or shape_of(q)[-3] % self.world_size):
            raise ValueError(f"q, k and v: expected shape (..., heads, n_local, d) with a "
                             f"number of heads divisible by the {self.world_size} ranks, got "
                             f"q of shape {shape_of(q)}")
        self.shape = shape
        self.causal = shape.causal
        self.scale = shape.scale
        # One all-gather: every rank sees every rank's shapes, flags and norms, so every
        # rank reaches the same verdict (a rank that raised alone would leave the others
        # waiting for its messages until the group's timeout).
        bad = find_non_finite(q=q, k=k, v=v)
        norms = [0.0, 0.0, 0.0] if bad else [float(torch.linalg.vector_norm(
            x.detach().to(torch.float64))) for x in (q, k, v)]
        mine = [float(q.ndim), *map(float, shape_of(q)), *map(float, shape_of(k)),
                *map(float, shape_of(v)), float(self.causal), float(self.scale),
                float(LAYOUTS.index(self.layout)), float(q.dtype.itemsize),
                float(bool(q.dtype.is_complex)), float("qkv".find(bad[0]) if bad else -1),
                *norms]
        ndim = torch.tensor([float(q.ndim)], dtype=torch.float64)
        ndims = [torch.empty_like(ndim) for _ in range(self.world_size)]
        self.dist.all_gather(ndims, ndim, group=group)
        if len({float(x) for x in ndims}) != 1:
            raise ValueError(f"q, k and v: expected the same number of dimensions on every "
                             f"rank, got {[int(x) for x in ndims]} (rank 0 first)")
        mine_t = torch.tensor(mine, dtype=torch.float64)
        every = [torch.empty_like(mine_t) for _ in range(self.world_size)]
        self.dist.all_gather(every, mine_t, group=group)
        every = [t.tolist() for t in every]
        for r, theirs in enumerate(every):
            if theirs[-4] >= 0:
                name = "qkv"[int(theirs[-4])]
                if r == self.rank:
                    raise non_finite_error(name, {"q": q, "k": k, "v": v}[name])
                raise ValueError(f"{name}: expected finite values on every rank, got NaN or "
                                 f"infinity on rank {r}")
        if any(theirs[:-3] != every[0][:-3] for theirs in every):
            raise ValueError(
                f"q, k, v, causal, scale, layout: expected the same shapes, dtype and "
                f"arguments on every rank, got q {shape_of(q)}, k {shape_of(k)}, "
                f"v {shape_of(v)}, causal={self.causal}, scale={self.scale}, "
                f"layout={self.layout!r}, {dtype_name(q)} on rank {self.rank} and "
                f"something else on rank "
                f"{next(r for r, t in enumerate(every) if t[:-3] != mine[:-3])}")
        # attncore's promise about values, for scores between any two ranks' shards: the
        # bound |scale| * ||q_r|| * ||k_s|| (Cauchy-Schwarz) must fit the working precision.
        q_max = max(t[-3] for t in every)
        k_max = max(t[-2] for t in every)
        v_all = math.sqrt(sum(t[-1] ** 2 for t in every))
        work = torch.float32 if q.dtype.itemsize == 2 else q.dtype
        limit = float(torch.finfo(work).max) / _MARGIN
        if not (abs(self.scale) * q_max * k_max <= limit and q_max <= limit and
                k_max <= limit and v_all * math.sqrt(shape.n_k * self.world_size) <= limit):
            raise overflow_error(q)
        self.work = work
        self.n_local = shape.n_q
        self.batch = math.prod(shape.batch)
        self.chunk = _check_split(self.n_local * self.world_size, self.world_size,
                                  self.layout)

    def peer(self, offset: int) -> int:
        """The global rank of the rank ``offset`` places further round the ring."""
        r = (self.rank + offset) % self.world_size
        if self.group is None:
            return r
        return self.dist.get_global_rank(self.group, r)

    def local_chunks(self, rank: int) -> list[tuple[int, slice]]:
        """(chunk number, rows of the shard) for each chunk that ``rank`` holds."""
        c = self.chunk
        return [(a, slice(i * c, (i + 1) * c))
                for i, a in enumerate(_chunks(rank, self.world_size, self.layout))]


# The course prints this function's source: lines of at most 80 characters.
def _start_pass(setup: _Setup,
                tensors: list[Any]) -> tuple[list[Any], list[Any]]:
    """Start sending ``tensors`` to the next rank and receiving the previous
    rank's (same shapes); returns the buffers that will hold them and the
    requests to wait on."""
    dist = setup.dist
    received = [t.new_empty(t.shape) for t in tensors]
    ops = [dist.P2POp(dist.isend, t.contiguous(), setup.peer(1), setup.group)
           for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, setup.peer(-1), setup.group)
            for t in received]
    _count_sent(*tensors)
    return received, dist.batch_isend_irecv(ops)


def _pass_along(setup: _Setup, tensors: list[Any]) -> list[Any]:
    """Send ``tensors`` to the next rank and receive the previous rank's (same shapes)."""
    received, requests = _start_pass(setup, tensors)
    for request in requests:
        request.wait()
    return received


# --- ring attention ---------------------------------------------------------------------------

def _pairs(setup: _Setup, source: int) -> Iterator[tuple[int, slice, int, slice, bool]]:
    """The blocks to compute against the keys of rank ``source``: (query chunk, its rows,
    key chunk, its rows, diagonal?). With no causal mask, one block: all against all."""
    if not setup.causal:
        whole = slice(0, setup.n_local)
        yield setup.rank, whole, source, whole, False
        return
    for a, rows in setup.local_chunks(setup.rank):
        for b, cols in setup.local_chunks(source):
            if b <= a:                      # a later chunk of keys is invisible: skip it
                yield a, rows, b, cols, b == a


def _scores(setup: _Setup, q: Any, k: Any, diagonal: bool) -> Any:
    s = (q * setup.scale) @ k.transpose(-1, -2)
    if diagonal:
        torch = sys.modules["torch"]
        n = s.shape[-1]
        hidden = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(hidden, float("-inf"))
    return s


# The course prints this function's source: lines of at most 80 characters.
def _ring_forward(setup: _Setup, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
    """Every rank's output rows and their log-sum-exp, block by block round the
    ring."""
    torch = sys.modules["torch"]
    states: dict[int, SoftmaxState] = {}    # query chunk -> its running state
    rows_of: dict[int, slice] = {}
    for step in range(setup.world_size):
        source = (setup.rank - step) % setup.world_size   # whose k, v we hold
        # Start the next hop first, so that the transfer of the next block
        # overlaps this block's arithmetic.
        if step < setup.world_size - 1:
            incoming, requests = _start_pass(setup, [k, v])
        for a, rows, b, cols, diagonal in _pairs(setup, source):
            _count_block(a, b, setup.batch * (rows.stop - rows.start) *
                         (cols.stop - cols.start))
            scores = _scores(setup, q[..., rows, :], k[..., cols, :], diagonal)
            block = softmax_state(scores, v[..., cols, :].contiguous())
            states[a] = (block if a not in states
                         else merge_softmax_states(states[a], block))
            rows_of[a] = rows
        if step < setup.world_size - 1:
            for request in requests:
                request.wait()
            k, v = incoming
    order = sorted(rows_of, key=lambda a: rows_of[a].start)
    out = torch.cat([finalize_softmax_state(states[a]) for a in order], dim=-2)
    lse = torch.cat([states[a].max + torch.log(states[a].sum) for a in order],
                    dim=-2)
    return out, lse


def _ring_backward(setup: _Setup, q: Any, k: Any, v: Any, out: Any, lse: Any,
                   d_out: Any) -> tuple[Any, Any, Any]:
    """The gradients, FlashAttention's way: each block's weights are recomputed from the
    row log-sum-exp; the gradients of a key/value block travel round the ring with it and
    reach its owner after one more hop."""
    torch = sys.modules["torch"]
    delta = (d_out * out).sum(dim=-1, keepdim=True)       # D_i = sum_c dO_ic O_ic
    d_q = torch.zeros_like(q)
    d_k, d_v = torch.zeros_like(k), torch.zeros_like(v)
    for step in range(setup.world_size):
        source = (setup.rank - step) % setup.world_size
        for a, rows, b, cols, diagonal in _pairs(setup, source):
            q_a, k_b, v_b = q[..., rows, :], k[..., cols, :], v[..., cols, :]
            p = torch.exp(_scores(setup, q_a, k_b, diagonal) - lse[..., rows, :])
            d_v[..., cols, :] += p.transpose(-1, -2) @ d_out[..., rows, :]
            d_s = p * (d_out[..., rows, :] @ v_b.transpose(-1, -2) - delta[..., rows, :])
            d_q[..., rows, :] += setup.scale * (d_s @ k_b)
            d_k[..., cols, :] += setup.scale * (d_s.transpose(-1, -2) @ q_a)
        if step < setup.world_size - 1:
            k, v, d_k, d_v = _pass_along(setup, [k, v, d_k, d_v])
    if setup.world_size > 1:
        d_k, d_v = _pass_along(setup, [d_k, d_v])          # home: one hop further
    return d_q, d_k, d_v


def _ring_function() -> Any:
    torch = sys.modules["torch"]

    class RingAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, setup: _Setup) -> Any:
            dtype = q.dtype
            q, k, v = (x.to(setup.work).contiguous() for x in (q, k, v))
            out, lse = _ring_forward(setup, q, k, v)
            ctx.setup = setup
            ctx.save_for_backward(q, k, v, out, lse)
            return out.to(dtype)

        @staticmethod
        def backward(ctx: Any, d_out: Any) -> Any:
            q, k, v, out, lse = ctx.saved_tensors
            dtype = d_out.dtype
            grads = _ring_backward(ctx.setup, q, k, v, out, lse, d_out.to(ctx.setup.work))
            return (*(g.to(dtype) for g in grads), None)

    return RingAttention


_RING: list[Any] = []


def ring_attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Any = None,
                   group: Any = None, layout: str = "contiguous") -> Any:
    """Attention over a sequence sharded across ranks, by passing key/value blocks round a ring.

    Every rank of the process group calls this with its own shard of the sequence; the
    shards, taken in rank order (and put back in token order with
    :func:`unshard_sequence` for the zigzag layout), make up the whole sequence.

    Parameters
    ----------
    q, k, v : torch.Tensor, shapes ``(..., n_local, d_k)``, ``(..., n_local, d_k)``,
        ``(..., n_local, d_v)``
        This rank's queries, keys and values: the same tokens (rows) for all three, the
        same shapes, dtype and arguments on every rank. Floating dtype; float16 and
        bfloat16 are computed in float32.
    causal : bool, default False
        Token ``i`` attends to tokens ``j <= i`` of the whole sequence (positions given by
        the layout). Blocks that lie wholly after a rank's tokens are skipped.
    scale : real scalar, optional
        Multiplies the scores; defaults to ``1 / sqrt(d_k)``.
    group : torch.distributed.ProcessGroup, optional
        The ring: the default group if ``None``. The ranks' order in the group is the
        shards' order.
    layout : {"contiguous", "zigzag"}, default "contiguous"
        How the sequence is split (see :func:`sequence_positions`): for ``"zigzag"``,
        ``n_local`` is even and each rank holds an early and a late chunk.

    Returns
    -------
    torch.Tensor, shape ``(..., n_local, d_v)``
        This rank's rows of ``scaled_dot_product_attention`` of the whole sequence, in
        ``q``'s dtype. Differentiable: the backward pass sends the blocks round the ring
        again (it must be run on every rank, as the forward pass was).

    Raises
    ------
    TypeError
        An input that is not a torch tensor, or any argument that attention refuses.
    ValueError
        Shapes that attention refuses, ``n_q != n_k``, a shard length the layout cannot
        split, shapes or arguments that differ between ranks, a NaN or infinity on any
        rank, or inputs whose norms allow scores that overflow.
    RuntimeError
        No initialised process group.
    """
    setup = _Setup(q, k, v, causal, scale, group, layout, heads=False)
    if not _RING:
        _RING.append(_ring_function())
    return _RING[0].apply(q, k, v, setup)


# --- DeepSpeed-Ulysses --------------------------------------------------------------------------

def _all_to_all_function() -> Any:
    torch = sys.modules["torch"]

    class AllToAll(torch.autograd.Function):
        """Block ``p`` of axis 0 goes to rank ``p``; block ``s`` of the result came from
        rank ``s``. The exchange is its own inverse (and so its own adjoint)."""

        @staticmethod
        def forward(ctx: Any, x: Any, setup: _Setup) -> Any:
            ctx.setup = setup
            return _exchange(setup, x)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return _exchange(ctx.setup, grad), None

    return AllToAll


# The course prints this function's source: lines of at most 80 characters.
def _exchange(setup: _Setup, x: Any) -> Any:
    """All-to-all along axis 0: block ``p`` goes to rank ``p``, and block ``s``
    of the result came from rank ``s``."""
    x = x.contiguous()
    received = x.new_empty(x.shape)
    setup.dist.all_to_all_single(received, x, group=setup.group)
    _count_sent(x[: x.shape[0] - 1])   # all but the block a rank keeps, by size
    return received


# The course prints this function's source: lines of at most 80 characters.
def _heads_to_sequence(setup: _Setup, x: Any, exchange: Any) -> Any:
    """Ulysses' first exchange: ``(..., H, n_local, d)``, all heads of this
    rank's tokens, to ``(..., H/P, n, d)``, head group ``rank`` of every rank's
    tokens, in rank order."""
    p, n_local = setup.world_size, setup.n_local
    batch, heads, d = shape_of(x)[:-3], shape_of(x)[-3], shape_of(x)[-1]
    # (P, ..., H/P, n_local, d): block p is head group p, for rank p
    x = x.reshape(batch + (p, heads // p, n_local, d)).movedim(-4, 0)
    x = exchange(x, setup)          # now block s is rank s's tokens, our heads
    return x.movedim(0, -3).reshape(batch + (heads // p, p * n_local, d))


# The course prints this function's source: lines of at most 80 characters.
def _sequence_to_heads(setup: _Setup, out: Any, exchange: Any) -> Any:
    """Ulysses' second exchange, the inverse of :func:`_heads_to_sequence`:
    ``(..., H/P, n, d)`` back to ``(..., H, n_local, d)``."""
    p, n_local = setup.world_size, setup.n_local
    batch, group, d = shape_of(out)[:-3], shape_of(out)[-3], shape_of(out)[-1]
    # (P, ..., H/P, n_local, d): block s is rank s's tokens, our head group
    out = out.reshape(batch + (group, p, n_local, d)).movedim(-3, 0)
    out = exchange(out, setup)      # now block s is head group s, our tokens
    return out.movedim(0, -4).reshape(batch + (group * p, n_local, d))


_ALL_TO_ALL: list[Any] = []


def ulysses_attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Any = None,
                      group: Any = None, layout: str = "contiguous") -> Any:
    """Attention over a sequence sharded across ranks, by exchanging heads (all-to-all).

    The contract of :func:`ring_attention`, with a heads axis: each rank passes all heads
    of its tokens, shape ``(..., H, n_local, d)`` with ``H`` divisible by the number of
    ranks ``P``. An all-to-all gives each rank ``H / P`` heads of the whole sequence; it
    computes their attention with :func:`attncore.scaled_dot_product_attention`; a second
    all-to-all returns every rank its own tokens, all heads.

    Parameters
    ----------
    q, k, v : torch.Tensor, shapes ``(..., H, n_local, d_k)``, ``(..., H, n_local, d_k)``,
        ``(..., H, n_local, d_v)``
    causal, scale, group, layout
        As for :func:`ring_attention`.

    Returns
    -------
    torch.Tensor, shape ``(..., H, n_local, d_v)``
        This rank's rows of attention over the whole sequence; differentiable (the
        all-to-all's adjoint is the same all-to-all).

    Raises
    ------
    TypeError, ValueError, RuntimeError
        As for :func:`ring_attention`, and ``ValueError`` if ``H`` is not a multiple of
        ``P``.
    """
    setup = _Setup(q, k, v, causal, scale, group, layout, heads=True)
    if not _ALL_TO_ALL:
        _ALL_TO_ALL.append(_all_to_all_function())
    exchange = _ALL_TO_ALL[0].apply
    p, n_local = setup.world_size, setup.n_local
    n = n_local * p
    order = np.concatenate([sequence_positions(n, p, r, layout=setup.layout)
                            for r in range(p)])
    natural = np.argsort(order)

    def to_heads(x: Any) -> Any:
        x = _heads_to_sequence(setup, x, exchange)
        return x if setup.layout == "contiguous" else x[..., natural.tolist(), :]

    qh, kh, vh = (to_heads(x) for x in (q, k, v))
    for traffic in _ACTIVE:
        traffic.scores += math.prod(shape_of(qh)[:-1]) * n
    out = scaled_dot_product_attention(qh, kh, vh, causal=setup.causal, scale=setup.scale)
    if setup.layout != "contiguous":
        out = out[..., order.tolist(), :]
    return _sequence_to_heads(setup, out, exchange)

