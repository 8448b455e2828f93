"""Attention sinks in the Triton kernels (attncore.triton.flash_attention): forward, row
log-sum-exp and backward (the sinks' gradient included) against attncore's reference, in
float32 on Triton's CPU interpreter (or compiled on a GPU). Skips without Triton."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
at = pytest.importorskip("attncore.triton", reason="needs the optional package triton")

import attncore as ac  # noqa: E402

DEVICES = (["cpu"] if at.interpreting() else []) + \
    (["cuda"] if torch.cuda.is_available() else [])
pytestmark = pytest.mark.skipif(not DEVICES, reason="no CUDA device, and Triton was "
                                "imported without its interpreter")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal, per_head", [(True, True), (False, False)])
def test_sinks_forward_and_backward(device, causal, per_head):
    # 21 rows: two tiles of 16, the second partial (the interpreter is slow: small sizes)
    gen = torch.Generator().manual_seed(1)
    q, k, v, g = (torch.randn(1, 3, 21, 16, generator=gen) for _ in range(4))
    sinks = torch.randn(3 if per_head else (), generator=gen) * 2
    leaves = [x.to(device).requires_grad_() for x in (q, k, v, sinks)]
    out, lse = at.flash_attention(*leaves[:3], causal=causal, sinks=leaves[3],
                                  return_lse=True, block_m=16, block_n=16)
    out.backward(g.to(device))
    mine = [out.detach(), lse] + [x.grad for x in leaves]
    # attncore's reference in float64, differentiated by autograd
    ref = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    want, w = ac.scaled_dot_product_attention(*ref[:3], causal=causal, sinks=ref[3],
                                              return_weights=True)
    want.backward(g.double())
    s_col = ref[3].detach().expand(3) if not per_head else ref[3].detach()
    scores = ref[0].detach() @ ref[1].detach().transpose(-1, -2) / 4.0
    if causal:
        scores = scores.masked_fill(~torch.ones(21, 21, dtype=torch.bool).tril(),
                                    float("-inf"))
    want_lse = torch.logaddexp(torch.logsumexp(scores, -1), s_col[:, None])
    for a, b in zip(mine, [want.detach(), want_lse] + [x.grad for x in ref]):
        assert a.shape == b.shape
        assert np.abs(a.detach().cpu().double().numpy() - b.numpy()).max() < 2e-5


def test_bad_sinks_are_refused():
    q = torch.zeros(1, 2, 4, 16, device=DEVICES[0])
    with pytest.raises(ValueError, match=r"sinks: expected shape \(\) .* or \(2,\)"):
        at.flash_attention(q, q, q, sinks=torch.zeros(3, device=q.device))
    with pytest.raises(TypeError, match="sinks: expected the dtype of the queries"):
        at.flash_attention(q, q, q, sinks=torch.zeros(2, dtype=torch.float64, device=q.device))
