"""The layers of a transformer besides attention, in one place, on NumPy and torch.

Every function takes arrays of one library and returns the same library, device and
dtype, as the rest of attncore does; on torch each is differentiable. The block
(:mod:`attncore.transformer`), the language model and both pretrained models
(:mod:`attncore.pretrained`: MiniLM and SmolLM2) all compute with these.

Normalisations, over the last axis (the features of one token)::

    layer_norm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias    GPT-2, BERT
    rms_norm(x)   =  x / sqrt(mean(x^2) + eps) * weight                  Llama

RMSNorm is LayerNorm without the centring (and without a shift): the two agree exactly
on rows whose mean is 0.

Activations, elementwise::

    gelu(x) = x * Phi(x) = x/2 (1 + erf(x / sqrt 2))                      GPT-2, BERT
    silu(x) = x * sigmoid(x)                                              Llama's "Swish"

and the gated feed-forward layer of Llama (Shazeer, 2020)::

    swiglu(x) = (silu(x W_gate) * (x W_up)) W_down

Low precision: NumPy float16 rows are normalised in float32 (statistics, gain and shift)
and the result is rounded once to float16, as PyTorch does; computed in float16, a
deviation above about 256 squares to infinity and the row comes back as zeros. (torch's
own kernels already accumulate in float32.)

NumPy has no ``erf``: :func:`erf` evaluates it with piecewise polynomials fitted once, at
import, to the C library's ``erf`` (absolute error below 5e-15).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev

from ._backend import (
    NUMPY,
    backend_of,
    check_floating,
    check_min_rank,
    check_same_dtype,
    shape_of,
)

__all__ = ["erf", "gelu", "gelu_tanh", "layer_norm", "rms_norm", "silu", "swiglu"]


# --- erf for NumPy --------------------------------------------------------------------------
# Piecewise polynomials fitted once, at import, to the C library's erf (Python's math.erf)
# at Chebyshev points. Calling math.erf element by element is exact but slow (a few hundred
# ns per element); 24 pieces of degree 10 on [0, 6) evaluate over ten times faster, with an
# error below 5e-15, far under float32's rounding (6e-8). The pieces approximate erf(y) / y,
# which is smooth and even, so that erf(y) = y * (erf(y) / y) keeps a small *relative* error
# near 0 as well. Beyond 6, erf(y) = 1 to double precision (1 - erf(6) = 2e-17).
_PIECE = 0.25
_PIECES = 24
_DEGREE = 10
_CUT = _PIECE * _PIECES
_BLOCK = 1 << 16          # elements per block in gelu


def _fit_pieces() -> np.ndarray:
    coefs = np.empty((_DEGREE + 1, _PIECES))   # column p: piece [p/4, (p+1)/4), in t in [-1, 1]
    for p in range(_PIECES):
        centre = (p + 0.5) * _PIECE

        def erf_over_y(t: np.ndarray, centre: float = centre) -> np.ndarray:
            y = centre + 0.5 * _PIECE * np.ravel(t)
            return np.array([math.erf(v) / v for v in y])

        coefs[:, p] = chebyshev.cheb2poly(chebyshev.chebinterpolate(erf_over_y, _DEGREE))
    return coefs


_COEFS = _fit_pieces()


def _erf_numpy(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    y = np.fmin(np.abs(x), _CUT)                          # NaN -> the cut-off; restored below
    piece = np.minimum((y * (1 / _PIECE)).astype(np.intp), _PIECES - 1)
    t = (y - (piece + 0.5) * _PIECE) * (2 / _PIECE)       # position within the piece, [-1, 1]
    out = _COEFS[_DEGREE].take(piece)
    for k in range(_DEGREE - 1, -1, -1):                 # Horner's rule
        out *= t
        out += _COEFS[k].take(piece)
    out *= y
    out = np.copysign(np.where(y < _CUT, out, 1.0), x)
    return np.where(np.isnan(x), x, out)


def erf(x: Any) -> Any:
    """The error function ``erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt``, elementwise.

    Parameters
    ----------
    x : float array or tensor, any shape

    Returns
    -------
    Same shape, dtype, library and device as ``x``. NumPy inputs are evaluated in float64
    (absolute error below 5e-15 against the C library's ``erf``) and cast back; torch inputs
    use ``torch.erf``.
    """
    if backend_of(x=x) == NUMPY:
        check_floating("x", x)
        return _erf_numpy(x).astype(x.dtype, copy=False)
    check_floating("x", x)
    import torch

    return torch.erf(x)


# --- activations ------------------------------------------------------------------------------

def gelu(x: Any) -> Any:
    """Exact GELU, ``x * Phi(x) = x/2 * (1 + erf(x / sqrt(2)))`` (GPT-2's and BERT's
    ``"gelu"``, ``torch.nn.functional.gelu``'s default), not the tanh approximation.

    ``Phi`` is the standard normal distribution function. NumPy inputs are evaluated in
    float64 (with :func:`erf`) and rounded once to their own dtype; torch inputs use
    ``torch.erfc`` (float16 and bfloat16 computed in float32, rounded once).

    Parameters
    ----------
    x : float array or tensor, any shape

    Returns
    -------
    Same shape, dtype, library and device as ``x``.
    """
    if backend_of(x=x) == NUMPY:
        check_floating("x", x)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)
        # In blocks that stay in the CPU's cache: the dozen temporary arrays of erf's
        # polynomial evaluation are then never written to main memory (about 3x faster).
        for start in range(0, flat.size, _BLOCK):
            z = flat[start:start + _BLOCK].astype(np.float64)
            out[start:start + _BLOCK] = 0.5 * z * (1.0 + _erf_numpy(z * (1 / math.sqrt(2))))
        return out.reshape(x.shape)
    check_floating("x", x)
    import torch

    # The formula, rather than torch.nn.functional.gelu: PyTorch's fused CPU kernel is off
    # by up to 4.5 units in the last place in float32 (near x = 3.5), this by at most 2.
    # Written with erfc, 1 + erf(z) = erfc(-z): for x << 0 the sum 1 + erf cancels (all of
    # it by x = -4 in float16), erfc does not. float16 and bfloat16 are computed in float32
    # and rounded once, as NumPy's half precision is.
    z = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (0.5 * z * torch.erfc(z * (-1 / math.sqrt(2)))).to(x.dtype)


def gelu_tanh(x: Any) -> Any:
    """The tanh approximation of GELU, ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    GPT-2's original code uses it; BERT and MiniLM do not. Here to measure the difference
    (a common mistake is to use it for a model trained with the exact GELU). Same shape,
    dtype and library as ``x``.
    """
    backend_of(x=x)
    check_floating("x", x)
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    if isinstance(x, np.ndarray):
        return 0.5 * x * (1.0 + np.tanh(inner))
    import torch

    return 0.5 * x * (1.0 + torch.tanh(inner))


def silu(x: Any) -> Any:
    """The sigmoid linear unit ``x * sigmoid(x) = x / (1 + exp(-x))`` ("Swish"), elementwise.

    Parameters
    ----------
    x : float array or tensor, any shape

    Returns
    -------
    Same shape, dtype, library and device as ``x``. NumPy computes the sigmoid from
    ``exp(-|x|)``, which never overflows (``1 / (1 + e)`` for ``x >= 0``, ``e / (1 + e)``
    below), so a large negative ``x`` gives a tiny number of the right sign, not a
    warning; torch calls ``torch.nn.functional.silu``.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> ac.silu(np.array([-1000.0, -1.0, 0.0, 2.0])).round(4)
    array([-0.    , -0.2689,  0.    ,  1.7616])
    """
    if backend_of(x=x) == NUMPY:
        check_floating("x", x)
        return _silu_numpy(x)
    check_floating("x", x)
    import torch.nn.functional as F

    return F.silu(x)


def _silu_numpy(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return x * (np.where(x >= 0, 1, e) / (1 + e))


def _relu(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return np.maximum(x, np.zeros((), dtype=x.dtype))
    import torch

    return torch.relu(x)


def swiglu(x: Any, w_gate: Any, w_up: Any, w_down: Any) -> Any:
    """Llama's feed-forward layer: ``(silu(x W_gate) * (x W_up)) W_down``.

    A gated linear unit (Shazeer, 2020): the hidden layer is the product of two
    projections of the row, one passed through :func:`silu` (the gate), one not. Tokens
    are rows and weights are ``(in, out)``, as everywhere in attncore (``torch.nn.Linear``
    and Hugging Face's ``gate_proj``, ``up_proj``, ``down_proj`` store the transposes).

    Parameters
    ----------
    x : array, shape ``(..., d_model)``
    w_gate, w_up : arrays, shape ``(d_model, d_ff)``
    w_down : array, shape ``(d_ff, d_out)`` (``d_out = d_model`` in a block)

    Returns
    -------
    array, shape ``(..., d_out)``, the library, device and dtype of ``x``

    Raises
    ------
    TypeError
        Mixed libraries or dtypes, a non-floating array.
    ValueError
        Shapes that do not fit together.
    """
    backend_of(x=x, w_gate=w_gate, w_up=w_up, w_down=w_down)
    check_floating("x", x)
    check_min_rank("x", x, 1, "(..., d_model)")
    check_same_dtype(x=x, w_gate=w_gate, w_up=w_up, w_down=w_down)
    d = shape_of(x)[-1]
    g = shape_of(w_gate)
    if len(g) != 2 or g[0] != d:
        raise ValueError(f"w_gate: expected shape (d_model, d_ff) = ({d}, d_ff), got {g}")
    if shape_of(w_up) != g:
        raise ValueError(f"w_up: expected the shape of w_gate {g}, got {shape_of(w_up)}")
    down = shape_of(w_down)
    if len(down) != 2 or down[0] != g[1]:
        raise ValueError(f"w_down: expected shape (d_ff, d_out) = ({g[1]}, d_out), got "
                         f"{down}")
    return _swiglu(x, w_gate, w_up, w_down)


def _swiglu(x: Any, w_gate: Any, w_up: Any, w_down: Any) -> Any:
    """:func:`swiglu` without the checks (for callers whose weights are checked)."""
    if isinstance(x, np.ndarray):
        rows = x.reshape(-1, x.shape[-1])      # one BLAS call, not one per batch entry
        h = _silu_numpy(rows @ w_gate)
        h *= rows @ w_up
        return (h @ w_down).reshape(x.shape[:-1] + (w_down.shape[-1],))
    import torch.nn.functional as F

    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


# --- normalisations -------------------------------------------------------------------------

def _check_norm(x: Any, weight: Any, bias: Any, eps: Any,
                names: tuple[str, str] = ("weight", "bias")) -> float:
    """The checks of the normalisations; ``names`` are the caller's for weight and bias.
    Returns ``eps`` as a float."""
    arrays = {"x": x, names[0]: weight, names[1]: bias}
    backend_of(**arrays)
    check_floating("x", x)
    check_min_rank("x", x, 1, "(..., d)")
    d = shape_of(x)[-1]
    for name, p in zip(names, (weight, bias)):
        if p is not None and shape_of(p) != (d,):
            raise ValueError(f"{name}: expected shape ({d},) to match x {shape_of(x)}, "
                             f"got {shape_of(p)}")
    check_same_dtype(**{n: a for n, a in arrays.items() if a is not None})
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.floating,
                                                                 np.integer)) \
            or not 0 < eps < math.inf:
        raise ValueError(f"eps: expected a positive finite number, got {eps!r}")
    return float(eps)


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
    """Normalise each row to mean 0 and variance 1, then scale and shift it.

        LN(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias

    over the last axis, with the biased variance ``mean((x - mean(x))^2)`` (as
    ``torch.nn.LayerNorm``).

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape ``(..., d)``, floating
    weight, bias : arrays of shape ``(d,)``, optional
        The learned gain and shift (``None``: 1 and 0); the library and dtype of ``x``.
    eps : float, default 1e-5
        Added to the variance, so that a constant row is not divided by 0 (PyTorch's
        default; BERT uses 1e-12).

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape and dtype of ``x``
        NumPy float16 rows are normalised in float32 and rounded once (see the module
        docstring); torch calls ``torch.nn.functional.layer_norm``.

    Raises
    ------
    TypeError
        Mixed libraries or dtypes, a non-floating ``x``.
    ValueError
        A ``weight`` or ``bias`` whose shape is not ``(d,)``; a non-positive ``eps``.
    """
    eps = _check_norm(x, weight, bias, eps)
    return _layer_norm(x, weight, bias, eps)


def _layer_norm(x: Any, weight: Any, bias: Any, eps: float) -> Any:
    """:func:`layer_norm` without the checks."""
    if isinstance(x, np.ndarray):
        low = x.dtype.itemsize < 4
        z = x.astype(np.float32) if low else x
        mean = z.mean(axis=-1, keepdims=True)
        centred = z - mean
        var = (centred * centred).mean(axis=-1, keepdims=True)
        y = centred / np.sqrt(var + np.asarray(eps, dtype=z.dtype))
        if weight is not None:
            y = y * (weight.astype(np.float32) if low else weight)
        if bias is not None:
            y = y + (bias.astype(np.float32) if low else bias)
        return y.astype(x.dtype) if low else y
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def rms_norm(x: Any, weight: Any = None, eps: float = 1e-6) -> Any:
    """Divide each row by its root mean square, then scale it (RMSNorm, Zhang and Sennrich,
    2019; Llama's normalisation).

        RMS(x) = x / sqrt(mean(x^2) + eps) * weight

    over the last axis. It is :func:`layer_norm` without subtracting the mean (and without
    a shift): on a row whose mean is 0 the two are equal.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape ``(..., d)``, floating
    weight : array of shape ``(d,)``, optional
        The learned gain (``None``: 1); the library and dtype of ``x``.
    eps : float, default 1e-6
        Added to the mean square (Llama 2 and SmolLM2 use 1e-5).

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape and dtype of ``x``
        NumPy float16 rows are normalised in float32 and rounded once; torch calls
        ``torch.nn.functional.rms_norm``.

    Raises
    ------
    TypeError
        Mixed libraries or dtypes, a non-floating ``x``.
    ValueError
        A ``weight`` whose shape is not ``(d,)``; a non-positive ``eps``.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> x = np.array([[3.0, 4.0], [1.0, -1.0]])
    >>> ac.rms_norm(x, eps=1e-12).round(4)            # rows of root mean square 1
    array([[ 0.8485,  1.1314],
           [ 1.    , -1.    ]])
    >>> np.allclose(ac.rms_norm(x - x.mean(-1, keepdims=True)), ac.layer_norm(x, eps=1e-6))
    True
    """
    eps = _check_norm(x, weight, None, eps)
    return _rms_norm(x, weight, eps)


def _rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """:func:`rms_norm` without the checks."""
    if isinstance(x, np.ndarray):
        low = x.dtype.itemsize < 4
        z = x.astype(np.float32) if low else x
        mean_square = (z * z).mean(axis=-1, keepdims=True)
        y = z / np.sqrt(mean_square + np.asarray(eps, dtype=z.dtype))
        if weight is not None:
            y = y * (weight.astype(np.float32) if low else weight)
        return y.astype(x.dtype) if low else y
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), weight, eps)
