"""Chapter 07's self-check: ``my_lookup(table, positions) -> rows (..., D)``.

A right answer returns ``table[positions]`` for positions inside the table and raises
``IndexError`` for any position < 0 or ≥ len(table). The diagnosis is computed: what the
answer returned for an outside position is compared with what wrapping (numpy's
negative indices, ``np.take(..., mode="wrap")``) and clipping (``mode="clip"``) give.
The chapter imports :func:`~attnlab.positional.lookup_positions` in its setup cell, so an
answer that hands the work to it is refused. The hidden tables have 11 and 6 rows, not
the 8 of the chapter's example.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnlab.checks.attention_has_no_order import calls_reference
from attnlab.checks.core import (
    Mistake,
    Raised,
    call_student,
    checker,
    raised_message,
    returned_array,
)
from attnlab.positional import lookup_positions

#: Rows of the table in the chapter's own example (section 1): an answer that writes
#: this number in instead of ``len(table)`` is named.
_EXAMPLE_ROWS = 8


@dataclass(frozen=True)
class _Case:
    name: str
    table: np.ndarray  # (max_len, D)
    positions: Any  # a list or an array of any shape


def _tables() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20260707)
    table = rng.normal(size=(11, 5))  # (max_len, D): every entry different
    small = rng.normal(size=(6, 3)).astype(np.float32)  # (max_len, D), float32
    return table, small


def _inside_cases() -> list[_Case]:
    table, small = _tables()
    return [
        _Case("位置の配列 [3, 0, 10, 10, 1] のケース", table, np.array([3, 0, 10, 10, 1])),
        _Case("位置が (2, 3) の 2 次元配列のケース", table,
              np.array([[0, 1, 2], [10, 9, 5]], dtype=np.int32)),
        _Case("float32 の表と Python のリストのケース", small, [5, 4, 0]),
    ]


def _outside_cases() -> list[tuple[_Case, int]]:
    """Cases with one position outside the table, and that position."""
    table, small = _tables()
    n = len(table)
    return [
        (_Case("位置 -1 を含むケース", table, np.array([2, -1, 4])), -1),
        (_Case(f"位置 {n}（= len(table)）を含むケース", table, np.array([2, n, 4])), n),
        (_Case("位置 -3 を含む 2 次元配列のケース", table, np.array([[0, 1], [-3, 2]])), -3),
        (_Case(f"位置 {n + 4} を含むケース", table, np.array([1, n + 4])), n + 4),
        (_Case(f"float32 の表で位置 {len(small)} を含むリストのケース", small,
               [0, len(small)]), len(small)),
    ]


def _diagnose_rows(case: _Case, rows: np.ndarray) -> str:
    """Name the shift whose rows ``rows`` equal, for positions inside the table."""
    p = np.asarray(case.positions)
    n = len(case.table)
    for shift, text in ((-1, "1 つ前"), (1, "1 つ後")):
        if np.allclose(rows, case.table[(p + shift) % n], rtol=1e-6, atol=0.0):
            return (f"位置 p に対して {text}の行 table[p {'-' if shift < 0 else '+'} 1] を"
                    "返しています。位置は 0 から数え、位置 p の行は table[p] です。")
    return "返した行が table[positions] と一致しません。位置 p の行は table[p] です。"


def _check_inside(func: Callable, case: _Case) -> None:
    result = call_student(func, case.table, case.positions)
    if isinstance(result, Raised):
        message = raised_message(result, case.name)
        if isinstance(result.error, IndexError):
            message += "表の中の位置（0 〜 len(table) − 1）で IndexError を出しています。"
            n = len(case.table)
            if _raises_index_error(func, _Case("", case.table, np.array([0])), 0):
                message += "位置は 0 から数えます。位置 0 の行は table[0] です。"
            elif n > _EXAMPLE_ROWS and _raises_index_error(
                    func, _Case("", case.table, np.array([_EXAMPLE_ROWS])), _EXAMPLE_ROWS
            ) and not _raises_index_error(
                    func, _Case("", case.table, np.array([_EXAMPLE_ROWS - 1])),
                    _EXAMPLE_ROWS - 1):
                message += (f"位置 {_EXAMPLE_ROWS} から先で止まります。第 1 節の例の表の"
                            f"行数 {_EXAMPLE_ROWS} を書き込んでいませんか。この表は {n} 行"
                            "なので、len(table) を使って判定してください。")
            elif _raises_index_error(func, _Case("", case.table, np.array([n - 1])), n - 1):
                message += (f"最後の位置 len(table) − 1 = {n - 1} も表の中です。"
                            "範囲の判定を確かめてください。")
        elif np.ndim(case.positions) == 2:
            message += ("positions はどんな形の配列でも受け付けてください。"
                        "table[positions] は形 (..., D) の行をまとめて返します。")
        raise Mistake(message)
    shape = np.shape(case.positions) + case.table.shape[1:]
    if isinstance(result, np.ndarray) and np.issubdtype(result.dtype, np.integer):
        raise Mistake(f"{case.name}: 返した行の dtype が {result.dtype} です。"
                      "表の行は小数なので、整数に丸めずにそのまま返してください。")
    if np.ndim(case.positions) == 2 and np.size(result) == np.prod(shape) and (
            np.shape(result) != shape):
        raise Mistake(f"{case.name}: 返した形が {np.shape(result)} です。positions の形 "
                      f"{np.shape(case.positions)} の後ろに D を付けた形 {shape} にしてください。")
    rows = returned_array(result, f"{case.name}の返り値", shape)
    if not np.allclose(rows, lookup_positions(case.table, case.positions), rtol=1e-6, atol=0.0):
        raise Mistake(f"{case.name}: {_diagnose_rows(case, rows)}")


def _raises_index_error(func: Callable, case: _Case, position: int) -> bool:
    """Does ``func`` raise IndexError when ``position`` replaces every outside position?"""
    p = np.asarray(case.positions)
    probe = np.where((p < 0) | (p >= len(case.table)), position, p)
    result = call_student(func, case.table, probe)
    return isinstance(result, Raised) and isinstance(result.error, IndexError)


def _check_outside(func: Callable, case: _Case, bad: int) -> None:
    n = len(case.table)
    result = call_student(func, case.table, case.positions)
    if isinstance(result, Raised):
        if isinstance(result.error, IndexError):
            return
        raise Mistake(
            f"{raised_message(result, case.name)}範囲外の位置には IndexError を出してください"
            f"（いまは {type(result.error).__name__}）。Python の約束で、添字が範囲外の"
            "ときの例外は IndexError です。"
        )
    p = np.asarray(case.positions)
    shape = p.shape + case.table.shape[1:]
    try:
        rows = np.asarray(result, dtype=np.float64)
    except (TypeError, ValueError):
        rows = None
    where = "負の位置" if bad < 0 else f"位置 {bad}（≥ len(table) = {n}）"
    if bad == n and _raises_index_error(func, case, n + 4):
        raise Mistake(
            f"{case.name}: 位置 {n + 4} では IndexError が出るのに、位置 {n} = len(table) では"
            f"出ません。表の行は位置 0 〜 {n - 1} だけなので、位置 {n} はもう範囲外です"
            "（p > len(table) ではなく p >= len(table) で判定します）。"
        )
    if rows is not None and rows.shape == shape:
        row = rows[p == bad][0]  # (D,) what came back for the outside position
        wrapped = case.table[bad % n]
        clipped = case.table[min(max(bad, 0), n - 1)]
        if np.allclose(row, wrapped, rtol=1e-6, atol=0.0) and bad < 0:
            raise Mistake(
                f"{case.name}: 位置 {bad} で、エラーを出さずに表の末尾から数えた行 "
                f"table[{bad % n}] を返しています。NumPy の負の添字は後ろから数えるので、"
                "table[positions] だけでは位置 -1 が黙って最後の行になります。"
                "負の位置を調べて IndexError を出してください。"
            )
        if np.allclose(row, wrapped, rtol=1e-6, atol=0.0):
            raise Mistake(
                f"{case.name}: 位置 {bad} で、エラーを出さずに len(table) で割った余りの行 "
                f"table[{bad % n}] を返しています（mode=\"wrap\" のような折り返し）。"
                f"表にない位置 {bad} には IndexError を出してください。"
            )
        if np.allclose(row, clipped, rtol=1e-6, atol=0.0):
            edge = "最初の行 table[0]" if bad < 0 else f"最後の行 table[{n - 1}]"
            raise Mistake(
                f"{case.name}: {where}を表の端に切り詰めて、{edge} を返しています"
                "（np.clip や mode=\"clip\"）。表にない位置の行を作ってはいけません。"
                "IndexError を出してください。"
            )
    if bad == n:
        raise Mistake(
            f"{case.name}: 位置 {n} = len(table) でエラーが出ません。表の行は位置 0 〜 "
            f"{n - 1} だけなので、位置 {n} はもう範囲外です（p > len(table) ではなく "
            "p >= len(table) で判定します）。IndexError を出してください。"
        )
    raise Mistake(f"{case.name}: {where}でエラーが出ません。範囲外の位置には IndexError を"
                  "出してください。")


@checker("表の中は table[positions] と一致、外は IndexError。")
def check_position_lookup(func: Callable) -> None:
    """Check ``func(table, positions) -> rows`` against :func:`lookup_positions`.

    Prints 【正解】, 【未実装】 or 【不正解】 with a diagnosis (negative positions wrapping
    to the end of the table, positions clipped to the first or last row, no error at
    ``len(table)``, an error type other than IndexError, an error for a position inside
    the table, rows shifted by one, a wrong shape for 2-D positions, None returned).

    Parameters
    ----------
    func : callable
        The student's ``my_lookup``: table (max_len, D) and positions (a list or an
        integer array of any shape (...)) → rows (..., D); ``IndexError`` for a
        position < 0 or ≥ max_len.

    Returns
    -------
    bool
        True if every hidden case matches.

    Taught in chapter 07.
    """
    if calls_reference(func, lookup_positions):
        raise Mistake("attnlab の lookup_positions をそのまま使っています。この練習問題は、"
                      "同じ引き方（範囲の判定を含めて）を自分で書くことです。")
    for case in _inside_cases():
        _check_inside(func, case)
    for case, bad in _outside_cases():
        _check_outside(func, case, bad)
