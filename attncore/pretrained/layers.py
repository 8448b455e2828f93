"""The pieces of a BERT encoder besides attention, on NumPy arrays and torch tensors.

Each function takes arrays of one library and returns the same library, as the rest of
attncore does: NumPy arrays run NumPy code, torch tensors run torch code on their device.

* :func:`erf`, :func:`gelu`, :func:`gelu_tanh` -- from :mod:`attncore.layers`, the one home
  of the layers every model in attncore uses: the error function for NumPy (which has
  none), the exact GELU that BERT uses and its tanh approximation
* :func:`layer_norm` -- :func:`attncore.layers.layer_norm` with BERT's names (gain, shift)
  and epsilon (1e-12)
* :func:`mean_pool` -- average the token vectors of each sequence over its real tokens only
* :func:`l2_normalize` -- scale each row to unit Euclidean length
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend import NUMPY, backend_of, check_floating, check_min_rank, is_bool, shape_of
from ..layers import erf, gelu, gelu_tanh
from ..layers import _check_norm, _layer_norm

__all__ = ["erf", "gelu", "gelu_tanh", "l2_normalize", "layer_norm", "mean_pool"]


def layer_norm(x: Any, gain: Any, shift: Any, *, eps: float = 1e-12) -> Any:
    """Layer normalisation over the last axis: ``(x - mean) / sqrt(var + eps) * gain + shift``.

    :func:`attncore.layers.layer_norm` (the one every model in attncore uses) with BERT's
    names and epsilon.

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
    for name, p in (("gain", gain), ("shift", shift)):
        if p is None:
            raise TypeError(f"{name}: expected an array of shape (d,), got None")
    eps = _check_norm(x, gain, shift, eps, names=("gain", "shift"))
    return _layer_norm(x, gain, shift, eps)


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
