"""Checkers for the exercises of chapter 11, the whole transformer (the capstone).

Each checker recomputes what it compares with: the parameters from a block that
:func:`attncore.init_transformer_block` builds, the flops from the products a block
computes, the work of generation by walking through the steps. Hints point at the method,
never at the number.
"""

from __future__ import annotations

import numpy as np

from ...transformer import init_transformer_block
from . import Verdict, exercise, real_answer
from ._reports import report_verdict

# ex-capstone-gpt2-parameters: GPT-2 small's sizes (a tied head, learned positions)
GPT2_VOCAB, GPT2_MAX_LEN, GPT2_D, GPT2_HEADS, GPT2_D_FF, GPT2_LAYERS = \
    50257, 1024, 768, 12, 3072, 12

# ex-capstone-crossover: a block of GPT-2 small's widths
CROSS_D_MODEL, CROSS_D_FF = 768, 3072

# ex-capstone-cache-work: a prompt, new tokens, blocks
WORK_PROMPT, WORK_NEW, WORK_BLOCKS = 28, 100, 2


def _whole(name: str, value) -> int:
    number = real_answer(name, value)
    if not number.is_integer():
        raise ValueError(f"{name} should be a whole number, got {value}")
    return int(number)


@exercise("ex-capstone-gpt2-parameters")
def gpt2_parameters(parameters) -> Verdict:
    """The parameters of a language model of GPT-2 small's sizes, built as this chapter's
    model is (blocks with biases, a final LayerNorm, the head tied to the embedding)."""
    got = _whole("my_parameters", parameters)
    d = GPT2_D
    block = init_transformer_block(d, GPT2_HEADS, GPT2_D_FF, dtype="float32")
    embeddings = GPT2_VOCAB * d + GPT2_MAX_LEN * d
    want = GPT2_LAYERS * block.num_parameters() + embeddings + 2 * d
    if got == want:
        return Verdict(True, "About 124 million: nearly a third of them is the token "
                             "embedding, which the tied head reuses.")
    if got == want + GPT2_VOCAB * d or got == want + GPT2_VOCAB * d + GPT2_VOCAB:
        return Verdict(False, "the head is tied: its weights are the embedding's, counted "
                              "once.")
    if got == want - GPT2_MAX_LEN * d:
        return Verdict(False, "the learned positions are parameters too.")
    if got in (want - 2 * d, want - 2 * d * (GPT2_LAYERS + 1), want - 4 * d * GPT2_LAYERS):
        return Verdict(False, "count every LayerNorm: two per block and the final one, "
                              "each with a gain and a shift.")
    return Verdict(False, "one block's parameters times the blocks, plus the token and "
                          "position embeddings, plus the final LayerNorm.")


def _block_flops(n: int, d: int, d_ff: int) -> tuple[int, int]:
    """(attention products, everything else) of a block's forward pass on n tokens, in
    flops (2 per multiply-add), as torch's FlopCounterMode counts matrix products."""
    scores_and_values = 2 * (2 * n * n * d)
    rest = 2 * n * d * 4 * d + 2 * (2 * n * d * d_ff)
    return scores_and_values, rest


@exercise("ex-capstone-crossover")
def crossover(n) -> Verdict:
    """The sequence length at which a block's n^2 products cost as much as the rest."""
    got = _whole("my_n", n)
    lo, hi = 1, 1
    while _block_flops(hi, CROSS_D_MODEL, CROSS_D_FF)[0] < \
            _block_flops(hi, CROSS_D_MODEL, CROSS_D_FF)[1]:
        lo, hi = hi, 2 * hi
    while lo < hi:                       # the smallest n where attention's products catch up
        mid = (lo + hi) // 2
        a, r = _block_flops(mid, CROSS_D_MODEL, CROSS_D_FF)
        lo, hi = (mid + 1, hi) if a < r else (lo, mid)
    if got == lo:
        return Verdict(True, "Below that length the projections and the feed-forward "
                             "layer dominate a block's cost, above it the n^2 products.")
    a, r = _block_flops(got, CROSS_D_MODEL, CROSS_D_FF) if got > 0 else (0, 1)
    if got > 0 and 2 * a == r:
        return Verdict(False, "both attention products grow as n^2: Q K^T and the weights "
                              "times V.")
    return Verdict(False, "write both costs as functions of n, set them equal and divide "
                          "by n.")


@exercise("ex-capstone-cache-work")
def cache_work(recomputed, cached) -> Verdict:
    """Key/value projections (one per position and block) of generating with and without
    the cache."""
    got = (_whole("my_recomputed", recomputed), _whole("my_cached", cached))
    recompute = cache = 0
    fed = WORK_PROMPT                      # positions the next step runs through the blocks
    length = WORK_PROMPT
    for _ in range(WORK_NEW):
        recompute += length * WORK_BLOCKS  # the whole prefix, every step
        cache += fed * WORK_BLOCKS         # only the positions not yet in the cache
        length += 1
        fed = 1
    want = (recompute, cache)
    details = (f"recomputed: {'right' if got[0] == want[0] else 'not yet'}",
               f"cached: {'right' if got[1] == want[1] else 'not yet'}")
    if got == want:
        return Verdict(True, "The cache turns a sum that grows as the square of the "
                             "length into one that grows linearly.", details)
    if got[1] == want[1] + WORK_BLOCKS or got[0] == want[0] + WORK_BLOCKS * (
            WORK_PROMPT + WORK_NEW):
        return Verdict(False, "the last token is sampled but never fed back in.", details)
    if got[0] * WORK_BLOCKS == want[0] or got[1] * WORK_BLOCKS == want[1]:
        return Verdict(False, "every block has its own keys and values.", details)
    return Verdict(False, "walk through the steps: which positions go through the blocks "
                          "at each one?", details)


# ex-capstone-block: the reader's pre-norm block, my_block(x, params), NumPy in and out,
# checked against attncore.transformer_block on small blocks with random gains and biases.
BLOCK_PROPERTIES = {
    "output": "returns a NumPy array of x's shape and dtype, with finite values (float64 "
              "and float32)",
    "residual_stream": "with W_O, b_O, W_2 and b_2 zero (both sub-layers write nothing), "
                       "the block returns x itself: the stream is never normalised",
    "causal": "changing the last position's input changes no earlier output",
    "whole_block": "equal to attncore.transformer_block(params, x, causal=True) on fresh "
                   "random weights, to 1e-10 in float64 and 1e-5 in float32",
}
# (d_model, num_heads, d_ff, n, seed): the smallest first
BLOCK_SHAPES = ((8, 2, 16, 5, 0), (12, 3, 20, 6, 1), (16, 4, 32, 7, 2))


def _gpt2_variant(x, p, *, norm_first=True, causal=True, activation="gelu",
                  second_norm="ln2", affine=True):
    """A GPT-2 block from attncore's pieces, with one learner's mistake switched on at a
    time (the defaults are the right pre-norm block)."""
    from ...layers import gelu_tanh, layer_norm
    from ...multihead import multi_head_attention
    from ...transformer import feed_forward

    def ln(h, which):
        w, b = ((p.ln1_weight, p.ln1_bias) if which == "ln1" else (p.ln2_weight, p.ln2_bias))
        return layer_norm(h, w if affine else None, b if affine else None, eps=p.eps)

    def attention(h):
        return multi_head_attention(p.attn, h, causal=causal)

    def ffn(h):
        if activation == "gelu_tanh":
            return gelu_tanh(h @ p.w_ff1 + p.b_ff1) @ p.w_ff2 + p.b_ff2
        return feed_forward(h, p.w_ff1, p.b_ff1, p.w_ff2, p.b_ff2, activation=activation)

    if norm_first:
        x = x + attention(ln(x, "ln1"))
        return x + ffn(ln(x, second_norm))
    x = ln(x + attention(x), "ln1")
    return ln(x + ffn(x), second_norm)


BLOCK_MISTAKES = {
    "the LayerNorms after the residual sums (post-norm) instead of before each sub-layer "
    "(pre-norm)": {"norm_first": False},
    "no causal mask": {"causal": False},
    "ReLU instead of the exact GELU": {"activation": "relu"},
    "the tanh approximation of GELU instead of the exact one": {"activation": "gelu_tanh"},
    "the first LayerNorm's gain and shift before the feed-forward layer too": {
        "second_norm": "ln1"},
    "LayerNorms without their gain and shift": {"affine": False},
}


def _random_gpt2_block(d, heads, d_ff, seed, dtype):
    """A small GPT-2 block with random gains, shifts and biases (attncore's init sets them
    to 1 and 0, where a missing one would not show)."""
    from dataclasses import replace

    import numpy as np

    p = init_transformer_block(d, heads, d_ff, seed=seed)
    rng = np.random.default_rng(seed + 100)

    def near(a, centre):
        return centre + 0.3 * rng.standard_normal(a.shape)
    attn = replace(p.attn, **{k: near(getattr(p.attn, k), 0.0)
                              for k in ("b_q", "b_k", "b_v", "b_o")})
    p = replace(p, attn=attn, ln1_weight=near(p.ln1_weight, 1.0),
                ln1_bias=near(p.ln1_bias, 0.0), ln2_weight=near(p.ln2_weight, 1.0),
                ln2_bias=near(p.ln2_bias, 0.0), b_ff1=near(p.b_ff1, 0.0),
                b_ff2=near(p.b_ff2, 0.0))
    return p if dtype == np.float64 else _numpy_block_as(p, dtype)


def _numpy_block_as(p, dtype):
    from dataclasses import fields, replace

    import numpy as np

    def conv(obj):
        return {f.name: getattr(obj, f.name).astype(dtype) for f in fields(obj)
                if isinstance(getattr(obj, f.name), np.ndarray)}
    return replace(p, attn=replace(p.attn, **conv(p.attn)), **conv(p))


def _input_values():
    """The smallest input of :data:`BLOCK_SHAPES` in float64, ``(x, params)``."""
    return BlockCheck._input(BLOCK_SHAPES[0], np.float64)


class BlockCheck:
    """The properties of :data:`BLOCK_PROPERTIES`, one method each, on ``fn(x, params)``."""

    SIGNATURE = "my_block(x, params)"

    def __init__(self, fn):
        self.fn = fn
        self.output_ok = True

    def _need_output(self):
        from ...testing.runner import Skip

        if not self.output_ok:
            raise Skip("runs once the output is an array of the right shape and dtype")

    @staticmethod
    def _where(shape, dtype, what=""):
        d, h, dff, n, seed = shape
        return (f"x of shape ({n}, {d}), {h} heads, d_ff {dff}, {dtype}, random gains "
                f"and biases, seed {seed}{what}")

    @staticmethod
    def _input(shape, dtype):
        import numpy as np

        d, h, dff, n, seed = shape
        x = np.random.default_rng(seed + 10).standard_normal((n, d)).astype(dtype)
        return x, _random_gpt2_block(d, h, dff, seed, dtype)

    def _run(self, x, p, where):
        from ...testing.runner import call, expect_array

        out = call(self.fn, (x.copy(), p), where=where, signature=self.SIGNATURE)
        return expect_array(out, name="output", shape=x.shape, dtype=str(x.dtype),
                            where=where)

    def output(self):
        import numpy as np

        try:
            for dtype in (np.float64, np.float32):
                x, p = self._input(BLOCK_SHAPES[0], dtype)
                self._run(x, p, self._where(BLOCK_SHAPES[0], np.dtype(dtype).name))
        except Exception:
            self.output_ok = False
            raise

    def residual_stream(self):
        from dataclasses import replace

        import numpy as np

        from ...layers import layer_norm
        from ...testing.runner import Failure

        self._need_output()
        x, p = self._input(BLOCK_SHAPES[0], np.float64)
        p = replace(p, attn=replace(p.attn, w_o=0 * p.attn.w_o, b_o=0 * p.attn.b_o),
                    w_ff2=0 * p.w_ff2, b_ff2=0 * p.b_ff2)
        where = self._where(BLOCK_SHAPES[0], "float64", ", W_O, b_O, W_2, b_2 zero")
        got = self._run(x, p, where)
        if np.abs(got - x).max() <= 1e-12:
            return
        twice = layer_norm(layer_norm(x, p.ln1_weight, p.ln1_bias, eps=p.eps),
                           p.ln2_weight, p.ln2_bias, eps=p.eps)
        if np.abs(got - twice).max() <= 1e-10:
            raise Failure("the stream itself is normalised after each sum (post-norm); "
                          "this block normalises only what each sub-layer reads "
                          "(pre-norm)", where)
        raise Failure("the block changes x although both sub-layers write zero: each "
                      "sub-layer's output is added to x", where)

    def causal(self):
        import numpy as np

        from ...testing.runner import Failure

        self._need_output()
        x, p = self._input(BLOCK_SHAPES[0], np.float64)
        y = x.copy()
        y[-1] += 1.0 + y[-1] ** 2          # not a constant: LayerNorm would remove it
        where = self._where(BLOCK_SHAPES[0], "float64", ", then x[-1] changed")
        a, b = self._run(x, p, where), self._run(y, p, where)
        if np.abs(a[:-1] - b[:-1]).max() > 1e-12:
            raise Failure("earlier positions' outputs moved when only the last position's "
                          "input changed: a query may only see keys at or before it", where)

    def whole_block(self):
        import numpy as np

        from ...testing.runner import Failure
        from ...transformer import transformer_block

        self._need_output()
        for dtype, tol in ((np.float64, 1e-10), (np.float32, 1e-5)):
            for shape in BLOCK_SHAPES:
                x, p = self._input(shape, dtype)
                where = self._where(shape, np.dtype(dtype).name)
                got = self._run(x, p, where)
                if np.abs(got - transformer_block(p, x, causal=True)).max() <= tol:
                    continue
                for mistake, flags in BLOCK_MISTAKES.items():
                    if np.abs(got - _gpt2_variant(x, p, **flags)).max() <= tol:
                        raise Failure(f"the output is that of a block with {mistake}", where)
                raise Failure(f"the output differs from attncore's block by more than "
                              f"{tol:.0e}", where)


def check_block(fn):
    """Run :data:`BLOCK_PROPERTIES` on ``fn(x, params)``; returns a CheckReport."""
    from ...testing.runner import run_properties

    return run_properties("check_block", fn, BLOCK_PROPERTIES, BlockCheck(fn))


@exercise("ex-capstone-block")
def block(my_block) -> Verdict:
    """The reader's pre-norm causal block, property by property."""
    if not callable(my_block):
        return Verdict(False, f"expected a function my_block(x, params), got "
                              f"{type(my_block).__name__}")
    return report_verdict(check_block(my_block),
                          "Your block is attncore's: two residual additions, each "
                          "sub-layer reading a LayerNormed copy of the stream.")


# ex-capstone-accumulate: one training step on a batch split into micro-batches,
# my_train_step(model, opt, x, y, micro_batches), checked against one step on the whole
# batch, on a tiny language model with plain gradient descent (whose step, unlike Adam's,
# shows the size of the gradient).
STEP_PROPERTIES = {
    "returns_loss": "returns the whole batch's mean cross-entropy before the step, as a "
                    "number, to 1e-12",
    "one_step": "the weights afterwards are those of one step on the whole batch, to 1e-12, "
                "also when gradients of an earlier step are still stored",
    "lowers_loss": "ten calls on a fixed batch lower its loss",
}
# (batch, n, micro_batches, seed): vocabulary 11, d = 8, 2 heads, d_ff 16, one block
STEP_CASES = ((4, 6, 2, 0), (6, 5, 3, 1), (4, 6, 4, 2))
STEP_VOCAB, STEP_LR = 11, 0.5


def _tiny_lm(seed):
    import torch

    from ...language_model import init_language_model

    model = init_language_model(STEP_VOCAB, 8, 2, 16, 1, 8, seed=seed,
                                dtype=torch.float64, backend="torch")
    for t in model.tensors():
        t.requires_grad_()
        t.grad = torch.full_like(t, 0.25)      # left over from an earlier step
    return model


def _batch(batch, n, seed):
    import torch

    g = torch.Generator().manual_seed(seed + 20)
    ids = torch.randint(0, STEP_VOCAB, (batch, n + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def _mean_loss(model, x, y):
    import torch.nn.functional as F

    from ...language_model import lm_logits

    return F.cross_entropy(lm_logits(model, x).reshape(-1, STEP_VOCAB), y.reshape(-1))


def _reference_step(model, opt, x, y, k, *, zero_first=True, zero_each=False,
                    scale=True, step_each=False):
    """One step on micro-batches, with one learner's mistake switched on at a time (the
    defaults: the right accumulation, equal to one step on the whole batch)."""
    if zero_first:
        opt.zero_grad()
    for xs, ys in zip(x.chunk(k), y.chunk(k)):
        if zero_each:
            opt.zero_grad()
        loss = _mean_loss(model, xs, ys)
        (loss / k if scale else loss).backward()
        if step_each:
            opt.step()
    if not step_each:
        opt.step()


STEP_MISTAKES = {
    "no zero_grad before the micro-batches (the earlier step's gradients are added in)": {
        "zero_first": False},
    "zero_grad before every micro-batch (only the last one's gradient is kept)": {
        "zero_each": True},
    "each micro-batch's loss not divided by the number of micro-batches (the gradient of "
    "their sum, not of the batch's mean)": {"scale": False},
    "a step after every micro-batch instead of one at the end": {"step_each": True},
}


class TrainStepCheck:
    """The properties of :data:`STEP_PROPERTIES` on ``fn(model, opt, x, y, micro_batches)``."""

    SIGNATURE = "my_train_step(model, opt, x, y, micro_batches)"

    def __init__(self, fn):
        self.fn = fn
        self.calls_ok = True           # it can be called: the other properties apply

    def _need_calls(self):
        from ...testing.runner import Skip

        if not self.calls_ok:
            raise Skip("runs once the function can be called as the check calls it")

    @staticmethod
    def _where(case):
        batch, n, k, seed = case
        return (f"a one-block model (vocabulary {STEP_VOCAB}, d = 8), x and y of shape "
                f"({batch}, {n}), micro_batches={k}, torch.optim.SGD(lr={STEP_LR}), "
                f"seed {seed}")

    def _call(self, case):
        import torch

        from ...testing.runner import Failure, call

        batch, n, k, seed = case
        model = _tiny_lm(seed)
        opt = torch.optim.SGD(model.tensors(), lr=STEP_LR)
        x, y = _batch(batch, n, seed)
        try:
            out = call(self.fn, (model, opt, x.clone(), y.clone(), k),
                       where=self._where(case), signature=self.SIGNATURE)
        except Failure:
            self.calls_ok = False
            raise
        return model, out

    def returns_loss(self):
        import numbers

        import torch

        from ...testing.runner import Failure

        for case in STEP_CASES:
            batch, n, k, seed = case
            x, y = _batch(batch, n, seed)
            with torch.no_grad():
                want = _mean_loss(_tiny_lm(seed), x, y).item()
            _, out = self._call(case)
            if isinstance(out, torch.Tensor) and out.numel() == 1:
                out = out.item()
            if isinstance(out, bool) or not isinstance(out, numbers.Real):
                raise Failure(f"expected the loss as a number, got {type(out).__name__}",
                              self._where(case))
            if not abs(float(out) - want) <= 1e-12:
                raise Failure("the number returned is not the whole batch's mean "
                              "cross-entropy before the step", self._where(case))

    def one_step(self):
        import torch

        from ...testing.runner import Failure

        self._need_calls()
        for case in STEP_CASES:
            batch, n, k, seed = case
            model, _ = self._call(case)
            got = [t.detach() for t in model.tensors()]
            x, y = _batch(batch, n, seed)

            def after(**flags):
                ref = _tiny_lm(seed)
                opt = torch.optim.SGD(ref.tensors(), lr=STEP_LR)
                _reference_step(ref, opt, x, y, k, **flags)
                return [t.detach() for t in ref.tensors()]

            def gap(ws):
                return max((a - b).abs().max().item() for a, b in zip(got, ws))
            if gap(after()) <= 1e-12:
                continue
            for mistake, flags in STEP_MISTAKES.items():
                if gap(after(**flags)) <= 1e-12:
                    raise Failure(f"the weights are those of a step with {mistake}",
                                  self._where(case))
            raise Failure("the weights differ from those of one step on the whole batch",
                          self._where(case))

    def lowers_loss(self):
        import torch

        from ...testing.runner import Failure, call

        self._need_calls()
        case = STEP_CASES[0]
        batch, n, k, seed = case
        model = _tiny_lm(seed)
        opt = torch.optim.SGD(model.tensors(), lr=STEP_LR)
        x, y = _batch(batch, n, seed)
        with torch.no_grad():
            before = _mean_loss(model, x, y).item()
        for _ in range(10):
            call(self.fn, (model, opt, x, y, k), where=self._where(case),
                 signature=self.SIGNATURE)
        with torch.no_grad():
            after = _mean_loss(model, x, y).item()
        if not after < before:
            raise Failure("the loss on the batch did not go down in ten calls",
                          self._where(case) + ", ten calls")


def check_train_step(fn):
    """Run :data:`STEP_PROPERTIES` on ``fn(model, opt, x, y, micro_batches)``."""
    from ...testing.runner import run_properties

    return run_properties("check_train_step", fn, STEP_PROPERTIES, TrainStepCheck(fn))


@exercise("ex-capstone-accumulate")
def accumulate(my_train_step) -> Verdict:
    """The reader's training step over micro-batches, property by property."""
    if not callable(my_train_step):
        return Verdict(False, f"expected a function my_train_step(model, opt, x, y, "
                              f"micro_batches), got {type(my_train_step).__name__}")
    return report_verdict(check_train_step(my_train_step),
                          "Your micro-batches add up to the whole batch's gradient, and "
                          "one step uses it.")
