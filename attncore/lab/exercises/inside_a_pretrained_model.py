"""Checkers for the exercises of the chapter on MiniLM, a real pretrained transformer."""

from __future__ import annotations

import numpy as np

from ...pretrained.checkpoint import default_model_dir
from ...pretrained.layers import mean_pool
from . import Verdict, exercise


def _tensor_sizes(prefix: str) -> dict[str, int]:
    """Number of scalars of every tensor of model.safetensors whose name starts with prefix
    (read from the file's header only)."""
    from safetensors import safe_open

    with safe_open(str(default_model_dir() / "model.safetensors"), framework="numpy") as f:
        return {name: int(np.prod(f.get_slice(name).get_shape())) for name in f.keys()
                if name.startswith(prefix)}


@exercise("ex-inside-layer-parameters")
def layer_parameters(count) -> Verdict:
    """The number of weights and biases of one encoder layer of MiniLM."""
    sizes = _tensor_sizes("encoder.layer.0.")
    expected = sum(sizes.values())
    try:
        got = int(count)
    except (TypeError, ValueError):
        return Verdict(False, f"expected a whole number, got {count!r}")
    if got != count:
        return Verdict(False, f"expected a whole number, got {count!r}")
    if got == expected:
        return Verdict(True, "Attention, two layer norms and the feed-forward, biases "
                             "included; six such layers hold less than the embeddings do.")
    attention = sum(v for k, v in sizes.items() if ".attention." in k and "LayerNorm" not in k)
    norms = sum(v for k, v in sizes.items() if "LayerNorm" in k)
    biases = sum(v for k, v in sizes.items() if k.endswith(".bias") and "LayerNorm" not in k)
    if got == attention:
        return Verdict(False, "that is the attention sublayer alone; a layer also has a "
                              "feed-forward network and two layer norms.")
    if got in (expected - norms, expected - biases, expected - norms - biases):
        return Verdict(False, "close: count every bias vector and each layer norm's gain "
                              "and shift as well.")
    return Verdict(False, "list the matrices and vectors of one layer (attention "
                          "projections, feed-forward, layer norms) with their shapes, then "
                          "add up their sizes.")


@exercise("ex-inside-mean-pool")
def mean_pool_function(fn) -> Verdict:
    """The reader's masked mean pooling, on seeded random padded batches."""
    if not callable(fn):
        return Verdict(False, f"expected a function my_mean_pool(hidden, mask), got "
                              f"{type(fn).__name__}")
    rng = np.random.default_rng(10)
    for lengths in ([5, 2, 3], [1, 4], [6]):
        n = max(lengths)
        hidden = rng.standard_normal((len(lengths), n, 4))
        mask = np.arange(n)[None, :] < np.array(lengths)[:, None]
        expected = mean_pool(hidden, mask)
        got = np.asarray(fn(hidden.copy(), mask.copy()), dtype=float)
        if got.shape != expected.shape:
            return Verdict(False, f"for hidden of shape {hidden.shape} expected one vector "
                                  f"per sequence, shape {expected.shape}, got {got.shape}")
        if not np.allclose(got, expected, rtol=1e-10, atol=1e-12):
            if np.allclose(got, hidden.mean(axis=1)):
                return Verdict(False, "this averages the padding positions as well: only "
                                      "the real tokens should count.")
            return Verdict(False, "the result differs from the average over each "
                                  "sequence's real tokens; check the sum and the count.")
    return Verdict(True, "Padding positions neither add to the sum nor to the count.")
