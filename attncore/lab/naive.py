"""Deliberately naive versions of stable functions, kept only to show how they fail.

Nothing in attncore calls these. They exist so that a chapter can put the textbook formula
next to the stable one and let the reader watch the textbook one overflow. For real work use
:func:`~attncore.softmax`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend import NUMPY, backend_of, check_floating, check_min_rank

__all__ = ["naive_softmax"]


def naive_softmax(x: Any, axis: int = -1) -> Any:
    """Textbook softmax ``exp(x) / sum(exp(x))`` **without** subtracting the maximum.

    For demonstration only: this is the formula as first written, and it breaks in finite
    precision. ``exp`` overflows to ``inf`` once a logit exceeds the largest finite value's
    logarithm (about 88.7 in float32 and bfloat16, about 11.1 in float16, about 709.8 in
    float64), and ``inf / inf`` is NaN; when every logit of a slice is very negative, every
    ``exp`` underflows to 0 and ``0 / 0`` is NaN. :func:`~attncore.softmax` computes
    the same function, stably, by subtracting the maximum first.

    Parameters
    ----------
    x : array of shape ``(..., n)`` (at least one axis), floating dtype (float16, bfloat16 (torch), float32, float64)
        Logits, a NumPy array or a torch tensor. The computation runs in ``x``'s own dtype,
        which is the point: float16 overflows where float64 would not.
    axis : int
        The axis that should sum to one.

    Returns
    -------
    Array of the same shape, dtype, library and device as ``x``. Where nothing overflows or
    underflows it agrees with the stable softmax to rounding; otherwise it holds ``inf``,
    ``nan`` or exact zeros, returned silently (NumPy's floating-point warnings are
    suppressed so that a demonstration prints results, not warnings).

    Raises
    ------
    TypeError
        ``x`` is not a floating array.
    ValueError
        ``x`` is 0-dimensional, or ``axis`` is out of range.
    """
    backend = backend_of(x=x)
    check_floating("x", x)
    check_min_rank("x", x, 1, "(..., n)")
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(f"axis: expected an integer in [{-x.ndim}, {x.ndim - 1}] for x of "
                         f"shape {tuple(x.shape)}, got {axis}")
    if backend == NUMPY:
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            e = np.exp(x)
            return e / np.sum(e, axis=axis, keepdims=True)
    import torch

    e = torch.exp(x)
    return e / torch.sum(e, dim=axis, keepdim=True)
