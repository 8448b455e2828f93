"""Checkers for the exercises of the chapter on MiniLM, a real pretrained transformer."""

from __future__ import annotations

import functools

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


def _layer0_attention_biases() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer 0's value bias, output matrix (attncore's (in, out) layout) and output bias,
    in float64, read from model.safetensors as stored (nn.Linear's (out, in) layout)."""
    from safetensors import safe_open

    prefix = "encoder.layer.0.attention."
    with safe_open(str(default_model_dir() / "model.safetensors"), framework="numpy") as f:
        b_v = f.get_tensor(prefix + "self.value.bias").astype(np.float64)
        w_o = f.get_tensor(prefix + "output.dense.weight").astype(np.float64).T
        b_o = f.get_tensor(prefix + "output.dense.bias").astype(np.float64)
    return b_v, w_o, b_o


@exercise("ex-inside-value-bias")
def value_bias(folded) -> Verdict:
    """The output bias of layer 0's attention once the value bias is folded into it."""
    b_v, w_o, b_o = _layer0_attention_biases()
    expected = b_o + b_v @ w_o
    try:
        got = np.asarray(folded, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return Verdict(False, f"expected a vector of {expected.size} numbers, got "
                              f"{type(folded).__name__}")
    if got.shape != expected.shape:
        return Verdict(False, f"expected a vector of {expected.size} numbers (one per "
                              f"feature of the layer's output), got {got.size}")
    if np.allclose(got, expected, rtol=1e-4, atol=1e-5):
        return Verdict(True, "The weights of a row sum to 1, so every row receives all of "
                             "b_V, and W_O carries it to the output like any other value.")
    if np.allclose(got, b_o + b_v, rtol=1e-4, atol=1e-5):
        return Verdict(False, "b_V enters the heads' outputs, which W_O then maps: the "
                              "folded bias must pass through W_O too.")
    if np.allclose(got, b_o, rtol=1e-4, atol=1e-5):
        return Verdict(False, "that is the output bias as it stands: with b_V set to zero "
                              "the output loses what b_V contributed; where does it go?")
    return Verdict(False, "write a head's output with the bias inside the values, and use "
                          "that each row of attention weights sums to 1.")


# ex-inside-scale-one-layer: the factor sqrt(d_head) undone in one layer at a time, on the
# chapter's 24 retrieval texts; the answer is the layer whose change moves the embeddings most
SCALE_TOLERANCE = 1.5e-3          # "to three decimals"


@functools.lru_cache(maxsize=1)
def one_layer_unscaled_cosines() -> tuple[float, ...]:
    """Mean cosine of the 24 retrieval embeddings with the trained ones, when layer
    ``l``'s queries (W_Q and b_Q) are multiplied by sqrt(d_head), for l = 0..5 (computed
    once per process: seven encodings of the model)."""
    import math
    from dataclasses import replace

    from ...pretrained import MiniLM
    from ..sentences import RETRIEVAL_PAIRS

    model = MiniLM.load()
    texts = [q for q, _ in RETRIEVAL_PAIRS] + [a for _, a in RETRIEVAL_PAIRS]
    base = model.encode(texts)
    p = model.params
    cosines = []
    for layer in range(len(p.layers)):
        a = p.layers[layer].attention
        factor = math.sqrt(a.d_head)
        layers = list(p.layers)
        layers[layer] = replace(layers[layer],
                                attention=replace(a, w_q=a.w_q * factor, b_q=a.b_q * factor))
        changed = MiniLM(model.config, replace(p, layers=layers), model.tokenizer,
                         model.model_dir)
        cosines.append(float((changed.encode(texts) * base).sum(axis=1).mean()))
    return tuple(cosines)


@exercise("ex-inside-scale-one-layer")
def scale_one_layer(layer, cosine) -> Verdict:
    """The layer whose unscaled scores move the embeddings most, and their mean cosine."""
    import numbers

    if isinstance(layer, bool) or not isinstance(layer, numbers.Integral):
        return Verdict(False, f"my_layer is a layer's index, a whole number from 0 to 5; got "
                              f"{layer!r}")
    if isinstance(cosine, bool) or not isinstance(cosine, numbers.Real):
        return Verdict(False, f"my_cosine is a number; got {cosine!r}")
    cosines = one_layer_unscaled_cosines()
    want = int(np.argmin(cosines))
    parts = {"layer": int(layer) == want,
             "mean cosine": abs(float(cosine) - cosines[want]) <= SCALE_TOLERANCE}
    details = tuple(f"{name}: {'right' if ok else 'not yet'}" for name, ok in parts.items())
    if all(parts.values()):
        return Verdict(True, "A change in an early layer is partly absorbed by the layers "
                             "after it; nothing comes after the last.", details)
    if not parts["layer"]:
        return Verdict(False, "encode the texts once per layer changed, and compare each "
                              "with the trained embeddings (mean of the row-wise dot "
                              "products of unit vectors).", details)
    return Verdict(False, "the right layer; give the mean cosine of its 24 embeddings with "
                          "the trained ones, to three decimals.", details)
