"""Chapter 09: YaRN's frequencies and temperature, and RoPE stretched inside attention."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import multi_head_attention
from attnlab.attention import init_mha
from attnlab.experiments.context_extension import YarnAblation, yarn_ablation
from attnlab.model import ModelConfig, forward, init_params, loss_and_grads
from attnlab.positional import (
    ROPE_SCALINGS,
    RoPE,
    apply_rope,
    ntk_scaled_base,
    rope_angles,
    rope_inv_freq,
    yarn_attention_factor,
    yarn_correction_range,
    yarn_gamma,
    yarn_inv_freq,
    yarn_ramp,
    yarn_turns_inv_freq,
)
from attnlab.tasks import Batch


def theta(d_head, base=10000.0):
    return base ** (-2.0 * np.arange(d_head // 2) / d_head)


# --- hand-computed values ----------------------------------------------------------------

def test_the_band_edges_by_hand_for_a_tiny_head():
    # Dh = 8, L = 64: index for 32 turns = 8·ln(64/(64π))/(2 ln 1e4) = −0.497 → floor −1 → 0;
    # for 1 turn = 8·ln(64/2π)/(2 ln 1e4) = 1.008 → ceil 2.
    assert yarn_correction_range(8, 10000.0, 64) == (0, 2)
    np.testing.assert_allclose(yarn_ramp(8, 10000.0, 64), [0.0, 0.5, 1.0, 1.0])
    # θ = 1, 0.1, 0.01, 0.001; s = 2: pair 1 is half interpolated: 0.1·(0.5 + 0.5/2)
    np.testing.assert_allclose(yarn_inv_freq(8, 10000.0, 2.0, 64),
                               [1.0, 0.075, 0.005, 0.0005], rtol=1e-12)


def test_llama_band_edges_match_the_reference_implementation():
    # LLaMA: Dh = 128, base 10000, 4096 trained positions, β = 32, α = 1
    dim = lambda r: 128 * math.log(4096 / (r * 2 * math.pi)) / (2 * math.log(10000))  # noqa: E731
    assert yarn_correction_range(128, 10000.0, 4096) == (math.floor(dim(32)), math.ceil(dim(1)))
    assert yarn_correction_range(128, 10000.0, 4096) == (20, 46)


def test_the_edges_are_clamped_to_the_dimension():
    # a very long trained length: even the slowest pair turns more than 32 times
    assert yarn_correction_range(8, 10000.0, 10**12) == (7, 7)
    np.testing.assert_array_equal(yarn_ramp(8, 10000.0, 10**12), 0.0)  # all kept
    # a very short one: no pair turns once, so high would be negative before the clamp
    assert yarn_correction_range(8, 10000.0, 2) == (0, 0)
    np.testing.assert_array_equal(yarn_ramp(8, 10000.0, 2), [0.0, 1.0, 1.0, 1.0])


def test_attention_factor_by_hand():
    assert yarn_attention_factor(1.0) == 1.0
    assert yarn_attention_factor(0.5) == 1.0
    assert yarn_attention_factor(2.0) == pytest.approx(0.1 * math.log(2.0) + 1.0)
    assert yarn_attention_factor(8) == pytest.approx(1.2079441541679836)


# --- the ramp's ends -----------------------------------------------------------------------

@pytest.mark.parametrize("scale", [2.0, 4.0, 8.0])
def test_fast_pairs_are_untouched_and_slow_pairs_divided_by_the_scale(scale):
    d_head, base, L = 64, 10000.0, 512
    low, high = yarn_correction_range(d_head, base, L)
    assert 0 < low < high < d_head // 2  # the band lies inside for these settings
    freq = yarn_inv_freq(d_head, base, scale, L)
    np.testing.assert_allclose(freq[: low + 1], theta(d_head)[: low + 1], rtol=1e-12)
    np.testing.assert_allclose(freq[high:], theta(d_head)[high:] / scale, rtol=1e-12)
    between = freq[low + 1: high] / theta(d_head)[low + 1: high]
    assert np.all((between < 1.0) & (between > 1.0 / scale))
    assert np.all(np.diff(between) < 0)  # more interpolated the slower the pair


def test_fast_pairs_turn_at_least_beta_fast_times_and_slow_ones_at_most_beta_slow():
    d_head, base, L = 64, 10000.0, 512
    low, high = yarn_correction_range(d_head, base, L)
    turns = L * theta(d_head) / (2 * math.pi)  # (Dh/2,)
    assert np.all(turns[:low] >= 32) and np.all(turns[high:] <= 1.0)


# --- scale 1 is plain RoPE -----------------------------------------------------------------

@pytest.mark.parametrize("scaling", ["pi", "ntk", "yarn"])
def test_scale_one_is_plain_rope(scaling):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 7, 16))  # (B, T, Dh)
    rope = RoPE(scaling=scaling, original_max_len=32)
    np.testing.assert_allclose(rope.inv_freq(16), theta(16), rtol=1e-12)
    np.testing.assert_allclose(rope.apply(x, np.arange(7)), apply_rope(x, np.arange(7)),
                               rtol=1e-12, atol=1e-12)
    assert rope.attention_factor == 1.0


def test_each_method_against_its_formula():
    d_head, base, s, L = 16, 10000.0, 4.0, 32
    np.testing.assert_allclose(rope_inv_freq(d_head, base, s, "pi"), theta(d_head) / s)
    np.testing.assert_allclose(rope_inv_freq(d_head, base, s, "ntk"),
                               theta(d_head, ntk_scaled_base(base, s, d_head)))
    np.testing.assert_allclose(rope_inv_freq(d_head, base, s, "yarn", L),
                               yarn_inv_freq(d_head, base, s, L))
    pos = np.arange(5.0)
    for scaling in ("pi", "ntk", "yarn"):
        rope = RoPE(base=base, scale=s, scaling=scaling, original_max_len=L)
        np.testing.assert_allclose(rope.angles(pos, d_head),
                                   pos[:, None] * rope.inv_freq(d_head), rtol=1e-12)
    # PI through RoPE is exactly the existing position scaling
    np.testing.assert_array_equal(RoPE(scale=s).angles(pos, d_head),
                                  rope_angles(pos, d_head, scale=s))


def test_yarn_multiplies_q_and_k_so_the_scores_get_the_temperature():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 6, 8))  # (T, Dh) each
    pos = np.arange(6)
    rope = RoPE(scale=4.0, scaling="yarn", original_max_len=16)
    plain = RoPE(scale=4.0, scaling="yarn", original_max_len=16)  # same angles
    angles = plain.angles(pos, 8)
    factor = yarn_attention_factor(4.0)
    q_r, k_r = rope.apply(q, pos), rope.apply(k, pos)
    # the pairs keep their length times the factor
    np.testing.assert_allclose(np.linalg.norm(q_r, axis=-1),
                               factor * np.linalg.norm(q, axis=-1))
    scores = q_r @ k_r.T  # (T, T)
    # the same rotation without the factor, by hand with complex numbers
    z_q = (q[:, 0::2] + 1j * q[:, 1::2]) * np.exp(1j * angles)
    z_k = (k[:, 0::2] + 1j * k[:, 1::2]) * np.exp(1j * angles)
    by_hand = np.real(z_q @ np.conj(z_k).T)
    np.testing.assert_allclose(scores, factor**2 * by_hand, rtol=1e-10, atol=1e-12)


def test_float32_stays_float32():
    x = np.ones((3, 8), dtype=np.float32)
    for scaling in ("ntk", "yarn"):
        out = RoPE(scale=2.0, scaling=scaling, original_max_len=8).apply(x, np.arange(3))
        assert out.dtype == np.float32


# --- Japanese errors ------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: yarn_inv_freq(7, 10000.0, 2.0, 64), "d_head"),
    (lambda: yarn_inv_freq(8, 10000.0, 0.0, 64), "scale"),
    (lambda: yarn_inv_freq(8, 10000.0, 2.0, 0), "original_max_len"),
    (lambda: yarn_inv_freq(8, 10000.0, 2.0, 64.5), "original_max_len"),
    (lambda: yarn_inv_freq(8, 1.0, 2.0, 64), "base"),
    (lambda: yarn_inv_freq(8, 10000.0, 2.0, 64, beta_fast=1.0, beta_slow=32.0), "beta_fast"),
    (lambda: yarn_inv_freq(8, 10000.0, 2.0, 64, beta_slow=0.0), "beta_slow"),
    (lambda: yarn_attention_factor(-1.0), "scale"),
    (lambda: RoPE(scale=2.0, scaling="yarn"), "original_max_len"),
    (lambda: RoPE(scaling="linear"), "scaling"),
    (lambda: rope_inv_freq(8, 10000.0, 2.0, "yarn"), "original_max_len"),
    (lambda: ModelConfig(8, 8, 2, 1, 8, positional="rope", rope_scaling="dynamic"),
     "rope_scaling"),
    (lambda: ModelConfig(8, 8, 2, 1, 8, positional="rope", rope_original_max_len=0),
     "rope_original_max_len"),
])
def test_bad_arguments_are_refused_in_japanese(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert any("\u3040" <= ch <= "\u30ff" for ch in str(info.value))  # kana: Japanese


# --- inside attention and the model ----------------------------------------------------------

@pytest.mark.parametrize("scaling", ["pi", "ntk", "yarn"])
def test_multi_head_attention_and_its_loop_agree_for_each_method(scaling):
    from attnlab.attention import multi_head_attention_loop

    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 9, 16))  # (B, T, D)
    weights = init_mha(16, 4, rng=rng)
    rope = RoPE(scale=2.0, scaling=scaling, original_max_len=8)
    out, attn = multi_head_attention(x, weights, 4, rope=rope)
    out_loop, attn_loop = multi_head_attention_loop(x, weights, 4, rope=rope)
    np.testing.assert_allclose(out, out_loop, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(attn, attn_loop, rtol=1e-10, atol=1e-12)


def model(**changes):
    settings = dict(vocab_size=7, d_model=8, n_heads=2, n_layers=2, max_len=6,
                    positional="rope", dtype="float64")
    return ModelConfig(**{**settings, **changes})


def test_the_model_uses_each_method():
    rng = np.random.default_rng(3)
    base = model()
    params = init_params(base, rng)
    tokens = rng.integers(0, 7, size=(2, 12))  # (B, T): twice max_len
    logits = {scaling: forward(params, tokens, model(rope_scale=2.0, rope_scaling=scaling)).logits
              for scaling in ("pi", "ntk", "yarn")}
    plain = forward(params, tokens, base).logits
    for a in logits.values():
        assert not np.allclose(a, plain)  # every method changes the model's angles
    assert not np.allclose(logits["pi"], logits["ntk"])
    assert not np.allclose(logits["ntk"], logits["yarn"])
    # YaRN's trained length defaults to max_len and can be given
    assert model(rope_scaling="yarn", rope_scale=2.0).rope.original_max_len == 6
    assert model(rope_scaling="yarn", rope_original_max_len=4).rope.original_max_len == 4
    # scale 1: every method is the plain model
    for scaling in ("ntk", "yarn"):
        np.testing.assert_allclose(forward(params, tokens, model(rope_scaling=scaling)).logits,
                                   plain, rtol=1e-10)
    # the existing fields behave as before
    assert model(rope_scale=2.0).rope == RoPE(scale=2.0)


@pytest.mark.parametrize("scaling", ["ntk", "yarn"])
def test_backprop_through_scaled_rope_matches_finite_differences(scaling):
    config = model(rope_scale=3.0, rope_scaling=scaling)
    rng = np.random.default_rng(4)
    params = init_params(config, rng)
    tokens = rng.integers(0, 7, size=(2, 8))
    targets = rng.integers(0, 7, size=(2, 8))
    batch = Batch(tokens, targets, np.ones((2, 8), dtype=bool))
    _, grads = loss_and_grads(params, batch, config)
    eps = 1e-5
    for name in params:
        direction = rng.standard_normal(params[name].shape)
        up = dict(params, **{name: params[name] + eps * direction})
        down = dict(params, **{name: params[name] - eps * direction})
        numeric = (loss_and_grads(up, batch, config)[0]
                   - loss_and_grads(down, batch, config)[0]) / (2 * eps)
        analytic = float(np.sum(grads[name] * direction))
        assert numeric == pytest.approx(analytic, rel=1e-6, abs=1e-9), name


# --- the numerics of the live figure ------------------------------------------------------------

def test_angle_coverage_counts_the_pairs_that_leave_the_trained_range():
    from attnlab.experiments.context_extension import angle_coverage

    expected = {"外挿": 16, "PI": 0, "NTK": 15, "YaRN": 0}
    for method, unseen in expected.items():
        assert angle_coverage(method, 1).unseen.sum() == 0
        for s in (2, 4, 8):
            cov = angle_coverage(method, s)
            assert cov.unseen.sum() == unseen, (method, s)
            assert cov.full_turn.sum() == 16
    assert angle_coverage("YaRN", 4).attention_factor == pytest.approx(yarn_attention_factor(4))
    np.testing.assert_allclose(angle_coverage("PI", 4).resolution, 0.25)
    with pytest.raises(ValueError, match="method"):
        angle_coverage("linear", 2)
    with pytest.raises(ValueError, match="scale"):
        angle_coverage("PI", 0.5)


@settings(max_examples=300, deadline=None)
@given(half=st.integers(2, 128), base=st.floats(100.0, 1e6),
       train_len=st.integers(2, 100_000))
def test_yarns_ramp_shape_at_pair_0_is_set_by_the_training_length(half, base, train_len):
    # chapter 09: pair 0 turns L/2π times for any head width and base; the reference
    # ramp (low clamped at 0) keeps pair 0 everywhere, the paper's γ keeps it exactly
    # when L/2π ≥ β = 32, i.e. L ≥ 2π·32 ≈ 201
    d_head = 2 * half
    assert yarn_ramp(d_head, base, train_len)[0] == 0.0  # interpolated share of pair 0
    gamma_0 = yarn_gamma(d_head, base, train_len)[0]
    assert (gamma_0 == 1.0) == (train_len / (2 * math.pi) >= 32.0)


@pytest.mark.parametrize("d_head", [8, 16, 64, 128])
def test_at_the_toys_length_the_papers_ramp_interpolates_pair_0_whatever_the_head(d_head):
    # L = 16: pair 0 turns 2.5 times, so γ_0 = (2.5 − 1)/31 ≈ 0.05 for every head width
    np.testing.assert_allclose(yarn_gamma(d_head, 10000.0, 16)[0],
                               (16 / (2 * math.pi) - 1) / 31)
    assert yarn_gamma(d_head, 10000.0, 202)[0] == 1.0 > yarn_gamma(d_head, 10000.0, 201)[0]


def test_yarn_ablations_change_one_part_of_yarn_each():
    plain = RoPE(scale=4.0, scaling="yarn", original_max_len=16)
    turns = YarnAblation(scale=4.0, scaling="yarn", original_max_len=16, ramp="turns")
    cold = YarnAblation(scale=4.0, scaling="yarn", original_max_len=16, temperature=False)
    np.testing.assert_array_equal(turns.inv_freq(8), yarn_turns_inv_freq(8, 10000.0, 4.0, 16))
    assert turns.attention_factor == plain.attention_factor > 1.0
    np.testing.assert_array_equal(cold.inv_freq(8), plain.inv_freq(8))
    assert cold.attention_factor == 1.0
    # the model runs the ablation: its RoPE is the ablation's, band included
    config = ModelConfig(vocab_size=5, d_model=16, n_heads=2, n_layers=1, max_len=16,
                         positional="rope", rope_scaling="yarn", rope_scale=4.0)
    ablated = yarn_ablation(config, ramp="turns", beta_fast=1.0, beta_slow=1 / 32)
    assert ablated.rope.ramp == "turns" and ablated.rope.beta_slow == 1 / 32
    np.testing.assert_array_equal(
        ablated.rope.inv_freq(8),
        yarn_turns_inv_freq(8, 10000.0, 4.0, 16, beta_fast=1.0, beta_slow=1 / 32))
    # the two ablations are the experiment's, not scalings of the model
    assert "yarn_turns" not in ROPE_SCALINGS and "yarn_no_temp" not in ROPE_SCALINGS


def _rope_config(**fields):
    return ModelConfig(vocab_size=5, d_model=8, n_heads=2, n_layers=1, max_len=8,
                       positional="rope", **fields)


@pytest.mark.parametrize("call, message", [
    (lambda: YarnAblation(scale=2.0, scaling="ntk"), "scaling='yarn'"),
    (lambda: YarnAblation(scale=2.0, scaling="yarn", original_max_len=8, ramp="paper"),
     "ramp"),
    (lambda: yarn_ablation(_rope_config()), "rope_scaling='pi'"),
    (lambda: yarn_ablation(_rope_config(rope_scaling="yarn", rope_scale=2.0),
                           temperature="no"), "temperature"),
])
def test_yarn_ablation_refuses_bad_input_in_japanese(call, message):
    with pytest.raises(ValueError, match=message):
        call()
