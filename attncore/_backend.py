"""Which library an input belongs to, and the argument checks every public function shares.

attncore has one API and two backends. The backend is chosen by the inputs themselves:
NumPy arrays run on the NumPy reference code, torch tensors on the torch code, on the
device the tensors already live on. This module holds that dispatch and the argument
checks, so that every public function reports bad input the same way: the argument's
name, what it got, and what was expected. (The check that the *values* are finite, and
that attention's arithmetic cannot overflow, is in :mod:`attncore._guard`.)

torch is never imported here. A tensor can only exist if the caller imported torch, so
``sys.modules`` tells us whether one can be present; attncore's NumPy half works without
torch installed.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any, NamedTuple

import numpy as np

NUMPY = "numpy"
TORCH = "torch"


def is_torch_tensor(x: Any) -> bool:
    """True if ``x`` is a ``torch.Tensor`` (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _kind(name: str, x: Any) -> str:
    if isinstance(x, np.ndarray):
        if isinstance(x, (np.matrix, np.ma.MaskedArray)):
            raise TypeError(f"{name}: expected a numpy.ndarray, got "
                            f"{_SUBCLASSES[isinstance(x, np.matrix)]}; convert it with "
                            f"np.asarray({name})")
        return NUMPY
    if is_torch_tensor(x):
        return TORCH
    raise TypeError(
        f"{name}: expected a numpy.ndarray or a torch.Tensor, got {type(x).__name__}"
    )


_SUBCLASSES = {
    True: "a numpy.matrix (always 2-D, and its * is a matrix product)",
    False: "a numpy.ma.MaskedArray (attncore would ignore its mask; attention takes a "
           "boolean 'may attend' mask= instead)",
}


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


# These run on every call, so they avoid NumPy's dtype-to-string conversion (microseconds
# each); names are formatted only for error messages.

def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(x.shape)


def dtype_name(x: Any) -> str:
    return str(x.dtype).replace("torch.", "")


def is_floating(x: Any) -> bool:
    """A floating dtype attncore computes in: float16, float32 or float64 (NumPy), and
    bfloat16 too (torch). Not NumPy's longdouble (its precision depends on the platform,
    and torch has none), not torch's 8-bit floats (no matrix products on most devices)."""
    if isinstance(x, np.ndarray):
        return x.dtype.kind == "f" and x.dtype.itemsize <= 8
    return bool(x.dtype.is_floating_point) and x.dtype.itemsize >= 2


def is_bool(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype.kind == "b"
    return x.dtype == sys.modules["torch"].bool


def under_vmap(*tensors: Any) -> bool:
    """True if any of ``tensors`` is being batched by ``torch.func.vmap``.

    Under vmap a tensor's values cannot be read back into Python, so checks that look at
    values (finiteness, overflow) cannot run; shapes and dtypes can still be checked.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    functorch = torch._C._functorch
    if functorch.peek_interpreter_stack() is None:     # no transform running: the usual case
        return False
    for x in tensors:
        while isinstance(x, torch.Tensor) and functorch.is_functorch_wrapped_tensor(x):
            if functorch.is_batchedtensor(x):
                return True
            x = functorch.get_unwrapped(x)      # e.g. grad(vmap(f)): look one level in
    return False


# --- arguments that are not arrays ------------------------------------------------------------

def check_flag(name: str, value: Any) -> bool:
    """Return ``value`` as a bool; ``TypeError`` unless it is ``True`` or ``False``.

    Truthiness is not enough: ``causal="False"`` is a non-empty string, and accepting it
    would apply the causal mask the caller meant to switch off. ``numpy.bool_`` is accepted.
    """
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name}: expected True or False, got {value!r} ({type(value).__name__})")


def check_size(name: str, value: Any, *, minimum: int = 1) -> int:
    """Return ``value`` as an int: ``TypeError`` unless it is an integer (not a bool, not a
    float such as ``8.0``), ``ValueError`` if it is below ``minimum``."""
    wanted = {0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected {wanted}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name}: expected {wanted}, got {int(value)}")
    return int(value)


def check_real(name: str, value: Any, *, minimum: float | None = None,
               above: float | None = None) -> float:
    """Return ``value`` as a Python float: a finite real number, ``>= minimum`` and
    ``> above`` (each when given).

    Every real scalar is a number here: a Python int or float and a NumPy integer or
    floating scalar (``np.float32(0.7)`` is what indexing a float32 array gives). A bool
    is not (``eps=True`` is a slip, not the number 1), nor is a string or an array.

    Raises
    ------
    TypeError
        Not a real scalar.
    ValueError
        NaN, infinite, below ``minimum`` or not above ``above``.
    """
    wanted = "a finite number" + ("" if minimum is None else f" >= {minimum:g}") + \
        ("" if above is None else f" > {above:g}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected {wanted}, got {value!r} "
                        f"({type(value).__name__})")
    number = float(value)
    if not math.isfinite(number) or (minimum is not None and not number >= minimum) or \
            (above is not None and not number > above):
        raise ValueError(f"{name}: expected {wanted}, got {number!r}")
    return number


def check_axis(name: str, axis: Any, x: Any) -> int:
    """Return ``axis`` as an int in ``[0, x.ndim)``; ``TypeError`` unless it is an integer,
    ``ValueError`` if it is out of range for ``x``."""
    ndim = x.ndim
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{name}: expected an integer in [{-ndim}, {ndim - 1}] (one axis), "
                        f"got {axis!r} ({type(axis).__name__})")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: expected an integer in [{-ndim}, {ndim - 1}] for an "
                         f"array of shape {shape_of(x)}, got {int(axis)}")
    return int(axis) % ndim


def check_scale(scale: Any) -> float | None:
    """Return ``scale`` as a Python float (``None`` stays ``None``).

    Any real scalar is accepted: a Python int or float, a NumPy scalar, a 0-d NumPy array
    or a 0-d torch tensor (read once, so it is not differentiated). A bool is a
    ``TypeError`` (``scale=True`` is a slip, not the number 1); so is anything with more
    than one number. A NaN or infinite scale is a ``ValueError``.
    """
    if scale is None:
        return None
    value = scale
    if is_torch_tensor(scale) or isinstance(scale, np.ndarray):
        if scale.ndim != 0:
            raise TypeError(f"scale: expected a real scalar, got an array of shape "
                            f"{shape_of(scale)}")
        if is_bool(scale) or not (is_floating(scale) or _is_integer_array(scale)):
            raise TypeError(f"scale: expected a real scalar, got a 0-d array of dtype "
                            f"{dtype_name(scale)}")
        value = scale.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"scale: expected a real number, got {scale!r} "
                        f"({type(scale).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"scale: expected a finite real number, got {value!r}")
    return value


def _is_integer_array(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return np.issubdtype(x.dtype, np.integer)
    return not (x.dtype.is_floating_point or x.dtype.is_complex) and not is_bool(x)


# --- arrays ------------------------------------------------------------------------------------

def check_floating(name: str, x: Any) -> None:
    """Raise ``TypeError`` unless ``x`` has a real floating dtype."""
    if not is_floating(x):
        raise TypeError(
            f"{name}: expected a floating dtype (float16, bfloat16, float32 or float64), "
            f"got {dtype_name(x)}{_unsupported_float(x)}"
        )


def _unsupported_float(x: Any) -> str:
    """Why a floating dtype that is not one of attncore's is refused (for a message)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f":
            return (" (NumPy's longdouble, whose precision depends on the platform and "
                    "which torch lacks: cast to float64)")
        return ""
    if x.dtype.is_floating_point:
        return (" (an 8-bit float, which has no matrix product on most devices: cast to "
                "float16 or bfloat16, and back)")
    return ""


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
    present = [x for x in arrays.values() if x is not None]
    if all(x.dtype == present[0].dtype for x in present[1:]):
        return
    listing = ", ".join(f"{n} is {dtype_name(x)}" for n, x in arrays.items() if x is not None)
    raise TypeError(f"expected one floating dtype for all inputs, got {listing}")


def find_non_finite(**arrays: Any) -> str | None:
    """The name of the first array that holds NaN or +-inf, or ``None`` if all are finite.

    An elementwise pass over every array: attention calls it only after its cheap test
    (:func:`attncore._guard.attention_guard`) has failed, to say which argument is at fault.
    """
    for name, x in arrays.items():
        if x is None:
            continue
        if isinstance(x, np.ndarray):
            if not np.isfinite(x).all():
                return name
        else:
            torch = sys.modules["torch"]
            if not bool(torch.isfinite(x.detach()).all()):
                return name
    return None


def non_finite_error(name: str, x: Any) -> ValueError:
    return ValueError(f"{name}: expected finite values, got NaN or infinity in an array of "
                      f"shape {shape_of(x)}")


def check_all_finite(**arrays: Any) -> None:
    """Raise ``ValueError`` naming the first argument that holds NaN or +-inf."""
    name = find_non_finite(**arrays)
    if name is not None:
        raise non_finite_error(name, arrays[name])


def check_finite(name: str, x: Any) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN or +-inf (see :func:`check_all_finite`)."""
    check_all_finite(**{name: x})


# --- attention's inputs ------------------------------------------------------------------------

class AttentionShape(NamedTuple):
    """What :func:`check_attention_inputs` learned about one attention call."""

    backend: str
    batch: tuple[int, ...]
    n_q: int
    n_k: int
    d_k: int
    d_v: int
    scale: float          # the scale actually used: the caller's, or 1 / sqrt(d_k)
    causal: bool
    group: int = 1        # query heads per key/value head (> 1 only with enable_gqa)
    window: int | None = None   # a sliding window (with causal): keys i - window < j <= i


def check_mask(mask: Any, batch: tuple[int, ...], n_q: int, n_k: int, *,
               inputs: str = "q, k and v") -> None:
    """Check a boolean "may attend" mask against scores of shape ``batch + (n_q, n_k)``.

    The mask must broadcast to that shape without enlarging it, and it may not line up
    its batch axes by guesswork: a mask with fewer dimensions than the scores but more
    than two (``(batch, n_q, n_k)`` against ``(batch, heads, n_q, n_k)`` scores, say)
    would be matched from the right, its batch axis with the heads axis. When the two
    sizes happen to be equal that is a silent wrong answer, so such a mask is refused
    unless all its leading axes have size 1. ``inputs`` names the arguments whose
    leading axes ``batch`` is, for the message.
    """
    if not is_bool(mask):
        raise TypeError(f"mask: expected a boolean array (True = may attend), "
                        f"got dtype {dtype_name(mask)}")
    target = batch + (n_q, n_k)
    ms = shape_of(mask)
    try:
        joint = np.broadcast_shapes(ms, target)
    except ValueError:
        joint = None
    if joint != target:
        raise ValueError(f"mask: expected a shape broadcastable to (..., n_q, n_k) = "
                         f"{target}, got {ms}")
    if 2 < len(ms) < len(target) and any(s != 1 for s in ms[:-2]):
        missing = len(target) - len(ms)
        raise ValueError(
            f"mask: expected {len(target)} dimensions (one per axis of the scores "
            f"{target}) or at most 2, got shape {ms}: its leading axes would be matched "
            f"with the last {len(ms) - 2} of the {len(batch)} batch axes of {inputs}, "
            f"which is ambiguous; insert the missing axes (for a padding mask of shape "
            f"(batch, 1, n_k) against (batch, heads, n, d) inputs: "
            f"mask[:, {', '.join(['None'] * missing)}])")


def check_attention_inputs(q: Any, k: Any, v: Any, *, mask: Any = None, causal: Any = False,
                           scale: Any = None, enable_gqa: Any = False) -> AttentionShape:
    """Validate the arguments of an attention call (everything but their values).

    Shared by every attention variant in attncore, so that all of them reject the same bad
    input with the same message. Whether the values are finite, and whether the scores fit
    in the dtype, is checked by :func:`attncore._guard.attention_guard`. With
    ``enable_gqa=True``, ``k`` and ``v`` may have fewer heads (axis -3) than ``q``: see
    :func:`check_query_groups`.
    """
    fast = _fast_path(q, k, v, mask, causal, scale, enable_gqa)
    if fast is not None:
        return fast
    backend = backend_of(q=q, k=k, v=v, mask=mask)
    for name, x, layout in (("q", q, "(..., n_q, d_k)"), ("k", k, "(..., n_k, d_k)"),
                            ("v", v, "(..., n_k, d_v)")):
        check_floating(name, x)
        check_min_rank(name, x, 2, layout)
    check_same_dtype(q=q, k=k, v=v)
    qs, ks, vs = shape_of(q), shape_of(k), shape_of(v)
    if qs[-1] != ks[-1]:
        raise ValueError(f"q and k must have the same d_k (last axis): q has shape {qs} "
                         f"(d_k={qs[-1]}), k has shape {ks} (d_k={ks[-1]})")
    if qs[-1] == 0:
        raise ValueError(f"q and k: expected d_k >= 1 (a score is a dot product of length "
                         f"d_k), got q of shape {qs} and k of shape {ks}")
    if ks[-2] != vs[-2]:
        raise ValueError(f"k and v must have the same n_k (one value per key): k has shape "
                         f"{ks} (n_k={ks[-2]}), v has shape {vs} (n_k={vs[-2]})")
    enable_gqa = check_flag("enable_gqa", enable_gqa)
    group = 1
    if not qs[:-2] == ks[:-2] == vs[:-2]:
        if not enable_gqa:
            raise ValueError(f"q, k and v must have the same batch shape (...): got q {qs}, "
                             f"k {ks}, v {vs}")
        group = check_query_groups(qs, ks, vs)
    batch, n_q, n_k = qs[:-2], qs[-2], ks[-2]
    if mask is not None:
        check_mask(mask, batch, n_q, n_k)
    causal = check_flag("causal", causal)
    scale = check_scale(scale)
    if scale is None:
        scale = 1.0 / math.sqrt(qs[-1])
    return AttentionShape(backend, batch, n_q, n_k, qs[-1], vs[-1], scale, causal, group)


def check_query_groups(qs: tuple[int, ...], ks: tuple[int, ...], vs: tuple[int, ...]) -> int:
    """The group size ``H_q / H_kv`` of grouped-query attention, after checking the shapes.

    ``qs``, ``ks``, ``vs`` are the shapes of ``q``, ``k``, ``v``, whose batch shapes differ.
    ``q`` is ``(..., H_q, n_q, d_k)`` and ``k``, ``v`` are ``(..., H_kv, n_k, d)``: the same
    leading axes ``...``, the same number ``H_kv`` of heads, and ``H_kv`` a divisor of
    ``H_q``, so that query head ``h`` reads key/value head ``h // (H_q / H_kv)`` (as
    PyTorch's ``enable_gqa`` does). Anything else is a ``ValueError``.
    """
    if not len(qs) == len(ks) == len(vs) or len(qs) < 3 or not qs[:-3] == ks[:-3] == vs[:-3]:
        raise ValueError(f"q, k and v must have the same batch shape (...) apart from the "
                         f"heads axis -3 (enable_gqa=True): got q {qs}, k {ks}, v {vs}")
    h_q, h_kv = qs[-3], ks[-3]
    if vs[-3] != h_kv:
        raise ValueError(f"k and v must have the same number of heads (axis -3): k has shape "
                         f"{ks} ({h_kv} heads), v has shape {vs} ({vs[-3]} heads)")
    if h_kv == 0 or h_q == 0 or h_q % h_kv:
        raise ValueError(f"enable_gqa=True: expected the number of query heads (axis -3 of "
                         f"q) to be a positive multiple of the number of key/value heads "
                         f"(axis -3 of k and v), got q of shape {qs} ({h_q} heads) and k of "
                         f"shape {ks} ({h_kv} heads)")
    return h_q // h_kv


def group_heads(q: Any, k: Any, v: Any, mask: Any,
                shape: AttentionShape) -> tuple[Any, Any, Any, Any, AttentionShape]:
    """Grouped-query attention as ordinary attention on views: nothing is copied.

    With ``g = shape.group`` query heads per key/value head, ``q`` of shape
    ``(..., H_kv * g, n_q, d_k)`` is reshaped to ``(..., H_kv, g, n_q, d_k)`` (query head
    ``h`` is entry ``(h // g, h % g)``), and ``k``, ``v`` of shape ``(..., H_kv, n_k, d)``
    get a group axis on which they are *broadcast*, ``(..., H_kv, g, n_k, d)`` with stride
    0: the ``g`` query heads of a group read the same keys and values. Repeating the
    key/value heads (``repeat_interleave``) would give the same numbers but copy the keys
    and values ``g`` times, the very memory that sharing them saves. A mask with a heads
    axis is reshaped the same way. Returns the views and the shape of the grouped problem
    (``group = 1``); :func:`ungroup_heads` turns its result back into ``q``'s layout.
    """
    g = shape.group
    batch = shape.batch[:-1] + (shape.batch[-1] // g, g)
    q = q.reshape(batch + (shape.n_q, shape.d_k))
    k, v = (_broadcast_group(x, batch) for x in (k, v))
    if mask is not None and mask.ndim == len(shape.batch) + 2:
        heads = (batch[-2], g) if shape_of(mask)[-3] != 1 else (1, 1)
        mask = mask.reshape(shape_of(mask)[:-3] + heads + shape_of(mask)[-2:])
    return q, k, v, mask, shape._replace(batch=batch, group=1)


def _broadcast_group(x: Any, batch: tuple[int, ...]) -> Any:
    x = x[..., None, :, :]
    target = batch + tuple(x.shape[-2:])
    return np.broadcast_to(x, target) if isinstance(x, np.ndarray) else x.expand(target)


def ungroup_heads(result: Any, shape: AttentionShape) -> Any:
    """The inverse of :func:`group_heads` for results: ``(..., H_kv, g, n_q, m)`` (one
    array, or a tuple such as ``(out, weights)``) back to ``(..., H_kv * g, n_q, m)``."""
    if isinstance(result, tuple):
        return tuple(ungroup_heads(x, shape) for x in result)
    return result.reshape(shape.batch + tuple(result.shape[-2:]))


def _fast_path(q: Any, k: Any, v: Any, mask: Any, causal: Any, scale: Any,
               enable_gqa: Any = False) -> AttentionShape | None:
    """The common call (no mask, bool flags, a float or default scale, matching inputs),
    accepted in a few attribute lookups: these checks run on every call, and on small
    inputs their cost is measurable. Anything else returns None and gets the full checks
    above, which also say what is wrong."""
    if mask is not None or not (causal is True or causal is False) or \
            not (enable_gqa is False or enable_gqa is True) or \
            not (scale is None or (type(scale) is float and math.isfinite(scale))):
        return None
    if type(q) is np.ndarray and type(k) is np.ndarray and type(v) is np.ndarray:
        if q.dtype.kind != "f" or q.dtype.itemsize > 8:
            return None
        backend = NUMPY
    elif is_torch_tensor(q) and is_torch_tensor(k) and is_torch_tensor(v):
        if not q.dtype.is_floating_point or q.dtype.itemsize < 2 or \
                not q.device == k.device == v.device:
            return None
        backend = TORCH
    else:
        return None
    if not (q.dtype == k.dtype == v.dtype and q.ndim >= 2 and q.ndim == k.ndim == v.ndim):
        return None
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    if not (qs[-1] == ks[-1] > 0 and ks[-2] == vs[-2] and qs[:-2] == ks[:-2] == vs[:-2]):
        return None
    if scale is None:
        scale = 1.0 / math.sqrt(qs[-1])
    return AttentionShape(backend, qs[:-2], qs[-2], ks[-2], qs[-1], vs[-1], scale, causal)
