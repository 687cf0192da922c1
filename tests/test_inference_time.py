"""Chapter 11's measurements: cached decoding, rotations, costs, the window, sinks, memory, MLA."""

import dataclasses

import numpy as np
import pytest

from attnlab.attention import scaled_dot_product_attention
from attnlab.experiments.inference_time import (
    CACHE_SCHEMES,
    EVICTED,
    KEPT,
    NOT_YET,
    SINK,
    SINK_CONFIG,
    SINK_WINDOW,
    TIMING_CONFIG,
    cache_state,
    cached_logits,
    count_rotations,
    first_position_weight,
    forward_with_mask,
    influence,
    kept_positions_accuracy,
    mla_output_from_scores,
    mla_unabsorbed_scores,
    peak_bytes,
    rope_on_content_scores,
    scheme_config,
    sink_batch,
    step_macs,
    window_accuracy,
)
from attnlab.experiments.what_heads_capture import trained_model
from attnlab.inference import (
    band_mask,
    init_mla,
    mla_absorbed_scores,
    mla_attention,
    online_softmax_attention,
    receptive_field,
)
from attnlab.model import forward, init_params
from attnlab.positional import RoPE


@pytest.fixture(scope="module")
def trained_sink_model():
    return trained_model(0).params  # chapter 04's model, as the chapter trains it


def _model(positional, n_kv_heads=2, seed=0):
    config = scheme_config(positional, n_kv_heads)
    rng = np.random.default_rng(seed)
    return config, init_params(config, rng), rng.integers(32, size=(2, 20))


@pytest.mark.parametrize("positional", CACHE_SCHEMES)
@pytest.mark.parametrize("n_kv_heads", [4, 1])
def test_cached_logits_equal_the_full_forward(positional, n_kv_heads):
    config, params, tokens = _model(positional, n_kv_heads)
    for prefill in (1, 7, 20):
        got = cached_logits(params, tokens, config, prefill)
        np.testing.assert_allclose(got, forward(params, tokens, config).logits, atol=1e-12)


@pytest.mark.parametrize("positional", CACHE_SCHEMES)
def test_forward_with_the_causal_band_is_the_forward_pass(positional):
    config, params, tokens = _model(positional)
    got = forward_with_mask(params, tokens, config, band_mask(20))
    np.testing.assert_allclose(got, forward(params, tokens, config).logits, atol=1e-12)


@pytest.mark.parametrize("positional", CACHE_SCHEMES)
@pytest.mark.parametrize("window, sinks", [(1, 0), (4, 0), (4, 2)])
def test_the_rolling_buffer_equals_the_band_mask(positional, window, sinks):
    config, params, tokens = _model(positional)
    want = forward_with_mask(params, tokens, config, band_mask(20, window, sinks))
    got = cached_logits(params, tokens, config, 5, window=window, sinks=sinks)
    np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("T", [1, 5, 64])
def test_rotating_on_read_costs_a_triangle_of_rotations_for_the_same_scores(T):
    r = count_rotations(T, rng=np.random.default_rng(0))
    assert (r.stored_rotated, r.rotated_on_read) == (T, T * (T + 1) // 2)
    assert r.max_difference < 1e-12


def test_multiply_adds_grow_linearly_with_the_cache_and_quadratically_without():
    cached = np.array([step_macs(TIMING_CONFIG, T, cached=True) for T in range(10, 20)])
    full = np.array([step_macs(TIMING_CONFIG, T, cached=False) for T in range(10, 20)])
    assert len(set(np.diff(cached))) == 1
    assert len(set(np.diff(full, 2))) == 1 and np.diff(full, 2)[0] > 0
    # the attention part of a cached step: scores and weighted sum over T + 1 keys
    H, _, Dh = TIMING_CONFIG.heads
    assert np.diff(cached)[0] == TIMING_CONFIG.n_layers * 2 * H * Dh
    # reading one token without a cache is a cached step
    assert step_macs(TIMING_CONFIG, 0, cached=True) == step_macs(TIMING_CONFIG, 0,
                                                                 cached=False)


@pytest.mark.parametrize("window, n_layers", [(2, 1), (3, 2), (4, 3)])
def test_the_measured_influence_is_the_receptive_field(window, n_layers):
    changed = influence(window, n_layers, 14, rng=np.random.default_rng(1))
    n = receptive_field(window, n_layers)
    assert changed.sum() == n and changed[-n:].all()


def test_uniform_attention_puts_the_uniform_share_on_position_0():
    config = dataclasses.replace(SINK_CONFIG, positional="rope")
    params = init_params(config, np.random.default_rng(0))
    for layer in range(config.n_layers):
        key = f"layers.{layer}.w_q"
        params[key] = np.zeros_like(params[key])
    tokens = np.random.default_rng(1).integers(32, size=(3, 32))
    sink = first_position_weight(params, config, tokens)
    np.testing.assert_allclose(sink.weight, sink.uniform, rtol=1e-5)


def test_window_accuracy_with_the_full_cache_is_the_forward_pass_accuracy():
    config, params, _ = _model("learned")
    config = dataclasses.replace(config, max_len=32)
    params = init_params(config, np.random.default_rng(3))
    batch = sink_batch()
    logits = forward(params, batch.tokens, config).logits
    right = (logits.argmax(-1) == batch.targets)[:, SINK_WINDOW:]
    scored = batch.loss_mask.astype(bool)[:, SINK_WINDOW:]
    got = window_accuracy(params, config, batch, window=None)
    assert got == pytest.approx(right[scored].mean())


@pytest.mark.parametrize("window, sinks", [(SINK_WINDOW, 0), (SINK_WINDOW, 1), (SINK_WINDOW, 4),
                                           (9, 2)])
@pytest.mark.slow
def test_keeping_the_first_positions_is_the_sink_cache(window, sinks, trained_sink_model):
    batch = sink_batch()
    want = window_accuracy(trained_sink_model, SINK_CONFIG, batch, window=window,
                           sinks=sinks)
    got = kept_positions_accuracy(trained_sink_model, SINK_CONFIG, batch, window=window,
                                  keep=range(sinks))
    assert got == pytest.approx(want)


@pytest.mark.slow
def test_which_positions_are_kept_changes_the_accuracy(trained_sink_model):
    batch = sink_batch()
    accuracy = {keep: kept_positions_accuracy(trained_sink_model, SINK_CONFIG, batch,
                                              window=SINK_WINDOW, keep=keep)
                for keep in ((), (0, 1, 2, 3), (4, 5, 6, 7))}
    assert len(set(accuracy.values())) == 3  # the mask does reach the model


def test_keeping_every_position_is_the_full_cache():
    config = dataclasses.replace(SINK_CONFIG, positional="learned")
    params = init_params(config, np.random.default_rng(5))
    batch = sink_batch()
    everything = range(batch.tokens.shape[1])
    assert kept_positions_accuracy(params, config, batch, window=3, keep=everything) \
        == pytest.approx(window_accuracy(params, config, batch, window=None))


@pytest.mark.parametrize("keep", [[-1], [32], [0, 40]])
def test_kept_positions_outside_the_sequence_are_refused(keep):
    config = dataclasses.replace(SINK_CONFIG, positional="learned")
    params = init_params(config, np.random.default_rng(6))
    with pytest.raises(ValueError, match="keep"):
        kept_positions_accuracy(params, config, sink_batch(), window=4, keep=keep)


def test_peak_bytes_sees_the_arrays_a_function_makes():
    assert peak_bytes(np.ones, (500, 500)) >= 8 * 500 * 500
    assert peak_bytes(lambda: None) < 10_000


def test_the_online_softmax_holds_memory_linear_in_t_and_the_softmax_quadratic():
    rng = np.random.default_rng(0)
    peaks = {}
    for T in (256, 512):
        q, k, v = rng.standard_normal((3, T, 16))
        peaks[T] = (peak_bytes(scaled_dot_product_attention, q, k, v),
                    peak_bytes(online_softmax_attention, q, k, v, block_size=32))
    assert peaks[512][0] / peaks[256][0] > 3.5
    assert peaks[512][1] / peaks[256][1] < 2.5
    assert peaks[512][1] < peaks[512][0] / 4


def test_the_rebuilt_mla_scores_are_mla_attention_and_equal_the_absorbed_ones():
    rng = np.random.default_rng(2)
    proj = init_mla(24, 3, 8, 4, 10, 12, rng=rng)
    x = rng.standard_normal((2, 7, 24))
    rope = RoPE()
    out, cache = mla_attention(x, proj, 3, rope=rope)
    rebuilt = mla_unabsorbed_scores(x, proj, 3, rope=rope)
    absorbed = mla_absorbed_scores(x, cache, proj, 3, rope=rope, positions=np.arange(7))
    np.testing.assert_allclose(absorbed, rebuilt, atol=1e-12)
    np.testing.assert_allclose(mla_output_from_scores(rebuilt, x, proj, 3), out, atol=1e-12)


def test_rope_on_the_content_key_breaks_absorption_except_at_equal_positions():
    rng = np.random.default_rng(3)
    proj = init_mla(24, 3, 8, 4, 10, 12, rng=rng)
    scores = rope_on_content_scores(rng.standard_normal((1, 6, 24)), proj, 3, rope=RoPE())
    gap = np.abs(scores.true - scores.absorbed)  # (B, H, T, T)
    assert gap.max() > 0.1
    np.testing.assert_allclose(gap[..., np.arange(6), np.arange(6)], 0.0, atol=1e-12)


@pytest.mark.parametrize("step, window, sinks", [(0, 4, 0), (3, 4, 1), (9, 4, 1),
                                                 (15, 8, 2), (15, 6, 0)])
def test_the_cache_state_holds_exactly_the_visible_positions(step, window, sinks):
    state = cache_state(step, window, sinks)
    held = set(state.slots[state.slots >= 0].tolist())
    visible = {p for p in range(step + 1) if step - p < window or p < sinks}
    assert held == visible
    assert set(np.flatnonzero(np.isin(state.status, (KEPT, SINK)))) == visible
    assert (state.status[step + 1:] == NOT_YET).all()
    assert (state.status[:step + 1] == EVICTED).sum() == step + 1 - len(visible)
    assert set(np.flatnonzero(state.status == SINK)) == {p for p in visible if p < sinks}


@pytest.mark.parametrize("call, name", [
    (lambda: scheme_config("rope", 0), "n_kv_heads"),
    (lambda: count_rotations(0, rng=np.random.default_rng(0)), "seq_len"),
    (lambda: cache_state(3, 0, 0), "window"),
    (lambda: influence(0, 1, 4, rng=np.random.default_rng(0)), "window"),
    (lambda: step_macs(TIMING_CONFIG, 0.5, cached=True), "seq_len"),
    (lambda: cache_state(16, 4, 0), "step"),
    (lambda: cache_state(3, 4, -1), "sinks"),
    (lambda: forward_with_mask(_model("rope")[1], _model("rope")[2], _model("rope")[0],
                               band_mask(5)), "mask"),
])
def test_bad_arguments_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.slow
def test_the_trained_toy_has_no_sink_and_one_sink_does_not_change_its_accuracy():
    from attnlab.experiments.what_heads_capture import trained_model

    params = trained_model(0).params
    batch = sink_batch()
    sink = first_position_weight(params, SINK_CONFIG, batch.tokens)
    assert sink.weight.max() < 0.15 and sink.weight[1].max() < sink.uniform
    window = window_accuracy(params, SINK_CONFIG, batch, window=SINK_WINDOW)
    one_sink = window_accuracy(params, SINK_CONFIG, batch, window=SINK_WINDOW, sinks=1)
    assert abs(one_sink - window) < 0.03
    assert window < window_accuracy(params, SINK_CONFIG, batch, window=None) - 0.1
