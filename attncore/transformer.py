"""The transformer block: attention and a feed-forward layer on a residual stream.

Tokens are rows, as everywhere in attncore. A block maps ``x`` of shape ``(..., n,
d_model)`` to the same shape. Pre-norm (``norm_first=True``, GPT-2 and most models since)::

    x <- x + Dropout(MHA(LN_1(x)))                    the attention sub-layer
    x <- x + Dropout(FFN(LN_2(x)))                    the feed-forward sub-layer

post-norm (``norm_first=False``, the original transformer and BERT)::

    x <- LN_1(x + Dropout(MHA(x)))
    x <- LN_2(x + Dropout(FFN(x)))

with ``FFN(x) = act(x W_1 + b_1) W_2 + b_2`` (a dropout after ``act`` too) and ``MHA`` the
layer of :func:`~attncore.multi_head_attention` (with dropout on its attention weights).
These are the operations of ``torch.nn.TransformerEncoderLayer(batch_first=True)``:
:func:`block_params_from_torch` and :func:`block_params_to_torch` copy weights between the
two, and with dropout off the outputs agree to rounding.

The Llama block (Llama, Mistral, SmolLM2 and most open models since 2023) is the same
pre-norm block with four parts swapped, each one option of :func:`init_transformer_block`::

    x <- x + MHA_RoPE(RMS_1(x))                       norm="rms", rope_base=..., no biases
    x <- x + SwiGLU(RMS_2(x))                         activation="swiglu"

* RMSNorm instead of LayerNorm (:func:`~attncore.rms_norm`: no centring, no shift);
* the gated feed-forward layer ``SwiGLU(x) = (silu(x W_1) * (x W_3)) W_2``, whose third
  matrix ``W_3`` (Llama's name) is the ungated branch;
* RoPE inside the attention layer (:func:`~attncore.rope` on every head's queries and
  keys, at positions ``0 .. n-1``; in cached decoding the cache carries the positions),
  instead of positions added to the embeddings;
* fewer key/value heads than query heads (grouped-query attention, ``n_kv_heads``), and
  no biases anywhere.

The normalisations and activations live in :mod:`attncore.layers`; on torch they call
PyTorch's kernels for the same formulas, as the attention functions call PyTorch's fused
attention.

Two options of 2025's models act on every head inside the attention sub-layer, each with
weights of its own (None when absent), on either block:

* **QK-norm** (Qwen3, Gemma 3, OLMo 2): every head's query and key rows pass through
  RMSNorm, with gains ``q_norm_weight`` and ``k_norm_weight`` of shape ``(d_head,)``
  shared by the heads, after the projections and before RoPE. A score is then at most
  ``d_head max|g_q| max|g_k| / sqrt(d_head)`` in size, whatever the input;
* **gated attention** (Qwen3-Next, Qwen3.5): each head's output is multiplied,
  elementwise, by ``sigmoid(h W_G)`` (``h`` the sub-layer's input, ``W_G`` of shape
  ``(d_model, d_model)``, ``w_gate``, split into heads as the queries are) before
  ``W_O``::

      out = concat_i(sigmoid(h W_G)_i * head_i) W_O
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._backend import (
    NUMPY,
    backend_of,
    check_flag,
    check_floating,
    check_min_rank,
    check_real,
    check_same_dtype,
    check_size,
    shape_of,
)
from .dropout import Dropout, apply_dropout, check_dropout
from .kvcache import KVCache, _check_decode, _decode_step
# (gelu and layer_norm are also read from here, attncore.transformer.gelu, as before they
# moved to attncore.layers)
from .layers import _layer_norm, _relu, _rms_norm, _silu_numpy, gelu, layer_norm  # noqa: F401
from ._backend import check_all_finite, dtype_name, find_non_finite, under_vmap
from .multihead import (
    MultiHeadParams,
    _attend_heads,
    _check_layer,
    _linear,
    _numpy_float_dtype,
    _on_backend,
    _project_heads,
    _split,
    check_n_kv_heads,
    check_num_heads,
    init_multihead,
    multi_head_attention,
    params_from_torch,
    params_to_torch,
)
from .positions import _check_base, _cos_sin, _rotate, rope_multi_head_attention

__all__ = [
    "ACTIVATIONS",
    "NORMS",
    "TransformerBlockParams",
    "block_decode_step",
    "block_params_from_torch",
    "block_params_to_torch",
    "feed_forward",
    "init_transformer_block",
    "transformer_block",
]

ACTIVATIONS = ("relu", "gelu", "swiglu")
"""The activations of the feed-forward layer: those of ``nn.TransformerEncoderLayer``, and
Llama's gated ``"swiglu"``."""

NORMS = ("layer", "rms")
"""The normalisations of a block: LayerNorm (GPT-2, BERT) and RMSNorm (Llama)."""

_FF_FIELDS = ("ln1_weight", "ln1_bias", "ln2_weight", "ln2_bias", "w_ff1", "b_ff1", "w_ff2",
              "b_ff2", "w_ff3")
_HEAD_FIELDS = ("w_gate", "q_norm_weight", "k_norm_weight")
"""The per-head options of the attention sub-layer: gated attention and QK-norm."""


# --- the feed-forward layer -----------------------------------------------------------------

def feed_forward(x: Any, w_1: Any, b_1: Any, w_2: Any, b_2: Any, activation: str = "gelu",
                 drop: Dropout | None = None, w_3: Any = None) -> Any:
    """The position-wise feed-forward layer ``act(x W_1 + b_1) W_2 + b_2``.

    Each row (token) goes through the same two-layer network, independently of the others.
    Read with the row view of a matrix product: ``x W_1`` scores the row against the
    ``d_ff`` columns of ``W_1`` (keys), and ``h W_2`` adds up the ``d_ff`` rows of ``W_2``
    (values), each weighted by its activated score. With ``activation="swiglu"`` the
    activated scores are also multiplied by a second, ungated projection: ``(silu(x W_1) *
    (x W_3)) W_2`` (:func:`~attncore.swiglu`, without biases).

    Parameters
    ----------
    x : array, shape ``(..., n, d_model)``
    w_1 : array, shape ``(d_model, d_ff)``; b_1 : shape ``(d_ff,)`` or None
    w_2 : array, shape ``(d_ff, d_model)``; b_2 : shape ``(d_model,)`` or None
    activation : {"relu", "gelu", "swiglu"}, default "gelu"
    drop : Dropout, optional
        Dropout after the activation (the checked setting of
        :func:`attncore.dropout.check_dropout`).
    w_3 : array, shape ``(d_model, d_ff)``, optional
        The ungated branch of ``"swiglu"`` (required by it, refused otherwise).

    Returns
    -------
    array, shape ``(..., n, d_model)``
    """
    if (activation == "swiglu") != (w_3 is not None):
        raise ValueError(f"w_3: expected an array exactly when activation='swiglu', got "
                         f"{'None' if w_3 is None else 'an array'} with "
                         f"activation={activation!r}")
    if activation == "swiglu" and (b_1 is not None or b_2 is not None):
        raise ValueError("b_1, b_2: expected None with activation='swiglu' (Llama's gated "
                         "layer has no biases)")
    check_activation(activation)
    return _feed_forward(x, w_1, b_1, w_2, b_2, activation, drop, w_3)


def _feed_forward(x: Any, w_1: Any, b_1: Any, w_2: Any, b_2: Any, activation: str,
                  drop: Dropout | None, w_3: Any) -> Any:
    if activation == "swiglu":
        if isinstance(x, np.ndarray):
            h = _silu_numpy(x @ w_1)
            h *= x @ w_3
        else:
            import torch.nn.functional as F

            h = F.silu(x @ w_1) * (x @ w_3)
    else:
        h = x @ w_1
        if b_1 is not None:
            h = h + b_1
        h = gelu(h) if activation == "gelu" else _relu(h)
    if drop is not None:
        h = apply_dropout(h, drop)
    y = h @ w_2
    return y if b_2 is None else y + b_2


# --- parameters -----------------------------------------------------------------------------

@dataclass
class TransformerBlockParams:
    """Weights of one transformer block (all NumPy arrays or all torch tensors).

    The first fields hold GPT-2's block; the later ones have defaults that keep it:
    ``norm``, ``rope_base`` and ``w_ff3`` turn it into Llama's block when set, ``w_gate``
    and the QK-norm gains add the per-head options of the module docstring.

    Attributes
    ----------
    attn : MultiHeadParams
        The self-attention layer (``d_kv = d_model``; any ``n_kv_heads``).
    ln1_weight, ln1_bias : arrays of shape ``(d_model,)`` (the bias may be None)
        Normalisation of the attention sub-layer (before it when ``norm_first``, after the
        residual sum otherwise).
    ln2_weight, ln2_bias : arrays of shape ``(d_model,)`` (the bias may be None)
        Normalisation of the feed-forward sub-layer.
    w_ff1 : array, shape ``(d_model, d_ff)``; b_ff1 : ``(d_ff,)`` or None
    w_ff2 : array, shape ``(d_ff, d_model)``; b_ff2 : ``(d_model,)`` or None
    norm_first : bool
        Pre-norm (True) or post-norm (False).
    activation : {"relu", "gelu", "swiglu"}
    eps : float
        The normalisations' epsilon (PyTorch's default 1e-5).
    norm : {"layer", "rms"}, default "layer"
        LayerNorm (:func:`~attncore.layer_norm`) or RMSNorm (:func:`~attncore.rms_norm`,
        which has no shift: ``ln1_bias`` and ``ln2_bias`` must be None).
    rope_base : float or None, default None
        RoPE inside the attention layer with this base (queries and keys of every head
        rotated by :func:`~attncore.rope` at their positions; needs an even ``d_head``),
        or None for none (positions, if any, are added to the embeddings).
    w_ff3 : array, shape ``(d_model, d_ff)``, or None
        The ungated branch of ``activation="swiglu"``: ``FFN(x) = (silu(x W_1) * (x W_3))
        W_2``. Present exactly with ``"swiglu"``, which has no biases.
    w_gate : array, shape ``(d_model, d_model)``, or None
        Gated attention (Qwen3-Next): each head's output times ``sigmoid(h W_G)``, split
        into heads, before ``W_O`` (``h`` the attention sub-layer's input).
    q_norm_weight, k_norm_weight : arrays of shape ``(d_head,)``, or None (both or neither)
        QK-norm (Qwen3, Gemma 3): RMSNorm with these gains, and the block's ``eps``, on
        every head's queries and keys before RoPE.

    Raises
    ------
    TypeError
        ``attn`` not a :class:`MultiHeadParams`; mixed libraries or dtypes; a flag that is
        not a bool.
    ValueError
        A shape that does not fit ``d_model`` and ``d_ff``, a cross-attention layer, an
        unknown activation or norm, a non-positive ``eps``, some biases given and others
        not, a shift with ``norm="rms"``, ``w_ff3`` without ``"swiglu"`` or the reverse,
        a bad ``rope_base`` or an odd head width with it, one of ``q_norm_weight`` and
        ``k_norm_weight`` without the other.
    """

    attn: MultiHeadParams
    ln1_weight: Any
    ln1_bias: Any
    ln2_weight: Any
    ln2_bias: Any
    w_ff1: Any
    b_ff1: Any
    w_ff2: Any
    b_ff2: Any
    norm_first: bool = True
    activation: str = "gelu"
    eps: float = 1e-5
    norm: str = "layer"
    rope_base: float | None = None
    w_ff3: Any = None
    w_gate: Any = None
    q_norm_weight: Any = None
    k_norm_weight: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.attn, MultiHeadParams):
            raise TypeError(f"attn: expected a MultiHeadParams, got {type(self.attn).__name__}")
        arrays = {n: getattr(self, n) for n in _FF_FIELDS + _HEAD_FIELDS}
        for name in ("ln1_weight", "ln2_weight", "w_ff1", "w_ff2"):
            if arrays[name] is None:
                raise TypeError(f"{name}: expected a numpy.ndarray or a torch.Tensor, got None "
                                f"(only the biases, w_ff3, w_gate and the QK-norm gains "
                                f"may be None)")
        backend_of(attn=self.attn.w_q, **arrays)
        for name, x in arrays.items():
            if x is not None:
                check_floating(name, x)
        check_same_dtype(attn=self.attn.w_q, **arrays)
        d = self.attn.d_model
        if self.attn.d_kv != d:
            raise ValueError(f"attn: expected a self-attention layer (d_kv == d_model), got "
                             f"d_kv={self.attn.d_kv}, d_model={d}")
        w1 = shape_of(self.w_ff1)
        if len(w1) != 2 or w1[0] != d or w1[1] < 1:
            raise ValueError(f"w_ff1: expected shape (d_model, d_ff) = ({d}, d_ff) with "
                             f"d_ff >= 1, got {w1}")
        d_ff = w1[1]
        expected = {"ln1_weight": (d,), "ln1_bias": (d,), "ln2_weight": (d,), "ln2_bias": (d,),
                    "b_ff1": (d_ff,), "w_ff2": (d_ff, d), "b_ff2": (d,), "w_ff3": (d, d_ff),
                    "w_gate": (d, d), "q_norm_weight": (self.attn.d_head,),
                    "k_norm_weight": (self.attn.d_head,)}
        for name, shape in expected.items():
            x = arrays[name]
            if x is not None and shape_of(x) != shape:
                raise ValueError(f"{name}: expected shape {shape} for d_model={d}, d_ff={d_ff}, "
                                 f"d_head={self.attn.d_head}, got {shape_of(x)}")
        biases = {n: arrays[n] is None for n in ("ln1_bias", "ln2_bias", "b_ff1", "b_ff2")}
        biases.update({"attn.b_q": self.attn.b_q is None})
        if len(set(biases.values())) > 1:
            raise ValueError("expected all biases (LayerNorm, feed-forward, attention) or none, "
                             "got " + ", ".join(f"{n}={'None' if m else 'array'}"
                                                for n, m in biases.items()))
        self.norm_first = check_flag("norm_first", self.norm_first)
        check_activation(self.activation)
        check_norm(self.norm)
        self.eps = check_eps(self.eps)
        has_bias = self.b_ff1 is not None
        if self.norm == "rms" and has_bias:
            raise ValueError("ln1_bias, ln2_bias: expected None with norm='rms' (RMSNorm has "
                             "no shift), so no biases at all (all or none)")
        if (self.activation == "swiglu") != (self.w_ff3 is not None):
            raise ValueError(f"w_ff3: expected an array of shape ({d}, {d_ff}) exactly when "
                             f"activation='swiglu', got "
                             f"{'None' if self.w_ff3 is None else 'an array'} with "
                             f"activation={self.activation!r}")
        if self.activation == "swiglu" and has_bias:
            raise ValueError("b_ff1, b_ff2: expected None with activation='swiglu' (Llama's "
                             "gated layer has no biases), so no biases at all (all or none)")
        if self.rope_base is not None:
            self.rope_base = check_rope_base(self.rope_base, self.attn.d_head)
        if (self.q_norm_weight is None) != (self.k_norm_weight is None):
            given, missing = (("q_norm_weight", "k_norm_weight")
                              if self.k_norm_weight is None
                              else ("k_norm_weight", "q_norm_weight"))
            raise ValueError(f"{missing}: expected an array of shape ({self.attn.d_head},) "
                             f"with {given} (QK-norm normalises queries and keys both), "
                             f"got None")

    @property
    def qk_norm(self) -> bool:
        """Whether the block normalises every head's queries and keys (QK-norm)."""
        return self.q_norm_weight is not None

    @property
    def gated(self) -> bool:
        """Whether the block gates every head's output (gated attention)."""
        return self.w_gate is not None

    @property
    def d_model(self) -> int:
        """Width of the residual stream."""
        return self.attn.d_model

    @property
    def d_ff(self) -> int:
        """Width of the feed-forward layer's hidden layer."""
        return int(self.w_ff1.shape[1])

    @property
    def num_heads(self) -> int:
        return self.attn.num_heads

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads of the attention layer (fewer than ``num_heads``: grouped-query)."""
        return self.attn.n_kv_heads

    @property
    def backend(self) -> str:
        """``"numpy"`` or ``"torch"``."""
        return self.attn.backend

    def tensors(self) -> list[Any]:
        """Every weight and bias present, in a fixed order (the attention layer's first)."""
        attn = [getattr(self.attn, n) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k",
                                                "b_v", "b_o")]
        own = [getattr(self, n) for n in _FF_FIELDS + _HEAD_FIELDS]
        return [x for x in attn + own if x is not None]

    def num_parameters(self) -> int:
        """Number of scalars in all weights and biases."""
        return sum(int(np.prod(shape_of(x))) for x in self.tensors())


def check_activation(activation: Any) -> str:
    """Return ``activation``: ``ValueError`` unless it is one of :data:`ACTIVATIONS`."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected 'relu', 'gelu' or 'swiglu', got "
                         f"{activation!r}")
    return activation


def check_norm(norm: Any) -> str:
    """Return ``norm``: ``ValueError`` unless it is ``"layer"`` or ``"rms"``."""
    if norm not in NORMS:
        raise ValueError(f"norm: expected 'layer' (LayerNorm) or 'rms' (RMSNorm), got "
                         f"{norm!r}")
    return norm


def check_eps(eps: Any) -> float:
    """Return ``eps`` as a float: a positive finite real number (NumPy's included)."""
    return check_real("eps", eps, above=0)


def check_rope_base(rope_base: Any, d_head: int) -> float:
    """Return ``rope_base`` as a float: a finite number above 1, for an even ``d_head``."""
    try:
        rope_base = _check_base(rope_base)
    except ValueError:
        raise ValueError(f"rope_base: expected None or a finite number greater than 1, got "
                         f"{rope_base!r}") from None
    if d_head % 2:
        raise ValueError(f"rope_base: RoPE rotates pairs of features, so it needs an even "
                         f"head width d_head, got d_head={d_head}")
    return rope_base


def init_transformer_block(d_model: int, num_heads: int, d_ff: int, *, norm_first: bool = True,
                           activation: str = "gelu", bias: bool = True,
                           n_kv_heads: int | None = None, norm: str = "layer",
                           rope_base: float | None = None, gate: bool = False,
                           qk_norm: bool = False, seed: int = 0,
                           dtype: Any = np.float64, backend: str = NUMPY,
                           device: Any = None) -> TransformerBlockParams:
    """Seeded parameters for a transformer block: GPT-2's by default, Llama's with
    ``norm="rms", activation="swiglu", bias=False, rope_base=...`` (and ``n_kv_heads``).

    The attention layer is :func:`~attncore.init_multihead` with ``seed``; the feed-forward
    weights are drawn as ``torch.nn.Linear`` draws its own, ``U(-1/sqrt(fan_in),
    1/sqrt(fan_in))``, from NumPy's ``default_rng(seed + 1)`` (the same numbers on every
    backend; ``W_3`` of ``"swiglu"`` after the others); the normalisations start at gain 1
    and shift 0; biases at 0.

    Parameters
    ----------
    d_model : int
        Width of the residual stream, ``>= 1``.
    num_heads : int
        Attention heads, a divisor of ``d_model``.
    d_ff : int
        Width of the feed-forward layer, ``>= 1`` (usually ``4 * d_model``; about
        ``8/3 * d_model`` for ``"swiglu"``, which has a third matrix).
    norm_first : bool, default True
        Pre-norm (True) or post-norm (False).
    activation : {"relu", "gelu", "swiglu"}, default "gelu"
        ``"swiglu"`` (Llama's gated layer) needs ``bias=False``.
    bias : bool, default True
        Biases in the attention and feed-forward layers and shifts in the LayerNorms
        (``torch.nn.TransformerEncoderLayer``'s ``bias``).
    n_kv_heads : int, optional
        Key/value heads of the attention layer (grouped-query attention; default
        ``num_heads``).
    norm : {"layer", "rms"}, default "layer"
        LayerNorm or RMSNorm (which needs ``bias=False``: it has no shift).
    rope_base : float, optional
        RoPE inside the attention layer, with this base (10000 in Llama 2; needs an even
        head width). Default None: no positions inside the block.
    gate : bool, default False
        Gated attention: ``w_gate`` drawn as the feed-forward weights are (after them).
    qk_norm : bool, default False
        QK-norm: ``q_norm_weight`` and ``k_norm_weight`` start at gain 1.
    seed : int, default 0
    dtype, backend, device
        As in :func:`~attncore.init_multihead`.

    Returns
    -------
    TransformerBlockParams

    Raises
    ------
    TypeError, ValueError
        As :func:`~attncore.init_multihead`, and for ``d_ff``, ``activation``, ``norm``,
        ``rope_base``, and biases asked of RMSNorm or SwiGLU.
    """
    d_model = check_size("d_model", d_model)
    num_heads = check_num_heads(num_heads, d_model)
    if n_kv_heads is not None:
        check_n_kv_heads(n_kv_heads, num_heads)
    d_ff = check_size("d_ff", d_ff)
    norm_first = check_flag("norm_first", norm_first)
    activation = check_activation(activation)
    norm = check_norm(norm)
    bias = check_flag("bias", bias)
    if bias and (norm == "rms" or activation == "swiglu"):
        raise ValueError(f"bias: expected False with norm={norm!r} and activation="
                         f"{activation!r} (RMSNorm has no shift and SwiGLU no biases, and a "
                         f"block has all biases or none), got True")
    if rope_base is not None:
        rope_base = check_rope_base(rope_base, d_model // num_heads)
    gate = check_flag("gate", gate)
    qk_norm = check_flag("qk_norm", qk_norm)
    seed = check_size("seed", seed, minimum=0)
    attn = init_multihead(d_model, num_heads, n_kv_heads=n_kv_heads, bias=bias, seed=seed,
                          dtype=dtype, backend=backend, device=device)
    rng = np.random.default_rng(seed + 1)

    def linear(fan_in: int, fan_out: int) -> tuple[np.ndarray, np.ndarray]:
        a = 1.0 / math.sqrt(fan_in)
        return rng.uniform(-a, a, size=(fan_in, fan_out)), np.zeros(fan_out)

    (w1, b1), (w2, b2) = linear(d_model, d_ff), linear(d_ff, d_model)
    arrays = {"ln1_weight": np.ones(d_model), "ln1_bias": np.zeros(d_model),
              "ln2_weight": np.ones(d_model), "ln2_bias": np.zeros(d_model),
              "w_ff1": w1, "b_ff1": b1, "w_ff2": w2, "b_ff2": b2,
              "w_ff3": linear(d_model, d_ff)[0] if activation == "swiglu" else None}
    arrays["w_gate"] = linear(d_model, d_model)[0] if gate else None
    d_head = d_model // num_heads
    arrays["q_norm_weight"] = np.ones(d_head) if qk_norm else None
    arrays["k_norm_weight"] = np.ones(d_head) if qk_norm else None
    if not bias:
        for name in ("ln1_bias", "ln2_bias", "b_ff1", "b_ff2"):
            arrays[name] = None
    np_dtype = _numpy_float_dtype(dtype, backend)
    conv = _on_backend(arrays, dtype, np_dtype, backend, device)
    return TransformerBlockParams(attn, norm_first=norm_first, activation=activation,
                                  norm=norm, rope_base=rope_base, **conv)


# --- the block ------------------------------------------------------------------------------

def _check_block(params: Any, x: Any) -> None:
    if not isinstance(params, TransformerBlockParams):
        raise TypeError(f"params: expected a TransformerBlockParams (see "
                        f"init_transformer_block and block_params_from_torch), got "
                        f"{type(params).__name__}")
    backend_of(params=params.attn.w_q, x=x)
    check_floating("x", x)
    check_min_rank("x", x, 2, "(..., n, d_model)")
    check_same_dtype(params=params.attn.w_q, x=x)
    if shape_of(x)[-1] != params.d_model:
        raise ValueError(f"x: expected last axis d_model={params.d_model}, got shape "
                         f"{shape_of(x)}")
    # (d_head numbers each; w_gate, d_model^2 of them, is blamed only when its product
    # with the input is not finite, see _gate)
    check_all_finite(**{"params.q_norm_weight": params.q_norm_weight,
                        "params.k_norm_weight": params.k_norm_weight})


def _norm(p: TransformerBlockParams, x: Any, which: int) -> Any:
    """The block's normalisation number ``which`` (1: attention, 2: feed-forward)."""
    weight = p.ln1_weight if which == 1 else p.ln2_weight
    if p.norm == "rms":
        return _rms_norm(x, weight, p.eps)
    return _layer_norm(x, weight, p.ln1_bias if which == 1 else p.ln2_bias, p.eps)


def _sigmoid(z: Any) -> Any:
    if isinstance(z, np.ndarray):
        e = np.exp(-np.abs(z))        # never overflows: the sigmoid of either sign from it
        return np.where(z >= 0, 1, e) / (1 + e)
    return z.sigmoid()


def _gate(p: TransformerBlockParams, h: Any) -> Any:
    """Gated attention's gate ``sigmoid(h W_G)`` in heads, ``(..., num_heads, n, d_head)``,
    for the sub-layer's input ``h``, ``(..., n, d_model)``."""
    with np.errstate(over="ignore", invalid="ignore"):
        z = _linear(h, p.w_gate, None)
    if find_non_finite(z=z) is not None:
        check_all_finite(**{"x": h, "params.w_gate": p.w_gate})
        raise ValueError(f"x, params.w_gate: expected gate logits that fit in dtype "
                         f"{dtype_name(z)}, got an overflow in x @ params.w_gate; use a "
                         f"wider dtype or smaller inputs or weights")
    return _split(_sigmoid(z), p.num_heads)


def _qk_norm(p: TransformerBlockParams) -> Any:
    """QK-norm as a function ``(q, k) -> (q, k)`` of the heads' rows, or None."""
    if p.q_norm_weight is None:
        return None

    def normalise(q: Any, k: Any) -> tuple[Any, Any]:
        with np.errstate(over="ignore", invalid="ignore"):   # the attention checks them
            return (_rms_norm(q, p.q_norm_weight, p.eps),
                    _rms_norm(k, p.k_norm_weight, p.eps))
    return normalise


def _attention_with_options(p: TransformerBlockParams, h: Any, mask: Any, causal: bool,
                            return_weights: bool, drop: Dropout | None) -> Any:
    """The attention sub-layer of a gated or QK-normed block: the steps of
    :func:`~attncore.multi_head_attention` (with RoPE, of
    :func:`~attncore.rope_multi_head_attention`) with QK-norm before RoPE and the gate
    before ``W_O``."""
    a = p.attn
    layer = _check_layer(a, h, None, mask, causal, names=("x", "x"))
    q, k, v = _project_heads(a, layer, h)
    if p.qk_norm:
        # The layer's certificate bounds the projections, not their normalised rows (a
        # tiny query is scaled up to sqrt(d_head) times its gain): check the scores.
        layer = layer._replace(certified=False)
        q, k = _qk_norm(p)(q, k)
    if p.rope_base is not None:
        cos, sin = _cos_sin(0, layer.n_q, a.d_head, p.rope_base, q)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    gate = _gate(p, h) if p.gated else None
    return _attend_heads(a, layer, q, k, v, mask, return_weights, drop, gate=gate)


def _attention_step(p: TransformerBlockParams, h: Any, cache: KVCache, check: bool) -> Any:
    """The attention sub-layer of one step of cached decoding (``check``: the argument
    checks of :func:`~attncore.decode_step` first). The cache holds the keys after QK-norm
    and RoPE, as the recomputation uses them."""
    if check:
        _check_decode(p.attn, h, cache, p.rope_base, None)
    gate = _gate(p, h) if p.gated else None       # before the cache grows: may raise
    return _decode_step(p.attn, h, cache, p.rope_base, qk_norm=_qk_norm(p), gate=gate)


def _ffn(p: TransformerBlockParams, h: Any, drop: Dropout | None = None) -> Any:
    with np.errstate(over="ignore", invalid="ignore"):      # an overflow is checked below
        return _feed_forward(h, p.w_ff1, p.b_ff1, p.w_ff2, p.b_ff2, p.activation, drop,
                             p.w_ff3)


def _residual(x: Any, y: Any, p: TransformerBlockParams) -> Any:
    """``x + y``, the feed-forward layer's output ``y`` joining the residual stream ``x``
    (finite: the attention sub-layer checked its values), checked for an overflow.

    Attention checks its own values and raises on an overflow; the feed-forward layer is
    the one place of a block where finite inputs and weights can still overflow the dtype
    (float16's largest number is 65504), so the block's output is checked here, once, and
    the error names the feed-forward layer rather than the next block's input.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        out = x + y
    if not under_vmap(out) and find_non_finite(out=out) is not None:
        dtype = dtype_name(out)
        weights = "params.w_ff1, params.w_ff3, params.w_ff2" if p.w_ff3 is not None \
            else "params.w_ff1, params.w_ff2"
        check_all_finite(**{"params.w_ff1": p.w_ff1, "params.w_ff2": p.w_ff2,
                            "params.w_ff3": p.w_ff3, "params.b_ff1": p.b_ff1,
                            "params.b_ff2": p.b_ff2})
        if find_non_finite(y=y) is not None:
            raise ValueError(f"{weights}: the feed-forward layer overflowed {dtype}: its "
                             f"output holds NaN or infinity for finite input (the largest "
                             f"{dtype} number is {_largest(out):.6g}); compute in a wider "
                             f"dtype or use smaller weights")
        raise ValueError(f"x: the residual stream overflowed {dtype} when the feed-forward "
                         f"layer's output was added to it (the largest {dtype} number is "
                         f"{_largest(out):.6g}); compute in a wider dtype")
    return out


def _largest(x: Any) -> float:
    if isinstance(x, np.ndarray):
        return float(np.finfo(x.dtype).max)
    return float(sys.modules["torch"].finfo(x.dtype).max)


def transformer_block(params: TransformerBlockParams, x: Any, *, mask: Any = None,
                      causal: bool = False, dropout_p: float = 0.0,
                      generator: Any = None, return_weights: bool = False) -> Any:
    """One transformer block (see the module docstring for the two orders and Llama's form).

    Parameters
    ----------
    params : TransformerBlockParams
    x : numpy.ndarray or torch.Tensor, shape ``(..., n, d_model)``
        The residual stream; the library, device and dtype of ``params``. With
        ``params.rope_base`` its rows stand at positions ``0 .. n-1``.
    mask : boolean array broadcastable to ``(..., n, n)``, optional
        Which keys each query may attend to (True = may attend), as in
        :func:`~attncore.multi_head_attention`. A key padding mask of shape ``(batch,
        n)`` is passed as ``mask[:, None, :]``.
    causal : bool, default False
        Each position attends only to itself and earlier ones (a decoder).
    dropout_p : real number in ``[0, 1)``, default 0.0
        Dropout, with PyTorch's semantics, at the four places of
        ``nn.TransformerEncoderLayer``: on the attention weights, on each sub-layer's
        output before it joins the residual stream, and after the feed-forward
        activation. Training only: 0 (the default) is inference and changes nothing.
    generator : numpy.random.Generator or torch.Generator, optional
        The source of the dropout draws, matching the inputs' library.
    return_weights : bool, default False
        Also return the attention weights of every head.

    Returns
    -------
    out : numpy.ndarray or torch.Tensor, shape ``(..., n, d_model)``
    weights : array, shape ``(..., num_heads, n, n)``, only with ``return_weights``

    Raises
    ------
    TypeError, ValueError
        As :func:`~attncore.multi_head_attention`; ``params`` not a
        :class:`TransformerBlockParams`; a bad ``dropout_p`` or generator.
    """
    _check_block(params, x)
    return_weights = check_flag("return_weights", return_weights)
    drop = check_dropout(dropout_p, generator, params.backend, like=x)
    p = params
    weights = []

    def attention(h: Any) -> Any:
        kw = {"mask": mask, "causal": causal, "return_weights": return_weights,
              "dropout_p": 0.0 if drop is None else drop.p, "generator": generator}
        if p.gated or p.qk_norm:
            out = _attention_with_options(p, h, mask, causal, return_weights, drop)
        elif p.rope_base is None:
            out = multi_head_attention(p.attn, h, **kw)
        else:
            out = rope_multi_head_attention(p.attn, h, base=p.rope_base, **kw)
        if return_weights:
            out, w = out
            weights.append(w)
        return out if drop is None else apply_dropout(out, drop)

    def ffn(h: Any) -> Any:
        out = _ffn(p, h, drop)
        return out if drop is None else apply_dropout(out, drop)

    if p.norm_first:
        x = x + attention(_norm(p, x, 1))
        x = _residual(x, ffn(_norm(p, x, 2)), p)
    else:
        x = _norm(p, x + attention(x), 1)
        x = _norm(p, _residual(x, ffn(x), p), 2)
    return (x, weights[0]) if return_weights else x


def block_decode_step(params: TransformerBlockParams, x: Any, cache: KVCache) -> Any:
    """One step of cached decoding through a causal block (no dropout: inference).

    The attention sub-layer runs through :func:`~attncore.decode_step` with ``cache`` (and
    ``rope_base=params.rope_base``: the new rows stand at positions ``len(cache), ...``,
    and their keys are cached rotated); the normalisations and the feed-forward layer act
    on each position alone, so they need no cache. Equal, up to rounding, to the rows of
    ``transformer_block(params, x_all, causal=True)`` at the new positions, where ``x_all``
    is every input so far.

    Parameters
    ----------
    params : TransformerBlockParams
    x : array, shape ``(..., n, d_model)``, the new positions (``n >= 1``)
    cache : KVCache
        This block's cache (``KVCache.for_layer(params.attn, capacity, x.shape[:-2])``).

    Returns
    -------
    array, shape ``(..., n, d_model)``
    """
    _check_block(params, x)
    p = params
    if p.norm_first:
        x = x + _attention_step(p, _norm(p, x, 1), cache, check=True)
        return _residual(x, _ffn(p, _norm(p, x, 2)), p)
    x = _norm(p, x + _attention_step(p, x, cache, check=True), 1)
    return _norm(p, _residual(x, _ffn(p, x), p), 2)


def _decode_block(p: TransformerBlockParams, x: Any, cache: KVCache) -> Any:
    """:func:`block_decode_step` of a pre-norm block without the argument checks, for
    callers that made the block, ``x`` and the cache themselves (:func:`attncore.generate`
    checks its model once, not at every token and layer); the values are checked as
    always (:func:`~attncore.decode_step`)."""
    x = x + _attention_step(p, _norm(p, x, 1), cache, check=False)
    return _residual(x, _ffn(p, _norm(p, x, 2)), p)


# --- torch.nn.TransformerEncoderLayer -------------------------------------------------------

def block_params_from_torch(layer: Any) -> TransformerBlockParams:
    """Copy the weights of a ``torch.nn.TransformerEncoderLayer(batch_first=True)``.

    ``nn.Linear`` stores ``(out, in)``; attncore's feed-forward weights are ``(in, out)``,
    the transposes. The attention layer is copied by :func:`~attncore.params_from_torch`.

    Parameters
    ----------
    layer : torch.nn.TransformerEncoderLayer
        With ``batch_first=True`` and a ReLU or (exact) GELU activation.

    Returns
    -------
    TransformerBlockParams
        Detached copies, on the layer's device and in its dtype.

    Raises
    ------
    TypeError
        ``layer`` is not a ``torch.nn.TransformerEncoderLayer``.
    ValueError
        ``batch_first=False``, an activation other than ReLU and exact GELU, or a
        dropout rate above 0: :class:`TransformerBlockParams` holds weights, and dropout
        is an argument of each call (``transformer_block(..., dropout_p=...)``), so a rate
        would be dropped silently (as :func:`~attncore.params_from_torch` refuses it too).
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(layer, torch.nn.TransformerEncoderLayer):
        raise TypeError(f"layer: expected a torch.nn.TransformerEncoderLayer, got "
                        f"{type(layer).__name__}")
    if not layer.self_attn.batch_first:
        raise ValueError("layer: expected torch.nn.TransformerEncoderLayer(batch_first=True), "
                         "got batch_first=False")
    act = layer.activation
    F = torch.nn.functional
    if act is F.relu or isinstance(act, torch.nn.ReLU):
        activation = "relu"
    elif act is F.gelu or (isinstance(act, torch.nn.GELU) and act.approximate == "none"):
        activation = "gelu"
    else:
        raise ValueError(f"layer: expected activation relu or gelu (exact), got {act!r}")
    rates = {"dropout": layer.dropout.p, "dropout1": layer.dropout1.p,
             "dropout2": layer.dropout2.p, "self_attn.dropout": layer.self_attn.dropout}
    if any(rates.values()):
        raise ValueError(f"layer: expected dropout=0.0, got {rates}: attncore's block holds "
                         f"weights only and takes dropout_p as an argument of "
                         f"transformer_block; build the layer with dropout=0.0 and copy "
                         f"the weights")
    if layer.norm1.eps != layer.norm2.eps:
        raise ValueError(f"layer: expected one LayerNorm eps, got {layer.norm1.eps} and "
                         f"{layer.norm2.eps}")

    def copy(t: Any) -> Any:
        return None if t is None else t.detach().clone()

    return TransformerBlockParams(
        params_from_torch(layer.self_attn),
        ln1_weight=copy(layer.norm1.weight), ln1_bias=copy(layer.norm1.bias),
        ln2_weight=copy(layer.norm2.weight), ln2_bias=copy(layer.norm2.bias),
        w_ff1=layer.linear1.weight.detach().T.clone(), b_ff1=copy(layer.linear1.bias),
        w_ff2=layer.linear2.weight.detach().T.clone(), b_ff2=copy(layer.linear2.bias),
        norm_first=bool(layer.norm_first), activation=activation, eps=float(layer.norm1.eps))


def block_params_to_torch(params: TransformerBlockParams) -> Any:
    """Build a ``torch.nn.TransformerEncoderLayer(batch_first=True, dropout=0.0)`` holding
    ``params``' weights; the inverse of :func:`block_params_from_torch`.

    NumPy parameters become CPU tensors; torch parameters keep their device and dtype.
    The layer's dropout is 0 (set ``layer.dropout.p`` and the others to train with it).

    Raises
    ------
    TypeError
        ``params`` is not a :class:`TransformerBlockParams`.
    ValueError
        Grouped-query attention (``n_kv_heads < num_heads``), RMSNorm, SwiGLU or RoPE
        (Llama's block), which the torch layer cannot hold.
    """
    import torch

    if not isinstance(params, TransformerBlockParams):
        raise TypeError(f"params: expected a TransformerBlockParams, got "
                        f"{type(params).__name__}")
    p = params
    if p.norm != "layer" or p.activation == "swiglu" or p.rope_base is not None:
        raise ValueError(f"params: expected norm='layer', activation 'relu' or 'gelu' and "
                         f"rope_base=None (torch.nn.TransformerEncoderLayer has no RMSNorm, "
                         f"SwiGLU or RoPE), got norm={p.norm!r}, activation={p.activation!r}, "
                         f"rope_base={p.rope_base!r}")
    if p.gated or p.qk_norm:
        raise ValueError(f"params: expected no w_gate and no QK-norm gains "
                         f"(torch.nn.TransformerEncoderLayer has neither), got "
                         f"w_gate={'an array' if p.gated else 'None'}, q_norm_weight="
                         f"{'an array' if p.qk_norm else 'None'}")
    mha = params_to_torch(params.attn)
    as_t = (lambda a: torch.as_tensor(a)) if p.backend == NUMPY else (lambda a: a.detach())
    w = as_t(p.w_ff1)
    layer = torch.nn.TransformerEncoderLayer(
        p.d_model, p.num_heads, p.d_ff, dropout=0.0, activation=p.activation,
        layer_norm_eps=p.eps, batch_first=True, norm_first=p.norm_first,
        bias=p.b_ff1 is not None, device=w.device, dtype=w.dtype)
    layer.self_attn = mha
    with torch.no_grad():
        layer.linear1.weight.copy_(as_t(p.w_ff1).T)
        layer.linear2.weight.copy_(as_t(p.w_ff2).T)
        layer.norm1.weight.copy_(as_t(p.ln1_weight))
        layer.norm2.weight.copy_(as_t(p.ln2_weight))
        if p.b_ff1 is not None:
            layer.linear1.bias.copy_(as_t(p.b_ff1))
            layer.linear2.bias.copy_(as_t(p.b_ff2))
            layer.norm1.bias.copy_(as_t(p.ln1_bias))
            layer.norm2.bias.copy_(as_t(p.ln2_bias))
    return layer

