"""Chapter 03's self-checks: ``my_split_heads`` and ``my_multi_head_attention``.

As in :mod:`attnlab.checks.attention_review`, the diagnosis is computed: the check builds what
each typical mistake returns (with the reference functions) and says which one the
answer matches. Chapter 03 imports the references (``split_heads``,
``multi_head_attention`` and its loop), so an answer that is one of them, or calls one,
is refused; so is an MHA answer that calls chapter 01's ``scaled_dot_product_attention``
(chaining the chapter's cells would answer the exercise by copying them) or attnlab's
``softmax`` (the task says NumPy only; chapter 01 refuses it too). A mask mistake gets
chapter 01's diagnosis (its ``_MASK_MODES``). The two worst split mistakes first say what
head 0 received and give the code of the fix only when the same mistake comes again
(:func:`attnlab.checks.core.fix_on_repeat`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from attnlab.attention import (
    MHAProjections,
    attention_pass,
    causal_mask,
    merge_heads,
    multi_head_attention,
    multi_head_attention_loop,
    scaled_dot_product_attention,
    softmax,
    split_heads,
)
from attnlab.checks.attention_review import _DIAGNOSES as _REVIEW_DIAGNOSES
from attnlab.checks.attention_review import _MASK_MODES
from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    checker,
    fix_on_repeat,
    raised_message,
    returned_array,
    returned_pair,
    shape_of,
)

_RTOL, _ATOL = 1e-4, 1e-6  # float32 answers pass, every mistake is far outside


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=_RTOL, atol=_ATOL))


_SPLIT_REFERENCES = {
    split_heads: (
        "attnlab の split_heads を使っています（そのまま渡すか、中で呼んでいます）。"
        "この練習問題では split_heads を使わずに、reshape と軸の入れ替え（または切り出しと "
        "np.stack）で自分で書いてください。"
    ),
}
_MHA_MESSAGE = (
    "attnlab の {name} を使っています（そのまま渡すか、中で呼んでいます）。この練習問題では"
    "それを使わずに、射影・ヘッドへの分割・ヘッドごとの softmax・結合・W_O を NumPy で"
    "自分で書いてください。"
)
_MHA_REFERENCES = {
    **{function: _MHA_MESSAGE.format(name=function.__name__)
       for function in (multi_head_attention, multi_head_attention_loop, attention_pass)},
    # chapter 01 asks for the softmax written by hand; "NumPy だけで" means it here too
    softmax: (
        "attnlab の softmax を呼んでいます。この練習問題は NumPy だけで書きます。"
        "softmax も第 1 章と同じく自分で書いてください："
        "各行の最大値を引いてから exp を取り、行の和で割ります。"
    ),
    # chaining the chapter's cells (split_heads → this → merge_heads → W_O) is a copy
    scaled_dot_product_attention: (
        "第 1 章の scaled_dot_product_attention を使っています。本文の段をつなぐだけでは"
        "練習になりません。ヘッドごとのスコア・softmax・重み付き和を NumPy で自分で書いて"
        "ください（分割には自分の my_split_heads を使ってかまいません）。"
    ),
}


# --- three ways to cut the last axis into heads (one right, two wrong) -------------------

def _split(a: np.ndarray, n_heads: int, how: str) -> np.ndarray:
    """(..., T, D) → (..., H, T, Dh), the right way or as a typical mistake does."""
    *lead, T, D = a.shape
    d_head = D // n_heads
    if how == "right":
        return split_heads(a, n_heads)
    if how == "strided":  # head i = columns i, i+H, i+2H, ...
        return np.moveaxis(a.reshape(*lead, T, d_head, n_heads), -1, -3)
    if how == "reversed":  # the right blocks, last head first
        return split_heads(a, n_heads)[..., ::-1, :, :]
    return a.reshape(*lead, n_heads, T, d_head)  # "bare": reshape without the transpose


def _merge(heads: np.ndarray, how: str) -> np.ndarray:
    """(..., H, T, Dh) → (..., T, D), the inverse of :func:`_split` for each ``how``."""
    *lead, H, T, d_head = heads.shape
    if how == "right":
        return merge_heads(heads)
    if how == "strided":
        return np.moveaxis(heads, -3, -1).reshape(*lead, T, H * d_head)
    if how == "reversed":
        return merge_heads(heads[..., ::-1, :, :])
    return heads.reshape(*lead, T, H * d_head)


_SPLIT_FIX = ("reshape(…, T, H, Dh) としてから H と T の軸を入れ替えてください"
              "（swapaxes(-2, -3) など）。")


def _split_diagnosis(how: str, T: int, D: int, H: int, exercise: str,
                     what: str = "x") -> str:
    """What head 0 received from the split ``how`` of a (T, D) ``what`` into H heads;
    the code of the fix only when the same mistake comes again (:func:`fix_on_repeat`)."""
    d_head = D // H
    if how == "strided":
        taken = [str(c) for c in range(0, D, H)]  # head 0's Dh columns, H apart
        columns = ", ".join(taken) if len(taken) <= 4 else ", ".join(taken[:3]) + ", …"
        wrong = (f"ヘッド 0 が受け取ったのは {what} の列 {columns} でした（H 列おき、H = {H}）。"
                 f"ヘッド ℓ が持つのは連続した列 ℓ·Dh から (ℓ+1)·Dh − 1 で、ヘッド 0 なら"
                 f"列 0〜{d_head - 1} です。")
        fix = "reshape(…, T, Dh, H) ではなく、" + _SPLIT_FIX
        return fix_on_repeat(f"{exercise}/strided", wrong, fix)
    if how == "bare":
        rows, rest = divmod(T * d_head, D)
        part = f"行 0〜{rows - 1} の全部" if rows > 1 else "行 0 の全部" if rows else ""
        if rest:
            part += ("と" if part else "") + f"行 {rows} の先頭 {rest} 個"
        wrong = (f"reshape で (H, T, Dh) の形にしただけで、軸の入れ替えをしていません。"
                 f"ヘッド 0 が受け取ったのは、{what} を行の順に読んだ最初の T·Dh = "
                 f"{T * d_head} 個の値（{part}）でした。形は合っていても、"
                 f"ヘッド 0 が持つのは、すべての行（トークン）の列 0〜{d_head - 1} です。")
        return fix_on_repeat(f"{exercise}/bare", wrong, _SPLIT_FIX)
    return ("ヘッドが逆の順に並んでいます。ヘッド 0 が x の最初の列のブロック（列 0:Dh）、"
            "最後のヘッドが最後のブロックを持ちます（[::-1] やループの向きを確かめてください）。")


# --- check_split_heads ---------------------------------------------------------------------

@dataclass(frozen=True)
class _SplitCase:
    name: str
    x: np.ndarray  # (..., T, D)
    n_heads: int


def _split_cases() -> list[_SplitCase]:
    rng = np.random.default_rng(20260303)
    # T, H and Dh all differ, and the batch size differs from H, so a wrong axis shows;
    # none is the chapter's (512, 8) or (8, 4), and d_model = 30 with 5 heads of 6
    # columns is no power of two, so an answer fitted to the chapter's sizes fails
    return [
        _SplitCase("x が (T, D) = (5, 12)、ヘッド 4 つのケース", rng.normal(size=(5, 12)), 4),
        _SplitCase("x が (B, T, D) = (2, 5, 12)、ヘッド 3 つのケース",
                   rng.normal(size=(2, 5, 12)), 3),
        _SplitCase("x が (2, 3, 5, 12) の 4 次元、ヘッド 6 つのケース",
                   rng.normal(size=(2, 3, 5, 12)), 6),
        _SplitCase("x が (T, D) = (7, 30)、ヘッド 5 つのケース", rng.normal(size=(7, 30)), 5),
    ]


def _diagnose_split(case: _SplitCase, value: Any) -> np.ndarray:
    """The answer as an array of the expected shape, or a Mistake that names the error."""
    *lead, T, D = case.x.shape
    H = case.n_heads
    d_head = D // H
    expected_shape = (*lead, H, T, d_head)
    shape = shape_of(value)
    if shape == (*lead, T, H, d_head):
        raise Mistake(
            f"返り値の形が (…, T, H, Dh) = {shape} です。reshape の後で H と T の軸を入れ替えて、"
            f"(…, H, T, Dh) = {expected_shape} にしてください。"
        )
    if lead and shape == (H, *lead, T, d_head):
        raise Mistake(
            f"ヘッドの軸を先頭に積んでいます（形 {shape}）。np.stack(…, axis=-3) のように、"
            f"T の直前に置いて (…, H, T, Dh) = {expected_shape} にしてください。"
        )
    if shape == (*lead, H, d_head, T):
        raise Mistake(
            f"返り値の形が (…, H, Dh, T) = {shape} です。各ヘッドは (T, Dh) の形で、"
            "行がトークン、列がそのヘッドの次元です。"
        )
    return returned_array(value, "返り値", expected_shape)


@checker("2〜4 次元の x で split_heads と一致しました。")
def check_split_heads(func: Callable) -> None:
    """Check ``func(x, n_heads)``: x (…, T, D) → (…, H, T, Dh), head i = columns i·Dh:(i+1)·Dh.

    Prints 【正解】, 【未実装】 or 【不正解】 with a diagnosis (head i taken as the strided
    columns i, i+H, …; a bare reshape to (H, T, Dh) without the transpose; the heads in
    reverse order; the heads left after T; the heads stacked in front of the batch axis;
    only 2-D x handled; ``split_heads`` itself used).

    Parameters
    ----------
    func : callable
        The student's ``my_split_heads(x, n_heads)``.

    Returns
    -------
    CheckResult
        True (``.passed``) if every hidden case matches.

    Taught in chapter 03.
    """
    for case in _split_cases():
        result = call_refusing(func, _SPLIT_REFERENCES, case.x, case.n_heads)
        if isinstance(result, Raised):
            message = raised_message(result, case.name)
            if case.x.ndim > 2:
                message += (
                    "x の先頭には任意個のバッチの軸 (…) が付きます。"
                    "*lead, T, D = x.shape のように、形を後ろから読んでください。"
                )
            raise Mistake(message)
        heads = _diagnose_split(case, result)
        if _close(heads, _split(case.x, case.n_heads, "right")):
            continue
        T, D = case.x.shape[-2:]
        for how in ("strided", "bare", "reversed"):
            if _close(heads, _split(case.x, case.n_heads, how)):
                diagnosis = _split_diagnosis(how, T, D, case.n_heads, "ex03-split-heads")
                raise Mistake(f"{case.name}: {diagnosis}")
        raise Mistake(
            f"{case.name}: 値が split_heads と一致しません。ヘッド 0 は x の列 0:Dh、"
            "ヘッド 1 は列 Dh:2·Dh、… を、元の並びのまま持ちます（x[..., :, i*Dh:(i+1)*Dh]）。"
        )


# --- check_multi_head_attention ------------------------------------------------------------

@dataclass(frozen=True)
class _MHACase:
    name: str
    x: np.ndarray  # (T, D)
    weights: MHAProjections  # four (D, D) matrices
    n_heads: int
    mask: np.ndarray | None  # (T, T) bool
    #: the case differs from an unmasked case checked before it only by its mask
    mask_only: bool = False


#: How large the scores of the large-score case are at least (exp overflows past 709).
LARGE_SCORE = 800.0


def _mha_cases() -> list[_MHACase]:
    rng = np.random.default_rng(20260304)

    def layer(T: int, D: int) -> tuple[np.ndarray, MHAProjections]:
        x = rng.normal(size=(T, D))  # (T, D)
        w = MHAProjections(*(rng.normal(size=(D, D)) / np.sqrt(D) for _ in range(4)))
        return x, w

    x, w = layer(5, 12)
    # d_model = 15, 5 heads of 3: no size is a power of two or a square, so √d_model,
    # d_head and √d_head are three different divisors, and nothing is the chapter's 512/8
    x2, w2 = layer(7, 15)
    # every row keeps a key and hides one, unlike the causal mask's last row
    mask = np.array([[1, 0, 1, 1, 0, 1, 0], [1, 1, 0, 0, 1, 1, 0], [0, 1, 1, 1, 0, 0, 1],
                     [1, 0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 1, 1, 0], [1, 1, 0, 1, 0, 1, 1],
                     [0, 0, 1, 1, 1, 0, 1]], dtype=bool)
    return [
        _MHACase("マスクなし・ヘッド 3 つのケース", x, w, 3, None),
        _MHACase("因果マスク・ヘッド 3 つのケース", x, w, 3, causal_mask(5), mask_only=True),
        _MHACase("まだらなマスク・ヘッド 5 つのケース", x2, w2, 5, mask),
        # scores beyond 709, where exp overflows unless each row's maximum is subtracted
        _MHACase("スコアがとても大きいケース", 30.0 * x, w, 3, None),
    ]


_SCALES = ("head", "model", "none", "d_head")
_DIAGNOSES = {
    ("scale", "model"): (
        "スコアを √d_model で割っています。各ヘッドのクエリとキーは d_k = d_model / h 次元"
        "（ヘッドの幅）なので、割るのは √d_k です。"
    ),
    ("scale", "none"): "スコアを √d_k（d_k はヘッドの幅）で割るのを忘れています。",
    ("scale", "d_head"): "スコアを d_k で割っています。割るのは √d_k です。",
    # chapter 01's diagnoses of the same mask mistakes (_MASK_MODES), but for "ignored":
    **{("mask", mode): _REVIEW_DIAGNOSES[("mask", mode)]
       for mode in _MASK_MODES if ("mask", mode) in _REVIEW_DIAGNOSES},
    ("mask", "ignored"): (
        "mask を無視しています。mask が False の位置のスコアを、どのヘッドでも softmax の前に"
        " -inf にしてください（(T, T) の mask は (H, T, T) のスコアにブロードキャストできます）。"
    ),
}
_MASK_ONLY = "マスクなしのケースは通ったので、違いはマスクのかけ方にあります。"


def _softmax_or_nan(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row hidden entirely is nan (as a student's gives)."""
    with np.errstate(all="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _candidate_weights(case: _MHACase, split: str, scale: str,
                       mask_mode: str = "right") -> np.ndarray:
    """Every head's weights (H, T, T) with the given (possibly wrong) choices; the mask
    is used as chapter 01's ``mask_mode`` says (:data:`_MASK_MODES`)."""
    D = case.x.shape[-1]
    d_head = D // case.n_heads
    q = _split(case.x @ case.weights.w_q, case.n_heads, split)  # (H, T, Dh)
    k = _split(case.x @ case.weights.w_k, case.n_heads, split)  # (H, T, Dh)
    divisor = {"head": np.sqrt(d_head), "model": np.sqrt(D), "none": 1.0,
               "d_head": float(d_head)}[scale]
    scores = q @ k.swapaxes(-1, -2) / divisor  # (H, T, T)
    mask = case.mask
    if mask is None or mask_mode == "ignored":
        return _softmax_or_nan(scores)
    if mask_mode == "after_softmax":
        return _softmax_or_nan(scores) * mask
    if mask_mode == "zero":
        return _softmax_or_nan(np.where(mask, scores, 0.0))
    keep = {"right": mask, "inverted": ~mask,
            "causal": np.tril(np.ones(mask.shape, dtype=bool))}[mask_mode]
    return _softmax_or_nan(np.where(keep, scores, -np.inf))


def _close_where_defined(weights: np.ndarray, candidate: np.ndarray) -> bool:
    """``weights`` match ``candidate`` on every query row where the candidate is defined
    (a row it hides entirely is nan; a student's -1e9 there gives equal weights)."""
    rows = np.all(np.isfinite(candidate), axis=-1)  # (H, T)
    return bool(rows.any()) and weights.shape == candidate.shape and _close(
        weights[rows], candidate[rows])


def _diagnose_weights(case: _MHACase, weights: np.ndarray) -> str:
    modes = _MASK_MODES if case.mask is not None else ("right",)
    for split, scale, mask_mode in product(("right", "strided", "bare", "reversed"), _SCALES,
                                           modes):
        if (split, scale, mask_mode) == ("right", "head", "right"):
            continue
        if _close_where_defined(weights, _candidate_weights(case, split, scale, mask_mode)):
            T, D = case.x.shape
            text = [] if split == "right" else [
                _split_diagnosis(split, T, D, case.n_heads, "ex03-mha", "Q = x @ w_q")]
            text += [_DIAGNOSES[f] for f in (("scale", scale), ("mask", mask_mode))
                     if f in _DIAGNOSES]
            if (split, scale) == ("right", "head") and case.mask_only:
                text.insert(0, _MASK_ONLY)
            return "".join(text)
    if case.mask is not None:
        return ((_MASK_ONLY if case.mask_only else
                 "マスクなしのケースは通ったので、まずマスクのかけ方を確かめてください。")
                + "mask が False の位置のスコアだけを softmax の前に -inf（または -1e9）にし、"
                "True の位置のスコアはそのまま残します（True が「参照してよい」位置です）。")
    sums = weights.sum(axis=-1)
    if not np.allclose(sums, 1.0, atol=1e-5):
        return ("重みの各行の和が 1 になっていません。softmax は各ヘッドの各行（キーの軸、"
                "axis=-1）で取ります。")
    return (
        "重みが正しい値と一致しません。Q = x @ w_q を H 個のヘッドに分け、ヘッドごとに "
        "softmax(QKᵀ / √d_k) を計算しているか、途中の値を split_heads と "
        "scaled_dot_product_attention で確かめてみてください。"
    )


def _diagnose_not_finite(case: _MHACase, weights: np.ndarray) -> str:
    """Where the nan or inf came from: an unstable softmax, or a row the mask hid entirely."""
    if case.mask is None:
        return ("nan か inf が出ました。スコアが大きいと exp があふれます。softmax の前に"
                "各行の最大値を引くと、あふれずに計算できます（数値的に安定な softmax）。")
    bad = np.any(~np.isfinite(weights), axis=(0, 2)) if weights.ndim == 3 else None  # (T,)
    if bad is not None and bad.any() and np.all(case.mask[bad].all(axis=-1)):
        rows = ", ".join(str(i) for i in np.flatnonzero(bad))
        return (f"nan か inf が出たのは、mask がすべて True の行（行 {rows}）だけです。"
                + _REVIEW_DIAGNOSES[("mask", "inverted")]
                + "向きが逆だと、この行ではすべてのキーが隠れて softmax が 0 ÷ 0 = nan に"
                "なります。")
    return ((_MASK_ONLY if case.mask_only else
             "マスクなしのケースは通ったので、nan か inf はマスクから来ているはずです。")
            + "隠す位置のスコアを softmax の前に -inf にし、どの行にも見えるキーが残ることを"
            "確かめてください（-inf に 0 を掛けると nan になります）。")


def _diagnose_out(case: _MHACase, out: np.ndarray, weights: np.ndarray) -> str:
    """The weights are right: which mistake after them reproduces ``out``?"""
    v = split_heads(case.x @ case.weights.w_v, case.n_heads)  # (H, T, Dh)
    heads = weights @ v  # (H, T, Dh)
    for merge in ("right", "strided", "bare", "reversed"):
        concat = _merge(heads, merge)  # (T, D)
        for use_w_o in (True, False):
            if (merge, use_w_o) == ("right", True):
                continue
            if _close(out, concat @ case.weights.w_o if use_w_o else concat):
                text = []
                if merge == "bare":
                    text.append(
                        "ヘッドを結合するとき、(H, T, Dh) をそのまま reshape(T, D) しています。"
                        "先に H と T の軸を入れ替えて (T, H, Dh) にしてから reshape してください。"
                    )
                if merge == "strided":
                    text.append(
                        "ヘッドを結合するとき、ヘッドの次元を 1 列ずつ交互に並べています。"
                        "ヘッド 0 の出力は列 0:Dh、ヘッド 1 の出力は列 Dh:2·Dh、…に"
                        "まとめて置きます。"
                    )
                if merge == "reversed":
                    text.append(
                        "ヘッドを逆の順に結合しています。ヘッド 0 の出力が先頭（列 0:Dh）、"
                        "最後のヘッドの出力が最後です。"
                    )
                if not use_w_o:
                    text.append(
                        "最後に W_O（w_o）を掛けるのを忘れています。out は、結合したものに w_o を"
                        "掛けた (T, D) です（各ヘッドが W_O の自分の行のブロックを通して書き込み、"
                        "それが足し合わされます）。"
                    )
                return "".join(text)
    return (
        "重みは正しいのに、出力 out が一致しません。各ヘッドの出力 weights_i @ V_i を"
        "結合して (T, D) にし、w_o を掛けたものが out です。"
    )


def _unpack_mha(value: Any, case: _MHACase) -> tuple[np.ndarray, np.ndarray]:
    T, D = case.x.shape
    H = case.n_heads
    value = returned_pair(value, (T, D), (H, T, T))
    second = shape_of(value[1])
    out = returned_array(value[0], "out（1 つ目の返り値）", (T, D))
    if second in ((T, T), (1, T, T)) or second == (H, T, T):
        collapsed = _collapsed(value[1], case)
        if collapsed == "mean":
            raise Mistake(
                "重みをヘッドについて平均しています。weights はヘッドごとの重みを並べた "
                f"(H, T, T) = {(H, T, T)} で返してください。ヘッドごとに違う重みを持てることが、"
                "ヘッドを分ける理由です。"
            )
        if collapsed == "one":
            raise Mistake(
                f"1 つのヘッドの重みだけを返しています。すべてのヘッドの重みを (H, T, T) = "
                f"{(H, T, T)} の形で返してください。"
            )
        if second != (H, T, T):
            raise Mistake(
                f"weights の形が {second} です。ヘッドごとの重みを並べた (H, T, T) = "
                f"{(H, T, T)} で返してください。"
            )
    weights = returned_array(value[1], "weights（2 つ目の返り値）", (H, T, T))
    return out, weights


def _collapsed(value: Any, case: _MHACase) -> str | None:
    """"mean" if ``value`` is every head's weights averaged over the heads, "one" if it
    is one head's weights (broadcast or not), None otherwise."""
    try:
        weights = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None
    right = _candidate_weights(case, "right", "head")  # (H, T, T)
    T = right.shape[-1]
    if weights.shape not in ((T, T), (1, T, T), right.shape):
        return None
    if np.allclose(weights, right.mean(axis=0), rtol=_RTOL, atol=_ATOL):
        return "mean"
    if weights.shape != right.shape and any(
            np.allclose(weights, head, rtol=_RTOL, atol=_ATOL) for head in right):
        return "one"
    return None


@checker("出力も各ヘッドの重みも一致しました。")
def check_multi_head_attention(func: Callable) -> None:
    """Check ``func(x, w_q, w_k, w_v, w_o, n_heads, mask=None) -> (out, weights)``.

    x is (T, D), each w (D, D), mask (T, T) bool or None; out (T, D), weights (H, T, T).
    Prints 【正解】, 【未実装】 or 【不正解】 with a diagnosis (strided, bare-reshape or
    reversed heads, W_O forgotten, scores divided by √d_model (or not at all, or by
    d_head), the mask ignored, inverted, applied as 0 or after the softmax, or replaced by
    a causal mask of one's own (chapter 01's mask modes), nan where the mask hides a
    whole row, an unstable softmax on large scores, weights averaged over heads, heads
    merged without the transpose or in reverse order, out and weights swapped, None, an
    exception, ``multi_head_attention``, its loop or attnlab's ``softmax`` used).

    Parameters
    ----------
    func : callable
        The student's ``my_multi_head_attention``.

    Returns
    -------
    CheckResult
        True (``.passed``) if every hidden case matches.

    Taught in chapter 03.
    """
    for case in _mha_cases():
        args = (case.x, *case.weights, case.n_heads)
        if case.mask is None:
            result = call_refusing(func, _MHA_REFERENCES, *args)
        else:
            result = call_refusing(func, _MHA_REFERENCES, *args, mask=case.mask)
        if isinstance(result, Raised):
            message = raised_message(result, case.name)
            if isinstance(result.error, TypeError) and case.mask is not None and (
                    "mask" in str(result.error)):
                message += ("mask 引数を受け取れるよう、def my_multi_head_attention(x, w_q, w_k, "
                            "w_v, w_o, n_heads, mask=None) と書いてください。")
            raise Mistake(message)
        out, weights = _unpack_mha(result, case)
        if not (np.all(np.isfinite(out)) and np.all(np.isfinite(weights))):
            raise Mistake(f"{case.name}: {_diagnose_not_finite(case, weights)}")
        ref_out, ref_weights = multi_head_attention(case.x, case.weights, case.n_heads,
                                                    mask=case.mask)
        if not _close(weights, ref_weights):
            raise Mistake(f"{case.name}: {_diagnose_weights(case, weights)}")
        if not _close(out, ref_out):
            raise Mistake(f"{case.name}: {_diagnose_out(case, out, weights)}")
