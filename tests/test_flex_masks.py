"""PyTorch's FlexAttention as the reference for the masks of attncore.masks and for
attention sinks: each mask written as a ``mask_mod`` (the way practitioners write it),
run by ``torch.nn.attention.flex_attention`` eagerly on the CPU, against attncore's
attention with attncore's mask (NumPy and torch) and, for windows, its ``window=``.

flex_attention runs eagerly on the CPU (an unfused implementation that forms the whole
score matrix, with a warning that says so); its first call imports and traces a good deal
of machinery, and every new ``mask_mod`` is traced again, so the masks are built once for
the module and the outputs computed once per mask.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import attncore as ac

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

pytestmark = pytest.mark.filterwarnings(
    "ignore:flex_attention called without torch.compile:UserWarning")

B, H, N, D = 2, 2, 37, 8
W, S = 6, 3
DOCS = torch.tensor([[0] * 10 + [1] * 20 + [2] * 7, [5] * 30 + [9] * 7])
PREFIX = torch.tensor([12, 0])


# --- the masks, written for FlexAttention --------------------------------------------------

def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < W)


def window_and_sink_tokens(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx - kv_idx < W) | (kv_idx < S))


def causal_documents(b, h, q_idx, kv_idx):
    return (DOCS[b, q_idx] == DOCS[b, kv_idx]) & (q_idx >= kv_idx)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX[b]) | (q_idx >= kv_idx)


@functools.lru_cache(maxsize=None)
def inputs():
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, N, D, generator=gen, dtype=torch.float64)
                 for _ in range(3))


@functools.lru_cache(maxsize=None)
def flex_out(mask_mod):
    """FlexAttention's output and row log-sum-exp under ``mask_mod``."""
    q, k, v = inputs()
    block_mask = flex.create_block_mask(mask_mod, B, None, N, N, device="cpu")
    out, aux = flex.flex_attention(q, k, v, block_mask=block_mask,
                                   return_aux=flex.AuxRequest(lse=True))
    return out, aux.lse


def attncore_masks():
    """The same masks from attncore.masks, shaped (B, 1, N, N) or (N, N)."""
    return {
        window: ac.sliding_window_mask(N, N, W),
        window_and_sink_tokens: ac.sliding_window_mask(N, N, W, sink_tokens=S),
        causal_documents: (ac.document_mask(DOCS.numpy()) & np.tri(N, dtype=bool))[:, None],
        prefix_lm: ac.prefix_lm_mask(N, PREFIX.numpy())[:, None],
    }


@pytest.mark.parametrize("mask_mod", [window, window_and_sink_tokens, causal_documents,
                                      prefix_lm], ids=lambda f: f.__name__)
def test_each_mask_against_flex_attention(mask_mod):
    want = flex_out(mask_mod)[0]
    mask = attncore_masks()[mask_mod]
    q, k, v = inputs()
    for lib in ("numpy", "torch"):
        args = [x.numpy() if lib == "numpy" else x for x in (q, k, v)]
        m = mask if lib == "numpy" else torch.from_numpy(mask)
        got = [ac.scaled_dot_product_attention(*args, mask=m),
               ac.tiled_attention(*args, mask=m, block_size=8)]
        if mask_mod is window:
            got += [ac.scaled_dot_product_attention(*args, causal=True, window=W),
                    ac.tiled_attention(*args, causal=True, window=W, block_size=8)]
        for out in got:
            assert np.abs(np.asarray(out) - want.numpy()).max() < 1e-12


def test_torch_masks_are_the_same_as_numpy_masks():
    like = torch.zeros(1)
    assert torch.equal(ac.sliding_window_mask(N, N, W, sink_tokens=S, like=like),
                       torch.from_numpy(attncore_masks()[window_and_sink_tokens]))
    assert torch.equal(ac.document_mask(DOCS), torch.from_numpy(ac.document_mask(
        DOCS.numpy())))
    assert torch.equal(ac.prefix_lm_mask(N, PREFIX), torch.from_numpy(ac.prefix_lm_mask(
        N, PREFIX.numpy())))


def test_sinks_against_flex_attention():
    # gpt-oss's sinks from FlexAttention's log-sum-exp: with the sink in the softmax,
    # out' = out * exp(lse) / (exp(lse) + exp(s)) = out * sigmoid(lse - s)
    out, lse = flex_out(window)
    sinks = torch.tensor([0.5, 2.0], dtype=torch.float64)
    want = out * torch.sigmoid(lse - sinks[:, None])[..., None]
    q, k, v = inputs()
    for lib in ("numpy", "torch"):
        args = [x.numpy() if lib == "numpy" else x for x in (q, k, v, sinks)]
        for f in (ac.scaled_dot_product_attention, ac.tiled_attention):
            got = f(*args[:3], causal=True, window=W, sinks=args[3])
            assert np.abs(np.asarray(got) - want.numpy()).max() < 1e-12
    # and the log-sum-exp itself, without and with the sink's term
    _, plain = ac.tiled_attention(q, k, v, causal=True, window=W, return_lse=True)
    _, with_sink = ac.tiled_attention(q, k, v, causal=True, window=W, return_lse=True,
                                      sinks=sinks)
    assert (plain - lse).abs().max() < 1e-12
    assert (with_sink - torch.logaddexp(lse, sinks[:, None])).abs().max() < 1e-12
