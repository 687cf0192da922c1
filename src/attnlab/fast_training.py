"""Not taught: a faster training step for the toy transformer of :mod:`attnlab.model`.

To read the model, read :mod:`attnlab.model`. :func:`attnlab.training.train` calls
:func:`loss_grads_accuracy` here (``step="fast"``, its default), which returns what
:func:`attnlab.model.loss_grads_accuracy` returns (the loss, the gradients and the
accuracy of one batch) from the same equations, arranged for speed;
``tests/test_fast_training.py`` checks that the two agree (float64 to rtol 1e-9) for
1, 2 and 3 layers with every field of ``ModelConfig`` set away from its default, every
position scheme, causal or not, GQA and MQA, float32 and float64, and the chapters'
model sizes; ``train(..., step="readable")`` trains through :mod:`attnlab.model`.
``forward``, evaluation and the chapters' own computations use the readable model only.

On the chapters' models (02, 04, 10) a step takes 0.5–0.7 of the readable step's CPU
time, each step timed in a fresh process under ``train`` (``benchmarks/train_speed.py``
times them by turns in one process). What pays for that, measured one part at a time
(each removed alone, CPU time per step):

- the first block projects ``embed[tokens] + pos`` by its parts,
  ``(embed W)[tokens] + pos W``: V and T rows instead of B·T (without it, 1.17–1.32×);
- the last block works only on the rows the loss reads (1.17× on chapter 04's repeated
  sequences, where half the positions count; nothing where all do);
- the softmax shifts all rows by one number when that is safe and sums rows by a
  product (:func:`_softmax_rows`): numpy takes the maxima and sums of many short rows
  slowly; on chapter 04's trained model the plain softmax (row maxima, subtract, exp,
  row sums, divide) took 1.7× as long in the first layer and 3× in the second;
- the heads are views of the projections and products write into their outputs
  (``out=``), W_q / √Dh is folded into one D × D matrix, the softmax backward uses
  Σ_j A_ij dA_ij = dO_i · O_i, the score offsets and RoPE's cos and sin are made once.

Dropped because they did not pay (within the noise of the measurement): products per
sequence instead of one over all rows, an accuracy without argmax, a permutation-matrix
product for RoPE, a flat buffer for Adam.

Both steps run under glibc's raised memory thresholds, which :func:`attnlab.training.train`
sets before its first step (:func:`attnlab.parallel._keep_freed_memory`); this module
leaves the allocator alone.
"""

import functools
import math
from typing import NamedTuple

import numpy as np

from attnlab._validate import model_batch, model_params
from attnlab.attention import MHAProjections, causal_mask
from attnlab.model import (
    ModelConfig,
    _cross_entropy,
    _heads_kept,
    check_config,
    layer_keys,
    layer_projections,
    param_shapes,
    t5_table_grad,
)
from attnlab.parallel import _one_blas_thread
from attnlab.positional import (
    RoPE,
    alibi_bias,
    lookup_positions,
    sinusoidal_encoding,
    t5_bias,
)


class _Inputs(NamedTuple):
    """The first block's input as the model builds it: ``embed[tokens] + pos``."""

    tokens: np.ndarray  # (B·T,) token ids
    embed: np.ndarray  # (V, D)
    pos: np.ndarray | None  # (T, D) the positions added, or None


def _embed(params, tokens: np.ndarray, config: ModelConfig) -> tuple[np.ndarray, _Inputs]:
    """Token embedding plus the absolute positions, if the scheme adds them: (B, T, D),
    and the two parts it was built from."""
    T = tokens.shape[1]
    x = params["embed"][tokens]  # (B, T, D)
    pos = None
    if config.positional == "sinusoidal":
        pos = sinusoidal_encoding(T, config.d_model, dtype=config.dtype)  # (T, D)
    elif config.positional == "learned":
        pos = lookup_positions(params["pos"], np.arange(T))  # (T, D)
    if pos is not None:
        x = x + pos  # over B
    return x, _Inputs(tokens.reshape(-1), params["embed"], pos)


def _project(rows: np.ndarray, w: np.ndarray, inputs: _Inputs | None, T: int,
             chosen: np.ndarray | None = None) -> np.ndarray:
    """``rows @ w`` (B·T, ·), or ``rows[chosen] @ w`` (N, ·); for the first block's input,
    by its parts.

    The first block's input is ``embed[tokens] + pos``, so its projection is
    ``(embed @ w)[tokens] + pos @ w``: two products of V and T rows, one look-up and one
    addition, instead of a product of all B·T rows.
    """
    if inputs is None:
        return rows @ w if chosen is None else rows[chosen] @ w
    if chosen is not None:
        out = (inputs.embed @ w)[inputs.tokens[chosen]]  # (N, ·)
        if inputs.pos is not None:
            out += (inputs.pos @ w)[chosen % T]
        return out
    out = (inputs.embed @ w)[inputs.tokens]  # (B·T, ·)
    if inputs.pos is not None:
        out.reshape(-1, T, w.shape[1])[...] += inputs.pos @ w  # (T, ·) over B
    return out


class _Trace(NamedTuple):
    """What the forward pass keeps for the backward pass."""

    blocks: list  # each block's _Block
    keep: dict  # layer → (H,) keep-vector, for the layers with heads switched off
    steps: "_Steps"  # what every block shares: score offset, RoPE tables
    inputs: "_Inputs | None"  # the first block's input by its parts, if the model made it


class _Steps(NamedTuple):
    """What every block of one pass shares, made once per pass."""

    offset: np.ndarray | None  # (H or 1, T, T): ALiBi bias and −inf on hidden keys
    rope: tuple | None  # RoPE's (cos, sin) tables forward and back, each (T, Dh)


class _Block(NamedTuple):
    """One block's forward pass, kept for its backward pass.

    Head arrays are 5-dimensional, (B, Hkv, G, T, Dh): the G = H / Hkv query heads
    that share a K/V head sit on their own axis, and K and V have G = 1 there, which
    the matrix products broadcast. Arrays called ``…_rows`` are (B·T, ·): every token of
    every batch row, one row each, as the projections take them.
    """

    rows: np.ndarray  # (B·T, D) the block's input
    q: np.ndarray  # (B, Hkv, G, T, Dh) after RoPE, already divided by √Dh
    k: np.ndarray  # (B, Hkv, 1, T, Dh) after RoPE
    v_t: np.ndarray  # (B, Hkv, 1, Dh, T) V transposed, contiguous
    attn: np.ndarray  # (B, Hkv, G, T, T) the attention weights
    concat: np.ndarray  # (B·T, D) the heads that are on, side by side
    rows_chosen: np.ndarray | None = None  # (N, D) the last block's rows[chosen]
    concat_chosen: np.ndarray | None = None  # (N, D) and concat[chosen]


def _heads(rows: np.ndarray, B: int, T: int, n_kv: int, group: int) -> np.ndarray:
    """The head view (B, Hkv, G, T, Dh) of projected rows (B·T, Hkv·G·Dh): no copy.

    Column block ``j·G + g`` of ``rows`` is query head g of K/V head j, as in
    :func:`attnlab.attention.split_heads`. Each (T, Dh) matrix of the view has rows
    ``Hkv·G·Dh`` numbers apart and unit steps along Dh, a layout BLAS reads directly,
    so the products below neither copy their inputs nor their outputs (``out=``).
    """
    return rows.reshape(B, T, n_kv, group, -1).transpose(0, 2, 3, 1, 4)


_ONES: dict = {}


def _ones(n: int, dtype) -> np.ndarray:
    """A column of n ones: ``a @ _ones(n)`` sums the last axis of a as one matrix product,
    much faster than ``a.sum(axis=-1)`` on many short rows."""
    key = (n, np.dtype(dtype).str)
    if key not in _ONES:
        ones = np.ones((n, 1), dtype=dtype)
        ones.setflags(write=False)
        _ONES[key] = ones
    return _ONES[key]


@functools.lru_cache(maxsize=64)
def _score_offset(n_heads: int, T: int, causal: bool, alibi: bool, dtype: str):
    """What the scores get added before the softmax, (H or 1, T, T), or None.

    The ALiBi bias where a key is visible and −inf where the causal mask hides it:
    one addition does both (``s + b`` and ``s + (−inf) = −inf``, exactly as adding the
    bias and then hiding the keys).
    """
    if not (causal or alibi):
        return None
    offset = (alibi_bias(n_heads, T, dtype=dtype) if alibi
              else np.zeros((1, T, T), dtype=dtype))
    if causal:
        offset = np.where(causal_mask(T), offset, -np.inf).astype(dtype)
    offset.setflags(write=False)
    return offset


@functools.lru_cache(maxsize=64)
def _rope_tables(rope: RoPE, T: int, d_head: int, dtype: str):
    """RoPE as tables for :func:`_rotate`: ``(cos, sin)`` forward and back, and ``partner``.

    Forward turns by the angles of positions 0 … T−1, back by the opposite angles (a
    rotation's transpose); each table is (T, 1, Dh), the same for every head, with
    ``cos`` on both members of a pair and ``−sin``, ``+sin`` on the first and second.
    The cos and sin are those of :meth:`attnlab.positional.RoPE.apply`. ``partner``
    (Dh,) is the index of the other member of every dimension's pair. Made once per
    (rope, T): :meth:`RoPE.apply` would compute the angles four times a block.
    """
    if rope.convention == "interleaved":  # pairs (2i, 2i+1)
        first, second = np.arange(0, d_head, 2), np.arange(1, d_head, 2)
    else:  # pairs (i, i + Dh/2)
        first, second = np.arange(d_head // 2), np.arange(d_head // 2, d_head)
    partner = np.empty(d_head, dtype=int)
    partner[first], partner[second] = second, first
    tables = []
    for positions in (np.arange(T), -np.arange(T)):
        angles = rope.angles(positions, d_head)  # (T, Dh/2), float64
        cos = np.cos(angles).astype(dtype)
        sin = np.sin(angles).astype(dtype)
        cos2 = np.empty((T, 1, d_head), dtype=dtype)
        sin2 = np.empty((T, 1, d_head), dtype=dtype)
        cos2[:, 0, first], cos2[:, 0, second] = cos, cos
        sin2[:, 0, first], sin2[:, 0, second] = -sin, sin
        cos2.setflags(write=False)
        sin2.setflags(write=False)
        tables.append((cos2, sin2))
    partner.setflags(write=False)
    return tuple(tables), partner, rope.attention_factor


def _rotate(rows: np.ndarray, tables, which: int, T: int, d_head: int) -> np.ndarray:
    """RoPE on projected rows (B·T, n·Dh) of n heads: a new (B·T, n·Dh) array.

    Each pair (x1, x2) turns into (x1·cos − x2·sin, x1·sin + x2·cos), that is
    ``x·[cos, cos] + partner(x)·[−sin, sin]``: the same products and sums as
    :meth:`attnlab.positional.RoPE.apply` (a + (−b) is a − b exactly), on the rows as
    the projection made them. ``which`` is 0 for the angles of the positions, 1 for the
    opposite angles.
    """
    (cos2, sin2), partner, factor = tables[0][which], tables[1], tables[2]
    x = rows.reshape(-1, T, rows.shape[1] // d_head, d_head)  # (B, T, n, Dh)
    out = x * cos2  # (B, T, n, Dh)
    out += x[..., partner] * sin2  # each dimension's pair partner
    if factor != 1.0:
        out *= np.asarray(factor, dtype=out.dtype)
    return out.reshape(rows.shape)


def _norm_bound(q: np.ndarray, k_t: np.ndarray) -> np.ndarray:
    """An upper bound of every row's largest score, (B, Hkv, G, T): |q_i| · max_j |k_j|
    (Cauchy–Schwarz; the offsets add nothing positive) for q (B, Hkv, G, T, Dh) and
    k_t (B, Hkv, 1, Dh, T)."""
    ones = _ones(q.shape[-1], q.dtype)  # (Dh, 1): sums over Dh as products
    q_norms = np.sqrt((q * q) @ ones)[..., 0]  # (B, Hkv, G, T)
    k_norms = np.sqrt(ones.T @ (k_t * k_t))[..., 0, :]  # (B, Hkv, 1, T)
    return q_norms * k_norms.max(axis=-1, keepdims=True)  # (B, Hkv, G, T)


# per dtype: R, √tiny and log √tiny of _softmax_rows (np.finfo is slow to ask every call)
_SOFTMAX_LIMITS = {dtype: (reach, np.sqrt(np.finfo(dtype).tiny),
                           float(np.log(np.sqrt(np.finfo(dtype).tiny))))
                   for dtype, reach in ((np.float32, 64.0), (np.float64, 600.0))}


def _softmax_rows(scores: np.ndarray, offset, recompute, row_bound=None) -> np.ndarray:
    """The softmax over keys of ``scores`` (..., T, T), in place; ``offset`` added first.

    Subtracting any constant c_i from row i leaves its softmax unchanged. The usual c_i
    is the row's maximum, but numpy takes the maxima of many short rows slowly, and
    subtracting one number per row is itself a slow pass (one short loop per row).

    Usually every row gets the same c = M − R, where M is the largest of all the scores
    (one fast reduction): no entry then exceeds exp(R), so nothing overflows (R = 64 in
    float32, 600 in float64), and c folds into the small ``offset`` table, so the shift
    costs no pass of its own. A row's largest entry is at least its score against its
    own key, s_ii (every query sees its own key); if some s_ii lies more than R + L
    below M, its row could underflow (exp(−L) = √tiny: L ≈ 43 in float32), and the rows
    are shifted one by one instead, by c_i = max(s_ii, M_b − R) with M_b the largest
    score of the row's T×T block (one head of one sequence), as sharp heads need.
    A row's sum is at least exp(row max − c_i); the rows whose sum still lies below
    √tiny are made again (from ``recompute()``, all the scores) and shifted by their
    own maxima. The rows are summed by a matrix product with ones.
    """
    T = scores.shape[-1]
    reach, tiny, log_tiny = _SOFTMAX_LIMITS[scores.dtype.type]  # R, √tiny, −L
    largest = scores.max()  # M, over every score, hidden ones too
    own = scores.diagonal(axis1=-2, axis2=-1)  # (..., T) s_ii, a view
    if own.min() >= largest - reach + log_tiny:  # one shift serves every row
        shift = largest - scores.dtype.type(reach)  # c
        if offset is not None:  # ALiBi bias and −inf on hidden keys, and −c, in one pass
            scores += offset - shift  # offset is (H or 1, T, T): a small table
        else:
            scores -= shift
    else:  # scores far apart (sharp heads): a shift per row
        if offset is not None:
            scores += offset
        bound = scores.reshape(*scores.shape[:-2], T * T).max(axis=-1)[..., None]  # M_b
        if row_bound is not None:  # a bound per row, often far below its block's M_b
            bound = np.minimum(bound, row_bound())  # (..., T)
        shift = own.copy()  # (..., T): s_ii (the offset adds 0 there)
        np.maximum(shift, bound - reach, out=shift)
        scores -= shift[..., None]
    np.exp(scores, out=scores)
    sums = scores @ _ones(T, scores.dtype)  # (..., T, 1)
    bad = ~(sums[..., 0] >= tiny)  # (..., T) rows that underflowed (or are not finite)
    if bad.any():  # rare: those rows again, shifted by their own maxima
        rows = recompute()[bad]  # (n, T); only the few bad rows are worked on
        if offset is not None:
            rows += np.broadcast_to(offset, scores.shape)[bad]
        rows -= rows.max(axis=-1, keepdims=True)
        np.exp(rows, out=rows)
        scores[bad] = rows
        sums[bad] = rows.sum(axis=-1, keepdims=True)
    scores *= 1.0 / sums  # one division per row, not per score
    return scores


def _block_forward(x, proj: MHAProjections, config: ModelConfig, steps: _Steps, keep,
                   inputs: _Inputs | None = None,
                   chosen: np.ndarray | None = None) -> tuple[np.ndarray, _Block]:
    """One block ``y = x + MHA(x)`` on x (B, T, D): y and what the backward pass needs.

    The arithmetic of :func:`attnlab.attention.attention_pass` (the forward pass of
    :func:`attnlab.multi_head_attention`), arranged for speed: the heads are views of the
    projections (:func:`_heads`), each product writes straight into the array the next
    step reads, and the softmax is :func:`_softmax_rows`. ``inputs``: x is the model's
    own ``embed[tokens] + pos`` (:func:`_project`). ``chosen`` (N,) for the last block:
    only those rows of y reach the loss, so only their queries are made (the others
    stay 0) and only their rows of y are returned, (N, D).
    """
    w_q, w_k, w_v, w_o = proj
    B, T, D = x.shape
    H, Hkv, Dh = config.heads
    G = H // Hkv
    # q = x (W_q / √Dh): the scaling on D·D numbers instead of a pass over the B·T·D
    # queries (or the H·T² scores); with Dh a power of 4 it is exact, bit for bit
    w_q = w_q * (1.0 / math.sqrt(Dh))
    rows = x.reshape(B * T, D)  # (B·T, D)
    rows_chosen = concat_chosen = None  # (N, D) each, for the last block
    if chosen is None:
        q = _project(rows, w_q, inputs, T)  # (B·T, D)
    else:
        q = np.zeros((B * T, D), dtype=x.dtype)  # (B·T, D): the rows no loss reads stay 0
        rows_chosen = rows[chosen]  # gathered once, for y and for dW_q
        q[chosen] = (_project(rows, w_q, inputs, T, chosen) if inputs is not None
                     else rows_chosen @ w_q)
    k = _project(rows, w_k, inputs, T)  # (B·T, Hkv·Dh)
    if steps.rope is not None:
        q = _rotate(q, steps.rope, 0, T, Dh)
        k = _rotate(k, steps.rope, 0, T, Dh)
    q = _heads(q, B, T, Hkv, G)  # (B, Hkv, G, T, Dh), a view
    k = _heads(k, B, T, Hkv, 1)  # (B, Hkv, 1, T, Dh)
    v = _heads(_project(rows, w_v, inputs, T), B, T, Hkv, 1)  # (B, Hkv, 1, T, Dh)
    if G > 1:
        q = np.ascontiguousarray(q)  # the backward pass stacks each group's queries
    k_t = np.ascontiguousarray(k.swapaxes(-1, -2))  # (B, Hkv, 1, Dh, T)
    scores = q @ k_t  # (B, Hkv, G, T, T), already divided by √Dh
    attn = _softmax_rows(scores, steps.offset, lambda: q @ k_t,
                         lambda: _norm_bound(q, k_t))
    concat = np.empty((B * T, D), dtype=x.dtype)  # (B·T, D)
    np.matmul(attn, v, out=_heads(concat, B, T, Hkv, G))  # every head's output, in place
    if keep is not None:
        concat.reshape(B * T, H, Dh)[...] *= keep[:, None]  # off: adds nothing
    if chosen is not None:  # the last block: only the rows the loss reads, (N, D)
        concat_chosen = concat[chosen]  # gathered once, for y and for dW_o
        y = concat_chosen @ w_o
        y += rows_chosen
    else:
        y = (concat @ w_o).reshape(B, T, D)  # (B, T, D)
        y += x
    v_t = np.ascontiguousarray(v.swapaxes(-1, -2))  # (B, Hkv, 1, Dh, T)
    return y, _Block(rows, q, k, v_t, attn, concat, rows_chosen, concat_chosen)


def _forward(params, tokens, config, ablate, chosen):
    """The rows ``chosen`` (N,) of the residual stream after the last block (N, D) and
    the trace of the forward pass, for training; arguments already checked."""
    keep = _heads_kept(ablate, config)
    x, inputs = _embed(params, tokens, config)  # (B, T, D)
    return _layers(params, x, config, keep, inputs, chosen)


def _layers(params, x, config, keep, inputs: _Inputs | None = None,
            chosen: np.ndarray | None = None):
    """The attention layers on the residual stream x (B, T, D), before the unembedding;
    ``inputs`` if x is the model's own ``embed[tokens] + pos``; the last block's rows
    ``chosen`` (N,) only, if given."""
    T = x.shape[1]
    rope = config.rope
    offset = _score_offset(config.n_heads, T, bool(config.causal),
                           config.positional == "alibi", config.dtype)
    if config.positional == "t5":  # learned: made anew each pass, shared by the layers
        offset = t5_bias(params["t5_bias"], T, config.t5_max_distance,
                         bidirectional=not config.causal)  # (H, T, T)
        if config.causal:
            offset = np.where(causal_mask(T), offset, -np.inf).astype(config.dtype)
    if offset is not None and len(offset) > 1:
        offset = offset.reshape(config.n_kv_heads, -1, T, T)  # (Hkv, G, T, T) as the scores
    steps = _Steps(offset, None if rope is None else _rope_tables(rope, T, config.d_head,
                                                                   config.dtype))
    blocks = []
    for layer in range(config.n_layers):
        last = layer == config.n_layers - 1
        x, block = _block_forward(x, layer_projections(params, layer), config, steps,
                                  keep.get(layer), inputs if layer == 0 else None,
                                  chosen if last else None)
        blocks.append(block)
    return x, _Trace(blocks, keep, steps, inputs)


def _block_backward(d_y, block: _Block, proj: MHAProjections, keys, config, steps: _Steps,
                    keep, grads, inputs: _Inputs | None = None,
                    chosen: np.ndarray | None = None):
    """Gradients of one block ``y = x + MHA(x)``: fills ``grads`` and returns dL/dx.

    With ``inputs`` (x = embed[tokens] + pos, see :func:`_project`) the result is
    ``(dL/dembed, dL/dpos)`` instead, (V, D) and (T, D) or None: every product with x
    goes through its parts. With ``chosen`` (the last block), ``d_y`` is (N, D), the rows
    the loss reads; the others are 0, and so are their query gradients.

    ``d_y`` and the result are (B·T, D), one row per token. The forward pass
    (:func:`_block_forward`) and the backward pass in reverse order (``d·`` is the
    gradient of the loss with respect to ·). The G query heads that share a K/V head
    are stacked along time, (Hkv, G·T), where their gradients meet, so the products
    below add up the gradients of a shared K/V head by themselves::

        q, k, v = x W_q / √Dh, x W_k, x W_v  →  dW = xᵀ d(q|k|v),  dx = dy + Σ d(q|k|v) Wᵀ
        q, k = RoPE(q), RoPE(k)               →  d(q|k) rotated back by the opposite angles
        S = q kᵀ (+ bias, mask)               →  dq = dS k,  dk = dSᵀ q
        A = softmax(S)                        →  dS = A ⊙ (dA − Σ_j A ⊙ dA)
        O = A v                               →  dA = dO vᵀ,  dv = Aᵀ dO
        y = x + concat(O) W_o                 →  dW_o = concatᵀ dy,  dO = dy W_oᵀ
    """
    w_q, w_k, w_v, w_o = proj
    key_q, key_k, key_v, key_o = keys
    H, Hkv, Dh = config.heads
    G = H // Hkv
    B, _, _, T, _ = block.attn.shape
    scale = 1.0 / math.sqrt(Dh)
    w_q = w_q * scale  # the forward pass's W_q / √Dh: d_q below is the gradient of q = x w_q
    rows, attn, concat = block.rows, block.attn, block.concat

    # y = x + concat(O) W_o
    if chosen is None:
        grads[key_o] = concat.T @ d_y  # (D, D)
        d_concat = d_y @ w_o.T  # (B·T, D)
    else:  # only the rows the loss reads
        grads[key_o] = block.concat_chosen.T @ d_y  # (D, D)
        d_concat = np.zeros_like(concat)  # (B·T, D)
        d_concat[chosen] = d_y @ w_o.T
        if inputs is not None:  # a one-layer model: the full rows, for the parts below
            d_y, d_y_chosen = np.zeros_like(concat), d_y
            d_y[chosen] = d_y_chosen
    if keep is not None:
        d_concat.reshape(B * T, H, Dh)[...] *= keep[:, None]  # an off head passes nothing
    d_heads_out = _heads(d_concat, B, T, Hkv, G)  # dO (B, Hkv, G, T, Dh), a view
    # O = A v
    d_attn = d_heads_out @ block.v_t  # dA (B, Hkv, G, T, T)
    # A = softmax(S), row by row: dS = A ⊙ (dA − Σ_j A·dA); hidden keys have A = 0.
    # Σ_j A_ij·dA_ij = Σ_j A_ij (dO_i·v_j) = dO_i·O_i: one product per query over Dh,
    # not over all T keys (the trick FlashAttention uses). Summed over Dh by a product
    # with ones, for every (token, head) at once: (B·T·H,) = (B, T, Hkv, G).
    row_dot = (d_concat * concat).reshape(-1, Dh) @ _ones(Dh, d_y.dtype)
    d_attn -= row_dot.reshape(B, T, Hkv, G, 1).transpose(0, 2, 3, 1, 4)
    d_attn *= attn  # dS (B, Hkv, G, T, T)
    if config.positional == "t5":  # the bias is added to S: dbias = dS, summed over B
        grads["t5_bias"] = grads.get("t5_bias", 0.0) + d_attn.sum(axis=0).reshape(H, T, T)
    # S = q kᵀ, with q already divided by √Dh
    d_q = np.empty_like(d_concat)  # (B·T, D)
    d_k = np.empty((B * T, Hkv * Dh), dtype=d_y.dtype)  # (B·T, Hkv·Dh)
    d_v = np.empty_like(d_k)
    np.matmul(d_attn, block.k, out=_heads(d_q, B, T, Hkv, G))
    if G == 1:  # one query head per K/V head: (B, H, T, ·) throughout
        d_s_t, queries = d_attn[:, :, 0].swapaxes(-1, -2), block.q[:, :, 0]
        attn_t, d_heads_out = attn[:, :, 0].swapaxes(-1, -2), d_heads_out[:, :, 0]
    else:  # the group's queries stacked along time: (B, Hkv, G·T, ·)
        d_s_t = d_attn.reshape(B, Hkv, G * T, T).swapaxes(-1, -2)
        queries = block.q.reshape(B, Hkv, G * T, Dh)
        attn_t = attn.reshape(B, Hkv, G * T, T).swapaxes(-1, -2)
        d_heads_out = np.ascontiguousarray(d_heads_out).reshape(B, Hkv, G * T, Dh)
    # dk: the group's gradients add up
    np.matmul(d_s_t, queries, out=_heads(d_k, B, T, Hkv, 1)[:, :, 0])
    np.matmul(attn_t, d_heads_out, out=_heads(d_v, B, T, Hkv, 1)[:, :, 0])  # dv, likewise
    if steps.rope is not None:
        # a rotation's transpose is the rotation by the opposite angle
        d_q = _rotate(d_q, steps.rope, 1, T, Dh)
        d_k = _rotate(d_k, steps.rope, 1, T, Dh)
    # q, k, v = x W_q, x W_k, x W_v, and the residual path x → y
    projections = ((key_q, w_q, d_q), (key_k, w_k, d_k), (key_v, w_v, d_v))
    if inputs is not None:
        d_x = _first_block_backward(d_y, projections, inputs, config.vocab_size, grads)
        grads[key_q] *= scale  # dW_q = dw_q / √Dh, on D·D numbers
        return d_x
    if chosen is not None:  # dq is 0 outside the rows the loss reads
        d_q_chosen = d_q[chosen]  # (N, D)
        grads[key_q] = block.rows_chosen.T @ d_q_chosen  # (D, D)
        grads[key_q] *= scale
        d_rows = d_k @ w_k.T  # (B·T, D)
        d_rows += d_v @ w_v.T
        d_y += d_q_chosen @ w_q.T  # d_y is this function's own (N, D) array
        d_rows[chosen] += d_y  # and the residual path passes dy
        grads[key_k], grads[key_v] = rows.T @ d_k, rows.T @ d_v
        return d_rows
    d_rows = d_y.copy()  # (B·T, D): the residual path passes dy through
    for key, w, d_proj in projections:
        grads[key] = rows.T @ d_proj  # (D, ·)
        d_rows += d_proj @ w.T  # (B·T, D)
    grads[key_q] *= scale
    return d_rows


def _first_block_backward(d_y, projections, inputs: _Inputs, vocab_size: int, grads):
    """The last step of :func:`_block_backward` when x = embed[tokens] + pos.

    x W = one_hot(tokens) embed W + pos W (over the batch), so with G = one_hotᵀ d(q|k|v)
    (V, ·), the gradients summed token by token, and P = Σ_batch d(q|k|v) (T, ·)::

        dW = embedᵀ G + posᵀ P,   dembed = one_hotᵀ dy + Σ G Wᵀ,   dpos = Σ_batch dy + Σ P Wᵀ

    Products of V and T rows instead of B·T. A token used twice collects both gradients.
    """
    T = len(inputs.pos) if inputs.pos is not None else None
    one_hot = np.eye(vocab_size, dtype=d_y.dtype)[inputs.tokens].T  # (V, B·T)
    d_embed = one_hot @ d_y  # (V, D)
    d_pos = None if T is None else d_y.reshape(-1, T, d_y.shape[1]).sum(axis=0)  # (T, D)
    for key, w, d_proj in projections:
        per_token = one_hot @ d_proj  # (V, ·)
        grads[key] = inputs.embed.T @ per_token  # (D, ·)
        d_embed += per_token @ w.T
        if T is not None:
            per_position = d_proj.reshape(-1, T, d_proj.shape[1]).sum(axis=0)  # (T, ·)
            grads[key] += inputs.pos.T @ per_position
            d_pos += per_position @ w.T
    return d_embed, d_pos


@_one_blas_thread
def loss_grads_accuracy(params, batch, config, *, ablate=None):
    """Loss, gradients and accuracy on one batch, as :func:`attnlab.model.loss_grads_accuracy`.

    Not taught: the fast path :func:`attnlab.training.train` takes.
    """
    config = check_config(config)
    params = model_params(params, param_shapes(config))
    tokens, targets, loss_mask = model_batch(batch, config)

    # only the positions the mask selects reach the loss: the last block's output, the
    # unembedding, the softmax and their gradients are computed there alone
    chosen = np.flatnonzero(loss_mask)  # (N,) indices into the B·T rows
    x_chosen, trace = _forward(params, tokens, config, ablate, chosen)  # (N, D)
    T = tokens.shape[1]
    logits = x_chosen @ params["unembed"]  # (N, V)
    loss, d_logits, accuracy = _cross_entropy(logits, targets.reshape(-1)[chosen])  # (N, V)

    grads = {"unembed": x_chosen.T @ d_logits}  # (D, V)
    d_x = d_logits @ params["unembed"].T  # (N, D): the other positions pass 0
    for layer in reversed(range(config.n_layers)):
        last = layer == config.n_layers - 1
        d_x = _block_backward(d_x, trace.blocks[layer], layer_projections(params, layer),
                              layer_keys(layer), config, trace.steps, trace.keep.get(layer),
                              grads, trace.inputs if layer == 0 else None,
                              chosen if last else None)
    # the first block took x = embed[tokens] + pos and gave the gradients of both parts
    grads["embed"], d_pos = d_x  # (V, D), (T, D) or None
    if config.positional == "t5":  # every layer's dbias (H, T, T) to the table's buckets
        grads["t5_bias"] = t5_table_grad(grads["t5_bias"], T, config)
    if config.positional == "learned":
        grads["pos"] = np.zeros_like(params["pos"])
        grads["pos"][:T] = d_pos  # rows past T get no gradient
    return loss, {name: grads[name] for name in params if name in grads}, accuracy
