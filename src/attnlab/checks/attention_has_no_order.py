"""Chapter 05's self-check: ``f(tokens, loss_mask, vocab_size) -> float``, the order-blind
ceiling of a batch of :class:`attnlab.tasks.PreviousToken`.

As in chapter 01, the diagnosis is computed: the check builds what each typical mistake
would return and says which one the answer matches. The chapter imports
:func:`~attnlab.experiments.attention_has_no_order.order_blind_ceiling` in its setup cell,
so an answer that hands the work to it is refused
(:func:`attnlab.checks.core.call_refusing`).
"""

from __future__ import annotations

from itertools import product

import numpy as np

from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    checker,
    fix_on_repeat,
    raised_message,
)
from attnlab.experiments.attention_has_no_order import order_blind_ceiling
from attnlab.tasks import PreviousToken

#: The chapter imports the reference: an answer that hands the work to it is refused.
_REFERENCES = {order_blind_ceiling: (
    "attnlab の order_blind_ceiling をそのまま使っています。この練習問題は、同じ計算を自分で"
    "書くことです（order_blind_ceiling は答え合わせに使います）。")}

_DIAGNOSES = {
    ("self", "max_minus_one"): (
        "自分の 1 個を、いちばん多いトークンの個数から引いています。除くのは位置 t のトークン"
        "（tokens[t]）の 1 個です。位置 t のトークンがいちばん多いトークンでなければ、"
        "最大値はそのまま変わりません。"
    ),
    ("self", "all_copies"): (
        "位置 t のトークンと同じ値のトークンを、全部候補から外しています。除くのは位置 t の"
        "自分の 1 個だけで、ほかの位置にある同じトークンは前のトークンの候補に残ります。"
    ),
    ("scope", "batch"): (
        "トークンの個数をバッチ全体（すべての行）で数えています。モデルが見るのは自分の行"
        "（1 つの系列）のトークンだけなので、個数は行ごとに数えてください。"
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
#: Counting oneself: what went wrong first, the line of code only when it comes again.
_SELF_COUNTED = (
    "位置 t のトークン自身も数えています。前のトークンは t 以外の T − 1 か所のどれかなので、"
    "数えるのは「自分を除いた」トークンです。",
    "行の個数から、位置 t のトークンの 1 個を引いてください（counts[tokens[t]] -= 1）。",
)
#: The vocabulary of the chapter's example, which an answer may have written in.
_EXAMPLE_VOCAB = 32


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


def _candidate(tokens, loss_mask, vocab_size, self_mode, denominator, positions,
               multiset, scope="row", vocab=None) -> float:
    """What the answer would be with the given (possibly wrong) choices.

    ``self_mode``: "own" (right: one count of tokens[t] removed), "counted" (oneself
    counted), "max_minus_one" (one taken off the largest count), "all_copies" (every
    copy of tokens[t] removed); ``scope``: counts per "row" (right) or over the "batch";
    ``vocab``: count only the ids below it (a vocabulary written in), None for all.
    """
    T = tokens.shape[1]
    batch_counts = np.bincount(tokens.ravel(), minlength=vocab_size)
    values = []
    for row, mask in zip(tokens, loss_mask, strict=True):
        counts = (batch_counts if scope == "batch"
                  else np.bincount(row, minlength=vocab_size))[:vocab]
        where = {"all": range(T), "from1": range(1, T)}.get(positions,
                                                            np.flatnonzero(mask))
        for t in where:
            others = counts.copy()
            own = row[t] < len(others)
            if self_mode == "own" and own:
                others[row[t]] -= 1
            elif self_mode == "all_copies" and own:
                others[row[t]] = 0
            best = others.max() if multiset else float((others > 0).max())
            if self_mode == "max_minus_one":
                best -= 1
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
    impossible = "" if 0.0 <= value <= 1.0 else (
        "当たる確率の平均なので 0 以上 1 以下のはずですが、その外の値です。")
    example = _sizes_of_the_example(tokens, loss_mask, vocab_size, value)
    if example is not None:
        return impossible + example
    vocabularies = (None, _EXAMPLE_VOCAB) if vocab_size > _EXAMPLE_VOCAB else (None,)
    options = product(vocabularies, ("row", "batch"),
                      ("own", "counted", "max_minus_one", "all_copies"),
                      ("T-1", "T", "none"), ("masked", "all", "from1"), (True, False))
    for vocab, scope, self_mode, denominator, positions, multiset in options:
        choices = (vocab, scope, self_mode, denominator, positions, multiset)
        if choices == (None, "row", "own", "T-1", "masked", True):
            continue
        candidate = _candidate(tokens, loss_mask, vocab_size, self_mode, denominator,
                               positions, multiset, scope, vocab)
        if np.isclose(value, candidate, rtol=1e-5, atol=1e-9):
            text = [impossible]
            if vocab is not None:
                text.append(f"語彙を {vocab} 個に固定していませんか"
                            f"（第 5 節の例の |𝒱| = {vocab}）。このケースの語彙は {vocab_size} で、"
                            f"番号 {vocab} 以上のトークンを"
                            "数えていません。vocab_size を使ってください。")
            if self_mode == "counted":
                text.append(fix_on_repeat("ex05-ceiling/self", *_SELF_COUNTED))
            found = [("scope", scope), ("self", self_mode), ("denominator", denominator),
                     ("positions", positions), ("multiset", multiset)]
            text += [_DIAGNOSES[f] for f in found if f in _DIAGNOSES]
            return "".join(text)
    return impossible + (
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

    Prints 【正解】, 【未実装】 or 【不正解】 with a diagnosis (oneself counted; one taken
    off the largest count instead of tokens[t]'s; every copy of tokens[t] removed; counts
    over the whole batch; a value outside [0, 1]; divided by T, by nothing, by 31 or by
    B − 1; loss_mask ignored; kinds counted instead of copies; the example's vocabulary
    of 32 written in; an exception; ``order_blind_ceiling`` used).

    Parameters
    ----------
    func : callable
        The student's ``my_order_blind_ceiling(tokens, loss_mask, vocab_size)``: tokens
        (B, T) int, loss_mask (B, T) bool → a float.

    Returns
    -------
    CheckResult
        True (``.passed``) if every hidden case matches.

    Taught in chapter 05.
    """
    for case, tokens, loss_mask, vocab_size in _cases():
        result = call_refusing(func, _REFERENCES, tokens, loss_mask, vocab_size)
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
