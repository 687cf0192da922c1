"""Chapter 10's experiment helpers: settings per method, accuracy beyond L, fine-tuning."""

import numpy as np
import pytest

from attnlab.experiments.length_generalization import (
    LENGTH_METHODS,
    TRAINED_KINDS,
    accuracy_from,
    evaluate_lengths,
    finetune_comparison,
    finetune_curve,
    length_config,
    method_config,
    train_kinds,
    train_short,
)
from attnlab.model import forward, init_params
from attnlab.tasks import PreviousToken
from attnlab.training import evaluate

TASK = PreviousToken(vocab_size=32)


def fresh(kind, seed=0, **kwargs):
    return init_params(length_config(kind, **kwargs), np.random.default_rng(seed))


def test_every_method_names_a_trained_kind():
    assert {kind for kind, _ in LENGTH_METHODS.values()} == set(TRAINED_KINDS)


@pytest.mark.parametrize("kind", list(TRAINED_KINDS))
def test_length_config_sets_table_and_yarn_length(kind):
    config = length_config(kind, 16)
    assert config.max_len == 64 and config.rope_original_max_len == 16
    assert config.positional == TRAINED_KINDS[kind]


def test_length_config_rejects_unknown_kind():
    with pytest.raises(ValueError, match="kind="):
        length_config("T5")


def test_method_config_stretches_rope_by_the_length_ratio():
    config = length_config("RoPE", 16)
    assert method_config(config, None, 16, 64) is config
    for scaling in ("pi", "ntk", "yarn"):
        stretched = method_config(config, scaling, 16, 64)
        assert stretched.rope_scale == 4.0 and stretched.rope_scaling == scaling
        assert stretched.rope_original_max_len == 16
    assert method_config(config, "yarn", 16, 16).rope_scale == 1.0


def test_method_config_errors_are_japanese():
    with pytest.raises(ValueError, match="RoPE のモデルにだけ"):
        method_config(length_config("ALiBi"), "pi", 16, 32)
    with pytest.raises(ValueError, match="eval_len=8"):
        method_config(length_config("RoPE"), "pi", 16, 8)
    with pytest.raises(ValueError, match="scaling"):
        method_config(length_config("RoPE"), "yarn_paper", 16, 32)
    band = {"beta_fast": 1.0, "beta_slow": 1 / 32}
    with pytest.raises(ValueError, match="band は YaRN の方法にだけ"):
        method_config(length_config("RoPE"), "ntk", 16, 32, band=band)
    # a band on a YaRN method reaches the model's RoPE
    assert method_config(length_config("RoPE"), "yarn_turns", 16, 32,
                         band=band).rope.beta_fast == 1.0


def test_accuracy_from_zero_is_the_models_accuracy():
    params, config = fresh("RoPE"), length_config("RoPE")
    batch = TASK(np.random.default_rng(1), 16, 32)
    assert accuracy_from(params, batch, config) == pytest.approx(evaluate(params, batch, config)[1])


def test_accuracy_from_counts_only_later_positions():
    params, config = fresh("学習（4L 行）"), length_config("学習（4L 行）")
    batch = TASK(np.random.default_rng(2), 16, 32)
    right = forward(params, batch.tokens, config).logits.argmax(-1) == batch.targets
    assert accuracy_from(params, batch, config, start=16) == pytest.approx(right[:, 16:].mean())
    with pytest.raises(ValueError, match="start=32"):
        accuracy_from(params, batch, config, start=32)
    with pytest.raises(ValueError, match="start="):
        accuracy_from(params, batch, config, start=-1)


def test_a_table_of_l_rows_cannot_run_past_l():
    config = length_config("学習（4L 行）", 16, table_factor=1)
    params = fresh("学習（4L 行）", table_factor=1)
    with pytest.raises(IndexError, match="max_len=16"):
        forward(params, TASK(np.random.default_rng(3), 2, 32).tokens, config)


def test_training_leaves_rows_past_l_untouched():
    config = length_config("学習（4L 行）", 16)
    rng = np.random.default_rng(4)
    run = train_short(config, TASK, rng=rng, steps=3)
    initial = init_params(config, np.random.default_rng(4).spawn(2)[0])
    np.testing.assert_array_equal(run.params["pos"][16:], initial["pos"][16:])
    assert not np.array_equal(run.params["pos"][:16], initial["pos"][:16])
    assert run.seconds > 0 and 0 <= run.final_accuracy <= 1


def test_evaluate_lengths_gives_every_method_at_every_length():
    runs = {kind: fresh(kind, seed) for seed, kind in enumerate(TRAINED_KINDS)}
    accuracy = evaluate_lengths(runs, TASK, rng=np.random.default_rng(5), rows=8)
    assert list(accuracy) == list(LENGTH_METHODS)
    for values in accuracy.values():
        assert values.shape == (3,) and np.all((values >= 0) & (values <= 1))
    # at the training length every RoPE method is the same model
    at_l = {accuracy[m][0] for m in ("RoPE 外挿", "RoPE+PI", "RoPE+NTK", "RoPE+YaRN")}
    assert len(at_l) == 1
    with pytest.raises(ValueError, match="ALiBi"):
        evaluate_lengths({k: v for k, v in runs.items() if k != "ALiBi"}, TASK,
                         rng=np.random.default_rng(5), rows=8)


def test_finetune_curve_starts_from_the_given_model():
    params, config = fresh("RoPE"), length_config("RoPE")
    batch = TASK(np.random.default_rng(6), 16, 32)
    curve = finetune_curve(params, config, TASK, rng=np.random.default_rng(7),
                           eval_batch=batch, steps=3, marks=(0, 3))
    assert curve.shape == (2,)
    assert curve[0] == pytest.approx(accuracy_from(params, batch, config, start=16))
    with pytest.raises(ValueError, match="marks"):
        finetune_curve(params, config, TASK, rng=np.random.default_rng(7), eval_batch=batch,
                       steps=3, marks=(0, 5))


def test_position_accuracy_averages_each_position_over_rows():
    from attnlab.experiments.length_generalization import position_accuracy

    params, config = fresh("RoPE"), length_config("RoPE")
    batch = TASK(np.random.default_rng(8), 16, 32)
    by_position = position_accuracy(params, batch, config)  # (T,)
    assert by_position.shape == (32,) and np.isnan(by_position[0])
    assert np.nanmean(by_position[16:]) == pytest.approx(
        accuracy_from(params, batch, config, start=16))


def test_train_kinds_gives_each_kind_its_own_stream():
    # a kind's run is the one train_short makes from that kind's spawned stream (a few
    # steps: the streams, not the training, are under test)
    task = PreviousToken()
    runs = train_kinds(3, task, steps=5)
    stream = np.random.default_rng(3).spawn(len(runs))[3]  # the fourth kind: RoPE
    alone = train_short(length_config("RoPE"), task, rng=stream, steps=5)
    for name, value in alone.params.items():
        np.testing.assert_array_equal(runs["RoPE"].params[name], value)


def test_finetune_comparison_names_the_lengths_it_knows():
    with pytest.raises(ValueError, match="factor=3"):
        finetune_comparison({}, PreviousToken(), (3,))


@pytest.mark.parametrize("factors", [4, ()])
def test_finetune_comparison_wants_a_sequence_of_factors(factors):
    with pytest.raises(ValueError, match=f"factors={factors!r}"):
        finetune_comparison({}, PreviousToken(), factors)


def test_the_ablations_run_on_the_same_batches_as_the_study():
    from attnlab.experiments.length_generalization import LENGTH_ABLATIONS

    runs = {kind: fresh(kind, seed) for seed, kind in enumerate(TRAINED_KINDS)}
    study = evaluate_lengths(runs, TASK, rng=np.random.default_rng(9), rows=8)
    ablated = evaluate_lengths(runs, TASK, rng=np.random.default_rng(9), rows=8,
                               methods={**LENGTH_ABLATIONS, "again": ("RoPE", "yarn")})
    assert list(ablated) == [*LENGTH_ABLATIONS, "again"]
    np.testing.assert_array_equal(ablated["again"], study["RoPE+YaRN"])  # same batches
    assert ablated["YaRN（論文のランプ）"][0] == study["RoPE+YaRN"][0]  # at L: all the same


def test_the_toy_head_is_where_yarn_leaves_pair_0_alone():
    # Dh = 8, L = 16: YaRN's reference ramp keeps pair 0 (2.5 turns) and interpolates the
    # rest like PI; the paper's ramp interpolates pair 0 as well (γ = 0.05)
    from attnlab.positional import rope_inv_freq

    theta = rope_inv_freq(8)
    for s in (2.0, 4.0):
        yarn = method_config(length_config("RoPE"), "yarn", 16, int(16 * s)).rope
        np.testing.assert_allclose(yarn.inv_freq(8) / theta, [1, 1 / s, 1 / s, 1 / s])
        paper = method_config(length_config("RoPE"), "yarn_turns", 16, int(16 * s)).rope
        assert paper.inv_freq(8)[0] < 0.6 and paper.attention_factor == yarn.attention_factor
        no_temp = method_config(length_config("RoPE"), "yarn_no_temp", 16, int(16 * s)).rope
        assert no_temp.attention_factor == 1.0
        np.testing.assert_array_equal(no_temp.inv_freq(8), yarn.inv_freq(8))


def test_evaluation_batches_are_the_batches_of_evaluate_lengths():
    from attnlab.experiments.length_generalization import evaluation_batches

    runs = {kind: fresh(kind, seed) for seed, kind in enumerate(TRAINED_KINDS)}
    study = evaluate_lengths(runs, TASK, rng=np.random.default_rng(10), rows=8)
    batches = evaluation_batches(TASK, np.random.default_rng(10), rows=8)
    assert [b.tokens.shape for b in batches] == [(8, 16), (8, 32), (8, 64)]
    config = length_config("ALiBi")
    again = [accuracy_from(runs["ALiBi"], b, config, start=0 if i == 0 else 16)
             for i, b in enumerate(batches)]
    np.testing.assert_array_equal(again, study["ALiBi"])


def test_train_study_is_train_kinds_for_every_seed_on_two_processes():
    # the runs shared among two fresh processes: bit for bit the runs of train_kinds
    from attnlab.experiments.length_generalization import train_study

    task = PreviousToken()
    shared = train_study((0, 1), task, steps=2, workers=2)
    assert list(shared) == [0, 1] and list(shared[1]) == list(TRAINED_KINDS)
    for seed in (0, 1):
        alone = train_kinds(seed, task, steps=2)
        for kind in TRAINED_KINDS:
            for name, value in alone[kind].params.items():
                np.testing.assert_array_equal(shared[seed][kind].params[name], value)


def test_evaluate_study_is_evaluate_lengths_for_every_seed_on_two_threads():
    # every (seed, method) on two threads, each drawing its seed's batches anew: bit for
    # bit evaluate_lengths of one seed after the other; the ablations too
    from attnlab.experiments.length_generalization import (
        LENGTH_ABLATIONS,
        LENGTH_EVAL_SEED_OFFSET,
        evaluate_study,
    )

    runs = {seed: {kind: fresh(kind, seed + i) for i, kind in enumerate(TRAINED_KINDS)}
            for seed in (0, 1)}
    for methods in (None, LENGTH_ABLATIONS):
        shared = evaluate_study(runs, TASK, methods=methods, rows=8, workers=2)
        assert list(shared) == [0, 1]
        for seed in (0, 1):
            alone = evaluate_lengths(
                runs[seed], TASK, methods=methods, rows=8,
                rng=np.random.default_rng(LENGTH_EVAL_SEED_OFFSET + seed))
            assert list(shared[seed]) == list(alone)
            for method, values in alone.items():
                np.testing.assert_array_equal(shared[seed][method], values)
    with pytest.raises(ValueError, match=r"runs\[0\] に 'ALiBi'"):
        evaluate_study({0: {k: v for k, v in runs[0].items() if k != "ALiBi"}}, TASK)
    with pytest.raises(ValueError, match="rows=0"):  # before any process starts
        evaluate_study(runs, TASK, rows=0)



def test_position_study_is_position_accuracy_for_every_seed_and_method_on_two_threads():
    # every (seed, method) on two threads: bit for bit position_accuracy of one after the
    # other, each method in its setting at the batch's length (PI differs from RoPE there)
    from attnlab.experiments.length_generalization import (
        method_config,
        position_accuracy,
        position_study,
    )

    runs = {seed: {kind: fresh(kind, seed + i) for i, kind in enumerate(TRAINED_KINDS)}
            for seed in (0, 1)}
    batches = {seed: TASK(np.random.default_rng(20 + seed), 8, 64) for seed in (0, 1)}
    shared = position_study(runs, batches, workers=2)
    assert list(shared) == list(LENGTH_METHODS)
    for method, (kind, scaling) in LENGTH_METHODS.items():
        config = method_config(length_config(kind), scaling, 16, 64)
        alone = np.stack([position_accuracy(runs[seed][kind], batches[seed], config)
                          for seed in (0, 1)])  # (seeds, T)
        assert shared[method].shape == (2, 64)
        np.testing.assert_array_equal(shared[method], alone)
    # position 0 is NaN (never scored) in both: compare the scored positions
    assert not np.array_equal(shared["RoPE+PI"][:, 1:], shared["RoPE 外挿"][:, 1:])
    with pytest.raises(ValueError, match="runs が空"):
        position_study({}, {})
    with pytest.raises(ValueError, match=r"シード \[1\]"):
        position_study(runs, {0: batches[0]})
    with pytest.raises(ValueError, match="系列長"):
        position_study(runs, {0: batches[0], 1: TASK(np.random.default_rng(3), 8, 32)})
    with pytest.raises(ValueError, match=r"runs\[0\] に 'ALiBi'"):
        position_study({0: {k: v for k, v in runs[0].items() if k != "ALiBi"}},
                       {0: batches[0]})


def test_finetune_settings_end_at_their_last_mark():
    from attnlab.experiments.length_generalization import FINETUNE_MARKS, FINETUNE_SETTINGS

    assert FINETUNE_SETTINGS[4]["marks"] == FINETUNE_MARKS
    for setting in FINETUNE_SETTINGS.values():
        marks = setting["marks"]
        assert marks[0] == 0 and list(marks) == sorted(set(marks))


def test_finetune_comparison_of_two_factors_is_each_factor_alone_bit_for_bit(monkeypatch):
    # both lengths' fine-tunes in one call on two fresh processes, and one after the
    # other; short settings (the settings travel with every call to the processes)
    from types import SimpleNamespace

    from attnlab.experiments import length_generalization as chapter

    short = {factor: dict(setting, marks=(0, 1, 3), eval_rows=8, batch_size=4)
             for factor, setting in chapter.FINETUNE_SETTINGS.items()}
    monkeypatch.setattr(chapter, "FINETUNE_SETTINGS", short)
    task = PreviousToken()
    runs = {seed: {"RoPE": SimpleNamespace(params=fresh("RoPE", seed))} for seed in (0, 1)}
    shared = chapter.finetune_comparison(runs, task, (4, 2), workers=2)
    assert list(shared) == [4, 2]
    for factor in (4, 2):
        alone = chapter.finetune_comparison(runs, task, (factor,), workers=1)[factor]
        assert list(shared[factor]) == list(alone) == ["RoPE 外挿", "RoPE+PI"]
        for name, curves in alone.items():
            assert curves.shape == (2, 3)
            np.testing.assert_array_equal(shared[factor][name], curves)
