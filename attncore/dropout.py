"""Dropout, with PyTorch's semantics, for the attention weights and the transformer block.

    dropout(x) = x * keep / (1 - p),     keep_i ~ Bernoulli(1 - p), independently

Each entry is zeroed with probability ``p`` and the survivors are scaled by ``1 / (1 - p)``,
so that the expectation of every entry is unchanged: ``E[dropout(x)] = x``. With ``p = 0``
nothing is drawn and ``x`` is returned as it is (bit for bit: no multiplication by 1).

The random draws come from a generator the caller passes, so that a call is reproducible:
a ``numpy.random.Generator`` for NumPy arrays, a ``torch.Generator`` (on the tensors'
device) for torch tensors. ``generator=None`` uses the library's default source: a fresh
``numpy.random.default_rng()`` (seeded from the operating system) on NumPy, torch's global
generator on torch.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any, NamedTuple

import numpy as np

from ._backend import NUMPY

__all__ = ["Dropout", "check_dropout", "dropout"]


class Dropout(NamedTuple):
    """A checked dropout setting: the probability ``p`` in ``(0, 1)`` and the generator
    (``None``: the library's default source). ``p = 0`` is represented by no
    :class:`Dropout` at all (``None``), so that the no-dropout path is the usual one."""

    p: float
    generator: Any


def check_dropout(dropout_p: Any, generator: Any, backend: str,
                  like: Any = None) -> Dropout | None:
    """Check ``dropout_p`` and ``generator`` for inputs of ``backend`` (and, for torch,
    on the device of the tensor ``like``, if given).

    Returns ``None`` when ``dropout_p == 0`` (nothing to do; the generator is still
    checked), else a :class:`Dropout`.

    Raises
    ------
    TypeError
        ``dropout_p`` is not a real number (a bool is refused: ``dropout_p=True`` is a
        slip), or ``generator`` is not a ``numpy.random.Generator`` (NumPy inputs) or a
        ``torch.Generator`` (torch inputs).
    ValueError
        ``dropout_p`` outside ``[0, 1)`` (``p = 1`` would zero everything and divide by 0);
        a ``torch.Generator`` on another device than ``like``.
    """
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p: expected a real number in [0, 1), got {dropout_p!r} "
                        f"({type(dropout_p).__name__})")
    p = float(dropout_p)
    if not (0.0 <= p < 1.0) or math.isnan(p):
        raise ValueError(f"dropout_p: expected a probability in [0, 1), got {p!r}")
    if generator is not None:
        if backend == NUMPY:
            if not isinstance(generator, np.random.Generator):
                raise TypeError(f"generator: expected a numpy.random.Generator for NumPy "
                                f"inputs (np.random.default_rng(seed)), got "
                                f"{type(generator).__name__}")
        else:
            torch = sys.modules["torch"]
            if not isinstance(generator, torch.Generator):
                raise TypeError(f"generator: expected a torch.Generator for torch inputs "
                                f"(torch.Generator().manual_seed(seed)), got "
                                f"{type(generator).__name__}")
            if like is not None and generator.device.type != like.device.type:
                raise ValueError(f"generator: expected a torch.Generator on the inputs' "
                                 f"device {like.device.type} (torch.Generator(device="
                                 f"{like.device.type!r})), got one on "
                                 f"{generator.device.type}")
    return None if p == 0.0 else Dropout(p, generator)


def dropout(x: Any, p: Any = 0.5, *, generator: Any = None) -> Any:
    """Zero each entry of ``x`` with probability ``p``, scale the rest by ``1 / (1 - p)``.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, any shape, floating
    p : real number in ``[0, 1)``, default 0.5
    generator : numpy.random.Generator or torch.Generator, optional
        The source of the draws, matching ``x``'s library (see the module docstring).

    Returns
    -------
    numpy.ndarray or torch.Tensor, the shape, dtype and device of ``x``
        ``x`` itself when ``p = 0``. On torch the result is differentiable in ``x``.

    Raises
    ------
    TypeError, ValueError
        As :func:`check_dropout`; ``x`` not an array of a floating dtype.
    """
    from ._backend import backend_of, check_floating

    backend = backend_of(x=x)
    check_floating("x", x)
    found = check_dropout(p, generator, backend, like=x)
    return x if found is None else apply_dropout(x, found)


def apply_dropout(x: Any, found: Dropout) -> Any:
    """Dropout after the checks: a fresh array (``x`` is not modified)."""
    keep_probability = 1.0 - found.p
    if isinstance(x, np.ndarray):
        rng = found.generator if found.generator is not None else np.random.default_rng()
        keep = rng.random(x.shape) < keep_probability
        return np.where(keep, x / np.asarray(keep_probability, dtype=x.dtype),
                        np.zeros((), dtype=x.dtype))
    torch = sys.modules["torch"]
    keep = torch.empty(x.shape, dtype=torch.float32 if x.dtype.itemsize == 2 else x.dtype,
                       device=x.device).bernoulli_(keep_probability,
                                                   generator=found.generator)
    return x * keep.to(x.dtype) / keep_probability
