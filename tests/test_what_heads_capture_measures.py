"""Chapter 04's measurements of what heads do and cost: copying, Michel et al.'s importance,
greedy pruning, and the costs of decoding with shared K/V heads."""

import numpy as np
import pytest

from attnlab.costs import (
    decode_attention_cost,
    decode_step_reads,
    kv_cache_bytes,
    llama_param_count,
    mha_cost,
)
from attnlab.experiments.what_heads_capture import (
    CONFIG,
    copying_score,
    eval_batch,
    greedy_pruning_curve,
    head_importance,
    head_scores,
    mask_gradients,
    one_side_induction,
    seed_studies,
    trained_model,
)
from attnlab.model import ModelConfig, init_params
from attnlab.tasks import Batch, RepeatedSequence
from attnlab.training import ablation_losses, evaluate, pruning_curve

SMALL = ModelConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=2, max_len=8,
                    dtype="float64")
SMALL_TASK = RepeatedSequence(vocab_size=8, min_period=2, max_period=4)


def _w_o_block_scaled(params, config, layer, head, factor):
    scaled = dict(params)
    w_o = params[f"layers.{layer}.w_o"].copy()
    Dh = config.d_head
    w_o[head * Dh:(head + 1) * Dh] *= factor  # the rows head `head` writes through
    scaled[f"layers.{layer}.w_o"] = w_o
    return scaled


def test_switching_a_head_off_is_zeroing_its_rows_of_w_o():
    params = init_params(SMALL, np.random.default_rng(0))
    batch = SMALL_TASK(np.random.default_rng(1), 4, 8)
    for layer, head in [(0, 1), (1, 0)]:
        off = evaluate(params, batch, SMALL, ablate=[(layer, head)])[0]
        zeroed = evaluate(_w_o_block_scaled(params, SMALL, layer, head, 0.0), batch, SMALL)[0]
        assert off == pytest.approx(zeroed, abs=1e-12)


def test_mask_gradients_are_the_slope_of_the_loss_in_the_head_factor():
    params = init_params(SMALL, np.random.default_rng(2))
    batch = SMALL_TASK(np.random.default_rng(3), 4, 8)
    slopes = mask_gradients(params, batch, SMALL)
    assert slopes.shape == (2, 2)
    eps = 1e-5
    for layer, head in np.ndindex(2, 2):
        up = evaluate(_w_o_block_scaled(params, SMALL, layer, head, 1 + eps), batch, SMALL)[0]
        down = evaluate(_w_o_block_scaled(params, SMALL, layer, head, 1 - eps), batch, SMALL)[0]
        assert slopes[layer, head] == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-9)


def test_head_importance_is_the_mean_absolute_slope_normalised_per_layer():
    params = trained_model(0).params
    batch = Batch(*(part[:6] for part in eval_batch()))
    raw = head_importance(params, batch, normalize=False)
    per_row = [np.abs(mask_gradients(params, Batch(*(p[b:b + 1] for p in batch))))
               for b in range(6)]
    np.testing.assert_allclose(raw, np.mean(per_row, axis=0), rtol=1e-6)
    normalised = head_importance(params, batch)
    np.testing.assert_allclose(np.linalg.norm(normalised, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(normalised * np.linalg.norm(raw, axis=1, keepdims=True), raw,
                               rtol=1e-6)


def test_greedy_pruning_removes_the_cheapest_head_given_those_already_off():
    params = trained_model(0).params
    batch = Batch(*(part[:32] for part in eval_batch()))
    curve = greedy_pruning_curve(params, batch)
    every = [(layer, head) for layer in range(CONFIG.n_layers) for head in range(CONFIG.n_heads)]
    assert sorted(curve.order) == every and len(curve.loss) == len(every) + 1
    first = np.unravel_index(np.argmin(ablation_losses(params, batch, CONFIG)), (2, 4))
    assert curve.order[0] == tuple(int(i) for i in first)  # step 1: the single-head ranking
    second = {pair: evaluate(params, batch, CONFIG, ablate=[curve.order[0], pair])[0]
              for pair in every if pair != curve.order[0]}
    assert curve.order[1] == min(second, key=second.get)  # step 2: re-measured
    assert curve.loss[1] == pytest.approx(evaluate(params, batch, CONFIG,
                                                   ablate=curve.order[:1])[0])


def test_the_trained_induction_heads_copy_what_they_read_and_need_layer_0():
    params = trained_model(0).params
    copying = copying_score(params)
    assert copying.shape == (CONFIG.n_heads,) and np.all(copying > 0.85)
    prev = [(0, h) for h in range(CONFIG.n_heads)
            if head_scores(params).previous_early[0, h] >= 0.9]
    silenced = head_scores(params, ablate=prev).induction[1]
    assert np.all(silenced < 0.5)  # without the previous-token heads no prefix matching
    with pytest.raises(ValueError, match="最後の層"):
        copying_score(params, layer=0)


def test_one_side_induction_removing_nothing_is_the_models_own_layer_1():
    params = init_params(CONFIG, np.random.default_rng(3))
    own = head_scores(params).induction[1]  # (H,) from forward
    for side in ("key", "query"):
        np.testing.assert_allclose(one_side_induction(params, [], side), own, rtol=1e-5)


def test_one_side_induction_moves_only_with_the_side_that_loses_the_heads():
    # silencing a head's W_V columns zeroes its output: then removing it from either
    # side changes nothing, while removing a live head from the keys does
    params = init_params(CONFIG, np.random.default_rng(4))
    base = one_side_induction(params, [], "key")
    quiet = dict(params)
    w_v = params["layers.0.w_v"].copy()
    w_v[:, :CONFIG.d_head] = 0.0  # head 0 of layer 0 writes nothing
    quiet["layers.0.w_v"] = w_v
    for side in ("key", "query"):
        np.testing.assert_allclose(one_side_induction(quiet, [(0, 0)], side),
                                   one_side_induction(quiet, [], side), rtol=1e-6)
    assert not np.allclose(one_side_induction(params, [(0, 0), (0, 1)], "key"), base)


def test_the_trained_induction_heads_find_their_targets_through_their_keys():
    # K-composition: the previous-token heads taken out of layer 1's keys alone break
    # prefix matching; taken out of its queries alone they do not
    params = trained_model(0).params
    prev = [(0, h) for h in range(CONFIG.n_heads)
            if head_scores(params).previous_early[0, h] >= 0.9]
    assert np.all(one_side_induction(params, prev, "key") < 0.5)
    assert np.all(one_side_induction(params, prev, "query") > 0.8)


@pytest.mark.parametrize("heads, side, fragment", [
    ([(0, 0)], "value", "side='value'"),
    ([(1, 0)], "key", "層 0"),
])
def test_one_side_induction_rejects_bad_input_in_japanese(heads, side, fragment):
    params = init_params(CONFIG, np.random.default_rng(0))
    with pytest.raises(ValueError, match=fragment):
        one_side_induction(params, heads, side)


def test_an_untrained_model_copies_about_by_chance():
    params = init_params(CONFIG, np.random.default_rng(0))
    assert np.all(copying_score(params) < 0.3)


# --- costs -----------------------------------------------------------------------------------


def test_llama_param_counts_match_the_published_models():
    assert llama_param_count(32, 4096, 32, 32, 11008, 32000) == 6_738_415_616  # Llama 2 7B
    assert llama_param_count(80, 8192, 64, 8, 28672, 32000) == 68_976_648_192  # Llama 2 70B


@pytest.mark.parametrize("n_kv_heads", [16, 4, 1])
def test_decoding_reads_less_with_fewer_kv_heads_but_scores_as_much(n_kv_heads):
    mha = decode_attention_cost(6, 16, 16, 12, 100, batch_size=3)
    shared = decode_attention_cost(6, 16, n_kv_heads, 12, 100, batch_size=3)
    assert shared.flops == mha.flops
    assert shared.kv_bytes * 16 == mha.kv_bytes * n_kv_heads
    assert shared.kv_bytes == kv_cache_bytes(6, n_kv_heads, 12, 100, batch_size=3)
    assert shared.flops / shared.kv_bytes == pytest.approx(2 * 16 / (n_kv_heads * 2))


def test_decode_flops_are_one_query_row_of_the_prefill_count():
    # the scores and weighted sum of T queries over T keys, per query: the last row
    L, H, Dh, T = 3, 4, 8, 50
    full = mha_cost(H * Dh, H, T).flops
    per_query = (full["scores"] + full["weighted_sum"]) // T
    assert decode_attention_cost(L, H, H, Dh, T).flops == L * per_query


def test_a_sliding_window_caps_the_cache_at_the_window():
    # Mistral 7B v0.1: 32 layers, 8 K/V heads of 128, window 4096, rolling buffer
    capped = [kv_cache_bytes(32, 8, 128, t, sliding_window=4096) for t in (1000, 4096, 32768)]
    assert capped == [kv_cache_bytes(32, 8, 128, t) for t in (1000, 4096, 4096)]
    assert capped[-1] == 512 * 2**20  # 512 MiB, not the 4 GiB of 32768 tokens
    assert kv_cache_bytes(32, 8, 128, 32768, batch_size=3, sliding_window=4096) == 3 * capped[-1]
    windowed = decode_attention_cost(32, 32, 8, 128, 32768, sliding_window=4096)
    assert windowed == decode_attention_cost(32, 32, 8, 128, 4096)


def test_one_decode_step_reads_the_parameters_once_and_every_sequences_cache():
    n = 1_000
    for batch in (1, 4):
        reads = decode_step_reads(n, 2, 3, 8, 50, batch_size=batch)
        assert reads.params == 2 * n  # fp16, whatever the batch
        assert reads.kv_cache == kv_cache_bytes(2, 3, 8, 50, batch_size=batch)
        assert reads.total == reads.params + reads.kv_cache


def test_what_gqa_saves_per_step_depends_on_the_batch():
    # Llama 2 70B at 4096 tokens, fp16: -6 % at batch 1, 1.94x at batch 16
    n = llama_param_count(80, 8192, 64, 8, 28672, 32000)
    ratio = {b: decode_step_reads(n, 80, 64, 128, 4096, b).total
             / decode_step_reads(n, 80, 8, 128, 4096, b).total for b in (1, 16)}
    assert 1 - 1 / ratio[1] == pytest.approx(0.063, abs=0.001)
    assert ratio[16] == pytest.approx(1.94, abs=0.005)
    # each model with its own parameters: the MHA model has W_K, W_V for 64 heads
    n_mha = llama_param_count(80, 8192, 64, 64, 28672, 32000)
    assert (n_mha - n) * 2 == 17.5 * 2**30  # fp16: 17.5 GiB more W_K, W_V
    own = {b: decode_step_reads(n_mha, 80, 64, 128, 4096, b).total
           / decode_step_reads(n, 80, 8, 128, 4096, b).total for b in (1, 16)}
    assert 1 - 1 / own[1] == pytest.approx(0.168, abs=0.001)
    assert own[16] == pytest.approx(2.06, abs=0.005)


@pytest.mark.parametrize("call, fragment", [
    (lambda: kv_cache_bytes(2, 2, 8, 10, sliding_window=0), "sliding_window=0"),
    (lambda: kv_cache_bytes(2, 2, 8, 10, sliding_window=-4), "sliding_window=-4"),
    (lambda: kv_cache_bytes(2, 2, 8, 10, sliding_window=4096.0), "sliding_window=4096.0"),
    (lambda: kv_cache_bytes(2, 2, 8, 10, sliding_window=True), "sliding_window=True"),
    (lambda: decode_step_reads(0, 2, 2, 8, 10), "n_params=0"),
    (lambda: decode_attention_cost(2, 6, 4, 8, 10), "n_kv_heads"),
    (lambda: decode_attention_cost(2, 4, 4, 8, 0), "seq_len=0"),
    (lambda: llama_param_count(2, 10, 3, 3, 8, 8), "割り切れません"),
    (lambda: llama_param_count(2, 8, 2, 2, 8, 0), "vocab_size=0"),
])
def test_bad_cost_input_gets_a_japanese_error_naming_the_value(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_seed_studies_on_two_processes_are_the_five_functions_bit_for_bit(monkeypatch):
    # runs made up for two seeds not in SEEDS (a few untrained snapshots: no training
    # here); the fresh processes receive them and must measure exactly as in order
    from attnlab.experiments import what_heads_capture as chapter

    runs = {}
    for seed in (7, 8):
        snapshots = tuple(init_params(CONFIG, np.random.default_rng([seed, k]))
                          for k in range(3))
        runs[seed] = chapter.TrainedModel(snapshots[-1], snapshots[0], np.zeros(2),
                                          np.zeros(2), np.array([0, 5, 10]), snapshots)
    monkeypatch.setattr(chapter, "_TRAINED", dict(runs))
    monkeypatch.setattr(chapter, "_UPTRAINED", {})
    shared = seed_studies([8, 7, 8], workers=2)
    assert list(shared) == [8, 7] and shared[8] is shared[8]
    assert chapter.uptrained(7, 1, "first") is shared[7].uptrained[1, "first"]  # cached
    monkeypatch.setattr(chapter, "_UPTRAINED", {})  # made again below, in this process
    batch = eval_batch()
    for seed, run in runs.items():
        study = shared[seed]
        alone = (chapter.emergence(seed), pruning_curve(run.params, batch, CONFIG),
                 greedy_pruning_curve(run.params, batch),
                 chapter.importance_pruning_curve(run.params, batch))
        for got, want in zip(study[1:5], alone, strict=True):
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(study.ablation,
                                      ablation_losses(run.params, batch, CONFIG))
        assert sorted(study.uptrained) == sorted(
            [(2, "mean")] + [(1, how) for how in chapter.POOLINGS])
        for (n_kv, how), (config, params) in study.uptrained.items():
            want_config, want = chapter.uptrained(seed, n_kv, how)
            assert config == want_config
            for name, value in want.items():
                np.testing.assert_array_equal(params[name], value)
        for name, value in run.params.items():
            np.testing.assert_array_equal(study.run.params[name], value)
