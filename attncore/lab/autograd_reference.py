"""Every gradient of attention's backward pass, by torch autograd: what chapter 8's formulas
are checked against.

:func:`attention_autograd` computes attention in plain torch operations, in float64, keeps
every intermediate (the scores ``S``, the weights ``A``, the output ``O``) and lets autograd
fill in the gradient of each. No attncore code is involved, so the comparison is between a
derivation and the machine's chain rule.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

__all__ = ["AttentionGradients", "attention_autograd"]


class AttentionGradients(NamedTuple):
    """The forward pass's arrays and their gradients, NumPy float64.

    ``s``, ``a``, ``d_s``, ``d_a``: ``(..., n_q, n_k)``; ``out``: ``(..., n_q, d_v)``;
    ``d_q``, ``d_k``, ``d_v``: the shapes of ``q``, ``k``, ``v``. ``s`` holds the scaled
    scores before masking; ``d_s`` is the gradient with respect to them (0 where masked).
    """

    s: Any
    a: Any
    out: Any
    d_s: Any
    d_a: Any
    d_q: Any
    d_k: Any
    d_v: Any


def attention_autograd(q: Any, k: Any, v: Any, d_out: Any, *, mask: Any = None,
                       causal: bool = False, scale: float | None = None
                       ) -> AttentionGradients:
    """Attention forward in plain torch, then ``out.backward(d_out)``; every gradient.

    Parameters
    ----------
    q, k, v, d_out : numpy.ndarray or torch.Tensor
        Shapes ``(..., n_q, d_k)``, ``(..., n_k, d_k)``, ``(..., n_k, d_v)`` and
        ``(..., n_q, d_v)``; converted to float64.
    mask : boolean array broadcastable to ``(..., n_q, n_k)``, optional
        True = may attend.
    causal : bool
        Also forbid key ``j > i`` for query ``i``.
    scale : float, optional
        Multiplies the scores; default ``1 / sqrt(d_k)``.

    Returns
    -------
    AttentionGradients
        A query row with no admissible key gets zero weights and output (attncore's rule):
        its scores are replaced by zeros before the softmax, whose result is then
        multiplied by 0, so that autograd's gradients stay finite.
    """
    import torch

    def tensor(x: Any, grad: bool = False) -> Any:
        x = torch.as_tensor(np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor)
                                       else x), dtype=torch.float64)
        return x.clone().requires_grad_(grad)

    q, k, v = (tensor(x, True) for x in (q, k, v))
    g = tensor(d_out)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = scale * q @ k.transpose(-1, -2)
    allowed = torch.ones(s.shape, dtype=torch.bool)
    if mask is not None:
        m = mask.cpu() if isinstance(mask, torch.Tensor) else torch.from_numpy(
            np.asarray(mask))
        allowed = allowed & m
    if causal:
        allowed = allowed & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    has_key = allowed.any(dim=-1, keepdim=True)
    masked = s.masked_fill(~allowed, float("-inf")).masked_fill(~has_key, 0.0)
    a = torch.softmax(masked, dim=-1) * has_key
    out = a @ v
    for x in (s, a):
        x.retain_grad()
    out.backward(g)
    return AttentionGradients(*(x.detach().numpy() for x in (
        s, a, out, s.grad, a.grad, q.grad, k.grad, v.grad)))
