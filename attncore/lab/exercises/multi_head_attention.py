"""Checkers for the exercises of chapter 5, multi-head attention.

Each checker recomputes what it compares with: the parameter count from a layer built by
:func:`attncore.multihead.init_multihead`, the FLOPs by adding up the shapes of the layer's
matrix products, the window mask from its definition (and by running attncore's layer beside
``torch.nn.MultiheadAttention``), the head swap by running the layer. Hints point at the
method, never at the number.
"""

from __future__ import annotations

import numbers
from dataclasses import fields
from typing import Any

import numpy as np

from ...multihead import MultiHeadParams, init_multihead, multi_head_attention
from . import Verdict, exercise

# ex-mha-count: GPT-2 small, one sequence of 1024 tokens.
COUNT_D_MODEL, COUNT_HEADS, COUNT_N = 768, 12, 1024

# ex-mha-window: query i may attend to keys i - WINDOW + 1 .. i, sequences of WINDOW_N.
WINDOW, WINDOW_N = 3, 5
WINDOW_D_MODEL, WINDOW_HEADS = 8, 2

# ex-mha-swap: the layer whose heads are swapped.
SWAP_D_MODEL, SWAP_HEADS = 8, 2


def _integer(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError(f"{name} should be a whole number, got {value!r}")
    return int(value)


def _parts(**parts: bool) -> tuple[str, ...]:
    """One line per part of a several-part answer: ``name: right`` or ``name: not yet``."""
    return tuple(f"{name.replace('_', ' ')}: {'right' if ok else 'not yet'}"
                 for name, ok in parts.items())


def matmul_flops(n: int, d_model: int, num_heads: int) -> int:
    """2 m n p for every matrix product of one layer on one sequence of n tokens."""
    d_k = d_model // num_heads

    def product(m: int, p: int, q: int) -> int:          # (m x p) @ (p x q)
        return 2 * m * p * q

    projections = 3 * product(n, d_model, d_model)       # Q, K, V
    scores = num_heads * product(n, d_k, n)              # Q_h K_h^T, per head
    weighted = num_heads * product(n, n, d_k)            # A_h V_h, per head
    output = product(n, d_model, d_model)                # Concat(...) W_O
    return projections + scores + weighted + output


@exercise("ex-mha-count")
def count(parameters, flops) -> Verdict:
    """Parameters and matrix-product FLOPs of one GPT-2-small attention layer, N = 1024."""
    parameters = _integer("ex1_parameters", parameters)
    flops = _integer("ex1_flops", flops)
    want_params = init_multihead(COUNT_D_MODEL, COUNT_HEADS).num_parameters()
    want_flops = matmul_flops(COUNT_N, COUNT_D_MODEL, COUNT_HEADS)
    ok_p, ok_f = parameters == want_params, flops == want_flops
    details = _parts(parameters=ok_p, FLOPs=ok_f)
    if ok_p and ok_f:
        return Verdict(True, "Neither number contains H.", details)
    hints = []
    if not ok_p:
        hints.append("count four d_model x d_model matrices and four bias vectors")
    if not ok_f:
        hints.append("add 2 m n p over the four projections and the two products per head, "
                     "with d_k = d_model / H")
    return Verdict(False, "; ".join(hints) + ".", details)


def _as_bool_matrix(name: str, value) -> np.ndarray:
    if hasattr(value, "detach"):                         # a torch tensor
        value = value.detach().cpu().numpy()
    value = np.asarray(value)
    if value.dtype != bool:
        raise TypeError(f"{name} should be a boolean mask, got dtype {value.dtype}")
    if value.shape != (WINDOW_N, WINDOW_N):
        raise ValueError(f"{name} should have shape ({WINDOW_N}, {WINDOW_N}) (queries x "
                         f"keys), got {value.shape}")
    return value


def _as_float_matrix(name: str, value) -> np.ndarray:
    if hasattr(value, "detach"):                         # a torch tensor
        value = value.detach().cpu().numpy()
    value = np.asarray(value)
    if value.dtype == bool:
        raise TypeError(f"{name} should be a float mask this time (it is added to the "
                        f"scores), got a boolean one")
    if not np.issubdtype(value.dtype, np.floating):
        raise TypeError(f"{name} should be a float mask, got dtype {value.dtype}")
    if value.shape != (WINDOW_N, WINDOW_N):
        raise ValueError(f"{name} should have shape ({WINDOW_N}, {WINDOW_N}) (queries x "
                         f"keys), got {value.shape}")
    return value.astype(np.float64)


def window_mask() -> np.ndarray:
    """True where query i may attend to key j: i - WINDOW < j <= i."""
    i, j = np.arange(WINDOW_N)[:, None], np.arange(WINDOW_N)[None, :]
    return (j <= i) & (j > i - WINDOW)


def _layers_agree(window: np.ndarray, attn_mask: np.ndarray) -> bool:
    """attncore's layer with ``window`` against nn.MultiheadAttention with ``attn_mask``."""
    import torch

    from ...multihead import params_from_torch

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(WINDOW_D_MODEL, WINDOW_HEADS, batch_first=True,
                                      dtype=torch.float64)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, WINDOW_N,
                                                                   WINDOW_D_MODEL)))
    with torch.no_grad():
        ours = multi_head_attention(params_from_torch(mha), x, mask=torch.from_numpy(window))
        theirs, _ = mha(x, x, x, attn_mask=torch.from_numpy(attn_mask), need_weights=False)
    return bool(torch.isfinite(theirs).all()) and float((ours - theirs).abs().max()) < 1e-10


@exercise("ex-mha-window")
def window(window_answer, attn_mask) -> Verdict:
    """The sliding-window mask in attncore's convention, and as nn.MultiheadAttention's
    float ``attn_mask``."""
    window_answer = _as_bool_matrix("ex2_window", window_answer)
    attn_mask = _as_float_matrix("ex2_attn_mask", attn_mask)
    ok_window = np.array_equal(window_answer, window_mask())
    agree = ok_window and _layers_agree(window_answer, attn_mask)
    details = _parts(attncore_mask=ok_window, torch_attn_mask=agree)
    if ok_window and agree:
        return Verdict(True, "The two layers agree: one mask says where attention may go, "
                             "the other what is added to the scores to forbid the rest.",
                       details)
    if not ok_window:
        return Verdict(False, "query i may see keys i-2, i-1 and i, and none in the future; "
                              "build it from index grids i (a column) and j (a row).",
                       details)
    return Verdict(False, "the layers disagree: a float attn_mask is added to the scores; "
                          "what must be added where attention may go, and what where it "
                          "may not?", details)


def _layer_with_biases(seed: int) -> MultiHeadParams:
    params = init_multihead(SWAP_D_MODEL, SWAP_HEADS, seed=seed)
    rng = np.random.default_rng(seed + 1)
    for name in ("b_q", "b_k", "b_v", "b_o"):   # non-zero biases, so that they count too
        getattr(params, name)[:] = rng.standard_normal(SWAP_D_MODEL)
    return params


@exercise("ex-mha-swap")
def swap(swap_heads) -> Verdict:
    """A function that swaps heads 0 and 1 of a two-head layer without changing its output."""
    if not callable(swap_heads):
        return Verdict(False, "replace the line swap_heads = None with a def swap_heads(p).")
    params = _layer_with_biases(seed=11)
    before = {f.name: np.copy(getattr(params, f.name)) for f in fields(params)
              if f.name != "num_heads"}
    swapped = swap_heads(params)
    if not isinstance(swapped, MultiHeadParams):
        return Verdict(False, f"swap_heads should return a MultiHeadParams (for example with "
                              f"dataclasses.replace), got {type(swapped).__name__}")
    if any(not np.array_equal(getattr(params, n), v) for n, v in before.items()):
        return Verdict(False, "swap_heads changed its argument; return new parameters "
                              "instead (slicing with an index array copies).")
    x = np.random.default_rng(12).standard_normal((2, 6, SWAP_D_MODEL))
    out, weights = multi_head_attention(params, x, return_weights=True)
    out_s, weights_s = multi_head_attention(swapped, x, return_weights=True)
    same_output = float(np.abs(out_s - out).max()) < 1e-12
    heads_swapped = float(np.abs(weights_s[:, ::-1] - weights).max()) < 1e-12
    details = _parts(output_unchanged=same_output,
                     weights_in_swapped_order=heads_swapped)
    if same_output and heads_swapped:
        return Verdict(True, "Head h owns column block h of W_Q, W_K, W_V (and those bias "
                             "entries) and row block h of W_O.", details)
    if not heads_swapped:
        return Verdict(False, "the heads' attention patterns did not trade places: move the "
                              "column blocks of W_Q and W_K (and their biases).", details)
    return Verdict(False, "the patterns moved but the output changed: what each head writes "
                          "must move with it (which block of W_O belongs to head h?).",
                   details)


@exercise("ex-mha-your-layer")
def your_layer(fn: Any) -> Verdict:
    """A reader-written ``my_multi_head(x, w_q, w_k, w_v, w_o, num_heads, causal=False)``,
    put through :func:`attncore.testing.check_multi_head_attention`."""
    from ...testing import check_multi_head_attention
    from .scaled_dot_product_attention import verdict_from_report

    if not callable(fn):
        return Verdict(False, f"expected a function my_multi_head(x, w_q, w_k, w_v, w_o, "
                              f"num_heads, causal=False), got {type(fn).__name__}")
    return verdict_from_report(
        check_multi_head_attention(fn),
        "from attncore.testing import check_multi_head_attention; "
        "print(check_multi_head_attention(my_multi_head))", "Your layer")
