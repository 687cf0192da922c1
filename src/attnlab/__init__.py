"""attnlab: the helper package of the course
「Multi-Head Attention と位置エンコーディングの内部」.

Every chapter imports from here; a function is written once, in this package, and the
chapter that introduces it is named on the last line of its docstring.

Shape vocabulary (used in every docstring and shape comment):

====  =========================================
B     batch size
T     sequence length (Tq queries, Tk keys)
D     model width, ``d_model``
H     number of query heads, ``n_heads``
Hkv   number of key/value heads, ``n_kv_heads``
Dh    width of one head, ``d_head = D / H`` (``d_k`` in the paper)
V     vocabulary size
====  =========================================

Modules, bottom to top; numerics never import presentation (a test checks that
importing any numerics module loads neither matplotlib nor ipywidgets):

- numerics: ``positional`` (sinusoidal, learned table, RoPE, NTK base, ALiBi),
  ``attention`` (softmax, masks, heads, the one multi-head forward pass, GQA/MQA),
  ``costs`` (parameters, FLOPs, KV cache), ``tasks`` (toy tasks and their batches),
  ``model`` (a small attention-only transformer with its backward pass), ``training``
  (Adam, ``train``, ``evaluate``, ablation, pruning), ``fast_training`` (the same
  training step arranged for speed, which ``train`` runs by default; ``step="readable"``
  runs ``model``'s; not taught), ``head_roles`` (scores that name what a head does),
  ``parallel`` (independent runs on the CPU cores, and the model's one BLAS thread) and
  ``experiments`` (one module per chapter's numeric experiment);
- presentation: ``plotting`` (font, palette, figure helpers), ``tables`` (result
  tables), ``widgets`` (live figures, one module per chapter, shared parts in ``core``),
  ``checks`` (self-checks, one module per chapter, shared parts in ``core``) and
  ``live_book`` (the live figures' every state, drawn for the published book).

The last line of every public function's docstring names the chapter that teaches it
(``Taught in chapter 03.``), or says ``Not taught:`` for machinery no chapter calls; a
test keeps both true.

The names below are the ones chapters use most; everything else is imported from its
module, e.g. ``from attnlab.positional import apply_rope``.
"""

from attnlab.attention import (
    MHAProjections,
    causal_mask,
    init_mha,
    mean_pool_kv,
    merge_heads,
    multi_head_attention,
    multi_head_attention_loop,
    scaled_dot_product_attention,
    softmax,
    split_heads,
)
from attnlab.costs import kv_cache_bytes, mha_cost
from attnlab.positional import RoPE, apply_rope, rope_angles, sinusoidal_encoding

__all__ = [
    "MHAProjections",
    "RoPE",
    "apply_rope",
    "causal_mask",
    "init_mha",
    "kv_cache_bytes",
    "mean_pool_kv",
    "merge_heads",
    "mha_cost",
    "multi_head_attention",
    "multi_head_attention_loop",
    "rope_angles",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
    "softmax",
    "split_heads",
]
__version__ = "0.1.0"
