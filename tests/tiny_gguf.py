"""A tiny Llama-architecture GGUF file with random weights, written with ``gguf``'s own
writer: SmolLM2's layout (4-bit Q4_1 matrices, a Q8_0 embedding, float32 norms, the query
and key rows permuted as llama.cpp's converter stores them, a byte-level BPE tokenizer and
a chat template), at a size that loads in a fraction of a second. For tests of the code
paths that do not need the real model's numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (what byte-level BPE spells them as)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The converter's reordering of query/key rows ``(out, in)`` for llama.cpp's RoPE."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_tiny_llama(path: Path, *, arch: str = "llama", seed: int = 0, d_model: int = 32,
                     num_heads: int = 4, n_kv_heads: int = 2, d_ff: int = 64,
                     num_layers: int = 2, context: int = 64) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + byte_alphabet() + ["Ġt", "he", "Ġthe"]
    merges = ["Ġ t", "h e", "Ġt he"]
    vocab = len(tokens)
    d_head = d_model // num_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-llama")
    w.add_block_count(num_layers)
    w.add_context_length(context)
    w.add_embedding_length(d_model)
    w.add_feed_forward_length(d_ff)
    w.add_head_count(num_heads)
    w.add_head_count_kv(n_kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(d_head)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(specials) + [1] * (vocab - len(specials)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHAT_TEMPLATE)

    def quantized(name: str, a: np.ndarray, kind) -> None:
        data = gguf.quants.quantize(a.astype(np.float32), kind)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=kind)

    q4, q8 = gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0
    quantized("token_embd.weight", rng.normal(0, 0.5, (vocab, d_model)), q8)
    for layer in range(num_layers):
        b = f"blk.{layer}."
        w.add_tensor(b + "attn_norm.weight", rng.uniform(0.5, 1.5, d_model).astype(np.float32))
        w.add_tensor(b + "ffn_norm.weight", rng.uniform(0.5, 1.5, d_model).astype(np.float32))
        q = rng.normal(0, 0.3, (d_model, d_model))
        k = rng.normal(0, 0.3, (n_kv_heads * d_head, d_model))
        quantized(b + "attn_q.weight", llama_cpp_permute(q, num_heads), q4)
        quantized(b + "attn_k.weight", llama_cpp_permute(k, n_kv_heads), q4)
        quantized(b + "attn_v.weight", rng.normal(0, 0.3, (n_kv_heads * d_head, d_model)), q4)
        quantized(b + "attn_output.weight", rng.normal(0, 0.3, (d_model, d_model)), q4)
        quantized(b + "ffn_gate.weight", rng.normal(0, 0.3, (d_ff, d_model)), q4)
        quantized(b + "ffn_up.weight", rng.normal(0, 0.3, (d_ff, d_model)), q4)
        quantized(b + "ffn_down.weight", rng.normal(0, 0.3, (d_model, d_ff)), q4)
    w.add_tensor("output_norm.weight", rng.uniform(0.5, 1.5, d_model).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
