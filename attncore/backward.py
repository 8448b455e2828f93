"""The backward pass of attention: the gradients of ``q``, ``k`` and ``v``, by hand.

For ``S = scale * Q K^T``, ``A = softmax(S)`` row by row, ``O = A V`` and the gradient
``dO = dL/dO`` of a scalar loss ``L``, the chain rule gives (one matrix per batch entry)::

    dV = A^T dO                          (n_k, d_v)
    dA = dO V^T                          (n_q, n_k)
    dS = A * (dA - rowsum(dA * A))       (n_q, n_k)   the softmax's Jacobian, row by row
    dQ = scale * dS K                    (n_q, d_k)
    dK = scale * dS^T Q                  (n_k, d_k)

:func:`attention_backward` computes them in that order, forming the weights ``A``: the
reference, and ``O(n_q * n_k)`` memory. :func:`tiled_attention_backward` computes the same
gradients one block of keys at a time from what the forward pass of
:func:`~attncore.tiled_attention` returns with ``return_lse=True``: the output ``O`` and
the row log-sum-exp ``L`` of the scores. ``A_ij = exp(S_ij - L_i)`` recomputes any weight,
and ``rowsum(dA * A) = rowsum(dO * O)`` gives the row sums without the weights, so no
``(n_q, n_k)`` array is ever held (FlashAttention's backward pass). The block loop is
:func:`attncore.tiled._tiled_backward`, which the autograd function of ``tiled_attention``
runs too.

Both take NumPy arrays or torch tensors (computed on the tensors' device, without autograd)
and check their inputs as every attention function in attncore does; float16 and bfloat16
inputs are computed in float32 and the gradients cast back.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    AttentionShape,
    backend_of,
    check_all_finite,
    check_attention_inputs,
    check_floating,
    check_same_dtype,
    check_size,
    dtype_name,
    find_non_finite,
    shape_of,
    under_vmap,
)
from ._guard import attention_guard, is_low_precision, transform_running, work_dtype_name
from .attention import combined_mask
from .online_softmax import _finite_or_zero, _row_max, _row_sum, _xp
from .tiled import _tiled_backward, _transpose

__all__ = ["attention_backward", "tiled_attention_backward"]

# How far the recomputed weights' row sums may be from 1 (a wrong ``lse`` moves them by the
# factor exp(-error)), by working dtype; and how far dS's row sums may be from 0, relative
# to ||dO_i|| max_j ||v_j||, by the dtype ``out`` was rounded to.
_LSE_TOLERANCE = {"float64": 1e-6, "float32": 1e-3}
_OUT_TOLERANCE = {"float64": 1e-6, "float32": 1e-3, "float16": 3e-2, "bfloat16": 3e-2}


def attention_backward(q: Any, k: Any, v: Any, d_out: Any, *, mask: Any = None,
                       causal: bool = False, scale: Any = None) -> tuple[Any, Any, Any]:
    """Gradients of scaled dot-product attention, computed from the weights ``A``.

    The reference backward pass of :func:`~attncore.scaled_dot_product_attention`: given
    the gradient ``d_out`` of a loss with respect to the attention output, it returns the
    gradients with respect to ``q``, ``k`` and ``v``, by the formulas of the module
    docstring. It forms ``(..., n_q, n_k)`` arrays (the weights and their gradient); see
    :func:`tiled_attention_backward` for the same gradients without them.

    Parameters
    ----------
    q : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_k)``, floating
    k : same library and dtype, shape ``(..., n_k, d_k)``
    v : same library and dtype, shape ``(..., n_k, d_v)``
    d_out : same library and dtype, shape ``(..., n_q, d_v)``
        The gradient of the loss with respect to the output, exactly the output's shape
        (nothing is broadcast).
    mask, causal, scale
        As for :func:`~attncore.scaled_dot_product_attention`, with the same checks.

    Returns
    -------
    dq : shape ``(..., n_q, d_k)``
    dk : shape ``(..., n_k, d_k)``
    dv : shape ``(..., n_k, d_v)``
        Same library, device and dtype as ``q`` (torch tensors that carry no autograd
        history). A masked query-key pair contributes nothing; a query row with no
        admissible key gets a zero row of ``dq`` and contributes nothing to ``dk`` and
        ``dv``: zeros, never NaN.

    Raises
    ------
    TypeError, ValueError
        As the forward pass for ``q, k, v, mask, causal, scale``; for ``d_out``: another
        library or device, another dtype, another shape than the output's, NaN or
        infinity. ``ValueError`` also if a gradient overflows the working precision.

    Examples
    --------
    One query, two keys with weights 3/4 and 1/4: only the values' gradient is
    nonzero when every value is the same (the output cannot move).

    >>> import numpy as np, attncore as ac
    >>> q, k = np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> v, d_out = np.array([[2.0], [2.0]]), np.array([[1.0]])
    >>> dq, dk, dv = ac.attention_backward(q, k, v, d_out, scale=np.log(3.0))
    >>> dq, dk, dv.round(6)
    (array([[0., 0.]]), array([[0., 0.],
           [0., 0.]]), array([[0.75],
           [0.25]]))
    """
    shape = check_attention_inputs(q, k, v, mask=mask, causal=causal, scale=scale)
    _check_like_output("d_out", d_out, q, shape)
    guard = attention_guard(q, k, v, shape)
    vmapped = under_vmap(q, k, v, d_out)
    if not vmapped:
        check_all_finite(d_out=d_out)
    with _backward_context(q, guard.certified):
        grads = _reference_backward(*_working(q, k, v, d_out), mask, shape)
    if not vmapped:
        _check_gradients_finite(q, grads)
    return tuple(_cast(g, q) for g in grads)


def _reference_backward(q: Any, k: Any, v: Any, d_out: Any, mask: Any,
                        shape: AttentionShape) -> tuple[Any, Any, Any]:
    """The five formulas, in the working dtype, with the weights formed. (Peak memory:
    three ``(..., n_q, n_k)`` arrays, ``A``, ``dA`` and the product ``dA * A``.)"""
    scale = shape.scale
    a = _weights(q, k, mask, shape)                      # A             (..., n_q, n_k)
    dv = _transpose(a) @ d_out                           # dV = A^T dO   (..., n_k, d_v)
    ds = d_out @ _transpose(v)                           # dA = dO V^T   (..., n_q, n_k)
    ds -= _row_sum(ds * a)                               # dA - rowsum(dA * A), then
    ds *= a                                              # dS = A * (dA - rowsum(dA * A))
    dq = ds @ k                                          # dQ = scale dS K    (n_q, d_k)
    dq *= scale
    dk = _transpose(ds) @ q                              # dK = scale dS^T Q  (n_k, d_k)
    dk *= scale
    return dq, dk, dv


def _weights(q: Any, k: Any, mask: Any, shape: AttentionShape) -> Any:
    """``A = softmax(scale * q @ k^T)`` with masked scores ``-inf``: zero rows where no
    key is admissible (the forward pass's rule)."""
    xp = _xp(q)
    s = (q * shape.scale) @ _transpose(k)
    allowed = combined_mask(mask, shape.causal, shape.n_q, shape.n_k, q)
    if allowed is not None:
        s = xp.where(allowed, s, _neg_inf(s))
    if not shape.n_k:
        return s                                  # no key: weights of width 0
    e = xp.exp(s - _finite_or_zero(_row_max(s)))  # the stable softmax; exp(-inf) = 0
    total = _row_sum(e)
    return e / xp.where(total > 0, total, xp.ones_like(total))   # empty row: 0 / 1


def tiled_attention_backward(q: Any, k: Any, v: Any, d_out: Any, *, out: Any, lse: Any,
                             mask: Any = None, causal: bool = False, scale: Any = None,
                             block_size: int = 128) -> tuple[Any, Any, Any]:
    """Gradients of attention one block of keys at a time, from the output and row
    log-sum-exp of the forward pass (FlashAttention's backward pass).

    The same gradients as :func:`attention_backward`, without any ``(..., n_q, n_k)``
    array: for each block of ``block_size`` keys the scores are recomputed, the weights
    are ``exp(s - lse)``, and the row sums ``rowsum(dA * A)`` are ``rowsum(d_out * out)``.
    Feed it what ``tiled_attention(q, k, v, ..., return_lse=True)`` returns::

        out, lse = ac.tiled_attention(q, k, v, causal=True, return_lse=True)
        dq, dk, dv = ac.tiled_attention_backward(q, k, v, d_out, out=out, lse=lse,
                                                 causal=True)

    Parameters
    ----------
    q, k, v, d_out
        As for :func:`attention_backward`.
    out : same library and dtype as ``q``, shape ``(..., n_q, d_v)``
        The forward pass's output for these ``q, k, v, mask, causal, scale``, without
        dropout (the gradients are those of attention without dropout; an output of
        ``tiled_attention(..., dropout_p=p)`` with ``p > 0`` is refused, see Raises).
    lse : same library, shape ``(..., n_q)``
        The forward pass's row log-sum-exp of the scores (``-inf`` for a row with no
        admissible key), in float32 for float16 and bfloat16 inputs, else in ``q``'s
        dtype: as :func:`~attncore.tiled_attention` returns it.
    mask, causal, scale
        As for :func:`~attncore.scaled_dot_product_attention`: the forward pass's.
    block_size : int, default 128
        Keys per block, a positive integer; it need not divide ``n_k`` nor equal the
        forward pass's.

    Returns
    -------
    dq, dk, dv
        As :func:`attention_backward` (equal to its result up to rounding).

    Raises
    ------
    TypeError, ValueError
        As :func:`attention_backward`, and for bad ``out``, ``lse`` or ``block_size``.
        ``lse`` and ``out`` cannot be checked against a forward pass that is not run
        again, but the loop checks what they imply, at no extra pass over the blocks: a
        ``lse`` whose weights ``exp(s - lse)`` do not sum to 1 in a row with keys (0 in
        one without) is a ``ValueError``, and so is an ``out`` for which ``dS``'s row sums,
        which are 0 for the true output, are not 0 (within the rounding of the dtype).
    NotImplementedError
        Under a ``torch.func`` transform or forward-mode AD (the block loop accumulates
        the gradients in place): differentiate :func:`~attncore.tiled_attention` itself,
        which supports them, or call this on batched tensors directly.

    Notes
    -----
    Memory: besides the inputs and the three gradients, ``scale * q`` and two
    ``(..., n_q, block_size)`` blocks (the weights, and ``dS`` in the memory of ``dA``):
    ``O(n_q * (block_size + d_k))`` per batch entry. Arithmetic: five matrix products per
    block (the scores are recomputed), against four for a backward pass that keeps ``A``.
    """
    shape = check_attention_inputs(q, k, v, mask=mask, causal=causal, scale=scale)
    block_size = check_size("block_size", block_size)
    _check_like_output("d_out", d_out, q, shape)
    _check_like_output("out", out, q, shape)
    if shape.backend != NUMPY and under_vmap(q, k, v, d_out, out, lse, mask):
        raise NotImplementedError(
            "tiled_attention_backward: torch.func.vmap is not supported (the block loop "
            "accumulates the gradients in place); it takes any number of leading batch "
            "axes, so call it on the batched tensors directly, or use attention_backward")
    if shape.backend != NUMPY and transform_running():
        raise NotImplementedError(
            "tiled_attention_backward: torch.func transforms (grad, jacrev, jvp, jacfwd) "
            "and forward-mode AD are not supported (the block loop accumulates the "
            "gradients in place); differentiate tiled_attention itself, which supports "
            "them")
    _check_lse(lse, q, shape)
    guard = attention_guard(q, k, v, shape)
    check_all_finite(d_out=d_out, out=out)
    qw, kw, vw, dow, ow = _working(q, k, v, d_out, out)
    with _backward_context(q, guard.certified):
        dq, dk, dv, weight_sums, ds_sums = _tiled_backward(
            qw, kw, vw, mask, shape, block_size, ow, lse[..., None], dow)
    _check_row_sums(weight_sums, ds_sums, lse, qw, kw, vw, dow, shape, dtype_name(q))
    grads = (dq, dk, dv)
    _check_gradients_finite(q, grads)
    return tuple(_cast(g, q) for g in grads)


# --- checks ------------------------------------------------------------------------------

def _check_like_output(name: str, x: Any, q: Any, shape: AttentionShape) -> None:
    """``x`` (``d_out`` or ``out``) must look exactly like the attention output."""
    backend_of(q=q, **{name: x})
    check_floating(name, x)
    check_same_dtype(q=q, **{name: x})
    want = shape.batch + (shape.n_q, shape.d_v)
    if shape_of(x) != want:
        raise ValueError(f"{name}: expected the shape of the attention output (..., n_q, "
                         f"d_v) = {want}, got {shape_of(x)} (nothing is broadcast)")


def _check_lse(lse: Any, q: Any, shape: AttentionShape) -> None:
    backend_of(q=q, lse=lse)
    check_floating("lse", lse)
    want_dtype = work_dtype_name(q)
    if dtype_name(lse) != want_dtype:
        why = "" if want_dtype == dtype_name(q) else \
            f" (the forward pass keeps the statistic of {dtype_name(q)} inputs in float32)"
        raise TypeError(f"lse: expected dtype {want_dtype}{why}, got {dtype_name(lse)}")
    want = shape.batch + (shape.n_q,)
    if shape_of(lse) != want:
        raise ValueError(f"lse: expected one number per query row, shape (..., n_q) = "
                         f"{want}, got {shape_of(lse)}")
    xp = _xp(lse)
    if bool((xp.isnan(lse) | xp.isposinf(lse)).any()):
        raise ValueError("lse: expected finite row log-sum-exps, or -inf for a row with no "
                         "admissible key, got NaN or +inf")


def _check_row_sums(weight_sums: Any, ds_sums: Any, lse: Any, q: Any, k: Any, v: Any,
                    d_out: Any, shape: AttentionShape, input_dtype: str) -> None:
    """What ``lse`` and ``out`` imply, checked after the loop (see the docstring).

    ``q, k, v, d_out`` are in the working dtype. The recomputed scores and ``lse`` carry
    rounding errors of about ``eps * (|scale| ||q_i|| max_j ||k_j|| + |lse_i|)``, which
    become relative errors of the weights: the tolerances grow with that, so that large
    scores in float32 are not mistaken for a wrong ``lse``.
    """
    xp = _xp(weight_sums)
    lse = lse[..., None]
    has_keys = xp.isfinite(lse)
    eps = float(np.finfo(np.dtype(work_dtype_name(q))).eps)
    k_norm = float(_row_norms(k).max()) if _size(k) else 0.0
    slack = 16 * eps * (abs(shape.scale) * _row_norms(q) * k_norm
                        + xp.where(has_keys, xp.abs(lse), xp.zeros_like(lse)))
    expected = xp.where(has_keys, xp.ones_like(weight_sums), xp.zeros_like(weight_sums))
    off = xp.abs(weight_sums - expected)
    off = xp.where(xp.isnan(off), xp.full_like(off, np.inf), off)   # NaN counts as off
    lse_tol = _LSE_TOLERANCE[work_dtype_name(q)] + slack
    if bool((off > lse_tol).any()):
        worst = float(off.max())
        raise ValueError(
            f"lse: expected the row log-sum-exp of the scores of these q, k, mask, causal "
            f"and scale (as tiled_attention(..., return_lse=True) returns it), got values "
            f"whose weights exp(s - lse) miss the row sum 1 (0 for a row with no key) by "
            f"up to {worst:.3g}")
    # dS's row sums are sum_j A_ij dA_ij - D_i sum_j A_ij: 0 when D = rowsum(dO * O) is
    # right. An error in out, in the weights or in dA shows in units of
    # ||dO_i|| max_j ||v_j|| (which bounds |dA_ij|, and |D_i| for the true output).
    unit = _row_norms(d_out) * (float(_row_norms(v).max()) if _size(v) else 0.0)
    out_tol = _OUT_TOLERANCE[input_dtype] + lse_tol + slack
    if bool((xp.abs(ds_sums) > out_tol * unit + np.finfo(np.float32).tiny).any()):
        raise ValueError(
            "out: expected the attention output of these q, k, v, mask, causal and scale "
            "(as tiled_attention returns it), got one for which rowsum(d_out * out) is not "
            "the weighted sum of d_out @ v^T (dS's row sums are not 0). The output of a "
            "forward pass with dropout (dropout_p > 0) is such a one: this function "
            "differentiates attention without dropout; on torch, differentiate "
            "tiled_attention(..., dropout_p=p) itself, whose backward pass drops the same "
            "weights")


def _size(x: Any) -> int:
    return x.size if isinstance(x, np.ndarray) else x.numel()


def _row_norms(x: Any) -> Any:
    """Euclidean norm of each row, ``(..., n, 1)``."""
    if isinstance(x, np.ndarray):
        return np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    return x.norm(dim=-1, keepdim=True)


def _check_gradients_finite(q: Any, grads: tuple[Any, Any, Any]) -> None:
    """Inputs are finite and the scores fit (the guard), but the products of the backward
    pass (``dO V^T``, ``dS K``) can still overflow for numbers near the dtype's largest."""
    bad = find_non_finite(dq=grads[0], dk=grads[1], dv=grads[2])
    if bad is not None:
        raise ValueError(f"{bad}: expected finite gradients, got +-infinity or NaN (a "
                         f"product of the backward pass overflowed dtype "
                         f"{work_dtype_name(q)}); use a wider dtype or smaller q, k, v or "
                         f"d_out")


# --- the working dtype and the context ----------------------------------------------------

def _working(*arrays: Any) -> tuple[Any, ...]:
    """The arrays in the working dtype: float32 for float16 and bfloat16 (no copies
    otherwise), detached from autograd on torch."""
    if isinstance(arrays[0], np.ndarray):
        if is_low_precision(arrays[0]):
            return tuple(x.astype(np.float32) for x in arrays)
        return arrays
    import torch

    work = torch.float32 if is_low_precision(arrays[0]) else arrays[0].dtype
    return tuple(x.detach().to(work) for x in arrays)


def _cast(x: Any, like: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.astype(like.dtype, copy=False)
    return x.to(like.dtype)


def _neg_inf(like: Any) -> Any:
    if isinstance(like, np.ndarray):
        return np.asarray(-np.inf, dtype=like.dtype)
    return like.new_tensor(float("-inf"))


def _backward_context(q: Any, certified: bool) -> Any:
    """Gradients off on torch; on NumPy, no overflow warning where the guard checked the
    scores one by one (a score near the largest float minus ``lse`` may round to -inf,
    whose exponential is the right weight 0), as in the forward pass."""
    if not isinstance(q, np.ndarray):
        import torch

        return torch.no_grad()
    return np.errstate(over="ignore") if not certified else nullcontext()
