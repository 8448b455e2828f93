"""Training the capstone's small language model: text, batches, the loop, baselines.

The text is Python 3.11's help (what ``help("if")`` prints: the topics of CPython's
``pydoc_data.topics``, 464 970 characters of English prose and code), read at the character
level. It ships with this package, compressed (``python311_help_topics.txt.gz``, under the
PSF License Agreement: ``python311_help_topics.LICENSE.txt``), rather than being read from
the running Python, whose copy differs from version to version: the shipped checkpoint reads
exactly these characters on every Python. Nothing is downloaded. Training (:func:`train_language_model`) runs with torch autograd, on the CPU,
in float64, on one thread, from NumPy-seeded draws, so that a seed gives the same model on
every machine (up to the last bits of the CPU's floating-point kernels).

Also here: the bigram baseline the trained model is compared with, the same model written
with ``torch.nn`` modules (for the benchmark and the chapter's checks), the checkpoint
format (safetensors) and the gradient norms through depth of pre- and post-norm stacks.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ..language_model import LanguageModel, init_language_model, lm_logits
from ..multihead import MultiHeadParams
from ..transformer import TransformerBlockParams, init_transformer_block, transformer_block
from .adam import Adam
from .profiling import one_torch_thread

__all__ = [
    "CAPSTONE_CONFIG",
    "CharTokenizer",
    "LMConfig",
    "bigram_loss",
    "corpus",
    "corpus_text",
    "evaluate_loss",
    "gradient_norms_through_depth",
    "head_weights",
    "init_model",
    "learning_rate",
    "load_checkpoint",
    "per_position_loss",
    "random_batch",
    "read_safetensors",
    "save_checkpoint",
    "shipped_checkpoint",
    "torch_reference_model",
    "train_language_model",
]


# --- the text ---------------------------------------------------------------------------------

CORPUS = "python311_help_topics.txt.gz"
"""The file of the text, next to this module: Python 3.11.7's ``pydoc_data.topics``, its
entries joined in the order of their names, as UTF-8, gzip-compressed."""


def corpus_text() -> str:
    """Python 3.11's help topics, in the order of their names, as one string (464 970
    characters, 103 distinct), the same on every Python version."""
    import gzip
    from pathlib import Path

    with gzip.open(Path(__file__).resolve().parent / CORPUS, "rb") as f:
        return f.read().decode("utf-8")


class CharTokenizer:
    """Characters to ids and back; the vocabulary is the sorted set of ``text``'s
    characters.

    Attributes
    ----------
    chars : str
        The vocabulary, id ``i`` being ``chars[i]``.
    """

    def __init__(self, text: str) -> None:
        self.chars = "".join(sorted(set(text)))
        self._index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """int64 ids of ``text`` (``KeyError`` for a character outside the vocabulary)."""
        return np.array([self._index[c] for c in text], dtype=np.int64)

    def decode(self, ids: Any) -> str:
        """The text of a sequence of ids."""
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


def corpus(val_fraction: float = 0.1) -> tuple[CharTokenizer, np.ndarray, np.ndarray]:
    """The tokenizer, and the training and validation ids: the last ``val_fraction`` of
    the text is held out (whole topics at the end of the alphabet, never seen in
    training)."""
    text = corpus_text()
    tok = CharTokenizer(text)
    ids = tok.encode(text)
    cut = int(round(len(ids) * (1.0 - val_fraction)))
    return tok, ids[:cut], ids[cut:]


def random_batch(rng: np.random.Generator, ids: np.ndarray, batch_size: int,
                 seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``batch_size`` windows of ``seq_len + 1`` consecutive ids at random offsets: inputs
    ``(batch, seq_len)`` and targets, the same windows shifted by one.

    Each of the ``len(ids) - seq_len`` windows is equally likely, the last one (whose
    final target is the text's final id) included. A text shorter than ``seq_len + 1``
    ids is a ``ValueError``."""
    windows = len(ids) - seq_len                 # starts 0 .. len(ids) - seq_len - 1
    if windows < 1:
        raise ValueError(f"seq_len: expected at most len(ids) - 1 = {len(ids) - 1} (a "
                         f"window holds seq_len + 1 ids), got {seq_len}")
    # Uniform over the first windows - 1 starts, then each moved to the last start with
    # probability 1 / windows: uniform over all of them (each start has probability
    # (1 - 1/windows) / (windows - 1) = 1/windows, the last 1/windows), and a seed keeps
    # the starts it drew when the last window was never drawn (an off-by-one), so the
    # shipped checkpoint's batches, none of which moved, are still what its seeds draw.
    starts = rng.integers(0, windows - 1, size=batch_size) if windows > 1 else \
        np.zeros(batch_size, dtype=np.int64)
    starts[rng.random(batch_size) < 1 / windows] = windows - 1
    drawn = np.stack([ids[s:s + seq_len + 1] for s in starts])
    return drawn[:, :-1], drawn[:, 1:]


# --- the configuration and the loop -----------------------------------------------------------

@dataclass(frozen=True)
class LMConfig:
    """Everything that fixes a training run of the capstone model."""

    d_model: int = 64
    num_heads: int = 4
    d_ff: int = 256
    num_layers: int = 2
    seq_len: int = 64
    batch_size: int = 32
    steps: int = 200
    lr: float = 3e-3
    warmup_steps: int = 20
    dropout_p: float = 0.0
    seed: int = 0


CAPSTONE_CONFIG = LMConfig(d_model=64, num_heads=4, d_ff=256, num_layers=2, seq_len=128,
                           batch_size=32, steps=2500, lr=3e-3, warmup_steps=50, seed=0)
"""The configuration of the shipped checkpoint (``scripts/train_capstone.py``)."""


def learning_rate(config: LMConfig, step: int) -> float:
    """Linear warm-up over ``warmup_steps``, then a half cosine down to a tenth of ``lr``
    at step ``steps``."""
    c = config
    if step < c.warmup_steps:
        return c.lr * (step + 1) / c.warmup_steps
    progress = min(1.0, (step - c.warmup_steps) / max(1, c.steps - c.warmup_steps))
    return c.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def init_model(config: LMConfig, vocab_size: int) -> LanguageModel:
    """The float64 CPU model of ``config``, its tensors requiring grad."""
    import torch

    c = config
    model = init_language_model(vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers,
                                c.seq_len, seed=c.seed, dtype=torch.float64, backend="torch")
    for t in model.tensors():
        t.requires_grad_()
    return model


def _loss(model: LanguageModel, x: Any, y: Any, **dropout: Any) -> Any:
    import torch.nn.functional as F

    logits = lm_logits(model, x, **dropout)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train_language_model(config: LMConfig | None = None, *, model: LanguageModel | None = None,
                         start_step: int = 0, stop_step: int | None = None,
                         **overrides: Any
                         ) -> tuple[LanguageModel, list[float]]:
    """Train the capstone model on :func:`corpus`'s training ids with Adam.

    Step ``s`` draws its batch from ``np.random.default_rng([config.seed, s])`` and its
    dropout from ``torch.Generator().manual_seed(config.seed * 100003 + s)``, so a run can
    be continued (``model=..., start_step=...``) and any step reproduced (a continued run
    starts a fresh Adam state). ``stop_step`` (default ``config.steps``) ends the run
    early, keeping the learning-rate schedule of the full run.

    Returns the model (tensors still requiring grad) and the training loss of every step.
    """
    import torch

    c = replace(config or LMConfig(), **overrides)
    tok, train, _ = corpus()
    with one_torch_thread():
        if model is None:
            model = init_model(c, tok.vocab_size)
        opt = Adam(model.tensors(), lr=c.lr)
        losses = []
        for step in range(start_step, c.steps if stop_step is None else stop_step):
            opt.lr = learning_rate(c, step)
            x, y = random_batch(np.random.default_rng([c.seed, step]), train, c.batch_size,
                                c.seq_len)
            drop = {}
            if c.dropout_p:
                drop = {"dropout_p": c.dropout_p,
                        "generator": torch.Generator().manual_seed(c.seed * 100003 + step)}
            loss = _loss(model, torch.from_numpy(x), torch.from_numpy(y), **drop)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return model, losses


def evaluate_loss(model: LanguageModel, ids: np.ndarray, *, windows: int = 64,
                  seed: int = 1) -> float:
    """Mean next-character cross-entropy (nats) over ``windows`` seeded windows of
    ``model.max_len`` ids (dropout off)."""
    import torch

    x, y = random_batch(np.random.default_rng(seed), ids, windows, model.max_len)
    with one_torch_thread(), torch.no_grad():
        return float(_loss(model, torch.from_numpy(x), torch.from_numpy(y)))


def bigram_loss(train: np.ndarray, ids: np.ndarray, vocab_size: int, *, windows: int = 64,
                seq_len: int = 64, seed: int = 1, alpha: float = 0.1) -> float:
    """The cross-entropy of the best model that sees only the previous character: counts
    of each pair in ``train`` (plus ``alpha``), on the same windows as
    :func:`evaluate_loss`."""
    counts = np.full((vocab_size, vocab_size), alpha)
    np.add.at(counts, (train[:-1], train[1:]), 1.0)
    logp = np.log(counts / counts.sum(axis=1, keepdims=True))
    x, y = random_batch(np.random.default_rng(seed), ids, windows, seq_len)
    return float(-logp[x, y].mean())


# --- checkpoints ------------------------------------------------------------------------------

def _named_tensors(model: LanguageModel) -> dict[str, Any]:
    out = {"tok_emb": model.tok_emb, "pos_emb": model.pos_emb, "lnf_weight": model.lnf_weight}
    if model.lnf_bias is not None:
        out["lnf_bias"] = model.lnf_bias
    for i, b in enumerate(model.blocks):
        for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
            if getattr(b.attn, n) is not None:
                out[f"blocks.{i}.attn.{n}"] = getattr(b.attn, n)
        for n in ("ln1_weight", "ln1_bias", "ln2_weight", "ln2_bias", "w_ff1", "b_ff1",
                  "w_ff2", "b_ff2"):
            if getattr(b, n) is not None:
                out[f"blocks.{i}.{n}"] = getattr(b, n)
    return out


def save_checkpoint(path: Any, model: LanguageModel, config: LMConfig,
                    losses: list[float]) -> None:
    """Write the model's weights as float32 in the safetensors format
    (``safetensors.numpy.save_file``), with the config and the loss curve in the file's
    metadata (strings, as the format requires)."""
    from safetensors.numpy import save_file

    arrays = {n: np.ascontiguousarray(t.detach().cpu().numpy(), dtype="<f4")
              for n, t in _named_tensors(model).items()}
    save_file(arrays, str(path), metadata={"config": json.dumps(asdict(config)),
                                           "losses": json.dumps(losses)})


def read_safetensors(path: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The float32 tensors (``{name: array}``) and the metadata of a safetensors file,
    read with the ``safetensors`` library.

    Raises
    ------
    ValueError
        A tensor that is not float32 (the checkpoint stores float32 only).
    """
    from safetensors import safe_open

    arrays = {}
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata() or {}
        for name in f.keys():
            a = f.get_tensor(name)
            if a.dtype != np.float32:
                raise ValueError(f"{path}: expected float32 tensors, got {a.dtype} for "
                                 f"{name!r}")
            arrays[name] = a
    return arrays, meta


def load_checkpoint(path: Any, dtype: Any = None) -> tuple[LanguageModel, LMConfig, list[float]]:
    """Read :func:`save_checkpoint`'s file: the model (torch, CPU, ``dtype``: float64 by
    default), its config and the training losses."""
    import torch

    dtype = torch.float64 if dtype is None else dtype
    arrays, meta = read_safetensors(path)
    t = {n: torch.tensor(a, dtype=dtype) for n, a in arrays.items()}
    config = LMConfig(**json.loads(meta["config"]))
    blocks = []
    for i in range(config.num_layers):
        def g(n: str) -> Any:
            return t.get(f"blocks.{i}.{n}")
        attn = MultiHeadParams(*(g(f"attn.{n}") for n in ("w_q", "w_k", "w_v", "w_o", "b_q",
                                                          "b_k", "b_v", "b_o")),
                               num_heads=config.num_heads)
        blocks.append(TransformerBlockParams(
            attn, *(g(n) for n in ("ln1_weight", "ln1_bias", "ln2_weight", "ln2_bias",
                                   "w_ff1", "b_ff1", "w_ff2", "b_ff2")), norm_first=True))
    model = LanguageModel(t["tok_emb"], t["pos_emb"], blocks, t["lnf_weight"],
                          t.get("lnf_bias"))
    return model, config, json.loads(meta["losses"])


CHECKPOINT = "capstone_lm.safetensors"
"""The file name of the shipped checkpoint, next to this module."""


def shipped_checkpoint() -> Any:
    """The path of the checkpoint that ``scripts/train_capstone.py`` wrote."""
    from pathlib import Path

    return Path(__file__).resolve().parent / CHECKPOINT


# --- the same model in torch.nn ---------------------------------------------------------------

def torch_reference_model(model: LanguageModel) -> Any:
    """The same language model written with ``torch.nn`` modules (``nn.Embedding``,
    ``nn.TransformerEncoderLayer(norm_first=True)``, ``nn.LayerNorm``, a head tied to the
    embedding), holding copies of ``model``'s weights; its dropout is 0."""
    import torch
    from torch import nn

    from ..transformer import block_params_to_torch

    class TorchLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = model.tok_emb.detach()
            self.tok = nn.Embedding(*w.shape, dtype=w.dtype, device=w.device)
            self.pos = nn.Parameter(model.pos_emb.detach().clone())
            self.blocks = nn.ModuleList(block_params_to_torch(b) for b in model.blocks)
            self.lnf = nn.LayerNorm(w.shape[1], bias=model.lnf_bias is not None,
                                    dtype=w.dtype, device=w.device)
            with torch.no_grad():
                self.tok.weight.copy_(w)
                self.lnf.weight.copy_(model.lnf_weight.detach())
                if model.lnf_bias is not None:
                    self.lnf.bias.copy_(model.lnf_bias.detach())
            n = model.max_len
            self.register_buffer("causal", torch.ones(n, n, dtype=torch.bool,
                                                      device=w.device).tril().logical_not())

        def forward(self, ids: Any) -> Any:
            n = ids.shape[-1]
            h = self.tok(ids) + self.pos[:n]
            for block in self.blocks:
                h = block(h, src_mask=self.causal[:n, :n], is_causal=True)
            return self.lnf(h) @ self.tok.weight.T

    return TorchLM()


# --- pre-norm against post-norm ---------------------------------------------------------------

def gradient_norms_through_depth(num_layers: int, *, norm_first: bool, d_model: int = 64,
                                 num_heads: int = 4, n: int = 32, batch: int = 8,
                                 seed: int = 0) -> np.ndarray:
    """The norm of the gradient of each block's weights in a freshly initialised stack.

    ``num_layers`` blocks (:func:`~attncore.transformer.init_transformer_block`, float64,
    torch), causal, on seeded unit-normal inputs; the loss is the mean square error of the
    stack's output (after a final LayerNorm for pre-norm stacks, as in a real model)
    against seeded unit-normal targets. Returns ``(num_layers,)`` norms: entry ``l`` is the
    Euclidean norm of the gradient of all of block ``l``'s weights together (block 0 is the
    one next to the input).
    """
    import torch

    from ..transformer import layer_norm

    rng = np.random.default_rng(seed)
    blocks = [init_transformer_block(d_model, num_heads, 4 * d_model, norm_first=norm_first,
                                     seed=int(rng.integers(0, 2**31 - 2)), dtype=torch.float64,
                                     backend="torch") for _ in range(num_layers)]
    for block in blocks:
        for t in block.tensors():
            t.requires_grad_()
    x = torch.tensor(rng.normal(size=(batch, n, d_model)))
    target = torch.tensor(rng.normal(size=(batch, n, d_model)))
    with one_torch_thread():
        h = x
        for block in blocks:
            h = transformer_block(block, h, causal=True)
        out = layer_norm(h) if norm_first else h
        ((out - target) ** 2).mean().backward()
    return np.array([math.sqrt(sum(float((t.grad ** 2).sum()) for t in block.tensors()))
                     for block in blocks])


def head_weights(model: LanguageModel, ids: Any) -> np.ndarray:
    """The attention weights of every head of every block on one sequence.

    ids : int array ``(n,)``. Returns a float64 array ``(num_layers, num_heads, n, n)``:
    entry ``[l, h, i, j]`` is how much position ``i`` attends to position ``j`` in head
    ``h`` of block ``l`` (zero above the diagonal).
    """
    import torch

    from ..multihead import multi_head_attention
    from ..transformer import layer_norm

    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    out = []
    with one_torch_thread(), torch.no_grad():
        h = model.tok_emb[ids] + model.pos_emb[:len(ids)]
        for block in model.blocks:
            x = layer_norm(h, block.ln1_weight, block.ln1_bias, block.eps)
            _, w = multi_head_attention(block.attn, x, causal=True, return_weights=True)
            out.append(w.double().numpy())
            h = transformer_block(block, h, causal=True)
    return np.stack(out)


def per_position_loss(model: LanguageModel, ids: Any) -> np.ndarray:
    """The cross-entropy (nats) of predicting ``ids[t + 1]`` at each position ``t`` of one
    sequence: ``(n - 1,)`` float64."""
    import torch
    import torch.nn.functional as F

    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    with one_torch_thread(), torch.no_grad():
        logits = lm_logits(model, ids[:-1])
        return F.cross_entropy(logits.double(), ids[1:], reduction="none").numpy()
