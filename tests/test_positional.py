"""Correctness of attnlab.positional: sinusoidal, learned table, RoPE, NTK base, ALiBi."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlab.positional import (
    RoPE,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    init_position_table,
    lookup_positions,
    ntk_scaled_base,
    rope_angles,
    sinusoidal_encoding,
)

even_dims = st.sampled_from([2, 4, 8, 16, 64])
positions = st.integers(0, 5000)


def interleaved_to_half(d: int) -> np.ndarray:
    """The permutation taking dims (0, 1, 2, 3, …) to (0, 2, 4, …, 1, 3, 5, …)."""
    return np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])


# --- sinusoidal --------------------------------------------------------------------------

def test_sinusoidal_values_at_hand_picked_positions():
    pe = sinusoidal_encoding(6, 8)  # 10000^(2i/8) = 1, 10, 100, 1000 for i = 0..3
    np.testing.assert_allclose(pe[0], [0, 1, 0, 1, 0, 1, 0, 1], atol=1e-15)
    assert pe[1, 0] == np.sin(1.0) and pe[1, 1] == np.cos(1.0)
    np.testing.assert_allclose(pe[5, 2], np.sin(0.5))  # pos 5, i = 1: sin(5 / 10)
    np.testing.assert_allclose(pe[5, 3], np.cos(0.5))
    np.testing.assert_allclose(pe[4, 6], np.sin(0.004))  # pos 4, i = 3: sin(4 / 1000)
    np.testing.assert_allclose(pe[4, 7], np.cos(0.004))


@given(st.integers(1, 50), st.sampled_from([2, 6, 16, 128]))
def test_concat_layout_is_a_fixed_permutation_of_the_paper_layout(n, d):
    paper = sinusoidal_encoding(n, d)
    concat = sinusoidal_encoding(n, d, layout="concat")
    np.testing.assert_array_equal(concat, paper[:, interleaved_to_half(d)])


@given(positions, positions, st.integers(0, 3000), even_dims)
def test_pe_dot_products_depend_only_on_the_offset(p, q, k, d):
    pe = sinusoidal_encoding(max(p, q) + k + 1, d)
    np.testing.assert_allclose(pe[p] @ pe[q], pe[p + k] @ pe[q + k], atol=1e-9)


@given(st.integers(0, 200), even_dims)
def test_shifting_by_k_is_one_fixed_rotation_for_every_position(k, d):
    pe = sinusoidal_encoding(300 + k, d)
    omega = 1.0 / 10000.0 ** (np.arange(d // 2) * 2 / d)
    rotation = np.zeros((d, d))  # block-diagonal, one 2x2 rotation per frequency
    for i, w in enumerate(omega):
        c, s = np.cos(k * w), np.sin(k * w)
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(d), atol=1e-12)
    np.testing.assert_allclose(pe[k : k + 300], pe[:300] @ rotation.T, atol=1e-9)


def test_sinusoidal_values_exist_for_any_position_and_are_bounded():
    pe = sinusoidal_encoding(100_000, 16)
    assert np.all(np.abs(pe) <= 1.0)
    np.testing.assert_allclose(np.sum(pe**2, axis=1), 8.0)  # every row has norm √(D/2)


def test_sinusoidal_dtype():
    assert sinusoidal_encoding(4, 8, dtype=np.float32).dtype == np.float32


# --- learned table -------------------------------------------------------------------------

def test_learned_table_lookup_returns_the_rows():
    table = init_position_table(10, 4, rng=np.random.default_rng(0))
    assert table.shape == (10, 4)
    pos = np.array([[0, 3, 9], [1, 1, 2]])  # (B, T)
    rows = lookup_positions(table, pos)
    assert rows.shape == (2, 3, 4)
    np.testing.assert_array_equal(rows[0, 2], table[9])
    np.testing.assert_array_equal(rows[1, 0], rows[1, 1])


def test_learned_table_is_deterministic_for_a_seed():
    a = init_position_table(8, 4, rng=np.random.default_rng(1))
    b = init_position_table(8, 4, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", [-1, 10, 512])
def test_a_position_outside_the_table_is_an_index_error_in_japanese(bad):
    table = init_position_table(10, 4, rng=np.random.default_rng(2))
    with pytest.raises(IndexError, match=f"位置 {bad} は位置の表の範囲外です.*0 〜 9"):
        lookup_positions(table, [0, bad])


def test_a_fractional_position_is_rejected():
    table = init_position_table(10, 4, rng=np.random.default_rng(3))
    with pytest.raises(ValueError, match="整数"):
        lookup_positions(table, [0.5])


# --- RoPE ------------------------------------------------------------------------------------

@st.composite
def vectors(draw, n=1):
    d = draw(even_dims)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return [rng.normal(size=d) for _ in range(n)]


def test_rope_angles_follow_the_formula():
    angles = rope_angles(np.array([0, 1, 7]), 8)
    theta = 10000.0 ** (-np.arange(4) * 2 / 8)
    assert angles.shape == (3, 4)
    np.testing.assert_allclose(angles, np.outer([0, 1, 7], theta))
    np.testing.assert_allclose(angles[1], [1.0, 0.1, 0.01, 0.001])


def test_rope_rotates_the_first_pair_by_the_position():
    x = np.array([1.0, 0.0, 1.0, 0.0])
    out = apply_rope(x[None, :], [3])  # angle 3 rad on pair (0, 1)
    np.testing.assert_allclose(out[0, :2], [np.cos(3), np.sin(3)])


@given(vectors(), st.floats(0, 1e4), st.sampled_from(["interleaved", "half"]))
def test_rope_keeps_norms(vs, pos, convention):
    (x,) = vs
    out = apply_rope(x[None, :], [pos], convention=convention)[0]
    np.testing.assert_allclose(np.linalg.norm(out), np.linalg.norm(x), rtol=1e-12)


@given(vectors(2), positions, positions, st.integers(-2000, 2000),
       st.sampled_from(["interleaved", "half"]))
def test_q_dot_k_after_rope_depends_only_on_m_minus_n(vs, m, n, shift, convention):
    q, k = vs
    shift = max(shift, -min(m, n))  # keep positions non-negative

    def score(pm, pn):
        return apply_rope(q[None], [pm], convention=convention)[0] @ apply_rope(
            k[None], [pn], convention=convention)[0]

    np.testing.assert_allclose(score(m, n), score(m + shift, n + shift), atol=1e-8)


@given(vectors(), st.lists(st.floats(0, 1e4), min_size=1, max_size=5))
def test_interleaved_and_half_agree_after_permuting_dimensions(vs, pos):
    (x,) = vs
    d = x.size
    perm = interleaved_to_half(d)
    xs = np.tile(x, (len(pos), 1))  # (T, Dh)
    interleaved = apply_rope(xs, pos, convention="interleaved")
    half = apply_rope(xs[:, perm], pos, convention="half")
    np.testing.assert_allclose(half, interleaved[:, perm], atol=1e-12)


def test_mixing_the_conventions_is_not_the_same_computation():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(50, 16))
    pos = np.arange(50)
    wrong = apply_rope(x, pos, convention="half")  # half layout, data laid out interleaved
    right = apply_rope(x, pos, convention="interleaved")
    np.testing.assert_allclose(wrong[0], right[0])  # position 0: no rotation in either
    assert not np.allclose(wrong[1:], right[1:])


@given(vectors(), st.lists(st.floats(0, 1e4), min_size=1, max_size=5), st.floats(1.0, 64.0),
       st.sampled_from(["interleaved", "half"]))
def test_scale_s_is_positions_divided_by_s(vs, pos, s, convention):
    (x,) = vs
    xs = np.tile(x, (len(pos), 1))
    scaled = apply_rope(xs, pos, scale=s, convention=convention)
    divided = apply_rope(xs, np.asarray(pos) / s, convention=convention)
    np.testing.assert_allclose(scaled, divided, rtol=1e-12, atol=1e-12)


def test_rope_broadcasts_positions_over_batch_and_heads():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 4, 8))  # (B, H, T, Dh)
    out = apply_rope(x, np.arange(4))
    np.testing.assert_allclose(out[1, 2], apply_rope(x[1, 2], np.arange(4)))
    per_batch = apply_rope(x, np.array([[0, 1, 2, 3], [5, 6, 7, 8]])[:, None, :])
    np.testing.assert_allclose(per_batch[1, 0], apply_rope(x[1, 0], [5, 6, 7, 8]))


def test_rope_keeps_float32():
    x = np.ones((3, 8), dtype=np.float32)
    assert apply_rope(x, np.arange(3)).dtype == np.float32
    assert RoPE(convention="half").apply(x, np.arange(3)).dtype == np.float32


def test_rope_settings_apply_equals_apply_rope():
    x = np.random.default_rng(6).normal(size=(5, 8))
    rope = RoPE(base=500000.0, convention="half", scale=4.0)
    np.testing.assert_array_equal(rope.apply(x, np.arange(5)),
                                  apply_rope(x, np.arange(5), 500000.0, "half", 4.0))


# --- NTK-aware base ----------------------------------------------------------------------------

@given(st.sampled_from([4, 8, 64, 128]), st.floats(1.0, 64.0))
def test_ntk_base_keeps_the_fastest_pair_and_interpolates_the_slowest(d_head, s):
    base = ntk_scaled_base(10000.0, s, d_head)
    new = rope_angles(np.array([1000.0]), d_head, base=base)[0]
    old = rope_angles(np.array([1000.0]), d_head)[0]
    np.testing.assert_allclose(new[0], old[0])  # θ_0 = 1 whatever the base
    np.testing.assert_allclose(new[-1], old[-1] / s, rtol=1e-10)  # like interpolation
    assert np.all(new <= old * (1 + 1e-12))


def test_ntk_base_by_hand():
    assert ntk_scaled_base(10000.0, 4.0, 4) == pytest.approx(10000.0 * 16.0)
    assert ntk_scaled_base(10000.0, 1.0, 128) == 10000.0


# --- ALiBi -------------------------------------------------------------------------------------

def test_alibi_slopes_for_eight_heads_are_halvings():
    np.testing.assert_allclose(alibi_slopes(8), [1 / 2**h for h in range(1, 9)])


def test_alibi_slopes_for_six_heads_follow_the_paper_rule():
    # the 4-head slopes, then every other slope of the 8-head sequence
    np.testing.assert_allclose(alibi_slopes(6), [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8])


def test_alibi_bias_is_minus_slope_times_distance():
    bias = alibi_bias(2, 4)  # slopes 1/16, 1/256
    assert bias.shape == (2, 4, 4)
    np.testing.assert_allclose(bias[0, 3], [-3 / 16, -2 / 16, -1 / 16, 0])
    np.testing.assert_allclose(bias[1], bias[1].T)
    np.testing.assert_array_equal(np.diagonal(bias, axis1=1, axis2=2), 0)


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: sinusoidal_encoding(10, 7), "d_model=7 は偶数"),
        (lambda: sinusoidal_encoding(0, 8), "seq_len=0"),
        (lambda: sinusoidal_encoding(10, 8, layout="paper"), "layout='paper'"),
        (lambda: sinusoidal_encoding(10, 8, base=-1.0), "base=-1.0"),
        (lambda: init_position_table(0, 4, rng=np.random.default_rng()), "max_len=0"),
        (lambda: init_position_table(4, 4, rng=None), "rng=None"),
        (lambda: lookup_positions(np.zeros(4), [0]), r"table\.shape=\(4,\)"),
        (lambda: rope_angles([0, 1], 7), "d_head=7 は偶数"),
        (lambda: rope_angles([0, np.nan], 8), "positions に NaN"),
        (lambda: apply_rope(np.zeros((3, 5)), [0, 1, 2]), "d_head=5"),
        (lambda: apply_rope(np.zeros((3, 8)), [0, 1]), r"positions の形 \(2,\)"),
        (lambda: apply_rope(np.zeros((3, 8)), [0, 1, 2], convention="neox"),
         "convention='neox'"),
        (lambda: apply_rope(np.zeros((3, 8)), [0, 1, 2], scale=0.0), "scale=0.0"),
        (lambda: apply_rope(np.zeros(8), [0]), r"x\.shape=\(8,\)"),
        (lambda: RoPE(convention="rotate_half"), "convention='rotate_half'"),
        (lambda: ntk_scaled_base(10000.0, 4.0, 2), "d_head=2"),
        (lambda: alibi_slopes(0), "n_heads=0"),
        (lambda: alibi_bias(4, -1), "seq_len=-1"),
    ],
)
def test_bad_input_gets_a_japanese_error_naming_the_value(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()
