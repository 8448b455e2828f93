"""Attention's promise about values: finite inputs, and no overflow anywhere, on every path.

Every attention function in attncore (the NumPy reference, the torch backend with or
without PyTorch's fused kernel, the weights path, tiled attention, the multi-head layer)
makes the same promise, checked here once per call:

* a NaN or infinity in ``q``, ``k`` or ``v`` is a ``ValueError`` naming the argument,
  whether or not a mask hides it;
* a score ``scale * q_i . k_j`` that does not fit in the working precision (float32 for
  float16 and bfloat16 inputs, the input's own dtype otherwise) is a ``ValueError``
  saying so, masked or not, rather than a NaN (or a row of zeros) in the result.

Checking this entry by entry would cost several passes over the inputs and, on a GPU,
several waits for the device. Instead one number per input decides it. By the
Cauchy-Schwarz inequality every score, and every partial sum of the products that make
it, is at most ``|scale| * ||q||_F * ||k||_F`` in size (Frobenius norms over the whole
array), and every weighted sum of values at most ``sqrt(n_k) * ||v||_F``. A norm is
finite only if every entry is. So when the three norms are finite and these bounds sit
well inside the dtype's range, nothing can be infinite or NaN on any path, and the call
goes ahead: three reductions and, on a GPU, one read-back.

Only when that cheap certificate fails (a non-finite entry, or numbers so large that an
overflow is possible) are the inputs examined entry by entry: the first non-finite one is
named; else the scores are computed block by block, exactly as the reference computes
them, and any non-finite score is reported as an overflow; else the values are rescaled
by exact powers of two so that no path's weighted sum can overflow either.

Under ``torch.func.vmap`` values cannot be read, so the check is skipped there. Under the
other ``torch.func`` transforms (``grad``, ``jacrev``, ``jvp``, ``jacfwd``) and forward-mode
AD it runs on torch's norms of the wrapped tensors (never on their memory, which they do not
have), and the caller is told to keep away from PyTorch's fused kernels, which have no
forward derivative.
"""

from __future__ import annotations

import math
import sys
from typing import Any, NamedTuple

import numpy as np

from ._backend import (
    AttentionShape,
    dtype_name,
    find_non_finite,
    group_heads,
    non_finite_error,
    under_vmap,
)

# The certificate's bounds must stay this far below the dtype's largest number, which
# leaves room for rounding in the norms and in the products.
_MARGIN = 16.0


def is_low_precision(x: Any) -> bool:
    """float16 or bfloat16 (for a floating ``x``): attncore computes their scores and sums
    in float32."""
    return x.dtype.itemsize == 2


def work_dtype_name(x: Any) -> str:
    return "float32" if is_low_precision(x) else dtype_name(x)


_LIMITS: dict[Any, float] = {}


def _limit(x: Any) -> float:
    """The largest number of ``x``'s working dtype, over the margin (cached per dtype)."""
    found = _LIMITS.get(x.dtype)
    if found is None:
        found = _LIMITS[x.dtype] = float(np.finfo(np.dtype(work_dtype_name(x))).max) / _MARGIN
    return found


def norms(*arrays: Any) -> list[float]:
    """Frobenius norms as Python floats (in float32 for float16/bfloat16 inputs)."""
    if isinstance(arrays[0], np.ndarray):
        out = []
        with np.errstate(over="ignore", invalid="ignore"):    # an overflow gives inf: fine
            for x in arrays:
                x, repeats = _unbroadcast(x)
                if is_low_precision(x):
                    x = x.astype(np.float32)
                # ravel() is a view for contiguous arrays; dot is the fastest sum of squares
                flat = x.ravel()
                out.append(math.sqrt(repeats * float(np.dot(flat, flat))))
        return out
    torch = sys.modules["torch"]
    found = []
    for x in arrays:
        if x.requires_grad:
            x = x.detach()                   # a check, not part of the autograd graph
        if is_low_precision(x):
            found.append(torch.linalg.vector_norm(x, dtype=torch.float32))
        else:
            found.append(torch.linalg.vector_norm(x))
    if found[0].device.type == "cpu":
        return [float(n) for n in found]
    return torch.stack(found).tolist()       # one wait for the device instead of several


def _unbroadcast(x: np.ndarray) -> tuple[np.ndarray, int]:
    """A broadcast view (axes of stride 0, as grouped-query attention makes of the keys and
    values) as the data it repeats and the number of repeats, so that its norm costs no
    copy: ``||x||^2 = repeats * ||data||^2``."""
    if 0 not in x.strides or not x.size:
        return x, 1
    index = tuple(slice(0, 1) if step == 0 else slice(None) for step in x.strides)
    repeats = math.prod(n for n, step in zip(x.shape, x.strides) if step == 0)
    return x[index], repeats


def overflow_error(x: Any, inputs: str = "q, k or scale",
                   scores: str = "scale * q @ k^T") -> ValueError:
    dtype = work_dtype_name(x)
    where = dtype if dtype == dtype_name(x) else \
        f"{dtype}, the precision attncore computes {dtype_name(x)} scores in"
    return ValueError(f"scores: expected finite scores {scores}, got +-infinity "
                      f"(the product overflowed dtype {where}); use a wider dtype or "
                      f"smaller {inputs}")


class Guard(NamedTuple):
    """The outcome of :func:`attention_guard` for one call.

    certified : the cheap certificate held, so any kernel may be used (PyTorch's fused
        one included). Otherwise the call runs attncore's own arithmetic, whose scores
        the guard has just checked one by one.
    v_factor : ``None``, or per-column powers of two (shape ``(d_v,)``, the library and
        working dtype of ``v``) to divide ``v`` by before, and multiply the output by
        after, so that no weighted sum of values can overflow.
    vmapped : the inputs are batched by ``torch.func.vmap``, so nothing was checked.
    transformed : a ``torch.func`` transform other than ``vmap`` (``grad``, ``jvp``, ...)
        or forward-mode AD is running. The values were checked (through the transform's
        wrapped tensors, never their memory), but PyTorch's fused kernels have no forward
        derivative: callers compute with attncore's own arithmetic instead.
    """

    certified: bool
    v_factor: Any
    vmapped: bool = False
    transformed: bool = False


PASSED = Guard(True, None)
VMAPPED = Guard(True, None, True)
TRANSFORMED = Guard(True, None, False, True)


def transform_running() -> bool:
    """Whether a ``torch.func`` transform or a forward-mode AD level is active (torch is
    imported: the caller holds a tensor)."""
    torch = sys.modules["torch"]
    return torch._C._functorch.peek_interpreter_stack() is not None or \
        torch.autograd.forward_ad._current_level >= 0


def attention_guard(q: Any, k: Any, v: Any, shape: AttentionShape, *,
                    names: tuple[str, str, str] = ("q", "k", "v"),
                    inputs: str = "q, k or scale",
                    scores: str = "scale * q @ k^T") -> Guard:
    """Check attention's inputs for non-finite values and its scores for overflow.

    ``names`` are the caller's names for ``q, k, v``; ``inputs`` what to make smaller
    after an overflow, ``scores`` how the scores are made from them. Returns a
    :class:`Guard`; raises ``ValueError`` as described in the module docstring.
    """
    transformed = False
    if shape.backend != "numpy":
        torch = sys.modules["torch"]
        stack = torch._C._functorch.peek_interpreter_stack()
        if stack is not None and under_vmap(q, k, v):
            return VMAPPED
        # Under grad, jvp and the like the tensors are wrapped and have no memory that
        # NumPy could read: their norms are computed by torch (and read as numbers, which
        # these transforms allow).
        transformed = stack is not None or torch.autograd.forward_ad._current_level >= 0
        if not transformed and q.is_cpu and q.dtype.itemsize > 2 and \
                not (q.requires_grad or k.requires_grad or v.requires_grad) \
                and q.is_contiguous() and k.is_contiguous() and v.is_contiguous():
            # The usual call, spelled out: this runs on every call, and on small inputs
            # every Python step of it shows in the time. A dot product is the cheapest
            # sum of squares (twice as fast as vector_norm on large inputs), and NumPy's,
            # on views of the same memory, skips torch's dispatch. (An overflow gives
            # inf, which fails the bounds below: no warning.)
            dot, sqrt = np.dot, math.sqrt
            qf, kf, vf = q.numpy().reshape(-1), k.numpy().reshape(-1), v.numpy().reshape(-1)
            with np.errstate(over="ignore", invalid="ignore"):
                a, b, c = (sqrt(float(dot(qf, qf))), sqrt(float(dot(kf, kf))),
                           sqrt(float(dot(vf, vf))))
        else:
            a, b, c = norms(q, k, v)
    else:
        a, b, c = norms(q, k, v)
    # The bounds of the module docstring. (A comparison with NaN or inf is False, so
    # non-finite norms fail them too.)
    limit = _limit(q)
    s = abs(shape.scale)
    big = s if s > 1.0 else 1.0
    qk_ok = big * a <= limit and big * b <= limit and s * a * b <= limit
    v_ok = c * math.sqrt(shape.n_k) <= limit
    if qk_ok and v_ok:
        return TRANSFORMED if transformed else PASSED
    arrays = dict(zip(names, (q, k, v)))
    bad = find_non_finite(**arrays)
    if bad is not None:
        raise non_finite_error(bad, arrays[bad])
    if not qk_ok:
        if shape.group > 1:          # grouped-query attention: the scores of the groups
            q, k = group_heads(q, k, v, None, shape)[:2]
        if not scores_are_finite(q, k, shape.scale):
            raise overflow_error(q, inputs, scores)
    return Guard(False, None if v_ok else _column_powers_of_two(v), False, transformed)


def scores_are_finite(q: Any, k: Any, scale: float, block: int = 256) -> bool:
    """Whether every score ``(scale * q) @ k^T`` is finite in the working precision.

    Computed the way the reference computes them, one block of keys at a time so that the
    memory stays ``O(n_q * block)`` (tiled attention's bound).
    """
    if isinstance(q, np.ndarray):
        if is_low_precision(q):
            q, k = q.astype(np.float32), k.astype(np.float32)
        kt = np.swapaxes(k, -1, -2)
        with np.errstate(over="ignore", invalid="ignore"):   # inf is the answer, not a warning
            qs = q * np.asarray(scale, dtype=q.dtype)
            return all(np.isfinite(qs @ kt[..., j:j + block]).all()
                       for j in range(0, kt.shape[-1], block))
    torch = sys.modules["torch"]
    work = torch.float32 if is_low_precision(q) else q.dtype
    qs = q.detach().to(work) * scale
    kt = k.detach().to(work).transpose(-1, -2)
    return all(bool(torch.isfinite(qs @ kt[..., j:j + block]).all())
               for j in range(0, kt.shape[-1], block))


def _column_powers_of_two(v: Any) -> Any:
    """Per column of ``v``, the largest power of two not above its largest magnitude (1
    for columns below 1): dividing by it is exact and leaves every entry below 2."""
    if isinstance(v, np.ndarray):
        if is_low_precision(v):
            v = v.astype(np.float32)
        top = np.abs(v).reshape(-1, v.shape[-1]).max(axis=0) if v.size else \
            np.ones(v.shape[-1], dtype=v.dtype)
        return np.exp2(np.floor(np.log2(np.maximum(top, 1)))).astype(v.dtype)
    torch = sys.modules["torch"]
    work = torch.float32 if is_low_precision(v) else v.dtype
    top = v.detach().to(work).abs().reshape(-1, v.shape[-1]).amax(dim=0) if v.numel() \
        else torch.ones(v.shape[-1], dtype=work, device=v.device)
    return torch.exp2(torch.floor(torch.log2(torch.clamp(top, min=1))))


def layer_guard(x_q: Any, x_kv: Any, weights: dict[str, Any], *,
                names: tuple[str, str] = ("x_q", "x_kv"), rows_q: int, rows_k: int,
                n_k: int, d_head: int, group: int = 1) -> bool:
    """The certificate of :func:`attention_guard` for a whole multi-head layer.

    ``x_q`` and ``x_kv`` are the caller's inputs (the same array for self-attention),
    ``names`` the caller's names for them; ``weights`` holds the layer's
    ``params.w_q`` ... ``params.b_o`` (biases may be ``None``) under the names to report.
    ``rows_q`` and ``rows_k`` count the query and key rows over all batch entries. The
    projections are bounded by ``||X W + 1 b^T||_F <= ||X||_F ||W||_F + sqrt(rows) ||b||``
    and must fit in the inputs' own dtype (they are computed in it); each head's output
    row is an average of value rows, so the concatenated heads are bounded by
    ``sqrt(rows_q)`` times the values' norm (times ``sqrt(group)`` when ``group`` query
    heads share each key/value head, as in grouped-query attention). (A rotation of the queries and keys, as RoPE
    applies, keeps these norms.) Returns True if the layer cannot produce a non-finite
    number. Otherwise raises ``ValueError`` naming the first non-finite input, or returns
    False: then the caller checks the projections, runs :func:`attention_guard` on them
    and checks the result.
    """
    present = {names[0]: x_q, names[1]: x_kv}
    present.update({n: w for n, w in weights.items() if w is not None})
    if under_vmap(*present.values()):
        return True
    found = dict(zip(present, norms(*present.values())))
    xq_norm, xkv_norm = found[names[0]], found[names[1]]
    wq, wk, wv, wo = (found[f"params.w_{p}"] for p in "qkvo")
    bq, bk, bv, bo = (found.get(f"params.b_{p}", 0.0) for p in "qkvo")
    rq, rk = math.sqrt(rows_q), math.sqrt(rows_k)
    q = xq_norm * wq + rq * bq
    k = xkv_norm * wk + rk * bk
    v = xkv_norm * wv + rk * bv
    heads = rq * math.sqrt(group) * v
    in_dtype = [xq_norm * wq, xkv_norm * wk, xkv_norm * wv, q, k, v, heads * wo,
                heads * wo + rq * bo]
    s = 1.0 / math.sqrt(d_head)
    in_work = [s * q * k, math.sqrt(max(n_k, 1)) * v]
    if (all(math.isfinite(norm) for norm in found.values())
            and all(b <= _own_limit(x_q) for b in in_dtype)
            and all(b <= _limit(x_q) for b in in_work)):
        return True
    bad = find_non_finite(**present)
    if bad is not None:
        raise non_finite_error(bad, present[bad])
    return False


def _own_limit(x: Any) -> float:
    """Like :func:`_limit`, for ``x``'s own dtype (float16 included)."""
    if isinstance(x, np.ndarray):
        return float(np.finfo(x.dtype).max) / _MARGIN
    return float(sys.modules["torch"].finfo(x.dtype).max) / _MARGIN
