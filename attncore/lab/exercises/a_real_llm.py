"""Checkers for the exercises of the real-LLM chapter (SmolLM2-135M computed by attncore)."""

from __future__ import annotations

import functools
import math

import numpy as np

from . import Verdict, exercise, real_answer
from ._reports import report_verdict

# ex-real-llm-quantize: blocks of 32 weights, drawn like a trained matrix's (small, centred
# near zero, a few larger ones), quantized to Q4_1 and read back.
QUANT_BLOCKS, QUANT_SEED = 16, 13


def _q4_1_round_trip(blocks: np.ndarray) -> np.ndarray:
    """What a Q4_1 file stores for ``blocks`` ``(k, 32)``, read back: llama.cpp's own
    quantization and dequantization (``gguf.quants``) where the package is installed, the
    same arithmetic written out otherwise."""
    try:
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize, quantize

        raw = quantize(blocks.astype(np.float32), GGMLQuantizationType.Q4_1)
        return dequantize(raw, GGMLQuantizationType.Q4_1).reshape(blocks.shape)
    except ImportError:
        lo = blocks.min(axis=-1, keepdims=True).astype(np.float32)
        d = ((blocks.max(axis=-1, keepdims=True) - lo) / 15).astype(np.float32)
        inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
        q = np.clip(np.trunc((blocks - lo) * inv + np.float32(0.5)), 0, 15)
        return d.astype(np.float16).astype(np.float32) * q \
            + lo.astype(np.float16).astype(np.float32)


@exercise("ex-real-llm-quantize")
def quantize_block(my_q4_1) -> Verdict:
    """The reader's ``my_q4_1(block)``: 32 numbers in, the 32 numbers Q4_1 gives back."""
    if not callable(my_q4_1):
        return Verdict(False, f"expected a function my_q4_1(block), got "
                              f"{type(my_q4_1).__name__}")
    rng = np.random.default_rng(QUANT_SEED)
    blocks = (0.03 * rng.standard_t(4, size=(QUANT_BLOCKS, 32))).astype(np.float32)
    want = _q4_1_round_trip(blocks)
    for block, expected in zip(blocks, want):
        got = np.asarray(my_q4_1(block.copy()), dtype=np.float64)
        if got.shape != (32,):
            return Verdict(False, f"my_q4_1 returned shape {got.shape}; a block of 32 "
                                  f"weights gives back 32 numbers.")
        step = float(block.max() - block.min()) / 15
        worst = float(np.abs(got - expected).max())
        if worst > 0.05 * step:
            return Verdict(False, f"on one block your values differ from the format's by "
                                  f"up to {worst / step:.2f} of a quantization step. The "
                                  f"16 levels run from the block's minimum to its maximum, "
                                  f"and each weight goes to the nearest level.")
    return Verdict(True, "Your round trip is the format's: 16 levels spread from each "
                         "block's minimum to its maximum, every weight on the nearest one.")


# ex-real-llm-cache-crossover: one sequence's key/value cache in float16 against the bytes of
# every tensor in SmolLM2's file.
CACHE_BYTES_PER_NUMBER = 2


@functools.lru_cache(maxsize=1)
def _file_facts() -> tuple[int, int]:
    """(bytes of every tensor in the file, cache bytes per token in float16)."""
    from ...pretrained.gguf_file import read_llama_gguf

    file = read_llama_gguf()
    c = file.config
    weights = sum(t.nbytes for t in file.tensors.values())
    per_token = 2 * c.num_layers * c.n_kv_heads * c.d_head * CACHE_BYTES_PER_NUMBER
    return weights, per_token


@exercise("ex-real-llm-cache-crossover")
def cache_crossover(my_tokens) -> Verdict:
    """From how many tokens on one sequence's float16 cache outweighs the file's tensors."""
    tokens = real_answer("my_tokens", my_tokens)
    weights, per_token = _file_facts()
    want = math.ceil(weights / per_token)
    if abs(tokens - want) <= 1:
        return Verdict(True, "A few thousand tokens of one conversation hold as many bytes "
                             "as the whole 4-bit model: at long contexts, and with many "
                             "sequences at once, the cache is what fills memory.")
    if abs(tokens - want / 3) <= 2 or abs(tokens - 2 * want) <= 2:
        hint = ("count keys and values, in every layer, for the 3 key/value heads the "
                "cache stores (not the 9 query heads).")
    else:
        hint = ("divide the bytes of all the file's tensors by the cache's bytes per "
                "token: 2 (key and value) x layers x key/value heads x head width x 2 bytes.")
    return Verdict(False, hint)


# ex-real-llm-llama-block: the reader's Llama block, my_llama_block(x, block), checked on
# small random blocks against attncore's, then put into SmolLM2 in place of attncore's.
LLAMA_PROPERTIES = {
    "output": "returns a tensor of x's shape and dtype, with finite values (float64 and "
              "float32)",
    "residual_stream": "with W_O and W_down zero (both sub-layers write nothing), the "
                       "block returns x itself",
    "feed_forward_sublayer": "with W_O zero, x + SwiGLU(RMSNorm(x)) as attncore computes it",
    "attention_sublayer": "with W_down zero, x + attention(RMSNorm(x)) with RoPE, the "
                          "causal mask and grouped-query heads, as attncore computes it",
    "causal": "changing the last position's input changes no earlier output",
    "whole_block": "equal to attncore.transformer_block(block, x, causal=True) on fresh "
                   "random weights, to 1e-10 in float64 and 1e-5 in float32",
    "smollm2_logits": "put into SmolLM2 in place of attncore's block, the model's logits "
                      "on a short prompt are within 1e-4 of attncore's",
    "smollm2_chat": "and SmolLM2's greedy reply to a short question is the same text",
}
LLAMA_PROMPT = "The capital of France is"
LLAMA_QUESTION, LLAMA_REPLY_TOKENS = "What is the capital of France?", 8
# (num_heads, n_kv_heads, d_head, d_ff, n, seed): the smallest first
LLAMA_SHAPES = ((4, 2, 4, 24, 5, 0), (6, 3, 8, 40, 7, 1), (3, 3, 4, 16, 4, 2))


def _llama_variant(x, p, *, norm="rms", act="silu", pairing="half", grouping="block",
                   causal=True, scale=True, swap_gate=False):
    """A Llama block written out in torch, with one learner's mistake switched on at a
    time (the defaults are the right block, tested equal to attncore's)."""
    import torch

    from ...positions import rope

    def nrm(h, g):
        if norm == "layer":
            h = h - h.mean(-1, keepdim=True)
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + p.eps) * g

    a = p.attn
    H, Hkv, dh = a.num_heads, a.w_k.shape[-1] // a.d_head, a.d_head
    n = x.shape[-2]
    h = nrm(x, p.ln1_weight)
    q = (h @ a.w_q).reshape(n, H, dh).transpose(0, 1)
    k = (h @ a.w_k).reshape(n, Hkv, dh).transpose(0, 1)
    v = (h @ a.w_v).reshape(n, Hkv, dh).transpose(0, 1)
    if pairing == "half":
        q, k = rope(q, base=p.rope_base), rope(k, base=p.rope_base)
    else:                                   # neighbours (2i, 2i + 1), llama.cpp's pairing
        pos = torch.arange(n, dtype=torch.float64)
        w = p.rope_base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
        ang = pos[:, None] * w
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)

        def rot(t):
            e, o = t[..., 0::2], t[..., 1::2]
            return torch.stack([e * cos - o * sin, e * sin + o * cos], -1).flatten(-2)
        q, k = rot(q), rot(k)
    g = H // Hkv
    if grouping == "block":
        k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    else:                                   # query head i reads key/value head i % Hkv
        k, v = k.repeat(g, 1, 1), v.repeat(g, 1, 1)
    s = q @ k.transpose(-1, -2) / (math.sqrt(dh) if scale else 1.0)
    if causal:
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    out = (s.softmax(-1) @ v).transpose(0, 1).reshape(n, H * dh) @ a.w_o
    x = x + out
    h = nrm(x, p.ln2_weight)
    w_gate, w_up = (p.w_ff3, p.w_ff1) if swap_gate else (p.w_ff1, p.w_ff3)
    z = h @ w_gate
    z = torch.nn.functional.gelu(z) if act == "gelu" else z * torch.sigmoid(z)
    return x + (z * (h @ w_up)) @ p.w_ff2


LLAMA_MISTAKES = {
    "RMSNorm with the mean subtracted first (that is LayerNorm)": {"norm": "layer"},
    "GELU in the feed-forward layer instead of SiLU": {"act": "gelu"},
    "the gate and up projections swapped (SiLU on x W_up)": {"swap_gate": True},
    "RoPE pairing neighbouring features (2i, 2i+1); attncore's weights pair i with "
    "i + d_head/2": {"pairing": "interleaved"},
    "query head i reading key/value head i % n_kv_heads instead of "
    "i // (num_heads // n_kv_heads)": {"grouping": "modulo"},
    "no causal mask": {"causal": False},
    "scores not divided by sqrt(d_head)": {"scale": False},
}


def _random_llama_block(num_heads, n_kv_heads, d_head, d_ff, seed, dtype):
    """A small Llama block with random gains (so that a missing gain shows)."""
    from dataclasses import replace

    import torch

    from ... import init_transformer_block

    d = num_heads * d_head
    p = init_transformer_block(d, num_heads, d_ff, activation="swiglu", bias=False,
                               n_kv_heads=n_kv_heads, norm="rms", rope_base=100.0,
                               seed=seed, dtype=torch.float64, backend="torch")
    g = torch.Generator().manual_seed(seed)
    gains = [1 + 0.5 * torch.rand(d, generator=g, dtype=torch.float64) for _ in range(2)]
    p = replace(p, ln1_weight=gains[0], ln2_weight=gains[1])
    return p if dtype == torch.float64 else _block_to(p, dtype)


def _block_to(p, dtype):
    """The block ``p`` (torch) with every tensor in ``dtype``."""
    from dataclasses import fields, replace

    def conv(t):
        return None if t is None else t.to(dtype)
    attn = replace(p.attn, **{f.name: conv(getattr(p.attn, f.name))
                              for f in fields(p.attn) if hasattr(getattr(p.attn, f.name),
                                                                 "dtype")})
    return replace(p, attn=attn, **{f.name: conv(getattr(p, f.name)) for f in fields(p)
                                    if hasattr(getattr(p, f.name), "dtype")})


class LlamaBlockCheck:
    """The properties of :data:`LLAMA_PROPERTIES`, one method each, on ``fn(x, block)``."""

    SIGNATURE = "my_llama_block(x, block)"

    def __init__(self, fn):
        self.fn = fn
        self.core_ok = True            # the block's own properties hold: run the model
        self.output_ok = True          # it returns a tensor: the other properties apply

    def _need_output(self):
        from ...testing.runner import Skip

        if not self.output_ok:
            raise Skip("runs once the output is a tensor of the right shape and dtype")

    def _run(self, x, p, where):
        import torch

        from ...testing.runner import Failure, call, expect_array

        out = call(self.fn, (x.clone(), p), where=where, signature=self.SIGNATURE)
        if not isinstance(out, torch.Tensor):
            raise Failure(f"expected a torch tensor of shape {tuple(x.shape)}, got "
                          f"{type(out).__name__}", where)
        expect_array(out, name="output", shape=tuple(x.shape), dtype=str(x.dtype)[6:],
                     where=where)
        return out

    @staticmethod
    def _where(shape, dtype, what=""):
        h, hkv, dh, dff, n, seed = shape
        return (f"x of shape ({n}, {h * dh}), {h} query heads on {hkv} key/value heads of "
                f"width {dh}, d_ff {dff}, {dtype}, seed {seed}{what}")

    def _input(self, shape, dtype):
        import torch

        h, hkv, dh, dff, n, seed = shape
        p = _random_llama_block(h, hkv, dh, dff, seed, dtype)
        x = torch.randn(n, h * dh, generator=torch.Generator().manual_seed(seed + 10),
                        dtype=torch.float64).to(dtype)
        return x, p

    def _compare(self, got, want, x, p, tol, where, **zeroed):
        from ...testing.runner import Failure

        if (got - want).abs().max().item() <= tol:
            return
        for mistake, flags in LLAMA_MISTAKES.items():
            if (got - _llama_variant(x, p, **flags)).abs().max().item() <= tol:
                raise Failure(f"the output is that of a block with {mistake}", where)
        if (got - want + x).abs().max().item() <= tol:
            raise Failure("the output lacks the residual stream: return x plus what the "
                          "sub-layers write", where)
        raise Failure("the output differs from attncore's block by more than "
                      f"{tol:.0e}", where)

    def output(self):
        import torch

        try:
            for dtype in (torch.float64, torch.float32):
                x, p = self._input(LLAMA_SHAPES[0], dtype)
                self._run(x, p, self._where(LLAMA_SHAPES[0], str(dtype)[6:]))
        except Exception:
            self.output_ok = self.core_ok = False
            raise

    def residual_stream(self):
        self._need_output()
        from dataclasses import replace

        import torch

        from ...testing.runner import Failure

        x, p = self._input(LLAMA_SHAPES[0], torch.float64)
        p = replace(p, attn=replace(p.attn, w_o=0 * p.attn.w_o), w_ff2=0 * p.w_ff2)
        where = self._where(LLAMA_SHAPES[0], "float64", ", W_O and W_down zero")
        got = self._run(x, p, where)
        if (got - x).abs().max().item() > 1e-12:
            self.core_ok = False
            raise Failure("the block changes x although both sub-layers write zero: "
                          "each sub-layer's output is added to x", where)

    def _sublayer(self, zero):
        self._need_output()
        from dataclasses import replace

        import torch

        from ... import transformer_block

        for shape in LLAMA_SHAPES[:2]:
            x, p = self._input(shape, torch.float64)
            if zero == "w_o":
                p = replace(p, attn=replace(p.attn, w_o=0 * p.attn.w_o))
                what = ", W_O zero"
            else:
                p = replace(p, w_ff2=0 * p.w_ff2)
                what = ", W_down zero"
            where = self._where(shape, "float64", what)
            got = self._run(x, p, where)
            try:
                self._compare(got, transformer_block(p, x, causal=True), x, p, 1e-10, where)
            except Exception:
                self.core_ok = False
                raise

    def feed_forward_sublayer(self):
        self._sublayer("w_o")

    def attention_sublayer(self):
        self._sublayer("w_ff2")

    def causal(self):
        self._need_output()
        import torch

        from ...testing.runner import Failure

        shape = LLAMA_SHAPES[0]
        x, p = self._input(shape, torch.float64)
        y = x.clone()
        y[-1] += 1.0 + y[-1] ** 2          # not a constant: LayerNorm would remove it
        where = self._where(shape, "float64", ", then x[-1] changed")
        a, b = self._run(x, p, where), self._run(y, p, where)
        if (a[:-1] - b[:-1]).abs().max().item() > 1e-12:
            self.core_ok = False
            raise Failure("earlier positions' outputs moved when only the last position's "
                          "input changed: a query may only see keys at or before it", where)

    def whole_block(self):
        self._need_output()
        import torch

        from ... import transformer_block

        for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
            for shape in LLAMA_SHAPES:
                x, p = self._input(shape, dtype)
                where = self._where(shape, str(dtype)[6:])
                got = self._run(x, p, where)
                try:
                    self._compare(got, transformer_block(p, x, causal=True), x, p, tol,
                                  where)
                except Exception:
                    self.core_ok = False
                    raise

    def _model(self):
        from ...testing.runner import Skip

        if not self.core_ok:
            raise Skip("runs once the block's own properties hold")
        from ..real_llm import smollm2

        return smollm2()

    def smollm2_logits(self):
        from ...testing.runner import Failure
        from ..real_llm import logits_with_block

        model = self._model()
        ids = model.encode(LLAMA_PROMPT)
        where = f"SmolLM2 on the prompt {LLAMA_PROMPT!r} ({len(ids)} tokens)"
        try:
            got = logits_with_block(model, ids, self.fn)
        except Exception as err:
            self.core_ok = False
            raise Failure(f"running the model with your block raised "
                          f"{type(err).__name__}: {err}", where) from None
        gap = (got - model.logits(ids)).abs().max().item()
        if not gap <= 1e-4:
            self.core_ok = False
            raise Failure("the logits differ from attncore's by more than 1e-4", where)

    def smollm2_chat(self):
        from ...testing.runner import Failure
        from ..real_llm import logits_with_block

        model = self._model()
        prompt, reply = _reference_reply(LLAMA_QUESTION, LLAMA_REPLY_TOKENS)
        # One pass over the question and attncore's reply: greedy decoding with this block
        # writes the same reply exactly when every position chooses the next token of it
        # (by induction over the steps), so no token-by-token loop is needed.
        ids = np.concatenate([prompt, reply])
        choices = logits_with_block(model, ids, self.fn)[len(prompt) - 1:].argmax(-1)
        ended = len(reply) < LLAMA_REPLY_TOKENS
        want = list(reply) + ([model.eos_id] if ended else [])
        if choices[:len(want)].tolist() != want:
            raise Failure("the greedy reply differs from the one attncore's block gives",
                          f"SmolLM2, the question {LLAMA_QUESTION!r}, at most "
                          f"{LLAMA_REPLY_TOKENS} tokens")


@functools.lru_cache(maxsize=4)
def _reference_reply(question: str, n_new: int) -> tuple[np.ndarray, np.ndarray]:
    """(the chat's prompt ids, attncore's greedy reply ids without the end-of-turn token),
    computed once per process."""
    from ..real_llm import smollm2

    model = smollm2()
    prompt = model.chat_ids(question)
    out = model.generate(prompt, n_new)
    reply = np.asarray(out)[len(prompt):]
    return prompt, reply[reply != model.eos_id]


def check_llama_block(fn):
    """Run :data:`LLAMA_PROPERTIES` on ``fn(x, block)``; returns a CheckReport."""
    from ...testing.runner import run_properties

    return run_properties("check_llama_block", fn, LLAMA_PROPERTIES, LlamaBlockCheck(fn))


@exercise("ex-real-llm-llama-block")
def llama_block(my_llama_block) -> Verdict:
    """The reader's Llama block, property by property, then inside SmolLM2."""
    if not callable(my_llama_block):
        return Verdict(False, f"expected a function my_llama_block(x, block), got "
                              f"{type(my_llama_block).__name__}")
    return report_verdict(check_llama_block(my_llama_block),
                          "SmolLM2 runs on your block: the same logits and the same "
                          "reply as with attncore's.")
