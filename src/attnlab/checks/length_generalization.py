"""Chapter 10's self-check: ``f(n_heads, seq_len) -> (H, T, T)``, ALiBi's score bias.

ALiBi (Press et al., 2022) adds ``−a_ℓ · |i − j|`` to the score of query i and key j in
head ℓ (numbered from 0, as the book does), with the fixed slopes
``a_ℓ = 2^(−8(ℓ+1)/h)`` for h heads (h a power of two; the paper numbers heads from 1).
With the causal mask only the keys ``j ≤ i`` are used, so only that part is compared
exactly: above the diagonal an answer may put the same bias, 0 or −inf, but not a
positive bias that grows with the key's distance (``a(j − i)``: right under the causal
mask, wrong in a model without it, where ALiBi lowers later keys too). As in chapter 01,
the diagnosis is computed: the check builds what each typical mistake would return and
says which one the answer matches.
"""

from __future__ import annotations

from itertools import product

import numpy as np

from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    checker,
    raised_message,
    returned_array,
    shape_of,
)
from attnlab.positional import alibi_bias, alibi_slopes

#: (case name, n_heads, seq_len) of the hidden cases; h = 4 tells 2^(−8(ℓ+1)/h) from 1/2^(ℓ+1).
#: The exercise asks for H a power of two (the paper's formula); the lengths are not.
_CASES = (
    ("8 ヘッド・長さ 5 のケース", 8, 5),
    ("4 ヘッド・長さ 6 のケース", 4, 6),
    ("16 ヘッド・長さ 7 のケース", 16, 7),
    ("2 ヘッド・長さ 3 のケース", 2, 3),
)
_REFERENCES = (alibi_bias, alibi_slopes)

_SLOPE_DIAGNOSES = {
    "from0": (
        "指数に ℓ + 1 ではなく ℓ を使っています（ヘッド 0 の傾きが 1）。ヘッド ℓ（0 から数える）の"
        "傾きは a_ℓ = 2^(−8(ℓ+1)/h)、8 ヘッドなら 1/2, 1/4, …, 1/256 です。"
    ),
    "halves": (
        "ヘッドの数に関係なく 1/2, 1/4, 1/8, … としています。それが正しいのは 8 ヘッドの"
        "ときだけです。a_ℓ = 2^(−8(ℓ+1)/h) なので、4 ヘッドなら 1/4, 1/16, 1/64, 1/256 です。"
    ),
    "reversed": (
        "傾きの順番が逆です（ヘッド 0 がいちばん緩やか）。ヘッド 0 がいちばん急な "
        "2^(−8/h) です。"
    ),
    "same": (
        "どのヘッドも同じ傾きです。ALiBi はヘッドごとに違う傾き a_ℓ = 2^(−8(ℓ+1)/h) を使い、"
        "近くだけを見るヘッドと遠くまで見るヘッドを作ります。"
    ),
}
_SIGN = (
    "符号が逆です。遠いキーほどスコアを **下げる** ので、バイアスは −a_ℓ · |i − j|"
    "（0 以下）です。"
)


def _slopes(n_heads: int, variant: str) -> np.ndarray:
    h = np.arange(1, n_heads + 1)
    return {
        "right": 2.0 ** (-8.0 * h / n_heads),
        "from0": 2.0 ** (-8.0 * (h - 1) / n_heads),
        "halves": 2.0 ** (-h.astype(float)),
        "reversed": 2.0 ** (-8.0 * h / n_heads)[::-1],
        "same": np.ones(n_heads),
    }[variant]


def _candidate(n_heads: int, seq_len: int, variant: str, sign: float) -> np.ndarray:
    pos = np.arange(seq_len)
    distance = np.abs(pos[:, None] - pos[None, :])  # (T, T)
    return sign * -_slopes(n_heads, variant)[:, None, None] * distance  # (H, T, T)


def _diagnose(value: np.ndarray, n_heads: int, seq_len: int, lower: np.ndarray) -> str:
    for variant, sign in product(("right", *_SLOPE_DIAGNOSES), (1.0, -1.0)):
        if (variant, sign) == ("right", 1.0):
            continue
        candidate = _candidate(n_heads, seq_len, variant, sign)
        if np.allclose(value[:, lower], candidate[:, lower], rtol=1e-5, atol=1e-7):
            parts = [_SLOPE_DIAGNOSES[variant]] if variant != "right" else []
            return "".join(([_SIGN] if sign < 0 else []) + parts)
    one_back = -value[:, 1, 0]  # (H,) each head's slope, if the answer is −a·|i − j|
    if np.allclose(one_back, one_back[0], rtol=1e-5, atol=1e-7) and one_back[0] != 0:
        for sign in (1.0, -1.0):
            candidate = sign * -one_back[0] * np.abs(np.subtract.outer(
                np.arange(seq_len), np.arange(seq_len)))  # (T, T), one slope
            if np.allclose(value[:, lower], np.broadcast_to(
                    sign * candidate, value.shape)[:, lower], rtol=1e-5, atol=1e-7):
                return ("" if sign > 0 else _SIGN) + _SLOPE_DIAGNOSES["same"]
    diagonal = value[:, np.arange(seq_len), np.arange(seq_len)]  # (H, T)
    if not np.allclose(diagonal, 0.0, atol=1e-7):
        return "距離 0（i = j）のバイアスが 0 になっていません。|i − j| を使っていますか。"
    return (
        "値が正しくありません。ヘッド ℓ（0 から数える）、クエリ i、キー j のバイアスは "
        "−2^(−8(ℓ+1)/h) · |i − j| です。"
    )


@checker("どのケースでもヘッドごとの傾きと距離のバイアスが一致。")
def check_alibi_bias(func) -> None:
    """Check ``func(n_heads, seq_len)``: ALiBi's bias ``−a_ℓ·|i − j|``, shape (H, T, T),
    on the part ``j ≤ i`` that a causal model uses.

    Taught in chapter 10.
    """
    for case, n_heads, seq_len in _CASES:
        result = call_refusing(func, _REFERENCES, n_heads, seq_len)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, case))
        shape = shape_of(result)
        if shape == (seq_len, seq_len, n_heads) and n_heads != seq_len:
            raise Mistake(
                f"{case}で形 {shape} が返りました。ヘッドの軸を先頭にした "
                f"(H, T, T) = {(n_heads, seq_len, seq_len)} にしてください。"
            )
        value = returned_array(result, f"{case}の返り値", (n_heads, seq_len, seq_len))
        lower = np.tril(np.ones((seq_len, seq_len), dtype=bool))  # keys j <= i
        expected = alibi_bias(n_heads, seq_len)  # (H, T, T)
        if not np.allclose(value[:, lower], expected[:, lower], rtol=1e-5, atol=1e-7):
            raise Mistake(f"{case}で値が違います。" + _diagnose(value, n_heads, seq_len, lower))
        later = value[:, ~lower]  # keys after the query, j > i
        if np.any(np.isfinite(later) & (later > 1e-7)):
            raise Mistake(
                f"{case}で、クエリより後のキー（j > i）のバイアスが正になっています"
                "（a·(j − i) のように距離に符号が付いています）。因果マスクのあるモデルでは"
                "隠れる部分ですが、マスクのない（双方向の）モデルでは後ろの遠いキーほど"
                "スコアが上がってしまいます。−a_ℓ · |i − j| と |i − j| を使ってください。"
            )
