"""check_heads_output: every correct style passes, each typical mistake gets its diagnosis."""

import numpy as np
import pytest

from attnlab import softmax
from attnlab.checks import check_heads_output
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


def list_style(scores, values):
    return list(heads_output(scores, values))


@pytest.mark.parametrize("func", [heads_output, loop_style, split_style_float32, list_style])
def test_correct_styles_pass(capsys, func):
    assert check_heads_output(func).passed is True
    assert "【正解】" in capsys.readouterr().out


def test_the_stub_is_unimplemented(capsys):
    def my_heads_output(scores, values):
        raise NotImplementedError("ここを実装してください")

    assert check_heads_output(my_heads_output).passed is False
    assert "【未実装】" in capsys.readouterr().out


def _blocks(values, H):
    T, D = values.shape
    return values.reshape(T, H, D // H).transpose(1, 0, 2)  # (H, T, Dh)


def strided(scores, values):
    H, (T, D) = scores.shape[0], values.shape
    blocks = values.reshape(T, D // H, H).transpose(2, 0, 1)
    return np.einsum("ht,htd->hd", softmax(scores), blocks).reshape(D)


def head_axis_softmax(scores, values):
    return np.einsum("ht,htd->hd", softmax(scores, axis=0),
                     _blocks(values, scores.shape[0])).reshape(-1)


def one_softmax(scores, values):
    H, T = scores.shape
    w = softmax(scores.reshape(-1)).reshape(H, T)
    return np.einsum("ht,htd->hd", w, _blocks(values, H)).reshape(-1)


def averaged(scores, values):
    return (softmax(scores) @ values).mean(axis=0)


def no_softmax(scores, values):
    return np.einsum("ht,htd->hd", scores, _blocks(values, scores.shape[0])).reshape(-1)


def not_flattened(scores, values):
    return heads_output(scores, values).reshape(scores.shape[0], -1)


def raises(scores, values):
    raise ValueError("oops")


@pytest.mark.parametrize("func, diagnosis", [
    (strided, "h, h+H"),
    (head_axis_softmax, "axis=0"),
    (one_softmax, "まとめて 1 回"),
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
