"""train()'s keyword arguments for chapter 04: callback= and init_params= (added, not changed)."""

import numpy as np
import pytest

from attnlab.experiments.what_heads_capture import (
    CONFIG,
    PRESETS,
    Preset,
    format_bytes,
    kv_cost,
    kv_divisors,
    pooled_params,
)
from attnlab.model import ModelConfig, init_params
from attnlab.tasks import RepeatedSequence
from attnlab.training import evaluate, train

SMALL = ModelConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=2, max_len=8)
TASK = RepeatedSequence(vocab_size=8, min_period=2, max_period=4)


def run(**kwargs):
    return train(SMALL, TASK, steps=6, batch_size=4, seq_len=8,
                 rng=np.random.default_rng(3), **kwargs)


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_defaults_behave_as_before():
    plain, explicit = run(), run(init_params=None, callback=None)
    assert same(plain.params, explicit.params)
    np.testing.assert_array_equal(plain.loss, explicit.loss)
    assert len(plain) == 4  # TrainResult keeps its four fields


def test_callback_sees_every_step_and_changes_nothing():
    seen = {}
    recorded = run(callback=lambda step, params: seen.setdefault(
        step, {k: v.copy() for k, v in params.items()}))
    plain = run()
    assert sorted(seen) == list(range(7))  # before the first update, then after each
    assert same(seen[0], recorded.initial)
    assert same(seen[6], recorded.params)
    assert same(recorded.params, plain.params)
    np.testing.assert_array_equal(recorded.loss, plain.loss)


def test_init_params_with_the_same_rng_repeats_the_run():
    first = run()
    again = run(init_params=first.initial)
    assert same(again.params, first.params)
    assert same(again.initial, first.initial)


def test_init_params_are_copied_not_changed():
    start = init_params(SMALL, np.random.default_rng(0))
    kept = {k: v.copy() for k, v in start.items()}
    result = run(init_params=start)
    assert same(start, kept)
    assert not same(result.params, start)


def test_init_params_is_checked_against_the_config():
    start = init_params(SMALL, np.random.default_rng(0))
    del start["unembed"]
    with pytest.raises(ValueError, match="unembed"):
        run(init_params=start)
    with pytest.raises(ValueError, match="callback"):
        run(callback="every step")


def test_uptraining_a_pooled_model_lowers_its_loss():
    base = train(SMALL, TASK, steps=40, batch_size=16, seq_len=8,
                 rng=np.random.default_rng(1))
    config = ModelConfig(**{**SMALL.__dict__, "n_kv_heads": 1})
    pooled = dict(base.params)
    for key in [k for k in pooled if k.endswith(("w_k", "w_v"))]:
        pooled[key] = pooled[key].reshape(8, 1, 2, 4).mean(axis=2).reshape(8, 4)
    batch = TASK(np.random.default_rng(9), 64, 8)
    before = evaluate(pooled, batch, config)[0]
    up = train(config, TASK, steps=20, batch_size=16, seq_len=8,
               rng=np.random.default_rng(2), init_params=pooled)
    assert up.params["layers.0.w_k"].shape == (8, 4)
    assert evaluate(up.params, batch, config)[0] < before


def test_pooled_params_keeps_mha_and_shrinks_kv():
    params = init_params(CONFIG, np.random.default_rng(0))
    config, same_params = pooled_params(params, CONFIG.n_heads)
    assert config == CONFIG and same(same_params, params)
    config, mqa = pooled_params(params, 1)
    assert config.n_kv_heads == 1 and mqa["layers.1.w_v"].shape == (64, 16)
    np.testing.assert_array_equal(mqa["layers.1.w_q"], params["layers.1.w_q"])


def test_the_first_head_control_keeps_each_groups_first_kv_head():
    params = init_params(CONFIG, np.random.default_rng(0))
    _, first = pooled_params(params, 2, "first")  # groups (0, 1) and (2, 3)
    Dh = CONFIG.d_head
    for name in ("layers.0.w_k", "layers.1.w_v"):
        np.testing.assert_array_equal(first[name][:, :Dh], params[name][:, :Dh])
        np.testing.assert_array_equal(first[name][:, Dh:], params[name][:, 2 * Dh:3 * Dh])


def test_the_random_control_redraws_only_k_and_v():
    params = init_params(CONFIG, np.random.default_rng(0))
    _, mean = pooled_params(params, 1)
    _, fresh = pooled_params(params, 1, "random")
    for name in ("embed", "pos", "unembed", "layers.0.w_q", "layers.1.w_o"):
        np.testing.assert_array_equal(fresh[name], params[name])
    assert fresh["layers.0.w_k"].shape == mean["layers.0.w_k"].shape
    assert not np.allclose(fresh["layers.0.w_k"], mean["layers.0.w_k"])
    with pytest.raises(ValueError, match="how='median'"):
        pooled_params(params, 1, "median")


def test_mistral_v01s_window_stops_the_cache_at_4096_tokens():
    mistral = PRESETS["Mistral 7B v0.1"]
    assert mistral.sliding_window == 4096
    assert kv_cost(mistral, 8, 32768).total_bytes == 512 * 2**20
    assert kv_cost(mistral, 8, 32768, window=False).total_bytes == 4 * 2**30
    short = kv_cost(mistral, 8, 1000), kv_cost(mistral, 8, 1000, window=False)
    assert short[0].total_bytes == short[1].total_bytes


def test_kv_cost_of_the_published_configurations():
    llama70 = PRESETS["Llama 2 70B"]
    assert kv_cost(llama70, 8, 4096).total_bytes == 1.25 * 2**30
    assert kv_cost(PRESETS["Llama 2 7B"], 32, 1).bytes_per_token == 512 * 1024
    assert kv_cost(llama70, 8, 1).kv_params == 2 * 80 * 8192 * 8 * 128
    assert format_bytes(1.25 * 2**30) == "1.25 GiB" and format_bytes(512) == "512 B"
    with pytest.raises(ValueError, match="約数"):
        kv_cost(Preset(2, 4, 4, 16), 3, 8)


def test_kv_divisors_run_from_mha_to_mqa():
    assert kv_divisors(64) == [64, 32, 16, 8, 4, 2, 1]
    assert kv_divisors(4) == [4, 2, 1]
