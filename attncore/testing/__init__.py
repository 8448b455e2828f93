"""Conformance checks for the attention code you write yourself, like ``numpy.testing``.

Each check runs a function you wrote on inputs it has not seen (shapes, dtypes, masks,
batch axes, edge cases), compares it with attncore's or PyTorch's reference, and reports
property by property what holds and the small input on which something fails, without
printing the right answer. Every check returns a :class:`CheckReport` (``.passed``,
``.failed``, ``report[name]``, ``print(report)`` for the summary). One module per check,
named for what it checks:

* chapter 2, :func:`check_softmax` (:mod:`attncore.testing.softmax`): a softmax along one
  axis, ``fn(x, axis=-1)``;
* chapter 4, :func:`check_attention` (:mod:`attncore.testing.attention`): scaled
  dot-product attention with masks, ``fn(q, k, v, mask=None, causal=False)``;
* chapter 5, :func:`check_multi_head_attention` (:mod:`attncore.testing.multi_head`): the
  forward pass of a multi-head layer, ``fn(x, w_q, w_k, w_v, w_o, num_heads,
  causal=False)``;
* chapter 7, :func:`check_rope` (:mod:`attncore.testing.rope`): rotary position
  embeddings, ``fn(x, positions, base=10000.0)``;
* chapter 9, :func:`check_attention_backward` (:mod:`attncore.testing.backward`): the
  gradients of attention, ``fn(q, k, v, d_out, causal=False) -> (dq, dk, dv)``;
* chapter 10, :func:`check_kv_cache_decode` (:mod:`attncore.testing.kv_cache`): one
  decoding step with a KV cache and grouped-query attention, ``fn(q_new, k_new, v_new,
  k_cache, v_cache)``;
* chapter 14, :func:`check_merge` (:mod:`attncore.testing.merge`): ring attention's step,
  two partial attention results over disjoint key blocks merged, ``fn(out_a, lse_a, out_b,
  lse_b)``;
* chapter 16, :func:`check_gather_pages` (:mod:`attncore.testing.paged_gather`): a
  sequence's keys read out of a paged cache's blocks, ``fn(key_blocks, block_table,
  length)``;
* chapter 17, :func:`check_speculative_round` (:mod:`attncore.testing.speculative_round`):
  one round of speculative sampling, ``fn(p_target, p_draft, draft_tokens, rng)``;
* chapter 18, :func:`check_window_mask` (:mod:`attncore.testing.window_mask`): a
  sliding-window mask with sink tokens, ``fn(n, window, sinks)``;
* chapter 19, :func:`check_delta_step` (:mod:`attncore.testing.delta_step`): one step of
  the gated delta rule, ``fn(S, q, k, v, g, beta) -> (o, S_new)``.

The other chapters' build-it exercises (1, 3, 6, 8, 11, 12, 13, 15) are checked by their
exercise's checker in :mod:`attncore.lab.exercises`, property by property in the same way.

What the checks share (calling your function safely, the report) is in
:mod:`attncore.testing.runner` and :mod:`attncore.testing.report`.
"""

from .attention import PROPERTIES, AttentionCheck, check_attention
from .backward import check_attention_backward
from .delta_step import check_delta_step
from .kv_cache import check_kv_cache_decode
from .merge import check_merge
from .multi_head import check_multi_head_attention
from .paged_gather import check_gather_pages
from .report import CheckReport, PropertyResult
from .rope import check_rope
from .softmax import check_softmax
from .speculative_round import check_speculative_round
from .window_mask import check_window_mask

__all__ = ["AttentionCheck", "CheckReport", "PROPERTIES", "PropertyResult", "check_attention",
           "check_attention_backward", "check_delta_step", "check_kv_cache_decode",
           "check_merge", "check_multi_head_attention", "check_rope", "check_softmax",
           "check_window_mask", "check_gather_pages", "check_speculative_round"]
