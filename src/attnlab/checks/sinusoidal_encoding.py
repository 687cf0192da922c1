"""Chapter 06's self-checks: tensor2tensor's timing signal, and adding the encoding at an offset.

``my_timing_signal(n_positions, d_model) -> pe`` writes the sinusoids as the authors'
own code does (tensor2tensor's ``get_timing_signal_1d``): ``[sin … | cos …]``, with the
frequencies spaced so that the last pair's is exactly 1/10000. That is not the paper's
formula, and ``sinusoidal_encoding`` (the paper's, visible in the chapter) does not give
it: the exercise cannot be answered by copying a cell. ``my_add_positional_encoding(x,
offset) -> x + PE`` adds the paper's encoding of positions ``offset … offset+T−1`` to a
batch-first x, as a model decoding with a KV cache does.

The diagnosis is computed, not guessed: the checks build what each typical mistake
returns (the paper's layout or frequencies, sin and cos swapped, positions from 1, the
encoding of the batch index, the offset left out, x multiplied by √d_model, an encoding
built as (T, 1, D), x changed in place, …) and say which one the answer matches.
"""

from __future__ import annotations

import re
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

# --- the encodings, right and wrong ----------------------------------------------------------

_ORDERS = ("sin_cos", "cos_sin")
_LAYOUTS = ("concat", "interleaved")
#: How the frequencies are spaced. "t2t": tensor2tensor, 1 … 1/10000 in d/2 − 1 steps.
#: "paper": the paper's 1/10000^(2i/d), i = 0 … d/2 − 1 (what sinusoidal_encoding uses).
#: "inverted": the timescales multiplied instead of divided (the sign of the exponent).
_STEPS = ("t2t", "paper", "inverted")
_STARTS = (0, 1)

_DIAGNOSES = {
    ("layout", "interleaved"): (
        "sin と cos を交互に並べています。それは論文の式の並べ方（次元 2i が sin、2i+1 が cos）"
        "です。tensor2tensor の get_timing_signal_1d は、前半に sin、後半に cos を並べます"
        "（[sin | cos]）。"
    ),
    ("step", "paper"): (
        "周波数が論文の式 1/10000^(2i/d_model) のままです（sinusoidal_encoding と同じ）。"
        "tensor2tensor は 1 から 1/10000 までを d_model/2 − 1 段の等比数列に分けるので、"
        "ペア i の周波数は 1/10000^(i/(d_model/2 − 1)) で、最後のペアがちょうど 1/10000 "
        "です。"
    ),
    ("step", "inverted"): (
        "角度が pos × 10000^(i/(d_model/2 − 1)) になっています（指数の符号が逆です）。"
        "周期（timescale）で割る、つまり周波数 1/10000^(i/(d_model/2 − 1)) を掛けます。"
    ),
    ("order", "cos_sin"): "前半に cos、後半に sin が入っています。前半が sin、後半が cos です。",
    ("start", 1): (
        "位置を 1 から数えています。最初の位置は pos = 0 で、その行は sin(0) = 0 が d_model/2 "
        "個、cos(0) = 1 が d_model/2 個並びます（np.arange(n_positions) から始めてください）。"
    ),
}


def _frequencies(d_model: int, step: str) -> np.ndarray:
    """(D/2,) angle per position of each pair, spaced as ``step`` says."""
    half = d_model // 2
    i = np.arange(half, dtype=np.float64)
    if step == "paper":
        return 1.0 / 10000.0 ** (2 * i / d_model)
    exponent = i / max(half - 1, 1)  # tensor2tensor: log-timescale increment / (D/2 − 1)
    return 10000.0 ** (exponent if step == "inverted" else -exponent)


def _encoding(n_positions: int, d_model: int, order: str = "sin_cos",
              layout: str = "concat", step: str = "t2t", start: int = 0) -> np.ndarray:
    """What an encoding with these (possibly wrong) choices returns: (T, D)."""
    pos = np.arange(start, start + n_positions, dtype=np.float64)[:, None]  # (T, 1)
    angle = pos * _frequencies(d_model, step)  # (T, D/2)
    first, second = (np.sin, np.cos) if order == "sin_cos" else (np.cos, np.sin)
    pe = np.empty((n_positions, d_model))  # (T, D)
    if layout == "concat":
        pe[:, : d_model // 2], pe[:, d_model // 2:] = first(angle), second(angle)
    else:
        pe[:, 0::2], pe[:, 1::2] = first(angle), second(angle)
    return pe


def _timing_signal(n_positions: int, d_model: int) -> np.ndarray:
    """The answer key: tensor2tensor's ``get_timing_signal_1d`` (timescales 1 … 10000).

    Pair i has the frequency ``1/10000^(i/(D/2 − 1))`` for ``i = 0 … D/2 − 1`` (a
    geometric sequence from 1 to exactly 1/10000); the sines of every pair come first,
    then the cosines. The reference of :func:`check_timing_signal`.

    Parameters
    ----------
    n_positions : int
        T; rows are positions ``0 … T−1``.
    d_model : int
        D, even and at least 4.

    Returns
    -------
    np.ndarray
        Shape (T, D).

    """
    return _encoding(n_positions, d_model)


def _wrong_encodings(n_positions: int, d_model: int):
    """Every wrong combination, as (diagnosis keys, encoding (T, D))."""
    for order, layout, step, start in product(_ORDERS, _LAYOUTS, _STEPS, _STARTS):
        if (order, layout, step, start) == ("sin_cos", "concat", "t2t", 0):
            continue
        keys = [("layout", layout), ("step", step), ("order", order), ("start", start)]
        yield ([key for key in keys if key in _DIAGNOSES],
               _encoding(n_positions, d_model, order, layout, step, start))


def _describe(keys) -> str:
    return "".join(_DIAGNOSES[key] for key in keys)


def _diagnose_signal(pe: np.ndarray) -> str:
    """Name the mistakes whose combination reproduces ``pe`` (T, D)."""
    n_positions, d_model = pe.shape
    for keys, candidate in _wrong_encodings(n_positions, d_model):
        if np.allclose(pe, candidate, rtol=0.0, atol=_ATOL):
            return _describe(keys)
    if not np.all(np.isfinite(pe)):
        return ("nan か inf が含まれています（d_model/2 − 1 が 0 になる割り算や、"
                "log(0) をしていませんか）。")
    if np.abs(pe).max() > 1.0 + _ATOL:
        return ("絶対値が 1 を超える値があります。sin と cos の値は -1 〜 1 に収まるはずです"
                "（角度ではなく、その sin と cos を入れてください）。")
    expected = _timing_signal(n_positions, d_model)
    rows = [int(t) for t in np.flatnonzero(
        ~np.all(np.isclose(pe, expected, rtol=0.0, atol=_ATOL), axis=1))]
    return (f"値が tensor2tensor の式と一致しません（一致しない位置: {rows[:5]}"
            f"{' …' if len(rows) > 5 else ''}）。ペア i の角度 pos / 10000^(i/(d_model/2 − 1)) "
            "を確かめてください。")


#: (n_positions, d_model) of the hidden cases: never square, never a power of two, never
#: the chapter's 16 or 64, and d_model/2 odd as well as even.
_SIGNAL_CASES = ((13, 10), (7, 6), (41, 36))


@checker("d_model=10, 6, 36 で tensor2tensor と一致。")
def check_timing_signal(func: Callable) -> None:
    """Check ``func(n_positions, d_model) -> pe`` against tensor2tensor's timing signal.

    ``pe[pos, i] = sin(pos · f_i)`` and ``pe[pos, D/2 + i] = cos(pos · f_i)`` with
    ``f_i = 1/10000^(i/(D/2 − 1))``, ``i = 0 … D/2 − 1``. Diagnoses the paper's
    interleaved layout, the paper's frequencies (``sinusoidal_encoding`` with
    ``layout="concat"``), the exponent's sign, sin and cos swapped, positions counted
    from 1, their combinations, a transposed result.

    Parameters
    ----------
    func : callable
        The student's function: ``(n_positions, d_model)`` → array (n_positions,
        d_model), d_model even and at least 4.

    Returns
    -------
    bool
        True if every hidden case matches.

    Taught in chapter 06.
    """
    for n_positions, d_model in _SIGNAL_CASES:
        case = f"{n_positions} 位置・d_model={d_model} のケース"
        result = call_student(func, n_positions, d_model)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, case))
        if np.shape(result) == (d_model, n_positions):
            raise Mistake(
                f"{case}: 形が (d_model, n_positions) = {(d_model, n_positions)} です。"
                "行が位置、列が次元の (n_positions, d_model) にしてください（転置が逆です）。")
        pe = returned_array(result, "pe", (n_positions, d_model))
        if not np.allclose(pe, _timing_signal(n_positions, d_model), rtol=0.0, atol=_ATOL):
            raise Mistake(f"{case}: {_diagnose_signal(pe)}")


# --- adding the paper's encoding at an offset ------------------------------------------------

def _paper(first: int, n: int, d_model: int, **choices) -> np.ndarray:
    """Rows ``first … first+n−1`` of the paper's encoding, with the mistakes ``choices``
    of chapter 05–06's students (order, layout, start): (n, D)."""
    order = choices.get("order", "sin_cos")
    layout = choices.get("layout", "interleaved")
    start = choices.get("start", 0)
    return _encoding(n, d_model, order, layout, "paper", first + start)


#: (case name, x shape (B, T, D), offset) of the hidden cases: a whole prompt, a chunk of
#: three tokens after eleven, one token after seven (a decoding step), and one sequence.
_ADD_CASES = (
    ("x の形 (3, 5, 6)・offset 0 のケース", (3, 5, 6), 0),
    ("x の形 (4, 3, 14)・offset 11 のケース", (4, 3, 14), 11),
    ("x の形 (2, 1, 10)・offset 7 のケース（1 トークンずつ生成する 1 ステップ）", (2, 1, 10), 7),
    ("x の形 (1, 6, 12)・offset 5 のケース", (1, 6, 12), 5),
)

_ADD_DIAGNOSES = {
    "batch": (
        "位置ではなくバッチの番号の符号化を足しています。x の形は (B, T, D) で、位置は"
        "軸 1 です。系列 b のすべての位置に同じ PE(b) が足されると、系列の中の位置の情報は"
        "消えます（バッチ先頭の配列を系列先頭のつもりで x.shape[0] で切ると起きます）。"
    ),
    "no_offset": (
        "offset を使っていません。x のトークンの位置は offset, offset+1, …, offset+T−1 で、"
        "足すのは PE(offset) からの T 行です。offset を無視すると、KV キャッシュで 1 トークン"
        "ずつ生成するとき、新しいトークンにいつも PE(0) が足されます。"
    ),
    "offset_only": (
        "どの位置にも PE(offset) だけを足しています。1 トークンずつ生成するステップ（T = 1）"
        "ならそれで正しいのですが、T 個のトークンの位置は offset, offset+1, …, offset+T−1 です。"
    ),
    "plus_one": (
        "位置が 1 つ後ろにずれています（PE(offset+1) から足しています）。最初のトークンの"
        "位置は offset です（前の offset 個が位置 0 〜 offset−1 を使っています）。"
    ),
    "minus_one": (
        "位置が 1 つ前にずれています（PE(offset−1) から足しています）。最初のトークンの"
        "位置は offset です。"
    ),
    "scaled": (
        "x に √d_model を掛けています。第 8 節の √d_model は、論文が埋め込み行列に掛ける"
        "係数です。この関数は受け取った x をそのまま使い、位置エンコーディングを足すだけ"
        "です。"
    ),
    "twice": "位置エンコーディングを 2 回足しています。",
}


def _added_candidates(B: int, T: int, D: int, offset: int):
    """(diagnosis keys, what was added, broadcastable to (B, T, D)) of typical mistakes."""
    by_position = {
        (): offset,  # the right rows start at offset
        ("no_offset",): 0,
        ("plus_one",): offset + 1,
    }
    if offset >= 1:
        by_position[("minus_one",)] = offset - 1
    encodings = [([], {})]
    for order, layout, start in product(("sin_cos", "cos_sin"), ("interleaved", "concat"),
                                        (0, 1)):
        choice = {"order": order, "layout": layout, "start": start}
        keys = [key for key in (("order", order), ("layout", layout), ("start", start))
                if key in _DIAGNOSES_PAPER]
        if keys:
            encodings.append((keys, choice))
    for keys, choice in encodings:
        for where, first in by_position.items():
            yield list(where) + keys, _paper(first, T, D, **choice)[None]  # (1, T, D)
        yield ["offset_only"] + keys, _paper(offset, 1, D, **choice)[None]  # (1, 1, D)
        yield ["batch"] + keys, _paper(0, B, D, **choice)[:, None, :]  # (B, 1, D)
        if offset:
            yield ["batch"] + keys, _paper(offset, B, D, **choice)[:, None, :]


#: The paper-layout mistakes of chapter 06, named as the paper's formula has them.
_DIAGNOSES_PAPER = {
    ("order", "cos_sin"): (
        "sin と cos が逆です。論文の式では偶数番目の次元 2i が sin、奇数番目の次元 2i+1 が "
        "cos です（sinusoidal_encoding を使えば、この間違いは起きません）。"
    ),
    ("layout", "concat"): (
        "前半に sin、後半に cos を並べた [sin | cos] の形を足しています。この関数が足すのは"
        "論文の式の並べ方（次元 2i が sin、2i+1 が cos、sinusoidal_encoding の既定）です。"
    ),
    ("start", 1): (
        "符号化の位置を 1 から数えています。sinusoidal_encoding の行 p が位置 p の符号化"
        "です。"
    ),
}


def _describe_added(keys) -> str:
    return "".join(_ADD_DIAGNOSES.get(key) or _DIAGNOSES_PAPER[key] for key in keys)


def _diagnose_added(x: np.ndarray, offset: int, out: np.ndarray) -> str:
    """Name the mistakes that reproduce ``out`` from ``x`` (B, T, D)."""
    B, T, D = x.shape
    right = sinusoidal_encoding(offset + T, D)[offset:]  # (T, D)
    if np.allclose(out, x, atol=_ATOL):
        return "x をそのまま返しています。位置エンコーディングを足してください。"
    if np.allclose(out, np.broadcast_to(right, out.shape), atol=_ATOL):
        return "位置エンコーディングだけを返しています。x に足した x + PE を返してください。"
    for coefficient, extra in ((1.0, []), (np.sqrt(D), ["scaled"])):
        added = out - coefficient * x  # (B, T, D): what was added to the (scaled) x
        for keys, pe in _added_candidates(B, T, D, offset):
            if extra == [] and keys == []:
                continue  # the right answer (it would have passed)
            if np.allclose(added, np.broadcast_to(pe, added.shape), rtol=0.0, atol=_ATOL):
                return _describe_added(extra + keys)
    added = out - x
    if np.allclose(added, 2.0 * np.broadcast_to(right, added.shape), atol=_ATOL):
        return _ADD_DIAGNOSES["twice"]
    if np.abs(added - added[:1]).max() > _ATOL:
        return ("バッチの系列ごとに足した値が違います。位置エンコーディングは位置だけで決まり、"
                "バッチのどの系列にも同じ PE(offset), PE(offset+1), … を足します。")
    return ("足した値が位置エンコーディングと一致しません。out − x を "
            "sinusoidal_encoding(offset + T, D)[offset:] と比べてみてください。")


_SHAPE = re.compile(r"\((\d+(?:\s*,\s*\d+)*)\s*,?\s*\)")


def _broadcast_hint(error: Exception, B: int, T: int, D: int, offset: int) -> str:
    """What the shapes in numpy's broadcasting error say the student built."""
    shapes = {tuple(int(n) for n in found.split(",")) for found in _SHAPE.findall(str(error))}
    if (T, 1, D) in shapes:
        return (f"PE を (T, 1, D) = {(T, 1, D)} の形で作っています。T 行は正しいのですが、"
                "位置の軸が 0 番目にあるので、x の軸 0（バッチ）とそろえられてしまいます。"
                f"x は (B, T, D) = {(B, T, D)} で位置は軸 1 なので、(T, D) か (1, T, D) の形で"
                "足してください（(T, 1, D) は系列を先頭に置く (T, B, D) の入力のための形です）。")
    if B != T and (B, D) in shapes:
        return (f"B = {B} 行の PE を作っていませんか。足す PE は位置の数 T = {T} 行の "
                f"(T, D) = {(T, D)} です（x.shape[0] はバッチの大きさ B です）。")
    if offset and (offset + T, D) in shapes:
        return (f"offset + T = {offset + T} 行の PE をそのまま足しています。x のトークンの"
                f"位置は offset 〜 offset+T−1 なので、最後の T 行 pe[offset:] を足してください。")
    if offset and (max(T - offset, 0), D) in shapes:
        return ("T 行の PE を作ってから offset で切っていませんか。位置 offset 〜 offset+T−1 の"
                "行が要るので、offset + T 行作ってから pe[offset:] を切り出します。")
    return (f"形が合いません。x は (B, T, D) = {(B, T, D)} で、足す PE は位置 offset 〜 "
            f"offset+T−1 の (T, D) = {(T, D)} です。")


def _call_keeping_x(func: Callable, x: np.ndarray, offset: int):
    """Call ``func(x, offset)`` on a copy of x that the check can look at afterwards:
    (result, the array the student received)."""
    given = np.array(x, copy=True)
    return call_student(lambda: func(given, offset)), given


@checker("offset からの位置で正しく足せました。")
def check_add_positional_encoding(func: Callable) -> None:
    """Check ``func(x, offset) -> x + PE`` for x (B, T, D) at positions offset … offset+T−1.

    The expected answer is a new array ``x + sinusoidal_encoding(offset + T, D)[offset:]``
    broadcast over the batch (what a model adds when the first ``offset`` tokens are
    already in its KV cache). Diagnoses the encoding of the batch index, the offset left
    out or off by one, PE(offset) at every position, x multiplied by √d_model, an
    encoding built as (T, 1, D) or with B rows (from the shapes numpy names), x changed
    in place, x returned unchanged, the encoding alone, and the paper-layout mistakes of
    the encoding itself.

    Parameters
    ----------
    func : callable
        The student's function: x (B, T, D) and offset (int ≥ 0) → (B, T, D).

    Returns
    -------
    bool
        True if every hidden case matches.

    Taught in chapter 06.
    """
    rng = np.random.default_rng(20260606)
    for case, shape, offset in _ADD_CASES:
        x = rng.normal(size=shape)  # (B, T, D)
        B, T, D = shape
        result, given = _call_keeping_x(func, x, offset)
        if isinstance(result, Raised):
            message = raised_message(result, case)
            if isinstance(result.error, ValueError) and "broadcast" in str(result.error):
                message += _broadcast_hint(result.error, B, T, D, offset)
            raise Mistake(message)
        if B == 1 and np.shape(result) == (T, T, D):
            raise Mistake(
                f"{case}: 返り値の形が (T, T, D) = {(T, T, D)} です。PE を (T, 1, D) の形で"
                "作ると、B = 1 の x (1, T, D) とのブロードキャストで T × T 個の組ができます。"
                "x の位置は軸 1 なので、PE は (T, D) か (1, T, D) の形で足してください。")
        out = returned_array(result, "x + PE", x.shape)
        expected = x + sinusoidal_encoding(offset + T, D)[offset:]  # (B, T, D)
        if not np.allclose(out, expected, rtol=0.0, atol=_ATOL):
            raise Mistake(f"{case}: {_diagnose_added(x, offset, out)}")
        if not np.array_equal(given, x):
            raise Mistake(
                f"{case}: 値は正しいのですが、受け取った x そのものを書き換えています"
                "（x += … や np.add(x, pe, out=x)）。呼び出した側の配列も変わるので、同じ"
                "埋め込みをもう一度使うと位置が 2 回足されます。新しい配列 x + PE を返して"
                "ください。")
