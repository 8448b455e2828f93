"""Multi-head attention: parameters, head splitting, and the layer itself.

Conventions follow the course's notation, where tokens are **rows**: ``Q = X W_Q + b_Q``
with ``W_Q`` of shape ``(d_in, d_model)``. (``torch.nn.Linear`` stores the transpose,
``(out, in)``; :func:`params_from_torch` and :func:`params_to_torch` convert.)

    head_h  = Attention(Q[:, cols_h], K[:, cols_h], V[:, cols_h])     cols_h = h*d_head ... (h+1)*d_head
    output  = Concat(head_1, ..., head_H) W_O + b_O

Projecting once with the full ``W_Q`` and then splitting the columns into heads is the same
maths as giving each head its own ``(d_in, d_head)`` block of ``W_Q``: column block h of
``X W_Q`` is ``X`` times column block h of ``W_Q``.

Grouped-query attention (``n_kv_heads < num_heads``) gives ``W_K`` and ``W_V`` only
``n_kv_heads`` column blocks; query head h uses key/value block ``h // (num_heads //
n_kv_heads)``. ``n_kv_heads = 1`` is multi-query attention.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from ._backend import (
    NUMPY,
    TORCH,
    AttentionShape,
    backend_of,
    check_flag,
    check_floating,
    check_mask,
    check_min_rank,
    check_same_dtype,
    check_size,
    dtype_name,
    find_non_finite,
    shape_of,
    under_vmap,
)
from ._guard import (
    PASSED,
    TRANSFORMED,
    Guard,
    attention_guard,
    layer_guard,
    transform_running,
)
from .attention import attend
from .dropout import Dropout, check_dropout
from .masks import check_window, with_window
from .sinks import check_sinks

__all__ = [
    "MultiHeadParams",
    "init_multihead",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_loop",
    "params_from_torch",
    "params_to_torch",
    "split_heads",
]

_FIELDS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


@dataclass
class MultiHeadParams:
    """Weights of one multi-head attention layer (all NumPy arrays or all torch tensors).

    All arrays share one library, device and floating dtype; the biases are all present
    or all ``None``. Tokens are rows, so a projection is ``x @ w + b``.

    Attributes
    ----------
    w_q : array, shape ``(d_model, d_model)``
        Projects the query-side input to the queries of all heads.
    w_k : array, shape ``(d_kv, n_kv_heads * d_head)``
        Projects the key/value-side input to the keys (``d_kv = d_model`` for
        self-attention). Its width fixes the number of key/value heads: ``d_model``
        (``n_kv_heads = num_heads``) for ordinary multi-head attention, fewer heads for
        grouped-query attention, ``d_head`` (one head) for multi-query attention.
    w_v : array, shape ``(d_kv, n_kv_heads * d_head)``
        Projects the key/value-side input to the values; the shape of ``w_k``.
    w_o : array, shape ``(d_model, d_model)``
        The output projection, applied to the concatenated heads.
    b_q : array of shape ``(d_model,)``, or None
        Bias of the queries.
    b_k : array of shape ``(n_kv_heads * d_head,)``, or None
        Bias of the keys.
    b_v : array of shape ``(n_kv_heads * d_head,)``, or None
        Bias of the values.
    b_o : array of shape ``(d_model,)``, or None
        Bias of the output.
    num_heads : int
        Must divide ``d_model``; each head has width ``d_head = d_model // num_heads``.
        The number of key/value heads, :attr:`n_kv_heads`, is read from the width of
        ``w_k``; it must divide ``num_heads``.

    Raises
    ------
    TypeError
        Mixed libraries or dtypes, a non-floating array, ``num_heads`` not an integer.
    ValueError
        A shape that does not fit ``d_model`` (``>= 1``), ``num_heads`` below 1 or not a
        divisor of ``d_model``, a key/value width that is not ``n_kv_heads * d_head`` for
        a divisor ``n_kv_heads`` of ``num_heads``, some biases given and others not.
    """

    w_q: Any
    w_k: Any
    w_v: Any
    w_o: Any
    b_q: Any
    b_k: Any
    b_v: Any
    b_o: Any
    num_heads: int

    def __post_init__(self) -> None:
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "num_heads"}
        for name in ("w_q", "w_k", "w_v", "w_o"):
            if arrays[name] is None:
                raise TypeError(f"{name}: expected a numpy.ndarray or a torch.Tensor, "
                                f"got None (only the biases may be None)")
        backend_of(**arrays)
        for name, x in arrays.items():
            if x is not None:
                check_floating(name, x)
        check_same_dtype(**arrays)
        w_q = shape_of(self.w_q)
        if len(w_q) != 2 or w_q[0] != w_q[1] or w_q[0] < 1:
            raise ValueError(f"w_q: expected shape (d_model, d_model) with d_model >= 1, "
                             f"got {w_q}")
        d_model = w_q[0]
        check_num_heads(self.num_heads, d_model)
        biases = [self.b_q is None, self.b_k is None, self.b_v is None, self.b_o is None]
        if len(set(biases)) > 1:
            raise ValueError("b_q, b_k, b_v, b_o: expected all four biases or none, got "
                             + ", ".join(f"{n}={'None' if m else 'array'}" for n, m in
                                         zip(("b_q", "b_k", "b_v", "b_o"), biases)))
        w_k = shape_of(self.w_k)
        d_head = d_model // self.num_heads
        widths = [n * d_head for n in range(self.num_heads, 0, -1) if self.num_heads % n == 0]
        if len(w_k) != 2 or w_k[0] < 1 or w_k[1] not in widths:
            raise ValueError(f"w_k: expected shape (d_kv, n_kv_heads * d_head) with d_kv >= 1 "
                             f"and n_kv_heads a divisor of num_heads={self.num_heads} "
                             f"(d_head={d_head}: a width of "
                             f"{', '.join(map(str, widths[:-1]))}{' or ' if widths[:-1] else ''}"
                             f"{widths[-1]}), got {w_k}")
        d_kv, d_kv_heads = w_k
        expected = {"w_k": (d_kv, d_kv_heads), "w_v": (d_kv, d_kv_heads),
                    "w_o": (d_model, d_model), "b_q": (d_model,), "b_k": (d_kv_heads,),
                    "b_v": (d_kv_heads,), "b_o": (d_model,)}
        for name, shape in expected.items():
            x = getattr(self, name)
            if x is not None and shape_of(x) != shape:
                raise ValueError(f"{name}: expected shape {shape} for d_model={d_model}, "
                                 f"d_kv={d_kv}, n_kv_heads={d_kv_heads // d_head}, got "
                                 f"{shape_of(x)}")

    @property
    def d_model(self) -> int:
        """Width of the query-side input, of each projection and of the output."""
        return int(self.w_q.shape[1])

    @property
    def d_kv(self) -> int:
        """Width of the key/value-side input (``d_model`` unless built for cross-attention)."""
        return int(self.w_k.shape[0])

    @property
    def d_head(self) -> int:
        """Width of one head, ``d_model // num_heads``."""
        return self.d_model // self.num_heads

    @property
    def n_kv_heads(self) -> int:
        """Number of key/value heads: ``num_heads`` for multi-head attention, fewer for
        grouped-query attention (each shared by ``num_heads // n_kv_heads`` query heads),
        1 for multi-query attention."""
        return int(self.w_k.shape[1]) // self.d_head

    @property
    def backend(self) -> str:
        """``"numpy"`` or ``"torch"``."""
        return NUMPY if isinstance(self.w_q, np.ndarray) else TORCH

    def num_parameters(self) -> int:
        """Number of scalars in all weights and biases."""
        return sum(int(np.prod(getattr(self, f.name).shape)) for f in fields(self)
                   if f.name != "num_heads" and getattr(self, f.name) is not None)


def check_num_heads(num_heads: Any, d_model: int) -> int:
    """Return ``num_heads`` as an int: a positive integer dividing ``d_model``.

    Raises ``TypeError`` if it is not an integer, ``ValueError`` if it is below 1 or does
    not divide ``d_model``.
    """
    num_heads = check_size("num_heads", num_heads)
    if d_model % num_heads:
        raise ValueError(f"num_heads: expected a divisor of d_model={d_model}, got {num_heads} "
                         f"({d_model} / {num_heads} = {d_model / num_heads:.3g} is not an "
                         f"integer head width)")
    return num_heads


def _on_backend(arrays: dict[str, Any], dtype: Any, np_dtype: Any, backend: str,
                device: Any) -> dict[str, Any]:
    """Seeded NumPy weights (``None`` for an absent bias) in the backend's library, dtype and
    device: the last step of every ``init_*`` function, so that one seed gives the same
    numbers on every backend."""
    if backend == NUMPY:
        return {n: None if a is None else a.astype(np_dtype) for n, a in arrays.items()}
    import torch

    tdtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np_dtype.name)
    return {n: None if a is None else torch.tensor(a, dtype=tdtype, device=device)
            for n, a in arrays.items()}


def init_multihead(d_model: int, num_heads: int, *, n_kv_heads: int | None = None,
                   d_kv: int | None = None, bias: bool = True, seed: int = 0,
                   dtype: Any = np.float64, backend: str = NUMPY,
                   device: Any = None) -> MultiHeadParams:
    """Seeded parameters for a multi-head attention layer.

    Weights are drawn Xavier-uniform, ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``,
    which keeps the variance of activations roughly constant through the projections (the
    assumption behind the 1/sqrt(d_k) scaling); biases start at zero. The draw uses NumPy's
    ``default_rng(seed)`` on both backends, so the same seed gives the same numbers on NumPy,
    torch CPU and torch CUDA.

    Parameters
    ----------
    d_model : int
        Width of the query-side input, of each projection and of the output, ``>= 1``.
    num_heads : int
        Number of (query) heads, ``>= 1``; must divide ``d_model``.
    n_kv_heads : int, optional
        Number of key/value heads, a divisor of ``num_heads`` (default ``num_heads``:
        multi-head attention). Fewer give grouped-query attention, 1 multi-query
        attention; ``w_k`` and ``w_v`` then have ``n_kv_heads * d_head`` columns. With the
        default, the draw is the same as before this argument existed.
    d_kv : int, optional
        Width of the key/value-side input, for cross-attention (default ``d_model``).
    bias : bool, default True
        Include ``b_q, b_k, b_v, b_o``.
    seed : int, default 0
        Seed of the draw, ``>= 0``.
    dtype : NumPy floating dtype or torch.dtype, default numpy.float64
        A NumPy dtype (``np.float16``, ``np.float32`` or ``np.float64``) for either
        backend, or a ``torch.dtype`` (``torch.bfloat16`` too) for the torch backend.
        NumPy's longdouble and torch's 8-bit floats are refused (``TypeError``).
    backend : {"numpy", "torch"}, default "numpy"
    device : torch.device or str, optional
        Where torch tensors are placed.

    Returns
    -------
    MultiHeadParams

    Raises
    ------
    TypeError
        A size or seed that is not an integer, a flag that is not a bool, a dtype that is
        not floating.
    ValueError
        A size below 1, ``num_heads`` not dividing ``d_model``, ``n_kv_heads`` not
        dividing ``num_heads``, a negative seed, an unknown backend.
    """
    d_model = check_size("d_model", d_model)
    num_heads = check_num_heads(num_heads, d_model)
    n_kv_heads = num_heads if n_kv_heads is None else check_n_kv_heads(n_kv_heads, num_heads)
    d_kv_heads = n_kv_heads * (d_model // num_heads)
    d_kv = d_model if d_kv is None else check_size("d_kv", d_kv)
    bias = check_flag("bias", bias)
    seed = check_size("seed", seed, minimum=0)
    if backend not in (NUMPY, TORCH):
        raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
    if backend == NUMPY and device is not None:
        raise ValueError(f"device: expected None for backend='numpy', got {device!r}")
    np_dtype = _numpy_float_dtype(dtype, backend)
    rng = np.random.default_rng(seed)

    def xavier(fan_in: int, fan_out: int) -> np.ndarray:
        a = math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, size=(fan_in, fan_out))

    arrays = {"w_q": xavier(d_model, d_model), "w_k": xavier(d_kv, d_kv_heads),
              "w_v": xavier(d_kv, d_kv_heads), "w_o": xavier(d_model, d_model)}
    for name in ("b_q", "b_k", "b_v", "b_o"):
        width = d_kv_heads if name in ("b_k", "b_v") else d_model
        arrays[name] = np.zeros(width) if bias else None
    conv = _on_backend(arrays, dtype, np_dtype, backend, device)
    return MultiHeadParams(num_heads=num_heads, **conv)


def check_n_kv_heads(n_kv_heads: Any, num_heads: int) -> int:
    """Return ``n_kv_heads`` as an int: a positive integer dividing ``num_heads``."""
    n_kv_heads = check_size("n_kv_heads", n_kv_heads)
    if num_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads: expected a divisor of num_heads={num_heads} (each "
                         f"key/value head serves the same number of query heads), got "
                         f"{n_kv_heads}")
    return n_kv_heads


def _numpy_float_dtype(dtype: Any, backend: str) -> Any:
    """``dtype`` as a NumPy dtype: float16, float32 or float64 (float32 stands in for
    torch's bfloat16, which NumPy lacks; the draw is cast to bfloat16 by torch)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        if backend == NUMPY:
            raise TypeError(f"dtype: expected a NumPy floating dtype for backend='numpy', "
                            f"got {dtype}")
        if not dtype.is_floating_point or dtype.itemsize < 2:
            raise TypeError(f"dtype: expected torch.float16, torch.bfloat16, torch.float32 "
                            f"or torch.float64, got {dtype}")
        return np.dtype(np.float32) if dtype == torch.bfloat16 else \
            np.dtype(str(dtype).replace("torch.", ""))
    try:
        found = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: expected a floating dtype such as np.float32, got "
                        f"{dtype!r}") from None
    if found not in (np.float16, np.float32, np.float64):
        raise TypeError(f"dtype: expected float16, float32 or float64, got {found}")
    return found


def split_heads(x: Any, num_heads: int) -> Any:
    """Split the last axis into heads: column block ``h`` becomes head ``h``.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape ``(..., n, d_model)``
    num_heads : int
        A positive divisor of ``d_model``.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(..., num_heads, n, d_head)``
        A view of ``x`` (``d_head = d_model // num_heads``): a reshape to
        ``(..., n, num_heads, d_head)`` followed by swapping the ``n`` and head axes. The
        reshape alone, straight to ``(..., num_heads, n, d_head)``, would mix tokens
        across heads.
    """
    backend_of(x=x)
    check_min_rank("x", x, 2, "(..., n, d_model)")
    num_heads = check_num_heads(num_heads, shape_of(x)[-1])
    return _split(x, num_heads)


def _split(x: Any, num_heads: int) -> Any:
    """:func:`split_heads` without the checks (for the layer functions, whose inputs and
    weights are checked)."""
    x = x.reshape(*x.shape[:-1], num_heads, x.shape[-1] // num_heads)
    return x.swapaxes(-2, -3) if isinstance(x, np.ndarray) else x.transpose(-2, -3)


def merge_heads(x: Any) -> Any:
    """Concatenate the heads along the last axis; the inverse of :func:`split_heads`.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape ``(..., num_heads, n, d_head)``

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(..., n, num_heads * d_head)``
    """
    backend_of(x=x)
    check_min_rank("x", x, 3, "(..., num_heads, n, d_head)")
    return _merge(x)


def _merge(x: Any) -> Any:
    """:func:`merge_heads` without the checks."""
    *batch, h, n, d_head = x.shape
    x = x.swapaxes(-2, -3) if isinstance(x, np.ndarray) else x.transpose(-2, -3)
    return x.reshape(*batch, n, h * d_head)


def _linear(x: Any, w: Any, b: Any, layer: Any = None) -> Any:
    if layer is not None and not layer.certified and isinstance(x, np.ndarray):
        # numbers this large may overflow: the layer checks for it and raises a clear
        # error, so NumPy's warnings would only repeat it
        with np.errstate(over="ignore", invalid="ignore"):
            return _linear(x, w, b)
    if isinstance(x, np.ndarray) and x.ndim > 2:
        # NumPy multiplies a (batch, n, d) array by a matrix with one BLAS call per batch
        # entry (each of which waits for BLAS's threads); the rows folded into one matrix
        # are the same product in one call.
        rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
        y = (rows @ w).reshape(x.shape[:-1] + (w.shape[-1],))
    else:
        y = x @ w
    return y if b is None else y + b


class _Layer(NamedTuple):
    """What the checks of a multi-head call found; shared by the layer functions."""

    x_kv: Any
    batch: tuple[int, ...]
    n_q: int
    n_k: int
    causal: bool
    certified: bool
    names: tuple[str, str]


def _check_layer(params: Any, x_q: Any, x_kv: Any, mask: Any, causal: Any,
                 names: tuple[str, str] = ("x_q", "x_kv"), certify: bool = True) -> _Layer:
    """The checks of :func:`multi_head_attention`, in the caller's terms: ``names`` are
    the caller's names for ``x_q`` and ``x_kv`` (``("x", "x")`` for a layer that takes
    one input). ``certify=False`` skips :func:`~attncore._guard.layer_guard` (the layer
    is then not certified, and the caller checks the projections, as
    :func:`attncore.decode_step` does: for a few new tokens, reading every weight to
    bound them would cost more than the step itself)."""
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params: expected a MultiHeadParams (see init_multihead and "
                        f"params_from_torch), got {type(params).__name__}")
    x_kv = x_q if x_kv is None else x_kv
    nq, nkv = names
    backend_of(**{"params": params.w_q, nq: x_q, nkv: x_kv, "mask": mask})
    check_floating(nq, x_q)
    check_floating(nkv, x_kv)
    check_min_rank(nq, x_q, 2, "(..., n_q, d_model)")
    check_min_rank(nkv, x_kv, 2, "(..., n_k, d_kv)")
    check_same_dtype(**{"params": params.w_q, nq: x_q, nkv: x_kv})
    qs, ks = shape_of(x_q), shape_of(x_kv)
    if qs[-1] != params.d_model:
        raise ValueError(f"{nq}: expected last axis d_model={params.d_model}, got shape {qs}")
    if ks[-1] != params.d_kv:
        raise ValueError(f"{nkv}: expected last axis d_kv={params.d_kv}, got shape {ks}")
    if qs[:-2] != ks[:-2]:
        raise ValueError(f"{nq} and {nkv} must have the same batch shape (...): got {nq} "
                         f"{qs}, {nkv} {ks}")
    batch, n_q, n_k = qs[:-2], qs[-2], ks[-2]
    if mask is not None:
        check_mask(mask, batch, n_q, n_k, inputs=nq if nq == nkv else f"{nq} and {nkv}")
    causal = check_flag("causal", causal)
    rows = math.prod(batch)
    certified = certify and layer_guard(
        x_q, x_kv, {f"params.{n}": getattr(params, n) for n in _FIELDS}, names=names,
        rows_q=rows * n_q, rows_k=rows * n_k, n_k=n_k, d_head=params.d_head,
        group=params.num_heads // params.n_kv_heads)
    return _Layer(x_kv, batch, n_q, n_k, causal, certified, names)


def _heads_guard(layer: _Layer, q: Any, k: Any, v: Any, shape: AttentionShape) -> Guard:
    """When the layer's certificate failed: check the projections, then the scores."""
    if layer.certified:
        # (under grad, jvp and the like: attncore's arithmetic, not the fused kernel)
        if not isinstance(q, np.ndarray) and transform_running() and \
                not under_vmap(q, k, v):
            return TRANSFORMED
        return PASSED
    nq, nkv = layer.names
    inputs = f"{nq} or params" if nq == nkv else f"{nq}, {nkv} or params"
    bad = find_non_finite(q=q, k=k, v=v)
    if bad is not None:
        side = f"{nq} @ params.w_q" if bad == "q" else f"{nkv} @ params.w_{bad}"
        raise ValueError(f"{_who(layer)}: expected projections that fit in dtype "
                         f"{dtype_name(q)}, got an overflow in {side}; use a wider dtype or "
                         f"smaller inputs or weights")
    return attention_guard(q, k, v, shape, inputs=inputs, scores=(
        f"({nq} @ params.w_q + params.b_q) @ ({nkv} @ params.w_k + params.b_k)^T / "
        f"sqrt(d_head), per head"))


def _who(layer: _Layer) -> str:
    nq, nkv = layer.names
    return f"{nq}, params" if nq == nkv else f"{nq}, {nkv}, params"


def _check_output(layer: _Layer, out: Any) -> Any:
    if not layer.certified and find_non_finite(out=out) is not None:
        raise ValueError(f"{_who(layer)}: expected an output that fits in dtype {dtype_name(out)}, "
                         f"got an overflow in the output projection heads @ params.w_o; "
                         f"use a wider dtype or smaller inputs or weights")
    return out


def multi_head_attention(params: MultiHeadParams, x_q: Any, x_kv: Any = None, *,
                         mask: Any = None, causal: bool = False,
                         return_weights: bool = False, dropout_p: float = 0.0,
                         generator: Any = None, window: int | None = None,
                         sinks: Any = None) -> Any:
    """Multi-head attention layer: project, split into heads, attend, merge, project.

    Parameters
    ----------
    params : MultiHeadParams
        The layer's weights; same library, device and dtype as the inputs. With
        ``params.n_kv_heads < params.num_heads`` the layer is grouped-query attention
        (multi-query for one key/value head): each key/value head serves
        ``num_heads // n_kv_heads`` query heads.
    x_q : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_model)``
        Query-side input (the tokens that ask).
    x_kv : numpy.ndarray or torch.Tensor, shape ``(..., n_k, d_kv)``, optional
        Key/value-side input, with the same batch shape ``...`` as ``x_q``. ``None``
        means self-attention (``x_kv = x_q``); another sequence (for example an encoder's
        output) makes it cross-attention.
    mask : boolean array broadcastable to ``(..., n_q, n_k)``, optional
        The same mask for every head; True = may attend. As in
        :func:`~attncore.scaled_dot_product_attention`: at most 2 dimensions,
        or one per axis of ``(..., n_q, n_k)``.
    causal : bool, default False
        Forbid attending to later positions (see ``scaled_dot_product_attention``).
    return_weights : bool, default False
        Also return the per-head attention weights.
    dropout_p : real number in ``[0, 1)``, default 0.0
        Dropout on every head's attention weights (as in ``torch.nn.MultiheadAttention``'s
        ``dropout``); see :func:`~attncore.scaled_dot_product_attention`. 0 changes
        nothing, bit for bit.
    generator : numpy.random.Generator or torch.Generator, optional
        The source of the dropout draws, matching the inputs' library.
    window : int, optional
        A sliding window in every head: query ``i`` sees keys ``i - window < j <= i``
        (needs ``causal=True``); see :func:`~attncore.scaled_dot_product_attention`.
    sinks : numpy.ndarray or torch.Tensor, shape ``(num_heads,)`` or ``()``, optional
        One sink logit per head (gpt-oss), in the dtype, library and device of the
        inputs; see :func:`~attncore.scaled_dot_product_attention` and
        :mod:`attncore.sinks`. Differentiable on torch.

    Returns
    -------
    out : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_model)``
    weights : numpy.ndarray or torch.Tensor, shape ``(..., num_heads, n_q, n_k)``
        Only if ``return_weights`` (with ``sinks``, rows sum to 1 minus the sink's
        weight).

    Raises
    ------
    TypeError
        ``params`` is not a :class:`MultiHeadParams`; mixed libraries or dtypes; a
        non-boolean mask; a flag that is not a bool.
    ValueError
        Widths that do not match ``params``; different batch shapes of ``x_q`` and
        ``x_kv``; a mask that does not broadcast or is ambiguous; NaN or infinity in an
        input or weight (named); an overflow in the projections, scores or output; a
        ``window`` below 1 or without ``causal=True``; ``sinks`` of another shape,
        library or dtype, or not finite.
    """
    return_weights = check_flag("return_weights", return_weights)
    layer = _check_layer(params, x_q, x_kv, mask, causal)
    drop = check_dropout(dropout_p, generator, params.backend, like=x_q)
    mask, layer, sinks = _window_and_sinks(params, layer, x_q, mask, window, sinks)
    q, k, v = _project_heads(params, layer, x_q)
    return _attend_heads(params, layer, q, k, v, mask, return_weights, drop, sinks)


def _window_and_sinks(params: MultiHeadParams, layer: _Layer, x_q: Any, mask: Any,
                      window: Any, sinks: Any) -> tuple[Any, _Layer, Any]:
    """``window`` folded into the mask (its band holds the causal part, so the layer is
    no longer marked causal) and ``sinks`` checked and shaped for the heads,
    ``(..., num_heads, n, d_head)``."""
    window = check_window(window, layer.causal)
    if window is not None:
        band = with_window(None, window, layer.n_q, layer.n_k, x_q)
        # the caller's mask has no heads axis; keep it that way (_attend_heads adds one)
        mask = band if mask is None else mask & band
        layer = layer._replace(causal=False)
    if sinks is not None:
        sinks = check_sinks(sinks, x_q, layer.batch + (params.num_heads,),
                            heads="num_heads")
    return mask, layer, sinks


def _project_heads(params: MultiHeadParams, layer: _Layer, x_q: Any) -> tuple[Any, Any, Any]:
    """``q`` of every head, ``(..., num_heads, n, d_head)``, and ``k, v`` of every
    key/value head, ``(..., n_kv_heads, n, d_head)``."""
    h, h_kv = params.num_heads, params.n_kv_heads
    return (_split(_linear(x_q, params.w_q, params.b_q, layer), h),
            _split(_linear(layer.x_kv, params.w_k, params.b_k, layer), h_kv),
            _split(_linear(layer.x_kv, params.w_v, params.b_v, layer), h_kv))


def _attend_heads(params: MultiHeadParams, layer: _Layer, q: Any, k: Any, v: Any, mask: Any,
                  return_weights: bool, drop: Dropout | None = None,
                  sinks: Any = None) -> Any:
    """Attention in every head, the heads merged and projected by ``W_O``."""
    if mask is not None and mask.ndim > 2:
        mask = mask[..., None, :, :]       # one mask for all heads: a head axis of size 1
    shape = AttentionShape(backend_of(q=q), layer.batch + (params.num_heads,), layer.n_q,
                           layer.n_k, params.d_head, params.d_head,
                           1.0 / math.sqrt(params.d_head), layer.causal,
                           params.num_heads // params.n_kv_heads)
    result = attend(q, k, v, mask, shape, return_weights, _heads_guard(layer, q, k, v, shape),
                    drop, sinks)
    heads, weights = result if return_weights else (result, None)
    out = _check_output(layer, _linear(_merge(heads), params.w_o, params.b_o, layer))
    return (out, weights) if return_weights else out


def multi_head_attention_loop(params: MultiHeadParams, x_q: Any, x_kv: Any = None, *,
                              mask: Any = None, causal: bool = False) -> Any:
    """The same layer written head by head: each head uses its own column block of the weights.

    Slower and longer than :func:`multi_head_attention`, and equal to it; it exists to show
    that the reshape trick is the same maths. Arguments, checks, errors and result as
    :func:`multi_head_attention` (without ``return_weights``). With grouped-query
    parameters, head ``h`` takes its keys and values from column block
    ``h // (num_heads // n_kv_heads)`` of ``w_k`` and ``w_v``.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_model)``
    """
    layer = _check_layer(params, x_q, x_kv, mask, causal)
    d = params.d_head
    shape = AttentionShape(backend_of(x=x_q), layer.batch, layer.n_q, layer.n_k, d, d,
                           1.0 / math.sqrt(d), layer.causal)
    heads = []
    group = params.num_heads // params.n_kv_heads
    for h in range(params.num_heads):
        cols = slice(h * d, (h + 1) * d)
        kv_cols = slice((h // group) * d, (h // group + 1) * d)   # the head's key/value block
        b = {n: (None if getattr(params, n) is None else
                 getattr(params, n)[cols if n == "b_q" else kv_cols])
             for n in ("b_q", "b_k", "b_v")}
        q_h = _linear(x_q, params.w_q[:, cols], b["b_q"], layer)
        k_h = _linear(layer.x_kv, params.w_k[:, kv_cols], b["b_k"], layer)
        v_h = _linear(layer.x_kv, params.w_v[:, kv_cols], b["b_v"], layer)
        guard = _heads_guard(layer, q_h, k_h, v_h, shape)
        heads.append(attend(q_h, k_h, v_h, mask, shape, False, guard))
    if isinstance(x_q, np.ndarray):
        concat = np.concatenate(heads, axis=-1)
    else:
        import torch

        concat = torch.cat(heads, dim=-1)
    return _check_output(layer, _linear(concat, params.w_o, params.b_o, layer))


def params_from_torch(mha: Any) -> MultiHeadParams:
    """Copy the weights of a ``torch.nn.MultiheadAttention`` into a :class:`MultiHeadParams`.

    PyTorch packs the three input projections into one ``in_proj_weight`` of shape
    ``(3 d_model, d_model)``: rows ``[0, E)`` are W_Q, ``[E, 2E)`` W_K, ``[2E, 3E)`` W_V, each
    in ``nn.Linear``'s ``(out, in)`` layout, so attncore's ``(in, out)`` matrix is its
    transpose. When ``kdim``/``vdim`` differ from ``embed_dim`` it keeps separate
    ``q_proj_weight``, ``k_proj_weight`` and ``v_proj_weight`` instead.

    Parameters
    ----------
    mha : torch.nn.MultiheadAttention
        Built with ``batch_first=True`` (attncore's layout, ``(batch, n, d)``), without
        ``add_bias_kv`` or ``add_zero_attn``, with ``dropout=0.0`` and ``kdim == vdim``.

    Returns
    -------
    MultiHeadParams
        Detached copies of the weights, on the module's device and in its dtype.

    Raises
    ------
    TypeError
        ``mha`` is not a ``torch.nn.MultiheadAttention``.
    ValueError
        An option whose maths :class:`MultiHeadParams` cannot hold, or ``batch_first=False``.
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(mha, torch.nn.MultiheadAttention):
        raise TypeError(f"mha: expected a torch.nn.MultiheadAttention, got "
                        f"{type(mha).__name__}")
    if not mha.batch_first:
        raise ValueError("mha: expected torch.nn.MultiheadAttention(batch_first=True), whose "
                         "inputs have attncore's layout (batch, n, d), got batch_first=False")
    # Options whose maths MultiHeadParams does not hold: refuse them rather than drop them.
    if mha.bias_k is not None or mha.bias_v is not None:
        raise ValueError("mha: add_bias_kv=True appends learned key/value rows that attncore's "
                         "MultiHeadParams cannot hold; expected add_bias_kv=False")
    if mha.add_zero_attn:
        raise ValueError("mha: add_zero_attn=True appends a zero key/value that attncore's "
                         "MultiHeadParams cannot hold; expected add_zero_attn=False")
    if mha.dropout:
        raise ValueError(f"mha: dropout={mha.dropout} drops random attention weights in "
                         f"training, which attncore's MultiHeadParams cannot hold; expected "
                         f"dropout=0.0 (an evaluation-time layer computes the same without "
                         f"it: build it with dropout=0.0 and copy the weights)")
    if mha.kdim != mha.vdim:
        raise ValueError(f"mha: expected kdim == vdim (attncore takes keys and values from one "
                         f"input x_kv), got kdim={mha.kdim}, vdim={mha.vdim}")
    E = mha.embed_dim
    if mha.in_proj_weight is not None:
        wq, wk, wv = mha.in_proj_weight.detach().split(E, dim=0)
    else:
        wq, wk, wv = (mha.q_proj_weight.detach(), mha.k_proj_weight.detach(),
                      mha.v_proj_weight.detach())
    if mha.in_proj_bias is not None:
        bq, bk, bv = mha.in_proj_bias.detach().split(E)
    else:
        bq = bk = bv = None
    bo = None if mha.out_proj.bias is None else mha.out_proj.bias.detach().clone()
    return MultiHeadParams(w_q=wq.T.clone(), w_k=wk.T.clone(), w_v=wv.T.clone(),
                           w_o=mha.out_proj.weight.detach().T.clone(),
                           b_q=None if bq is None else bq.clone(),
                           b_k=None if bk is None else bk.clone(),
                           b_v=None if bv is None else bv.clone(),
                           b_o=bo, num_heads=mha.num_heads)


def params_to_torch(params: MultiHeadParams) -> Any:
    """Build a ``torch.nn.MultiheadAttention(batch_first=True)`` holding ``params``' weights.

    The inverse of :func:`params_from_torch`.

    Parameters
    ----------
    params : MultiHeadParams
        NumPy parameters are converted to tensors on the CPU; torch parameters keep their
        device and dtype. ``n_kv_heads`` must equal ``num_heads``.

    Returns
    -------
    torch.nn.MultiheadAttention

    Raises
    ------
    TypeError
        ``params`` is not a :class:`MultiHeadParams`.
    ValueError
        Grouped-query or multi-query parameters (``n_kv_heads < num_heads``):
        ``torch.nn.MultiheadAttention`` has one key/value head per query head.
    """
    import torch

    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params: expected a MultiHeadParams, got {type(params).__name__}")
    if params.n_kv_heads != params.num_heads:
        raise ValueError(f"params: expected n_kv_heads == num_heads, got n_kv_heads="
                         f"{params.n_kv_heads} and num_heads={params.num_heads} "
                         f"(grouped-query attention); torch.nn.MultiheadAttention has one "
                         f"key/value head per query head, so it cannot hold these weights "
                         f"(F.scaled_dot_product_attention with enable_gqa=True computes "
                         f"the layer's attention)")
    p = params
    as_t = (lambda a: torch.as_tensor(a)) if p.backend == NUMPY else (lambda a: a.detach())
    w_q = as_t(p.w_q)
    has_bias = p.b_q is not None
    kdim = p.d_kv
    mha = torch.nn.MultiheadAttention(p.d_model, p.num_heads, bias=has_bias, batch_first=True,
                                      kdim=kdim, vdim=kdim, device=w_q.device, dtype=w_q.dtype)
    with torch.no_grad():
        if mha.in_proj_weight is not None:
            mha.in_proj_weight.copy_(torch.cat([as_t(p.w_q).T, as_t(p.w_k).T, as_t(p.w_v).T]))
        else:
            mha.q_proj_weight.copy_(as_t(p.w_q).T)
            mha.k_proj_weight.copy_(as_t(p.w_k).T)
            mha.v_proj_weight.copy_(as_t(p.w_v).T)
        if has_bias:
            mha.in_proj_bias.copy_(torch.cat([as_t(p.b_q), as_t(p.b_k), as_t(p.b_v)]))
            mha.out_proj.bias.copy_(as_t(p.b_o))
        mha.out_proj.weight.copy_(as_t(p.w_o).T)
    return mha
