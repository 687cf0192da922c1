"""Chapter 06's self-checks: the sinusoidal encoding and adding it to a batch.

``my_sinusoidal_encoding(n_positions, d_model) -> pe`` and
``my_add_positional_encoding(x) -> x + PE``. The diagnosis is computed, not guessed: the
checks build what each typical mistake returns (sin and cos swapped, the concatenated
``[sin | cos]`` layout, the exponent written with ``i`` where the paper has ``2i``,
positions counted from 1, the encoding of the batch index added instead of the
position's) and say which one the answer matches.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product

import numpy as np

from attnlab.checks.core import (
    Mistake,
    Raised,
    call_student,
    checker,
    raised_message,
    returned_array,
)
from attnlab.positional import sinusoidal_encoding

#: Tolerance of a match: loose enough for float32 and ``math.sin`` loops, far below the
#: O(1) differences every mistake makes.
_ATOL = 1e-4

_ORDERS = ("sin_cos", "cos_sin", "sin_sin", "cos_cos")
_LAYOUTS = ("interleaved", "concat")
#: How the exponent of 10000 is written. "2i/d": the paper (pair index i). "i/d": the
#: pair index without the 2. "j/d": each column's own index j (odd columns use 2i+1).
#: "2j/d": twice each column's own index.
_EXPONENTS = ("2i/d", "i/d", "j/d", "2j/d")
_STARTS = (0, 1)

_DIAGNOSES = {
    ("order", "cos_sin"): (
        "sin と cos が逆です。論文の式では偶数番目の次元 2i が sin、奇数番目の次元 2i+1 が "
        "cos です。"
    ),
    ("order", "sin_sin"): "奇数番目の次元も sin になっています。次元 2i+1 は cos です。",
    ("order", "cos_cos"): "偶数番目の次元も cos になっています。次元 2i は sin です。",
    ("layout", "concat"): (
        "前半に sin、後半に cos を並べた [sin | cos] の形になっています。論文の式は "
        "sin と cos を交互に並べます（次元 2i が sin、2i+1 が cos）。"
        "値は同じで、次元の並べ方だけが違います。"
    ),
    ("exponent", "i/d"): (
        "指数が i/d_model になっています。論文の式は 10000^(2i/d_model) で、i はペアの番号"
        "（0 〜 d_model/2 − 1）です。2 を忘れると、遅い波長が 10000·2π まで届きません。"
    ),
    ("exponent", "j/d"): (
        "指数に各次元の番号 j をそのまま使っています。sin と cos の組 (2i, 2i+1) は同じ周波数"
        "なので、奇数番目の次元 2i+1 にも 2i/d_model を使ってください。"
    ),
    ("exponent", "2j/d"): (
        "指数が 2j/d_model（j は次元の番号）になっていて、2 が二重です。次元 2i と 2i+1 の"
        "指数は、どちらも 2i/d_model です。"
    ),
    ("start", 1): (
        "位置を 1 から数えています。最初の位置は pos = 0 で、PE(0) は sin(0) = 0 と "
        "cos(0) = 1 が交互に並ぶベクトルです（np.arange(n_positions) から始めてください）。"
    ),
    ("index", "batch"): (
        "位置ではなくバッチの番号の符号化を足しています。x の形は (B, T, D) で、位置は"
        "軸 1 です。系列 b のすべての位置に PE(b) が足されると、系列の中の位置の情報は"
        "消えます（バッチ先頭の配列を系列先頭のつもりで x.shape[0] で切ると起きます）。"
    ),
}


def _variant(n_positions: int, d_model: int, order: str, layout: str, exponent: str,
             start: int) -> np.ndarray | None:
    """What a (possibly wrong) encoding returns: (n_positions, d_model), or None."""
    if layout == "concat" and exponent in ("j/d", "2j/d"):
        return None  # column-index exponents are an interleaved-loop mistake
    pos = np.arange(start, start + n_positions, dtype=np.float64)[:, None]  # (T, 1)
    half = d_model // 2
    i = np.arange(half, dtype=np.float64)  # (D/2,) pair index
    even, odd = 2 * i, 2 * i + 1  # column index of each pair's two members
    power = {
        "2i/d": (2 * i, 2 * i),
        "i/d": (i, i),
        "j/d": (even, odd),
        "2j/d": (2 * even, 2 * odd),
    }[exponent]
    first = pos / 10000.0 ** (power[0] / d_model)  # (T, D/2) angle of the first member
    second = pos / 10000.0 ** (power[1] / d_model)  # (T, D/2) angle of the second member
    f1, f2 = {"sin_cos": (np.sin, np.cos), "cos_sin": (np.cos, np.sin),
              "sin_sin": (np.sin, np.sin), "cos_cos": (np.cos, np.cos)}[order]
    pe = np.empty((n_positions, d_model))  # (T, D)
    if layout == "interleaved":
        pe[:, 0::2], pe[:, 1::2] = f1(first), f2(second)
    else:
        pe[:, :half], pe[:, half:] = f1(first), f2(second)
    return pe


def _wrong_variants(n_positions: int, d_model: int):
    """Every wrong combination, as (list of diagnosis keys, encoding (T, D))."""
    for order, layout, exponent, start in product(_ORDERS, _LAYOUTS, _EXPONENTS, _STARTS):
        if (order, layout, exponent, start) == ("sin_cos", "interleaved", "2i/d", 0):
            continue
        pe = _variant(n_positions, d_model, order, layout, exponent, start)
        if pe is None:
            continue
        keys = [("order", order), ("layout", layout), ("exponent", exponent), ("start", start)]
        yield [key for key in keys if key in _DIAGNOSES], pe


def _describe(keys) -> str:
    return "".join(_DIAGNOSES[key] for key in keys)


def _diagnose_encoding(pe: np.ndarray) -> str:
    """Name the mistakes whose combination reproduces ``pe`` (T, D)."""
    n_positions, d_model = pe.shape
    for keys, candidate in _wrong_variants(n_positions, d_model):
        if np.allclose(pe, candidate, rtol=0.0, atol=_ATOL):
            return _describe(keys)
    if not np.all(np.isfinite(pe)):
        return "nan か inf が含まれています。"
    if np.abs(pe).max() > 1.0 + _ATOL:
        return ("絶対値が 1 を超える値があります。sin と cos の値は -1 〜 1 に収まるはずです"
                "（角度ではなく、その sin と cos を入れてください）。")
    expected = sinusoidal_encoding(n_positions, d_model)
    rows = [int(t) for t in np.flatnonzero(
        ~np.all(np.isclose(pe, expected, rtol=0.0, atol=_ATOL), axis=1))]
    return (f"値が論文の式と一致しません（一致しない位置: {rows[:5]}"
            f"{' …' if len(rows) > 5 else ''}）。角度 pos / 10000^(2i/d_model) を確かめて"
            "ください。")


_ENCODING_CASES = ((12, 16), (3, 2), (60, 64))


@checker("d_model=16, 2, 64 で論文の式と一致。")
def check_sinusoidal_encoding(func: Callable) -> None:
    """Check ``func(n_positions, d_model) -> pe`` against the paper's formula.

    ``pe[pos, 2i] = sin(pos / 10000^(2i/d_model))`` and ``pe[pos, 2i+1] = cos(…)`` for
    ``pos = 0 … n_positions−1``. Diagnoses sin and cos swapped, the concatenated
    ``[sin | cos]`` layout, the exponent written with i (or with each column's index)
    where the paper has 2i, positions counted from 1, and their combinations.

    Parameters
    ----------
    func : callable
        The student's function: ``(n_positions, d_model)`` → array (n_positions,
        d_model).

    Returns
    -------
    bool
        True if every hidden case matches.

    Taught in chapter 06.
    """
    for n_positions, d_model in _ENCODING_CASES:
        case = f"{n_positions} 位置・d_model={d_model} のケース"
        result = call_student(func, n_positions, d_model)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, case))
        if np.shape(result) == (d_model, n_positions) and n_positions != d_model:
            raise Mistake(
                f"{case}: 形が (d_model, n_positions) = {(d_model, n_positions)} です。"
                "行が位置、列が次元の (n_positions, d_model) にしてください（転置が逆です）。")
        pe = returned_array(result, "pe", (n_positions, d_model))
        if not np.allclose(pe, sinusoidal_encoding(n_positions, d_model),
                           rtol=0.0, atol=_ATOL):
            raise Mistake(f"{case}: {_diagnose_encoding(pe)}")


def _batch_inputs() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(20260606)
    return [
        ("x の形が (4, 6, 8) のケース", rng.normal(size=(4, 6, 8))),
        ("x の形が (3, 10, 16) のケース", rng.normal(size=(3, 10, 16))),
        ("x の形が (1, 5, 4) のケース", rng.normal(size=(1, 5, 4))),
    ]


def _diagnose_added(x: np.ndarray, out: np.ndarray) -> str:
    """Name the mistakes that reproduce ``out`` from ``x`` (B, T, D)."""
    B, T, D = x.shape
    added = out - x  # (B, T, D): what the student added
    if np.allclose(added, 0.0, atol=_ATOL):
        return "x をそのまま返しています。位置エンコーディングを足してください。"
    if np.allclose(out, sinusoidal_encoding(T, D)[None], atol=_ATOL):
        return "位置エンコーディングだけを返しています。x に足した x + PE を返してください。"
    right = sinusoidal_encoding(T, D)  # (T, D)
    by_batch = sinusoidal_encoding(B, D)[:, None, :]  # (B, 1, D): PE of the batch index
    candidates = [([], right[None]), ([("index", "batch")], by_batch)]
    for keys, pe in _wrong_variants(max(B, T), D):
        candidates.append((keys, pe[:T][None]))
        candidates.append((keys + [("index", "batch")], pe[:B][:, None, :]))
    for keys, pe in candidates[1:]:
        if np.allclose(added, np.broadcast_to(pe, added.shape), rtol=0.0, atol=_ATOL):
            return _describe(keys)
    spread = np.abs(added - added[:1]).max()
    if spread > _ATOL:
        return ("バッチの系列ごとに足した値が違います。位置エンコーディングは位置だけで決まり、"
                "バッチのどの系列にも同じ PE(0), PE(1), … を足します。")
    if np.allclose(added, np.broadcast_to(right[None], added.shape) * 2.0, atol=_ATOL):
        return "位置エンコーディングを 2 回足しています。"
    return ("足した値が位置エンコーディング PE と一致しません。out - x を "
            "sinusoidal_encoding(T, D) と比べてみてください。")


@checker("各系列の各位置に符号化が足されました。")
def check_add_positional_encoding(func: Callable) -> None:
    """Check ``func(x) -> x + PE`` for x (B, T, D): each position's encoding, every sequence.

    The expected answer is ``x + sinusoidal_encoding(T, D)`` broadcast over the batch.
    Diagnoses the encoding of the batch index added instead of the position's (a
    batch-first tensor indexed as if it were sequence-first), x returned unchanged, the
    encoding returned without x, and every mistake of
    :func:`check_sinusoidal_encoding` in the encoding that was added.

    Parameters
    ----------
    func : callable
        The student's function: x (B, T, D) → (B, T, D).

    Returns
    -------
    bool
        True if every hidden case matches.

    Taught in chapter 06.
    """
    for case, x in _batch_inputs():
        B, T, D = x.shape
        result = call_student(func, x)
        if isinstance(result, Raised):
            message = raised_message(result, case)
            if isinstance(result.error, ValueError) and "broadcast" in str(result.error):
                message += (
                    f"形が合いません。x は (B, T, D) = {x.shape} で、足す PE は位置の数 T = {T} "
                    f"行の (T, D) = {(T, D)} です。B = {B} 行の PE を作っていませんか。")
            raise Mistake(message)
        out = returned_array(result, "x + PE", x.shape)
        expected = x + sinusoidal_encoding(T, D)[None]  # (B, T, D)
        if not np.allclose(out, expected, rtol=0.0, atol=_ATOL):
            raise Mistake(f"{case}: {_diagnose_added(x, out)}")
