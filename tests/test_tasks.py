"""Tests of attnlab.tasks: the toy tasks' batches."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlab.tasks import (
    PreviousToken,
    RepeatedSequence,
    RepeatInNoise,
    TwoPositions,
)

TASKS = [PreviousToken(), PreviousToken(vocab_size=5, offset=3), TwoPositions(),
         RepeatedSequence(), RepeatedSequence(vocab_size=16, min_period=3, max_period=6),
         RepeatInNoise(), RepeatInNoise(vocab_size=10, min_period=2, max_period=5)]


@pytest.mark.parametrize("task", TASKS, ids=repr)
def test_a_task_gives_the_same_batch_for_the_same_seed(task):
    a = task(np.random.default_rng(0), 8, 24)
    b = task(np.random.default_rng(0), 8, 24)
    c = task(np.random.default_rng(1), 8, 24)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.tokens, c.tokens)


@pytest.mark.parametrize("task", TASKS, ids=repr)
def test_a_batch_has_three_b_by_t_arrays_inside_the_vocabulary(task):
    tokens, targets, loss_mask = task(np.random.default_rng(0), 8, 24)
    assert tokens.shape == targets.shape == loss_mask.shape == (8, 24)
    assert np.issubdtype(tokens.dtype, np.integer) and np.issubdtype(targets.dtype, np.integer)
    assert loss_mask.dtype == np.bool_ and loss_mask.any()
    assert 0 <= tokens.min() and tokens.max() < task.vocab_size
    assert 0 <= targets.min() and targets.max() < task.vocab_size
    assert np.all(targets[~loss_mask] == 0)


@given(offset=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_previous_token_targets_are_the_token_offset_places_back(offset, seed):
    tokens, targets, loss_mask = PreviousToken(9, offset)(np.random.default_rng(seed), 3, 12)
    assert not loss_mask[:, :offset].any() and loss_mask[:, offset:].all()
    np.testing.assert_array_equal(targets[:, offset:], tokens[:, :-offset])


def test_two_positions_target_takes_colour_from_t_minus_1_and_shape_from_t_minus_2():
    task = TwoPositions(n_colours=5, n_shapes=3)
    tokens, targets, loss_mask = task(np.random.default_rng(0), 16, 20)
    assert task.vocab_size == 15
    assert not loss_mask[:, :2].any() and loss_mask[:, 2:].all()
    np.testing.assert_array_equal(task.colour(targets[:, 2:]), task.colour(tokens[:, 1:-1]))
    np.testing.assert_array_equal(task.shape(targets[:, 2:]), task.shape(tokens[:, :-2]))
    # each feature alone says nothing about the other: the target is not a copy
    assert np.mean(targets[:, 2:] == tokens[:, 1:-1]) < 0.6


@given(seed=st.integers(0, 2**32 - 1), seq_len=st.integers(8, 40))
def test_repeated_sequences_repeat_a_segment_of_distinct_tokens(seed, seq_len):
    task = RepeatedSequence(vocab_size=20, min_period=3)
    tokens, targets, loss_mask = task(np.random.default_rng(seed), 6, seq_len)
    for row, mask, target in zip(tokens, loss_mask, targets, strict=True):
        period = int(np.argmax(mask))  # scoring starts at the second copy
        assert 3 <= period <= min(seq_len // 2, 20)
        assert len(set(row[:period].tolist())) == period  # distinct tokens
        np.testing.assert_array_equal(row[period:], row[:-period])
        assert mask[period:-1].all() and not mask[:period].any() and not mask[-1]
        np.testing.assert_array_equal(target[mask], row[1:][mask[:-1]])


def test_the_period_of_a_repeated_sequence_varies_from_row_to_row():
    tokens, _, loss_mask = RepeatedSequence()(np.random.default_rng(0), 64, 32)
    periods = np.argmax(loss_mask, axis=1)
    assert len(set(periods.tolist())) > 8
    assert periods.min() >= 4 and periods.max() <= 16


def test_a_fixed_period_range_does_not_grow_with_the_sequence():
    task = RepeatedSequence(min_period=4, max_period=8)
    _, _, loss_mask = task(np.random.default_rng(0), 64, 128)
    periods = np.argmax(loss_mask, axis=1)
    assert periods.min() >= 4 and periods.max() <= 8


@given(seed=st.integers(0, 2**32 - 1), seq_len=st.integers(16, 64))
def test_repeat_in_noise_hides_one_segment_and_its_repeat_among_other_tokens(seed, seq_len):
    task = RepeatInNoise(vocab_size=16, min_period=3, max_period=8)
    tokens, targets, loss_mask = task(np.random.default_rng(seed), 6, seq_len)
    for row, mask, target in zip(tokens, loss_mask, targets, strict=True):
        scored = np.flatnonzero(mask)
        period = len(scored) + 1
        assert 3 <= period <= 8
        second = scored[0]  # the second copy starts where scoring starts
        first = second - period
        assert first >= 0 and second + period <= seq_len
        segment = row[first:second]
        np.testing.assert_array_equal(row[second:second + period], segment)
        assert len(set(segment.tolist())) == period
        noise = np.delete(row, np.arange(first, second + period))
        assert not set(noise.tolist()) & set(segment.tolist())
        np.testing.assert_array_equal(target[scored], row[scored + 1])


def test_the_segment_of_repeat_in_noise_can_lie_anywhere():
    _, _, loss_mask = RepeatInNoise()(np.random.default_rng(0), 256, 128)
    starts = np.argmax(loss_mask, axis=1)
    assert starts.min() < 16 and starts.max() > 110


@pytest.mark.parametrize("make, message", [
    (lambda: RepeatedSequence(min_period=1), "min_period は 2 以上"),
    (lambda: RepeatedSequence(min_period=6, max_period=5),
     "max_period=5 が min_period=6 より小さい"),
    (lambda: RepeatedSequence(vocab_size=8, max_period=9), "max_period=9 が vocab_size=8 を超えて"),
    (lambda: RepeatedSequence()(np.random.default_rng(0), 2, 7), "seq_len=7 では周期 4 以上"),
    (lambda: PreviousToken(offset=0), "offset は 1 以上の整数"),
    (lambda: RepeatInNoise(vocab_size=8, max_period=8), "max_period=8 は vocab_size=8 より小さい"),
    (lambda: RepeatInNoise()(np.random.default_rng(0), 2, 15), "seq_len が 16 以上必要"),
    (lambda: PreviousToken(offset=4)(np.random.default_rng(0), 2, 4), "seq_len が 5 以上必要"),
    (lambda: TwoPositions()(np.random.default_rng(0), 0, 8), "batch_size は 1 以上の整数"),
    (lambda: TwoPositions()(0, 2, 8), "rng は np.random.default_rng"),
])
def test_bad_task_settings_are_refused_in_japanese(make, message):
    with pytest.raises(ValueError, match=message):
        make()
