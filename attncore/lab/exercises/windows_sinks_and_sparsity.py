"""Checkers for the exercises of chapter 18, windows, sinks and learned sparsity.

Each checker recomputes what it compares with: the reader's sliding-window mask with sink
tokens, put through :func:`attncore.testing.check_window_mask`; how far back information
can travel through a stack of sliding-window layers; and the sink logit that leaves a
given share of a row's weight to its keys. Hints point at the method, never at the
answer.
"""

from __future__ import annotations

import math
import numbers

from typing import Any

from . import Verdict, exercise, real_answer, report_verdict

# ex-windows-reach: a stack of sliding-window layers (Mistral 7B's sizes: Jiang et al.,
# 2023, 32 layers with a window of 4096)
REACH_LAYERS, REACH_WINDOW = 32, 4096

# ex-windows-sink-logit: one query's scaled scores against its four keys, and the share
# of the row's weight that the keys should keep
SINK_SCORES, SINK_KEPT = (2.0, 1.0, 0.5, -1.0), 0.25


def window_reach(layers: int, window: int) -> int:
    """How many positions back the output of the last of ``layers`` sliding-window layers
    at position ``t`` can depend on: each layer reaches ``window - 1`` positions further
    (query ``i`` sees ``i - window < j <= i``)."""
    return layers * (window - 1)


@exercise("ex-windows-reach")
def reach(positions) -> Verdict:
    """The distance from the earliest position that can influence the last layer's
    output at position ``t``, for 32 layers of window 4096."""
    if isinstance(positions, bool) or not isinstance(positions, numbers.Real) \
            or not float(positions).is_integer() or positions < 0:
        raise TypeError(f"my_reach should be a whole number >= 0, got {positions!r}")
    want = window_reach(REACH_LAYERS, REACH_WINDOW)
    got = int(positions)
    if got == want:
        return Verdict(True, "Each layer moves information back by one window less the "
                             "position itself, and the layers add up.")
    if got == REACH_LAYERS * REACH_WINDOW:
        return Verdict(False, "Close: how many positions back does one layer reach? "
                              "The window counts the query's own position.")
    if got == REACH_WINDOW - 1 or got == REACH_WINDOW:
        return Verdict(False, "That is one layer. The next layer reads states that "
                              "already mix a window of positions each.")
    return Verdict(False, "Follow one position back through the layers: at each, which "
                          "earlier positions does it read?")


def sink_logit_for(scores: tuple[float, ...], kept: float) -> float:
    """The sink logit ``s`` with which the keys keep the share ``kept`` of the weight:
    ``exp(lse) / (exp(lse) + exp(s)) = kept``, so ``s = lse + log((1 - kept) / kept)``."""
    top = max(scores)
    lse = top + math.log(sum(math.exp(x - top) for x in scores))
    return lse + math.log((1 - kept) / kept)


@exercise("ex-windows-sink-logit")
def sink_logit(s) -> Verdict:
    """The sink logit that leaves a quarter of the row's weight to its four keys."""
    got = real_answer("my_sink", s)
    want = sink_logit_for(SINK_SCORES, SINK_KEPT)
    # a hand answer to four decimals is right: 1e-4 of the logit, about 3.6e-4
    if abs(got - want) <= 1e-4 * max(1.0, abs(want)):
        return Verdict(True, "The sink's weight is a logistic function of the sink logit "
                             "minus the keys' log-sum-exp.")
    top = max(SINK_SCORES)
    lse = top + math.log(sum(math.exp(x - top) for x in SINK_SCORES))
    if abs(got - lse) < 1e-4 * max(1.0, abs(lse)):
        return Verdict(False, "With that logit the sink takes half of the weight; it "
                              "should take three quarters.")
    return Verdict(False, "Write the share of the keys as exp(lse) / (exp(lse) + exp(s)), "
                          "with lse the log-sum-exp of the four scores, and solve for s.")


@exercise("ex-windows-mask")
def window_mask(fn: Any) -> Verdict:
    """A reader-written ``my_window_mask(n, window, sinks)``, put through
    :func:`attncore.testing.check_window_mask` on every small size."""
    from ...testing import check_window_mask

    if not callable(fn):
        return Verdict(False, f"expected a function my_window_mask(n, window, sinks): "
                              f"replace the line my_window_mask = None with a def, got "
                              f"{type(fn).__name__}")
    return report_verdict(check_window_mask(fn),
                          "Your mask is the window with its sinks for every n up to 9, "
                          "every window and every number of sinks.",
                          call="ac.testing.check_window_mask(my_window_mask)")
