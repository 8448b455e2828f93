"""The numbers of inference: the KV cache of real models, and why decoding waits for memory.

* :data:`PUBLISHED` -- the attention shapes of four published models (layers, query and
  key/value heads, head width, context, sliding window) and their nominal sizes
* :func:`kv_cache_bytes` -- ``2 * layers * n_kv_heads * d_head * tokens * bytes`` per
  sequence, and the same for a batch
* :func:`weight_bytes` -- the parameters' memory, for comparison
* :func:`attention_intensity` -- flops per byte of one attention step over a cache
* :func:`queries_per_read` -- a measurement: attention of ``m`` queries against the same
  keys and values, timed against one query

The sizes are the ones the models' papers publish (see the chapter's references); a
parameter count is the published one where the paper gives it (GPT-3's 175.0 billion),
otherwise the nominal size of the model's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .profiling import one_torch_thread, ratio_spread, rotated_rounds

__all__ = ["PUBLISHED", "ModelShape", "attention_intensity", "kv_cache_bytes",
           "queries_per_read", "weight_bytes"]


@dataclass(frozen=True)
class ModelShape:
    """What a decoder's KV cache depends on.

    Attributes
    ----------
    name : str
    layers : int
        Attention layers, each with its own cache.
    d_model : int
    heads : int
        Query heads per layer.
    kv_heads : int
        Key/value heads per layer (``heads`` for multi-head attention).
    d_head : int
        Width of one head (``d_model // heads`` in these models).
    parameters : float
        Number of parameters (published, or the nominal size of the name).
    context : int
        Context length the model was trained with.
    window : int or None
        Sliding-window width: each layer attends to at most this many positions, so its
        cache never holds more (``None``: every earlier position).
    """

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_head: int
    parameters: float
    context: int
    window: int | None = None

    def __post_init__(self) -> None:
        for field in ("layers", "d_model", "heads", "kv_heads", "d_head", "context"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field}: expected a positive integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads: expected a divisor of heads={self.heads}, got "
                             f"{self.kv_heads}")


PUBLISHED: dict[str, ModelShape] = {
    # Brown et al. (2020), Table 2.1: n_layers, d_model, n_heads, d_head, 175.0B, n_ctx 2048
    "GPT-3 175B": ModelShape("GPT-3 175B", 96, 12288, 96, 96, 128, 175.0e9, 2048),
    # Llama 2 (Touvron et al., 2023b) keeps LLaMA's architecture (Touvron et al., 2023a,
    # Table 2: 7B has 32 layers, 32 heads, d_model 4096), context 4096, no GQA at 7B
    "LLaMA-2 7B": ModelShape("LLaMA-2 7B", 32, 4096, 32, 32, 128, 7e9, 4096),
    # GQA (Touvron et al., 2023b); the released configuration: 80 layers, d_model 8192,
    # 64 query heads sharing 8 key/value heads; context 4096
    "LLaMA-2 70B": ModelShape("LLaMA-2 70B", 80, 8192, 64, 8, 128, 70e9, 4096),
    # Jiang et al. (2023), Table 1: 32 layers, dim 4096, 32 heads, 8 kv heads, head_dim 128,
    # window_size 4096, context_len 8192
    "Mistral 7B": ModelShape("Mistral 7B", 32, 4096, 32, 8, 128, 7e9, 8192, window=4096),
}


def _count(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def kv_cache_bytes(model: ModelShape, tokens: int, *, batch: int = 1,
                   bytes_per_number: int = 2, kv_heads: int | None = None) -> int:
    """Bytes of the KV cache of ``batch`` sequences of ``tokens`` positions each.

    ``2 * layers * kv_heads * d_head * positions * bytes_per_number * batch``: a key and a
    value of width ``d_head`` per key/value head, per layer, per position held. A model
    with a sliding window holds at most ``window`` positions. ``kv_heads`` overrides the
    model's (to ask what the same model would need with, say, every query head its own
    key/value head).
    """
    tokens = _count("tokens", tokens)
    batch = _count("batch", batch, 1)
    bytes_per_number = _count("bytes_per_number", bytes_per_number, 1)
    kv = model.kv_heads if kv_heads is None else _count("kv_heads", kv_heads, 1)
    if model.heads % kv:
        raise ValueError(f"kv_heads: expected a divisor of heads={model.heads}, got {kv}")
    held = tokens if model.window is None else min(tokens, model.window)
    return 2 * model.layers * kv * model.d_head * held * bytes_per_number * batch


def weight_bytes(model: ModelShape, *, bytes_per_number: int = 2) -> float:
    """Bytes of the model's parameters at ``bytes_per_number`` each (2: float16/bfloat16)."""
    return model.parameters * _count("bytes_per_number", bytes_per_number, 1)


def attention_intensity(heads: int, kv_heads: int, *, n_keys: int, d_head: int,
                        queries: int = 1, bytes_per_number: int = 2) -> float:
    """Flops per byte moved of attention of ``queries`` new positions over ``n_keys`` cached.

    Per layer and sequence: each of the ``heads`` query heads does ``2 d_head`` flops per key
    for its score and ``2 d_head`` for the weighted sum of values, ``4 * queries * n_keys *
    d_head * heads`` in all; the bytes are the cached keys and values, ``2 * n_keys * d_head *
    kv_heads`` numbers, plus the queries read and outputs written, ``2 * queries * d_head *
    heads``. For long caches this tends to ``2 * queries * (heads / kv_heads) /
    bytes_per_number``: 1 flop per byte for one query and multi-head attention in 16-bit
    numbers.
    """
    for name, value in (("heads", heads), ("kv_heads", kv_heads), ("d_head", d_head),
                        ("queries", queries), ("bytes_per_number", bytes_per_number)):
        _count(name, value, 1)
    _count("n_keys", n_keys)
    if heads % kv_heads:
        raise ValueError(f"kv_heads: expected a divisor of heads={heads}, got {kv_heads}")
    flops = 4 * queries * n_keys * d_head * heads
    numbers = 2 * n_keys * d_head * kv_heads + 2 * queries * d_head * heads
    return flops / (numbers * bytes_per_number)


def queries_per_read(n_keys: int = 65536, d_head: int = 128,
                     queries: tuple[int, ...] = (1, 4, 16, 64), *, rounds: int = 9,
                     ) -> list[dict[str, float]]:
    """Time attention of ``m`` queries against ``n_keys`` keys and values, against one query.

    One head, float32 torch tensors on one CPU thread: ``softmax(q k^T / sqrt(d)) v`` for
    ``q`` of ``m`` rows and the same ``k``, ``v`` (``n_keys * d_head`` numbers each, several
    times a CPU's caches at the defaults). The arithmetic grows ``m`` times; if the time
    grows far less, the one-query step was waiting for the keys and values to arrive from
    memory, not for arithmetic. Each of ``rounds`` (at least 9) rounds times every ``m`` in
    a rotating order; each round gives the ratios ``time(m) / time(1)``.

    Returns one dict per ``m``: ``queries``, ``ratio`` (median of the per-round ratios),
    ``ratio_q1`` and ``ratio_q3`` (their quartiles), and ``per_query`` = ``ratio / m``, the
    time per query relative to the one-query step.
    """
    import torch

    _count("rounds", rounds, 9)                        # enough rounds for quartiles
    _count("n_keys", n_keys, 1)
    _count("d_head", d_head, 1)
    for m in queries:
        _count("queries", m, 1)
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(n_keys, d_head, generator=gen)
    v = torch.randn(n_keys, d_head, generator=gen)
    scale = 1.0 / math.sqrt(d_head)

    def step(m: int):
        q = torch.randn(m, d_head, generator=gen)
        return lambda: torch.softmax((q * scale) @ k.T, dim=-1) @ v

    fns = {str(m): step(m) for m in dict.fromkeys((1, *queries))}
    with one_torch_thread():
        times = rotated_rounds(fns, rounds=rounds)
    out = []
    for m in queries:
        spread = ratio_spread(times, str(m), "1")
        out.append({"queries": m, "ratio": spread["median"], "ratio_q1": spread["q1"],
                    "ratio_q3": spread["q3"], "per_query": spread["median"] / m})
    return out
