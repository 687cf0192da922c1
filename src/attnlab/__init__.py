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

Layers, bottom to top: numerics (``attention``) never import presentation
(``plotting``).
"""

from attnlab.attention import causal_mask, scaled_dot_product_attention, softmax

__all__ = ["causal_mask", "scaled_dot_product_attention", "softmax"]
__version__ = "0.1.0"
