"""The course's instruments: experiments, measurements and figures, apart from attention itself.

The attention core is :mod:`attncore` (softmax, attention, masks, multi-head, tiled, matmul
views). What the chapters use to *study* it lives here, one module per instrument:

* ``scaling.py``       -- why scores are scaled by 1/sqrt(d_k): moments, Monte Carlo, saturation,
  gradients, the softmax Jacobian
* ``naive.py``         -- :func:`naive_softmax`, the textbook formula that overflows (for teaching)
* ``examples.py``      -- the worked examples several chapters share (one seed each), e.g. the
  five-word sentence of chapters 3 and 4
* ``view_figures.py``  -- figures of the four matmul views, flop and memory-traffic counts
* ``training.py``      -- a tiny attention-only model trained on an induction task
* ``adam.py``          -- Adam written out (the training loops' optimizer)
* ``language.py``      -- chapter 11's character-level language model: Python's help topics
  as text, the training loop, the bigram baseline, the shipped checkpoint
  (``capstone_lm.safetensors``, written by ``scripts/train_capstone.py``), the same model
  in ``torch.nn``, gradient norms through depth, what its heads attend to
* ``inference.py``     -- the KV cache of published models, the arithmetic intensity of a
  decoding step, attention of many queries timed against one
* ``order_task.py``    -- a task that needs order (the token k places back) and a one-layer
  model told positions in four ways: none, learned, sinusoidal, RoPE
* ``plotting.py``      -- attention heatmaps
* ``opening_figures.py`` -- the picture each chapter opens with: its problem in one figure
* ``diagrams.py``      -- block diagrams of scaled dot-product and multi-head attention
* ``profiling.py``, ``torch_memory.py`` -- timing and peak-memory measurements
* ``comparisons.py``   -- side-by-side measurements of naive and tiled attention (forward and
  backward passes)
* ``autograd_reference.py`` -- every gradient of attention by torch autograd, to check the
  backward pass derived by hand against
* ``bert_reference.py``, ``head_patterns.py``, ``score_statistics.py``, ``ablation.py``,
  ``sentences.py`` -- for the pretrained MiniLM: a PyTorch-layer reference, what each head
  attends to, query/key moments against the 1/sqrt(d_k) theory, head removal, small corpora

Import the module you need: ``from attncore.lab.scaling import dot_product_moments``.
Modules that draw import matplotlib only when they draw.
"""
