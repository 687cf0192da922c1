"""Chapter 10's self-check accepts every correct style and names each typical mistake."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.checks import check_alibi_bias
from attnlab.positional import alibi_bias, alibi_slopes
from scripts.book import SOLUTION_COLUMNS, display_width


def loops(n_heads, seq_len):
    out = np.zeros((n_heads, seq_len, seq_len))
    for h in range(n_heads):
        slope = 2 ** (-8 * (h + 1) / n_heads)
        for i in range(seq_len):
            for j in range(seq_len):
                out[h, i, j] = -slope * abs(i - j)
    return out


def vectorised(n_heads, seq_len):
    slopes = 2.0 ** (-8.0 * np.arange(1, n_heads + 1) / n_heads)  # (H,)
    pos = np.arange(seq_len)
    return -slopes[:, None, None] * np.abs(pos[:, None] - pos[None, :])


def float32(n_heads, seq_len):
    return vectorised(n_heads, seq_len).astype(np.float32)


def causal_only(n_heads, seq_len):
    out = vectorised(n_heads, seq_len)
    upper = np.triu(np.ones((seq_len, seq_len), dtype=bool), k=1)
    out[:, upper] = -np.inf  # the causal mask's job, done here too
    return out


def geometric_ratio(n_heads, seq_len):
    ratio = 2.0 ** (-8.0 / n_heads)
    slopes = ratio ** np.arange(1, n_heads + 1)  # the paper's "geometric sequence"
    pos = np.arange(seq_len)
    return -slopes[:, None, None] * np.abs(pos[None, :] - pos[:, None])


@pytest.mark.parametrize("answer", [loops, vectorised, float32, causal_only, geometric_ratio])
def test_correct_answers_pass(answer, capsys):
    assert check_alibi_bias(answer)
    out = capsys.readouterr().out
    assert "【正解】" in out
    assert display_width(out.rstrip("\n").replace(answer.__name__, "my_alibi_bias"))\
        <= SOLUTION_COLUMNS


@pytest.mark.parametrize("answer, name", [
    (alibi_bias, "alibi_bias"),
    (lambda n, t: alibi_bias(n, t), "alibi_bias"),
    (lambda n, t: -alibi_slopes(n)[:, None, None] * np.abs(np.arange(t)[:, None]
                                                          - np.arange(t)[None, :]),
     "alibi_slopes"),
])
def test_the_chapters_alibi_functions_are_refused(answer, name, capsys):
    assert not check_alibi_bias(answer)
    assert f"attnlab の {name} を使っています" in capsys.readouterr().out


def test_an_answer_right_only_for_the_chapters_eight_heads_fails(capsys):
    # the chapter prints the slopes of 8 heads: 1/2, 1/4, …, 1/256, written in
    def my_alibi_bias(n_heads, seq_len):
        slopes = 0.5 ** np.arange(1, 9)[:n_heads]
        pos = np.arange(seq_len)
        return -np.resize(slopes, n_heads)[:, None, None] * np.abs(pos[:, None] - pos[None, :])

    assert not check_alibi_bias(my_alibi_bias)
    assert "【不正解】" in capsys.readouterr().out


def with_slopes(slopes_of, sign=-1.0):
    def answer(n_heads, seq_len):
        pos = np.arange(seq_len)
        slopes = np.asarray(slopes_of(n_heads), dtype=float)
        return sign * slopes[:, None, None] * np.abs(pos[:, None] - pos[None, :])
    return answer


RIGHT = lambda n: 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # noqa: E731

MISTAKES = [
    (with_slopes(RIGHT, sign=+1.0), "符号が逆"),
    (with_slopes(lambda n: 2.0 ** (-8.0 * np.arange(n) / n)), "ℓ + 1 ではなく ℓ"),
    (with_slopes(lambda n: 0.5 ** np.arange(1, n + 1)), "ヘッドの数に関係なく"),
    (with_slopes(lambda n: RIGHT(n)[::-1]), "順番が逆"),
    (with_slopes(lambda n: np.ones(n)), "同じ傾き"),
    (with_slopes(lambda n: np.full(n, 0.5)), "同じ傾き"),  # any one slope, not only 1
    (with_slopes(lambda n: np.full(n, 0.3), sign=+1.0), "同じ傾き"),
    (lambda n, t: -RIGHT(n)[:, None, None] * np.subtract.outer(np.arange(t), np.arange(t)),
     "j > i"),  # a·(j − i): right below the diagonal, growing above it
    (with_slopes(lambda n: 0.5 ** np.arange(1, n + 1), sign=+1.0), "符号が逆"),
    (with_slopes(lambda n: np.linspace(0.3, 0.1, n)), "値が正しくありません"),
    (lambda n, t: vectorised(n, t) - 1.0, "距離 0"),
    (lambda n, t: vectorised(n, t).transpose(1, 2, 0), "ヘッドの軸を先頭"),
    (lambda n, t: vectorised(n, t)[0], "形が"),
    (lambda n, t: None, "return を書き忘れ"),
    (lambda n, t: np.ones((n, t, t), dtype=int), "dtype"),
    (lambda n, t: 1 / 0, "ZeroDivisionError"),
]


@pytest.mark.parametrize("answer, diagnosis", MISTAKES)
def test_each_mistake_is_diagnosed(answer, diagnosis, capsys):
    assert not check_alibi_bias(answer)
    out = capsys.readouterr().out
    assert "【不正解】" in out and diagnosis in out
    assert out.count("\n") == 1 and "Traceback" not in out


def test_stub_is_unimplemented(capsys):
    def stub(n_heads, seq_len):
        raise NotImplementedError

    assert not check_alibi_bias(stub)
    assert "【未実装】" in capsys.readouterr().out


@settings(max_examples=30, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.floats(), st.text(),
                 st.lists(st.floats(allow_nan=False), max_size=5)))
def test_any_return_value_gives_one_line(value):
    result = check_alibi_bias.evaluate(lambda n_heads, seq_len: value)
    assert result.verdict in ("正解", "不正解")
    assert "\n" not in result.message
