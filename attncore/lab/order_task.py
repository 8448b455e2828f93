"""A task that needs order, and a one-layer attention model with a choice of positions.

The task (:func:`lookback_batch`): every sequence holds ``n`` distinct tokens in random order,
and the target at position ``i >= lag`` is the token ``lag`` places back::

    tokens   5 17  2  9 11  0 ...
    targets  .  .  5 17  2  9 ...          (lag = 2; "." = no label, IGNORE_INDEX)

Nothing about the tokens themselves says which one came ``lag`` places earlier: only their
order does. A self-attention model without positions (and without a causal mask) is
permutation-equivariant, so its prediction at position ``i`` can depend only on the token
there and on the *set* of tokens; on the look-back task it cannot beat ``1 / (n - 1)`` on
average.

The model (:class:`OrderModel`) is the smallest that can do the task once it knows positions::

    h_0    = E[tokens] (+ positions)          token embedding, plus "learned" P[:n] or
                                              "sinusoidal" PE[:n]; nothing for "none"/"rope"
    h_l    = h_{l-1} + MHA_l(h_{l-1})         l = 1 .. num_layers; with "rope" the queries
                                              and keys of every head are rotated
    logits = h_L U

Training runs like :mod:`attncore.lab.training`: on the CPU, in float64, on one thread, from
NumPy-seeded draws, so that a seed gives the same model on any machine. Evaluate with
:func:`attncore.lab.training.evaluate`, which works with any model that has a ``forward``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from .._backend import shape_of
from ..multihead import MultiHeadParams, init_multihead, multi_head_attention
from ..positions import rope_multi_head_attention, sinusoidal_positions
from .adam import Adam
from .profiling import one_torch_thread
# the look-back model trains like the induction model: the same checks and loss
# (attncore.lab.training)
from .training import (
    _MHA_FIELDS,
    IGNORE_INDEX,
    _check_nonnegative_int,
    _check_positive_int,
    _loss,
)

__all__ = ["POSITIONS", "LookbackConfig", "OrderModel", "init_order_model", "lookback_batch",
           "train_lookback"]

POSITIONS = ("none", "learned", "sinusoidal", "rope")
"""The ways :class:`OrderModel` can be told positions."""


def _check_task(seq_len: int, vocab_size: int, lag: int) -> None:
    if lag >= seq_len:
        raise ValueError(f"lag: expected 1 <= lag < seq_len={seq_len} (some position must "
                         f"have a token lag places back), got {lag}")
    if vocab_size < seq_len:
        raise ValueError(f"vocab_size: expected at least seq_len={seq_len} (the tokens of a "
                         f"sequence are distinct), got {vocab_size}")


@dataclass(frozen=True)
class LookbackConfig:
    """Everything that fixes a training run; the same config gives the same model.

    Attributes
    ----------
    positions : str
        One of :data:`POSITIONS`: "none", "learned" (a trained table added to the
        embeddings), "sinusoidal" (the fixed encoding added to the embeddings), "rope"
        (queries and keys rotated in every head).
    causal : bool
        A causal mask in every layer.
    vocab_size : int
        Distinct tokens, at least ``seq_len``.
    seq_len : int
        Tokens per training sequence, ``n``.
    lag : int
        The target at position ``i`` is the token at ``i - lag``.
    d_model : int
        Width of the model.
    num_heads : int
        Heads per layer (divides ``d_model``).
    num_layers : int
        Attention layers.
    batch_size : int
        Sequences per batch; every step draws a fresh batch.
    steps : int
        Optimizer steps (Adam, one batch per step).
    lr : float
        Adam's learning rate.
    base : float
        Base of the sinusoidal and rotary frequencies.
    seed : int
        Seeds the initial weights and the data stream.
    """

    positions: str = "learned"
    causal: bool = False
    vocab_size: int = 24
    seq_len: int = 12
    lag: int = 2
    d_model: int = 32
    num_heads: int = 2
    num_layers: int = 1
    batch_size: int = 32
    steps: int = 150
    lr: float = 1e-2
    base: float = 10000.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"positions: expected one of {POSITIONS}, got {self.positions!r}")
        if not isinstance(self.causal, bool):
            raise TypeError(f"causal: expected a bool, got {self.causal!r}")
        for name in ("vocab_size", "seq_len", "lag", "d_model", "num_heads", "num_layers",
                     "batch_size"):
            _check_positive_int(name, getattr(self, name))
        _check_nonnegative_int("steps", self.steps)
        _check_nonnegative_int("seed", self.seed)
        _check_task(self.seq_len, self.vocab_size, self.lag)
        if self.d_model % self.num_heads:
            raise ValueError(f"num_heads: expected a divisor of d_model={self.d_model}, "
                             f"got {self.num_heads}")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"d_model: expected an even width for sinusoidal positions, "
                             f"got {self.d_model}")
        if self.positions == "rope" and (self.d_model // self.num_heads) % 2:
            raise ValueError(f"num_heads: expected an even head width d_model / num_heads "
                             f"for rope, got {self.d_model} / {self.num_heads}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr: expected a finite positive number, got {self.lr!r}")


def lookback_batch(rng: np.random.Generator, batch_size: int, seq_len: int, vocab_size: int,
                   *, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """A batch of sequences of distinct tokens, each target the token ``lag`` places back.

    Parameters
    ----------
    rng : numpy.random.Generator, the only source of randomness
    batch_size, seq_len : positive ints
    vocab_size : int, at least ``seq_len``; each row is ``seq_len`` distinct tokens drawn
        uniformly at random, in uniformly random order
    lag : int, ``1 <= lag < seq_len``

    Returns
    -------
    tokens : int64 array ``(batch_size, seq_len)`` in ``[0, vocab_size)``
    targets : int64 array ``(batch_size, seq_len)``: ``tokens[:, i - lag]`` at ``i >= lag``,
        ``IGNORE_INDEX`` (-100) before
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator "
                        f"(np.random.default_rng(seed)), got {type(rng).__name__}")
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len),
                        ("vocab_size", vocab_size), ("lag", lag)):
        _check_positive_int(name, value)
    _check_task(seq_len, vocab_size, lag)
    # a random permutation of the vocabulary per row; its first seq_len entries are the row
    perm = np.argsort(rng.random((batch_size, vocab_size)), axis=1, kind="stable")
    tokens = perm[:, :seq_len].astype(np.int64)
    targets = np.full_like(tokens, IGNORE_INDEX)
    targets[:, lag:] = tokens[:, :-lag]
    return tokens, targets


@dataclass
class OrderModel:
    """Attention layers on token embeddings, told positions in one of four ways.

    Attributes
    ----------
    tok_emb : ``(vocab_size, d_model)`` torch tensor, the token embedding ``E``
    pos_emb : ``(seq_len, d_model)`` learned table ``P`` for ``positions="learned"``, else None
    layers  : list of :class:`attncore.MultiHeadParams` (torch tensors)
    unembed : ``(d_model, vocab_size)``
    config  : the :class:`LookbackConfig` it was built from
    """

    tok_emb: Any
    pos_emb: Any
    layers: list[MultiHeadParams]
    unembed: Any
    config: LookbackConfig

    def parameters(self) -> list[Any]:
        """Every trainable tensor, in a fixed order."""
        out = [self.tok_emb, self.unembed] + ([] if self.pos_emb is None else [self.pos_emb])
        for layer in self.layers:
            out.extend(getattr(layer, n) for n in _MHA_FIELDS if getattr(layer, n) is not None)
        return out

    def forward(self, tokens: Any) -> Any:
        """Logits ``(batch, n, vocab_size)`` for int64 tokens ``(batch, n)``.

        ``n`` may exceed the training length for "none", "sinusoidal" and "rope" (their
        positions are defined everywhere); a learned table has only ``seq_len`` rows.
        """
        import torch

        tokens = torch.as_tensor(tokens)
        if tokens.ndim != 2 or tokens.dtype != torch.int64:
            raise ValueError(f"tokens: expected an int64 tensor (batch, n), got dtype "
                             f"{tokens.dtype} and shape {tuple(tokens.shape)}")
        n = int(tokens.shape[1])
        vocab = shape_of(self.tok_emb)[0]
        if n and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
            raise ValueError(f"tokens: expected values in [0, {vocab}), got "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")
        c = self.config
        h = self.tok_emb[tokens]
        if c.positions == "learned":
            if n > shape_of(self.pos_emb)[0]:
                raise ValueError(f"tokens: a learned position table has "
                                 f"{shape_of(self.pos_emb)[0]} rows, got {n} positions")
            h = h + self.pos_emb[:n]
        elif c.positions == "sinusoidal":
            h = h + sinusoidal_positions(n, c.d_model, base=c.base, like=h)
        for layer in self.layers:
            if c.positions == "rope":
                h = h + rope_multi_head_attention(layer, h, base=c.base, causal=c.causal)
            else:
                h = h + multi_head_attention(layer, h, causal=c.causal)
        return h @ self.unembed


def init_order_model(config: LookbackConfig) -> OrderModel:
    """Seeded float64 CPU weights (NumPy draws), as in :func:`attncore.lab.training`.

    Embeddings and the learned position table ``N(0, 1)``, the unembedding
    ``N(0, 1/d_model)``, the attention layers Xavier-uniform with zero biases.
    """
    import torch

    c = config
    rng = np.random.default_rng(c.seed)

    def param(a: np.ndarray) -> Any:
        return torch.tensor(a, dtype=torch.float64).requires_grad_()

    tok_emb = param(rng.normal(0.0, 1.0, (c.vocab_size, c.d_model)))
    # drawn for every kind of positions, so that all kinds start from the same other weights
    pos_table = rng.normal(0.0, 1.0, (c.seq_len, c.d_model))
    pos_emb = param(pos_table) if c.positions == "learned" else None
    unembed = param(rng.normal(0.0, 1.0 / math.sqrt(c.d_model), (c.d_model, c.vocab_size)))
    layers = []
    for index in range(c.num_layers):
        mha = init_multihead(c.d_model, c.num_heads, seed=int(rng.integers(0, 2**31 - 1)),
                             dtype=torch.float64, backend="torch")
        for n in _MHA_FIELDS:
            getattr(mha, n).requires_grad_()
        layers.append(mha)
    return OrderModel(tok_emb, pos_emb, layers, unembed, config=c)


def train_lookback(config: LookbackConfig | None = None, **overrides: Any
                   ) -> tuple[OrderModel, list[float]]:
    """Train an :class:`OrderModel` on :func:`lookback_batch` data; return it and its losses.

    ``config`` (default ``LookbackConfig()``) may be adjusted by keyword, e.g.
    ``train_lookback(positions="rope")``. Each step draws a fresh batch from
    ``np.random.default_rng(config.seed + 1)`` (the same batches for every kind of
    positions) and takes one Adam step on the mean cross-entropy over labelled positions.
    CPU, float64, one thread (restored afterwards): a seed fixes the result.

    Returns
    -------
    model : the trained model (its tensors still require grad)
    losses : list of ``config.steps`` floats, the training loss at each step
    """
    import torch

    c = replace(config or LookbackConfig(), **overrides)
    with one_torch_thread():
        model = init_order_model(c)
        data = np.random.default_rng(c.seed + 1)
        opt = Adam(model.parameters(), lr=c.lr)
        losses: list[float] = []
        for _ in range(c.steps):
            tokens, targets = lookback_batch(data, c.batch_size, c.seq_len, c.vocab_size,
                                             lag=c.lag)
            loss = _loss(model.forward(torch.from_numpy(tokens)), torch.from_numpy(targets))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return model, losses


def plot_lookback_losses(losses: Mapping[str, Sequence[float]], config: LookbackConfig,
                         *, background: Sequence[str] = ()) -> Any:
    """Draw training-loss curves of the look-back task, on a log scale, in a new figure.

    Chapters 6 and 7 draw their runs with it, so the two figures read alike: one curve per
    entry of ``losses`` against the training step, and a dotted line at ``log(n - 1)``, the
    loss of a uniform guess among the other tokens (``n = config.seq_len``).

    Parameters
    ----------
    losses : mapping from a run's name (the legend's label) to its losses, one float per step
        (what :func:`train_lookback` returns).
    config : the runs' :class:`LookbackConfig`; its ``seq_len`` and ``lag`` set the dotted
        line and the title.
    background : names in ``losses`` drawn thin and grey, as a reference for the others.

    Returns
    -------
    The matplotlib ``Axes`` (the caller shows the figure, e.g. with ``plt.show()``).

    Raises
    ------
    KeyError
        If a name in ``background`` is not in ``losses``.
    """
    import matplotlib.pyplot as plt

    missing = [name for name in background if name not in losses]
    if missing:
        raise KeyError(f"background names not in losses: {missing}")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    greys = iter(("0.55", "0.75", "0.35", "0.85"))
    for name, curve in losses.items():
        style = {"color": next(greys), "lw": 1} if name in background else {}
        ax.plot(np.arange(1, len(curve) + 1), curve, label=name, **style)
    ax.axhline(math.log(config.seq_len - 1), color="gray", ls=":",
               label="log(n - 1): a uniform guess\namong the other tokens")
    ax.set_yscale("log")
    ax.set(xlabel="training step", ylabel="training loss (cross-entropy)",
           title=f"the look-back task (n = {config.seq_len}, k = {config.lag})")
    ax.tick_params(labelsize=11)
    ax.legend(fontsize=10, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return ax
