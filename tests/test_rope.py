"""attnlab.experiments.rope: the numbers behind chapter 08's figures."""

import numpy as np
import pytest

from attnlab.experiments.rope import (
    ROPE_DEMO_D_HEAD,
    ROPE_DEMO_PAIRS,
    half_layout_logits,
    half_layout_permutation,
    permute_head_columns,
    rope_decay_bound,
    rope_demo_vectors,
    rope_pair_plane,
)
from attnlab.model import ModelConfig, forward, init_params
from attnlab.positional import apply_rope


@pytest.mark.parametrize("pair", ROPE_DEMO_PAIRS)
def test_a_pairs_share_of_the_score_is_constant_along_each_diagonal(pair):
    plane = rope_pair_plane(pair)
    T = plane.scores.shape[0]
    for offset in range(-T + 1, T):
        for grid in (plane.scores, plane.full):
            diagonal = np.diagonal(grid, offset=offset)
            np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-12)


def test_the_pairs_add_up_to_the_whole_dot_product():
    total = sum(rope_pair_plane(pair).scores for pair in range(ROPE_DEMO_D_HEAD // 2))
    np.testing.assert_allclose(total, rope_pair_plane(0).full, atol=1e-12)


def test_the_pair_keeps_its_length_and_starts_unrotated():
    q, _ = rope_demo_vectors()
    plane = rope_pair_plane(1)
    np.testing.assert_allclose(plane.q[0], q[2:4])
    np.testing.assert_allclose(np.linalg.norm(plane.q, axis=-1), np.linalg.norm(q[2:4]))


def test_a_pair_outside_the_head_is_a_japanese_error():
    with pytest.raises(ValueError, match="pair は 0 〜 3"):
        rope_pair_plane(4)


def test_the_decay_bound_starts_at_its_maximum_and_decays():
    bound = rope_decay_bound(np.arange(0, 2001), 128)
    np.testing.assert_allclose(bound[0], (64 + 1) / 2)
    assert np.all(bound <= bound[0] + 1e-9)
    assert bound[1000:].mean() < 0.25 * bound[0]


def test_the_permutation_turns_adjacent_pairs_into_split_halves():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 8))
    pos = np.array([3, 1, 4, 1, 5])
    perm = half_layout_permutation(8)
    np.testing.assert_array_equal(perm, [0, 2, 4, 6, 1, 3, 5, 7])
    np.testing.assert_allclose(apply_rope(x[:, perm], pos, convention="half"),
                               apply_rope(x, pos)[:, perm], atol=1e-12)


def test_permuting_head_columns_moves_whole_heads_only():
    w = np.arange(8).reshape(1, 8).repeat(3, axis=0)  # (3, H·Dh) with H=2, Dh=4
    out = permute_head_columns(w, 2, [0, 2, 1, 3])
    np.testing.assert_array_equal(out[0], [0, 2, 1, 3, 4, 6, 5, 7])
    with pytest.raises(ValueError, match="並べ替え"):
        permute_head_columns(w, 2, [0, 0, 1, 2])
    with pytest.raises(ValueError, match="割り切れる"):
        permute_head_columns(w, 3, [0, 1])


def test_expected_scores_aligned_fall_and_independent_stay_flat():
    from attnlab.experiments.rope import rope_expected_scores

    distances = np.array([0, 7, 100, 1000])
    aligned, independent = rope_expected_scores(distances, 128)
    assert aligned[0] == pytest.approx(128.0)
    assert np.all(np.diff(aligned) < 0) and aligned[-1] < 0.2 * aligned[0]
    # √(2/π)·E‖q‖ for the chi distribution of ‖q‖: close to, not equal to, √(2·Dh/π)
    assert independent == pytest.approx(9.0094, abs=1e-4)
    assert independent < np.sqrt(2 * 128 / np.pi)
    # against samples: q = k for the aligned mean, independent q, k for the mean of |q·k|
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 4000, 128))  # (N, Dh) each
    for d, expected in zip(distances, aligned, strict=True):
        q_d = apply_rope(q, np.full(len(q), d))  # (N, Dh): q at position d
        assert np.mean(np.sum(q_d * q, axis=-1)) == pytest.approx(expected, abs=1.5)
        assert np.mean(np.abs(np.sum(q_d * k, axis=-1))) == pytest.approx(independent, rel=0.05)


def _gqa_model():
    config = ModelConfig(vocab_size=11, d_model=24, n_heads=4, n_kv_heads=2, n_layers=2,
                         max_len=9, positional="rope", dtype="float64")
    params = init_params(config, np.random.default_rng(0))
    tokens = np.random.default_rng(1).integers(0, 11, size=(2, 9))
    return config, params, tokens


def test_half_layout_logits_match_forward_after_converting_every_layer():
    config, params, tokens = _gqa_model()
    perm = half_layout_permutation(config.d_head)
    converted = dict(params)
    for layer in range(config.n_layers):
        for name, heads in ((f"layers.{layer}.w_q", 4), (f"layers.{layer}.w_k", 2)):
            converted[name] = permute_head_columns(params[name], heads, perm)
    np.testing.assert_allclose(half_layout_logits(converted, tokens, config),
                               forward(params, tokens, config).logits, atol=1e-10)
    # unconverted, or only layer 0 converted: not the same model
    for wrong in (params, {**converted, "layers.1.w_q": params["layers.1.w_q"],
                           "layers.1.w_k": params["layers.1.w_k"]}):
        gap = np.abs(half_layout_logits(wrong, tokens, config)
                     - forward(params, tokens, config).logits).max()
        assert gap > 1e-3


def test_half_layout_logits_refuse_a_model_without_rope():
    config, params, tokens = _gqa_model()
    with pytest.raises(ValueError, match="positional='learned'"):
        half_layout_logits(params, tokens, ModelConfig(
            vocab_size=11, d_model=24, n_heads=4, n_layers=2, max_len=9,
            positional="learned"))
