"""The pieces of a BERT encoder besides attention, on NumPy arrays and torch tensors.

Each function takes arrays of one library and returns the same library, as the rest of
attncore does: NumPy arrays run NumPy code, torch tensors run torch code on their device.

* :func:`erf` -- the error function for NumPy, which has none (torch has ``torch.erf``)
* :func:`gelu` -- the exact GELU, ``x * Phi(x)``, that BERT uses (not the tanh approximation)
* :func:`layer_norm` -- normalise each token's vector over its features, then gain and shift
* :func:`mean_pool` -- average the token vectors of each sequence over its real tokens only
* :func:`l2_normalize` -- scale each row to unit Euclidean length
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev

from .._backend import NUMPY, backend_of, check_floating, check_min_rank, is_bool, shape_of

__all__ = ["erf", "gelu", "gelu_tanh", "l2_normalize", "layer_norm", "mean_pool"]

# erf for NumPy: piecewise polynomials fitted once, at import, to the C library's erf
# (Python's math.erf) at Chebyshev points. Calling math.erf element by element is exact but
# slow (a few hundred ns per element); 24 pieces of degree 10 on [0, 6) evaluate over ten
# times faster, with an error below 5e-15, far under float32's rounding (6e-8). The pieces
# approximate erf(y) / y, which is smooth and even, so that erf(y) = y * (erf(y) / y) keeps a
# small *relative* error near 0 as well. Beyond 6, erf(y) = 1 to double precision
# (1 - erf(6) = 2e-17).
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


def gelu(x: Any) -> Any:
    """Exact GELU, ``x * Phi(x) = x/2 * (1 + erf(x / sqrt(2)))``, as BERT's ``"gelu"``.

    ``Phi`` is the standard normal distribution function. NumPy inputs are evaluated in
    float64 and rounded once to their own dtype. Same shape, dtype, library and device as
    ``x``.
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

    return 0.5 * x * (1.0 + torch.erf(x * (1 / math.sqrt(2))))


def gelu_tanh(x: Any) -> Any:
    """The tanh approximation of GELU, ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    GPT-2 uses it; BERT and MiniLM do not. Here to measure the difference (a common mistake
    is to use it for a model trained with the exact GELU). Same shape, dtype and library
    as ``x``.
    """
    backend_of(x=x)
    check_floating("x", x)
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    if isinstance(x, np.ndarray):
        return 0.5 * x * (1.0 + np.tanh(inner))
    import torch

    return 0.5 * x * (1.0 + torch.tanh(inner))


def layer_norm(x: Any, gain: Any, shift: Any, *, eps: float = 1e-12) -> Any:
    """Layer normalisation over the last axis: ``(x - mean) / sqrt(var + eps) * gain + shift``.

    Parameters
    ----------
    x : array ``(..., d)``
    gain, shift : arrays ``(d,)``, the learned scale and offset (``LayerNorm.weight`` and
        ``LayerNorm.bias`` in PyTorch), same library and dtype as ``x``.
    eps : float
        Added to the variance; BERT uses ``1e-12``. The variance is the biased one (divided
        by ``d``), as in ``torch.nn.LayerNorm``.

    Returns
    -------
    array ``(..., d)``, same dtype, library and device as ``x``.
    """
    backend = backend_of(x=x, gain=gain, shift=shift)
    check_min_rank("x", x, 1, "(..., d)")
    d = shape_of(x)[-1]
    for name, p in (("gain", gain), ("shift", shift)):
        if shape_of(p) != (d,):
            raise ValueError(f"{name}: expected shape ({d},) to match x {shape_of(x)}, "
                             f"got {shape_of(p)}")
    if backend == NUMPY:
        mean = x.mean(axis=-1, keepdims=True)
        centred = x - mean
        var = (centred * centred).mean(axis=-1, keepdims=True)
        return centred / np.sqrt(var + np.asarray(eps, dtype=x.dtype)) * gain + shift
    import torch

    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(var + eps) * gain + shift


def mean_pool(hidden: Any, mask: Any) -> Any:
    """Average each sequence's token vectors over its real tokens: the sentence vector.

    Parameters
    ----------
    hidden : array ``(batch, n, d)``
        Token vectors of a padded batch (the encoder's last hidden state).
    mask : boolean array ``(batch, n)``
        ``True`` at real tokens, ``False`` at padding. Padding positions hold vectors too
        (the encoder computes them), so leaving the mask out would average them in.

    Returns
    -------
    array ``(batch, d)``: ``sum_j mask[b, j] hidden[b, j] / sum_j mask[b, j]``, same dtype,
    library and device as ``hidden``. A sequence without real tokens raises ``ValueError``.
    """
    backend = backend_of(hidden=hidden, mask=mask)
    check_floating("hidden", hidden)
    if hidden.ndim != 3:
        raise ValueError(f"hidden: expected shape (batch, n, d), got {shape_of(hidden)}")
    if not is_bool(mask):
        raise TypeError(f"mask: expected a boolean array (True = real token), got dtype "
                        f"{str(mask.dtype).replace('torch.', '')}")
    if shape_of(mask) != shape_of(hidden)[:2]:
        raise ValueError(f"mask: expected shape (batch, n) = {shape_of(hidden)[:2]}, "
                         f"got {shape_of(mask)}")
    counts = mask.sum(-1)
    if backend == NUMPY:
        if (counts == 0).any():
            raise ValueError(f"mask: expected at least one real token per sequence, got none "
                             f"in sequence {int(np.flatnonzero(counts == 0)[0])}")
        weights = mask.astype(hidden.dtype)[..., None]
        return (hidden * weights).sum(axis=1) / counts[:, None].astype(hidden.dtype)
    if bool((counts == 0).any()):
        raise ValueError("mask: expected at least one real token per sequence, got none in "
                         f"sequence {int((counts == 0).nonzero()[0, 0])}")
    weights = mask.to(hidden.dtype)[..., None]
    return (hidden * weights).sum(dim=1) / counts[:, None].to(hidden.dtype)


def l2_normalize(x: Any, *, eps: float = 1e-12) -> Any:
    """Each row ``x[..., :]`` divided by its Euclidean norm (at least ``eps``).

    ``(..., d)`` -> ``(..., d)``, same dtype, library and device. After this, the dot
    product of two rows is their cosine similarity.
    """
    backend = backend_of(x=x)
    check_floating("x", x)
    check_min_rank("x", x, 1, "(..., d)")
    if backend == NUMPY:
        norm = np.sqrt((x * x).sum(axis=-1, keepdims=True))
        return x / np.maximum(norm, np.asarray(eps, dtype=x.dtype))
    norm = x.norm(dim=-1, keepdim=True)
    return x / norm.clamp_min(eps)
