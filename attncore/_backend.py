"""Which library an input belongs to, and the checks every public function shares.

attncore has one API and two backends. The backend is chosen by the inputs themselves:
NumPy arrays run on the NumPy reference code, torch tensors on the torch code, on the
device the tensors already live on. This module holds that dispatch and the argument
checks, so that every public function reports bad input the same way: the argument's
name, what it got, and what was expected.

torch is never imported here. A tensor can only exist if the caller imported torch, so
``sys.modules`` tells us whether one can be present; attncore's NumPy half works without
torch installed.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

NUMPY = "numpy"
TORCH = "torch"


def is_torch_tensor(x: Any) -> bool:
    """True if ``x`` is a ``torch.Tensor`` (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _kind(name: str, x: Any) -> str:
    if isinstance(x, np.ndarray):
        return NUMPY
    if is_torch_tensor(x):
        return TORCH
    raise TypeError(
        f"{name}: expected a numpy.ndarray or a torch.Tensor, got {type(x).__name__}"
    )


def backend_of(**arrays: Any) -> str:
    """Return ``"numpy"`` or ``"torch"``: the one library that all given arrays belong to.

    Arguments whose value is ``None`` are skipped (optional inputs such as ``mask``).
    Raises ``TypeError`` naming the arguments when they mix NumPy arrays and torch
    tensors, and ``ValueError`` when torch tensors sit on different devices.
    """
    kinds = {name: _kind(name, x) for name, x in arrays.items() if x is not None}
    found = set(kinds.values())
    if len(found) > 1:
        listing = ", ".join(f"{n} is a {'torch.Tensor' if k == TORCH else 'numpy.ndarray'}"
                            for n, k in kinds.items())
        raise TypeError(
            f"cannot mix NumPy arrays and torch tensors in one call ({listing}); "
            "convert them all to one library first"
        )
    backend = found.pop() if found else NUMPY
    if backend == TORCH:
        devices = {name: x.device for name, x in arrays.items() if x is not None}
        if len(set(devices.values())) > 1:
            listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
            raise ValueError(f"all tensors must be on one device, got {listing}")
    return backend


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def dtype_name(x: Any) -> str:
    return str(x.dtype).replace("torch.", "")


def is_floating(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return np.issubdtype(x.dtype, np.floating)
    return bool(x.dtype.is_floating_point)


def is_bool(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype == np.bool_
    return str(x.dtype) == "torch.bool"


def check_floating(name: str, x: Any) -> None:
    """Raise ``TypeError`` unless ``x`` has a real floating dtype."""
    if not is_floating(x):
        raise TypeError(
            f"{name}: expected a floating dtype (float16, bfloat16, float32 or float64), "
            f"got {dtype_name(x)}"
        )


def check_min_rank(name: str, x: Any, rank: int, layout: str) -> None:
    """Raise ``ValueError`` unless ``x.ndim >= rank``; ``layout`` describes the expected shape."""
    if x.ndim < rank:
        raise ValueError(
            f"{name}: expected shape {layout} (at least {rank} dimensions), "
            f"got shape {shape_of(x)} with {x.ndim}"
        )


def check_rank(name: str, x: Any, rank: int, layout: str) -> None:
    """Raise ``ValueError`` unless ``x.ndim == rank``."""
    if x.ndim != rank:
        raise ValueError(
            f"{name}: expected shape {layout} ({rank} dimensions), "
            f"got shape {shape_of(x)} with {x.ndim}"
        )


def check_same_dtype(**arrays: Any) -> None:
    """Raise ``TypeError`` unless all given arrays share one dtype.

    Silent promotion (float32 with float64) would hide a mistake and change the cost, so
    attncore asks the caller to choose.
    """
    dtypes = {name: dtype_name(x) for name, x in arrays.items() if x is not None}
    if len(set(dtypes.values())) > 1:
        listing = ", ".join(f"{n} is {d}" for n, d in dtypes.items())
        raise TypeError(f"expected one floating dtype for all inputs, got {listing}")


def _extremes_finite(x: Any) -> Any:
    # max and min propagate NaN, and are finite exactly when every entry is: two reductions
    # instead of an elementwise isfinite mask as large as x.
    if isinstance(x, np.ndarray):
        return np.isfinite(x.max()) and np.isfinite(x.min()) if x.size else True
    torch = sys.modules["torch"]
    if x.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=x.device)
    return torch.isfinite(x.amax()) & torch.isfinite(x.amin())


def check_all_finite(**arrays: Any) -> None:
    """Raise ``ValueError`` naming the first argument that holds NaN or +-inf.

    A NaN in an input would otherwise spread silently through every softmax row it touches.
    For torch tensors the per-array answers are combined on the device and read back once, so
    a CUDA call waits for the GPU only once.
    """
    named = [(n, x) for n, x in arrays.items() if x is not None]
    oks = [_extremes_finite(x) for _, x in named]
    if oks and not isinstance(named[0][1], np.ndarray):
        torch = sys.modules["torch"]
        if bool(torch.stack(oks).all()):
            return
        oks = [bool(ok) for ok in oks]
    for (name, x), ok in zip(named, oks):
        if not ok:
            raise ValueError(f"{name}: expected finite values, got NaN or infinity "
                             f"in an array of shape {shape_of(x)}")


def check_finite(name: str, x: Any) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN or +-inf (see :func:`check_all_finite`)."""
    check_all_finite(**{name: x})


def check_attention_inputs(q: Any, k: Any, v: Any, *, mask: Any = None,
                           scale: float | None = None) -> tuple[tuple[int, ...], int, int]:
    """Validate the inputs of an attention call; return ``(q.shape, n_q, n_k)``.

    Shared by every attention variant in attncore so that all of them reject the same bad
    input with the same message.
    """
    for name, x, layout in (("q", q, "(..., n_q, d_k)"), ("k", k, "(..., n_k, d_k)"),
                            ("v", v, "(..., n_k, d_v)")):
        check_floating(name, x)
        check_min_rank(name, x, 2, layout)
    check_same_dtype(q=q, k=k, v=v)
    qs, ks, vs = shape_of(q), shape_of(k), shape_of(v)
    if qs[-1] != ks[-1]:
        raise ValueError(f"q and k must have the same d_k (last axis): q has shape {qs} "
                         f"(d_k={qs[-1]}), k has shape {ks} (d_k={ks[-1]})")
    if ks[-2] != vs[-2]:
        raise ValueError(f"k and v must have the same n_k (one value per key): k has shape "
                         f"{ks} (n_k={ks[-2]}), v has shape {vs} (n_k={vs[-2]})")
    if not qs[:-2] == ks[:-2] == vs[:-2]:
        raise ValueError(f"q, k and v must have the same batch shape (...): got q {qs}, "
                         f"k {ks}, v {vs}")
    n_q, n_k = qs[-2], ks[-2]
    if mask is not None:
        if not is_bool(mask):
            raise TypeError(f"mask: expected a boolean array (True = may attend), "
                            f"got dtype {dtype_name(mask)}")
        target = qs[:-2] + (n_q, n_k)
        try:
            joint = np.broadcast_shapes(shape_of(mask), target)
        except ValueError:
            joint = None
        if joint != target:
            raise ValueError(f"mask: expected a shape broadcastable to (..., n_q, n_k) = "
                             f"{target}, got {shape_of(mask)}")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"scale: expected a finite real number, got {scale!r}")
    check_all_finite(q=q, k=k, v=v)
    return qs, n_q, n_k
