"""Chapter 02's self-check: ``my_heads_output(scores, values) -> out``.

Each head turns its own scores into weights and reads its own column block of the
values; the outputs are put side by side. The diagnosis is computed: the check builds
what each typical mistake returns and says which one the answer matches. The reference
:func:`attnlab.experiments.why_heads.heads_output` is imported by chapter 02, so an
answer that is it, or calls it, is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attnlab.attention import softmax
from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    checker,
    raised_message,
    returned_array,
)
from attnlab.experiments.why_heads import heads_output

_REFERENCES = {
    heads_output: (
        "attnlab の heads_output を使っています（そのまま渡すか、中で呼んでいます）。"
        "この練習問題では heads_output を使わずに、softmax と列の切り出しで自分で書いて"
        "ください。"
    ),
}


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(20260202)
    # no case is the chapter's (2 heads, T = 7, d_model = 16): the head widths are 3, 4,
    # 2 and 5 (no power of two but one), T differs from the width, and 5 heads of 3 columns
    # catch an answer that hard-codes two halves or d_k = 8
    return [
        ("ヘッド 2 つのケース", rng.normal(size=(2, 5)), rng.normal(size=(5, 6))),
        ("ヘッド 3 つのケース", 3.0 * rng.normal(size=(3, 9)), rng.normal(size=(9, 12))),
        ("ヘッド 5 つのケース", rng.normal(size=(5, 7)), rng.normal(size=(7, 15))),
        ("ヘッド 1 つのケース", rng.normal(size=(1, 5)), rng.normal(size=(5, 2))),
    ]


def _blocks(values: np.ndarray, H: int) -> np.ndarray:
    """(T, D) → (H, T, Dh): head i's column block i·Dh … (i+1)·Dh − 1."""
    T, D = values.shape
    return values.reshape(T, H, D // H).transpose(1, 0, 2)


def _read(weights: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Each head's weights (H, T) times its block (H, T, Dh), side by side: (D,)."""
    return np.einsum("ht,htd->hd", weights, blocks).reshape(-1)


def _mistakes(scores: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """What each typical mistake returns, with its Japanese diagnosis as the key."""
    H, (T, D) = scores.shape[0], values.shape
    Dh = D // H
    weights = softmax(scores, axis=-1)  # (H, T)
    blocks = _blocks(values, H)  # (H, T, Dh)
    mistakes = {
        "列を H 列おきに読んでいます（ヘッド 0 が列 0, H, 2H, …）。各ヘッドが読むのは"
        "連続した列のブロックです：ヘッド 0 は列 0:Dh、ヘッド 1 は列 Dh:2·Dh、…。":
            _read(weights, values.reshape(T, Dh, H).transpose(2, 0, 1)),
        "values.reshape(H, T, Dh) としています。形は合いますが、それではヘッド 0 が最初の"
        "いくつかの行（トークン）をまとめて持ち、列のブロックになりません。"
        "values.reshape(T, H, Dh) としてから H と T の軸を入れ替えてください"
        "（transpose(1, 0, 2)）。":
            _read(weights, values.reshape(H, T, Dh)),
        "softmax をヘッドの軸（axis=0）で取っています。重みは各ヘッドの中で、キーの軸"
        "（axis=-1）について和が 1 になるようにしてください。":
            _read(softmax(scores, axis=0), blocks),
        "softmax を全ヘッドのスコアをまとめて 1 回で取っています。ヘッドごとに別々の "
        "softmax を取ってください（それが「ヘッドを分ける」ことです）。":
            _read(softmax(scores.reshape(-1)).reshape(H, T), blocks),
        "scores をもう一度 √d_k（np.sqrt(Dh)）で割っています。scores はすでに割った後の"
        "スコアなので、そのまま softmax にかけてください。":
            _read(softmax(scores / np.sqrt(Dh), axis=-1), blocks),
        "ヘッドの出力を逆の順に並べています。ヘッド 0 の出力が先頭（列 0:Dh）、"
        "ヘッド H−1 の出力が最後です。":
            _read(weights[::-1], blocks[::-1]),
        "ヘッド 0 のスコアで最後のブロックを読むように、ヘッドとブロックの組が逆です。"
        "softmax(scores[0]) は列 0:Dh に、softmax(scores[1]) は列 Dh:2·Dh に掛けます。":
            _read(weights[::-1], blocks),
        "各ヘッドが全部の列を読み、その平均を返しています。ヘッドは自分の列だけを読み、"
        "出力は平均せずに横に並べます（連結）。": (weights @ values).mean(axis=0),
        "スコアに softmax をかけずに重みとして使っています。": _read(scores, blocks),
    }
    return mistakes


@checker("ヘッド 1〜5 つのケースで heads_output と一致。")
def check_heads_output(func: Callable) -> None:
    """Check ``func(scores, values) -> out`` against :func:`heads_output`.

    Prints 【正解】, 【未実装】 or 【不正解】 with a diagnosis (strided columns instead of
    a block per head, ``values.reshape(H, T, Dh)`` without the transpose, softmax over
    the head axis or over all heads at once, the scores divided by √d_k again, the heads
    in reverse order, heads averaged instead of concatenated, no softmax, (H, Dh) not
    flattened, an exception, ``heads_output`` itself used).

    Parameters
    ----------
    func : callable
        The student's ``my_heads_output``: scores (H, T), values (T, D) → out (D,).

    Returns
    -------
    CheckResult
        True (``.passed``) if every hidden case matches.

    Taught in chapter 02.
    """
    for name, scores, values in _cases():
        H, D = scores.shape[0], values.shape[1]
        result = call_refusing(func, _REFERENCES, scores, values)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, name))
        if np.shape(result) == (H, D // H) and H > 1:
            raise Mistake(
                f"{name}: 形 (H, Dh) = {(H, D // H)} のまま返しています。ヘッドの出力を"
                f"横に並べて (D,) = ({D},) にしてください（reshape(D) か np.concatenate）。"
            )
        out = returned_array(result, f"{name}の返り値", (D,))
        if np.allclose(out, heads_output(scores, values), rtol=1e-5, atol=1e-8):
            continue
        for diagnosis, wrong in _mistakes(scores, values).items():
            if np.allclose(out, wrong, rtol=1e-5, atol=1e-8):
                raise Mistake(f"{name}: {diagnosis}")
        raise Mistake(
            f"{name}: 出力が一致しません。ヘッド 0 の重み softmax(scores[0]) を values の"
            "列 0:Dh に、ヘッド 1 の重みを列 Dh:2·Dh に、…と掛けて、ヘッドの順に並べて"
            "ください。"
        )
