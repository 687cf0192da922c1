"""Past the table there is no row: lookup_positions and the model refuse, with the value named."""

import numpy as np
import pytest

from attnlab.model import ModelConfig, forward, init_params, loss_and_grads
from attnlab.positional import init_position_table, lookup_positions
from attnlab.tasks import PreviousToken
from attnlab.training import evaluate


@pytest.fixture
def table():
    return init_position_table(10, 4, rng=np.random.default_rng(7))  # (10, 4)


@pytest.mark.parametrize("bad", [-1, -10, -11, 10, 11, 10**6])
def test_an_outside_position_is_an_index_error_naming_the_argument_and_value(table, bad):
    with pytest.raises(IndexError, match=rf"positions の位置 {bad} は位置の表の範囲外です"
                                         r".*位置 0 〜 9 の 10 行"):
        lookup_positions(table, [0, bad, 3])


@pytest.mark.parametrize("bad", [-1, -5])
def test_a_negative_position_is_refused_where_numpy_would_count_from_the_end(table, bad):
    np.testing.assert_array_equal(table[bad], table[len(table) + bad])  # what numpy does
    with pytest.raises(IndexError, match="負の位置を NumPy の添字のように表の末尾から数えること"):
        lookup_positions(table, [bad])


def test_the_message_for_a_position_past_the_end_does_not_talk_about_negatives(table):
    with pytest.raises(IndexError) as info:
        lookup_positions(table, [10])
    assert "負の位置" not in str(info.value)


@pytest.mark.parametrize("positions", [np.array([[0, 1], [2, -1]]), [[0, 1], [12, 3]],
                                       np.array([-1], dtype=np.int8),
                                       np.array([3, 10], dtype=np.uint64),
                                       np.array([-2.0]), np.array([1e30])])
def test_outside_positions_are_refused_in_any_shape_and_integer_or_float_dtype(table, positions):
    with pytest.raises(IndexError, match="positions の位置"):
        lookup_positions(table, positions)


def test_a_huge_whole_float_is_reported_as_given_not_as_an_overflowed_integer(table):
    with pytest.raises(IndexError, match="positions の位置 1000000000000000019884624838656 "):
        lookup_positions(table, np.array([1e30]))


@pytest.mark.parametrize("positions, message", [
    ([0.5], r"positions は整数である必要があります: positions=\[0.5\]"),
    ([-0.5], r"positions は整数である必要があります"),
    ([np.nan], r"positions は整数である必要があります"),
    ([np.inf], r"positions は整数である必要があります"),
    ([True, False], r"positions は整数の配列である必要があります: dtype=bool"),
    (np.array([1 + 0j]), r"positions は整数の配列である必要があります: dtype=complex128"),
    (["a"], r"positions は整数の配列である必要があります"),
])
def test_positions_that_are_not_whole_numbers_are_a_value_error(table, positions, message):
    with pytest.raises(ValueError, match=message):
        lookup_positions(table, positions)


@pytest.mark.parametrize("positions", [[0, 9], np.arange(10).reshape(2, 5), [3.0, 4.0],
                                       np.array([9], dtype=np.uint8), 5])
def test_every_position_inside_the_table_is_its_row(table, positions):
    rows = lookup_positions(table, positions)
    p = np.asarray(positions).astype(int)
    assert rows.shape == p.shape + (4,)
    np.testing.assert_array_equal(rows, table[p])


def test_no_positions_give_no_rows(table):
    assert lookup_positions(table, np.zeros((0,), dtype=int)).shape == (0, 4)


CONFIG = ModelConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, max_len=6,
                     positional="learned")


def test_the_model_refuses_a_sequence_longer_than_its_table():
    params = init_params(CONFIG, np.random.default_rng(0))
    with pytest.raises(IndexError, match="系列長 T=7 が max_len=6 を超えています"):
        forward(params, np.zeros((1, 7), dtype=int), CONFIG)
    batch = PreviousToken(vocab_size=8)(np.random.default_rng(1), 2, 7)
    with pytest.raises(IndexError, match="T=7 が max_len=6"):
        loss_and_grads(params, batch, CONFIG)
    with pytest.raises(IndexError, match="T=7 が max_len=6"):
        evaluate(params, batch, CONFIG)


def test_the_model_runs_at_exactly_max_len_and_uses_every_row():
    params = init_params(CONFIG, np.random.default_rng(0))
    logits = forward(params, np.zeros((1, 6), dtype=int), CONFIG).logits
    assert logits.shape == (1, 6, 8)
    batch = PreviousToken(vocab_size=8)(np.random.default_rng(1), 2, 6)
    _, grads = loss_and_grads(params, batch, CONFIG)
    assert np.all(np.linalg.norm(grads["pos"], axis=1) > 0)


def test_other_schemes_have_no_table_and_accept_longer_sequences():
    for scheme in ("none", "sinusoidal", "rope", "alibi"):
        config = ModelConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, max_len=6,
                             positional=scheme)
        params = init_params(config, np.random.default_rng(0))
        assert forward(params, np.zeros((1, 9), dtype=int), config).logits.shape == (1, 9, 8)
