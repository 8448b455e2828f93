"""attncore: the attention mechanism, written to be read, on NumPy and torch.

One API, two backends chosen by the inputs: NumPy arrays run on the NumPy reference code,
torch tensors on torch (on the tensors' own device, CUDA included).

Where things live:

* ``softmax.py``       -- :func:`softmax`, numerically stable
* ``attention.py``     -- :func:`scaled_dot_product_attention`, masks, :func:`causal_mask`
* ``multihead.py``     -- :class:`MultiHeadParams`, :func:`init_multihead`, :func:`split_heads`,
  :func:`merge_heads`, :func:`multi_head_attention`, conversion to and from
  ``torch.nn.MultiheadAttention``
* ``matmul_views.py``  -- the entry, column, row and outer-product views of ``A @ B``
* ``tiled.py``         -- :func:`tiled_attention` (flash-style, one key block at a time) and the
  online-softmax state it merges
* ``masks.py``         -- :func:`padding_mask` for batches of sequences of different lengths
* ``naive.py``         -- :func:`naive_softmax`, the textbook formula that overflows (for teaching)
* ``scaling.py``       -- why scores are scaled by 1/sqrt(d_k): moments, Monte Carlo, saturation,
  gradients, the softmax Jacobian
* ``view_figures.py``  -- figures of the four matmul views, flop and memory-traffic counts
* ``training.py``      -- a tiny attention-only model trained on an induction task
* ``plotting.py``      -- attention heatmaps
* ``profiling.py``, ``torch_memory.py`` -- timing and peak-memory measurements
* ``_backend.py``      -- backend dispatch and the argument checks shared by all of the above,
  including :func:`check_attention_inputs` (used by every attention variant)
"""

from .attention import causal_mask, scaled_dot_product_attention
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
from .masks import padding_mask
from .naive import naive_softmax
from .scaling import (
    attention_saturation,
    dot_product_moments,
    dot_product_statistics,
    row_entropy,
    sample_dot_products,
    score_gradient_norms,
    softmax_jacobian,
    softmax_with_temperature,
)
from .softmax import softmax
from .tiled import (
    SoftmaxState,
    finalize_softmax_state,
    merge_softmax_states,
    softmax_state,
    tiled_attention,
)

__version__ = "0.1.0"

__all__ = [
    "MATMUL_VIEWS",
    "MultiHeadParams",
    "SoftmaxState",
    "finalize_softmax_state",
    "merge_softmax_states",
    "softmax_state",
    "tiled_attention",
    "attention_saturation",
    "dot_product_moments",
    "dot_product_statistics",
    "naive_softmax",
    "padding_mask",
    "row_entropy",
    "sample_dot_products",
    "score_gradient_norms",
    "softmax_jacobian",
    "softmax_with_temperature",
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
]
