"""Conformance checks for the attention code you write yourself, like ``numpy.testing``.

Each check runs a function you wrote on inputs it has not seen (shapes, dtypes, masks,
batch axes, edge cases), compares it with attncore's or PyTorch's reference, and reports
property by property what holds and the small input on which something fails, without
printing the right answer. Every check returns a :class:`CheckReport` (``.passed``,
``.failed``, ``report[name]``, ``print(report)`` for the summary). One module per check,
named for what it checks:

* :func:`check_attention` (:mod:`attncore.testing.attention`): scaled dot-product
  attention with masks, ``fn(q, k, v, mask=None, causal=False)``.
* :func:`check_gather_pages` (:mod:`attncore.testing.paged_gather`): a sequence's keys
  read out of a paged cache's blocks, ``fn(key_blocks, block_table, length)``.
* :func:`check_speculative_round` (:mod:`attncore.testing.speculative_round`): one round
  of speculative sampling, ``fn(p_target, p_draft, draft_tokens, rng)``.

What the checks share (calling your function safely, the report) is in
:mod:`attncore.testing.runner` and :mod:`attncore.testing.report`.
"""

from .attention import PROPERTIES, AttentionCheck, check_attention
from .paged_gather import check_gather_pages
from .speculative_round import check_speculative_round
from .report import CheckReport, PropertyResult

__all__ = ["AttentionCheck", "CheckReport", "PROPERTIES", "PropertyResult", "check_attention",
           "check_gather_pages", "check_speculative_round"]
