"""Attention sinks: one learned logit per head that takes part in every softmax (gpt-oss).

A softmax must put all of its weight somewhere, even when no key is relevant; trained
models then park weight on the first token (StreamingLLM's "attention sink", Xiao et al.,
2024). gpt-oss (OpenAI, 2025) gives each head a learned logit ``s_h`` instead: a key that
every query sees, with score ``s_h`` and value zero. Query ``i`` of head ``h`` then has the
weights ::

    a_ij = exp(S_ij) / (exp(s_h) + sum_j' exp(S_ij'))

over its admissible keys ``j``, and the output ``sum_j a_ij v_j``: the weights sum to
``1 - exp(s_h - lse'_i)``, the rest going to the sink, whose value is 0. In the
online softmax the sink is one more term of the log-sum-exp, ``lse' = log(exp(lse) +
exp(s_h))`` (:func:`attncore.add_sink_to_state`); a row with no admissible key has only
the sink, and an output of zeros.

This module holds the check of a ``sinks=`` argument, shared by every attention function
that takes one, and the arithmetic of the sink's term; the functions themselves are
:func:`~attncore.scaled_dot_product_attention`, :func:`~attncore.multi_head_attention`,
:func:`~attncore.tiled_attention` and :func:`attncore.triton.flash_attention`.
"""

from __future__ import annotations

from typing import Any

from ._backend import (
    backend_of,
    check_finite,
    dtype_name,
    is_floating,
    shape_of,
    under_vmap,
)

__all__ = ["check_sinks", "group_sinks"]


def check_sinks(sinks: Any, like: Any, batch: tuple[int, ...], *,
                heads: str = "axis -3 of q") -> Any:
    """``sinks`` checked against attention inputs of batch shape ``batch``, and shaped to
    broadcast against their scores: ``(1, ..., 1, H, 1, 1)`` (``len(batch) + 2`` axes).

    Parameters
    ----------
    sinks : numpy.ndarray or torch.Tensor
        Shape ``()`` (one logit for every head) or ``(H,)`` with ``H = batch[-1]`` (one
        per head); ``like``'s library, device and dtype; finite.
    like : numpy.ndarray or torch.Tensor
        The queries (library, device, dtype).
    batch : tuple of int
        The leading shape of the queries, ``(..., H)`` when they have a heads axis.
    heads : str
        Where the heads are, for the message.

    Returns
    -------
    The same array, reshaped (a view): differentiable through the reshape on torch.

    Raises
    ------
    TypeError
        Another library, a non-floating dtype or one other than ``like``'s.
    ValueError
        Another device, a shape other than ``()`` and ``(H,)``, NaN or infinity.
    """
    backend_of(q=like, sinks=sinks)
    if not is_floating(sinks) or sinks.dtype != like.dtype:
        raise TypeError(f"sinks: expected the dtype of the queries, {dtype_name(like)}, "
                        f"got {dtype_name(sinks)}")
    ss = shape_of(sinks)
    rank = len(batch) + 2
    if ss == ():
        shape = (1,) * rank
    elif len(ss) == 1 and batch and ss[0] == batch[-1]:
        shape = (1,) * (len(batch) - 1) + (ss[0], 1, 1)
    else:
        one_per_head = f" or ({batch[-1]},) (one per head, {heads})" if batch else \
            " (the queries have no heads axis)"
        raise ValueError(f"sinks: expected shape () (one logit for every head)"
                         f"{one_per_head}, got shape {ss}")
    if not under_vmap(sinks):
        check_finite("sinks", sinks)
    return sinks.reshape(shape)


def group_sinks(sinks: Any, group: int) -> Any:
    """Sinks shaped by :func:`check_sinks` for the grouped view of grouped-query attention
    (:func:`attncore._backend.group_heads`): the heads axis ``H`` becomes ``(H / g, g)``,
    query head ``h`` being entry ``(h // g, h % g)``."""
    lead, h = shape_of(sinks)[:-3], shape_of(sinks)[-3]
    heads = (h // group, group) if h != 1 else (1, 1)
    return sinks.reshape(lead + heads + (1, 1))
