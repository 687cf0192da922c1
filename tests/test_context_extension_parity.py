"""Chapter 09's practitioners' knobs against the code that released models run.

transformers needs torch (about 1.2 GB installed, over two minutes to install here), too
heavy for the test environment, so the lines of its RoPE functions are ported to numpy
below, line for line, with the variable names kept. The port is of transformers v5.24.0
(PyPI), ``src/transformers/modeling_rope_utils.py``: ``_compute_linear_scaling_rope_parameters``,
``_compute_dynamic_ntk_parameters``, ``_compute_yarn_parameters`` (its ``find_correction_dim``,
``find_correction_range`` with ``truncate=True``, ``linear_ramp_factor``) and
``_compute_llama3_parameters``; and ``rotate_half`` / ``apply_rotary_pos_emb`` of
``src/transformers/models/gpt_neox/modeling_gpt_neox.py`` (partial rotary). The YaRN and
llama3 lines are the same in the GitHub snapshot huggingface/transformers@ef46806472a64b00
13ed413781e3afed82bfa047 (there YaRN reads the trained length from max_position_embeddings).
torch's float32 arange is kept as float32, so the port rounds as the original does.

The port was checked once against transformers 5.24.0 with torch 2.13.0 (CPU) on a grid
of settings; attnlab is tested against the port here.
"""

import math

import numpy as np
import pytest

from attnlab.positional import (
    apply_partial_rope,
    apply_rope,
    by_parts_inv_freq,
    dynamic_ntk_base,
    llama3_inv_freq,
    partial_rotary_dims,
    rope_inv_freq,
    yarn_attention_factor,
    yarn_correction_range,
    yarn_gamma,
    yarn_inv_freq,
    yarn_ramp,
    yarn_turns_inv_freq,
)

# --- the port (numpy, float32 where torch computes in float32) -------------------------------


def _default_inv_freq(base, dim):
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))


def hf_linear(base, dim, factor):
    inv_freq = _default_inv_freq(base, dim)
    inv_freq /= factor
    return inv_freq, 1.0


def hf_dynamic(base, dim, factor, max_position_embeddings, seq_len):
    attention_factor = 1.0  # Unused in this type of RoPE
    seq_len = max(seq_len, max_position_embeddings)
    base = base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))
    return inv_freq, attention_factor


def hf_yarn(base, dim, factor, original_max_position_embeddings, beta_fast=None, beta_slow=None,
            attention_factor=None, truncate=True):
    def get_mscale(scale, mscale=1):
        if scale <= 1:
            return 1.0
        return 0.1 * mscale * math.log(scale) + 1.0

    if attention_factor is None:
        attention_factor = get_mscale(factor)
    beta_fast = beta_fast or 32
    beta_slow = beta_slow or 1

    def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
        return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (
            2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings, truncate):
        low = find_correction_dim(low_rot, dim, base, max_position_embeddings)
        high = find_correction_dim(high_rot, dim, base, max_position_embeddings)
        if truncate:
            low = math.floor(low)
            high = math.ceil(high)
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(min, max, dim):  # noqa: A002 (the original's names)
        if min == max:
            max += 0.001  # Prevent singularity
        linear_func = (np.arange(dim, dtype=np.float32) - min) / (max - min)
        ramp_func = np.clip(linear_func, 0, 1)
        return ramp_func

    pos_freqs = base ** (np.arange(0, dim, 2).astype(np.float32) / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    low, high = find_correction_range(beta_fast, beta_slow, dim, base,
                                      original_max_position_embeddings, truncate)
    inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2).astype(np.float32)
    inv_freq = (inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
                + inv_freq_extrapolation * inv_freq_extrapolation_factor)
    return inv_freq, attention_factor


def hf_llama3(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = ((old_context_len / wavelen - low_freq_factor)
                     / (high_freq_factor - low_freq_factor))
    smoothed_inv_freq = ((1 - smooth_factor) * inv_freq_llama / factor
                         + smooth_factor * inv_freq_llama)
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = np.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq_llama, 1.0


def hf_rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return np.concatenate((-x2, x1), axis=-1)


def hf_neox_partial(q, positions, base, head_dim, partial_rotary_factor):
    dim = int(head_dim * partial_rotary_factor)
    inv_freq = _default_inv_freq(base, dim).astype(np.float64)
    freqs = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq  # (T, dim/2)
    emb = np.concatenate((freqs, freqs), axis=-1)  # (T, dim)
    cos, sin = np.cos(emb), np.sin(emb)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    q_embed = (q_rot * cos) + (hf_rotate_half(q_rot) * sin)
    return np.concatenate([q_embed, q_pass], axis=-1)


# --- attnlab against the port ----------------------------------------------------------------

# (d_head, base, s, trained length): real configurations and sizes that are not powers of two
SETTINGS = [
    (128, 10000.0, 4.0, 4096),   # Llama 2 with YaRN s = 4
    (128, 10000.0, 16.0, 4096),  # Yarn-Llama-2-7b-64k
    (128, 500000.0, 8.0, 8192),  # Llama 3.1
    (96, 10000.0, 2.5, 2048),    # not a power of two, a scale that is not whole
    (64, 10000.0, 3.0, 777),
    (8, 10000.0, 4.0, 16),       # chapter 10's toy
    (16, 10000.0, 2.0, 16),      # chapter 09's demo model
]
F32 = dict(rtol=2e-6, atol=0)  # the port rounds in float32 as torch does


@pytest.mark.parametrize("d_head, base, s, L", SETTINGS)
def test_pi_is_transformers_linear(d_head, base, s, L):
    np.testing.assert_allclose(rope_inv_freq(d_head, base, s, "pi"), hf_linear(base, d_head, s)[0],
                               **F32)


@pytest.mark.parametrize("d_head, base, s, L", SETTINGS)
def test_yarn_is_transformers_yarn(d_head, base, s, L):
    inv_freq, attention_factor = hf_yarn(base, d_head, s, L)
    np.testing.assert_allclose(yarn_inv_freq(d_head, base, s, L), inv_freq, **F32)
    assert yarn_attention_factor(s) == pytest.approx(attention_factor, rel=1e-12)
    # other band limits, as rope_scaling["beta_fast"] / ["beta_slow"]
    np.testing.assert_allclose(
        yarn_inv_freq(d_head, base, s, L, beta_fast=16.0, beta_slow=2.0),
        hf_yarn(base, d_head, s, L, beta_fast=16.0, beta_slow=2.0)[0], **F32)


@pytest.mark.parametrize("d_head, base, s, L", SETTINGS)
def test_dynamic_ntk_is_transformers_dynamic(d_head, base, s, L):
    if d_head < 4:
        pytest.skip("NTK needs d_head >= 4")
    for seq_len in (L // 2, L, L + 1, 3 * L, 10 * L + 7):
        ours = rope_inv_freq(d_head, dynamic_ntk_base(base, s, d_head, L, seq_len))
        np.testing.assert_allclose(ours, hf_dynamic(base, d_head, s, L, seq_len)[0], **F32)


@pytest.mark.parametrize("d_head, base, s, L", SETTINGS)
def test_llama3_is_transformers_llama3(d_head, base, s, L):
    for low, high in ((1.0, 4.0), (1.5, 3.0)):
        np.testing.assert_allclose(
            llama3_inv_freq(d_head, base, s, L, low_freq_factor=low, high_freq_factor=high),
            hf_llama3(base, d_head, s, low, high, L)[0], **F32)


@pytest.mark.parametrize("d_head, fraction", [(96, 0.25), (128, 0.5), (64, 1.0), (80, 0.3)])
def test_partial_rotary_is_gpt_neox(d_head, fraction):
    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, 7, d_head))  # (H, T, Dh)
    positions = np.array([0, 1, 5, 30, 2, 100, 7])
    np.testing.assert_allclose(apply_partial_rope(q, positions, fraction),
                               hf_neox_partial(q, positions, 10000.0, d_head, fraction),
                               rtol=1e-5, atol=1e-5)  # the port's θ is float32
    assert partial_rotary_dims(d_head, fraction) == int(d_head * fraction)


# --- the book's forms of the same formulas --------------------------------------------------

@pytest.mark.parametrize("d_head, base, s, L", SETTINGS)
def test_every_scaling_is_by_parts_with_its_own_gamma(d_head, base, s, L):
    theta = rope_inv_freq(d_head, base)
    # PI keeps nothing, plain RoPE keeps everything
    np.testing.assert_allclose(by_parts_inv_freq(d_head, base, s, np.zeros_like(theta)), theta / s)
    np.testing.assert_allclose(by_parts_inv_freq(d_head, base, s, np.ones_like(theta)), theta)
    # the reference code's YaRN: γ̃ = 1 − its ramp over the pair index
    np.testing.assert_allclose(by_parts_inv_freq(d_head, base, s, 1 - yarn_ramp(d_head, base, L)),
                               yarn_inv_freq(d_head, base, s, L), rtol=1e-12)
    # the paper's YaRN: γ(r) linear in the turns; llama3: the same with α = 1, β = 4
    np.testing.assert_allclose(yarn_turns_inv_freq(d_head, base, s, L),
                               by_parts_inv_freq(d_head, base, s, yarn_gamma(d_head, base, L)))
    np.testing.assert_allclose(
        llama3_inv_freq(d_head, base, s, L),
        by_parts_inv_freq(d_head, base, s,
                          yarn_gamma(d_head, base, L, beta_fast=4.0, beta_slow=1.0)))


def test_the_two_ramps_agree_at_the_ends_and_differ_in_between():
    # Llama 2 (Dh 128, L 4096): both ramps keep pairs of more than 32 turns and
    # interpolate pairs of less than 1; between, the index ramp is linear in the pair
    # index (so in ln r), the paper's in r
    d_head, base, L = 128, 10000.0, 4096
    turns = L * rope_inv_freq(d_head, base) / (2 * math.pi)
    paper = yarn_gamma(d_head, base, L)
    code = 1 - yarn_ramp(d_head, base, L)
    low, high = yarn_correction_range(d_head, base, L)
    assert np.all(paper[turns > 32] == 1) and np.all(code[: low + 1] == 1)
    assert np.all(paper[turns < 1] == 0) and np.all(code[high:] == 0)
    between = (turns > 1) & (turns < 32)
    np.testing.assert_allclose(np.diff(code[low:high + 1]), -1 / (high - low))
    np.testing.assert_allclose(paper[between], (turns[between] - 1) / 31)
    assert np.abs(code - paper)[between].max() > 0.3


def test_the_toy_heads_are_where_the_two_ramps_part():
    # chapter 10: Dh = 8, L = 16. Pair 0 turns 2.5 times: the paper interpolates it by
    # 1 − γ = 0.95, the index ramp keeps it whole (its low edge floor(−1.1) is clamped to 0)
    assert yarn_correction_range(8, 10000.0, 16) == (0, 1)
    np.testing.assert_allclose(yarn_gamma(8, 10000.0, 16), [(16 / (2 * math.pi) - 1) / 31, 0, 0, 0])
    assert yarn_inv_freq(8, 10000.0, 4.0, 16)[0] == 1.0
    assert yarn_turns_inv_freq(8, 10000.0, 4.0, 16)[0] < 0.3


def test_dynamic_ntk_keeps_the_base_up_to_the_trained_length_and_is_ntk_beyond():
    from attnlab.positional import ntk_scaled_base

    assert dynamic_ntk_base(10000.0, 2.0, 64, 2048, 1000) == 10000.0
    assert dynamic_ntk_base(10000.0, 2.0, 64, 2048, 2048) == 10000.0
    # s = 1: the NTK base of l / L (Peng et al. §3.3)
    assert dynamic_ntk_base(10000.0, 1.0, 64, 2048, 6144) == pytest.approx(
        ntk_scaled_base(10000.0, 3.0, 64))


def test_partial_rotary_leaves_the_rest_and_keeps_relative_scores():
    rng = np.random.default_rng(5)
    q, k = rng.normal(size=(2, 1, 96))  # (1, Dh) each
    rotated = partial_rotary_dims(96, 0.25)
    moved = apply_partial_rope(q, [40], 0.25)
    np.testing.assert_array_equal(moved[:, rotated:], q[:, rotated:])
    np.testing.assert_allclose(moved[:, :rotated],
                               apply_rope(q[:, :rotated], [40], convention="half"))
    score = (apply_partial_rope(q, [7], 0.25) @ apply_partial_rope(k, [3], 0.25).T).item()
    shifted = (apply_partial_rope(q, [107], 0.25) @ apply_partial_rope(k, [103], 0.25).T).item()
    assert shifted == pytest.approx(score, rel=1e-9)


@pytest.mark.parametrize("call, message", [
    (lambda: partial_rotary_dims(96, 0.0), "fraction"),
    (lambda: partial_rotary_dims(96, 1.5), "fraction"),
    (lambda: partial_rotary_dims(10, 0.3), "fraction"),
    (lambda: by_parts_inv_freq(8, 10000.0, 2.0, [0.0, 1.0]), "gamma"),
    (lambda: by_parts_inv_freq(8, 10000.0, 2.0, [0.0, 1.0, 2.0, 0.5]), "gamma"),
    (lambda: llama3_inv_freq(8, 10000.0, 2.0, 16, low_freq_factor=4.0,
                             high_freq_factor=1.0), "high_freq_factor"),
    (lambda: dynamic_ntk_base(10000.0, 2.0, 64, 0, 10), "original_max_len"),
    (lambda: yarn_gamma(8, 10000.0, 16, beta_fast=1.0, beta_slow=2.0), "beta_fast"),
])
def test_bad_arguments_are_refused_in_japanese(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert any("\u3040" <= ch <= "\u30ff" for ch in str(info.value))
