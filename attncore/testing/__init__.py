"""Conformance checks for the attention code you write yourself, like ``numpy.testing``.

Each check runs a function you wrote on inputs it has not seen (shapes, dtypes, masks,
batch axes, edge cases), compares it with attncore's or PyTorch's reference, and reports
property by property what holds and the small input on which something fails, without
printing the right answer. Every check returns a :class:`CheckReport` (``.passed``,
``.failed``, ``report[name]``, ``print(report)`` for the summary). One module per check,
named for what it checks:

* :func:`check_attention` (:mod:`attncore.testing.attention`): scaled dot-product
  attention with masks, ``fn(q, k, v, mask=None, causal=False)``.
* :func:`check_attention_backward` (:mod:`attncore.testing.backward`): the gradients of
  attention, ``fn(q, k, v, d_out, causal=False) -> (dq, dk, dv)``.
* :func:`check_kv_cache_decode` (:mod:`attncore.testing.kv_cache`): one decoding step with
  a KV cache and grouped-query attention, ``fn(q_new, k_new, v_new, k_cache, v_cache)``.

What the checks share (calling your function safely, the report) is in
:mod:`attncore.testing.runner` and :mod:`attncore.testing.report`.
"""

from .attention import PROPERTIES, AttentionCheck, check_attention
from .backward import check_attention_backward
from .kv_cache import check_kv_cache_decode
from .report import CheckReport, PropertyResult

__all__ = ["AttentionCheck", "CheckReport", "PROPERTIES", "PropertyResult", "check_attention",
           "check_attention_backward", "check_kv_cache_decode"]
