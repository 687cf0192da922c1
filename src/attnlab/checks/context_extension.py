"""Chapter 09's self-checks: position interpolation and the NTK-aware base.

- ``interpolate_positions(positions, train_len, target_len)`` → the positions times
  ``train_len / target_len``, as floats;
- ``ntk_scaled_base(base, scale, d_head)`` → ``base · scale^(d_head / (d_head − 2))``.

As in chapter 01's check, the diagnosis is computed: the check builds what each typical
mistake would return and says which one the answer matches.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attnlab.checks.core import Mistake, Raised, call_student, checker, raised_message
from attnlab.positional import ntk_scaled_base

# --- position interpolation ----------------------------------------------------------------

#: (case name, positions, train_len, target_len). The positions are not always 0 … T−1,
#: so a function that uses the row index instead of the given positions shows.
_POSITION_CASES = (
    ("位置 0〜15 を長さ 8 の訓練に合わせるケース", np.arange(16), 8, 16),
    ("位置が 5 から始まるケース", np.arange(5, 17), 10, 30),
    ("位置が飛び飛びのケース", np.array([0, 3, 7, 12, 20, 33, 47]), 12, 48),
)


def _interpolation_mistakes(positions: np.ndarray, train_len: int, target_len: int):
    """(what the answer would be, the diagnosis) for each typical mistake."""
    right = positions * train_len / target_len
    rows = np.arange(len(positions))
    return [
        (positions * target_len / train_len,
         "位置を target_len / train_len 倍しています。位置補間では位置を縮めるので、"
         "train_len / target_len 倍（target_len / train_len で割る）にしてください。"),
        (rows * train_len / target_len,
         "渡された positions ではなく、行の番号 0, 1, 2, … を縮めています。"
         "positions の値そのものに train_len / target_len を掛けてください。"),
        (positions * (train_len // target_len),
         "train_len // target_len は整数の割り算なので 0 になります。"
         "/ を使って train_len / target_len を小数で計算してください。"),
        (np.floor(right),
         "縮めた位置を整数に切り捨てています（// や int()、astype(int) など）。"
         "位置補間の位置は 0.5 や 1.25 のような小数のままにします。"),
    ]


def _diagnose_positions(answer: np.ndarray, positions, train_len, target_len) -> str:
    for wrong, diagnosis in _interpolation_mistakes(positions, train_len, target_len):
        if answer.shape == wrong.shape and np.allclose(answer, wrong, rtol=1e-5, atol=1e-6):
            return diagnosis
    right = positions * train_len / target_len
    if np.all(answer == np.round(answer)) and np.all(np.abs(answer - right) < 1.0 + 1e-9):
        return ("縮めた位置を整数に丸めています。位置補間の位置は 0.5 や 1.25 のような小数のまま"
                "にします。丸めると隣り合う位置が同じ角度になり、区別できなくなります。")
    return ("値が正しくありません。各位置に train_len / target_len を掛けた値"
            "（例: 位置 12、train_len=12、target_len=48 なら 3.0）を返してください。")


@checker("位置補間の位置が正しく計算できています。")
def check_interpolate_positions(func: Callable) -> None:
    """Check ``func(positions, train_len, target_len)`` → positions · train_len / target_len.

    Taught in chapter 09.
    """
    for case, positions, train_len, target_len in _POSITION_CASES:
        result = call_student(func, positions.copy(), train_len, target_len)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, case))
        if result is None:
            raise Mistake("返り値が None です。return を書き忘れていませんか。")
        try:
            answer = np.asarray(result)
            numeric = answer.dtype != object and np.issubdtype(answer.dtype, np.number)
        except Exception:  # something numpy cannot even look at
            numeric = False
        if not numeric:
            raise Mistake(f"{case}: 返り値が数値の配列ではありません"
                          f"（型 {type(result).__name__}）。")
        if answer.shape != positions.shape:
            raise Mistake(f"{case}: 返り値の形が {answer.shape} です。positions と同じ形 "
                          f"{positions.shape} で返してください。")
        right = positions * train_len / target_len
        if np.allclose(answer, right, rtol=1e-5, atol=1e-6):
            if not np.issubdtype(answer.dtype, np.floating):
                raise Mistake(f"{case}: 値は合っていますが dtype が {answer.dtype} です。"
                              "小数（浮動小数点）の配列で返してください。")
            continue
        raise Mistake(f"{case}: " + _diagnose_positions(answer.astype(float), positions,
                                                         train_len, target_len))


# --- NTK-aware base ---------------------------------------------------------------------------

#: (case name, base, scale, d_head); numpy and Python integers are passed as well.
_NTK_CASES = (
    ("base=10000、s=2、d_head=64 のケース", 10000.0, 2.0, 64),
    ("base=10000、s=4、d_head=4 のケース", 10000.0, 4.0, 4),
    ("base=500000、s=8、d_head=128 のケース", 500000.0, 8.0, 128),
    ("整数で渡したケース（base=10000、s=3、d_head=16）", 10000, 3, np.int64(16)),
)


def _ntk_mistakes(base, scale, d_head):
    """(what the answer would be, the diagnosis) for each typical mistake."""
    d = int(d_head)
    return [
        (base * scale,
         "base · s になっています。指数 d_head / (d_head − 2) が抜けているか、"
         "d_head // (d_head - 2) と整数の割り算にして指数が 1 になっています。"
         "base * scale ** (d_head / (d_head - 2)) です。"),
        (base * scale ** d / (d - 2),
         "括弧が抜けています。scale ** d_head / (d_head - 2) は "
         "(scale ** d_head) / (d_head - 2) と計算されます。指数全体を括弧で囲んで "
         "scale ** (d_head / (d_head - 2)) にしてください。"),
        (base * scale ** ((d - 2) / d),
         "指数が逆数になっています。指数は (d_head - 2) / d_head ではなく "
         "d_head / (d_head - 2) です。"),
        (scale ** (d / (d - 2)),
         "base を掛け忘れています。新しい base は base * scale ** (d_head / (d_head - 2)) です。"),
        (base / scale ** (d / (d - 2)),
         "base を割っています。NTK-aware スケーリングでは base を大きくする（掛ける）ので、"
         "base * scale ** (d_head / (d_head - 2)) です。"),
    ]


def _as_scalar(result, case: str) -> float:
    if result is None:
        raise Mistake("返り値が None です。return を書き忘れていませんか。")
    try:
        value = np.asarray(result, dtype=float)
    except (TypeError, ValueError):
        raise Mistake(f"{case}: 返り値が数ではありません（型 {type(result).__name__}）。") from None
    if value.size != 1:
        raise Mistake(f"{case}: 返り値の形が {value.shape} です。数を 1 つ返してください。")
    return float(value.reshape(()))


@checker("NTK-aware の base が正しく計算できています。")
def check_ntk_scaled_base(func: Callable) -> None:
    """Check ``func(base, scale, d_head)`` → base · scale^(d_head / (d_head − 2)).

    Taught in chapter 09.
    """
    for case, base, scale, d_head in _NTK_CASES:
        result = call_student(func, base, scale, d_head)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, case))
        value = _as_scalar(result, case)
        right = ntk_scaled_base(float(base), float(scale), int(d_head))
        if np.isclose(value, right, rtol=1e-5):
            continue
        for wrong, diagnosis in _ntk_mistakes(float(base), float(scale), int(d_head)):
            if np.isclose(value, wrong, rtol=1e-5):
                raise Mistake(f"{case}: {diagnosis}")
        raise Mistake(f"{case}: 値が {value:.6g} です。正しい値は {right:.6g} です。"
                      "base * scale ** (d_head / (d_head - 2)) を確かめてください。")
