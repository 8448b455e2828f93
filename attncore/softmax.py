"""The softmax, computed stably, on NumPy arrays and torch tensors.

``softmax(x)[..., j] = exp(x_j) / sum_l exp(x_l)`` along one axis. Subtracting the row
maximum ``m`` first changes nothing mathematically (the factor ``exp(-m)`` cancels between
numerator and denominator) and everything numerically: every exponent becomes ``<= 0``, so
``exp`` never overflows, and the largest term is exactly 1, so the denominator is ``>= 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backend import NUMPY, backend_of, check_axis, check_floating, dtype_name

__all__ = ["softmax"]


def softmax(x: Any, axis: int = -1) -> Any:
    """Numerically stable softmax of ``x`` along ``axis``.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape ``(...)`` with at least one axis
        Logits, of a floating dtype (float16, float32, float64; bfloat16 on torch; NumPy's
        longdouble and torch's 8-bit floats are refused). A NumPy subclass whose meaning
        differs (``numpy.matrix``, a masked array) is refused too.
        Entries equal to ``-inf`` get probability 0: this is how masked keys are
        excluded. NaN and ``+inf`` are rejected.
    axis : int, default -1
        The axis that sums to one.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        The same shape, dtype, library and device as ``x``. Along ``axis`` the entries
        are in ``[0, 1]`` and sum to 1, except for a slice whose entries are all ``-inf``:
        it has no admissible entry, and attncore returns **zeros** for it rather than
        ``0/0 = NaN``. An empty axis (length 0) gives an empty result.

    Raises
    ------
    TypeError
        ``x`` is not a floating array, or ``axis`` is not an integer (``None`` included:
        the softmax normalises along one axis, not over the whole array).
    ValueError
        ``x`` is 0-dimensional or contains NaN or ``+inf``, or ``axis`` is out of range.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> ac.softmax(np.array([0.0, np.log(3.0)]))
    array([0.25, 0.75])
    """
    backend = backend_of(x=x)
    check_floating("x", x)
    if x.ndim == 0:
        raise ValueError("x: expected an array with at least 1 dimension (the axis to "
                         "normalise over), got a 0-dimensional array")
    axis = check_axis("axis", axis, x)
    if x.shape[axis] == 0:
        return x.copy() if backend == NUMPY else x.clone()
    if backend == NUMPY:
        m = np.max(x, axis=axis, keepdims=True)
        bad = np.isnan(m).any() or np.isposinf(m).any()
    else:
        import torch

        m = torch.amax(x, dim=axis, keepdim=True)
        bad = bool((torch.isnan(m) | torch.isposinf(m)).any())
    if bad:
        # The maximum of a slice is NaN or +inf exactly when the slice holds one.
        raise ValueError(f"x: expected no NaN or +inf logits, got some (dtype "
                         f"{dtype_name(x)})")
    return (_softmax_numpy if backend == NUMPY else _softmax_torch)(x, m, axis)


def _softmax_numpy(x: np.ndarray, m: np.ndarray, axis: int) -> np.ndarray:
    # A slice of all -inf has m = -inf and x - m = NaN; shifting it by 0 instead leaves
    # exp(-inf) = 0 everywhere, which the division below turns into zeros.
    e = np.exp(x - np.where(np.isfinite(m), m, 0))
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _softmax_torch(x: Any, m: Any, axis: int) -> Any:
    import torch

    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = torch.sum(e, dim=axis, keepdim=True)
    # Dividing by 1 where the total is 0 keeps the gradient finite in the unused branch.
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return torch.where(total > 0, e / safe, torch.zeros_like(e))
