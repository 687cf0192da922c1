"""Tests of attnlab.head_roles: scores that name what a head does."""

import numpy as np
import pytest

from attnlab.head_roles import induction_mask, induction_score, previous_token_score
from attnlab.tasks import RepeatedSequence


def causal_uniform(B: int, H: int, T: int) -> np.ndarray:
    rows = np.tri(T) / np.arange(1, T + 1)[:, None]  # (T, T): each row uniform over j ≤ t
    return np.broadcast_to(rows, (B, H, T, T)).copy()


def test_a_head_that_looks_one_place_back_scores_one():
    T = 6
    back = np.eye(T, k=-1)
    back[0, 0] = 1.0  # the first token can only look at itself
    attn = np.stack([back, causal_uniform(1, 1, T)[0, 0]])[None]  # (1, 2, T, T)
    score = previous_token_score(attn)
    assert score.shape == (2,)
    assert score[0] == pytest.approx(1.0)
    assert score[1] == pytest.approx(np.mean(1 / np.arange(2, T + 1)))


def test_induction_mask_marks_the_keys_after_earlier_copies():
    tokens = np.array([[5, 1, 2, 5, 1, 5]])
    mask = induction_mask(tokens)[0]
    assert mask.shape == (6, 6)
    expected = np.zeros((6, 6), dtype=bool)
    expected[3, 1] = True  # the 5 at t=3: token 1 followed the 5 at 0
    expected[4, 2] = True  # the 1 at t=4: token 2 followed the 1 at 1
    expected[5, [1, 4]] = True  # the 5 at t=5: after the 5s at 0 and 3
    np.testing.assert_array_equal(mask, expected)


def test_a_head_that_follows_the_induction_mask_scores_one():
    tokens, _, _ = RepeatedSequence()(np.random.default_rng(0), 4, 24)
    mask = induction_mask(tokens).astype(float)  # (B, T, T)
    seen = mask.sum(-1, keepdims=True) > 0
    perfect = np.where(seen, mask / np.maximum(mask.sum(-1, keepdims=True), 1), np.eye(24))
    attn = np.stack([perfect, causal_uniform(4, 1, 24)[:, 0]], axis=1)  # (B, 2, T, T)
    score = induction_score(attn, tokens)
    assert score[0] == pytest.approx(1.0)
    assert score[1] < 0.3


def test_a_previous_token_head_is_not_an_induction_head():
    tokens, _, _ = RepeatedSequence()(np.random.default_rng(1), 4, 24)
    back = np.eye(24, k=-1)
    back[0, 0] = 1.0
    attn = np.broadcast_to(back, (4, 1, 24, 24))
    assert induction_score(attn, tokens)[0] == pytest.approx(0.0)
    assert previous_token_score(attn)[0] == pytest.approx(1.0)


@pytest.mark.parametrize("call, message", [
    (lambda: previous_token_score(np.ones((2, 3, 3))), r"attn は \(B, H, T, T\) の形"),
    (lambda: induction_score(np.ones((1, 1, 3, 3)), np.array([[0, 1, 2]])),
     "2 回目に現れるトークンがありません"),
    (lambda: induction_score(np.ones((1, 1, 3, 3)), np.array([[0, 1, 0, 1]])),
     r"tokens の形 \(1, 4\) が attn の \(B, T\)=\(1, 3\) と一致しません"),
])
def test_bad_score_input_is_refused_in_japanese(call, message):
    with pytest.raises(ValueError, match=message):
        call()
