"""Checkers for the exercises of the chapter on MiniLM, a real pretrained transformer."""

from __future__ import annotations

import functools

import numpy as np

from ...pretrained.checkpoint import default_model_dir
from . import Verdict, exercise
from ._reports import report_verdict


def masked_max_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Feature-wise maximum over each sequence's real tokens.

    ``hidden`` ``(batch, n, d)``, ``mask`` ``(batch, n)`` boolean (True at real tokens, at
    least one per sequence); returns ``(batch, d)`` in ``hidden``'s dtype.
    """
    return np.where(mask[..., None], hidden, -np.inf).max(axis=1).astype(hidden.dtype)


@exercise("ex-inside-max-pool")
def max_pool_function(fn) -> Verdict:
    """The reader's masked max pooling, on seeded random padded batches whose padding
    positions hold large values."""
    if not callable(fn):
        return Verdict(False, f"expected a function my_max_pool(hidden, mask), got "
                              f"{type(fn).__name__}")
    rng = np.random.default_rng(10)
    for lengths in ([5, 2, 3], [1, 4], [6]):
        n = max(lengths)
        mask = np.arange(n)[None, :] < np.array(lengths)[:, None]
        hidden = rng.standard_normal((len(lengths), n, 4))
        hidden[~mask] = 5.0          # padding vectors that would win if they counted
        expected = masked_max_pool(hidden, mask)
        got = np.asarray(fn(hidden.copy(), mask.copy()), dtype=float)
        if got.shape != expected.shape:
            return Verdict(False, f"for hidden of shape {hidden.shape} expected one vector "
                                  f"per sequence, shape {expected.shape}, got {got.shape}")
        if not np.allclose(got, expected, rtol=1e-10, atol=1e-12):
            if np.allclose(got, hidden.max(axis=1)):
                return Verdict(False, "the padding positions take part in the maximum: "
                                      "only the real tokens should count.")
            if np.allclose(got, (hidden * mask[..., None]).max(axis=1)):
                return Verdict(False, "a padding position set to 0 still competes: where "
                                      "a feature is negative at every real token, 0 wins.")
            return Verdict(False, "the result differs from the maximum over each "
                                  "sequence's real tokens, feature by feature.")
    return Verdict(True, "Padding positions can never win the maximum.")


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


# ex-inside-encoder-layer: the reader's post-LN encoder layer in NumPy, attention included,
# my_encoder_layer(x, mask, layer, eps), against attncore.pretrained.encoder_layer on small
# random layers and on MiniLM's layer 0.
LAYER_PROPERTIES = {
    "output": "returns a NumPy array of x's shape and dtype, with finite values (float64 "
              "and float32)",
    "padding_ignored": "changing x at the padding positions changes no real token's output",
    "random_layer": "equal to attncore's post-LN layer on small random layers (biases, gains "
                    "and shifts random), to 1e-10 in float64",
    "minilm_layer0": "on MiniLM's layer 0 and three padded sentences, equal to attncore's "
                     "layer (itself equal to PyTorch's) to 1e-5 in float32, at the real "
                     "tokens",
}
# (batch lengths, d, heads, d_ff, seed): the smallest first
LAYER_CASES = (((3, 2), 8, 2, 16, 0), ((4, 1, 3), 12, 3, 24, 1))
LAYER_EPS = 1e-12
LAYER_SENTENCES = ("A dog.", "The cat sat on the mat.",
                   "Attention heads in MiniLM are surprisingly interpretable.")


def _random_encoder_layer(d, heads, d_ff, seed):
    from dataclasses import replace

    from ...multihead import init_multihead
    from ...pretrained.checkpoint import EncoderLayerParams, LayerNormParams

    rng = np.random.default_rng(seed + 200)
    attn = init_multihead(d, heads, seed=seed, bias=True)
    attn = replace(attn, **{k: 0.3 * rng.standard_normal(d)
                            for k in ("b_q", "b_k", "b_v", "b_o")})

    def norm():
        return LayerNormParams(1 + 0.3 * rng.standard_normal(d), 0.3 * rng.standard_normal(d))
    return EncoderLayerParams(
        attention=attn, attention_norm=norm(),
        w_1=rng.standard_normal((d, d_ff)) / np.sqrt(d), b_1=0.3 * rng.standard_normal(d_ff),
        w_2=rng.standard_normal((d_ff, d)) / np.sqrt(d_ff), b_2=0.3 * rng.standard_normal(d),
        output_norm=norm())


def _encoder_variant(x, mask, layer, eps, *, post=True, exact_gelu=True, use_eps=True,
                     mask_keys=True, scale=True, biases=True):
    """A post-LN encoder layer with one learner's mistake switched on at a time (the
    defaults: attncore's :func:`~attncore.pretrained.encoder_layer`)."""
    from dataclasses import replace

    from ...multihead import multi_head_attention
    from ...pretrained.layers import gelu, gelu_tanh, layer_norm

    e = eps if use_eps else 1e-5
    a = layer.attention
    if not biases:
        a = replace(a, b_q=0 * a.b_q, b_k=0 * a.b_k, b_v=0 * a.b_v, b_o=0 * a.b_o)
    if not scale:
        a = replace(a, w_q=a.w_q * np.sqrt(a.d_head), b_q=a.b_q * np.sqrt(a.d_head))
    key_mask = mask[:, None, :] if mask_keys else None
    act = gelu if exact_gelu else gelu_tanh

    def attention(h):
        return multi_head_attention(a, h, mask=key_mask)

    def ffn(h):
        return act(h @ layer.w_1 + layer.b_1) @ layer.w_2 + layer.b_2

    n1, n2 = layer.attention_norm, layer.output_norm
    if post:
        h = layer_norm(x + attention(x), n1.gain, n1.shift, eps=e)
        return layer_norm(h + ffn(h), n2.gain, n2.shift, eps=e)
    h = x + attention(layer_norm(x, n1.gain, n1.shift, eps=e))
    return h + ffn(layer_norm(h, n2.gain, n2.shift, eps=e))


LAYER_MISTAKES = {
    "the LayerNorms before each sub-layer (pre-norm, GPT-2's order) instead of after each "
    "residual sum (post-norm)": {"post": False},
    "the tanh approximation of GELU instead of the exact x Phi(x)": {"exact_gelu": False},
    "LayerNorm's epsilon 1e-5 instead of the eps passed in": {"use_eps": False},
    "padding keys attended to": {"mask_keys": False},
    "scores not divided by sqrt(d_head)": {"scale": False},
    "the attention's biases left out": {"biases": False},
}


@functools.lru_cache(maxsize=1)
def _minilm_layer0_case():
    """(x0, mask, layer 0, eps) of MiniLM on LAYER_SENTENCES, float32, and attncore's
    output of layer 0 (computed once per process)."""
    from ...pretrained import MiniLM

    model = MiniLM.load()
    batch = model.tokenize(list(LAYER_SENTENCES))
    out = model.forward(batch)
    return (out.hidden_states[0], batch.attention_mask, model.params.layers[0],
            model.config.layer_norm_eps, out.hidden_states[1])


class EncoderLayerCheck:
    """The properties of :data:`LAYER_PROPERTIES`, on ``fn(x, mask, layer, eps)``."""

    SIGNATURE = "my_encoder_layer(x, mask, layer, eps)"

    def __init__(self, fn):
        self.fn = fn
        self.output_ok = True

    def _need_output(self):
        from ...testing.runner import Skip

        if not self.output_ok:
            raise Skip("runs once the output is an array of the right shape and dtype")

    @staticmethod
    def _where(case, dtype, what=""):
        lengths, d, heads, d_ff, seed = case
        return (f"x of shape ({len(lengths)}, {max(lengths)}, {d}), sequence lengths "
                f"{list(lengths)}, {heads} heads, d_ff {d_ff}, eps {LAYER_EPS:g}, {dtype}, "
                f"random weights, seed {seed}{what}")

    @staticmethod
    def _input(case, dtype=np.float64):
        lengths, d, heads, d_ff, seed = case
        n = max(lengths)
        x = np.random.default_rng(seed + 10).standard_normal((len(lengths), n, d))
        mask = np.arange(n)[None, :] < np.array(lengths)[:, None]
        layer = _random_encoder_layer(d, heads, d_ff, seed)
        if dtype != np.float64:
            layer = _layer_as(layer, dtype)
        return x.astype(dtype), mask, layer

    def _run(self, x, mask, layer, eps, where):
        from ...testing.runner import call, expect_array

        out = call(self.fn, (x.copy(), mask.copy(), layer, eps), where=where,
                   signature=self.SIGNATURE)
        return expect_array(out, name="output", shape=x.shape, dtype=str(x.dtype),
                            where=where)

    def output(self):
        try:
            for dtype in (np.float64, np.float32):
                x, mask, layer = self._input(LAYER_CASES[0], dtype)
                self._run(x, mask, layer, LAYER_EPS,
                          self._where(LAYER_CASES[0], np.dtype(dtype).name))
        except Exception:
            self.output_ok = False
            raise

    def padding_ignored(self):
        from ...testing.runner import Failure

        self._need_output()
        case = LAYER_CASES[0]
        x, mask, layer = self._input(case)
        y = x.copy()
        y[~mask] = 5.0 + x[~mask] ** 2
        where = self._where(case, "float64", ", then x changed at the padding positions")
        a = self._run(x, mask, layer, LAYER_EPS, where)
        b = self._run(y, mask, layer, LAYER_EPS, where)
        if np.abs(a[mask] - b[mask]).max() > 1e-12:
            raise Failure("real tokens' outputs moved when only padding positions "
                          "changed: no query may attend to a padding key", where)

    def random_layer(self):
        from ...testing.runner import Failure

        self._need_output()
        for case in LAYER_CASES:
            x, mask, layer = self._input(case)
            where = self._where(case, "float64")
            got = self._run(x, mask, layer, LAYER_EPS, where)[mask]

            def gap(**flags):
                return np.abs(got - _encoder_variant(x, mask, layer, LAYER_EPS,
                                                     **flags)[mask]).max()
            if gap() <= 1e-10:
                continue
            for mistake, flags in LAYER_MISTAKES.items():
                if gap(**flags) <= 1e-10:
                    raise Failure(f"the output is that of a layer with {mistake}", where)
            raise Failure("the output differs from attncore's layer by more than 1e-10",
                          where)

    def minilm_layer0(self):
        from ...testing.runner import Failure

        self._need_output()
        x0, mask, layer, eps, want = _minilm_layer0_case()
        where = (f"MiniLM's layer 0, float32, the sentences {list(LAYER_SENTENCES)} "
                 f"padded to {x0.shape[1]} tokens, eps {eps:g}")
        got = self._run(x0, mask, layer, eps, where)
        if not np.abs(got[mask] - want[mask]).max() <= 1e-5:
            raise Failure("the output differs from attncore's layer 0 by more than 1e-5",
                          where)


def _layer_as(layer, dtype):
    from dataclasses import fields, replace

    def conv(obj):
        return {f.name: getattr(obj, f.name).astype(dtype) for f in fields(obj)
                if isinstance(getattr(obj, f.name), np.ndarray)}
    return replace(layer, attention=replace(layer.attention, **conv(layer.attention)),
                   attention_norm=replace(layer.attention_norm, **conv(layer.attention_norm)),
                   output_norm=replace(layer.output_norm, **conv(layer.output_norm)),
                   **conv(layer))


def check_encoder_layer(fn):
    """Run :data:`LAYER_PROPERTIES` on ``fn(x, mask, layer, eps)``; returns a CheckReport."""
    from ...testing.runner import run_properties

    return run_properties("check_encoder_layer", fn, LAYER_PROPERTIES,
                          EncoderLayerCheck(fn))


@exercise("ex-inside-encoder-layer")
def encoder_layer_function(my_encoder_layer) -> Verdict:
    """The reader's post-LN encoder layer, property by property, then MiniLM's layer 0."""
    if not callable(my_encoder_layer):
        return Verdict(False, f"expected a function my_encoder_layer(x, mask, layer, eps), "
                              f"got {type(my_encoder_layer).__name__}")
    return report_verdict(check_encoder_layer(my_encoder_layer),
                          "Your layer computes MiniLM's: attention with its biases and the "
                          "padding mask, then add and normalise, twice.")
