"""Self-checks of context extension: position interpolation (chapter 12), the NTK-aware
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
    fix_on_repeat,
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

    Taught in chapter 12.
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
    """(what the answer would be, key, what went wrong, the fix) for each typical mistake.

    The fix (empty when naming the mistake is enough) is code that gives the formula
    away: it is shown only when the same mistake comes again (:func:`fix_on_repeat`)."""
    d = int(d_head)
    return [
        (base * scale, "times-s",
         "base · s になっています。最後のペアの番号を d_head/2 にしていませんか"
         "（0 から数えるので i = d_head/2 − 1）。または d_head // (d_head - 2) と"
         "整数の割り算にして、指数が 1 になっています。", ""),
        (base * scale ** d / (d - 2), "parentheses",
         "括弧が抜けています。scale ** d_head / (d_head - 2) は "
         "(scale ** d_head) / (d_head - 2) と計算されます。",
         "指数全体を括弧で囲んで scale ** (d_head / (d_head - 2)) にしてください。"),
        (base * scale ** ((d - 2) / d), "inverse",
         "指数が逆数になっています。条件 2 の式を base′ について解くとき、両辺を"
         "何乗したかを確かめてください。",
         "指数は (d_head - 2) / d_head ではなく d_head / (d_head - 2) です。"),
        (scale ** (d / (d - 2)), "no-base",
         "base を掛け忘れています（この値は base によりません）。",
         "新しい base は base * scale ** (d_head / (d_head - 2)) です。"),
        (base / scale ** (d / (d - 2)), "divides",
         "base を割っています。最後のペアを遅くする（1/s の速さにする）には、base を"
         "大きくします。",
         "新しい base は base * scale ** (d_head / (d_head - 2)) です。"),
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


def _exponent_message(value: float, base: float, scale: float, d: int) -> str | None:
    """Name the mistake when ``value = base · s^e`` with a recognisable wrong exponent e:
    another d_head written in or taken from the notebook (a width of 8 or more: e = 2 is a
    guess, not d_head = 4), dimensions counted instead of pairs, θ without its factor 2."""
    if value <= 0 or scale <= 0 or math.isclose(scale, 1.0):
        return None
    exponent = math.log(value / base) / math.log(scale)
    if math.isclose(exponent, d / (d - 1), rel_tol=1e-6):
        return ("最後のペアを次元の番号 d_head − 1 で数えていませんか。ペア i は次元 2i と "
                "2i + 1 なので、θ_i = base^(−2i/d_head) の最後のペアは i = d_head/2 − 1、"
                "指数の 2i/d_head は (d_head − 2)/d_head です。")
    if math.isclose(exponent, 2 * d / (d - 2), rel_tol=1e-6):
        return ("θ_i = base^(−2i/d_head) の 2 が抜けていませんか。θ_i = base^(−i/d_head) "
                "で解くと、s の指数が 2 倍になります。")
    if exponent > 1:
        written = 2 * exponent / (exponent - 1)  # e = D/(D − 2) ⇔ D = 2e/(e − 1)
        whole = round(written)
        if whole != d and whole >= 8 and math.isclose(written, whole, rel_tol=1e-6):
            return (f"d_head = {whole} のときの値になっています（このケースの d_head は {d}）。"
                    f"式に d_head = {whole} を書き込んだり、ノートブックの変数 d_head を"
                    "使ったりしていませんか。引数の d_head を使ってください。")
    return None


def _conditions_message(case: str, value: float, base: float, scale: float, d: int) -> str:
    """How far ``value`` (the student's base′) misses the two conditions of section 3,
    without the formula; the equation to solve only on a repeated attempt."""
    if not math.isfinite(value) or value <= 0:
        return (f"{case}: base′ が {value:.6g} です。base′ は正の数で、θ_i = base′^(−2i/d_head) "
                "の底になります。")
    last = d // 2 - 1
    ratio = (value / base) ** (-2 * last / d)  # θ′_last / θ_last
    if math.isclose(ratio, 1.0, rel_tol=1e-9):
        speed = "base′ が base と同じなので、最後のペアの速さが元のままです"
    else:
        speed = (f"あなたの base′ = {value:.6g} では、最後のペア（i = d_head/2 − 1 = {last}）の"
                 f"周波数が元の {ratio:.4g} 倍です")
    tendency = "まだ速すぎます（base′ が小さすぎます）" if ratio > 1 / scale \
        else "遅くしすぎています（base′ が大きすぎます）"
    what = (f"{case}: {speed}。条件 2 では 1/s = {1 / scale:.4g} 倍なので、{tendency}。"
            "ペア 0 の周波数は base′ によらず 1 なので、条件 1 は満たしています。")
    fix = ("条件 2 は base′^(−(d_head − 2)/d_head) = base^(−(d_head − 2)/d_head) / s です。"
           "この式を base′ について解いてください。")
    return fix_on_repeat("ex09-ntk/conditions", what, fix)


@checker("d_head=6, 96・s=2.5 でも base' が正しい。")
def check_ntk_scaled_base(func: Callable) -> None:
    """Check ``func(base, scale, d_head)`` → base · scale^(d_head / (d_head − 2)).

    Names the typical mistakes (the exponent inverted, parentheses missing, an integer
    division, base forgotten or divided, d_head written in, dimensions counted instead of
    pairs, θ without its factor 2, the result rounded, ``^`` for ``**``); any other wrong
    base′ is told how far it misses the two conditions of section 3. The formula is never
    shown on a first attempt, only when the same mistake comes again
    (:func:`attnlab.checks.core.fix_on_repeat`).

    Taught in chapter 09.
    """
    for case, base, scale, d_head in _NTK_CASES:
        result = call_refusing(func, _NTK_REFERENCES, base, scale, d_head)
        if isinstance(result, Raised):
            message = raised_message(result, case)
            if isinstance(result.error, TypeError) and "^" in str(result.error):
                message += "Python の ^ は排他的論理和（XOR）です。累乗は ** で書きます。"
            raise Mistake(message)
        value = _as_scalar(result, case)
        b, s, d = float(base), float(scale), int(d_head)
        right = ntk_scaled_base(b, s, d)
        if np.isclose(value, right, rtol=1e-5):
            continue
        for wrong, key, what, fix in _ntk_mistakes(b, s, d):
            if np.isclose(value, wrong, rtol=1e-5):
                raise Mistake(f"{case}: " + (fix_on_repeat(f"ex09-ntk/{key}", what, fix)
                                             if fix else what))
        if (named := _exponent_message(value, b, s, d)) is not None:
            raise Mistake(f"{case}: {named}")
        if value == round(value) and abs(value - right) < 1.0:
            raise Mistake(f"{case}: 値が整数 {value:.0f} です。base′ を整数に丸めていませんか"
                          "（int() や // など）。小数のまま返してください。")
        raise Mistake(_conditions_message(case, value, b, s, d))


# --- YaRN's frequencies (the reference code's ramp over the pair index) ----------------------

#: (case name, d_head, base, s, L, beta_fast, beta_slow). Head widths that are not powers of
#: two, a ramp whose low edge is below 0 before the clamp (Dh=12, L=40), scales that are
#: not whole, other band limits; a band whose high edge is past the last pair, d_head/2 − 1
#: (Dh=128, L=100 000: (low, high) = (43, 68), so clamping high to the pairs shows), and
#: a length so short that both edges are clamped to 0 (low == high: the 0.001 guard).
_YARN_CASES = (
    ("d_head=64・L=512・s=4 のケース", 64, 10000.0, 4.0, 512, 32.0, 1.0),
    ("d_head=12・L=40・s=2.5（low が負になる）のケース", 12, 10000.0, 2.5, 40, 32.0, 1.0),
    ("d_head=96・base=500000・L=3000・s=3 のケース", 96, 500000.0, 3.0, 3000, 32.0, 1.0),
    ("d_head=20・L=700・s=6・β=16・α=2 のケース", 20, 10000.0, 6.0, 700, 16.0, 2.0),
    ("d_head=128・L=100000・s=3.5 のケース", 128, 10000.0, 3.5, 100_000, 32.0, 1.0),
    ("d_head=16・L=6・s=2 のケース", 16, 10000.0, 2.0, 6, 32.0, 1.0),
)
_YARN_REFERENCES = (yarn_inv_freq, rope_inv_freq, RoPE, yarn_ramp, yarn_correction_range,
                    by_parts_inv_freq, yarn_turns_inv_freq, angle_coverage)
#: The band edges (low, high) of section 4's example (d_head = 64, L = 512).
_EXAMPLE_EDGES = (3, 16)


def _yarn_variant(d_head, base, scale, L, beta_fast, beta_slow, how):
    """YaRN's frequencies (Dh/2,), right (``how="right"``) or with one typical mistake."""
    pairs = np.arange(d_head // 2)  # (Dh/2,)
    theta = base ** (-(1.0 if how == "theta_no_two" else 2.0) * pairs / d_head)  # (Dh/2,)
    length = L * scale if how == "new_length" else L

    def index(turns, two_pi=2 * math.pi):
        return d_head * math.log(length / (turns * two_pi)) / (2 * math.log(base))

    low, high = index(beta_fast), index(beta_slow)
    if how == "no_two_pi":
        low, high = index(beta_fast, 1.0), index(beta_slow, 1.0)
    if how == "swapped_betas":
        low, high = high, low
    if how == "floor_ceil_swapped":
        low, high = math.ceil(low), math.floor(high)
    elif how == "rounded":
        low, high = round(low), round(high)
    elif how != "no_rounding":
        low, high = math.floor(low), math.ceil(high)
    if how != "no_clamp":
        top = d_head // 2 - 1 if how == "clamp_pairs" else d_head - 1
        low, high = max(low, 0), min(high, top)
    if how == "example_edges":
        low, high = _EXAMPLE_EDGES
    if low == high and how != "no_guard":
        high += 0.001
    i = {"ramp_over_dims": 2 * pairs, "ramp_one_based": pairs + 1}.get(how, pairs)
    with np.errstate(all="ignore"):  # no_guard divides by 0
        ramp = np.clip((i - low) / (high - low), 0.0, 1.0)  # 1: interpolate
    if how == "paper_ramp":
        ramp = 1.0 - yarn_gamma(d_head, base, L, beta_fast=beta_fast, beta_slow=beta_slow)
    if how == "ramp_reversed":
        ramp = 1.0 - ramp
    if how == "returns_ramp":
        return ramp
    if how == "returns_keep":
        return 1.0 - ramp
    if how == "times_scale":
        return theta * scale * ramp + theta * (1.0 - ramp)
    return theta / scale * ramp + theta * (1.0 - ramp)


_NO_GUARD = ("low と high が等しいので、(i − low) / (high − low) が 0 で割る計算になっています。"
             "low == high のときは high に 0.001 を足してください（参照コードと同じ）。")
_RETURNS_RAMP = ("0 から 1 のランプを返しています。返すのはランプで混ぜた周波数 "
                 "θ′_i = (1 − γ̃_i)·θ_i/s + γ̃_i·θ_i（手順 3）です。")
_YARN_DIAGNOSES = {
    "ramp_reversed": ("ランプの向きが逆です。速いペア（番号の小さいペア、β 周より多く回る）は"
                      "そのまま、遅いペア（α 周より少ない）を θ_i/s にします。"),
    "paper_ramp": ("論文の式の γ(r)（回転数 r について直線）で書いています。この問題は参照コードと"
                   " transformers と同じ、ペアの番号 i について直線のランプです。"),
    "no_clamp": ("ランプの端 low, high を [0, d_head − 1] に収めていません。訓練の長さが "
                 "2π·β より短いと low が負になり、max(low, 0) で 0 にしないと値が変わります。"),
    "no_rounding": ("ランプの端を丸めていません。low は β 周の番号を切り捨て（floor）、"
                    "high は α 周の番号を切り上げ（ceil）ます。"),
    "floor_ceil_swapped": ("切り捨てと切り上げが逆です。low = floor(β 周の番号)、"
                           "high = ceil(α 周の番号) です。"),
    "rounded": ("low と high を四捨五入（round）しています。low は β 周の番号を切り捨て"
                "（floor）、high は α 周の番号を切り上げ（ceil）ます。"),
    "swapped_betas": ("beta_fast と beta_slow が逆です。β = beta_fast（32 周）で low を、"
                      "α = beta_slow（1 周）で high を決めます。"),
    "no_two_pi": ("回転数 r の番号 d·ln(L/(2π·r))/(2·ln base) の 2π が抜けています。"
                  "1 周は 2π ラジアンです。"),
    "new_length": ("番号の式の L に、広げた後の長さ L·s を使っています。low と high は、"
                   "訓練の長さ L = original_max_len の間に何周するかで決めます。"),
    "clamp_pairs": ("high を最後のペアの番号 d_head/2 − 1 で止めています。参照コードと"
                    " transformers は [0, d_head − 1] に収めるので、high が d_head/2 − 1 を"
                    "超えてもそのまま使います（ランプがペアの外まで続き、最後のペアも一部だけ"
                    "補間されます）。"),
    "no_guard": _NO_GUARD,
    "theta_no_two": ("θ_i = base^(−2i/d_head) の 2 が抜けています。i はペアの番号 "
                     "0, 1, …, d_head/2 − 1 で、指数は −2i/d_head です。"),
    "ramp_over_dims": ("ランプの i を次元の番号 0, 2, 4, … にしています。low と high は"
                       "ペアの番号なので、i もペアの番号 0, 1, …, d_head/2 − 1 です。"),
    "ramp_one_based": ("ランプの i を 1 から数えています。ペアの番号 i は 0 から "
                       "d_head/2 − 1 です。"),
    "example_edges": ("low, high を第 4 節の例の値 3, 16（d_head = 64・L = 512 のとき）に"
                      "固定していませんか。引数の d_head、base、original_max_len、beta_fast、"
                      "beta_slow から計算してください。"),
    "returns_ramp": _RETURNS_RAMP,
    "returns_keep": _RETURNS_RAMP,
    "times_scale": "補間するペアを s 倍しています。位置補間と同じく θ_i / s にします。",
}


def _edges_equal(d_head, base, L, beta_fast, beta_slow) -> bool:
    """Whether the clamped band edges of the case are equal (the 0.001 guard is needed)."""
    low, high = yarn_correction_range(d_head, base, L, beta_fast=beta_fast,
                                      beta_slow=beta_slow)
    return low == high


@checker("low が負のケースや β=16 でも一致。")
def check_yarn_inv_freq(func: Callable) -> None:
    """Check ``func(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0)``
    → YaRN's frequencies (Dh/2,) with the reference code's ramp over the pair index.

    Names the typical mistakes (:data:`_YARN_DIAGNOSES`): the ramp reversed or in the
    paper's form, the band edges not clamped, not rounded, rounded the wrong way or with
    ``round``, clamped to the pairs, left equal (no 0.001 guard) or fixed at the example's,
    the betas swapped, 2π missing, L·s for L, θ without its factor 2, the ramp over
    dimensions or from 1, the ramp returned, the pairs multiplied by s.

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
            elif isinstance(result.error, ZeroDivisionError) and _edges_equal(
                    d_head, base, L, beta_fast, beta_slow):
                message += _NO_GUARD
            raise Mistake(message)
        freq = returned_array(result, f"{case}の返り値", (d_head // 2,))
        right = yarn_inv_freq(d_head, base, scale, L, beta_fast=beta_fast,
                              beta_slow=beta_slow)
        if np.allclose(freq, right, rtol=1e-5, atol=0):
            continue
        for how, diagnosis in _YARN_DIAGNOSES.items():
            wrong = _yarn_variant(d_head, base, scale, L, beta_fast, beta_slow, how)
            if np.allclose(freq, wrong, rtol=1e-5, atol=0, equal_nan=True):
                raise Mistake(f"{case}: {diagnosis}")
        if np.isnan(freq).any() and _edges_equal(d_head, base, L, beta_fast, beta_slow):
            raise Mistake(f"{case}: 返り値に nan があります。{_NO_GUARD}")
        theta = base ** (-2.0 * np.arange(d_head // 2) / d_head)
        if not np.isclose(freq[0], theta[0], rtol=1e-5):
            raise Mistake(f"{case}: ペア 0 の値が {freq[0]:.4g} です。最も速いペアは"
                          f"そのまま θ_0 = {theta[0]:g} です。")
        raise Mistake(f"{case}: 値が参照と一致しません。low と high、ランプ、"
                      "θ_i/s と θ_i の混ぜ方を、途中の値を印刷して確かめてください。")
