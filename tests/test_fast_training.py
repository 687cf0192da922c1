"""The fast training step (attnlab.fast_training) against the readable model
(attnlab.model): the same loss, gradients and accuracy for every step ``train`` can take,
every field of ModelConfig set away from its default (each such setting changes the
readable model), and 1, 2 and 3 layers (a block that is neither first nor last has a
branch of its own in the fast backward pass), and train(step="readable") runs the code of
attnlab.model. Also: the model runs on one BLAS thread only inside its calls, only train
changes how the process allocates memory (for either step), and the repeated-sequence
task is the row-by-row batch.

Tolerances: float64 agrees to rtol 1e-9 (the two paths add the same terms in another
order); float32 to rtol 2e-3 on the gradients with an absolute floor of 1e-4 times the
largest entry of any gradient (a sum of many terms loses digits where terms cancel).
With scores hundreds apart (sharp heads), a rounding of a score moves a weight by that
much more: there float64 agrees to 1e-7 and float32 to a floor of 1e-3.
"""

import dataclasses
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from attnlab import fast_training
from attnlab import model as model_module
from attnlab.fast_training import _heads, _norm_bound, _rope_tables, _rotate, _softmax_rows
from attnlab.model import (
    POSITIONAL,
    ModelConfig,
    forward,
    init_params,
    loss_grads_accuracy,
)
from attnlab.positional import ROPE_SCALINGS, RoPE
from attnlab.tasks import Batch, PreviousToken, RepeatedSequence, TwoPositions
from attnlab.training import STEPS, Adam, _training_step, train

#: The steps compared with the readable model: every step train() can take but that one.
OTHER_STEPS = [step for step in STEPS if step != "readable"]
LAYERS = [1, 2, 3]  # first and last block in one; first and last; and a middle block

SETTINGS = list(itertools.product(POSITIONAL, (True, False), (None, 2, 1),
                                  ("float64", "float32")))


def setting_id(setting) -> str:
    positional, causal, n_kv_heads, dtype = setting
    kv = "mha" if n_kv_heads is None else f"kv{n_kv_heads}"
    return f"{positional}-{'causal' if causal else 'full'}-{kv}-{dtype}"


def batch_for(config: ModelConfig, seed: int = 0, B: int = 3, T: int = 6) -> Batch:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, config.vocab_size, (B, T))
    targets = rng.integers(0, config.vocab_size, (B, T))
    loss_mask = rng.random((B, T)) < 0.7
    loss_mask[0, 0] = True
    return Batch(tokens, targets, loss_mask)


def assert_same_step(config: ModelConfig, params: dict, batch: Batch, ablate=None,
                     sharp: bool = False, step: str = "fast"):
    """``step``'s loss, gradients and accuracy are the readable model's."""
    want = loss_grads_accuracy(params, batch, config, ablate=ablate)
    got = _training_step(step)(params, batch, config, ablate=ablate)
    wide = config.dtype == "float64"
    rtol = (1e-7 if sharp else 1e-9) if wide else 2e-3
    assert got[0] == pytest.approx(want[0], rel=rtol if wide else 1e-5)
    assert got[2] == want[2]
    assert list(got[1]) == list(want[1]) == list(params)
    largest = max(np.abs(grad).max() for grad in want[1].values())
    for name, grad in want[1].items():
        assert got[1][name].dtype == grad.dtype == params[name].dtype
        floor = (rtol if wide else 1e-3 if sharp else 1e-4) * largest
        np.testing.assert_allclose(got[1][name], grad, rtol=rtol, atol=floor, err_msg=name)


# --- every field of ModelConfig, generated ----------------------------------------------------

#: The config every field is varied from (float64, so the tolerance is rtol 1e-9).
BASE = dict(vocab_size=7, d_model=16, n_heads=4, max_len=8, dtype="float64")

#: For every field of ModelConfig, valid values away from BASE and the defaults, each with
#: the other fields it needs to matter (a RoPE setting needs positional="rope"). A field
#: added to ModelConfig without an entry here fails test_every_config_field_is_compared.
#: n_layers is varied by LAYERS for every entry.
NON_DEFAULT = {
    "vocab_size": [dict(vocab_size=11)],
    "d_model": [dict(d_model=24)],
    "n_heads": [dict(n_heads=2), dict(n_heads=8, positional="rope")],
    "n_layers": [dict()],
    "max_len": [dict(max_len=12)],
    "positional": [dict(positional=p) for p in POSITIONAL if p != "learned"],
    "n_kv_heads": [dict(n_kv_heads=2), dict(n_kv_heads=1, positional="rope")],
    "causal": [dict(causal=False), dict(causal=False, positional="alibi")],
    "rope_base": [dict(positional="rope", rope_base=500.0)],
    "rope_scale": [dict(positional="rope", rope_scale=3.0)],
    "dtype": [dict(dtype="float32"), dict(dtype="float32", positional="rope", n_kv_heads=2)],
    "rope_scaling": [dict(positional="rope", rope_scaling=scaling, rope_scale=2.0)
                     for scaling in ROPE_SCALINGS if scaling != "pi"],
    # d_head 8: with max_len 8 (the default's stand-in) and 64, YaRN turns pair 1 at
    # another frequency (with d_head 4 the two lengths gave the same frequencies)
    "rope_original_max_len": [dict(positional="rope", n_heads=2, rope_scaling="yarn",
                                   rope_scale=4.0, rope_original_max_len=64)],
    "t5_n_buckets": [dict(positional="t5", t5_n_buckets=8),
                     dict(positional="t5", t5_n_buckets=6, causal=False)],
    "t5_max_distance": [dict(positional="t5", t5_n_buckets=4, t5_max_distance=5)],
}
FIELD_CASES = [(name, variant) for name, variants in NON_DEFAULT.items()
               for variant in variants]


def test_every_config_field_is_compared():
    """A new field of ModelConfig needs an entry in NON_DEFAULT (and the fast path may need
    to learn it): the parity test would not vary it otherwise."""
    fields = [field.name for field in dataclasses.fields(ModelConfig)]
    missing = set(fields) - set(NON_DEFAULT)
    assert not missing, f"ModelConfig の {sorted(missing)} に NON_DEFAULT の値がありません"
    assert set(NON_DEFAULT) <= set(fields), set(NON_DEFAULT) - set(fields)
    assert "readable" in STEPS and OTHER_STEPS


@pytest.mark.parametrize("field, variant", FIELD_CASES,
                         ids=[f"{name}-{'-'.join(map(str, v.values())) or 'layers'}"
                              for name, v in FIELD_CASES])
def test_every_field_moves_away_from_its_default(field, variant):
    """Each entry of NON_DEFAULT is valid and changes its field (from BASE's value or the
    field's default), so the parity test below runs a setting the others do not."""
    base = ModelConfig(**BASE, n_layers=1)
    config = ModelConfig(**{**BASE, "n_layers": 2 if field == "n_layers" else 1, **variant})
    assert getattr(config, field) != getattr(base, field)


def with_field_reset(field: str, variant: dict) -> tuple[ModelConfig, ModelConfig]:
    """The config of a NON_DEFAULT entry, and the same config with ``field`` set back to
    BASE's value or the field's default (n_layers: 2 and 1)."""
    if field == "n_layers":
        return (ModelConfig(**{**BASE, **variant, "n_layers": 2}),
                ModelConfig(**{**BASE, **variant, "n_layers": 1}))
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    config = {**BASE, "n_layers": 1, **variant}
    return (ModelConfig(**config),
            ModelConfig(**{**config, field: BASE.get(field, defaults[field])}))


@pytest.mark.parametrize("field, variant", FIELD_CASES,
                         ids=[f"{name}-{'-'.join(map(str, v.values())) or 'layers'}"
                              for name, v in FIELD_CASES])
def test_every_field_changes_what_the_readable_model_computes(field, variant):
    """Each entry of NON_DEFAULT changes the readable model itself, not only the field: a
    fast step that ignored the field would fail the parity test. Where the field changes
    the parameters' shapes or precision (vocab_size, d_model, n_kv_heads, n_layers,
    max_len, positional against the learned table, dtype), that is the change: the
    parity test compares every gradient's shape and dtype. Otherwise the same parameters
    give another readable loss on the same batch. (A field the model reads only in some
    settings, as rope_original_max_len, can be set away from its default and change
    nothing: this test names such an entry.)"""
    config, reset = with_field_reset(field, variant)
    params = init_params(config, np.random.default_rng(1))
    params_reset = init_params(reset, np.random.default_rng(1))
    if {name: (value.shape, value.dtype) for name, value in params.items()} != {
            name: (value.shape, value.dtype) for name, value in params_reset.items()}:
        return
    batch = batch_for(config, T=7)
    loss = loss_grads_accuracy(params, batch, config)[0]
    loss_reset = loss_grads_accuracy(params, batch, reset)[0]
    assert loss != loss_reset, f"{field}: {variant} の読める損失が {reset} と同じです"


@pytest.mark.parametrize("step", OTHER_STEPS)
@pytest.mark.parametrize("n_layers", LAYERS)
@pytest.mark.parametrize("field, variant", FIELD_CASES,
                         ids=[f"{name}-{'-'.join(map(str, v.values())) or 'layers'}"
                              for name, v in FIELD_CASES])
def test_every_step_is_the_readable_step_for_every_config_field(field, variant, n_layers,
                                                                 step):
    config = ModelConfig(**{**BASE, "n_layers": n_layers, **variant})
    params = init_params(config, np.random.default_rng(1))
    T = 6 if config.positional == "learned" else 7
    assert_same_step(config, params, batch_for(config, T=T), step=step)


@pytest.mark.parametrize("step", OTHER_STEPS)
@pytest.mark.parametrize("setting", SETTINGS, ids=setting_id)
@pytest.mark.parametrize("n_layers", LAYERS)
def test_the_fast_step_is_the_readable_step(setting, n_layers, step):
    """The fields that change the path most, together: every position scheme, causal or
    not, MHA, GQA and MQA, float64 and float32."""
    positional, causal, n_kv_heads, dtype = setting
    config = ModelConfig(vocab_size=7, d_model=16, n_heads=4, n_layers=n_layers, max_len=8,
                         positional=positional, causal=causal, n_kv_heads=n_kv_heads,
                         dtype=dtype)
    params = init_params(config, np.random.default_rng(1))
    assert_same_step(config, params, batch_for(config), step=step)


@pytest.mark.parametrize("ablate", [[(0, 1)], [(1, 3), (1, 0)], [(0, 0), (0, 1), (0, 2), (0, 3)]],
                         ids=str)
@pytest.mark.parametrize("positional", ["learned", "rope"])
@pytest.mark.parametrize("step", OTHER_STEPS)
def test_the_fast_step_is_the_readable_step_with_heads_switched_off(step, ablate, positional):
    config = ModelConfig(vocab_size=7, d_model=16, n_heads=4, n_layers=3, max_len=8,
                         positional=positional, dtype="float64")
    params = init_params(config, np.random.default_rng(3))
    assert_same_step(config, params, batch_for(config), ablate=ablate, step=step)


# the chapters' model sizes and tasks (benchmarks/train_speed.py lists their runs)
CHAPTER_SIZES = [
    *[("02", dict(vocab_size=TwoPositions().vocab_size, d_model=64, n_heads=h, n_layers=1,
                  max_len=32), TwoPositions(), 32) for h in (1, 4)],
    ("04", dict(vocab_size=32, d_model=64, n_heads=4, n_layers=2, max_len=32),
     RepeatedSequence(32), 32),
    ("04", dict(vocab_size=32, d_model=64, n_heads=4, n_layers=2, max_len=32, n_kv_heads=1),
     RepeatedSequence(32), 32),
    ("07", dict(vocab_size=16, d_model=32, n_heads=2, n_layers=1, max_len=64),
     PreviousToken(16), 16),
    *[("10", dict(vocab_size=32, d_model=64, n_heads=8, n_layers=1, max_len=64,
                  positional=positional, dtype="float64"), PreviousToken(32), 16)
      for positional in POSITIONAL],
]


@pytest.mark.parametrize("chapter, sizes, task, seq_len", CHAPTER_SIZES,
                         ids=[f"ch{c}-{s.get('positional', 'learned')}-h{s['n_heads']}"
                              for c, s, _, _ in CHAPTER_SIZES])
@pytest.mark.parametrize("step", OTHER_STEPS)
def test_the_fast_step_is_the_readable_step_at_the_chapters_sizes(step, chapter, sizes, task,
                                                                   seq_len):
    config = ModelConfig(**sizes)
    params = init_params(config, np.random.default_rng(4))
    assert_same_step(config, params, task(np.random.default_rng(5), 32, seq_len), step=step)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("step", OTHER_STEPS)
def test_the_fast_step_is_the_readable_step_when_heads_are_sharp(step, dtype):
    """Scores hundreds apart within one head, as after long training: both paths stay
    finite and agree."""
    config = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=3, max_len=8,
                         dtype=dtype)
    params = init_params(config, np.random.default_rng(6))
    for key in ("layers.0.w_q", "layers.0.w_k", "layers.1.w_q", "layers.2.w_k"):
        params[key] = params[key] * np.asarray(60.0 if dtype == "float32" else 400.0,
                                               dtype=dtype)
    batch = batch_for(config, T=8)
    loss, grads, _ = _training_step(step)(params, batch, config)
    assert np.isfinite(loss) and all(np.all(np.isfinite(g)) for g in grads.values())
    assert_same_step(config, params, batch, sharp=True, step=step)


TRAIN_CONFIG = ModelConfig(vocab_size=16, d_model=16, n_heads=4, n_layers=2, max_len=16,
                           positional="rope", n_kv_heads=2, dtype="float64")


def train_20(step: str):
    return train(TRAIN_CONFIG, RepeatedSequence(16), steps=20, batch_size=8, seq_len=12,
                 rng=np.random.default_rng(7), step=step)


def test_train_readable_is_the_loop_of_the_readable_step_and_fast_ends_where_it_ends():
    """train(step="readable") is the loop of attnlab.model.loss_grads_accuracy and Adam,
    to the bit; every other step ends where it ends (float64: rounding only)."""
    task = RepeatedSequence(16)
    init_rng, data_rng = np.random.default_rng(7).spawn(2)
    params = init_params(TRAIN_CONFIG, init_rng)
    optimiser = Adam(params)
    losses = []
    for _ in range(20):
        loss, grads, _ = loss_grads_accuracy(params, task(data_rng, 8, 12), TRAIN_CONFIG)
        optimiser.step(params, grads)
        losses.append(loss)
    readable = train_20("readable")
    np.testing.assert_array_equal(readable.loss, losses)
    for name, value in params.items():
        np.testing.assert_array_equal(readable.params[name], value)
    for step in OTHER_STEPS:
        result = train_20(step)
        np.testing.assert_allclose(result.loss, losses, rtol=1e-8)
        for name, value in params.items():
            np.testing.assert_allclose(result.params[name], value, rtol=1e-7, atol=1e-10)


def test_editing_model_py_changes_what_train_readable_learns(monkeypatch):
    """A learner's edit of attnlab.model, here a softmax temperature of 2 on every block's
    scores (the attention_pass that model.py calls divides W_q, so S becomes S / 2):
    train(step="readable") learns something else, train(step="fast") does not see the
    edit. (The edit is in the forward pass only, so its gradients are no longer exact:
    what counts here is which code runs.)"""
    before = {step: train_20(step).loss for step in STEPS}
    original = model_module.attention_pass

    def with_temperature(x, weights, heads, **kwargs):
        return original(x, weights._replace(w_q=weights.w_q / 2.0), heads, **kwargs)

    monkeypatch.setattr(model_module, "attention_pass", with_temperature)
    after = {step: train_20(step).loss for step in STEPS}
    assert np.abs(after["readable"] - before["readable"]).max() > 1e-3
    assert after["readable"][0] != before["readable"][0]  # the first loss already
    for step in OTHER_STEPS:
        np.testing.assert_array_equal(after[step], before[step])


@pytest.mark.parametrize("step", ["slow", "Readable", None, 1])
def test_train_names_a_bad_step_in_japanese(step):
    with pytest.raises(ValueError, match=f"step は 'readable' か 'fast' .*step={step!r}"):
        train(TRAIN_CONFIG, RepeatedSequence(16), steps=1, rng=np.random.default_rng(0),
              step=step)


def test_the_fast_step_refuses_bad_input_as_the_model_does():
    config = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=1, max_len=8)
    params = init_params(config, np.random.default_rng(0))
    tokens, targets, loss_mask = batch_for(config)
    with pytest.raises(ValueError, match="loss_mask がすべて False です"):
        fast_training.loss_grads_accuracy(params, Batch(tokens, targets, 0 * loss_mask),
                                          config)
    with pytest.raises(ValueError, match="config は attnlab.model.ModelConfig"):
        fast_training.loss_grads_accuracy(params, Batch(tokens, targets, loss_mask), None)


# --- the fast path's pieces ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("spread", [3.0, 30.0, 200.0])
def test_the_fast_softmax_is_the_softmax(dtype, spread):
    """Ordinary scores (one shift for every row), scores far apart (a shift per row)
    and a row far below the rest of its block (made again from its own maximum); with
    and without an offset table."""
    rng = np.random.default_rng(9)
    scores = (rng.standard_normal((4, 2, 1, 6, 6)) * spread).astype(dtype)
    scores[0, 0, 0, 4] -= 10 * spread
    keep = np.tril(np.ones((6, 6), dtype=bool))
    for offset in (np.where(keep, 0.0, -np.inf).astype(dtype)[None], None):
        want = scores if offset is None else np.where(keep, scores, -np.inf)
        want = np.exp(want - want.max(axis=-1, keepdims=True))
        want /= want.sum(axis=-1, keepdims=True)
        original = scores.copy()
        got = _softmax_rows(scores.copy(), offset, lambda original=original: original.copy(),
                            lambda original=original: original.max(axis=-1))
        # entries under √tiny times their row's largest may lose relative precision
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=np.sqrt(np.finfo(dtype).tiny))


@pytest.mark.parametrize("rope", [
    RoPE(), RoPE(convention="half"), RoPE(scale=3.0),
    RoPE(scale=4.0, scaling="yarn", original_max_len=8),
    RoPE(scale=2.0, scaling="ntk", convention="half"),
], ids=["plain", "half", "pi", "yarn", "ntk-half"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fast_rotation_is_rope_apply_to_the_bit(rope, dtype):
    B, T, H, Dh = 3, 7, 4, 8
    rows = np.random.default_rng(4).standard_normal((B * T, H * Dh)).astype(dtype)
    tables = _rope_tables(rope, T, Dh, dtype)
    for which, positions in ((0, np.arange(T)), (1, -np.arange(T))):
        got = _heads(_rotate(rows, tables, which, T, Dh), B, T, H, 1)[:, :, 0]
        want = rope.apply(_heads(rows, B, T, H, 1)[:, :, 0], positions)
        np.testing.assert_array_equal(got, want)


def test_head_views_share_memory_with_the_rows():
    rows = np.zeros((2 * 5, 3 * 2 * 4))
    view = _heads(rows, 2, 5, 3, 2)  # (B, Hkv, G, T, Dh)
    assert view.shape == (2, 3, 2, 5, 4)
    view[1, 2, 1, 3] = 1.0
    assert rows[1 * 5 + 3, (2 * 2 + 1) * 4:(2 * 2 + 2) * 4].tolist() == [1.0] * 4


@pytest.mark.parametrize("group", [1, 3])
def test_the_norm_bound_lies_above_every_rows_largest_score(group):
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 2, group, 5, 4)) * 3  # (B, Hkv, G, T, Dh)
    k_t = rng.standard_normal((2, 2, 1, 4, 5)) * 3  # (B, Hkv, 1, Dh, T)
    bound = _norm_bound(q, k_t)
    assert bound.shape == (2, 2, group, 5)
    assert np.all(bound >= (q @ k_t).max(axis=-1) - 1e-12)


# --- the process around the model -----------------------------------------------------------

def test_the_model_runs_on_one_blas_thread_and_gives_the_setting_back():
    from threadpoolctl import threadpool_info

    from attnlab import model as model_module

    def blas_threads():
        return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    before = blas_threads()
    seen = []
    original = model_module._layers

    def spy(*args, **kwargs):
        seen.append(blas_threads())
        return original(*args, **kwargs)

    config = ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1, max_len=8)
    params = init_params(config, np.random.default_rng(0))
    tokens = np.zeros((2, 8), dtype=int)
    model_module._layers = spy
    try:
        model_module.forward(params, tokens, config)
    finally:
        model_module._layers = original
    assert seen and all(threads <= {1} for threads in seen)
    assert blas_threads() == before


SPY_ON_C_LIBRARIES = """
import ctypes, json
used = []
class Spy(ctypes.CDLL):
    def __getitem__(self, name):
        used.append(name)
        return super().__getitem__(name)
ctypes.CDLL = Spy
import numpy as np
import attnlab, attnlab.model, attnlab.training, attnlab.fast_training
from attnlab.tasks import PreviousToken
config = attnlab.model.ModelConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, max_len=8)
params = attnlab.model.init_params(config, np.random.default_rng(0))
batch = PreviousToken(8)(np.random.default_rng(1), 2, 4)
seen = {}
attnlab.model.forward(params, batch.tokens, config)
attnlab.model.loss_and_grads(params, batch, config)
attnlab.training.evaluate(params, batch, config)
attnlab.fast_training.loss_grads_accuracy(params, batch, config)
seen["import, forward, loss_and_grads, evaluate, the fast step"] = used.count("mallopt")
attnlab.training.train(config, PreviousToken(8), steps=3, batch_size=2, seq_len=4,
                       rng=np.random.default_rng(0), step="readable")
seen["train(step='readable')"] = used.count("mallopt")
attnlab.training.train(config, PreviousToken(8), steps=3, batch_size=2, seq_len=4,
                       rng=np.random.default_rng(0), step="fast")
seen["and train(step='fast')"] = used.count("mallopt")
print(json.dumps(seen))
"""


def test_only_training_changes_how_the_process_allocates_memory():
    """Importing attnlab, forward, loss_and_grads, evaluate and a bare call of the fast
    step leave glibc's allocator alone (an earlier version called mallopt at import, for
    the whole kernel); ``train`` sets its two thresholds before its first step, whichever
    step it takes, once per process (``attnlab.parallel._keep_freed_memory``): a kernel
    that trains only with step="readable" runs with the setting too. Every function
    looked up in a C library through ctypes is recorded."""
    result = subprocess.run([sys.executable, "-c", SPY_ON_C_LIBRARIES], capture_output=True,
                            text=True, check=True)
    seen = json.loads(result.stdout)
    assert seen["import, forward, loss_and_grads, evaluate, the fast step"] == 0
    if sys.platform.startswith("linux"):
        assert seen["train(step='readable')"] == 1  # one look-up: glibc is asked once
        assert seen["and train(step='fast')"] == 1


def test_forward_and_evaluation_take_the_readable_model():
    """What a chapter shows (forward, evaluate) is the readable model, not the fast path."""
    from attnlab.training import evaluate

    config = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=2, max_len=8,
                         positional="alibi", dtype="float64")
    params = init_params(config, np.random.default_rng(8))
    batch = batch_for(config)
    loss, _, accuracy = loss_grads_accuracy(params, batch, config)
    assert evaluate(params, batch, config) == (loss, accuracy)
    logits = forward(params, batch.tokens, config).logits
    assert np.isfinite(logits).all()


# --- the task the speed benchmark trains on --------------------------------------------------

def loop_repeated_sequence(task: RepeatedSequence, rng, batch_size: int, seq_len: int) -> Batch:
    """RepeatedSequence as it was written before it indexed all rows at once."""
    periods = task.periods(rng, batch_size, seq_len)
    tokens = np.empty((batch_size, seq_len), dtype=np.int64)
    loss_mask = np.zeros((batch_size, seq_len), dtype=bool)
    t = np.arange(seq_len)
    for row, period in enumerate(periods):
        segment = rng.permutation(task.vocab_size)[:period]
        tokens[row] = segment[t % period]
        loss_mask[row, period:-1] = True
    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    targets[~loss_mask] = 0
    return Batch(tokens, targets, loss_mask)


@pytest.mark.parametrize("sizes", [(32, 4, None, 64, 32), (16, 2, 8, 5, 9), (5, 2, 5, 7, 40),
                                   (8, 3, None, 1, 7)], ids=str)
def test_repeated_sequence_is_the_row_by_row_batch_to_the_bit(sizes):
    vocab_size, min_period, max_period, batch_size, seq_len = sizes
    task = RepeatedSequence(vocab_size, min_period, max_period)
    new_rng, old_rng = np.random.default_rng(8), np.random.default_rng(8)
    for _ in range(3):
        got = task(new_rng, batch_size, seq_len)
        want = loop_repeated_sequence(task, old_rng, batch_size, seq_len)
        for got_array, want_array in zip(got, want, strict=True):
            assert got_array.dtype == want_array.dtype
            np.testing.assert_array_equal(got_array, want_array)
    # the generators are left in the same state
    assert new_rng.integers(0, 2**62) == old_rng.integers(0, 2**62)


@pytest.mark.parametrize("step", OTHER_STEPS)
@pytest.mark.parametrize("ablation", [dict(ramp="turns"), dict(temperature=False),
                                      dict(ramp="turns", beta_fast=1.0, beta_slow=1 / 32)],
                         ids=str)
@pytest.mark.parametrize("n_layers", LAYERS)
def test_the_fast_step_is_the_readable_step_for_chapter_09s_yarn_ablations(ablation, n_layers,
                                                                             step):
    """The experiments' YarnAblationConfig is not a field of ModelConfig: the steps see it
    only through config.rope, which both must ask (a step that rebuilt RoPE from the
    fields would train plain YaRN and fail here)."""
    from attnlab.experiments.context_extension import yarn_ablation

    plain = ModelConfig(**{**BASE, "n_layers": n_layers}, positional="rope",
                        rope_scaling="yarn", rope_scale=4.0, rope_original_max_len=4)
    config = yarn_ablation(plain, **ablation)
    params = init_params(config, np.random.default_rng(1))
    batch = batch_for(config)
    assert_same_step(config, params, batch, step=step)
    plain_loss = loss_grads_accuracy(params, batch, plain)[0]
    assert loss_grads_accuracy(params, batch, config)[0] != pytest.approx(plain_loss, rel=1e-6)
