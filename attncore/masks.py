"""Masks: which keys each query may attend to, beyond the causal mask.

* :func:`padding_mask`        -- which keys of a padded batch are real tokens
* :func:`sliding_window_mask` -- the causal band of a sliding window, ``i - W < j <= i``,
  optionally with the first ``S`` positions always visible (StreamingLLM's sink tokens)
* :func:`document_mask`       -- several documents packed into one sequence: a query sees
  the keys of its own document only (block-diagonal)
* :func:`prefix_lm_mask`      -- a prefix seen in both directions, then causal (prefix-LM)

Every mask is boolean, ``True`` = "may attend", the convention of
:func:`~attncore.scaled_dot_product_attention` (``causal=True`` is
:func:`~attncore.causal_mask`, in :mod:`attncore.attention`). Masks combine by logical
AND (``&``); a query whose row is all ``False`` gets a row of zeros from every attention
function.

The rest of this docstring is about padding.

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

__all__ = ["document_mask", "padding_mask", "prefix_lm_mask", "sliding_window_mask"]

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


# --- sliding windows, sink tokens, documents, prefixes ----------------------------------------

def check_window(window: Any, causal: bool) -> int | None:
    """``window`` checked: None, or a positive integer that comes with ``causal=True``.

    A sliding window is one-sided: query ``i`` sees keys ``i - W < j <= i``. Without
    ``causal`` the call would be ambiguous (a one-sided band, or the symmetric band
    ``|i - j| < W`` of encoder models?), so it is refused rather than guessed.
    """
    if window is None:
        return None
    window = check_size("window", window)
    if not causal:
        raise ValueError(f"window: a sliding window is causal (query i sees the keys "
                         f"i - {window} < j <= i), got window={window} with causal=False; "
                         f"pass causal=True with it (a symmetric band is a mask: "
                         f"sliding_window_mask does not make one)")
    return window


def _check_offset(offset: Any) -> int:
    if isinstance(offset, (bool, np.bool_)) or not isinstance(offset, numbers.Integral):
        raise TypeError(f"offset: expected an integer, got {offset!r} "
                        f"({type(offset).__name__})")
    return int(offset)


def window_allowed(q_pos: Any, k_pos: Any, window: int | None, sink_tokens: int = 0) -> Any:
    """The sliding-window rule on positions (NumPy or torch integer arrays, or ints):
    ``k_pos <= q_pos`` and (``q_pos - k_pos < window`` or ``k_pos < sink_tokens``).
    ``window=None`` is plain causality. Broadcasts like the arrays (unchecked: for
    attncore's own callers, the masks and the window cache)."""
    allowed = k_pos <= q_pos
    if window is not None:
        allowed = allowed & ((q_pos - k_pos < window) | (k_pos < sink_tokens))
    return allowed


def _like_library(like: Any) -> Any:
    if like is not None and not (isinstance(like, np.ndarray) or is_torch_tensor(like)):
        raise TypeError(f"like: expected a numpy.ndarray or a torch.Tensor, got "
                        f"{type(like).__name__}")
    return like


def _as_library(mask: np.ndarray, like: Any) -> Any:
    if is_torch_tensor(like):
        import torch

        return torch.from_numpy(np.ascontiguousarray(mask)).to(device=like.device)
    return mask


def window_band(n_q: int, n_k: int, window: int, like: Any) -> Any:
    """The top-left aligned causal band ``i - window < j <= i``, ``(n_q, n_k)`` bool, in
    ``like``'s library and device (arguments checked by the caller)."""
    q_pos = np.arange(n_q).reshape(n_q, 1)
    return _as_library(window_allowed(q_pos, np.arange(n_k), window), like)


def with_window(mask: Any, window: int | None, n_q: int, n_k: int, like: Any) -> Any:
    """``mask AND`` the window's band (the caller's mask, or None), or ``mask`` itself
    when there is no window."""
    if window is None:
        return mask
    band = window_band(n_q, n_k, window, like)
    return band if mask is None else mask & band


def sliding_window_mask(n_q: int, n_k: int, window: int, *, sink_tokens: int = 0,
                        offset: int = 0, like: Any = None) -> Any:
    """Boolean mask of a causal sliding window, optionally with sink tokens.

    Query ``i`` stands at position ``p = offset + i``, key ``j`` at position ``j``; the
    query may attend to key ``j`` when ::

        j <= p   and   (p - W < j   or   j < S)

    with ``W = window`` and ``S = sink_tokens``: the last ``W`` positions up to its own
    (itself included), plus the first ``S`` positions of the sequence, which
    StreamingLLM (Xiao et al., 2024) keeps in the cache as "attention sinks".
    ``sink_tokens=0`` is the plain window of Mistral, Gemma's local layers and gpt-oss's
    windowed layers; ``window >= n_k`` (with ``S = 0``) is the causal mask.

    Parameters
    ----------
    n_q, n_k : int
        Numbers of queries and keys, ``>= 0``.
    window : int
        ``W >= 1``, the positions each query sees, its own included.
    sink_tokens : int, default 0
        ``S >= 0``: the first ``S`` positions stay visible to every later query.
    offset : int, default 0
        The position of query 0. ``0`` aligns the queries top-left, as ``causal=True``
        and ``window=`` of the attention functions do (query ``i`` is position ``i``);
        ``n_k - n_q`` aligns them bottom-right, the last ``n_q`` of ``n_k`` positions, as
        new queries against a KV cache (:func:`~attncore.bottom_right_causal_mask`).
    like : numpy.ndarray or torch.Tensor, optional
        A tensor makes the result a ``torch.bool`` tensor on its device.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(n_q, n_k)``, bool

    Raises
    ------
    TypeError
        A size or ``offset`` that is not an integer; ``like`` of another library.
    ValueError
        ``n_q``, ``n_k`` or ``sink_tokens`` negative, ``window`` below 1.

    Examples
    --------
    >>> import attncore as ac
    >>> ac.sliding_window_mask(5, 5, 2, sink_tokens=1).astype(int)
    array([[1, 0, 0, 0, 0],
           [1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0],
           [1, 0, 1, 1, 0],
           [1, 0, 0, 1, 1]])
    """
    n_q, n_k = check_size("n_q", n_q, minimum=0), check_size("n_k", n_k, minimum=0)
    window = check_size("window", window)
    sink_tokens = check_size("sink_tokens", sink_tokens, minimum=0)
    offset = _check_offset(offset)
    like = _like_library(like)
    q_pos = np.arange(offset, offset + n_q).reshape(n_q, 1)
    return _as_library(window_allowed(q_pos, np.arange(n_k), window, sink_tokens), like)


def _integers_to_numpy(name: str, x: Any, layout: str) -> np.ndarray:
    """``x`` (a list, an integer NumPy array or an integer tensor) as a NumPy integer
    array of at least one dimension."""
    if is_torch_tensor(x):
        if x.dtype.is_floating_point or x.dtype.is_complex or str(x.dtype) == "torch.bool":
            raise TypeError(f"{name}: expected integers, got a tensor of dtype "
                            f"{dtype_name(x)}")
        arr = x.detach().cpu().numpy()
    elif isinstance(x, np.ndarray):
        arr = x
    elif isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError as err:                     # ragged nesting
            raise ValueError(f"{name}: expected shape {layout}, got a ragged nested "
                             f"sequence") from err
        if arr.size == 0:
            arr = arr.astype(np.int64)
    else:
        raise TypeError(f"{name}: expected a list of integers, an integer numpy.ndarray or "
                        f"an integer torch.Tensor, got {type(x).__name__}")
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected integers, got an array of dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{name}: expected shape {layout} (at least 1 dimension), got "
                         f"shape {shape_of(arr)}")
    return arr


def document_mask(doc_ids: Any, doc_ids_k: Any = None, *, like: Any = None) -> Any:
    """Boolean mask of packed documents: a query sees only the keys of its own document.

    Training packs several short documents into one sequence; attention across their
    boundaries would let one document read another. With ``doc_ids[i]`` the document
    of position ``i``, query ``i`` may attend to key ``j`` when ``doc_ids[i] ==
    doc_ids_k[j]``: block-diagonal when the ids run in order. Pass ``causal=True`` (or
    AND it with a causal mask) for a decoder: the result is causal within each document.

    Parameters
    ----------
    doc_ids : list, integer numpy.ndarray or integer torch.Tensor, shape ``(..., n_q)``
        The document of each query position (any integers: only equality counts).
    doc_ids_k : same kinds, shape ``(..., n_k)``, optional
        The document of each key position, with the same leading shape ``...``;
        default ``doc_ids`` (self-attention).
    like : numpy.ndarray or torch.Tensor, optional
        The library of the result; by default that of ``doc_ids`` (a tensor gives a
        tensor on its device, anything else NumPy).

    Returns
    -------
    numpy.ndarray or torch.Tensor, bool, shape ``(..., n_q, n_k)``
        For a batch ``(batch, n)`` of ids, ``(batch, n, n)``: against inputs with a
        heads axis, ``(batch, heads, n, d)``, insert it (``mask[:, None]``), as for
        :func:`padding_mask`.

    Raises
    ------
    TypeError
        Ids that are not integers; ``like`` of another library.
    ValueError
        0-d ids, or leading shapes of ``doc_ids`` and ``doc_ids_k`` that differ.

    Examples
    --------
    >>> import attncore as ac
    >>> ac.document_mask([0, 0, 1, 1, 1]).astype(int)
    array([[1, 1, 0, 0, 0],
           [1, 1, 0, 0, 0],
           [0, 0, 1, 1, 1],
           [0, 0, 1, 1, 1],
           [0, 0, 1, 1, 1]])
    """
    like = _like_library(like)
    ids_q = _integers_to_numpy("doc_ids", doc_ids, "(..., n_q)")
    ids_k = ids_q if doc_ids_k is None else \
        _integers_to_numpy("doc_ids_k", doc_ids_k, "(..., n_k)")
    if ids_q.shape[:-1] != ids_k.shape[:-1]:
        raise ValueError(f"doc_ids and doc_ids_k: expected the same leading shape (...), "
                         f"got doc_ids of shape {shape_of(ids_q)} and doc_ids_k of shape "
                         f"{shape_of(ids_k)}")
    mask = ids_q[..., :, None] == ids_k[..., None, :]
    return _as_library(mask, like if like is not None else doc_ids)


def prefix_lm_mask(n: int, prefix_length: Any, *, like: Any = None) -> Any:
    """Boolean mask of a prefix language model: the prefix both ways, then causal.

    The first ``P = prefix_length`` positions (a prompt, an input to condition on) see
    each other in both directions; every later position sees the whole prefix and the
    positions up to its own. Query ``i`` may attend to key ``j`` when ``j < P`` or
    ``j <= i`` (Raffel et al., 2020; PaliGemma's prompt). ``P = 0`` or ``1`` is the
    causal mask, ``P = n`` full attention. Do not pass ``causal=True`` with it: the
    causal part is in the mask already, and AND-ing them would undo the prefix.

    Parameters
    ----------
    n : int
        The sequence length, ``>= 0`` (queries and keys are the same positions).
    prefix_length : int, or list / integer array of shape ``(batch,)``
        ``0 <= P <= n``; one per sequence for a batch.
    like : numpy.ndarray or torch.Tensor, optional
        A tensor makes the result a ``torch.bool`` tensor on its device; by default the
        library of ``prefix_length`` (a tensor gives a tensor).

    Returns
    -------
    numpy.ndarray or torch.Tensor, bool
        Shape ``(n, n)`` for an integer ``prefix_length``, ``(batch, n, n)`` for one per
        sequence (insert a heads axis, ``mask[:, None]``, for ``(batch, heads, n, d)``
        inputs).

    Raises
    ------
    TypeError
        ``n`` or a prefix length that is not an integer; ``like`` of another library.
    ValueError
        ``n`` negative, a prefix length outside ``[0, n]``, lengths not 1-D.

    Examples
    --------
    >>> import attncore as ac
    >>> ac.prefix_lm_mask(4, 2).astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 0, 0],
           [1, 1, 1, 0],
           [1, 1, 1, 1]])
    """
    n = check_size("n", n, minimum=0)
    like = _like_library(like)
    if isinstance(prefix_length, numbers.Integral) and \
            not isinstance(prefix_length, (bool, np.bool_)):
        lengths, batched = np.asarray([int(prefix_length)]), False
    else:
        lengths, batched = _integers_to_numpy("prefix_length", prefix_length,
                                              "(batch,)"), True
        if lengths.ndim != 1:
            raise ValueError(f"prefix_length: expected an integer or shape (batch,), got "
                             f"shape {shape_of(lengths)}")
    bad = np.flatnonzero((lengths < 0) | (lengths > n))
    if bad.size:
        at = f"prefix_length[{int(bad[0])}] = " if batched else ""
        raise ValueError(f"prefix_length: expected a length in [0, n] = [0, {n}], got "
                         f"{at}{int(lengths[bad[0]])}")
    i = np.arange(n).reshape(n, 1)
    j = np.arange(n)
    mask = (j < lengths.astype(np.int64).reshape(-1, 1, 1)) | (j <= i)
    target = like if like is not None else (prefix_length if batched else None)
    return _as_library(mask if batched else mask[0], target)
