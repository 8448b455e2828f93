"""Multi-head attention: parameters, head splitting, and the layer itself.

Conventions follow the course's notation, where tokens are **rows**: ``Q = X W_Q + b_Q``
with ``W_Q`` of shape ``(d_in, d_model)``. (``torch.nn.Linear`` stores the transpose,
``(out, in)``; :func:`params_from_torch` and :func:`params_to_torch` convert.)

    head_h  = Attention(Q[:, cols_h], K[:, cols_h], V[:, cols_h])     cols_h = h*d_head ... (h+1)*d_head
    output  = Concat(head_1, ..., head_H) W_O + b_O

Projecting once with the full ``W_Q`` and then splitting the columns into heads is the same
maths as giving each head its own ``(d_in, d_head)`` block of ``W_Q``: column block h of
``X W_Q`` is ``X`` times column block h of ``W_Q``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    TORCH,
    backend_of,
    check_floating,
    check_min_rank,
    check_same_dtype,
    shape_of,
)
from .attention import scaled_dot_product_attention


@dataclass
class MultiHeadParams:
    """Weights of one multi-head attention layer (all NumPy arrays or all torch tensors).

    Attributes
    ----------
    w_q : ``(d_model, d_model)``      queries are projected from the query-side input
    w_k : ``(d_kv, d_model)``         keys from the key/value-side input (``d_kv = d_model``
    w_v : ``(d_kv, d_model)``         for self-attention)
    w_o : ``(d_model, d_model)``      output projection applied to the concatenated heads
    b_q, b_k, b_v, b_o : ``(d_model,)`` or None   biases
    num_heads : int                   must divide ``d_model``; each head has width
                                      ``d_head = d_model // num_heads``
    """

    w_q: Any
    w_k: Any
    w_v: Any
    w_o: Any
    b_q: Any
    b_k: Any
    b_v: Any
    b_o: Any
    num_heads: int

    def __post_init__(self) -> None:
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "num_heads"}
        backend_of(**arrays)
        for name, x in arrays.items():
            if x is not None:
                check_floating(name, x)
        check_same_dtype(**arrays)
        d_model = shape_of(self.w_q)[-1] if self.w_q.ndim == 2 else None
        if self.w_q.ndim != 2 or shape_of(self.w_q)[0] != d_model:
            raise ValueError(f"w_q: expected shape (d_model, d_model), got {shape_of(self.w_q)}")
        check_num_heads(self.num_heads, d_model)
        biases = [self.b_q is None, self.b_k is None, self.b_v is None, self.b_o is None]
        if len(set(biases)) > 1:
            raise ValueError("b_q, b_k, b_v, b_o: expected all four biases or none, got "
                             + ", ".join(f"{n}={'None' if m else 'array'}" for n, m in
                                         zip(("b_q", "b_k", "b_v", "b_o"), biases)))
        d_kv = shape_of(self.w_k)[0] if self.w_k.ndim == 2 else None
        expected = {"w_k": (d_kv, d_model), "w_v": (d_kv, d_model), "w_o": (d_model, d_model),
                    "b_q": (d_model,), "b_k": (d_model,), "b_v": (d_model,), "b_o": (d_model,)}
        for name, shape in expected.items():
            x = getattr(self, name)
            if x is not None and shape_of(x) != shape:
                raise ValueError(f"{name}: expected shape {shape} for d_model={d_model}, "
                                 f"got {shape_of(x)}")

    @property
    def d_model(self) -> int:
        return int(self.w_q.shape[1])

    @property
    def d_kv(self) -> int:
        """Width of the key/value-side input (``d_model`` unless built for cross-attention)."""
        return int(self.w_k.shape[0])

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @property
    def backend(self) -> str:
        return NUMPY if isinstance(self.w_q, np.ndarray) else TORCH

    def num_parameters(self) -> int:
        """Number of scalars in all weights and biases."""
        return sum(int(np.prod(getattr(self, f.name).shape)) for f in fields(self)
                   if f.name != "num_heads" and getattr(self, f.name) is not None)


def check_num_heads(num_heads: Any, d_model: int) -> None:
    """Raise ``ValueError`` unless ``num_heads`` is a positive integer dividing ``d_model``."""
    if not isinstance(num_heads, (int, np.integer)) or isinstance(num_heads, bool) \
            or num_heads <= 0:
        raise ValueError(f"num_heads: expected a positive integer, got {num_heads!r}")
    if d_model % num_heads:
        raise ValueError(f"num_heads: expected a divisor of d_model={d_model}, got {num_heads} "
                         f"({d_model} / {num_heads} = {d_model / num_heads:.3g} is not an "
                         f"integer head width)")


def init_multihead(d_model: int, num_heads: int, *, d_kv: int | None = None, bias: bool = True,
                   seed: int = 0, dtype: Any = np.float64, backend: str = NUMPY,
                   device: Any = None) -> MultiHeadParams:
    """Seeded parameters for a multi-head attention layer.

    Weights are drawn Xavier-uniform, ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``,
    which keeps the variance of activations roughly constant through the projections (the
    assumption behind the 1/sqrt(d_k) scaling); biases start at zero. The draw uses NumPy's
    ``default_rng(seed)`` on both backends, so the same seed gives the same numbers on NumPy,
    torch CPU and torch CUDA.

    Parameters
    ----------
    d_model : width of the query-side input, of each projection and of the output.
    num_heads : number of heads; must divide ``d_model``.
    d_kv : width of the key/value-side input, for cross-attention (default ``d_model``).
    bias : include ``b_q, b_k, b_v, b_o``.
    dtype : NumPy dtype (``np.float32``/``np.float64``) or, for torch, a ``torch.dtype``.
    backend : ``"numpy"`` or ``"torch"``; ``device`` places torch tensors.
    """
    check_num_heads(num_heads, d_model)
    d_kv = d_model if d_kv is None else d_kv
    rng = np.random.default_rng(seed)

    def xavier(fan_in: int, fan_out: int) -> np.ndarray:
        a = math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, size=(fan_in, fan_out))

    arrays = {"w_q": xavier(d_model, d_model), "w_k": xavier(d_kv, d_model),
              "w_v": xavier(d_kv, d_model), "w_o": xavier(d_model, d_model)}
    for name in ("b_q", "b_k", "b_v", "b_o"):
        arrays[name] = np.zeros(d_model) if bias else None
    if backend == NUMPY:
        conv = {n: (None if a is None else a.astype(dtype)) for n, a in arrays.items()}
    elif backend == TORCH:
        import torch

        tdtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np.dtype(dtype).name)
        conv = {n: (None if a is None else torch.tensor(a, dtype=tdtype, device=device))
                for n, a in arrays.items()}
    else:
        raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
    return MultiHeadParams(num_heads=num_heads, **conv)


def split_heads(x: Any, num_heads: int) -> Any:
    """``(..., n, d_model)`` -> ``(..., num_heads, n, d_head)``: column block h becomes head h."""
    backend_of(x=x)
    check_min_rank("x", x, 2, "(..., n, d_model)")
    *batch, n, d_model = shape_of(x)
    check_num_heads(num_heads, d_model)
    x = x.reshape(*batch, n, num_heads, d_model // num_heads)
    return x.swapaxes(-2, -3) if isinstance(x, np.ndarray) else x.transpose(-2, -3)


def merge_heads(x: Any) -> Any:
    """``(..., num_heads, n, d_head)`` -> ``(..., n, num_heads * d_head)``; inverse of split_heads."""
    backend_of(x=x)
    check_min_rank("x", x, 3, "(..., num_heads, n, d_head)")
    *batch, h, n, d_head = shape_of(x)
    x = x.swapaxes(-2, -3) if isinstance(x, np.ndarray) else x.transpose(-2, -3)
    return x.reshape(*batch, n, h * d_head)


def _linear(x: Any, w: Any, b: Any) -> Any:
    y = x @ w
    return y if b is None else y + b


def multi_head_attention(params: MultiHeadParams, x_q: Any, x_kv: Any = None, *,
                         mask: Any = None, causal: bool = False,
                         return_weights: bool = False) -> Any:
    """Multi-head attention layer: project, split into heads, attend, merge, project.

    Parameters
    ----------
    params : MultiHeadParams
    x_q : array ``(..., n_q, d_model)``
        Query-side input (the tokens that ask).
    x_kv : array ``(..., n_k, d_kv)``, optional
        Key/value-side input. ``None`` means self-attention (``x_kv = x_q``); another
        sequence (for example an encoder's output) makes it cross-attention.
    mask : boolean array broadcastable to ``(..., n_q, n_k)``, optional
        The same mask for every head; True = may attend.
    causal : bool
        Forbid attending to later positions (see ``scaled_dot_product_attention``).
    return_weights : bool
        Also return the per-head attention weights.

    Returns
    -------
    out : array ``(..., n_q, d_model)``
    weights : array ``(..., num_heads, n_q, n_k)``, only if ``return_weights``
    """
    self_attention = x_kv is None
    x_kv = x_q if self_attention else x_kv
    backend_of(params=params.w_q, x_q=x_q, x_kv=x_kv, mask=mask)
    check_min_rank("x_q", x_q, 2, "(..., n_q, d_model)")
    check_min_rank("x_kv", x_kv, 2, "(..., n_k, d_kv)")
    check_same_dtype(params=params.w_q, x_q=x_q, x_kv=x_kv)
    if shape_of(x_q)[-1] != params.d_model:
        raise ValueError(f"x_q: expected last axis d_model={params.d_model}, "
                         f"got shape {shape_of(x_q)}")
    if shape_of(x_kv)[-1] != params.d_kv:
        raise ValueError(f"x_kv: expected last axis d_kv={params.d_kv}, "
                         f"got shape {shape_of(x_kv)}")
    h = params.num_heads
    q = split_heads(_linear(x_q, params.w_q, params.b_q), h)
    k = split_heads(_linear(x_kv, params.w_k, params.b_k), h)
    v = split_heads(_linear(x_kv, params.w_v, params.b_v), h)
    if mask is not None and mask.ndim >= 2:
        # one mask for all heads: insert the head axis just before (n_q, n_k)
        mask = mask[..., None, :, :]
    result = scaled_dot_product_attention(q, k, v, mask=mask, causal=causal,
                                          return_weights=return_weights)
    heads, weights = result if return_weights else (result, None)
    out = _linear(merge_heads(heads), params.w_o, params.b_o)
    return (out, weights) if return_weights else out


def multi_head_attention_loop(params: MultiHeadParams, x_q: Any, x_kv: Any = None, *,
                              mask: Any = None, causal: bool = False) -> Any:
    """The same layer written head by head: each head uses its own column block of the weights.

    Slower and longer than :func:`multi_head_attention`, and equal to it; it exists to show
    that the reshape trick is the same maths. Shapes as in :func:`multi_head_attention`.
    """
    x_kv = x_q if x_kv is None else x_kv
    d = params.d_head
    heads = []
    for h in range(params.num_heads):
        cols = slice(h * d, (h + 1) * d)
        b = {n: (None if getattr(params, n) is None else getattr(params, n)[cols])
             for n in ("b_q", "b_k", "b_v")}
        q_h = _linear(x_q, params.w_q[:, cols], b["b_q"])
        k_h = _linear(x_kv, params.w_k[:, cols], b["b_k"])
        v_h = _linear(x_kv, params.w_v[:, cols], b["b_v"])
        heads.append(scaled_dot_product_attention(q_h, k_h, v_h, mask=mask, causal=causal))
    if isinstance(x_q, np.ndarray):
        concat = np.concatenate(heads, axis=-1)
    else:
        import torch

        concat = torch.cat(heads, dim=-1)
    return _linear(concat, params.w_o, params.b_o)


def params_from_torch(mha: Any) -> MultiHeadParams:
    """Copy the weights of a ``torch.nn.MultiheadAttention`` into a :class:`MultiHeadParams`.

    PyTorch packs the three input projections into one ``in_proj_weight`` of shape
    ``(3 d_model, d_model)``: rows ``[0, E)`` are W_Q, ``[E, 2E)`` W_K, ``[2E, 3E)`` W_V, each
    in ``nn.Linear``'s ``(out, in)`` layout, so attncore's ``(in, out)`` matrix is its
    transpose. When ``kdim``/``vdim`` differ from ``embed_dim`` it keeps separate
    ``q_proj_weight``, ``k_proj_weight`` and ``v_proj_weight`` instead. The returned tensors
    are detached copies on the module's device.
    """
    if not getattr(mha, "batch_first", False):
        raise ValueError("mha: expected torch.nn.MultiheadAttention(batch_first=True), "
                         "got batch_first=False")
    # Options whose maths MultiHeadParams does not hold: refuse them rather than drop them.
    if mha.bias_k is not None or mha.bias_v is not None:
        raise ValueError("mha: add_bias_kv=True appends learned key/value rows that attncore's "
                         "MultiHeadParams cannot hold; expected add_bias_kv=False")
    if mha.add_zero_attn:
        raise ValueError("mha: add_zero_attn=True appends a zero key/value that attncore's "
                         "MultiHeadParams cannot hold; expected add_zero_attn=False")
    if mha.kdim != mha.vdim:
        raise ValueError(f"mha: expected kdim == vdim (attncore takes keys and values from one "
                         f"input x_kv), got kdim={mha.kdim}, vdim={mha.vdim}")
    E = mha.embed_dim
    if mha.in_proj_weight is not None:
        wq, wk, wv = mha.in_proj_weight.detach().split(E, dim=0)
    else:
        wq, wk, wv = (mha.q_proj_weight.detach(), mha.k_proj_weight.detach(),
                      mha.v_proj_weight.detach())
    if mha.in_proj_bias is not None:
        bq, bk, bv = mha.in_proj_bias.detach().split(E)
    else:
        bq = bk = bv = None
    bo = None if mha.out_proj.bias is None else mha.out_proj.bias.detach().clone()
    return MultiHeadParams(w_q=wq.T.clone(), w_k=wk.T.clone(), w_v=wv.T.clone(),
                           w_o=mha.out_proj.weight.detach().T.clone(),
                           b_q=None if bq is None else bq.clone(),
                           b_k=None if bk is None else bk.clone(),
                           b_v=None if bv is None else bv.clone(),
                           b_o=bo, num_heads=mha.num_heads)


def params_to_torch(params: MultiHeadParams) -> Any:
    """Build a ``torch.nn.MultiheadAttention(batch_first=True)`` holding ``params``' weights.

    NumPy parameters are converted to tensors on the CPU; torch parameters keep their
    device and dtype. The inverse of :func:`params_from_torch`.
    """
    import torch

    p = params
    as_t = (lambda a: torch.as_tensor(a)) if p.backend == NUMPY else (lambda a: a.detach())
    w_q = as_t(p.w_q)
    has_bias = p.b_q is not None
    kdim = p.d_kv
    mha = torch.nn.MultiheadAttention(p.d_model, p.num_heads, bias=has_bias, batch_first=True,
                                      kdim=kdim, vdim=kdim, device=w_q.device, dtype=w_q.dtype)
    with torch.no_grad():
        if mha.in_proj_weight is not None:
            mha.in_proj_weight.copy_(torch.cat([as_t(p.w_q).T, as_t(p.w_k).T, as_t(p.w_v).T]))
        else:
            mha.q_proj_weight.copy_(as_t(p.w_q).T)
            mha.k_proj_weight.copy_(as_t(p.w_k).T)
            mha.v_proj_weight.copy_(as_t(p.w_v).T)
        if has_bias:
            mha.in_proj_bias.copy_(torch.cat([as_t(p.b_q), as_t(p.b_k), as_t(p.b_v)]))
            mha.out_proj.bias.copy_(as_t(p.b_o))
        mha.out_proj.weight.copy_(as_t(p.w_o).T)
    return mha
