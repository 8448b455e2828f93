"""FlashAttention as GPU kernels, written in Triton: :func:`flash_attention`.

The algorithm of :func:`~attncore.tiled_attention` and
:func:`~attncore.tiled_attention_backward` (chapters 8 and 9), written as the kernels a GPU
runs. Each *program* (one instance of a kernel) owns one tile of ``BLOCK_M`` query rows of
one (batch, head):

* the forward kernel loads its queries once, walks over the keys ``BLOCK_N`` at a time,
  keeps the online softmax's running maximum ``m``, sum ``l`` and weighted sum of values in
  registers (in float32), and writes the output tile and the row log-sum-exp
  ``L = m + log(l)``;
* the backward pass runs two kernels: one program per tile of keys accumulates ``dK`` and
  ``dV`` over the query tiles, one program per tile of queries accumulates ``dQ`` over the
  key tiles (the two passes of Triton's fused-attention tutorial, which makes both in one
  launch; FlashAttention-2 instead adds into ``dQ`` with atomic additions from the key-tile
  programs). Both recompute the weights ``exp(S - L)`` from the
  saved log-sum-exp and use ``D = rowsum(dO * O)`` (computed before them) for the softmax's
  row sums. Splitting ``dQ`` from ``dK, dV`` lets every program write only its own tile, so
  no two programs add into the same memory.

Attention sinks (gpt-oss, :mod:`attncore.sinks`) change one line of the forward kernel:
the running state starts as the sink's, ``m = s_h`` and ``l = 1`` (a key of score
``s_h`` and value 0), instead of ``m = -inf`` and ``l = 0``. The log-sum-exp it saves then
includes the sink, so the backward kernels, which recompute the weights as ``exp(S -
L)``, need no change; the sink's own gradient, ``-sum_i exp(s_h - L_i) D_i``, is one
number per row, summed outside the kernels.

On CUDA tensors the kernels are compiled by Triton. On CPU tensors they run in Triton's
interpreter, which executes the same kernel source with NumPy, one program after another:
exact enough to test the kernels on any machine, far too slow to say anything about their
speed. ``triton.jit`` chooses between the two for each function it decorates, reading the
environment variable ``TRITON_INTERPRET`` then; Triton's own helpers, such as ``tl.zeros``,
are decorated when Triton is imported, so the variable must be ``1`` by then (set later, it
gives interpreted kernels that call compiled helpers, which fails).
Importing this module on a machine without a CUDA device, before Triton is imported,
sets ``TRITON_INTERPRET=1`` unless the variable is set already. In interpreter mode CUDA
tensors are computed on the CPU too; without it, CPU tensors are refused with a
``RuntimeError`` that says how to switch the interpreter on.

Triton is an optional dependency (``pip install "attncore[triton]"``, or ``pip install
triton``); importing this module without it raises ``ImportError`` saying so. The rest of
attncore never imports it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

try:
    import torch
    # triton.jit chooses between compiling and interpreting as it decorates each function,
    # and Triton's own helpers (tl.zeros among them) are decorated when it is imported: on a
    # machine without a GPU, switch its interpreter on first, unless Triton is already
    # imported or the caller chose (TRITON_INTERPRET=0 keeps it off).
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton
    import triton.language as tl
except ImportError as err:          # pragma: no cover - depends on the environment
    missing = "torch" if "torch" in str(err) else "triton"
    raise ImportError(
        f"attncore.triton needs the {missing!r} package, which is not installed: "
        f"pip install \"attncore[triton]\" (or pip install {missing}). The rest of "
        f"attncore works without it.") from err

from ._backend import (  # noqa: E402
    check_attention_inputs,
    check_rank,
    check_size,
    dtype_name,
)
from ._guard import attention_guard  # noqa: E402
from .sinks import check_sinks  # noqa: E402

# Whether Triton was imported in interpreter mode (then its helpers are interpreted too).
_INTERPRETED = type(tl.zeros).__name__ == "InterpretedFunction"

__all__ = ["flash_attention", "default_block_sizes", "interpreting", "kernels"]

# The dtypes the kernels read and write (their sums are float32 whatever the input).
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Widest head the kernels take: a (BLOCK_M, d) accumulator per program must fit in registers.
MAX_HEAD_DIM = 256


# --- the kernels -------------------------------------------------------------------------
# Plain functions here; `kernels` decorates them with triton.jit (compiled or interpreted).
# Pointers Q, K, V, ... point at contiguous (batch * heads, n, d) tensors; program_id(1)
# picks the (batch, head), program_id(0) the tile.

def _forward_kernel(Q, K, V, O, LSE, n_q, n_k, d_k, d_v, scale,
                    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr,
                    BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr,
                    SINKS=None, n_heads=1, HAS_SINKS: tl.constexpr = False):
    start_m = tl.program_id(0) * BLOCK_M      # this program's first query
    head = tl.program_id(1)                   # and its (batch, head)
    Q += head * n_q * d_k
    K += head * n_k * d_k
    V += head * n_k * d_v
    O += head * n_q * d_v
    LSE += head * n_q
    rows = start_m + tl.arange(0, BLOCK_M)    # its query rows
    ck = tl.arange(0, BLOCK_DK)               # columns of q and k
    cv = tl.arange(0, BLOCK_DV)               # columns of v and out
    # the query tile, loaded once; past n_q and past d_k it reads 0
    q = tl.load(Q + rows[:, None] * d_k + ck[None, :],
                mask=(rows[:, None] < n_q) & (ck[None, :] < d_k),
                other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max
    l = tl.zeros([BLOCK_M], tl.float32)                # running sum
    if HAS_SINKS:   # start from the sink's state: a key of score s, value 0
        sink = tl.load(SINKS + head % n_heads).to(tl.float32)
        m = tl.zeros([BLOCK_M], tl.float32) + sink
        l = tl.zeros([BLOCK_M], tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)    # running P V
    end = n_k
    if CAUSAL:      # the last query of the tile sees keys up to its own
        end = tl.minimum(start_m + BLOCK_M, n_k)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)          # the key tile
        k = tl.load(K + cols[:, None] * d_k + ck[None, :],
                    mask=(cols[:, None] < n_k) & (ck[None, :] < d_k),
                    other=0.0)
        v = tl.load(V + cols[:, None] * d_v + cv[None, :],
                    mask=(cols[:, None] < n_k) & (cv[None, :] < d_v),
                    other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        allowed = cols[None, :] < n_k         # past n_k: not keys
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))   # finite: key 0 comes first
        alpha = tl.exp(m - m_new)             # rescales the sums so far
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        pv = tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        acc = acc * alpha[:, None] + pv
        m = m_new
    out = acc / l[:, None]
    tl.store(O + rows[:, None] * d_v + cv[None, :],
             out.to(O.dtype.element_ty),
             mask=(rows[:, None] < n_q) & (cv[None, :] < d_v))
    tl.store(LSE + rows, m + tl.log(l), mask=rows < n_q)


def _backward_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV,
                          n_q, n_k, d_k, d_v, scale,
                          CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr,
                          BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N      # this program's first key
    head = tl.program_id(1)
    Q += head * n_q * d_k
    K += head * n_k * d_k
    V += head * n_k * d_v
    DO += head * n_q * d_v
    DK += head * n_k * d_k
    DV += head * n_k * d_v
    LSE += head * n_q
    DELTA += head * n_q
    cols = start_n + tl.arange(0, BLOCK_N)    # its keys
    ck = tl.arange(0, BLOCK_DK)
    cv = tl.arange(0, BLOCK_DV)
    k_mask = (cols[:, None] < n_k) & (ck[None, :] < d_k)
    v_mask = (cols[:, None] < n_k) & (cv[None, :] < d_v)
    k = tl.load(K + cols[:, None] * d_k + ck[None, :], mask=k_mask,
                other=0.0)
    v = tl.load(V + cols[:, None] * d_v + cv[None, :], mask=v_mask,
                other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_DK], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    begin = 0
    if CAUSAL:      # query tiles before this key tile's row cannot see it
        begin = (start_n // BLOCK_M) * BLOCK_M
    for start_m in range(begin, n_q, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)        # a query tile
        q = tl.load(Q + rows[:, None] * d_k + ck[None, :],
                    mask=(rows[:, None] < n_q) & (ck[None, :] < d_k),
                    other=0.0)
        do = tl.load(DO + rows[:, None] * d_v + cv[None, :],
                     mask=(rows[:, None] < n_q) & (cv[None, :] < d_v),
                     other=0.0)
        lse = tl.load(LSE + rows, mask=rows < n_q, other=0.0)
        delta = tl.load(DELTA + rows, mask=rows < n_q, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        allowed = (rows[:, None] < n_q) & (cols[None, :] < n_k)
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)  # weights
        dv += tl.dot(tl.trans(p.to(do.dtype)), do,
                     input_precision=PRECISION)               # P^T dO
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])                 # P o (dP - D)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q,
                     input_precision=PRECISION)               # dS^T Q
    dk = dk * scale
    tl.store(DK + cols[:, None] * d_k + ck[None, :],
             dk.to(DK.dtype.element_ty), mask=k_mask)
    tl.store(DV + cols[:, None] * d_v + cv[None, :],
             dv.to(DV.dtype.element_ty), mask=v_mask)


def _backward_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ,
                        n_q, n_k, d_k, d_v, scale,
                        CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr,
                        BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M      # this program's first query
    head = tl.program_id(1)
    Q += head * n_q * d_k
    K += head * n_k * d_k
    V += head * n_k * d_v
    DO += head * n_q * d_v
    DQ += head * n_q * d_k
    LSE += head * n_q
    DELTA += head * n_q
    rows = start_m + tl.arange(0, BLOCK_M)
    ck = tl.arange(0, BLOCK_DK)
    cv = tl.arange(0, BLOCK_DV)
    q_mask = (rows[:, None] < n_q) & (ck[None, :] < d_k)
    q = tl.load(Q + rows[:, None] * d_k + ck[None, :], mask=q_mask,
                other=0.0)
    do = tl.load(DO + rows[:, None] * d_v + cv[None, :],
                 mask=(rows[:, None] < n_q) & (cv[None, :] < d_v),
                 other=0.0)
    lse = tl.load(LSE + rows, mask=rows < n_q, other=0.0)
    delta = tl.load(DELTA + rows, mask=rows < n_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_DK], tl.float32)
    end = n_k
    if CAUSAL:
        end = tl.minimum(start_m + BLOCK_M, n_k)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + cols[:, None] * d_k + ck[None, :],
                    mask=(cols[:, None] < n_k) & (ck[None, :] < d_k),
                    other=0.0)
        v = tl.load(V + cols[:, None] * d_v + cv[None, :],
                    mask=(cols[:, None] < n_k) & (cv[None, :] < d_v),
                    other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        allowed = (rows[:, None] < n_q) & (cols[None, :] < n_k)
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    dq = dq * scale
    tl.store(DQ + rows[:, None] * d_k + ck[None, :],
             dq.to(DQ.dtype.element_ty), mask=q_mask)


_SOURCES = {"forward": _forward_kernel, "backward_dkdv": _backward_dkdv_kernel,
            "backward_dq": _backward_dq_kernel}
_KERNELS: dict[str, Any] = {}


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1`` was set
    before Triton was imported)."""
    return _INTERPRETED


def kernels() -> dict[str, Any]:
    """The three kernels (``"forward"``, ``"backward_dkdv"``, ``"backward_dq"``), decorated
    with ``triton.jit`` once per process: compiled, or interpreted (see the module
    docstring)."""
    if not _KERNELS:
        _KERNELS.update({name: triton.jit(fn) for name, fn in _SOURCES.items()})
    return _KERNELS


def default_block_sizes(d: int, device: str) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)``: query rows and keys per tile for head width ``d``.

    On a GPU, tiles of 64 by 64 (64 by 32 from ``d = 128`` on), which keep a program's
    tiles and accumulators within the registers and shared memory of current GPUs. In the
    interpreter the tiles cost no registers and every kernel statement costs a Python call,
    so the largest tiles that keep several programs for small inputs: 32 by 32.
    """
    if device != "cuda":
        return 32, 32
    return (64, 64) if d <= 64 else (64, 32)


def _pow2_at_least_16(x: int) -> int:
    """Width of a tile axis of ``x`` entries: a power of two (``tl.arange`` needs one), at
    least 16 (``tl.dot`` needs that many along every axis)."""
    return max(16, 1 << (x - 1).bit_length())


def _check_block(name: str, value: Any) -> int:
    value = check_size(name, value)          # any integer, a NumPy one included
    if value < 16 or value & (value - 1):
        raise ValueError(f"{name}: expected a power of two >= 16 (Triton's tiles), "
                         f"got {value}")
    return value


class _FlashAttention(torch.autograd.Function):
    """Forward and backward pass by the Triton kernels; saves q, k, v, the output and the
    row log-sum-exp (no ``(n_q, n_k)`` tensor)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_m, block_n, sinks=None):
        out, lse = _forward(q, k, v, causal, scale, block_m, block_n, sinks)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.config = (causal, scale, block_m, block_n)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        if torch.is_grad_enabled():
            # create_graph=True: autograd would record nothing of the kernels, and the
            # gradient would come back as a constant, its own derivative 0
            raise RuntimeError(
                "flash_attention: second derivatives (a backward pass with "
                "create_graph=True, a gradient penalty, gradgradcheck) are not "
                "available: the backward pass is written by hand as Triton kernels, "
                "which autograd cannot differentiate; use "
                "attncore.scaled_dot_product_attention or attncore.tiled_attention, "
                "which support them")
        q, k, v, out, lse, sinks = ctx.saved_tensors
        # (lse includes the sink's term: the kernels' weights exp(S - L) are right as is)
        dq, dk, dv = _backward(q, k, v, out, lse, d_out, *ctx.config)
        d_sinks = None
        if sinks is not None and ctx.needs_input_grad[7]:
            # the sink is a key of value 0: dS_sink = -exp(s - L) D, D = rowsum(dO * O)
            delta = (d_out.float() * out.float()).sum(-1)
            weight = torch.exp(sinks.float()[:, None] - lse)          # (b, h, n_q)
            d_sinks = (-(weight * delta)).sum((0, 2)).to(sinks.dtype)
        return dq, dk, dv, None, None, None, None, d_sinks


def _launch_config(q, k, v, causal, block_m, block_n):
    b, h, n_q, d_k = q.shape
    n_k, d_v = k.shape[2], v.shape[3]
    precision = "ieee" if q.dtype == torch.float32 else None   # no TF32 rounding
    consts = dict(CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n,
                  BLOCK_DK=_pow2_at_least_16(d_k), BLOCK_DV=_pow2_at_least_16(d_v),
                  PRECISION=precision)
    return kernels(), (b * h, n_q, n_k, d_k, d_v), consts


def _forward(q, k, v, causal, scale, block_m, block_n, sinks=None):
    run, (bh, n_q, n_k, d_k, d_v), consts = _launch_config(q, k, v, causal, block_m, block_n)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty(q.shape[:3] + (d_v,), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(n_q, block_m), bh)
    extra = {} if sinks is None else dict(SINKS=sinks.float().contiguous(),
                                          n_heads=q.shape[1], HAS_SINKS=True)
    run["forward"][grid](q, k, v, out, lse, n_q, n_k, d_k, d_v, scale, **consts, **extra)
    return out, lse


def _backward(q, k, v, out, lse, d_out, causal, scale, block_m, block_n):
    run, (bh, n_q, n_k, d_k, d_v), consts = _launch_config(q, k, v, causal, block_m, block_n)
    q, k, v, d_out = q.contiguous(), k.contiguous(), v.contiguous(), d_out.contiguous()
    # D = rowsum(dO * O), in float32: one number per query row, before the kernels
    delta = (d_out.float() * out.float()).sum(-1).contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = (n_q, n_k, d_k, d_v, scale)
    run["backward_dkdv"][(triton.cdiv(n_k, block_n), bh)](
        q, k, v, d_out, lse, delta, dk, dv, *args, **consts)
    run["backward_dq"][(triton.cdiv(n_q, block_m), bh)](
        q, k, v, d_out, lse, delta, dq, *args, **consts)
    return dq, dk, dv


def flash_attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Any = None,
                    return_lse: bool = False, block_m: int | None = None,
                    block_n: int | None = None, sinks: Any = None) -> Any:
    """Scaled dot-product attention by the Triton kernels, differentiable.

    The same result as :func:`~attncore.scaled_dot_product_attention` (up to rounding),
    computed one tile of queries per program with the online softmax (forward) and from the
    saved row log-sum-exp (backward), as the module docstring describes. On CUDA tensors
    the kernels are compiled; on CPU tensors they run in Triton's interpreter (slowly: for
    checking, not for speed).

    Parameters
    ----------
    q : torch.Tensor, shape ``(batch, heads, n_q, d_k)``
        float32, float16 or bfloat16, on the CPU or a CUDA device. ``1 <= d_k <= 256``.
    k : torch.Tensor, shape ``(batch, heads, n_k, d_k)``, same dtype and device
    v : torch.Tensor, shape ``(batch, heads, n_k, d_v)``, same dtype and device;
        ``1 <= d_v <= 256``
    causal : bool, default False
        Query ``i`` sees keys ``0..i`` only (top-left aligned, as in PyTorch).
    scale : real scalar, optional
        Multiplies the scores; defaults to ``1 / sqrt(d_k)``.
    return_lse : bool, default False
        Also return the row log-sum-exp of the scores.
    block_m, block_n : int, optional
        Query rows and keys per tile, powers of two from 16 on; by default
        :func:`default_block_sizes`.
    sinks : torch.Tensor, shape ``(heads,)`` or ``()``, optional
        Attention sinks, one logit per head (gpt-oss), as in
        :func:`~attncore.scaled_dot_product_attention`: same dtype and device as ``q``,
        finite; differentiable.

    Returns
    -------
    out : torch.Tensor, shape ``(batch, heads, n_q, d_v)``, dtype of ``q``
    lse : torch.Tensor, shape ``(batch, heads, n_q)``, float32
        Only with ``return_lse``: ``log sum_j exp(scale * q_i . k_j)`` over the admissible
        keys, plus ``exp(s_h)`` with ``sinks`` (not differentiated).

    Raises
    ------
    TypeError
        Inputs that are not torch tensors, of different dtypes or of a dtype other than
        float32, float16 and bfloat16; flags that are not booleans; a scale that is not a
        real scalar; block sizes that are not integers.
    ValueError
        Inputs that are not 4-dimensional or whose shapes do not match, ``n_k = 0``, a
        head wider than 256, block sizes that are not powers of two from 16 on, and what
        every attention function of attncore refuses (a NaN or infinity in ``q``, ``k`` or
        ``v``, scores that overflow float32).
    RuntimeError
        A CPU tensor while Triton's interpreter is off; a second derivative (during the
        backward pass with ``create_graph=True``).

    Notes
    -----
    A query row is never without keys (``n_k >= 1``, and a causal row ``i`` sees key 0),
    so every output row is a true average. Second derivatives are not available (the
    backward pass is written by hand): a backward pass with ``create_graph=True``
    raises ``RuntimeError``.

    In Triton's interpreter (CPU tensors) bfloat16 inputs are computed in float32 and
    the output and gradients rounded to bfloat16: the interpreter runs ``tl.dot`` with
    NumPy, which has no bfloat16 (it would multiply the bit patterns as integers). The
    products of bfloat16 numbers are exact in float32, and the compiled kernels sum in
    float32 too; they differ from the interpreter only in rounding the weights to
    bfloat16 before multiplying them by the values.
    """
    if not all(isinstance(x, torch.Tensor) for x in (q, k, v)):
        got = ", ".join(type(x).__name__ for x in (q, k, v))
        raise TypeError(f"q, k, v: flash_attention takes torch tensors, got {got}")
    shape = check_attention_inputs(q, k, v, causal=causal, scale=scale)
    for name, x, layout in (("q", q, "(batch, heads, n_q, d_k)"),
                            ("k", k, "(batch, heads, n_k, d_k)"),
                            ("v", v, "(batch, heads, n_k, d_v)")):
        check_rank(name, x, 4, layout)
    if q.dtype not in _DTYPES:
        raise TypeError(f"q: expected float32, float16 or bfloat16 (the kernels sum in "
                        f"float32), got {dtype_name(q)}; use "
                        f"attncore.scaled_dot_product_attention for it")
    if shape.n_k == 0:
        raise ValueError(f"k: expected n_k >= 1 (the kernels average over keys), got "
                         f"shape {tuple(k.shape)}")
    for name, d in (("d_k", shape.d_k), ("d_v", shape.d_v)):
        if d > MAX_HEAD_DIM:
            raise ValueError(f"{name}: expected at most {MAX_HEAD_DIM} (a program's tile "
                             f"of {name} columns lives in registers), got {d}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse: expected True or False, got {return_lse!r} "
                        f"({type(return_lse).__name__})")
    default_m, default_n = default_block_sizes(max(shape.d_k, shape.d_v), q.device.type)
    block_m = default_m if block_m is None else _check_block("block_m", block_m)
    block_n = default_n if block_n is None else _check_block("block_n", block_n)
    if q.device.type != "cuda" and not interpreting():
        raise RuntimeError(
            f"q: a tensor on {q.device.type} needs Triton's interpreter, which is off: set "
            f"the environment variable TRITON_INTERPRET=1 before triton is imported (or "
            f"import attncore.triton first, which does it where no GPU is present)")
    if sinks is not None:
        # one logit per head, as a vector of the heads (a 0-d logit serves them all)
        sinks = check_sinks(sinks, q, shape.batch).reshape(-1).expand(shape.batch[-1])
    guard = attention_guard(q, k, v, shape)
    if guard.vmapped or guard.transformed:
        raise TypeError("flash_attention: torch.func transforms and forward-mode AD are "
                        "not supported (the kernels have a hand-written backward pass "
                        "only); use attncore.scaled_dot_product_attention")
    dtype = q.dtype
    if dtype == torch.bfloat16 and interpreting():
        # The interpreter runs tl.dot with NumPy, which has no bfloat16: it multiplies
        # the tiles' bit patterns as integers. In float32 the products of bfloat16
        # numbers are exact, as on a GPU (which sums them in float32 too); the results
        # are rounded to bfloat16 at the end, and autograd rounds the gradients.
        q, k, v = q.float(), k.float(), v.float()
    if guard.v_factor is not None:
        # values so large that a weighted sum could overflow: divide by powers of two
        # (exact), and multiply the output back
        factor = guard.v_factor.to(v.dtype)
        out, lse = _FlashAttention.apply(q, k, v / factor, shape.causal, shape.scale,
                                         block_m, block_n, sinks)
        out = out * factor
    else:
        out, lse = _FlashAttention.apply(q, k, v, shape.causal, shape.scale,
                                         block_m, block_n, sinks)
    out = out.to(dtype)
    return (out, lse.detach()) if return_lse else out

