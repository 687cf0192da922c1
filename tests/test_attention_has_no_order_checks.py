"""Chapter 05's self-check accepts every correct style and names each typical mistake."""

import functools

import numpy as np
import pytest

import attnlab.experiments.attention_has_no_order
from attnlab.checks import check_order_blind_ceiling
from attnlab.checks.attention_has_no_order import _REFERENCES, _cases
from attnlab.checks.core import REPEAT_NOTE, call_refusing, reset_attempts
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


@pytest.mark.parametrize("answer", [loops, vectorised, float32, as_array])
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


def from_position_1(tokens, loss_mask, vocab_size):
    mask = np.ones_like(loss_mask)
    mask[:, 0] = False  # right for offset 1 only
    return vectorised(tokens, mask, vocab_size)


def test_skipping_only_the_first_position_is_named(capsys):
    assert not check_order_blind_ceiling(from_position_1)
    out = capsys.readouterr().out
    assert "位置 1 から先を採点" in out and "offset = 3" in out


# --- answers that are right only for the chapter's example (|𝒱| = T = 32) ------------------

def divided_by_31(tokens, loss_mask, vocab_size):
    return vectorised(tokens, loss_mask, vocab_size) * (tokens.shape[1] - 1) / 31


def rows_as_length(tokens, loss_mask, vocab_size):
    T = len(tokens)  # the number of rows: equal to T only in a square batch
    return vectorised(tokens, loss_mask, vocab_size) * (tokens.shape[1] - 1) / (T - 1)


def vocabulary_of_32(tokens, loss_mask, vocab_size):
    counts = np.stack([np.bincount(r, minlength=32) for r in tokens])  # (B, 32)
    others = counts[:, None, :] - np.eye(32, dtype=int)[tokens]  # fails past 32 ids
    return (others.max(axis=-1) / (tokens.shape[1] - 1))[loss_mask].mean()


@pytest.mark.parametrize("answer, diagnosis", [
    (divided_by_31, "31 で割っています"),
    (rows_as_length, "B − 1"),
    (vocabulary_of_32, "|𝒱| = 32 を書き込んで"),
])
def test_an_answer_right_only_for_the_chapters_sizes_is_refused(answer, diagnosis, capsys):
    example = answer.__globals__["np"].random.default_rng(0)  # the chapter's sizes
    tokens = example.integers(0, 32, size=(32, 32))
    mask = np.ones((32, 32), dtype=bool)
    mask[:, 0] = False
    assert answer(tokens, mask, 32) == pytest.approx(order_blind_ceiling(tokens, mask, 32))
    assert not check_order_blind_ceiling(answer)
    assert diagnosis in capsys.readouterr().out


def test_the_hidden_cases_are_not_round_square_or_powers_of_two():
    for _, tokens, _, vocab_size in _cases():
        B, T = tokens.shape
        assert B != T
        for size in (B, T, vocab_size):
            assert size & (size - 1) != 0 and size % 10 != 0, size
    assert max(v for *_, v in _cases()) > 32  # a vocabulary larger than the chapter's


# --- the reference itself is visible in the chapter: it is not an answer -------------------

def wrapper(tokens, loss_mask, vocab_size):
    return order_blind_ceiling(tokens, loss_mask, vocab_size)


def through_the_module(tokens, loss_mask, vocab_size):
    module = attnlab.experiments.attention_has_no_order
    return module.order_blind_ceiling(tokens, loss_mask, vocab_size)


def _helper(tokens, loss_mask, vocab_size):
    return float(order_blind_ceiling(tokens, loss_mask, vocab_size))


def through_a_helper(tokens, loss_mask, vocab_size):
    return _helper(tokens, loss_mask, vocab_size)


@pytest.mark.parametrize("answer", [
    order_blind_ceiling, wrapper, through_the_module, through_a_helper,
    functools.partial(order_blind_ceiling),
    lambda tokens, loss_mask, vocab_size: order_blind_ceiling(tokens, loss_mask, vocab_size),
], ids=["itself", "wrapper", "module", "helper", "partial", "lambda"])
def test_the_reference_is_refused_however_it_is_passed(answer, capsys):
    assert not check_order_blind_ceiling(answer)
    out = capsys.readouterr().out
    assert "order_blind_ceiling をそのまま使っています" in out
    assert "Traceback" not in out


def test_a_correct_answer_is_not_mistaken_for_the_reference():
    for _, tokens, loss_mask, vocab_size in _cases():
        for answer in (loops, vectorised, float32, as_array):
            call_refusing(answer, _REFERENCES, tokens, loss_mask, vocab_size)  # no Mistake


# --- the conceptual near-misses get a diagnosis of their own (walkthrough 2026-12) ------------

@pytest.fixture(autouse=True)
def _first_attempt():
    """Each test starts as a student's first attempt (fix_on_repeat counts per kernel)."""
    reset_attempts()
    yield
    reset_attempts()


def per_row(tokens, vocab_size, vocab=None):
    """Each row's counts (B, V), as a student's bincount gives them."""
    return np.stack([np.bincount(r, minlength=vocab_size)[:vocab] for r in tokens])


def max_minus_one(tokens, loss_mask, vocab_size):
    """One taken off the largest count, not off the count of tokens[t]."""
    best = (per_row(tokens, vocab_size).max(axis=-1) - 1) / (tokens.shape[1] - 1)  # (B,)
    return np.broadcast_to(best[:, None], tokens.shape)[loss_mask].mean()


def batch_wide(tokens, loss_mask, vocab_size):
    """Counts over the whole batch (every row), then oneself removed."""
    counts = np.bincount(tokens.ravel(), minlength=vocab_size)  # (V,)
    others = counts[None, None, :] - np.eye(vocab_size, dtype=int)[tokens]  # (B, T, V)
    return (others.max(axis=-1) / (tokens.shape[1] - 1))[loss_mask].mean()


def every_copy_removed(tokens, loss_mask, vocab_size):
    counts = per_row(tokens, vocab_size)  # (B, V)
    values = []
    for b, t in zip(*np.nonzero(loss_mask), strict=True):
        others = counts[b].copy()
        others[tokens[b, t]] = 0
        values.append(others.max() / (tokens.shape[1] - 1))
    return np.mean(values)


def vocabulary_written_in(tokens, loss_mask, vocab_size):
    """np.arange(32): the ids 32 and above are never counted (no error is raised)."""
    counts = np.stack([[(row == v).sum() for v in np.arange(32)] for row in tokens])
    values = []
    for b, t in zip(*np.nonzero(loss_mask), strict=True):
        others = counts[b].copy()
        if tokens[b, t] < 32:
            others[tokens[b, t]] -= 1
        values.append(others.max() / (tokens.shape[1] - 1))
    return np.mean(values)


@pytest.mark.parametrize("answer, diagnosis", [
    (max_minus_one, "いちばん多いトークンの個数から引いています"),
    (batch_wide, "バッチ全体"),
    (every_copy_removed, "全部候補から外しています"),
    (vocabulary_written_in, "語彙を 32 個に固定していませんか"),
], ids=["max - 1", "batch-wide counts", "every copy removed", "vocabulary of 32"])
def test_each_near_miss_is_named(answer, diagnosis, capsys):
    assert not check_order_blind_ceiling(answer)
    out = capsys.readouterr().out
    assert diagnosis in out, out
    assert "値が正しくありません" not in out


def test_a_value_above_one_is_called_impossible(capsys):
    tokens, loss_mask, vocab_size = _cases()[0][1:]
    assert batch_wide(tokens, loss_mask, vocab_size) > 1  # as the walkthrough's 1.787
    check_order_blind_ceiling(batch_wide)
    out = capsys.readouterr().out
    assert "0 以上 1 以下のはず" in out
    check_order_blind_ceiling(lambda tokens, loss_mask, vocab_size: 1.5)  # no candidate
    out = capsys.readouterr().out
    assert "0 以上 1 以下のはず" in out and "値が正しくありません" in out
    check_order_blind_ceiling(self_counted)  # within [0, 1]: no such remark
    assert "0 以上 1 以下" not in capsys.readouterr().out


def test_counting_oneself_gives_the_line_of_code_only_the_second_time(capsys):
    check_order_blind_ceiling(self_counted)
    first = capsys.readouterr().out
    assert "自身も数えています" in first and "-= 1" not in first
    assert REPEAT_NOTE in first
    check_order_blind_ceiling(self_counted)
    second = capsys.readouterr().out
    assert "自身も数えています" in second and "counts[tokens[t]] -= 1" in second
