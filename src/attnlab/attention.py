"""Scaled dot-product attention and its pieces.

Pure numpy; learner-facing errors are ``ValueError`` with a Japanese message that names
the argument and its value. Shapes use the vocabulary of the package docstring.
"""

import math

import numpy as np


def _as_float_array(x, name: str) -> np.ndarray:
    """Return ``x`` as a floating array; integers and bools become float64."""
    x = np.asarray(x)
    if x.dtype == object or not (
        np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.bool_)
    ):
        raise ValueError(f"{name} は数値の配列である必要があります: dtype={x.dtype}")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    return x


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

    Taught in chapter 01 (アテンションの復習).
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


def causal_mask(T: int) -> np.ndarray:
    """Causal (look-ahead) mask: query ``i`` may attend to key ``j`` only if ``j <= i``.

    Parameters
    ----------
    T : int
        Sequence length.

    Returns
    -------
    np.ndarray
        Bool, shape (T, T); True where attention is allowed (lower triangle and the
        diagonal).

    Taught in chapter 01 (アテンションの復習).
    """
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
        raise ValueError(f"T は 1 以上の整数である必要があります: T={T!r}")
    return np.tril(np.ones((T, T), dtype=bool))


def scaled_dot_product_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
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

    Returns
    -------
    out : np.ndarray
        Shape (..., Tq, Dv).
    weights : np.ndarray
        Attention weights, shape (..., Tq, Tk); each row sums to 1.

    Leading axes (batch, heads) broadcast. float32 inputs give float32 outputs.

    Taught in chapter 01 (アテンションの復習).
    """
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    v = _as_float_array(v, "v")
    for name, arr in (("q", q), ("k", k), ("v", v)):
        if arr.ndim < 2:
            raise ValueError(
                f"{name} は (..., T, 次元) の形の2次元以上の配列である必要があります: "
                f"{name}.shape={arr.shape}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q と k の最後の次元 (Dh) が一致しません: q.shape={q.shape}, k.shape={k.shape}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k と v の系列長 (Tk) が一致しません: k.shape={k.shape}, v.shape={v.shape}"
        )
    d_k = q.shape[-1]
    scale = math.sqrt(d_k)  # a Python float: float32 scores stay float32
    try:
        scores = q @ np.swapaxes(k, -1, -2) / scale  # (..., Tq, Tk)
    except ValueError:
        raise ValueError(
            f"q と k の先頭の軸（バッチ・ヘッド）がブロードキャストできません: "
            f"q.shape={q.shape}, k.shape={k.shape}"
        ) from None
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise ValueError(
                "mask は bool 配列（True = 参照してよい）で渡してください: "
                f"mask.dtype={mask.dtype}（加算型の -inf マスクなら bool に変換してください）"
            )
        try:
            keep = np.broadcast_to(mask, scores.shape)
        except ValueError:
            raise ValueError(
                f"mask の形 {mask.shape} はスコアの形 {scores.shape} (..., Tq, Tk) に"
                "ブロードキャストできません"
            ) from None
        empty = ~keep.any(axis=-1)  # (..., Tq)
        if empty.any():
            *lead, query = (int(i) for i in np.argwhere(empty)[0])
            at = f"先頭の軸の番号 {tuple(lead)} の" if lead else ""
            raise ValueError(
                f"mask が{at}クエリ位置 {query} のキーをすべて隠しています: "
                "どのキーも参照できないクエリには重みを配れません"
            )
        scores = np.where(keep, scores, -np.inf)
    weights = softmax(scores, axis=-1)  # (..., Tq, Tk)
    try:
        out = weights @ v  # (..., Tq, Dv)
    except ValueError:
        raise ValueError(
            f"v の先頭の軸（バッチ・ヘッド）が q, k とブロードキャストできません: "
            f"q.shape={q.shape}, v.shape={v.shape}"
        ) from None
    return out, weights
