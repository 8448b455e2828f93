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
* ``_backend.py``      -- backend dispatch and the argument checks shared by all of the above
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
from .softmax import softmax

__version__ = "0.1.0"

__all__ = [
    "MATMUL_VIEWS",
    "MultiHeadParams",
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
