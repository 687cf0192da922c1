"""Chapter 02's self-check: ``my_heads_output(scores, values) -> out``.

Each head turns its own scores into weights and reads its own column block of the
values; the outputs are put side by side. The diagnosis is computed: the check builds
what each typical mistake returns and says which one the answer matches.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attnlab.attention import softmax
from attnlab.checks.core import (
    Mistake,
    Raised,
    call_student,
    checker,
    raised_message,
    returned_array,
)
from attnlab.experiments.why_heads import heads_output


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(20260202)
    T = 5
    return [
        ("ヘッド 2 つのケース", rng.normal(size=(2, T)), rng.normal(size=(T, 6))),
        ("ヘッド 3 つのケース", 3.0 * rng.normal(size=(3, T)), rng.normal(size=(T, 12))),
        ("ヘッド 1 つのケース", rng.normal(size=(1, T)), rng.normal(size=(T, 4))),
    ]


def _mistakes(scores: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """What each typical mistake returns, with its Japanese diagnosis as the key."""
    H, (T, D) = scores.shape[0], values.shape
    Dh = D // H
    weights = softmax(scores, axis=-1)  # (H, T)
    strided = values.reshape(T, Dh, H).transpose(2, 0, 1)  # (H, T, Dh): columns h, h+H, …
    full = weights @ values  # (H, D): every head reads all columns
    return {
        "ヘッド h が列 h, h+H, h+2H, … を読んでいます。ヘッド h が読むのは連続した列 "
        "h·Dh:(h+1)·Dh です（values[:, h*Dh:(h+1)*Dh]）。":
            np.einsum("ht,htd->hd", weights, strided).reshape(D),
        "softmax をヘッドの軸（axis=0）で取っています。重みは各ヘッドの中で、キーの軸"
        "（axis=-1）について和が 1 になるようにしてください。":
            np.einsum("ht,htd->hd", softmax(scores, axis=0),
                      values.reshape(T, H, Dh).transpose(1, 0, 2)).reshape(D),
        "softmax を全ヘッドのスコアをまとめて 1 回で取っています。ヘッドごとに別々の "
        "softmax を取ってください（それが「ヘッドを分ける」ことです）。":
            np.einsum("ht,htd->hd", softmax(scores.reshape(-1)).reshape(H, T),
                      values.reshape(T, H, Dh).transpose(1, 0, 2)).reshape(D),
        "各ヘッドが全部の列を読み、その平均を返しています。ヘッドは自分の列だけを読み、"
        "出力は平均せずに横に並べます（連結）。": full.mean(axis=0),
        "スコアに softmax をかけずに重みとして使っています。":
            np.einsum("ht,htd->hd", scores,
                      values.reshape(T, H, Dh).transpose(1, 0, 2)).reshape(D),
    }


@checker("ヘッド 1〜3 つのケースで heads_output と一致。")
def check_heads_output(func: Callable) -> None:
    """Check ``func(scores, values) -> out`` against :func:`heads_output`.

    Prints 【正解】, 【未実装】 or 【不正解】 with a diagnosis (strided columns instead of
    a block per head, softmax over the head axis or over all heads at once, heads
    averaged instead of concatenated, no softmax, (H, Dh) not flattened, an exception).

    Parameters
    ----------
    func : callable
        The student's ``my_heads_output``: scores (H, T), values (T, D) → out (D,).

    Returns
    -------
    bool
        True if every hidden case matches.

    Taught in chapter 02.
    """
    for name, scores, values in _cases():
        H, D = scores.shape[0], values.shape[1]
        result = call_student(func, scores, values)
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
            f"{name}: 出力が一致しません。ヘッド h の重み softmax(scores[h]) を、"
            "values の列 h·Dh:(h+1)·Dh に掛けて、ヘッドの順に並べてください。"
        )
