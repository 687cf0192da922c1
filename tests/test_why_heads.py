"""attnlab.experiments.why_heads: chapter 02's measurements of one head against several."""

import numpy as np
import pytest

from attnlab import scaled_dot_product_attention, softmax
from attnlab.experiments.why_heads import (
    HEAD_COUNTS,
    attribute_accuracy,
    offset_weight,
    run_heads,
    runs_by_heads,
    two_positions_config,
    value_coefficients,
)
from attnlab.model import forward, init_params
from attnlab.tasks import TwoPositions


def test_the_coefficients_of_an_attention_output_are_its_weights():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(5, 8))  # (T, Dv)
    q, k = rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    out, weights = scaled_dot_product_attention(q, k, values)  # (3, Dv), (3, T)
    np.testing.assert_allclose(value_coefficients(out, values), weights, atol=1e-10)
    np.testing.assert_allclose(value_coefficients(out[0], values), weights[0], atol=1e-10)


def test_coefficients_work_in_float32_and_reproduce_the_output():
    rng = np.random.default_rng(1)
    values = rng.normal(size=(4, 4)).astype(np.float32)
    coef = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    got = value_coefficients(coef @ values, values)
    np.testing.assert_allclose(got, coef, atol=1e-5)


def test_one_head_never_brings_two_targets_more_than_half_each():
    # whatever the scores, the weights of two keys sum to at most 1
    rng = np.random.default_rng(2)
    scores = rng.normal(scale=10.0, size=(1000, 6))  # (N, T)
    weights = softmax(scores, axis=-1)
    assert np.all(np.minimum(weights[:, 0], weights[:, 1]) <= 0.5 + 1e-12)


def test_dependent_values_and_bad_shapes_are_rejected_in_japanese():
    values = np.array([[1.0, 0.0], [2.0, 0.0]])
    with pytest.raises(ValueError, match="一次独立.*係数が 1 通りに決まりません"):
        value_coefficients(np.array([1.0, 0.0]), values)
    with pytest.raises(ValueError, match="values.shape"):
        value_coefficients(np.ones(3), np.eye(2))
    with pytest.raises(ValueError, match="一次結合"):
        value_coefficients(np.array([0.0, 0.0, 1.0]), np.eye(3)[:2])


def test_the_head_counts_share_one_parameter_count():
    counts = set()
    for n_heads in HEAD_COUNTS:
        config = two_positions_config(n_heads)
        params = init_params(config, np.random.default_rng(0))
        counts.add(sum(p.size for p in params.values()))
    assert len(counts) == 1


def test_attribute_accuracy_is_one_for_a_perfect_predictor_and_splits_attributes():
    task = TwoPositions()
    config = two_positions_config(1)
    params = init_params(config, np.random.default_rng(0))
    batch = task(np.random.default_rng(1), 8, 16)
    logits = forward(params, batch.tokens, config).logits
    pred = logits.argmax(axis=-1)[batch.loss_mask]
    target = batch.targets[batch.loss_mask]
    colour, shape = attribute_accuracy(params, batch, config, task)
    assert colour == pytest.approx(np.mean(pred // 4 == target // 4))
    assert shape == pytest.approx(np.mean(pred % 4 == target % 4))
    exact = np.mean(pred == target)
    assert exact <= min(colour, shape) + 1e-12


def test_offset_weight_reads_the_right_diagonal():
    T = 6
    attn = np.zeros((2, 2, T, T))
    for t in range(T):
        attn[:, 0, t, max(t - 1, 0)] = 1.0  # head 0: previous token
        attn[:, 1, t, max(t - 2, 0)] = 1.0  # head 1: two back
    np.testing.assert_allclose(offset_weight(attn, 1), [1.0, 0.0])
    np.testing.assert_allclose(offset_weight(attn, 2), [0.0, 1.0])
    with pytest.raises(ValueError, match="offset"):
        offset_weight(attn, 3)


def test_one_head_gets_the_colour_and_four_heads_get_both_on_a_short_run():
    task = TwoPositions()
    eval_batch = task(np.random.default_rng(123), 64, 16)
    runs = run_heads((1, 4), 1, rng=np.random.default_rng(0), eval_batch=eval_batch,
                     steps=150)
    one, four = runs
    assert one.n_heads == 1 and four.n_heads == 4
    assert one.colour_accuracy > 0.95 and one.shape_accuracy < 0.4  # one attribute only
    assert four.colour_accuracy > 0.95 and four.shape_accuracy > 0.95
    assert runs_by_heads(runs, "loss")[4].shape == (1, 150)


def test_every_head_count_sees_the_same_batches():
    task = TwoPositions()
    eval_batch = task(np.random.default_rng(123), 8, 8)
    a = run_heads((2,), 2, rng=np.random.default_rng(5), eval_batch=eval_batch, steps=3,
                  seq_len=8)
    b = run_heads((2,), 2, rng=np.random.default_rng(5), eval_batch=eval_batch, steps=3,
                  seq_len=8)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.loss, y.loss)
    assert not np.array_equal(a[0].loss, a[1].loss)  # the seeds differ
    with pytest.raises(ValueError, match="field"):
        runs_by_heads(a, "nothing")


def test_a_head_count_can_have_more_seeds_and_shares_the_first_streams():
    task = TwoPositions()
    eval_batch = task(np.random.default_rng(123), 8, 8)
    runs = run_heads((1, 2), {1: 1, 2: 2}, rng=np.random.default_rng(5),
                     eval_batch=eval_batch, steps=2, seq_len=8)
    assert [(r.n_heads, r.seed) for r in runs] == [(1, 0), (2, 0), (2, 1)]
    assert runs_by_heads(runs, "accuracy")[2].shape == (2,)
    with pytest.raises(ValueError, match="n_seeds"):
        run_heads((1, 2), {1: 1}, rng=np.random.default_rng(5), eval_batch=eval_batch,
                  steps=2, seq_len=8)


def test_heads_output_is_one_attention_per_column_block():
    from attnlab.experiments.why_heads import heads_output

    rng = np.random.default_rng(3)
    scores, values = rng.normal(size=(2, 5)), rng.normal(size=(5, 6))
    out = heads_output(scores, values)
    np.testing.assert_allclose(out[:3], softmax(scores[0]) @ values[:, :3])
    np.testing.assert_allclose(out[3:], softmax(scores[1]) @ values[:, 3:])
    np.testing.assert_allclose(heads_output(scores[:1], values), softmax(scores[0]) @ values)
    with pytest.raises(ValueError, match="割り切れません"):
        heads_output(rng.normal(size=(4, 5)), values)


def test_run_heads_can_train_two_layers_of_one_head():
    task = TwoPositions()
    eval_batch = task(np.random.default_rng(123), 8, 8)
    (run,) = run_heads((1,), 1, rng=np.random.default_rng(5), eval_batch=eval_batch, steps=2,
                       seq_len=8, n_layers=2)
    assert {"layers.0.w_q", "layers.1.w_q"} <= set(run.params)
    assert two_positions_config(1, n_layers=2).n_layers == 2
    assert two_positions_config(4).n_layers == 1  # the chapter's study: one layer
