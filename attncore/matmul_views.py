"""Four ways to read the matrix product C = A B, each built the way it reads.

For ``A`` of shape ``(m, p)`` and ``B`` of shape ``(p, n)``:

* entry view      C[i, j] = A[i, :] . B[:, j]                    (m n dot products)
* column view     C[:, j] = sum_t B[t, j] A[:, t]                (columns of A, weighted)
* row view        C[i, :] = sum_t A[i, t] B[t, :]                (rows of B, weighted)
* outer products  C       = sum_t outer(A[:, t], B[t, :])        (p rank-one matrices)

Each function loops explicitly over its view's unit so that a reader can follow it; all four
do the same 2 m n p floating-point operations as ``A @ B`` and return the same matrix (equal
up to the order in which floating-point sums are rounded; exactly equal when every partial
sum is representable, e.g. small integers). They are for reading, not for speed: Python
loops run far slower than BLAS.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backend import NUMPY, backend_of, check_floating, check_rank, check_same_dtype, shape_of


def _check(a: Any, b: Any) -> str:
    backend = backend_of(a=a, b=b)
    check_floating("a", a)
    check_floating("b", b)
    check_rank("a", a, 2, "(m, p)")
    check_rank("b", b, 2, "(p, n)")
    check_same_dtype(a=a, b=b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b: inner dimensions must agree, a has shape {shape_of(a)} "
                         f"(p={a.shape[1]}), b has shape {shape_of(b)} (p={b.shape[0]})")
    return backend


# The four functions share their arguments, result and errors; the decorator below adds
# those sections to each docstring.
_SHARED_SECTIONS = """
    Parameters
    ----------
    a : numpy.ndarray or torch.Tensor, shape ``(m, p)``, floating
    b : same library and dtype as ``a``, shape ``(p, n)``

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(m, n)``
        Same library, dtype and device as ``a``; equal to ``a @ b`` up to the order of
        the rounded sums.

    Raises
    ------
    TypeError
        Mixed libraries, non-floating or mismatched dtypes.
    ValueError
        A rank other than 2, or inner dimensions that differ.
"""


def _shared_sections(fn):
    if fn.__doc__ is not None:                   # (python -OO strips docstrings)
        fn.__doc__ = fn.__doc__.rstrip() + "\n" + _SHARED_SECTIONS
    return fn


def _zeros(backend: str, shape: tuple[int, ...], like: Any) -> Any:
    if backend == NUMPY:
        return np.zeros(shape, dtype=like.dtype)
    import torch

    return torch.zeros(shape, dtype=like.dtype, device=like.device)


@_shared_sections
def matmul_by_entries(a: Any, b: Any) -> Any:
    """``A @ B`` one entry at a time: ``C[i, j]`` is the dot product of row i of A and column j of B."""
    backend = _check(a, b)
    m, n = a.shape[0], b.shape[1]
    c = _zeros(backend, (m, n), a)
    for i in range(m):
        for j in range(n):
            c[i, j] = (a[i, :] * b[:, j]).sum()
    return c


@_shared_sections
def matmul_by_columns(a: Any, b: Any) -> Any:
    """``A @ B`` one column at a time: column j of C combines the columns of A with weights B[:, j]."""
    backend = _check(a, b)
    m, p = a.shape
    n = b.shape[1]
    c = _zeros(backend, (m, n), a)
    for j in range(n):
        for t in range(p):
            c[:, j] += b[t, j] * a[:, t]
    return c


@_shared_sections
def matmul_by_rows(a: Any, b: Any) -> Any:
    """``A @ B`` one row at a time: row i of C combines the rows of B with weights A[i, :].

    This is how attention reads ``A V``: output row i is the weight-averaged value rows."""
    backend = _check(a, b)
    m, p = a.shape
    n = b.shape[1]
    c = _zeros(backend, (m, n), a)
    for i in range(m):
        for t in range(p):
            c[i, :] += a[i, t] * b[t, :]
    return c


@_shared_sections
def matmul_by_outer_products(a: Any, b: Any) -> Any:
    """``A @ B`` as a sum of p rank-one matrices: ``sum_t outer(A[:, t], B[t, :])``.

    Each term needs only column t of A and row t of B, so the terms can be accumulated one
    block of t at a time: the idea behind tiled (flash) attention."""
    backend = _check(a, b)
    m, p = a.shape
    n = b.shape[1]
    c = _zeros(backend, (m, n), a)
    for t in range(p):
        c += a[:, t][:, None] * b[t, :][None, :]
    return c


MATMUL_VIEWS = {
    "entries": matmul_by_entries,
    "columns": matmul_by_columns,
    "rows": matmul_by_rows,
    "outer products": matmul_by_outer_products,
}
"""The four views by name (``"entries"``, ``"columns"``, ``"rows"``,
``"outer products"``), for loops over all of them."""
