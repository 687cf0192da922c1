"""Chapter 05's self-check: ``f(tokens, loss_mask, vocab_size) -> float``, the order-blind
ceiling of a batch of :class:`attnlab.tasks.PreviousToken`.

As in chapter 01, the diagnosis is computed: the check builds what each typical mistake
would return and says which one the answer matches. The chapter imports
:func:`~attnlab.experiments.attention_has_no_order.order_blind_ceiling` in its setup cell,
so an answer that hands the work to it is refused (:func:`calls_reference`).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from itertools import product

import numpy as np

from attnlab.checks.core import Mistake, Raised, call_student, checker, raised_message
from attnlab.experiments.attention_has_no_order import order_blind_ceiling
from attnlab.tasks import PreviousToken

_DIAGNOSES = {
    ("self", True): (
        "位置 t のトークン自身も数えています。前のトークンは t 以外の T − 1 か所のどれかなので、"
        "数えるのは「自分を除いた」トークンです（counts[tokens[t]] -= 1）。"
    ),
    ("denominator", "T"): (
        "T で割っています。候補の場所は自分を除いた T − 1 か所なので、T − 1 で割ります。"
    ),
    ("denominator", "none"): (
        "最大の個数をそのまま平均しています。当たる確率にするには T − 1 で割ります。"
    ),
    ("positions", "all"): (
        "loss_mask を使わずに全位置で平均しています。スコアを付けるのは loss_mask が True の"
        "位置だけです（先頭の位置には写すトークンがありません）。"
    ),
    ("positions", "from1"): (
        "loss_mask を使わずに位置 1 から先を採点しています。採点しない位置は先頭の 1 つとは"
        "限りません（offset = 3 なら先頭の 3 つ）。loss_mask が True の位置だけを使ってください。"
    ),
    ("multiset", False): (
        "種類（集合）を数えています。同じトークンが何回あるか（多重集合）を数えてください。"
        "いちばん多いトークンを答えるのが最善です。"
    ),
}


def calls_reference(func: Callable, reference: Callable) -> bool:
    """Does the student's ``func`` hand its work to ``reference`` (a function of attnlab)?

    True if ``func`` is ``reference`` (also through ``functools.partial`` or
    ``__wrapped__``), or if its code, or the code of a function it defines inside or
    calls from the same notebook, names ``reference``: a global, a closure variable or a
    module attribute bound to it. A self-check calls this when the chapter's setup cell
    makes ``reference`` visible, so that passing it (or a one-line wrapper) is not
    accepted as the student's own answer.

    Not taught: machinery of the self-checks (a candidate for :mod:`attnlab.checks.core`).
    """
    seen: set[int] = set()

    def reaches(f, depth: int) -> bool:
        if f is reference:
            return True
        if isinstance(f, functools.partial):
            return reaches(f.func, depth)
        wrapped = getattr(f, "__wrapped__", None)
        if wrapped is not None and reaches(wrapped, depth):
            return True
        code = getattr(f, "__code__", None)
        if not isinstance(code, types.CodeType) or id(f) in seen or depth < 0:
            return False
        seen.add(id(f))
        names, stack = set(), [code]
        while stack:  # the function's code and every function or lambda defined inside it
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        spaces = getattr(f, "__globals__", {})
        values = [spaces[n] for n in names if n in spaces]
        for cell in getattr(f, "__closure__", None) or ():
            try:
                values.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        for value in values:
            if value is reference:
                return True
            if isinstance(value, types.ModuleType):
                if reference.__name__ in names and getattr(
                        value, reference.__name__, None) is reference:
                    return True  # e.g. attnlab.positional.lookup_positions(...)
            elif getattr(value, "__globals__", None) is spaces and reaches(value, depth - 1):
                return True  # a helper the student wrote in the same notebook
        return False

    try:
        return reaches(func, 3)
    except Exception:  # an object that cannot be inspected is not the reference
        return False


def _cases() -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    """(case name, tokens (B, T), loss_mask (B, T), vocab_size) for the hidden cases.

    Sizes unlike the chapter's example (|𝒱| = T = 32): rows fewer than positions, a
    vocabulary larger than 32, an offset other than 1, nothing a power of two.
    """
    rng = np.random.default_rng(20260506)
    small = PreviousToken(vocab_size=5)(rng, 6, 7)
    offset3 = PreviousToken(vocab_size=11, offset=3)(rng, 5, 13)
    wide = PreviousToken(vocab_size=37)(rng, 3, 23)
    return [
        ("語彙 5・長さ 7 のケース", small.tokens, small.loss_mask, 5),
        ("offset=3・語彙 11・長さ 13 のケース", offset3.tokens, offset3.loss_mask, 11),
        ("語彙 37・長さ 23 のケース", wide.tokens, wide.loss_mask, 37),
    ]


def _candidate(tokens, loss_mask, vocab_size, self_counted, denominator, positions,
               multiset) -> float:
    """What the answer would be with the given (possibly wrong) choices."""
    T = tokens.shape[1]
    values = []
    for row, mask in zip(tokens, loss_mask, strict=True):
        counts = np.bincount(row, minlength=vocab_size)
        where = {"all": range(T), "from1": range(1, T)}.get(positions,
                                                            np.flatnonzero(mask))
        for t in where:
            others = counts.copy()
            if not self_counted:
                others[row[t]] -= 1
            best = others.max() if multiset else float((others > 0).max())
            divisor = {"T-1": T - 1, "T": T, "none": 1}[denominator]
            values.append(best / divisor)
    return float(np.mean(values))


def _sizes_of_the_example(tokens, loss_mask, vocab_size, value: float) -> str | None:
    """Name the sizes the answer took from the chapter's example instead of its input."""
    B, T = tokens.shape
    if B != T and np.isclose(value, order_blind_ceiling(tokens, loss_mask, vocab_size)
                             * (T - 1) / (B - 1), rtol=1e-5, atol=1e-9):
        return (f"T − 1 ではなく B − 1 = {B - 1} で割っています。T は tokens の列の数 "
                "tokens.shape[1] で、行の数 tokens.shape[0] は B です。")
    if T != 32 and np.isclose(value, order_blind_ceiling(tokens, loss_mask, vocab_size)
                              * (T - 1) / 31, rtol=1e-5, atol=1e-9):
        return ("31 で割っています。第 5 節の例の T = 32 を書き込まず、tokens.shape[1] − 1 で"
                "割ってください。")
    return None


def _diagnose(tokens, loss_mask, vocab_size, value: float) -> str:
    example = _sizes_of_the_example(tokens, loss_mask, vocab_size, value)
    if example is not None:
        return example
    options = product((False, True), ("T-1", "T", "none"), ("masked", "all", "from1"),
                      (True, False))
    for self_counted, denominator, positions, multiset in options:
        if (self_counted, denominator, positions, multiset) == (False, "T-1", "masked", True):
            continue
        candidate = _candidate(tokens, loss_mask, vocab_size, self_counted, denominator,
                               positions, multiset)
        if np.isclose(value, candidate, rtol=1e-5, atol=1e-9):
            found = [("self", self_counted), ("denominator", denominator),
                     ("positions", positions), ("multiset", multiset)]
            return "".join(_DIAGNOSES[f] for f in found if f in _DIAGNOSES)
    return (
        "値が正しくありません。スコアを付ける位置ごとに「自分を除いたトークンの個数の最大値 ÷ "
        "(T − 1)」を求め、その平均を返してください。"
    )


def _as_number(value, case: str) -> float:
    if value is None:
        raise Mistake(f"{case}で None が返りました。return を書き忘れていませんか。")
    array = np.asarray(value)
    if array.dtype == object or not np.issubdtype(array.dtype, np.number):
        raise Mistake(f"{case}で数ではない値が返りました（型 {type(value).__name__}）。")
    if array.size != 1:
        raise Mistake(
            f"{case}で形 {array.shape} の配列が返りました。バッチ全体の平均、"
            "1 つの数を返してください。"
        )
    return float(array.reshape(()))


@checker("自分を除く最頻値が当たる確率の平均が一致。")
def check_order_blind_ceiling(func) -> None:
    """Check ``func(tokens, loss_mask, vocab_size)``: the best accuracy an order-blind
    model can expect on these PreviousToken rows, as one number.

    Taught in chapter 05.
    """
    if calls_reference(func, order_blind_ceiling):
        raise Mistake("attnlab の order_blind_ceiling をそのまま使っています。この練習問題は、"
                      "同じ計算を自分で書くことです（order_blind_ceiling は答え合わせに"
                      "使います）。")
    for case, tokens, loss_mask, vocab_size in _cases():
        result = call_student(func, tokens, loss_mask, vocab_size)
        if isinstance(result, Raised):
            hint = ""
            if vocab_size > 32:  # the earlier cases passed: only the vocabulary is larger
                hint = ("語彙が 32 より大きいこのケースだけで起きるなら、第 5 節の例の |𝒱| = 32 を"
                        "書き込んでいませんか（vocab_size を使ってください）。")
            raise Mistake(raised_message(result, case) + hint)
        value = _as_number(result, case)
        expected = order_blind_ceiling(tokens, loss_mask, vocab_size)
        if not np.isclose(value, expected, rtol=1e-5, atol=1e-9):
            diagnosis = _diagnose(tokens, loss_mask, vocab_size, value)
            raise Mistake(f"{case}で {value:.4f} が返りました。{diagnosis}")
