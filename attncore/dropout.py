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

__all__ = ["BlockDropout", "Dropout", "block_dropout", "block_keep", "check_dropout",
           "dropout"]


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


# --- dropout whose mask a blocked loop can draw again: tiled attention ----------------------

class BlockDropout(NamedTuple):
    """Dropout whose mask is a function of the position: entry ``(b, i, j)`` of the weights
    (``b`` the flattened batch index) is kept when a hash of ``seed`` and its index is at
    least ``p * 2**32``. Tiled attention needs this: its backward pass recomputes each
    block of weights and must drop exactly the entries its forward pass dropped, without
    storing an ``(n_q, n_k)`` mask. Each entry is still kept with probability ``1 - p``
    (up to ``2**-32``), independently in the sense that no two indices share a draw."""

    p: float
    seed: int


def block_dropout(found: Dropout, like: Any) -> BlockDropout:
    """Draw the seed of a :class:`BlockDropout` from ``found``'s generator (one draw)."""
    if isinstance(like, np.ndarray):
        rng = found.generator if found.generator is not None else np.random.default_rng()
        return BlockDropout(found.p, int(rng.integers(0, 2**32)))
    torch = sys.modules["torch"]
    seed = torch.randint(0, 2**32, (1,), generator=found.generator,
                         device=found.generator.device if found.generator is not None
                         else like.device)
    return BlockDropout(found.p, int(seed.item()))


_MASK32 = 0xFFFFFFFF


def _mix32(x: Any) -> Any:
    """A 32-bit integer hash (two multiply-xorshift rounds) of int64 values below 2**32;
    every product stays below 2**63, so int64 arithmetic never overflows."""
    for _ in range(2):
        x = x ^ (x >> 16)
        x = (x * 0x45D9F3B) & _MASK32
    return x ^ (x >> 16)


def block_keep(drop: BlockDropout, like: Any, batch: tuple[int, ...], n_q: int, n_k: int,
               r0: int, j0: int, j1: int, r1: int | None = None) -> Any:
    """The dropout factor of the block of weights ``[..., r0:r1, j0:j1]`` (``r1`` defaults
    to ``n_q``): ``1 / (1 - p)`` where the entry is kept, 0 where it is dropped.

    Returns an array of shape ``batch + (r1 - r0, j1 - j0)`` in ``like``'s library, dtype
    and device; the same arguments give the same factor, block by block or all at once.
    """
    r1 = n_q if r1 is None else r1
    factor = 1.0 / (1.0 - drop.p)
    threshold = min(int(math.ceil(drop.p * 2**32)), 2**32)
    size = math.prod(batch)
    if isinstance(like, np.ndarray):
        b = np.arange(size, dtype=np.int64).reshape(batch + (1, 1))
        i = np.arange(r0, r1, dtype=np.int64).reshape(r1 - r0, 1)
        j = np.arange(j0, j1, dtype=np.int64)
        where, one, zero = np.where, np.asarray(factor, like.dtype), np.zeros((), like.dtype)
    else:
        torch = sys.modules["torch"]
        b = torch.arange(size, dtype=torch.int64, device=like.device).reshape(batch + (1, 1))
        i = torch.arange(r0, r1, dtype=torch.int64, device=like.device).reshape(r1 - r0, 1)
        j = torch.arange(j0, j1, dtype=torch.int64, device=like.device)
        where = torch.where
        one = like.new_tensor(factor)
        zero = like.new_zeros(())
    counter = (b * n_q + i) * n_k + j
    h = _mix32((counter & _MASK32) ^ (drop.seed & _MASK32))
    h = _mix32(h ^ ((counter >> 32) & _MASK32))
    return where(h >= threshold, one, zero)
