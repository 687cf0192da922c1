"""check_heads_output: every correct style passes, each typical mistake gets its diagnosis,
and the reference itself (which chapter 02 imports) is refused."""

import numpy as np
import pytest

from attnlab import softmax
from attnlab.checks import check_heads_output
from attnlab.checks.why_heads import _cases
from attnlab.experiments.why_heads import heads_output


def loop_style(scores, values):
    H, D = scores.shape[0], values.shape[1]
    Dh = D // H
    parts = []
    for h in range(H):
        e = np.exp(scores[h] - scores[h].max())
        w = e / e.sum()
        parts.append(w @ values[:, h * Dh:(h + 1) * Dh])
    return np.concatenate(parts)


def split_style_float32(scores, values):
    H = scores.shape[0]
    blocks = np.split(values.astype(np.float32), H, axis=1)
    w = softmax(scores.astype(np.float32), axis=-1)
    return np.hstack([w[h] @ blocks[h] for h in range(H)])


def einsum_style(scores, values):
    H, (T, D) = scores.shape[0], values.shape
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    blocks = values.reshape(T, H, D // H).transpose(1, 0, 2)  # (H, T, Dh)
    return np.einsum("ht,htd->hd", w, blocks).reshape(D)


def pure_python(scores, values):
    import math

    scores, values = scores.tolist(), values.tolist()
    H, D = len(scores), len(values[0])
    Dh = D // H
    out = []
    for h, row in enumerate(scores):
        top = max(row)
        e = [math.exp(z - top) for z in row]
        w = [x / sum(e) for x in e]
        for d in range(h * Dh, (h + 1) * Dh):
            out.append(sum(w[t] * values[t][d] for t in range(len(row))))
    return out


def list_style(scores, values):
    return list(loop_style(scores, values))


@pytest.mark.parametrize("func", [loop_style, split_style_float32, einsum_style, pure_python,
                                  list_style])
def test_correct_styles_pass(capsys, func):
    assert check_heads_output(func).passed is True
    assert "【正解】" in capsys.readouterr().out


@pytest.mark.parametrize("func", [
    heads_output,
    lambda scores, values: heads_output(scores, values),
    lambda scores, values: list(heads_output(scores.copy(), values)),
], ids=["the reference", "a wrapper", "a wrapper that converts"])
def test_the_reference_is_refused(capsys, func):
    assert check_heads_output(func).passed is False
    out = capsys.readouterr().out
    assert "【不正解】" in out and "heads_output を使わずに" in out, out


def test_the_stub_is_unimplemented(capsys):
    def my_heads_output(scores, values):
        raise NotImplementedError("ここを実装してください")

    assert check_heads_output(my_heads_output).passed is False
    assert "【未実装】" in capsys.readouterr().out


def _blocks(values, H):
    T, D = values.shape
    return values.reshape(T, H, D // H).transpose(1, 0, 2)  # (H, T, Dh)


def _read(w, blocks):
    return np.einsum("ht,htd->hd", w, blocks).reshape(-1)


def strided(scores, values):
    H, (T, D) = scores.shape[0], values.shape
    blocks = values.reshape(T, D // H, H).transpose(2, 0, 1)
    return _read(softmax(scores), blocks)


def bare_reshape(scores, values):
    H, (T, D) = scores.shape[0], values.shape
    return _read(softmax(scores), values.reshape(H, T, D // H))  # no transpose


def head_axis_softmax(scores, values):
    return _read(softmax(scores, axis=0), _blocks(values, scores.shape[0]))


def one_softmax(scores, values):
    H, T = scores.shape
    return _read(softmax(scores.reshape(-1)).reshape(H, T), _blocks(values, H))


def scaled_again(scores, values):
    H, D = scores.shape[0], values.shape[1]
    return _read(softmax(scores / np.sqrt(D // H)), _blocks(values, H))


def reversed_order(scores, values):
    H, D = scores.shape[0], values.shape[1]
    parts = [p for p in loop_style(scores, values).reshape(H, D // H)]
    return np.concatenate(parts[::-1])


def reversed_pairing(scores, values):
    H = scores.shape[0]
    return _read(softmax(scores)[::-1], _blocks(values, H))


def averaged(scores, values):
    return (softmax(scores) @ values).mean(axis=0)


def no_softmax(scores, values):
    return _read(scores, _blocks(values, scores.shape[0]))


def not_flattened(scores, values):
    return loop_style(scores, values).reshape(scores.shape[0], -1)


def raises(scores, values):
    raise ValueError("oops")


@pytest.mark.parametrize("func, diagnosis", [
    (strided, "H 列おき"),
    (bare_reshape, "values.reshape(H, T, Dh) としています"),
    (head_axis_softmax, "axis=0"),
    (one_softmax, "まとめて 1 回"),
    (scaled_again, "もう一度 √d_k"),
    (reversed_order, "逆の順に並べています"),
    (reversed_pairing, "ヘッドとブロックの組が逆"),
    (averaged, "平均"),
    (no_softmax, "softmax をかけずに"),
    (not_flattened, "(H, Dh)"),
    (raises, "ValueError: oops"),
    (lambda scores, values: None, "None"),
])
def test_each_mistake_gets_its_diagnosis(capsys, func, diagnosis):
    assert check_heads_output(func).passed is False
    out = capsys.readouterr().out
    assert "【不正解】" in out and diagnosis in out, out


# --- the hidden cases are not the chapter's sizes ---------------------------------------


def test_the_hidden_cases_have_sizes_that_are_not_round():
    widths = [values.shape[1] // scores.shape[0] for _, scores, values in _cases()]
    heads = [scores.shape[0] for _, scores, _ in _cases()]
    assert any(w & (w - 1) for w in widths)  # a head width that is no power of two
    assert any(h & (h - 1) for h in heads)  # a head count that is no power of two
    assert all(values.shape[0] != values.shape[1] for _, _, values in _cases())  # T ≠ D
    assert all((scores.shape[0], values.shape) != (2, (7, 16)) for _, scores, values in _cases())


def two_halves(scores, values):
    """Right for the chapter's example only: two heads, each reading half the columns."""
    half = values.shape[1] // 2
    w = softmax(scores, axis=-1)
    return np.concatenate([w[0] @ values[:, :half], w[-1] @ values[:, half:]])


def width_of_the_example(scores, values):
    """Right only when d_k = 8, the chapter's head width."""
    H = scores.shape[0]
    return _read(softmax(scores), values[:, :8 * H].reshape(values.shape[0], H, -1)
                 .transpose(1, 0, 2)) if values.shape[1] == 8 * H else np.zeros(values.shape[1])


def power_of_two_heads(scores, values):
    """Right only when the head width is found by halving: a power of two."""
    H, D = scores.shape[0], values.shape[1]
    Dh = D >> int(np.log2(H))
    return _read(softmax(scores), _blocks(values[:, :Dh * H], H)) if Dh * H == D else (
        np.zeros(D))


@pytest.mark.parametrize("func", [two_halves, width_of_the_example, power_of_two_heads])
def test_an_answer_right_only_for_the_chapters_sizes_is_refused(capsys, func):
    rng = np.random.default_rng(0)
    example = rng.normal(size=(2, 7)), rng.normal(size=(7, 16))  # the chapter's sizes
    np.testing.assert_allclose(func(*example), heads_output(*example))
    assert check_heads_output(func).passed is False
    assert "【不正解】" in capsys.readouterr().out
