"""The softmax, computed stably, on NumPy arrays and torch tensors.

``softmax(x)[..., j] = exp(x_j) / sum_l exp(x_l)`` along one axis. Subtracting the row
maximum ``m`` first changes nothing mathematically (the factor ``exp(-m)`` cancels between
numerator and denominator) and everything numerically: every exponent becomes ``<= 0``, so
``exp`` never overflows, and the largest term is exactly 1, so the denominator is ``>= 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backend import NUMPY, backend_of, check_floating, dtype_name


def softmax(x: Any, axis: int = -1) -> Any:
    """Numerically stable softmax of ``x`` along ``axis``.

    Parameters
    ----------
    x : array of shape ``(...)``, floating dtype (float16, bfloat16 (torch), float32, float64)
        Logits. Entries equal to ``-inf`` get probability 0; this is how masked keys are
        excluded. ``NaN`` and ``+inf`` are rejected.
    axis : int
        The axis that sums to one.

    Returns
    -------
    Array of the same shape, dtype, library and device as ``x``. Along ``axis`` the entries
    are in ``[0, 1]`` and sum to 1, except for a slice whose entries are all ``-inf``: it has
    no admissible entry, and attncore returns **zeros** for it rather than ``0/0 = NaN``.

    Raises
    ------
    TypeError
        ``x`` is not a floating array.
    ValueError
        ``x`` contains NaN or +inf, or ``axis`` is out of range.
    """
    backend = backend_of(x=x)
    check_floating("x", x)
    if x.ndim == 0:
        raise ValueError("x: expected an array with at least 1 dimension (the axis to "
                         "normalise over), got a 0-dimensional array")
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(f"axis: expected an integer in [{-x.ndim}, {x.ndim - 1}] for x of "
                         f"shape {tuple(x.shape)}, got {axis}")
    if backend == NUMPY:
        return _softmax_numpy(x, axis)
    return _softmax_torch(x, axis)


def _softmax_numpy(x: np.ndarray, axis: int) -> np.ndarray:
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"x: expected no NaN or +inf logits, got some (dtype {x.dtype})")
    m = np.max(x, axis=axis, keepdims=True)
    # A slice of all -inf has m = -inf and x - m = NaN; shifting it by 0 instead leaves
    # exp(-inf) = 0 everywhere, which the division below turns into zeros.
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(x - m)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _softmax_torch(x: Any, axis: int) -> Any:
    import torch

    if bool((torch.isnan(x) | torch.isposinf(x)).any()):
        raise ValueError(f"x: expected no NaN or +inf logits, got some (dtype {dtype_name(x)})")
    m = torch.amax(x, dim=axis, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    total = torch.sum(e, dim=axis, keepdim=True)
    return torch.where(total > 0, e / torch.where(total > 0, total, torch.ones_like(total)),
                       torch.zeros_like(e))
