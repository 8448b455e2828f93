"""Padding masks: which keys of a padded batch are real tokens.

Sequences of different lengths are stacked into one ``(batch, n, d)`` array by appending
filler ("padding") positions to the shorter ones. Attention must not read the filler, so
every query gets a boolean "may attend" mask over the keys: ``True`` for a real key,
``False`` for a padding key. This is the same convention as
:func:`~attncore.scaled_dot_product_attention` and as a boolean ``attn_mask`` of
``torch.nn.functional.scaled_dot_product_attention``; combine it with a causal mask by
logical AND (or pass ``causal=True``).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ._backend import check_size, dtype_name, is_torch_tensor, shape_of

__all__ = ["padding_mask"]

_SIDES = ("right", "left")


def _lengths_to_numpy(lengths: Any) -> np.ndarray:
    """``lengths`` as a 1-D int64 NumPy array, with the dtype and rank checked."""
    if is_torch_tensor(lengths):
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex or \
                str(lengths.dtype) == "torch.bool":
            raise TypeError(f"lengths: expected integers, got a tensor of dtype "
                            f"{dtype_name(lengths)}")
        arr = lengths.detach().cpu().numpy()
    elif isinstance(lengths, np.ndarray):
        arr = lengths
    elif isinstance(lengths, (list, tuple)):
        if len(lengths) == 0:
            return np.zeros(0, dtype=np.int64)
        try:
            arr = np.asarray(lengths)
        except ValueError as err:                 # ragged nesting
            raise ValueError(f"lengths: expected shape (batch,), got the nested sequence "
                             f"{lengths!r}") from err
        if arr.ndim == 1:
            for x in lengths:
                if isinstance(x, bool) or not isinstance(x, numbers.Integral):
                    raise TypeError(f"lengths: expected integers, got {x!r} "
                                    f"({type(x).__name__}) in {lengths!r}")
    else:
        raise TypeError(f"lengths: expected a list of integers, an integer numpy.ndarray or "
                        f"an integer torch.Tensor, got {type(lengths).__name__}")
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"lengths: expected integers, got an array of dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"lengths: expected shape (batch,) (1 dimension), got shape "
                         f"{shape_of(arr)} with {arr.ndim}")
    return arr


def padding_mask(lengths: Any, n_k: int, *, n_q: int | None = None, like: Any = None,
                 side: str = "right") -> Any:
    """Boolean "may attend" mask of a padded batch: ``True`` where key ``j`` is a real token.

    Parameters
    ----------
    lengths : list of int, or integer numpy.ndarray or torch.Tensor, shape ``(batch,)``
        The true length of each sequence, ``0 <= lengths[b] <= n_k``.
    n_k : int
        The padded length of the keys (the length every sequence was padded to), ``>= 0``.
    n_q : int, optional
        If given, the mask is repeated for ``n_q`` queries: shape ``(batch, n_q, n_k)``.
        If omitted, the shape is ``(batch, 1, n_k)``, which broadcasts against scores of
        shape ``(batch, n_q, n_k)`` for any ``n_q``.
    like : numpy.ndarray or torch.Tensor, optional
        Chooses the library of the result: a torch tensor gives a ``torch.bool`` tensor on
        ``like``'s device, a NumPy array gives a NumPy ``bool`` array. If omitted, the result
        follows ``lengths`` (a tensor gives a tensor on its device, anything else NumPy).
    side : {"right", "left"}, default "right"
        Where the padding sits. ``"right"``: real tokens first, so key ``j`` is real iff
        ``j < lengths[b]``. ``"left"``: padding first, as decoder-only models batch
        prompts for generation, so key ``j`` is real iff ``j >= n_k - lengths[b]``.

    Returns
    -------
    numpy.ndarray or torch.Tensor, bool, shape ``(batch, 1, n_k)`` or ``(batch, n_q, n_k)``
        A fresh (writable) array. Row sums equal ``lengths``. Only **keys** are masked: a
        query at a padding position still attends to the real keys; its output row is
        meaningless and is discarded downstream (e.g. by the loss), not set to zero here.

    Raises
    ------
    TypeError
        ``lengths`` is not integer-valued, ``n_k`` or ``n_q`` is not an integer, ``like`` is
        neither a NumPy array nor a torch tensor.
    ValueError
        ``lengths`` is not 1-D or has an entry outside ``[0, n_k]``; ``n_k`` or ``n_q`` is
        negative; ``side`` is not ``"right"`` or ``"left"``.

    Notes
    -----
    The mask has three dimensions, to match ``(batch, n, d)`` inputs. For inputs with a
    head axis, ``(batch, heads, n, d)``, insert it: ``mask[:, None]`` has shape
    ``(batch, 1, 1, n_k)``. Passing the 3-D mask itself to such inputs is an error in
    every attention function of attncore: broadcasting from the right would match its
    batch axis with the heads axis, a wrong answer that no shape check could catch when
    ``batch == heads``.
    """
    n_k = check_size("n_k", n_k, minimum=0)
    if n_q is not None:
        n_q = check_size("n_q", n_q, minimum=0)
    if side not in _SIDES:
        raise ValueError(f"side: expected 'right' or 'left', got {side!r}")
    if like is not None and not (isinstance(like, np.ndarray) or is_torch_tensor(like)):
        raise TypeError(f"like: expected a numpy.ndarray or a torch.Tensor, got "
                        f"{type(like).__name__}")
    lens = _lengths_to_numpy(lengths)
    # Compared in their own dtype: a uint64 length above 2**63 would wrap to a negative
    # int64, and the message would quote a number the caller never passed.
    bad = np.flatnonzero((lens < 0) | (lens > n_k))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"lengths: expected every length in [0, n_k] = [0, {n_k}], got "
                         f"lengths[{b}] = {int(lens[b])}")
    lens = lens.astype(np.int64, copy=False)                # in [0, n_k]: exact

    positions = np.arange(n_k)[None, :]
    if side == "right":
        keys = positions < lens[:, None]                       # (batch, n_k)
    else:
        keys = positions >= (n_k - lens)[:, None]
    rows = 1 if n_q is None else n_q
    mask = np.repeat(keys[:, None, :], rows, axis=1)           # (batch, rows, n_k), a copy

    target = like if like is not None else lengths
    if is_torch_tensor(target):
        import torch

        return torch.from_numpy(mask).to(device=target.device)
    return mask
