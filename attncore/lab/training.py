"""A tiny attention-only transformer, a synthetic induction task, and a seeded CPU training loop.

The model exists to show *what attention heads learn*. It is the smallest network in which
two heads must co-operate across layers:

    h_0     = E[tokens] + P[:n]                          token + learned position embeddings
    h_l     = h_{l-1} + MHA_l(h_{l-1}), causal           l = 1 .. num_layers (attncore layers)
    logits  = h_L U                                      unembedding, (n, vocab_size)

No MLPs and no layer norm: every bit of computation between input and output is attention,
so the attention patterns are the whole story.

The task (:func:`induction_batch`) is *induction*: at a position holding token ``a``, predict
the token that followed the previous occurrence of ``a``. Each sequence holds one block of
distinct tokens that is immediately repeated, at a random offset and of a random length,
surrounded by distinct filler tokens, so a fixed positional offset cannot solve it:

    ... 7 3 | 5 14 9 12 | 5 14 9 12 | 20 1 ...        targets at the second block:
                          14  9 12  5                  the token after the earlier copy

One attention layer cannot do this (the key at the earlier copy's *next* position carries
that position's own token, not the one before it). Two layers can: a layer-1 head copies
each position's *previous* token into it, and a layer-2 head matches the current token
against that copied information and reads out the token found there (an "induction head").

Training always runs on the CPU, in float64, on one thread, from NumPy-seeded draws, even when
a GPU is present, so that a seed gives the same trained weights from one machine to the next
(up to the last bits of the CPU's floating-point kernels).

All arrays handed back to the caller are NumPy; tokens are ``int64``, weights ``float64``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._backend import shape_of
from ..kvcache import KVCache, decode_step
from ..multihead import MultiHeadParams, init_multihead, multi_head_attention
from .adam import Adam
from .profiling import one_torch_thread

IGNORE_INDEX = -100
"""Target value of positions that carry no label (the loss and the accuracy skip them)."""

_MHA_FIELDS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


# --------------------------------------------------------------------------------------------
# configuration and argument checks


@dataclass(frozen=True)
class InductionConfig:
    """Everything that fixes a training run; the same config gives the same model.

    Attributes
    ----------
    vocab_size : int
        Number of distinct tokens; must be at least ``seq_len - min_repeat`` (every token
        of a sequence is distinct except the repeated block).
    seq_len : int
        Tokens per sequence, ``n``.
    min_repeat : int
        Shortest length ``m`` of the repeated block (drawn uniformly in
        ``[min_repeat, max_repeat]``).
    max_repeat : int
        Longest length of the repeated block; ``2 * max_repeat <= seq_len``.
    d_model : int
        Width of the residual stream.
    num_heads : int
        Heads per attention layer (must divide ``d_model``).
    n_kv_heads : int or None
        Key/value heads per layer, a divisor of ``num_heads``; ``None`` (the default)
        means ``num_heads``, ordinary multi-head attention. Fewer give grouped-query
        attention, 1 multi-query attention (:func:`~attncore.init_multihead`).
    num_layers : int
        Attention layers (2 are needed for induction).
    batch_size : int
        Sequences per batch; every step draws a fresh batch.
    steps : int
        Optimizer steps (Adam, one batch per step).
    lr : float
        Peak learning rate.
    warmup_steps : int
        The learning rate rises linearly to ``lr`` over these first steps, then falls
        along a half cosine to zero at the last step (see :func:`learning_rate`).
    embed_std : float
        Standard deviation of the initial token and position embeddings.
    seed : int
        Seeds the initial weights and the data stream.
    """

    vocab_size: int = 24
    seq_len: int = 20
    min_repeat: int = 3
    max_repeat: int = 8
    d_model: int = 32
    num_heads: int = 2
    num_layers: int = 2
    batch_size: int = 32
    steps: int = 200
    lr: float = 3e-2
    warmup_steps: int = 20
    embed_std: float = 0.2
    seed: int = 0
    n_kv_heads: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "min_repeat", "max_repeat", "d_model",
                     "num_heads", "num_layers", "batch_size"):
            _check_positive_int(name, getattr(self, name))
        _check_nonnegative_int("steps", self.steps)
        _check_nonnegative_int("warmup_steps", self.warmup_steps)
        _check_nonnegative_int("seed", self.seed)
        _check_task(self.vocab_size, self.seq_len, self.min_repeat, self.max_repeat)
        if self.d_model % self.num_heads:
            raise ValueError(f"num_heads: expected a divisor of d_model={self.d_model}, "
                             f"got {self.num_heads}")
        if self.n_kv_heads is not None:
            _check_positive_int("n_kv_heads", self.n_kv_heads)
            if self.num_heads % self.n_kv_heads:
                raise ValueError(f"n_kv_heads: expected a divisor of num_heads="
                                 f"{self.num_heads}, got {self.n_kv_heads}")
        for name in ("lr", "embed_std"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: expected a finite positive number, got {value!r}")


def _check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")


def _check_nonnegative_int(name: str, value: Any) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")


def _check_task(vocab_size: int, seq_len: int, min_repeat: int, max_repeat: int) -> None:
    if min_repeat < 2:
        raise ValueError(f"min_repeat: expected at least 2 (a block of one token repeated "
                         f"would make the target the token itself), got {min_repeat}")
    if max_repeat < min_repeat:
        raise ValueError(f"max_repeat: expected at least min_repeat={min_repeat}, "
                         f"got {max_repeat}")
    if 2 * max_repeat > seq_len:
        raise ValueError(f"max_repeat: expected 2 * max_repeat <= seq_len={seq_len} (the block "
                         f"and its copy must fit), got max_repeat={max_repeat}")
    if vocab_size < seq_len - min_repeat:
        raise ValueError(f"vocab_size: expected at least seq_len - min_repeat = "
                         f"{seq_len - min_repeat} so that all non-repeated tokens are "
                         f"distinct, got {vocab_size}")


# --------------------------------------------------------------------------------------------
# data


def induction_batch(rng: np.random.Generator, batch_size: int, seq_len: int, vocab_size: int,
                    *, min_repeat: int = 3, max_repeat: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A batch of induction sequences and their targets.

    Each row is built from ``seq_len - m`` *distinct* tokens: a block ``a_1 .. a_m`` that
    appears twice in a row, starting at a random position ``p``, and filler tokens around it::

        tokens  = f_1 .. f_p  a_1 .. a_m  a_1 .. a_m  f_{p+1} .. f_{n-2m}
        targets = -100 ...    -100 ...    a_2 .. a_m a_1   -100 ...

    The target at a position holding token ``a`` is the token that followed the previous
    occurrence of ``a``; only the second copy of the block has a previous occurrence, every
    other position gets ``IGNORE_INDEX`` (-100).

    Parameters
    ----------
    rng : numpy.random.Generator, the only source of randomness (reproducible across machines)
    batch_size, seq_len, vocab_size : ints; ``vocab_size >= seq_len - min_repeat``
    min_repeat, max_repeat : bounds (inclusive) of the block length ``m``;
        ``2 <= min_repeat <= max_repeat`` and ``2 * max_repeat <= seq_len``

    Returns
    -------
    tokens : int64 array ``(batch_size, seq_len)`` in ``[0, vocab_size)``
    targets : int64 array ``(batch_size, seq_len)``, a token or ``IGNORE_INDEX``
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator "
                        f"(np.random.default_rng(seed)), got {type(rng).__name__}")
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len),
                        ("vocab_size", vocab_size), ("min_repeat", min_repeat),
                        ("max_repeat", max_repeat)):
        _check_positive_int(name, value)
    _check_task(vocab_size, seq_len, min_repeat, max_repeat)
    n = seq_len
    m = rng.integers(min_repeat, max_repeat + 1, size=(batch_size, 1))
    # p uniform in [0, n - 2m]: the block and its copy fit before the end
    p = np.floor(rng.random((batch_size, 1)) * (n - 2 * m + 1)).astype(np.int64)
    # a random permutation of the vocabulary per row: its first m entries are the block,
    # the next n - 2m the filler, so every token of a row is distinct except the repeat
    perm = np.argsort(rng.random((batch_size, vocab_size)), axis=1, kind="stable")
    t = np.arange(n)[None, :]
    index = np.where(t < p, m + t,                       # filler before the block
            np.where(t < p + m, t - p,                   # the block
            np.where(t < p + 2 * m, t - p - m,           # its copy
                     t - m)))                            # filler after (index m + t - 2m)
    tokens = np.take_along_axis(perm, index, axis=1).astype(np.int64)
    in_copy = (t >= p + m) & (t < p + 2 * m)
    # position t of the copy holds a_j, whose previous occurrence is t - m; target: t - m + 1
    source = np.clip(t - m + 1, 0, n - 1)
    targets = np.where(in_copy, np.take_along_axis(tokens, source, axis=1), IGNORE_INDEX)
    return tokens, targets.astype(np.int64)


def previous_occurrence(tokens: np.ndarray) -> np.ndarray:
    """For each position, the index of the previous occurrence of its token, or -1.

    ``tokens`` : int array ``(..., n)``. Returns an int64 array of the same shape. This is the
    ground truth that an induction head must discover: position ``t`` should attend to
    ``previous_occurrence(tokens)[t] + 1``.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim < 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens: expected an integer array (..., n), got dtype "
                         f"{tokens.dtype} and shape {tokens.shape}")
    n = tokens.shape[-1]
    same = tokens[..., :, None] == tokens[..., None, :]          # (..., n, n): t, s
    earlier = np.tril(np.ones((n, n), dtype=bool), k=-1)         # s < t
    hits = same & earlier
    last = n - 1 - np.argmax(hits[..., ::-1], axis=-1)           # largest such s
    return np.where(hits.any(axis=-1), last, -1).astype(np.int64)


# --------------------------------------------------------------------------------------------
# model


@dataclass
class AttentionOnlyModel:
    """An attention-only transformer whose weights are torch tensors that require grad.

    Attributes
    ----------
    tok_emb : ``(vocab_size, d_model)``   token embedding ``E``
    pos_emb : ``(seq_len, d_model)``      learned position embedding ``P``
    layers  : list of :class:`MultiHeadParams`, one per attention layer (torch tensors)
    unembed : ``(d_model, vocab_size)``   unembedding ``U``
    """

    tok_emb: Any
    pos_emb: Any
    layers: list[MultiHeadParams]
    unembed: Any
    config: InductionConfig = field(default_factory=InductionConfig)

    def parameters(self) -> list[Any]:
        """Every trainable tensor, in a fixed order."""
        out = [self.tok_emb, self.pos_emb, self.unembed]
        for layer in self.layers:
            out.extend(getattr(layer, n) for n in _MHA_FIELDS if getattr(layer, n) is not None)
        return out

    def num_parameters(self) -> int:
        return sum(int(p.numel()) for p in self.parameters())

    def forward(self, tokens: Any, *, return_weights: bool = False) -> Any:
        """Logits for every position.

        tokens : int64 tensor ``(batch, n)`` with ``n <= seq_len`` (or a NumPy array).
        Returns logits ``(batch, n, vocab_size)``; with ``return_weights`` also a list with
        one ``(batch, num_heads, n, n)`` tensor of attention weights per layer.
        """
        import torch

        tokens = torch.as_tensor(tokens)
        if tokens.ndim != 2 or tokens.dtype != torch.int64:
            raise ValueError(f"tokens: expected an int64 tensor (batch, n), got dtype "
                             f"{tokens.dtype} and shape {tuple(tokens.shape)}")
        n = int(tokens.shape[1])
        vocab, max_len = shape_of(self.tok_emb)[0], shape_of(self.pos_emb)[0]
        if n > max_len:
            raise ValueError(f"tokens: expected at most seq_len={max_len} positions, got {n}")
        if n and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
            raise ValueError(f"tokens: expected values in [0, {vocab}), got "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")
        h = self.tok_emb[tokens] + self.pos_emb[:n]
        weights = []
        for layer in self.layers:
            if return_weights:
                out, w = multi_head_attention(layer, h, causal=True, return_weights=True)
                weights.append(w)
            else:
                out = multi_head_attention(layer, h, causal=True)
            h = h + out
        logits = h @ self.unembed
        return (logits, weights) if return_weights else logits


def init_attention_only(config: InductionConfig) -> AttentionOnlyModel:
    """Seeded float64 CPU weights: the same ``config.seed`` gives the same numbers anywhere.

    Embeddings are ``N(0, embed_std^2)``: small, so that every layer's attention starts
    nearly uniform and its patterns are shaped by training rather than by the accidents of
    the initial draw (with unit-variance embeddings the induction circuit forms markedly
    later). The unembedding is ``N(0, 1/d_model)``, the attention layers Xavier-uniform via
    :func:`~attncore.init_multihead` (biases zero). Every draw comes from NumPy's
    ``default_rng``, never from torch's generator.
    """
    import torch

    c = config
    rng = np.random.default_rng(c.seed)

    def param(a: np.ndarray) -> Any:
        return torch.tensor(a, dtype=torch.float64).requires_grad_()

    tok_emb = param(rng.normal(0.0, c.embed_std, (c.vocab_size, c.d_model)))
    pos_emb = param(rng.normal(0.0, c.embed_std, (c.seq_len, c.d_model)))
    unembed = param(rng.normal(0.0, 1.0 / math.sqrt(c.d_model), (c.d_model, c.vocab_size)))
    layers = []
    for index in range(c.num_layers):
        layer_seed = int(rng.integers(0, 2**31 - 1)) + index
        mha = init_multihead(c.d_model, c.num_heads, n_kv_heads=c.n_kv_heads, seed=layer_seed,
                             dtype=torch.float64, backend="torch")
        for n in _MHA_FIELDS:
            getattr(mha, n).requires_grad_()
        layers.append(mha)
    return AttentionOnlyModel(tok_emb, pos_emb, layers, unembed, config=c)


# --------------------------------------------------------------------------------------------
# training and evaluation


def _loss(logits: Any, targets: Any) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


def learning_rate(config: InductionConfig, step: int) -> float:
    """The learning rate of training step ``step`` (0-based) under ``config``.

    A linear warm-up from ``lr / warmup_steps`` to ``lr`` over the first ``warmup_steps``
    steps, then a half cosine from ``lr`` down to zero at step ``steps``:

        lr * (step + 1) / warmup_steps                              step < warmup_steps
        lr * (1 + cos(pi * (step - warmup_steps) / (steps - warmup_steps))) / 2   otherwise

    Large steps early (once Adam's moment estimates have settled) move the model off the
    plateau where it only guesses; small steps late let it settle into the solution.
    """
    _check_nonnegative_int("step", step)
    c = config
    if step < c.warmup_steps:
        return c.lr * (step + 1) / c.warmup_steps
    progress = (step - c.warmup_steps) / max(1, c.steps - c.warmup_steps)
    return c.lr * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def train_induction(config: InductionConfig | None = None, **overrides: Any
                    ) -> tuple[AttentionOnlyModel, list[float]]:
    """Train an :class:`AttentionOnlyModel` on :func:`induction_batch` data.

    ``config`` (default :class:`InductionConfig()`) may be adjusted by keyword, e.g.
    ``train_induction(steps=50)``. Each step draws a fresh batch from
    ``np.random.default_rng(config.seed + 1)`` and takes one Adam step on the mean
    cross-entropy over labelled positions, at the rate :func:`learning_rate` gives. Runs
    on the CPU, float64, one thread (restored afterwards), whatever devices exist: a seed
    fixes the result.

    Returns
    -------
    model : the trained model (its tensors still require grad)
    losses : list of ``config.steps`` Python floats, the training loss at each step
    """
    import torch

    config = replace(config or InductionConfig(), **overrides)
    c = config
    with one_torch_thread():
        model = init_attention_only(c)
        data = np.random.default_rng(c.seed + 1)
        opt = Adam(model.parameters(), lr=c.lr)
        losses: list[float] = []
        for step in range(c.steps):
            opt.lr = learning_rate(c, step)
            tokens, targets = induction_batch(data, c.batch_size, c.seq_len, c.vocab_size,
                                              min_repeat=c.min_repeat, max_repeat=c.max_repeat)
            loss = _loss(model.forward(torch.from_numpy(tokens)), torch.from_numpy(targets))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return model, losses


def evaluate(model: AttentionOnlyModel, tokens: np.ndarray, targets: np.ndarray
             ) -> tuple[float, float]:
    """``(mean loss, accuracy)`` over the labelled positions of a batch.

    tokens, targets : int64 arrays ``(batch, n)`` as from :func:`induction_batch`.
    Accuracy is the fraction of positions with a target whose arg-max logit is that target.
    Raises ``ValueError`` if no position is labelled.
    """
    import torch

    tokens, targets = _check_pair(tokens, targets)
    with one_torch_thread(), torch.no_grad():
        logits = model.forward(torch.from_numpy(tokens))
        t = torch.from_numpy(targets)
        labelled = t != IGNORE_INDEX
        correct = (logits.argmax(dim=-1) == t) & labelled
        return float(_loss(logits, t)), int(correct.sum()) / int(labelled.sum())


def accuracy(model: AttentionOnlyModel, tokens: np.ndarray, targets: np.ndarray) -> float:
    """Fraction of labelled positions (target != -100) whose arg-max prediction is right."""
    return evaluate(model, tokens, targets)[1]


def _check_pair(tokens: Any, targets: Any) -> tuple[np.ndarray, np.ndarray]:
    tokens, targets = np.asarray(tokens), np.asarray(targets)
    for name, x in (("tokens", tokens), ("targets", targets)):
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise ValueError(f"{name}: expected an integer array (batch, n), got dtype "
                             f"{x.dtype} and shape {x.shape}")
    if tokens.shape != targets.shape:
        raise ValueError(f"tokens and targets: expected the same shape, got {tokens.shape} "
                         f"and {targets.shape}")
    if not (targets != IGNORE_INDEX).any():
        raise ValueError(f"targets: expected at least one labelled position (a value other "
                         f"than IGNORE_INDEX={IGNORE_INDEX}), got none")
    return tokens.astype(np.int64), targets.astype(np.int64)


def generate(model: AttentionOnlyModel, prompt: np.ndarray, steps: int, *,
             use_cache: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Greedy generation: extend ``prompt`` by ``steps`` tokens, each the arg-max of the
    logits at the last position.

    With ``use_cache`` every layer keeps a :class:`~attncore.KVCache`: the prompt goes
    through the layers in one step (its keys and values fill the caches), then each new
    token alone, through :func:`~attncore.decode_step`. Without it, the whole sequence so
    far is run through :meth:`AttentionOnlyModel.forward` at every step, recomputing every
    key and value. The two give the same tokens, and logits equal up to rounding.

    Parameters
    ----------
    model : AttentionOnlyModel
    prompt : int array ``(batch, n0)``, ``n0 >= 1``, tokens in ``[0, vocab_size)``
    steps : int, ``>= 0``; ``n0 + steps`` must not exceed the model's ``seq_len``

    Returns
    -------
    tokens : int64 array ``(batch, n0 + steps)``, the prompt followed by the new tokens
    logits : float64 array ``(batch, steps, vocab_size)``, the logits each new token was
        chosen from
    """
    import torch

    prompt = np.asarray(prompt)
    if prompt.ndim != 2 or prompt.shape[1] < 1 or not np.issubdtype(prompt.dtype, np.integer):
        raise ValueError(f"prompt: expected an integer array (batch, n0) with n0 >= 1, got "
                         f"dtype {prompt.dtype} and shape {prompt.shape}")
    _check_nonnegative_int("steps", steps)
    if not isinstance(use_cache, bool):
        raise TypeError(f"use_cache: expected True or False, got {use_cache!r}")
    batch, n0 = prompt.shape
    vocab, max_len = shape_of(model.tok_emb)[0], shape_of(model.pos_emb)[0]
    if prompt.size and (int(prompt.min()) < 0 or int(prompt.max()) >= vocab):
        # checked here, not left to indexing: a negative token would silently pick an
        # embedding from the end of the table on the cached path
        raise ValueError(f"prompt: expected tokens in [0, {vocab}), got "
                         f"[{int(prompt.min())}, {int(prompt.max())}]")
    if n0 + steps > max_len:
        raise ValueError(f"steps: expected n0 + steps <= seq_len={max_len} (the positions "
                         f"the model has embeddings for), got {n0} + {steps}")
    tokens = torch.from_numpy(prompt.astype(np.int64))
    chosen = []
    with one_torch_thread(), torch.no_grad():
        caches = [KVCache.for_layer(layer, n0 + steps, (batch,)) for layer in model.layers]
        new = tokens                                   # what the next step feeds in
        for _ in range(steps):
            if use_cache:
                start = tokens.shape[1] - new.shape[1]
                h = model.tok_emb[new] + model.pos_emb[start:tokens.shape[1]]
                for layer, cache in zip(model.layers, caches):
                    h = h + decode_step(layer, h, cache)
                logits = h[:, -1] @ model.unembed
            else:
                logits = model.forward(tokens)[:, -1]
            new = logits.argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, new], dim=1)
            chosen.append(logits)
    logits = torch.stack(chosen, dim=1).numpy() if chosen else np.zeros((batch, 0, vocab))
    return tokens.numpy(), logits


def head_attention(model: AttentionOnlyModel, tokens: np.ndarray) -> np.ndarray:
    """Attention weights of every head of every layer on one sequence.

    tokens : int array ``(n,)``, one example. Returns a float64 NumPy array
    ``(num_layers, num_heads, n, n)``: entry ``[l, h, i, j]`` is how much query position
    ``i`` of head ``h`` in layer ``l`` attends to key position ``j`` (rows sum to 1; zero
    above the diagonal, the layers being causal).
    """
    import torch

    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens: expected one integer sequence of shape (n,), got dtype "
                         f"{tokens.dtype} and shape {tokens.shape}")
    with one_torch_thread(), torch.no_grad():
        _, weights = model.forward(torch.from_numpy(tokens.astype(np.int64))[None],
                                   return_weights=True)
    return np.stack([w[0].numpy() for w in weights])


def head_scores(model: AttentionOnlyModel, tokens: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Previous-token and induction scores of every head, averaged over a batch.

    tokens : int array ``(batch, n)``; every row must repeat at least one token (as every
    row of :func:`induction_batch` does). One batched forward pass; the result equals
    averaging :func:`previous_token_score` and :func:`induction_score` of
    :func:`head_attention` over the rows.

    Returns
    -------
    previous, induction : float64 arrays ``(num_layers, num_heads)``
    """
    import torch

    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens: expected an integer array (batch, n), got dtype "
                         f"{tokens.dtype} and shape {tokens.shape}")
    prev = previous_occurrence(tokens)                               # (batch, n)
    has_twin = prev >= 0
    if not has_twin.any(axis=1).all():
        raise ValueError("tokens: expected every row to repeat at least one token, got a "
                         f"row without repeats (row {int(np.argmin(has_twin.any(axis=1)))})")
    with one_torch_thread(), torch.no_grad():
        _, weights = model.forward(torch.from_numpy(tokens.astype(np.int64)),
                                   return_weights=True)
    w = np.stack([x.numpy() for x in weights], axis=1)               # (batch, L, H, n, n)
    previous = previous_token_score(w).mean(axis=0)
    # weight that query t puts on key prev[t] + 1, for every query (0 where t has no twin)
    target = np.where(has_twin, prev + 1, 0)[:, None, None, :, None]
    on_target = np.take_along_axis(w, target, axis=-1)[..., 0]       # (batch, L, H, n)
    counts = has_twin.sum(axis=1)[:, None, None]
    per_row = (on_target * has_twin[:, None, None, :]).sum(axis=-1) / counts
    return previous, per_row.mean(axis=0)


def ablate_heads(model: AttentionOnlyModel, heads: Any) -> AttentionOnlyModel:
    """A copy of ``model`` in which the given heads write nothing.

    heads : iterable of ``(layer, head)`` pairs, 0-based.

    A layer's output is ``concat(head_1 .. head_H) W_O + b_O = sum_h head_h W_O[rows_h] + b_O``
    where ``rows_h`` is head h's block of ``d_head`` rows of ``W_O``; zeroing that block
    removes head h's contribution and leaves every other head untouched. The copy's tensors
    are detached (no grad); ``model`` is not modified.
    """
    import torch

    L, H = len(model.layers), model.config.num_heads
    chosen = []
    for pair in heads:
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(i, (int, np.integer)) for i in pair)
                or not (0 <= pair[0] < L and 0 <= pair[1] < H)):
            raise ValueError(f"heads: expected (layer, head) pairs with 0 <= layer < {L} and "
                             f"0 <= head < {H}, got {pair!r}")
        chosen.append((int(pair[0]), int(pair[1])))

    def copy(t: Any) -> Any:
        return None if t is None else t.detach().clone()

    layers = [MultiHeadParams(**{n: copy(getattr(layer, n)) for n in _MHA_FIELDS},
                              num_heads=layer.num_heads) for layer in model.layers]
    for layer, head in chosen:
        d = layers[layer].d_head
        with torch.no_grad():
            layers[layer].w_o[head * d:(head + 1) * d, :] = 0.0
    return AttentionOnlyModel(copy(model.tok_emb), copy(model.pos_emb), layers,
                              copy(model.unembed), config=model.config)


def previous_token_score(weights: np.ndarray) -> np.ndarray:
    """Mean attention from each position ``i >= 1`` to position ``i - 1``.

    weights : ``(..., n, n)`` attention weights. Returns ``(...)``; 1 means a perfect
    previous-token head, about ``1 / i`` on average a head that spreads its weight evenly.
    """
    weights = np.asarray(weights)
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        raise ValueError(f"weights: expected shape (..., n, n) with n >= 2, got {weights.shape}")
    return np.diagonal(weights, offset=-1, axis1=-2, axis2=-1).mean(axis=-1)


def induction_score(weights: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Mean attention from each position with an earlier copy of its token to the position
    just after that copy (where the answer sits).

    weights : ``(..., n, n)``; tokens : int ``(n,)``, the sequence the weights were computed
    on, with at least one repeated token. Returns ``(...)``; 1 means a perfect induction head.
    """
    weights, tokens = np.asarray(weights), np.asarray(tokens)
    if weights.ndim < 2 or tokens.ndim != 1 or weights.shape[-2:] != (len(tokens),) * 2:
        raise ValueError(f"weights and tokens: expected shapes (..., n, n) and (n,), got "
                         f"{weights.shape} and {tokens.shape}")
    prev = previous_occurrence(tokens)
    queries = np.flatnonzero(prev >= 0)
    if queries.size == 0:
        raise ValueError("tokens: expected at least one repeated token, got none")
    return weights[..., queries, prev[queries] + 1].mean(axis=-1)


__all__ = [
    "IGNORE_INDEX",
    "AttentionOnlyModel",
    "InductionConfig",
    "ablate_heads",
    "accuracy",
    "evaluate",
    "generate",
    "head_attention",
    "head_scores",
    "induction_batch",
    "induction_score",
    "init_attention_only",
    "learning_rate",
    "previous_occurrence",
    "previous_token_score",
    "train_induction",
]
