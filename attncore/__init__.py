"""attncore: the attention mechanism, written to be read, on NumPy and torch.

One API, two backends chosen by the inputs: NumPy arrays run on the NumPy reference code,
torch tensors on torch (on the tensors' own device, CUDA included).

The attention core, each module one idea, all names available as ``attncore.<name>``:

* ``softmax.py``       -- :func:`softmax`, numerically stable
* ``online_softmax.py`` -- the online softmax: :class:`SoftmaxState` (a softmax-weighted
  average summarised per query row), :func:`softmax_state`, :func:`merge_softmax_states`,
  :func:`finalize_softmax_state`, :func:`add_sink_to_state` (an attention sink: one more
  term in the log-sum-exp); the reference and tiled attention both compute with it
* ``attention.py``     -- :func:`scaled_dot_product_attention` (with ``window=`` and
  ``sinks=``), :func:`causal_mask`
* ``masks.py``         -- :func:`padding_mask` for batches of sequences of different lengths,
  :func:`sliding_window_mask` (with StreamingLLM's sink tokens), :func:`document_mask`
  (packed documents), :func:`prefix_lm_mask`
* ``sinks.py``         -- attention sinks (gpt-oss): one learned logit per head in the
  softmax; the check of ``sinks=`` that every attention function shares
* ``multihead.py``     -- :class:`MultiHeadParams`, :func:`init_multihead`, :func:`split_heads`,
  :func:`merge_heads`, :func:`multi_head_attention`, conversion to and from
  ``torch.nn.MultiheadAttention``
* ``tiled.py``         -- :func:`tiled_attention` (flash-style, one key block at a time,
  merging online-softmax states; a sliding window skips the rows outside it), and
  :func:`tiled_attention_work`, the blocks and scores it computes
* ``backward.py``      -- :func:`attention_backward` and :func:`tiled_attention_backward`:
  the gradients of q, k and v by hand, with the weights formed, and block by block from the
  forward pass's output and row log-sum-exp (FlashAttention's backward pass)
* ``kvcache.py``       -- :class:`KVCache`, :func:`decode_step` and :func:`decode`: decoding
  a causal layer one token at a time with cached keys and values, and the
  :func:`bottom_right_causal_mask` of new queries against them
* ``window_cache.py`` -- :class:`SlidingWindowKVCache`: a ring buffer of the last ``W``
  positions plus the first ``S`` (sink tokens), for :func:`decode_step`
* ``dropout.py``       -- :func:`dropout` with PyTorch's semantics (the attention functions'
  ``dropout_p``)
* ``layers.py``        -- the layers besides attention, one home for every model:
  :func:`layer_norm`, :func:`rms_norm`, :func:`gelu`, :func:`silu`, :func:`swiglu`
* ``transformer.py``   -- :class:`TransformerBlockParams`, :func:`transformer_block` (pre- and
  post-norm; GPT-2's block and Llama's: RMSNorm, SwiGLU, RoPE, grouped-query attention),
  :func:`feed_forward`, conversion to and from ``torch.nn.TransformerEncoderLayer``
* ``language_model.py`` -- :class:`LanguageModel`, :func:`lm_logits` and :func:`generate`: a
  decoder-only model built from the blocks (learned positions or RoPE, tied or untied
  head), sampled through the KV cache
* ``paged.py``         -- :class:`BlockPool` and :class:`PagedKVCache`: the cache in
  fixed-size blocks with a block table per sequence (vLLM's paged attention)
* ``quantized_cache.py`` -- :class:`Int8KVCache`: keys and values as int8 with a scale per
  token or per channel, and the error bound it keeps
* ``mla.py``           -- multi-head latent attention (DeepSeek-V2): :func:`init_mla`,
  :func:`mla`, :func:`absorbed_weights`, :func:`mla_decode`
* ``speculative.py``   -- :func:`speculative_accept`, the rejection rule of speculative
  sampling
* ``matmul_views.py``  -- the entry, column, row and outer-product views of ``A @ B``
* ``linear_attention.py`` -- :func:`linear_attention` and :func:`linear_attention_step`:
  a kernel ``phi(q) . phi(k)`` in place of the softmax, computed in time linear in the
  length, causal as a recurrent network; :class:`RandomFeatures` (Performer's estimate
  of the softmax kernel)
* ``delta_rule.py``    -- :func:`gated_delta_rule` and :func:`gated_delta_rule_step`: the
  gated delta rule of Gated DeltaNet (Qwen3-Next, Kimi Linear), recurrent and chunked
* ``sparse_attention.py`` -- :func:`topk_sparse_attention` and :func:`indexer_scores`:
  DeepSeek-V3.2's learned sparse attention, an indexer choosing the top-k keys
* ``distributed.py``   -- :func:`~attncore.distributed.ring_attention` and
  :func:`~attncore.distributed.ulysses_attention`: attention over a sequence sharded
  across the processes of a ``torch.distributed`` group
* ``positions.py``     -- :func:`sinusoidal_positions`, :func:`rope` (rotary embeddings), their
  :func:`position_frequencies`, and :func:`rope_multi_head_attention`: how attention is told
  the order of the tokens
* ``_backend.py``      -- backend dispatch and the argument checks shared by all of the above
* ``_guard.py``        -- the promise about values every attention function keeps: finite
  inputs and no overflow, decided once per call from three norms

:mod:`attncore.testing` (``ac.testing.check_attention``) checks an attention function
written by the reader against the course's properties.

The instruments the chapters use for experiments, measurements and figures live apart, in
:mod:`attncore.lab` (``import attncore.lab``): they are not part of attention itself.

:mod:`attncore.pretrained` runs two real pretrained models with the core above: the
encoder all-MiniLM-L6-v2 (``attncore.pretrained.MiniLM.load()``) and the language model
SmolLM2-135M-Instruct (``attncore.pretrained.SmolLM2.load()``).
"""

from .attention import causal_mask, scaled_dot_product_attention
from .backward import attention_backward, tiled_attention_backward
from .matmul_views import (
    MATMUL_VIEWS,
    matmul_by_columns,
    matmul_by_entries,
    matmul_by_outer_products,
    matmul_by_rows,
)
from .multihead import (
    MultiHeadParams,
    init_multihead,
    merge_heads,
    multi_head_attention,
    multi_head_attention_loop,
    params_from_torch,
    params_to_torch,
    split_heads,
)
from .masks import document_mask, padding_mask, prefix_lm_mask, sliding_window_mask
from .softmax import softmax
from .positions import (
    position_frequencies,
    rope,
    rope_multi_head_attention,
    sinusoidal_positions,
)
from . import testing  # noqa: F401  (ac.testing.check_attention, like numpy.testing)
from .online_softmax import (
    SoftmaxState,
    add_sink_to_state,
    finalize_softmax_state,
    merge_softmax_states,
    softmax_state,
)
from .tiled import TiledWork, tiled_attention, tiled_attention_work

# decoding with a KV cache (after multihead, which it builds on)
from .kvcache import BaseKVCache, KVCache, bottom_right_causal_mask, decode, decode_step
from .window_cache import SlidingWindowKVCache

# what today's LLMs serve with: other cache layouts, latent attention, speculative sampling
from .paged import BlockPool, PagedKVCache
from .quantized_cache import Int8KVCache
from .mla import MLAParams, absorbed_weights, init_mla, mla, mla_decode
from .speculative import speculative_accept

# the whole transformer: dropout, the layers, the block, a small language model (after
# kvcache)
from .dropout import dropout
from .layers import gelu, layer_norm, rms_norm, silu, swiglu
from .transformer import (
    TransformerBlockParams,
    block_decode_step,
    block_params_from_torch,
    block_params_to_torch,
    feed_forward,
    init_transformer_block,
    transformer_block,
)
from .language_model import LanguageModel, generate, init_language_model, lm_logits

# linear attention: a kernel in place of the softmax, computed in time linear in n
from .linear_attention import (
    LinearAttentionState,
    RandomFeatures,
    linear_attention,
    linear_attention_step,
)

# what 2025-26 open models changed: the gated delta rule, learned sparse attention
from .delta_rule import gated_delta_rule, gated_delta_rule_step
from .sparse_attention import indexer_scores, topk_sparse_attention

# attention over a sequence sharded across processes (torch.distributed), built on the
# online-softmax state above
from . import distributed  # noqa: E402

# a real pretrained model computed with the core above (imports no optional library)
from . import pretrained

__version__ = "0.1.0"

__all__ = [
    "MATMUL_VIEWS",
    "attention_backward",
    "tiled_attention_backward",
    "MultiHeadParams",
    "SoftmaxState",
    "finalize_softmax_state",
    "merge_softmax_states",
    "softmax_state",
    "tiled_attention",
    "padding_mask",
    "causal_mask",
    "init_multihead",
    "matmul_by_columns",
    "matmul_by_entries",
    "matmul_by_outer_products",
    "matmul_by_rows",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_loop",
    "params_from_torch",
    "params_to_torch",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "position_frequencies",
    "rope",
    "rope_multi_head_attention",
    "sinusoidal_positions",
    "BaseKVCache",
    "KVCache",
    "bottom_right_causal_mask",
    "decode",
    "decode_step",
    "dropout",
    "TransformerBlockParams",
    "block_decode_step",
    "block_params_from_torch",
    "block_params_to_torch",
    "feed_forward",
    "gelu",
    "init_transformer_block",
    "layer_norm",
    "rms_norm",
    "silu",
    "swiglu",
    "transformer_block",
    "LanguageModel",
    "generate",
    "init_language_model",
    "lm_logits",
    "LinearAttentionState",
    "RandomFeatures",
    "linear_attention",
    "linear_attention_step",
    "BlockPool",
    "PagedKVCache",
    "Int8KVCache",
    "MLAParams",
    "absorbed_weights",
    "init_mla",
    "mla",
    "mla_decode",
    "speculative_accept",
    "add_sink_to_state",
    "document_mask",
    "prefix_lm_mask",
    "sliding_window_mask",
    "TiledWork",
    "tiled_attention_work",
    "SlidingWindowKVCache",
    "gated_delta_rule",
    "gated_delta_rule_step",
    "indexer_scores",
    "topk_sparse_attention",
]
