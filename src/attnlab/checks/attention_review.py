"""Chapter 01's self-check: ``my_attention(q, k, v, mask=None) -> (out, weights)``.

The diagnosis is computed, not guessed from the code: the check builds what each typical
mistake would return (with the reference functions) and says which one the answer
matches. The hidden cases have sizes unlike the chapter's example (T = 5, d_k = 4): none
is square, none a power of two, and one has a single query, so an answer written for the
example alone fails. The chapter imports ``scaled_dot_product_attention`` and
``softmax``, so an answer that calls them is rejected with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from attnlab.attention import scaled_dot_product_attention, softmax
from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    call_student,
    checker,
    raised_message,
    returned_array,
    returned_pair,
    shape_of,
)

_MASK_MODES = ("right", "ignored", "zero", "inverted", "after_softmax", "causal")

_DIAGNOSES = {
    ("scale", "none"): "√d_k で割るのを忘れています。スコアは q @ k.T / np.sqrt(d_k) です。",
    ("scale", "d"): "d_k で割っています。割るのは √d_k（np.sqrt(d_k)）です。",
    ("axis", 0): (
        "softmax を取る軸が違います。各クエリ（行）の重みの和が 1 になるよう、キーの軸"
        "（axis=-1）で正規化してください。いまは列（axis=0）ごとに和が 1 です。"
    ),
    ("mask", "ignored"): (
        "mask を無視しています。mask が False の位置のスコアを -inf にしてください。"
    ),
    ("mask", "zero"): (
        "隠す位置のスコアを 0 にしています。e^0 = 1 なので、隠したはずのキーにも重みが"
        "漏れます。0 ではなく -np.inf にしてください。"
    ),
    ("mask", "inverted"): (
        "mask の向きが逆です。True が「参照してよい」位置で、隠すのは False の位置です。"
    ),
    ("mask", "after_softmax"): (
        "softmax の後で重みを 0 にしています。それでは各行の和が 1 でなくなります。"
        "softmax の前に、隠す位置のスコアを -inf にしてください。"
    ),
    ("mask", "causal"): (
        "渡された mask ではなく、自分で作った因果マスク（np.tril）を使っていませんか。"
        "mask は因果マスクとは限りません。引数の mask をそのまま使ってください。"
    ),
}

#: What each wrong divisor of the scores is, when it is √ of a size of the case.
_DIVISOR_SIZES = {
    "Tk": "キーの数 Tk（k.shape[0]）",
    "Tq": "クエリの数 Tq（q.shape[0]）",
    "d_v": "バリューの幅 d_v（v.shape[-1]）",
}
#: √d_k of the chapter's example (d_k = 4): an answer that hard-codes it divides by 2.
_EXAMPLE_DIVISOR = 2.0

#: The package's functions that compute what my_attention must compute. Chapter 01
#: imports them in its setup cell, so an answer could call them instead of its own code.
_REFERENCES = {
    scaled_dot_product_attention: (
        "scaled_dot_product_attention を呼んでいます。この練習問題では、それを使わずに、"
        "q @ k.T から出力までを自分で組み立ててください（本文のステップ 2〜5）。"
    ),
    softmax: (
        "attnlab の softmax を呼んでいます。softmax も自分で書いてください："
        "各行の最大値を引いてから exp を取り、行の和で割ります。"
    ),
}


@dataclass(frozen=True)
class _Case:
    name: str
    q: np.ndarray  # (Tq, Dh)
    k: np.ndarray  # (Tk, Dh)
    v: np.ndarray  # (Tk, Dv)
    mask: np.ndarray | None  # (Tq, Tk) bool
    large: bool = False  # scores so large that exp overflows without the row maximum


def _attention_cases() -> list[_Case]:
    rng = np.random.default_rng(20260101)
    # all different, so a wrong axis shows in the shape; none is the chapter's 5 or 4,
    # and d_k = 7 is no power of two, so √d_k = 2 hard-coded from the example fails
    Tq, Tk, d_k, d_v = 3, 6, 7, 5
    q = rng.normal(size=(Tq, d_k))
    k = rng.normal(size=(Tk, d_k))
    v = rng.normal(size=(Tk, d_v))
    # every row keeps at least one key and hides at least one, so the inverted mask is
    # valid; the mask is not causal (row 0 sees key 2, row 2 not key 0)
    mask = np.array([[1, 0, 1, 0, 0, 1], [1, 1, 0, 0, 1, 0], [0, 1, 1, 1, 0, 0]], dtype=bool)
    # one query over 11 keys, as when a model generates one token with a KV cache
    q_one = rng.normal(size=(1, 13))  # (1, d_k)
    k_one = rng.normal(size=(11, 13))  # (Tk, d_k)
    v_one = rng.normal(size=(11, 3))  # (Tk, d_v): narrower than d_k
    mask_one = np.ones((1, 11), dtype=bool)
    mask_one[0, [2, 7, 8]] = False
    return [
        _Case("マスクなしのケース", q, k, v, None),
        _Case("マスクありのケース", q, k, v, mask),
        _Case("スコアがとても大きいケース", 300.0 * q, 300.0 * k, v, None, large=True),
        _Case("クエリが 1 つのケース", q_one, k_one, v_one, mask_one),
    ]


def _candidate_weights(case: _Case, scale: str, axis: int, mask_mode: str) -> np.ndarray:
    """What ``weights`` would be with the given (possibly wrong) choices."""
    d_k = case.q.shape[-1]
    divisor = {"sqrt": np.sqrt(d_k), "none": 1.0, "d": float(d_k)}[scale]
    scores = case.q @ case.k.T / divisor  # (Tq, Tk)
    mask = case.mask
    if mask is None or mask_mode == "ignored":
        return softmax(scores, axis=axis)
    if mask_mode == "after_softmax":
        return softmax(scores, axis=axis) * mask
    if mask_mode == "zero":
        return softmax(np.where(mask, scores, 0.0), axis=axis)
    if mask_mode == "causal":
        keep = np.tril(np.ones(scores.shape, dtype=bool))
    else:
        keep = ~mask if mask_mode == "inverted" else mask
    return softmax(np.where(keep, scores, -np.inf), axis=axis)


def _constant_divisor(case: _Case, weights: np.ndarray) -> float | None:
    """The constant c with ``weights == softmax(q @ k.T / c)`` (mask applied), if any.

    Within a row, ``log w_j − log w_l = (raw_j − raw_l) / c``: c is fitted over the keys
    every row keeps, then confirmed by recomputing the weights.
    """
    raw = case.q @ case.k.T  # (Tq, Tk)
    keep = np.ones(raw.shape, dtype=bool) if case.mask is None else case.mask
    if not (np.all(weights[keep] > 0) and np.all(np.isfinite(weights))):
        return None
    a, b = [], []
    for row in range(raw.shape[0]):
        kept = keep[row]
        if kept.sum() < 2:
            continue
        a.append(raw[row, kept] - raw[row, kept].mean())
        b.append(np.log(weights[row, kept]) - np.log(weights[row, kept]).mean())
    a, b = np.concatenate(a), np.concatenate(b)
    if not np.any(b) or np.dot(a, b) <= 0:
        return None
    c = float(np.dot(a, a) / np.dot(a, b))
    candidate = softmax(np.where(keep, raw / c, -np.inf), axis=-1)
    return c if np.allclose(weights, candidate, rtol=1e-5, atol=1e-8) else None


def _divisor_message(case: _Case, c: float) -> str:
    """Name what a wrong constant divisor of the scores is."""
    (Tq, d_k), Tk, d_v = case.q.shape, case.k.shape[0], case.v.shape[1]
    sizes = {"Tk": Tk, "Tq": Tq, "d_v": d_v}
    for name, size in sizes.items():
        if size != d_k and np.isclose(c, np.sqrt(size), rtol=1e-6):
            return (f"スコアを √{size} で割っています。√ の中が d_k ではなく "
                    f"{_DIVISOR_SIZES[name]}です。d_k は q と k の最後の軸の長さ "
                    f"q.shape[-1] = {d_k} です。")
    if np.isclose(c, _EXAMPLE_DIVISOR, rtol=1e-6):
        return ("スコアを 2 で割っています。本文の例の √d_k（d_k = 4）を固定で書いていませんか。"
                f"このケースの d_k は {d_k} です。d_k は q.shape[-1] から取ってください。")
    return (f"スコアを {c:.3g} で割っているようです。割るのは √d_k = {np.sqrt(d_k):.3g} です"
            "（d_k = q.shape[-1]）。")


def _diagnose_weights(case: _Case, weights: np.ndarray) -> str:
    """Name the mistakes whose combination reproduces ``weights``."""
    modes = _MASK_MODES if case.mask is not None else ("right",)
    for scale, axis, mask_mode in product(("sqrt", "none", "d"), (-1, 0), modes):
        if (scale, axis, mask_mode) == ("sqrt", -1, "right"):
            continue
        try:
            candidate = _candidate_weights(case, scale, axis, mask_mode)
        except ValueError:  # e.g. a column that the mask hides entirely, for axis 0
            continue
        if np.allclose(weights, candidate, rtol=1e-5, atol=1e-8):
            found = [("scale", scale), ("axis", axis), ("mask", mask_mode)]
            return "".join(_DIAGNOSES[f] for f in found if f in _DIAGNOSES)
    if (c := _constant_divisor(case, weights)) is not None:
        return _divisor_message(case, c)
    sums = weights.sum(axis=-1)
    if not np.allclose(sums, 1.0, atol=1e-6):
        d_k = case.q.shape[-1]
        if np.allclose(sums, sums[0], rtol=1e-6):
            for divisor, name in ((np.sqrt(d_k), "√d_k"), (float(d_k), "d_k")):
                if np.isclose(sums[0], 1.0 / divisor, rtol=1e-6):
                    return (f"重みの各行の和がどれも {sums[0]:.3f} = 1/{name}（d_k = {d_k}）"
                            f"です。{name} で割るのは softmax の前のスコアで、softmax の後の"
                            "重みではありません。")
        worst = int(np.argmax(np.abs(sums - 1.0)))
        return (
            f"重みの各行の和が 1 になっていません（行 {worst} の和は {sums[worst]:.7g}、"
            f"1 との差 {abs(sums[worst] - 1.0):.1e}）。"
            "softmax の分母は、同じ行の exp の和です。"
        )
    return (
        "重みが正しい値と一致しません。スケーリング前のスコア q @ k.T → √d_k で割る → マスク → "
        "行ごとの softmax、の順に、途中の値を scaled_dot_product_attention と比べてみてください。"
    )


#: Wrong ways to form the scores, by what they compute (on square inputs they all work).
_SCORE_FORMS = {
    "q @ k": lambda q, k: q @ k,
    "k @ q.T": lambda q, k: k @ q.T,
    "q.T @ k": lambda q, k: q.T @ k,
}


def _probe_score_form(func: Callable) -> str | None:
    """Which wrong product of q and k does ``func`` compute, if any?

    On the hidden cases these products raise shape errors; on square inputs (Tq = Tk =
    Dh) they all have a shape, so the weights tell which one was used.
    """
    rng = np.random.default_rng(7)
    q, k, v = (rng.normal(size=(4, 4)) for _ in range(3))
    result = call_student(func, q, k, v)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        return None
    try:
        weights = np.asarray(result[1], dtype=float)
    except (TypeError, ValueError):
        return None
    if weights.shape != (4, 4):
        return None
    for form, product_of in _SCORE_FORMS.items():
        for divisor in (2.0, 1.0, 4.0):  # √d_k, none, d_k
            for axis in (-1, 0):
                if np.allclose(weights, softmax(product_of(q, k) / divisor, axis=axis),
                               rtol=1e-5, atol=1e-8):
                    return form
    return None


def _unpack_pair(value: Any, case: _Case) -> tuple[np.ndarray, np.ndarray]:
    Tq, Tk, d_v = case.q.shape[0], case.k.shape[0], case.v.shape[1]
    first, second = returned_pair(value, (Tq, d_v), (Tq, Tk))
    if shape_of(second) == (Tk, Tq) != (Tq, Tk):
        ref_weights = scaled_dot_product_attention(case.q, case.k, case.v, mask=case.mask)[1]
        try:
            transposed = np.asarray(second, dtype=float).T  # (Tq, Tk)
        except (TypeError, ValueError):
            transposed = None
        if transposed is not None and np.allclose(transposed, ref_weights, rtol=1e-5,
                                                  atol=1e-8):
            raise Mistake(
                f"weights を転置して返しています（形が (Tk, Tq) = {(Tk, Tq)}）。重みの値は"
                f"正しいので、転置せずに (Tq, Tk) = {(Tq, Tk)} のまま返してください。"
            )
        raise Mistake(
            f"weights の形が (Tk, Tq) = {(Tk, Tq)} です。"
            "スケーリング前のスコアを k @ q.T で作っていませんか。"
            f"クエリが行になるよう q @ k.T で (Tq, Tk) = {(Tq, Tk)} にしてください。"
        )
    out = returned_array(first, "out（1 つ目の返り値）", (Tq, d_v))
    weights = returned_array(second, "weights（2 つ目の返り値）", (Tq, Tk))
    return out, weights


_NAMES = ("q", "k", "v", "mask")


def _call_keeping_inputs(func: Callable, case: _Case) -> tuple[Any, tuple]:
    """Call ``func`` on copies of the case's inputs that the check can look at afterwards:
    (result, (q, k, v, mask) as the student received them)."""
    given = tuple(None if a is None else np.array(a, copy=True)
                  for a in (case.q, case.k, case.v, case.mask))
    q, k, v, mask = given

    def answer() -> Any:  # called as the notebook calls it: mask only when there is one
        return func(q, k, v) if mask is None else func(q, k, v, mask=mask)

    return call_refusing(answer, _REFERENCES), given


def _changed_inputs(case: _Case, given: tuple) -> list[str]:
    """The names of the inputs that the student's function wrote into."""
    originals = (case.q, case.k, case.v, case.mask)
    return [name for name, before, after in zip(_NAMES, originals, given, strict=True)
            if before is not None and not np.array_equal(before, after)]


def _changed_message(case: _Case, changed: list[str], result: Any) -> str:
    """Say that the answer modified its inputs in place, and why that matters."""
    names = "、".join(changed)
    try:
        _, weights = _unpack_pair(result, case)
        ref_weights = scaled_dot_product_attention(case.q, case.k, case.v, mask=case.mask)[1]
        right = bool(np.allclose(weights, ref_weights, rtol=1e-5, atol=1e-8))
    except Mistake:
        right = False
    prefix = f"{case.name}: {'値は正しいのですが、' if right else ''}受け取った {names} そのものを"
    arrays = [name for name in changed if name != "mask"]
    if not arrays:  # only the mask
        return (prefix + "書き換えています（mask[...] = … など）。呼び出した側の"
                "マスクも変わるので、同じマスクを次の呼び出しで使うと結果が違ってきます。"
                "書き換えるなら mask.copy() など新しい配列にしてください。")
    first = arrays[0]
    return (prefix + f"書き換えています（{first} /= … や {first}[...] = … など）。呼び出した側の"
            "配列も変わるので、自己注意で my_attention(x, x, x) と同じ配列を渡すと q、k、v が"
            f"一緒に変わり、重みが違ってきます。{first} = {first} / np.sqrt(d_k) のように新しい"
            "配列を作ってください。")


def _not_finite_message(case: _Case, weights: np.ndarray) -> str:
    """Why nan or inf came out: the unstable softmax only when the scores are large."""
    bad_rows = ~np.all(np.isfinite(weights), axis=-1)  # (Tq,)
    if case.mask is None and not case.large and np.all(bad_rows):
        return (f"{case.name}で、どの行の重みも nan か inf になりました。mask=None のときにも"
                "マスクをかけていませんか。np.where(None, s, -np.inf) はすべてのキーを隠すので、"
                "行がすべて -inf になります。マスクは if mask is not None: の中でだけ"
                "かけてください。")
    if case.large:
        return (f"{case.name}で nan か inf が出ました。softmax の前に各行の最大値を引くと、"
                "exp があふれずに計算できます（数値的に安定な softmax）。")
    if case.mask is not None:
        return (f"{case.name}で nan か inf が出ました（マスクなしのケースでは出ていません）。"
                "マスクのかけ方を確かめてください。隠す位置のスコアを -np.inf にし、"
                "そのあとで各行の最大値を引いて softmax を取ります。")
    return (f"{case.name}で nan か inf が出ました。スコア、exp、行の和の途中の値を印刷して、"
            "どこで出るかを確かめてください。")


def _low_precision(out: np.ndarray, weights: np.ndarray) -> str | None:
    """The dtype of a result computed in half precision (float16), else None."""
    for array in (weights, out):
        if np.issubdtype(array.dtype, np.floating) and np.finfo(array.dtype).bits < 32:
            return str(array.dtype)
    return None


@checker("隠れた 4 つのケースで、出力も重みも一致しました。")
def check_attention(func: Callable) -> None:
    """Check ``func(q, k, v, mask=None) -> (out, weights)`` against the reference.

    Prints 【正解】, 【未実装】 or 【不正解】 with a diagnosis (softmax over the wrong axis,
    √d_k forgotten, d_k used, √ of another size or of the example's d_k = 4, k not
    transposed, mask ignored, hidden scores set to 0 instead of -inf, mask inverted,
    mask applied after the softmax, a causal mask of its own instead of ``mask``, out and
    weights swapped or one of them missing, weights returned transposed, None returned, an
    unstable softmax (only when the scores are large), a mask applied when ``mask`` is None,
    √d_k applied after the softmax, float16, ``keepdims`` forgotten, the inputs modified in
    place, an exception, ``scaled_dot_product_attention`` or ``softmax`` of attnlab called).

    Parameters
    ----------
    func : callable
        The student's ``my_attention``: q (Tq, Dh), k (Tk, Dh), v (Tk, Dv), mask (Tq, Tk)
        bool or None → out (Tq, Dv), weights (Tq, Tk).

    Returns
    -------
    CheckResult
        True (``.passed``) if every hidden case matches.

    Taught in chapter 01.
    """
    for case in _attention_cases():
        inputs = (case.q, case.k, case.v)
        result, given = _call_keeping_inputs(func, case)
        if isinstance(result, Raised):
            message = raised_message(result, case.name)
            if isinstance(result.error, TypeError) and case.mask is not None and (
                    "mask" in str(result.error)):
                message += (
                    "mask 引数を受け取れるよう、def my_attention(q, k, v, mask=None) と"
                    "書いてください。"
                )
            elif (form := _probe_score_form(func)) is not None:
                message += (
                    f"スケーリング前のスコアを {form} で計算していませんか。正しくは q @ k.T で、"
                    f"形は (Tq, Tk) = {(case.q.shape[0], case.k.shape[0])} です。"
                )
            elif isinstance(result.error, ValueError) and "matmul" in str(result.error):
                message += (
                    f"行列積の形が合っていません（q {case.q.shape}, k {case.k.shape}, "
                    f"v {case.v.shape}）。q @ k.T は (Tq, Tk)、weights @ v は (Tq, Dv) です。"
                )
            elif isinstance(result.error, ValueError) and "broadcast" in str(
                    result.error) and f"({case.q.shape[0]},)" in str(result.error):
                message += (
                    "行ごとの最大値や和が (Tq,) の形になり、(Tq, Tk) のスコアと並びません。"
                    "max や sum に keepdims=True を付けて (Tq, 1) にしてください。"
                )
            raise Mistake(message)
        if changed := _changed_inputs(case, given):
            raise Mistake(_changed_message(case, changed, result))
        out, weights = _unpack_pair(result, case)
        if not (np.all(np.isfinite(out)) and np.all(np.isfinite(weights))):
            raise Mistake(_not_finite_message(case, weights))
        ref_out, ref_weights = scaled_dot_product_attention(*inputs, mask=case.mask)
        if not np.allclose(weights, ref_weights, rtol=1e-5, atol=1e-8):
            if (low := _low_precision(out, weights)) is not None:
                gap = float(np.max(np.abs(weights.astype(float) - ref_weights)))
                raise Mistake(
                    f"{case.name}: 重みが正しい値と最大 {gap:.1e} 違います。{low} の配列で"
                    f"計算していませんか。{low} では精度が足りません（有効数字は約 3 桁）。"
                    "NumPy の既定の float64 か、float32 で計算してください。"
                )
            if case.mask is None and np.allclose(weights, 1.0 / case.k.shape[0]):
                raise Mistake(
                    f"{case.name}: どの行の重みも一様（1/Tk）です。mask=None のときにも"
                    "すべてのキーを隠していませんか。np.where(None, …) は全部を隠します。"
                    "マスクは if mask is not None: の中でだけかけてください。"
                )
            raise Mistake(f"{case.name}: {_diagnose_weights(case, weights)}")
        if not np.allclose(out, ref_out, rtol=1e-5, atol=1e-8):
            raise Mistake(
                f"{case.name}: 重みは正しいのに、出力 out が weights @ v と一致しません。"
                "出力は重みでバリューを混ぜた weights @ v です。"
            )
