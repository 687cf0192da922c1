"""Chapter 05's self-check accepts every correct style and names each typical mistake."""

import numpy as np
import pytest

from attnlab.checks import check_order_blind_ceiling
from attnlab.experiments.attention_has_no_order import order_blind_ceiling


def loops(tokens, loss_mask, vocab_size):
    T = len(tokens[0])
    values = []
    for b in range(len(tokens)):
        for t in range(T):
            if loss_mask[b][t]:
                counts = [0] * vocab_size
                for s in range(T):
                    if s != t:
                        counts[int(tokens[b][s])] += 1
                values.append(max(counts) / (T - 1))
    return sum(values) / len(values)


def vectorised(tokens, loss_mask, vocab_size):
    counts = np.stack([np.bincount(r, minlength=vocab_size) for r in tokens])  # (B, V)
    others = counts[:, None, :] - np.eye(vocab_size, dtype=int)[tokens]  # (B, T, V)
    best = others.max(axis=-1) / (tokens.shape[1] - 1)  # (B, T)
    return best[loss_mask].mean()


def float32(tokens, loss_mask, vocab_size):
    return np.float32(vectorised(tokens, loss_mask, vocab_size))


def as_array(tokens, loss_mask, vocab_size):
    return np.array([vectorised(tokens, loss_mask, vocab_size)])  # one number in a (1,)


@pytest.mark.parametrize("answer", [loops, vectorised, float32, as_array, order_blind_ceiling])
def test_correct_answers_pass(answer, capsys):
    assert check_order_blind_ceiling(answer)
    assert "【正解】" in capsys.readouterr().out


def self_counted(tokens, loss_mask, vocab_size):
    counts = np.stack([np.bincount(r, minlength=vocab_size) for r in tokens])
    best = np.repeat(counts.max(axis=-1, keepdims=True), tokens.shape[1], axis=1)
    return (best / (tokens.shape[1] - 1))[loss_mask].mean()


def divided_by_t(tokens, loss_mask, vocab_size):
    return vectorised(tokens, loss_mask, vocab_size) * (tokens.shape[1] - 1) / tokens.shape[1]


def not_divided(tokens, loss_mask, vocab_size):
    return vectorised(tokens, loss_mask, vocab_size) * (tokens.shape[1] - 1)


def every_position(tokens, loss_mask, vocab_size):
    return vectorised(tokens, np.ones_like(loss_mask), vocab_size)


def distinct(tokens, loss_mask, vocab_size):
    return 1 / (tokens.shape[1] - 1)  # every token present at most "once"


def stub(tokens, loss_mask, vocab_size):
    raise NotImplementedError


@pytest.mark.parametrize("answer, diagnosis", [
    (self_counted, "自身も数えています"),
    (divided_by_t, "T で割っています"),
    (not_divided, "そのまま平均"),
    (every_position, "loss_mask を使わず"),
    (distinct, "種類（集合）"),
    (lambda tokens, loss_mask, vocab_size: 0.37, "値が正しくありません"),
    (lambda tokens, loss_mask, vocab_size: None, "return を書き忘れ"),
    (lambda tokens, loss_mask, vocab_size: "0.1", "数ではない値"),
    (lambda tokens, loss_mask, vocab_size: np.zeros(3), "1 つの数を返して"),
    (lambda tokens, loss_mask, vocab_size: 1 / 0, "ZeroDivisionError"),
    (stub, "【未実装】"),
])
def test_each_mistake_gets_its_own_diagnosis(answer, diagnosis, capsys):
    assert not check_order_blind_ceiling(answer)
    out = capsys.readouterr().out
    assert diagnosis in out
    assert "Traceback" not in out
