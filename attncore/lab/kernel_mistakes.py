"""Chapter 14's common mistakes, run: the forward kernel of :mod:`attncore.triton` with one
of three classic bugs, for the chapter to show each one failing on a small case.

* ``"no-mask"``: the key tile is loaded and scored without the mask ``cols < n_k``, so the
  last, partial tile reads the rows that follow the keys in memory (the next head's keys,
  or whatever lies there) and gives them weight;
* ``"float16-sums"``: the running sum ``l`` and the accumulator are kept in float16 instead
  of float32;
* ``"causal-skip"``: a causal program stops its loop at its first query row ``start_m``
  instead of after its last (``start_m + BLOCK_M``), so it never visits the tile on the
  diagonal.

The kernel differs from :func:`attncore.triton._forward_kernel` only where a mistake is
switched on (``tl.constexpr`` flags, resolved when the kernel is specialised). Needs the
optional package triton; import it after :mod:`attncore.triton`, which switches Triton's
interpreter on where no GPU is present.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# attncore.triton first: without a GPU it switches Triton's interpreter on before Triton is
# imported and the kernel below is decorated
from .. import triton as _attncore_triton  # noqa: F401, I001
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["MISTAKES", "forward_with_mistake"]

MISTAKES = ("no-mask", "float16-sums", "causal-skip")


@triton.jit
def _forward_with_mistake(Q, K, V, O, n_q, n_k, d, scale,
                          CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                          NO_MASK: tl.constexpr, SUM_DTYPE: tl.constexpr,
                          CAUSAL_SKIP: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    head = tl.program_id(1)
    Q += head * n_q * d
    K += head * n_k * d
    V += head * n_k * d
    O += head * n_q * d
    rows = start_m + tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_D)
    q = tl.load(Q + rows[:, None] * d + c[None, :],
                mask=(rows[:, None] < n_q) & (c[None, :] < d), other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], SUM_DTYPE)
    acc = tl.zeros([BLOCK_M, BLOCK_D], SUM_DTYPE)
    end = n_k
    if CAUSAL:
        if CAUSAL_SKIP:
            end = tl.minimum(start_m, n_k)                  # the mistake
        else:
            end = tl.minimum(start_m + BLOCK_M, n_k)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        if NO_MASK:                                         # the mistake
            k = tl.load(K + cols[:, None] * d + c[None, :])
            v = tl.load(V + cols[:, None] * d + c[None, :])
        else:
            k = tl.load(K + cols[:, None] * d + c[None, :],
                        mask=(cols[:, None] < n_k) & (c[None, :] < d), other=0.0)
            v = tl.load(V + cols[:, None] * d + c[None, :],
                        mask=(cols[:, None] < n_k) & (c[None, :] < d), other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        if NO_MASK:
            allowed = cols[None, :] >= 0                    # every column
        else:
            allowed = cols[None, :] < n_k
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = (l * alpha + tl.sum(p, 1)).to(SUM_DTYPE)
        acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(SUM_DTYPE)
        m = m_new
    out = acc.to(tl.float32) / l.to(tl.float32)[:, None]
    tl.store(O + rows[:, None] * d + c[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < n_q) & (c[None, :] < d))


def forward_with_mistake(q: Any, k: Any, v: Any, mistake: str | None, *,
                         causal: bool = False, block: int = 32) -> Any:
    """The forward kernel with ``mistake`` (one of :data:`MISTAKES`, or None for none).

    Parameters
    ----------
    q : torch.Tensor, shape ``(batch, heads, n_q, d)``
    k, v : torch.Tensor, shape ``(batch, heads, n_k, d)``, the dtype of ``q``
        Contiguous, ``d`` a power of two from 16 on. (With ``"no-mask"`` the kernel reads
        past the end of ``k`` and ``v`` for the last head: pass views into a larger tensor,
        so that what it reads there is defined.)
    mistake : str or None
    causal : bool, default False
    block : int, default 32
        ``BLOCK_M = BLOCK_N``, a power of two from 16 on.

    Returns
    -------
    out : torch.Tensor, shape ``(batch, heads, n_q, d)``, dtype of ``q``
    """
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(f"mistake: expected one of {MISTAKES} or None, got {mistake!r}")
    b, h, n, d = q.shape
    n_k = k.shape[2]
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not x.is_contiguous():
            raise ValueError(f"{name}: expected a contiguous tensor")
    out = torch.empty_like(q)
    sums = tl.float16 if mistake == "float16-sums" else tl.float32
    # (0 / 0 in a row that saw no key is the point of one demonstration, not a warning)
    with np.errstate(invalid="ignore", divide="ignore"):
        _forward_with_mistake[(triton.cdiv(n, block), b * h)](
            q, k, v, out, n, n_k, d, d ** -0.5, CAUSAL=causal, BLOCK_M=block, BLOCK_N=block, BLOCK_D=d,
            NO_MASK=mistake == "no-mask", SUM_DTYPE=sums,
            CAUSAL_SKIP=mistake == "causal-skip")
    return out
