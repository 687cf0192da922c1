"""Self-checks of context extension: position interpolation (chapter 11), the NTK-aware
base and YaRN's frequencies (chapter 09).

- ``interpolate_positions(positions, train_len, target_len)`` → the positions times
  ``train_len / target_len`` = 1/s, as floats (L′ = s·L need not be a multiple of L);
- ``ntk_scaled_base(base, scale, d_head)`` → ``base · scale^(d_head / (d_head − 2))``,
  the base whose last pair turns exactly 1/s as fast while pair 0 keeps its frequency;
- ``yarn_inv_freq(d_head, base, scale, original_max_len, beta_fast, beta_slow)`` →
  YaRN's per-pair frequencies as the reference code and transformers compute them.

As in chapter 01's check, the diagnosis is computed: the check builds what each typical
mistake would return and says which one the answer matches. The hidden cases have head
widths, lengths and scales that are not powers of two or whole numbers, and the checks
refuse the package's own functions that the chapter imports
(:func:`attnlab.checks.core.call_refusing`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    call_student,
    checker,
    raised_message,
    returned_array,
)
from attnlab.experiments.context_extension import angle_coverage
from attnlab.positional import (
    RoPE,
    by_parts_inv_freq,
    dynamic_ntk_base,
    ntk_scaled_base,
    rope_inv_freq,
    yarn_correction_range,
    yarn_gamma,
    yarn_inv_freq,
    yarn_ramp,
    yarn_turns_inv_freq,
)

# --- position interpolation ----------------------------------------------------------------

#: (case name, positions, train_len, target_len). The positions are not always 0 … T−1,
#: so a function that uses the row index instead of the given positions shows; most
#: ratios L′/L are not whole, so a scale computed as an integer shows.
_POSITION_CASES = (
    ("長さ 512 → 768（s = 1.5）のケース", np.array([0, 1, 255, 511, 600, 767]), 512, 768),
    ("位置が 5 から始まり s = 2.5 のケース", np.arange(5, 17), 10, 25),
    ("位置が飛び飛びのケース", np.array([0, 3, 7, 12, 20, 33, 47]), 12, 48),
    ("長さ 7 → 19 のケース", np.array([18, 2, 9, 0, 13]), 7, 19),
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
        *[(positions / whole,
           f"倍率 s = target_len / train_len を整数 {whole} にしています（// や round、"
           f"ceil など）。L = {train_len}、L′ = {target_len} では s = "
           f"{target_len / train_len:g} です。位置は小数の s で割ってください。")
          for whole in sorted({target_len // train_len, round(target_len / train_len),
                               math.ceil(target_len / train_len)} - {0})
          if whole != target_len / train_len],
        (np.floor(right),
         "縮めた位置を整数に切り捨てています（// や int()、astype(int) など）。"
         "位置補間の位置は 0.5 や 1.25 のような小数のままにします。"),
        (positions * (train_len - 1) / (target_len - 1),
         "最後の位置 L′ − 1 を L − 1 に合わせて、(train_len − 1) / (target_len − 1) 倍に"
         "しています。位置補間は区間 [0, L′) を [0, L) に重ねる（L′ が L に移る）ので、"
         "倍率は train_len / target_len です。"),
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
            "（例: 位置 30、train_len=12、target_len=48 なら 7.5）を返してください。")


@checker("s = 1.5, 2.5 のケースでも位置が正しい。")
def check_interpolate_positions(func: Callable) -> None:
    """Check ``func(positions, train_len, target_len)`` → positions · train_len / target_len.

    Taught in chapter 11.
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
    ("base=10000、s=2.5、d_head=64 のケース", 10000.0, 2.5, 64),
    ("base=10000、s=4、d_head=6 のケース", 10000.0, 4.0, 6),
    ("base=500000、s=8、d_head=96 のケース", 500000.0, 8.0, 96),
    ("整数で渡したケース（base=10000、s=3、d_head=24）", 10000, 3, np.int64(24)),
)
_NTK_REFERENCES = (ntk_scaled_base, dynamic_ntk_base, rope_inv_freq, RoPE, angle_coverage)


def _ntk_mistakes(base, scale, d_head):
    """(what the answer would be, the diagnosis) for each typical mistake."""
    d = int(d_head)
    return [
        (base * scale,
         "base · s になっています。最後のペアの番号を d_head/2 にしていませんか"
         "（0 から数えるので i = d_head/2 − 1）。または d_head // (d_head - 2) と"
         "整数の割り算にして、指数が 1 になっています。"),
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


@checker("d_head=6, 96・s=2.5 でも base' が正しい。")
def check_ntk_scaled_base(func: Callable) -> None:
    """Check ``func(base, scale, d_head)`` → base · scale^(d_head / (d_head − 2)).

    Taught in chapter 09.
    """
    for case, base, scale, d_head in _NTK_CASES:
        result = call_refusing(func, _NTK_REFERENCES, base, scale, d_head)
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


# --- YaRN's frequencies (the reference code's ramp over the pair index) ----------------------

#: (case name, d_head, base, s, L, beta_fast, beta_slow). Head widths that are not powers of
#: two, a ramp whose low edge is below 0 before the clamp (Dh=12, L=40), scales that are
#: not whole, other band limits.
_YARN_CASES = (
    ("d_head=64・L=512・s=4 のケース", 64, 10000.0, 4.0, 512, 32.0, 1.0),
    ("d_head=12・L=40・s=2.5（low が負になる）のケース", 12, 10000.0, 2.5, 40, 32.0, 1.0),
    ("d_head=96・base=500000・L=3000・s=3 のケース", 96, 500000.0, 3.0, 3000, 32.0, 1.0),
    ("d_head=20・L=700・s=6・β=16・α=2 のケース", 20, 10000.0, 6.0, 700, 16.0, 2.0),
)
_YARN_REFERENCES = (yarn_inv_freq, rope_inv_freq, RoPE, yarn_ramp, yarn_correction_range,
                    by_parts_inv_freq, yarn_turns_inv_freq, angle_coverage)


def _yarn_variant(d_head, base, scale, L, beta_fast, beta_slow, how):
    """YaRN's frequencies (Dh/2,), right (``how="right"``) or with one typical mistake."""
    theta = base ** (-2.0 * np.arange(d_head // 2) / d_head)  # (Dh/2,)

    def index(turns, two_pi=2 * math.pi):
        return d_head * math.log(L / (turns * two_pi)) / (2 * math.log(base))

    low, high = index(beta_fast), index(beta_slow)
    if how == "no_two_pi":
        low, high = index(beta_fast, 1.0), index(beta_slow, 1.0)
    if how == "swapped_betas":
        low, high = high, low
    if how == "floor_ceil_swapped":
        low, high = math.ceil(low), math.floor(high)
    elif how != "no_rounding":
        low, high = math.floor(low), math.ceil(high)
    if how != "no_clamp":
        low, high = max(low, 0), min(high, d_head - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d_head // 2) - low) / (high - low), 0.0, 1.0)  # 1: interpolate
    if how == "paper_ramp":
        ramp = 1.0 - yarn_gamma(d_head, base, L, beta_fast=beta_fast, beta_slow=beta_slow)
    if how == "ramp_reversed":
        ramp = 1.0 - ramp
    if how == "times_scale":
        return theta * scale * ramp + theta * (1.0 - ramp)
    return theta / scale * ramp + theta * (1.0 - ramp)


_YARN_DIAGNOSES = {
    "ramp_reversed": ("ランプの向きが逆です。速いペア（番号の小さいペア、β 周より多く回る）は"
                      "そのまま、遅いペア（α 周より少ない）を θ_i/s にします。"),
    "paper_ramp": ("論文の式の γ(r)（回転数 r について直線）で書いています。この問題は参照コードと"
                   "transformers と同じ、ペアの番号 i について直線のランプです。"),
    "no_clamp": ("ランプの端 low, high を [0, d_head − 1] に収めていません。訓練の長さが "
                 "2π·β より短いと low が負になり、max(low, 0) で 0 にしないと値が変わります。"),
    "no_rounding": ("ランプの端を丸めていません。low は β 周の番号を切り捨て（floor）、"
                    "high は α 周の番号を切り上げ（ceil）ます。"),
    "floor_ceil_swapped": ("切り捨てと切り上げが逆です。low = floor(β 周の番号)、"
                           "high = ceil(α 周の番号) です。"),
    "swapped_betas": ("beta_fast と beta_slow が逆です。β = beta_fast（32 周）で low を、"
                      "α = beta_slow（1 周）で high を決めます。"),
    "no_two_pi": ("回転数 r の番号 d·ln(L/(2π·r))/(2·ln base) の 2π が抜けています。"
                  "1 周は 2π ラジアンです。"),
    "times_scale": "補間するペアを s 倍しています。位置補間と同じく θ_i / s にします。",
}


@checker("low が負のケースや β=16 でも一致。")
def check_yarn_inv_freq(func: Callable) -> None:
    """Check ``func(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0)``
    → YaRN's frequencies (Dh/2,) with the reference code's ramp over the pair index.

    Taught in chapter 09.
    """
    for case, d_head, base, scale, L, beta_fast, beta_slow in _YARN_CASES:
        result = call_refusing(func, _YARN_REFERENCES, d_head, base, scale, L,
                               beta_fast=beta_fast, beta_slow=beta_slow)
        if isinstance(result, Raised):
            message = raised_message(result, case)
            if isinstance(result.error, TypeError) and "beta" in str(result.error):
                message += ("def my_yarn_inv_freq(d_head, base, scale, original_max_len, "
                            "beta_fast=32.0, beta_slow=1.0) と書いてください。")
            raise Mistake(message)
        freq = returned_array(result, f"{case}の返り値", (d_head // 2,))
        right = yarn_inv_freq(d_head, base, scale, L, beta_fast=beta_fast,
                              beta_slow=beta_slow)
        if np.allclose(freq, right, rtol=1e-5, atol=0):
            continue
        for how, diagnosis in _YARN_DIAGNOSES.items():
            wrong = _yarn_variant(d_head, base, scale, L, beta_fast, beta_slow, how)
            if np.allclose(freq, wrong, rtol=1e-5, atol=0):
                raise Mistake(f"{case}: {diagnosis}")
        theta = base ** (-2.0 * np.arange(d_head // 2) / d_head)
        if not np.isclose(freq[0], theta[0], rtol=1e-5):
            raise Mistake(f"{case}: ペア 0 の値が {freq[0]:.4g} です。最も速いペアは"
                          f"そのまま θ_0 = {theta[0]:g} です。")
        raise Mistake(f"{case}: 値が参照と一致しません。low と high、ランプ、"
                      "θ_i/s と θ_i の混ぜ方を、途中の値を印刷して確かめてください。")
