"""Scaled dot-product attention, with masks, on NumPy arrays and torch tensors.

    Attention(Q, K, V) = softmax(Q K^T * scale) V,     scale = 1 / sqrt(d_k) by default.

The NumPy function is the readable reference: three lines of algebra plus masking. The torch
function computes the same thing; when the attention weights are not requested it calls
``torch.nn.functional.scaled_dot_product_attention``, which dispatches to fused
(FlashAttention-style) kernels on the CPU and the GPU, and then applies attncore's rule for
fully masked rows.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    AttentionShape,
    check_attention_inputs,
    check_flag,
    check_size,
    group_heads,
    is_torch_tensor,
    ungroup_heads,
)
from ._guard import Guard, attention_guard, is_low_precision
from .dropout import Dropout, apply_dropout, check_dropout
from .masks import check_window, with_window
from .online_softmax import _finalize, _finite_or_zero, _state
from .sinks import check_sinks, group_sinks

__all__ = ["causal_mask", "check_attention_inputs", "combined_mask",
           "scaled_dot_product_attention"]


def scaled_dot_product_attention(q: Any, k: Any, v: Any, *, mask: Any = None,
                                 causal: bool = False, scale: Any = None,
                                 return_weights: bool = False,
                                 enable_gqa: bool = False, dropout_p: float = 0.0,
                                 generator: Any = None, window: int | None = None,
                                 sinks: Any = None) -> Any:
    """Softmax-weighted average of the value rows, one distribution per query.

    Parameters
    ----------
    q : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_k)``
        Queries, one per row, of a floating dtype (float16, float32, float64; bfloat16 on
        torch). ``d_k >= 1``. NumPy's longdouble (platform-dependent, absent from torch)
        and torch's 8-bit floats (no matrix products on most devices) are refused, and so
        are ``numpy.matrix`` and masked arrays (use ``np.asarray`` and ``mask=``).
    k : same library and dtype as ``q``, shape ``(..., n_k, d_k)``
        Keys, one per row; same ``d_k`` as ``q``. ``n_k = 0`` is allowed (see Returns).
    v : same library and dtype as ``q``, shape ``(..., n_k, d_v)``
        Values, one per key.
    mask : boolean array broadcastable to ``(..., n_q, n_k)``, optional
        ``True`` means "query i may attend to key j". It has at most 2 dimensions (one
        mask for every batch entry), or exactly as many as the scores, each leading axis
        of size 1 or equal to that of ``q``. A mask with some but not all of the batch
        axes would be matched to them from the right, which for a padding mask of shape
        ``(batch, 1, n_k)`` against ``(batch, heads, n, d)`` inputs lines the batch up
        with the heads; it is refused unless its leading axes all have size 1 (write
        ``mask[:, None]``). Broadcasting never enlarges the batch shape of ``q``.
    causal : bool, default False
        Also forbid key ``j > i`` for query ``i`` (top-left aligned, as in PyTorch:
        ``tril(ones(n_q, n_k))``). Combined with ``mask`` by logical AND.
    scale : real scalar, optional
        Multiplies the scores; defaults to ``1 / sqrt(d_k)``. A Python or NumPy number, a
        0-d NumPy array or a 0-d tensor (read as a number, not differentiated).
    return_weights : bool, default False
        Also return the attention weights.
    enable_gqa : bool, default False
        Grouped-query attention, as in PyTorch: ``k`` and ``v`` may have fewer heads than
        ``q`` on axis -3, ``q`` of shape ``(..., H_q, n_q, d_k)`` and ``k``, ``v`` of shape
        ``(..., H_kv, n_k, d)`` with ``H_kv`` dividing ``H_q``; query head ``h`` attends
        with key/value head ``h // (H_q // H_kv)``. Keys and values are shared, never
        copied (see Notes). With equal head counts it changes nothing.
    dropout_p : real number in ``[0, 1)``, default 0.0
        Dropout on the attention weights, as in PyTorch: after the softmax each weight is
        zeroed with probability ``dropout_p`` and the others divided by ``1 - dropout_p``
        (:func:`attncore.dropout.dropout`). 0 changes nothing, bit for bit. Training only:
        leave it 0 at inference.
    generator : numpy.random.Generator or torch.Generator, optional
        The source of the dropout draws, matching the inputs' library; ``None`` uses the
        library's default source.
    window : int, optional
        A sliding window of ``W >= 1`` positions: query ``i`` sees the keys
        ``i - W < j <= i`` only (Mistral, Gemma's local layers, gpt-oss). It needs
        ``causal=True`` (a window is one-sided; without ``causal`` the call is refused
        as ambiguous) and keeps its top-left alignment: query ``i`` is position ``i``
        whatever ``n_q`` and ``n_k``. For the last ``n_q`` of ``n_k`` positions (new
        queries against a cache), or to keep the first positions visible too (sink
        tokens), pass :func:`~attncore.sliding_window_mask` as ``mask`` instead.
        Combined with ``mask`` by logical AND.
    sinks : numpy.ndarray or torch.Tensor, optional
        Attention sinks, gpt-oss's form: one logit per head, ``s_h``, that takes part in
        the softmax as a key of score ``s_h`` (not scaled) and value zero, so that
        ``a_ij = exp(S_ij) / (exp(s_h) + sum_j' exp(S_ij'))``. Shape ``()`` (the same for
        every row) or ``(H,)`` with ``H = q.shape[-3]`` (one per query head, also with
        ``enable_gqa``); the dtype, library and device of ``q``; finite. Differentiable
        on torch. See :mod:`attncore.sinks`.

    Returns
    -------
    out : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_v)``
        Same dtype, library and device as ``q``.
    weights : numpy.ndarray or torch.Tensor, shape ``(..., n_q, n_k)``
        Only if ``return_weights``; each row sums to 1 (with dropout: the weights actually
        used, after dropout, as PyTorch's ``nn.MultiheadAttention`` returns them); with
        ``sinks``, to 1 minus the sink's weight.

    Raises
    ------
    TypeError
        Mixed NumPy/torch inputs, a non-floating, unsupported (longdouble, 8-bit) or
        mismatched dtype, a ``numpy.matrix`` or masked array, a non-boolean mask,
        a flag that is not ``True`` or ``False``, a scale that is not a real scalar, a
        ``dropout_p`` that is not a real number, a generator of the wrong library, a
        ``window`` that is not an integer, ``sinks`` of another library or dtype.
    ValueError
        Rank below 2, ``d_k = 0``, ``d_k`` of ``q`` and ``k`` differ, ``n_k`` of ``k`` and
        ``v`` differ, batch shapes differ (with ``enable_gqa``: other than in a number of
        key/value heads that divides the number of query heads), a mask that does not broadcast or whose batch
        axes are ambiguous, a non-finite scale, a NaN or infinity in ``q``, ``k`` or ``v``
        (even one a mask hides), scores that overflow the working precision, a
        ``dropout_p`` outside ``[0, 1)``, a ``window`` below 1 or without
        ``causal=True``, ``sinks`` of a shape other than ``()`` and ``(H,)`` or with NaN
        or infinity.

    Notes
    -----
    A query row whose keys are **all** masked, and every row when ``n_k = 0``, has no
    distribution to average with. attncore returns **zeros** for that row of ``out`` and
    of ``weights``, never NaN. (With ``sinks`` such a row puts all its weight on the
    sink, whose value is zero: the same zeros.)

    ``q``, ``k`` and ``v`` must share one library, one device, one floating dtype, and the
    same leading (batch) shape ``...``; attncore does not broadcast batch axes silently.
    float16 and bfloat16 inputs are computed with float32 scores and sums (as PyTorch's
    fused kernels do) and the results cast back.

    On torch the function is differentiable, and works under ``torch.func.vmap``; there
    the values cannot be read, so NaN inputs and overflow are not checked. Under the other
    ``torch.func`` transforms (``grad``, ``jacrev``, ``jvp``, ``jacfwd``) and forward-mode
    AD the values are checked as always, and the output is computed with attncore's own
    arithmetic (PyTorch's fused kernels have no forward derivative). A second derivative
    (``create_graph=True``) needs that arithmetic too: ask for ``return_weights=True``,
    which always uses it, or call it under a transform.

    Grouped-query attention (``enable_gqa=True`` with fewer key/value heads) runs, on
    torch, in PyTorch's fused kernel with its own ``enable_gqa``; attncore's own
    arithmetic (NumPy, and the weights path) views ``q`` as ``(..., H_kv, g, n_q, d_k)``
    and broadcasts each key/value head over its ``g`` query heads, so that no key or value
    is copied (``repeat_interleave`` would copy them ``g`` times).

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> q = np.array([[1.0, 0.0]])
    >>> k = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> v = np.array([[1.0], [3.0]])
    >>> out, w = ac.scaled_dot_product_attention(q, k, v, scale=np.log(3.0),
    ...                                          return_weights=True)
    >>> w.round(6), out.round(6)
    (array([[0.75, 0.25]]), array([[1.5]]))
    """
    shape = check_attention_inputs(q, k, v, mask=mask, causal=causal, scale=scale,
                                   enable_gqa=enable_gqa)
    return_weights = check_flag("return_weights", return_weights)
    drop = check_dropout(dropout_p, generator, shape.backend, like=q)
    window = check_window(window, shape.causal)
    if sinks is not None:
        sinks = check_sinks(sinks, q, shape.batch)
    if window is not None:
        shape = shape._replace(window=window)
    return attend(q, k, v, mask, shape, return_weights, attention_guard(q, k, v, shape),
                  drop, sinks)


def attend(q: Any, k: Any, v: Any, mask: Any, shape: AttentionShape, return_weights: bool,
           guard: Guard, drop: Dropout | None = None, sinks: Any = None) -> Any:
    """The computation, after the checks: for callers that have checked the arguments
    themselves (:func:`~attncore.multi_head_attention`). ``drop`` is the checked dropout
    (:func:`attncore.dropout.check_dropout`), None for none; ``sinks`` the sink logits
    shaped by :func:`attncore.sinks.check_sinks`, None for none."""
    # (Under torch.func's grad, jvp and the like, and forward-mode AD, attncore's own
    # arithmetic: PyTorch's fused kernels have no forward derivative, nor a second one.
    # Nor do they take a sink.)
    if shape.window is not None:
        # a sliding window is a mask here (tiled attention skips the blocks outside it);
        # its band holds the causal part too
        mask = with_window(mask, shape.window, shape.n_q, shape.n_k, q)
        shape = shape._replace(causal=False, window=None)
    fused = shape.backend != NUMPY and not return_weights and guard.certified and \
        not guard.transformed and abs(shape.scale) >= _TINY and drop is None and \
        sinks is None
    if shape.group > 1 and not (fused and shape.n_k):
        # grouped-query attention in attncore's own arithmetic: ordinary attention on
        # grouped views of the same arrays (PyTorch's kernel takes enable_gqa itself)
        q, k, v, mask, grouped = group_heads(q, k, v, mask, shape)
        if sinks is not None:
            sinks = group_sinks(sinks, shape.group)
        return ungroup_heads(attend(q, k, v, mask, grouped, return_weights, guard, drop,
                                    sinks), shape)
    if shape.backend == NUMPY:
        if drop is not None and not return_weights:
            # dropout acts on the weights, so they are formed (and then not returned)
            return attend(q, k, v, mask, shape, True, guard, drop, sinks)[0]
        # Scores within a few units of the largest float (checked finite by the guard) may
        # still overflow in s - max to -inf, whose exponential is the right 0: no warning.
        with np.errstate(over="ignore") if not guard.certified else nullcontext():
            if not is_low_precision(q):
                return _attention_numpy(q, k, v, mask, shape, return_weights,
                                        guard.v_factor, drop, sinks)
            result = _attention_numpy(*(x.astype(np.float32) for x in (q, k, v)), mask,
                                      shape, return_weights, guard.v_factor, drop,
                                      None if sinks is None else sinks.astype(np.float32))
        if return_weights:
            return result[0].astype(q.dtype), result[1].astype(q.dtype)
        return result.astype(q.dtype)
    # (PyTorch's fused CPU kernel returns NaN under is_causal=True for a scale <= 0, as
    # if it scaled the masked -inf scores. A negative scale is passed to it as a positive
    # one on -q, which is exact; a scale that is 0 in float32, uniform weights over the
    # admissible keys, takes attncore's path.)
    if fused:
        if shape.scale < 0:
            return _attention_fused(-q, k, v, mask, shape._replace(scale=-shape.scale),
                                    guard.vmapped)
        return _attention_fused(q, k, v, mask, shape, guard.vmapped)
    return _attention_torch(q, k, v, mask, shape, return_weights, guard.v_factor, drop,
                            sinks)


_TINY = float(np.finfo(np.float32).tiny)


def causal_mask(n_q: int, n_k: int, *, like: Any = None) -> Any:
    """Boolean causal mask, True on and below the diagonal: query ``i`` sees keys ``0..i``.

    Parameters
    ----------
    n_q, n_k : int
        Numbers of queries and keys, ``>= 0``.
    like : numpy.ndarray or torch.Tensor, optional
        A tensor makes the result a ``torch.bool`` tensor on its device.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(n_q, n_k)``, bool
        ``tril(ones(n_q, n_k))``: top-left aligned, as PyTorch's ``is_causal``.
    """
    n_q, n_k = check_size("n_q", n_q, minimum=0), check_size("n_k", n_k, minimum=0)
    return lower_triangle(n_q, n_k, 0, like)


def lower_triangle(n_q: int, n_k: int, offset: int, like: Any) -> Any:
    """``tril(ones(n_q, n_k), k=offset)`` as bool, NumPy or (``like`` a tensor) torch on
    ``like``'s device: the causal masks, top-left (``offset=0``) and bottom-right aligned.
    The caller has checked ``n_q`` and ``n_k`` (with :func:`check_size`)."""
    if like is None or isinstance(like, np.ndarray):
        return np.tri(n_q, n_k, offset, dtype=bool)
    if not is_torch_tensor(like):
        raise TypeError(f"like: expected a numpy.ndarray or a torch.Tensor, got "
                        f"{type(like).__name__}")
    import torch

    return torch.ones(n_q, n_k, dtype=torch.bool, device=like.device).tril(offset)


def combined_mask(mask: Any, causal: bool, n_q: int, n_k: int, like: Any) -> Any:
    """The mask actually applied: ``mask AND causal``, or None if neither is set."""
    if not causal:
        return mask
    tri = causal_mask(n_q, n_k, like=like)
    return tri if mask is None else mask & tri


def _attention_numpy(q, k, v, mask, shape, return_weights, v_factor, drop=None, sinks=None):
    if v_factor is not None:
        v = v / v_factor
    # Scaling q (n_q x d_k numbers) rather than the scores (n_q x n_k) is the same product
    # with far fewer multiplications; the score matrix is the one large array, so it is then
    # masked and exponentiated in place. (n_k = 0 gives an empty score matrix, and an
    # output of zeros: a sum over no keys.)
    scores = (q * np.asarray(shape.scale, dtype=q.dtype)) @ np.swapaxes(k, -1, -2)
    allowed = combined_mask(mask, shape.causal, shape.n_q, shape.n_k, q)
    if allowed is not None:
        np.copyto(scores, np.asarray(-np.inf, dtype=q.dtype), where=~allowed)
    if return_weights:
        if shape.n_k:
            m = scores.max(axis=-1, keepdims=True)
            if sinks is not None:
                m = np.maximum(m, sinks)         # finite now, and the sink's term below
            scores -= _finite_or_zero(m)
            np.exp(scores, out=scores)
            total = scores.sum(axis=-1, keepdims=True)
            if sinks is not None:
                total += np.exp(sinks - m)       # the sink: one more term, no value
            # a fully masked row is exp(-inf) = 0 already: leave it zeros
            np.divide(scores, total, out=scores, where=total > 0)
        if drop is not None:
            scores = apply_dropout(scores, drop)
        out = scores @ v
        if v_factor is not None:
            out *= v_factor
        return out, scores
    if not shape.n_k:
        out = scores @ v
    elif sinks is not None:
        # The sink is one more key, of score s_h and value 0: it raises the maximum
        # (never -inf now) and adds exp(s_h - m) to each row's sum, and nothing to out.
        m = np.maximum(scores.max(axis=-1, keepdims=True), sinks)
        state = _state(scores, v, m, overwrite=True, empty_rows=False)
        del scores
        state.sum[...] += np.exp(sinks - m)
        out = _finalize(state, in_place=True, empty_rows=False)
    else:
        # Without the weights the division can wait: softmax(S) V = (exp(S - m) V) / l,
        # where m is the row maximum and l the row sum of exp(S - m); that divides
        # n_q x d_v numbers instead of n_q x n_k. The triple (m, l, exp(S - m) V) is the
        # online-softmax state that tiled attention keeps per block of keys; here the one
        # block holds every key.
        # Only a caller's mask can leave a row without keys (the causal one keeps key 0).
        empty_rows = mask is not None
        state = _state(scores, v, overwrite=True, empty_rows=empty_rows)
        del scores     # free the n_q x n_k array before the (small) division allocates
        out = _finalize(state, in_place=True, empty_rows=empty_rows)
    if v_factor is not None:
        out *= v_factor
    return out


def _attention_torch(q, k, v, mask, shape, return_weights, v_factor, drop=None, sinks=None):
    """attncore's own arithmetic on torch: the weights path, and any call whose numbers
    are large enough that the guard checked the scores one by one."""
    import torch

    work = torch.float32 if is_low_precision(q) else q.dtype
    qw, kw, vw = q.to(work), k.to(work), v.to(work)
    if v_factor is not None:
        vw = vw / v_factor
    scores = (qw * shape.scale) @ kw.transpose(-1, -2)
    allowed = combined_mask(mask, shape.causal, shape.n_q, shape.n_k, q)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    if shape.n_k:
        m = scores.amax(dim=-1, keepdim=True)
        if sinks is not None:
            sinks = sinks.to(work)
            m = torch.maximum(m, sinks)          # finite now, and the sink's term below
        e = torch.exp(scores - _finite_or_zero(m))
        total = e.sum(dim=-1, keepdim=True)
        if sinks is not None:
            total = total + torch.exp(sinks - m)  # the sink: one more term, no value
        # a fully masked row is exp(-inf) = 0 already; dividing it by 1 keeps it zeros
        # (and its gradient finite)
        scores = e / torch.where(total > 0, total, torch.ones_like(total))
    if drop is not None:
        scores = apply_dropout(scores, drop)
    out = scores @ vw
    if v_factor is not None:
        out = out * v_factor
    if return_weights:
        return out.to(q.dtype), scores.to(q.dtype)
    return out.to(q.dtype)


def _attention_fused(q, k, v, mask, shape, vmapped=False):
    """PyTorch's ``F.scaled_dot_product_attention``, on a 4-D view of the inputs."""
    import torch.nn.functional as F

    batch, n_q, n_k, d_v = shape.batch, shape.n_q, shape.n_k, shape.d_v
    if not n_k:
        return (q @ k.transpose(-1, -2)) @ v         # a sum over no keys: zeros
    allowed = mask if mask is None or not shape.causal else \
        combined_mask(mask, True, n_q, n_k, q)
    # PyTorch's fused CPU kernel takes only 4-D (batch, heads, n, d) inputs; anything else
    # falls back to its slower "math" kernel. So 2-D and 3-D inputs get leading axes of
    # size 1, and more than two batch axes are folded into two. (Not under vmap: the fused
    # kernel has no batching rule there, while the math kernel is plain matrix products.)
    if allowed is not None and allowed.ndim < 2:           # PyTorch wants (n_q, n_k) at least
        allowed = allowed.reshape((1,) * (2 - allowed.ndim) + tuple(allowed.shape))
    full_mask = allowed is not None and allowed.ndim == len(batch) + 2
    if vmapped:
        pass
    elif len(batch) < 2:
        # Adding axes of size 1 is a view. The sizes are spelled out rather than read from
        # x.shape (slicing a torch.Size costs microseconds, and at N = 256 every one shows);
        # k and v have their own number of heads, fewer in grouped-query attention.
        d_k = shape.d_k
        if batch:
            h_kv = k.shape[0]
            q = q.view(1, batch[0], n_q, d_k)
            k, v = k.view(1, h_kv, n_k, d_k), v.view(1, h_kv, n_k, d_v)
        else:
            q, k, v = q.view(1, 1, n_q, d_k), k.view(1, 1, n_k, d_k), v.view(1, 1, n_k, d_v)
        if full_mask:
            allowed = allowed.view(1, *allowed.shape) if batch else \
                allowed.view(1, 1, *allowed.shape)
    elif len(batch) > 2:
        rows = math.prod(batch[:-1])
        q, k, v = (x.reshape((rows,) + tuple(x.shape[-3:])) for x in (q, k, v))
        if full_mask:
            allowed = allowed.expand(*batch, n_q, n_k).reshape((rows,) + batch[-1:] +
                                                               (n_q, n_k))
    gqa = {"enable_gqa": True} if shape.group > 1 else {}
    if allowed is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal,
                                             scale=shape.scale, **gqa)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=shape.scale,
                                             **gqa)
        # PyTorch's kernels have disagreed on rows with no admissible key (NaN in some
        # versions and kernels, zeros in others); attncore's rule is zeros, so impose it.
        out = out.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    if vmapped or len(batch) == 2:
        return out
    if len(batch) < 2:
        return out.view(batch[0], n_q, d_v) if batch else out.view(n_q, d_v)
    return out.reshape(*batch, n_q, d_v)
