"""Scaled dot-product attention and its pieces.

Pure numpy; learner-facing errors are ``ValueError`` with a Japanese message that names
the argument and its value. Shapes use the vocabulary of the package docstring.
"""

import math
from typing import NamedTuple

import numpy as np

from attnlab._validate import as_float_array as _as_float_array
from attnlab._validate import (
    at_least_2d,
    broadcasts_to,
    finite,
    generator,
    positive_int,
    rope_head,
)
from attnlab.positional import RoPE, RoPETables


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    The maximum along ``axis`` is subtracted before exponentiating, so inputs of any
    magnitude (even ``±1e4``) give finite weights. ``-inf`` entries get weight 0; a
    slice that is ``-inf`` everywhere has no valid entry and raises.

    Parameters
    ----------
    x : np.ndarray
        Scores of any shape; float32 stays float32.
    axis : int
        The axis whose entries are normalised to sum to 1.

    Returns
    -------
    np.ndarray
        Same shape and floating dtype as ``x``; non-negative, sums to 1 along ``axis``.

    Taught in chapter 01.
    """
    x = _as_float_array(x, "x")
    if x.ndim == 0:
        raise ValueError("x はスカラーではなく、少なくとも1次元の配列である必要があります: ndim=0")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} は x の次元数 ndim={x.ndim} の範囲外です")
    if x.shape[axis] == 0:
        raise ValueError(f"x の axis={axis} の長さが 0 です: x.shape={x.shape}")
    if np.isnan(x).any():
        raise ValueError("x に NaN が含まれています")
    x_max = np.max(x, axis=axis, keepdims=True)
    if np.isneginf(x_max).any():
        raise ValueError(
            f"x のある行（axis={axis} 方向）がすべて -inf です: 重みを配る先がありません"
        )
    e = np.exp(x - x_max)  # largest entry becomes exp(0) = 1: no overflow
    return e / np.sum(e, axis=axis, keepdims=True)


def causal_mask(seq_len: int) -> np.ndarray:
    """Causal (look-ahead) mask: query ``i`` may attend to key ``j`` only if ``j <= i``.

    Parameters
    ----------
    seq_len : int
        Sequence length T.

    Returns
    -------
    np.ndarray
        Bool, shape (T, T); True where attention is allowed (lower triangle and the
        diagonal).

    Taught in chapter 01.
    """
    T = positive_int(seq_len, "seq_len")
    return np.tril(np.ones((T, T), dtype=bool))


def _check_mask(mask, scores_shape: tuple[int, ...], target: str) -> np.ndarray:
    """``mask`` as a bool array that broadcasts to ``scores_shape`` and leaves every
    query at least one key; otherwise a Japanese ValueError."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise ValueError(
            "mask は bool 配列（True = 参照してよい）で渡してください: "
            f"mask.dtype={mask.dtype}（加算型の -inf マスクなら bool に変換してください）"
        )
    if not broadcasts_to(mask.shape, scores_shape):
        raise ValueError(
            f"mask の形 {mask.shape} はスコアの形 {tuple(scores_shape)} {target} に"
            "ブロードキャストできません"
        )
    empty = ~mask.any(axis=-1)  # (..., Tq): True where a query keeps no key
    if empty.any():
        *lead, query = (int(i) for i in np.argwhere(np.atleast_1d(empty))[0])
        at = f"先頭の軸の番号 {tuple(lead)} の" if lead else ""
        raise ValueError(
            f"mask が{at}クエリ位置 {query} のキーをすべて隠しています: "
            "どのキーも参照できないクエリには重みを配れません"
        )
    return mask


def _check_bias(bias, scores_shape: tuple[int, ...], target: str) -> np.ndarray:
    """``bias`` as a finite float array that broadcasts to ``scores_shape``."""
    bias = finite(_as_float_array(bias, "bias"), "bias")
    if not broadcasts_to(bias.shape, scores_shape):
        raise ValueError(
            f"bias の形 {bias.shape} はスコアの形 {tuple(scores_shape)} {target} に"
            "ブロードキャストできません"
        )
    return bias


def scaled_dot_product_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``softmax(q kᵀ / √Dh) v``: every query's output is a weighted average of ``v``.

    Parameters
    ----------
    q : np.ndarray
        Queries, shape (..., Tq, Dh).
    k : np.ndarray
        Keys, shape (..., Tk, Dh).
    v : np.ndarray
        Values, shape (..., Tk, Dv).
    mask : np.ndarray of bool, optional
        Broadcastable to (..., Tq, Tk); True = the query may attend to that key,
        False = the key is hidden (its score becomes ``-inf`` before the softmax).
        Every query must keep at least one key.
    bias : np.ndarray, optional
        Added to the scaled scores before the softmax, broadcastable to (..., Tq, Tk)
        (ALiBi's distance penalty is such a bias).

    Returns
    -------
    out : np.ndarray
        Shape (..., Tq, Dv).
    weights : np.ndarray
        Attention weights, shape (..., Tq, Tk); each row sums to 1.

    Leading axes (batch, heads) broadcast. float32 inputs give float32 outputs.

    Taught in chapter 01.
    """
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    v = _as_float_array(v, "v")
    for name, arr in (("q", q), ("k", k), ("v", v)):
        finite(at_least_2d(arr, name, "(..., T, 次元)"), name)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q と k の最後の次元 (Dh) が一致しません: q.shape={q.shape}, k.shape={k.shape}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k と v の系列長 (Tk) が一致しません: k.shape={k.shape}, v.shape={v.shape}"
        )
    d_k = q.shape[-1]
    try:
        scores = q @ k.mT / math.sqrt(d_k)  # (..., Tq, Tk); mT: k transposed
    except ValueError:
        raise ValueError(
            f"q と k の先頭の軸（バッチ・ヘッド）がブロードキャストできません: "
            f"q.shape={q.shape}, k.shape={k.shape}"
        ) from None
    target = "(..., Tq, Tk)"
    if bias is not None:
        scores += _check_bias(bias, scores.shape, target)  # float32 scores stay float32
    if mask is not None:
        scores = np.where(_check_mask(mask, scores.shape, target), scores, -np.inf)
    weights = softmax(scores)  # (..., Tq, Tk); hidden keys get weight 0
    try:
        out = weights @ v  # (..., Tq, Dv)
    except ValueError:
        raise ValueError(
            f"v の先頭の軸（バッチ・ヘッド）が q, k とブロードキャストできません: "
            f"q.shape={q.shape}, v.shape={v.shape}"
        ) from None
    return out, weights


# --- heads -------------------------------------------------------------------------------

class HeadCounts(NamedTuple):
    """What :func:`head_counts` returns."""

    n_heads: int  # H
    n_kv_heads: int  # Hkv
    d_head: int  # Dh = D / H


def head_counts(d_model: int, n_heads, n_kv_heads=None) -> HeadCounts:
    """Check how ``d_model`` is cut into heads: H query heads sharing Hkv K/V heads.

    Parameters
    ----------
    d_model : int
        D; must be divisible by ``n_heads``.
    n_heads : int
        H.
    n_kv_heads : int, optional
        Hkv; must divide H. None means H.

    Returns
    -------
    HeadCounts
        ``(n_heads, n_kv_heads, d_head)`` as Python ints; ValueError in Japanese if the
        numbers do not fit together.

    Taught in chapter 03.
    """
    n_heads = positive_int(n_heads, "n_heads")
    if d_model % n_heads:
        raise ValueError(
            f"d_model={d_model} は n_heads={n_heads} で割り切れません: "
            "各ヘッドの幅 d_k = d_model / n_heads が整数になる必要があります"
        )
    n_kv_heads = n_heads if n_kv_heads is None else positive_int(n_kv_heads, "n_kv_heads")
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_heads={n_heads} は n_kv_heads={n_kv_heads} で割り切れません: "
            "K/V ヘッド 1 つを同じ数のクエリヘッドで共有するためです"
        )
    return HeadCounts(n_heads, n_kv_heads, d_model // n_heads)


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """Cut the last axis into ``n_heads`` blocks and move the heads in front of T.

    Parameters
    ----------
    x : np.ndarray
        Shape (..., T, D); D must be divisible by ``n_heads``.
    n_heads : int

    Returns
    -------
    np.ndarray
        Shape (..., H, T, D/H); head ``i`` holds columns ``i·Dh:(i+1)·Dh`` of ``x``.
        A view of ``x`` (no copy).

    Taught in chapter 03.
    """
    x = at_least_2d(np.asarray(x), "x", "(..., T, D)")
    *lead, T, D = x.shape
    n_heads, _, d_head = head_counts(D, n_heads)
    return x.reshape(*lead, T, n_heads, d_head).swapaxes(-2, -3)  # (..., H, T, Dh)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Inverse of :func:`split_heads`: concatenate the heads along the last axis.

    Parameters
    ----------
    x : np.ndarray
        Shape (..., H, T, Dh).

    Returns
    -------
    np.ndarray
        Shape (..., T, H·Dh); columns ``i·Dh:(i+1)·Dh`` are head ``i``.

    Taught in chapter 03.
    """
    x = np.asarray(x)
    if x.ndim < 3:
        raise ValueError(f"x は (..., H, T, Dh) の形の 3 次元以上の配列である必要があります: "
                         f"x.shape={x.shape}")
    *lead, H, T, d_head = x.shape
    return x.swapaxes(-2, -3).reshape(*lead, T, H * d_head)  # (..., T, D)


class MHAProjections(NamedTuple):
    """The four projection matrices of one attention layer (no biases, as in the article).

    Attributes
    ----------
    w_q : np.ndarray
        (D, D); columns ``i·Dh:(i+1)·Dh`` are query head ``i``'s W_Q.
    w_k : np.ndarray
        (D, Hkv·Dh); columns ``j·Dh:(j+1)·Dh`` are K/V head ``j``'s W_K.
    w_v : np.ndarray
        (D, Hkv·Dh); likewise for W_V.
    w_o : np.ndarray
        (D, D); rows ``i·Dh:(i+1)·Dh`` take head ``i``'s output.

    Query head ``i`` reads K/V head ``i // (H // Hkv)``.

    Taught in chapter 03.
    """

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray


def init_mha(
    d_model: int,
    n_heads: int,
    n_kv_heads: int | None = None,
    *,
    rng: np.random.Generator,
    dtype=np.float64,
) -> MHAProjections:
    """Random projection matrices, normal with standard deviation ``1/√D``.

    Parameters
    ----------
    d_model, n_heads : int
        D and H; D must be divisible by H.
    n_kv_heads : int, optional
        Hkv, dividing H; None means H (plain multi-head attention), 1 is MQA.
    rng : np.random.Generator
    dtype : numpy dtype
        Floating dtype of the matrices (float32 for speed).

    Returns
    -------
    MHAProjections
        w_q (D, D), w_k and w_v (D, Hkv·Dh), w_o (D, D).

    Taught in chapter 03.
    """
    d_model = positive_int(d_model, "d_model")
    n_heads, n_kv_heads, d_head = head_counts(d_model, n_heads, n_kv_heads)
    rng = generator(rng)
    std = 1.0 / math.sqrt(d_model)

    def draw(cols: int) -> np.ndarray:
        return (std * rng.standard_normal((d_model, cols))).astype(dtype, copy=False)

    d_kv = n_kv_heads * d_head
    return MHAProjections(w_q=draw(d_model), w_k=draw(d_kv), w_v=draw(d_kv), w_o=draw(d_model))


# --- argument checks of multi-head attention -------------------------------------------------

def _four_matrices(proj) -> MHAProjections:
    """``proj`` as an MHAProjections, or a ValueError if it is not four matrices."""
    if not isinstance(proj, tuple) or len(proj) != 4:
        raise ValueError(
            "proj は MHAProjections(w_q, w_k, w_v, w_o) である必要があります: "
            f"type={type(proj).__name__}"
        )
    return MHAProjections(*proj)


def _check_proj(proj, d_model: int, n_kv_heads: int, d_head: int) -> MHAProjections:
    """``proj`` as MHAProjections of float arrays with the shapes the heads imply."""
    proj = _four_matrices(proj)
    proj = MHAProjections(*(finite(_as_float_array(w, n), n)
                           for w, n in zip(proj, MHAProjections._fields, strict=True)))
    d_kv = n_kv_heads * d_head
    expected = {"w_q": (d_model, d_model), "w_k": (d_model, d_kv), "w_v": (d_model, d_kv),
                "w_o": (d_model, d_model)}
    for name, shape in expected.items():
        actual = getattr(proj, name).shape
        if actual != shape:
            raise ValueError(
                f"proj.{name} の形 {actual} が d_model={d_model}, n_kv_heads={n_kv_heads}, "
                f"d_head={d_head} から決まる形 {shape} と一致しません"
            )
    return proj


def _check_rope(rope, positions, lead: tuple[int, ...], T: int, heads: HeadCounts, d_model):
    """The positions RoPE rotates by, as (T,) or (..., 1, T) (the same for every head)."""
    if rope is None:
        if positions is not None:
            raise ValueError(
                "positions は rope を指定したときだけ使われます: rope=None なのに positions が"
                "渡されました（位置を足し込む方式なら、x に位置の表を足してから渡してください）"
            )
        return None
    if not isinstance(rope, RoPE):
        raise ValueError(
            f"rope は attnlab.positional.RoPE(...) か None である必要があります: rope={rope!r}"
        )
    rope_head(heads.d_head, f"d_model={d_model}, n_heads={heads.n_heads}")
    positions = np.arange(T) if positions is None else np.asarray(positions)
    if positions.ndim == 0 or positions.shape[-1] != T:
        raise ValueError(
            f"positions の長さが系列長 T={T} と一致しません: positions.shape={positions.shape}"
        )
    if not broadcasts_to(positions.shape, (*lead, T)):
        raise ValueError(
            f"positions の形 {positions.shape} が x の先頭の軸と合いません: "
            f"(T,) か {(*lead, T)} にブロードキャストできる形にしてください"
        )
    return positions[..., None, :] if positions.ndim > 1 else positions  # (..., 1, T) or (T,)


class _Checked(NamedTuple):
    """The checked arguments of multi-head attention."""

    x: np.ndarray  # (..., T, D)
    proj: MHAProjections
    heads: HeadCounts
    mask: np.ndarray | None  # broadcastable to (..., H, T, T)
    bias: np.ndarray | None  # broadcastable to (..., H, T, T)
    positions: np.ndarray | None  # (T,) or (..., 1, T) if RoPE is used


def _check_mha(x, proj, n_heads, n_kv_heads, mask, rope, positions, bias) -> _Checked:
    """Check the arguments of multi-head attention once, for both implementations."""
    x = at_least_2d(finite(_as_float_array(x, "x"), "x"), "x", "(..., T, D)")
    *lead, T, d_model = x.shape
    heads = head_counts(d_model, n_heads, n_kv_heads)
    proj = _check_proj(proj, d_model, heads.n_kv_heads, heads.d_head)
    attn_shape, target = (*lead, heads.n_heads, T, T), "(..., H, T, T)"
    mask = None if mask is None else _check_mask(mask, attn_shape, target)
    bias = None if bias is None else _check_bias(bias, attn_shape, target)
    positions = _check_rope(rope, positions, tuple(lead), T, heads, d_model)
    return _Checked(x, proj, heads, mask, bias, positions)


# --- the forward pass -----------------------------------------------------------------------

class AttentionPass(NamedTuple):
    """What one multi-head attention pass computes, kept for a backward pass.

    The G = H / Hkv query heads that share a K/V head have an axis of their own, as
    in :func:`attention_pass`; K and V have 1 there.
    """

    out: np.ndarray  # (..., T, D)
    attn: np.ndarray  # (..., H, T, T)
    q: np.ndarray  # (..., Hkv, G, T, Dh) after RoPE
    k: np.ndarray  # (..., Hkv, 1, T, Dh) after RoPE
    v: np.ndarray  # (..., Hkv, 1, T, Dh)
    concat: np.ndarray  # (..., T, D) the heads that are on, side by side


def attention_pass(
    x: np.ndarray,
    proj: MHAProjections,
    heads: HeadCounts,
    *,
    mask=None,
    bias=None,
    rope: RoPE | RoPETables | None = None,
    positions=None,
    keep: np.ndarray | None = None,
) -> AttentionPass:
    """The one forward pass of multi-head (and grouped-query) attention, unchecked.

    :func:`multi_head_attention` checks its arguments and calls this; so does the toy
    model (:mod:`attnlab.model`), which also switches heads off (``keep``, (H,) of 0 and
    1), passes RoPE as :class:`attnlab.positional.RoPETables` (cos and sin made once for
    all its blocks) and reads the arrays kept here in its backward pass.

    Query head ``j·G + g`` reads K/V head ``j``: q gets a group axis of G query heads,
    K and V a group axis of 1, and the matrix products broadcast over it (the group axis
    is chapter 04's grouped-query attention; with G = 1 it is plain multi-head attention).

    Chapters call :func:`multi_head_attention` (chapter 03), which runs this; the book page
    「model.py を読む」 (``book/model_walkthrough.md``) reads it line by line.

    Not taught: no chapter imports it; the book page 「model.py を読む」 reads it.
    """
    w_q, w_k, w_v, w_o = proj
    n_heads, n_kv_heads, d_head = heads
    *lead, T, _ = x.shape
    group = n_heads // n_kv_heads  # G, query heads per K/V head

    q = split_heads(x @ w_q, n_heads)  # (..., H, T, Dh)
    k = split_heads(x @ w_k, n_kv_heads)  # (..., Hkv, T, Dh)
    v = split_heads(x @ w_v, n_kv_heads)  # (..., Hkv, T, Dh)
    if rope is not None:
        positions = np.arange(T) if positions is None else positions  # (T,) or (..., 1, T)
        q = rope.apply(q, positions)
        k = rope.apply(k, positions)
    q = q.reshape(*lead, n_kv_heads, group, T, d_head)  # (..., Hkv, G, T, Dh)
    k = k[..., None, :, :]  # (..., Hkv, 1, T, Dh): one K/V head for its whole group
    v = v[..., None, :, :]  # (..., Hkv, 1, T, Dh)

    scores = q @ k.mT / math.sqrt(d_head)  # (..., Hkv, G, T, T); mT: k transposed
    scores = scores.reshape(*lead, n_heads, T, T)  # (..., H, T, T)
    if bias is not None:
        scores += bias  # float32 scores stay float32
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)  # hidden keys get weight 0
    attn = softmax(scores)  # (..., H, T, T)
    out_heads = attn.reshape(*lead, n_kv_heads, group, T, T) @ v  # (..., Hkv, G, T, Dh)
    out_heads = out_heads.reshape(*lead, n_heads, T, d_head)  # (..., H, T, Dh)
    if keep is not None:
        out_heads = out_heads * keep[:, None, None]  # a switched-off head adds nothing
    concat = merge_heads(out_heads)  # (..., T, D)
    out = concat @ w_o  # (..., T, D)
    return AttentionPass(out, attn, q, k, v, concat)


def multi_head_attention(
    x: np.ndarray,
    proj: MHAProjections,
    n_heads: int,
    *,
    n_kv_heads: int | None = None,
    mask: np.ndarray | None = None,
    rope: RoPE | None = None,
    positions=None,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-head (and grouped-query) self-attention, all heads at once.

    Project to q, k, v; split into heads; attend in every head; concatenate; apply W_O.
    With ``n_kv_heads < n_heads`` each K/V head serves ``H // Hkv`` consecutive query
    heads (GQA; ``n_kv_heads=1`` is MQA).

    Parameters
    ----------
    x : np.ndarray
        Shape (..., T, D); leading axes (batch) are optional.
    proj : MHAProjections
        w_q (D, D), w_k and w_v (D, Hkv·Dh), w_o (D, D).
    n_heads : int
        H; D must be divisible by H.
    n_kv_heads : int, optional
        Hkv; must divide H. None means H.
    mask : np.ndarray of bool, optional
        Broadcastable to (..., H, T, T); True = may attend (e.g. ``causal_mask(T)``).
    rope : RoPE, optional
        If given, each head's q and k are rotated after the projection (v is not).
    positions : array, optional
        Positions of the tokens for RoPE, shape (T,) or (..., T); default ``0 … T−1``.
    bias : np.ndarray, optional
        Added to the scaled scores, broadcastable to (..., H, T, T) (e.g. ALiBi).

    Returns
    -------
    out : np.ndarray
        Shape (..., T, D).
    attn : np.ndarray
        Every head's attention weights, shape (..., H, T, T).

    Taught in chapter 03.
    """
    c = _check_mha(x, proj, n_heads, n_kv_heads, mask, rope, positions, bias)
    result = attention_pass(c.x, c.proj, c.heads, mask=c.mask, bias=c.bias, rope=rope,
                            positions=c.positions)
    return result.out, result.attn  # (..., T, D), (..., H, T, T)


def multi_head_attention_loop(
    x: np.ndarray,
    proj: MHAProjections,
    n_heads: int,
    *,
    n_kv_heads: int | None = None,
    mask: np.ndarray | None = None,
    rope: RoPE | None = None,
    positions=None,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`multi_head_attention` written as the article's four steps, one head at a time.

    1. project x with head i's column blocks of W_Q (and its K/V head's blocks of W_K,
       W_V); 2. scaled dot-product attention in that head; 3. concatenate the heads;
    4. multiply by W_O. Slower, and equal to the batched version; the parameters and
    the returned shapes are the same.

    Taught in chapter 03.
    """
    x, (w_q, w_k, w_v, w_o), heads, mask, bias, positions = _check_mha(
        x, proj, n_heads, n_kv_heads, mask, rope, positions, bias)
    n_heads, n_kv_heads, d_head = heads
    *lead, T, D = x.shape
    group = n_heads // n_kv_heads
    if mask is not None:
        mask = np.broadcast_to(mask, (*lead, n_heads, T, T))
    if bias is not None:
        bias = np.broadcast_to(bias, (*lead, n_heads, T, T))
    if positions is not None:
        positions = positions[..., 0, :] if positions.ndim > 1 else positions  # (..., T)

    head_outputs, head_weights = [], []
    for i in range(n_heads):
        j = i // group  # the K/V head that query head i reads
        cols = slice(i * d_head, (i + 1) * d_head)
        kv_cols = slice(j * d_head, (j + 1) * d_head)
        q_i = x @ w_q[:, cols]  # (..., T, Dh)
        k_i = x @ w_k[:, kv_cols]  # (..., T, Dh)
        v_i = x @ w_v[:, kv_cols]  # (..., T, Dh)
        if rope is not None:
            q_i, k_i = rope.apply(q_i, positions), rope.apply(k_i, positions)
        out_i, weights_i = scaled_dot_product_attention(
            q_i, k_i, v_i,
            mask=None if mask is None else mask[..., i, :, :],
            bias=None if bias is None else bias[..., i, :, :],
        )  # (..., T, Dh), (..., T, T)
        head_outputs.append(out_i)
        head_weights.append(weights_i)
    concat = np.concatenate(head_outputs, axis=-1)  # (..., T, D)
    return concat @ w_o, np.stack(head_weights, axis=-3)  # (..., T, D), (..., H, T, T)


def mean_pool_kv(proj: MHAProjections, n_heads: int, n_kv_heads: int) -> MHAProjections:
    """Convert projection matrices to fewer K/V heads by mean-pooling each group (GQA).

    As in Ainslie et al. (2023): K/V head ``j`` of the result is the mean of the W_K
    (and W_V) column blocks of the heads in group ``j``. W_Q and W_O are unchanged.

    Parameters
    ----------
    proj : MHAProjections
        w_k and w_v of shape (D, Hkv_in·Dh), where Hkv_in (usually H) is a multiple of
        ``n_kv_heads``.
    n_heads : int
        H, which fixes Dh = D / H.
    n_kv_heads : int
        The number of K/V heads after pooling.

    Returns
    -------
    MHAProjections
        w_k and w_v of shape (D, n_kv_heads·Dh).

    Taught in chapter 04.
    """
    proj = _four_matrices(proj)
    d_model = np.shape(proj.w_q)[0]
    n_heads, n_kv_heads, d_head = head_counts(d_model, n_heads, n_kv_heads)
    kv_in = np.shape(proj.w_k)[-1] // d_head
    if kv_in % n_kv_heads:
        raise ValueError(
            f"元の K/V ヘッド数 {kv_in} は n_kv_heads={n_kv_heads} で割り切れません: "
            "同じ数のヘッドずつ平均するためです"
        )
    head_counts(d_model, n_heads, kv_in)  # query heads must share the input K/V heads evenly
    proj = _check_proj(proj, d_model, kv_in, d_head)

    def pool(w: np.ndarray) -> np.ndarray:
        blocks = w.reshape(d_model, n_kv_heads, kv_in // n_kv_heads, d_head)  # (D, Hkv, g, Dh)
        return blocks.mean(axis=2).reshape(d_model, n_kv_heads * d_head)  # (D, Hkv·Dh)

    return proj._replace(w_k=pool(proj.w_k), w_v=pool(proj.w_v))
