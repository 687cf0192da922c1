"""Tests of the fast training path of attnlab.model (issue 15): it agrees with the
reference path that forward and evaluate take, its pieces compute what the readable
versions compute, and Adam's flat update is the per-parameter update to the bit."""

import itertools

import numpy as np
import pytest

from attnlab.model import (
    POSITIONAL,
    ModelConfig,
    _cross_entropy,
    _heads,
    _norm_bound,
    _rope_tables,
    _rotate,
    _softmax_rows,
    forward,
    init_params,
    loss_and_grads,
)
from attnlab.positional import RoPE
from attnlab.tasks import Batch, RepeatedSequence
from attnlab.training import Adam, evaluate

SETTINGS = list(itertools.product(POSITIONAL, (True, False), (None, 2, 1)))


def batch_for(config: ModelConfig, seed: int = 0, B: int = 3, T: int = 6) -> Batch:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, config.vocab_size, (B, T))
    targets = rng.integers(0, config.vocab_size, (B, T))
    loss_mask = rng.random((B, T)) < 0.7
    loss_mask[0, 0] = True
    return Batch(tokens, targets, loss_mask)


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_the_training_loss_is_the_evaluated_loss(setting):
    positional, causal, n_kv_heads = setting
    config = ModelConfig(vocab_size=7, d_model=8, n_heads=4, n_layers=2, max_len=8,
                         positional=positional, causal=causal, n_kv_heads=n_kv_heads,
                         dtype="float64")
    params = init_params(config, np.random.default_rng(1))
    batch = batch_for(config)
    loss, _ = loss_and_grads(params, batch, config)
    eval_loss, _ = evaluate(params, batch, config)
    assert loss == pytest.approx(eval_loss, rel=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_huge_scores_fall_back_to_the_row_maxima(dtype):
    """Scores hundreds apart within one head: the cheap shift would underflow whole
    rows, so the softmax takes the row maxima and the loss stays finite and right."""
    config = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=1, max_len=8,
                         dtype=dtype)
    params = init_params(config, np.random.default_rng(2))
    for key in ("layers.0.w_q", "layers.0.w_k"):
        params[key] = params[key] * np.asarray(60.0 if dtype == "float32" else 400.0,
                                               dtype=dtype)
    batch = batch_for(config, T=8)
    loss, grads = loss_and_grads(params, batch, config)
    eval_loss, _ = evaluate(params, batch, config)
    assert np.isfinite(loss)
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    assert loss == pytest.approx(eval_loss, rel=1e-4 if dtype == "float32" else 1e-10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fast_softmax_is_the_softmax(dtype):
    rng = np.random.default_rng(3)
    scores = (rng.standard_normal((2, 3, 5, 5)) * 30).astype(dtype)
    scores[0, 0, 4] -= 300.0  # one row far below the rest of its block
    keep = np.tril(np.ones((5, 5), dtype=bool))
    offset = np.where(keep, 0.0, -np.inf).astype(dtype)[None]
    want = np.where(keep, scores, -np.inf)
    want = np.exp(want - want.max(axis=-1, keepdims=True))
    want /= want.sum(axis=-1, keepdims=True)
    original = scores.copy()
    got = _softmax_rows(scores, offset, lambda: original.copy())
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-30)


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


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adams_flat_update_is_the_per_parameter_update_to_the_bit(dtype):
    config = ModelConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=2, max_len=16,
                         dtype=dtype)
    rng = np.random.default_rng(5)
    flat_params = init_params(config, rng)
    loop_params = {name: value.copy() for name, value in flat_params.items()}
    flat, loop = Adam(flat_params), Adam(loop_params)
    task = RepeatedSequence(16)
    for _ in range(5):
        _, grads = loss_and_grads(flat_params, task(rng, 4, 16), config)
        flat.step(flat_params, grads)
        # a dict in another order takes the per-parameter path
        loop.step(loop_params, dict(reversed(list(grads.items()))))
        for name in flat_params:
            np.testing.assert_array_equal(flat_params[name], loop_params[name])
            np.testing.assert_array_equal(flat.m[name], loop.m[name])
            np.testing.assert_array_equal(flat.v[name], loop.v[name])


def test_forward_is_unchanged_by_training_path_caches():
    """Cached tables (score offsets, RoPE) are read-only and shared between calls."""
    config = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=1, max_len=8,
                         positional="alibi", dtype="float64")
    params = init_params(config, np.random.default_rng(6))
    batch = batch_for(config)
    before = forward(params, batch.tokens, config).logits
    loss_and_grads(params, batch, config)
    loss_and_grads(params, batch, config)
    np.testing.assert_array_equal(forward(params, batch.tokens, config).logits, before)


@pytest.mark.parametrize("setting", [
    dict(positional="learned"), dict(positional="sinusoidal", causal=False),
    dict(positional="rope", n_kv_heads=1), dict(positional="alibi", n_kv_heads=2),
    dict(positional="none", ablate=[(0, 1)]),
], ids=str)
def test_a_one_layer_model_has_the_gradient_of_finite_differences(setting):
    """One layer is both the first block (projected through its parts) and the last
    (only the rows the loss reads): both shortcuts at once."""
    setting = dict(setting)
    ablate = setting.pop("ablate", None)
    config = ModelConfig(vocab_size=7, d_model=8, n_heads=4, n_layers=1, max_len=8,
                         dtype="float64", **setting)
    rng = np.random.default_rng(7)
    params = init_params(config, rng)
    batch = batch_for(config, seed=7)
    _, grads = loss_and_grads(params, batch, config, ablate=ablate)
    eps = 1e-6
    for name, value in params.items():
        direction = rng.standard_normal(value.shape)
        up = loss_and_grads({**params, name: value + eps * direction}, batch, config,
                            ablate=ablate)[0]
        down = loss_and_grads({**params, name: value - eps * direction}, batch, config,
                              ablate=ablate)[0]
        numeric = (up - down) / (2 * eps)
        analytic = np.sum(grads[name] * direction)
        assert numeric == pytest.approx(analytic, rel=1e-6, abs=1e-9), name


def test_the_model_runs_on_one_blas_thread_and_gives_the_setting_back():
    from threadpoolctl import threadpool_info

    from attnlab import model as model_module

    def blas_threads():
        return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    before = blas_threads()
    seen = []
    original = model_module._reference_layers

    def spy(*args, **kwargs):
        seen.append(blas_threads())
        return original(*args, **kwargs)

    config = ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1, max_len=8)
    params = init_params(config, np.random.default_rng(0))
    tokens = np.zeros((2, 8), dtype=int)
    model_module._reference_layers = spy
    try:
        model_module.forward(params, tokens, config)
    finally:
        model_module._reference_layers = original
    assert seen and all(threads <= {1} for threads in seen)
    assert blas_threads() == before


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


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("spread", [3.0, 200.0])
def test_the_one_shift_softmax_is_the_softmax(dtype, spread):
    """Ordinary scores (no fallback) and scores far apart (the largest sets the shift,
    rows far below it take the row maxima); with and without an offset table."""
    rng = np.random.default_rng(9)
    scores = (rng.standard_normal((4, 2, 6, 6)) * spread).astype(dtype)
    keep = np.tril(np.ones((6, 6), dtype=bool))
    for offset in (np.where(keep, 0.0, -np.inf).astype(dtype)[None], None):
        want = scores if offset is None else np.where(keep, scores, -np.inf)
        want = np.exp(want - want.max(axis=-1, keepdims=True))
        want /= want.sum(axis=-1, keepdims=True)
        original = scores.copy()
        got = _softmax_rows(scores.copy(), offset, lambda original=original: original.copy())
        # a row's largest entry is computed as at least √tiny: entries under √tiny times
        # their row's largest may lose relative precision, never more than √tiny absolute
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=np.sqrt(np.finfo(dtype).tiny))


def test_adams_update_is_the_one_line_formula_to_the_bit():
    rng = np.random.default_rng(10)
    for dtype in ("float32", "float64"):
        g = rng.standard_normal(50).astype(dtype)
        m, v = (rng.standard_normal(50) ** 2).astype(dtype), (rng.random(50) ** 2).astype(dtype)
        adam = Adam({"w": np.zeros(50, dtype=dtype)}, lr=3e-3)
        want_m = m * adam.beta1 + (1.0 - adam.beta1) * g
        want_v = v * adam.beta2 + (1.0 - adam.beta2) * g * g
        want = adam.lr * (want_m / 0.1) / (np.sqrt(want_v / 0.01) + adam.eps)
        got = adam._update(m, v, g, 0.1, 0.01)
        np.testing.assert_array_equal(m, want_m)
        np.testing.assert_array_equal(v, want_v)
        np.testing.assert_array_equal(got, want)


def test_accuracy_takes_the_first_of_tied_logits_as_argmax_does():
    logits = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0], [0.5, 0.5, 0.5]], dtype=np.float32)
    for targets in ([1, 0, 0], [2, 0, 1], [1, 1, 2]):
        targets = np.array(targets)
        want = float((logits.argmax(axis=-1) == targets).mean())
        assert _cross_entropy(logits, targets)[2] == want
        assert _cross_entropy(logits[1:2], targets[1:2])[2] == float(targets[1] == 0)


@pytest.mark.parametrize("group", [1, 3])
def test_the_norm_bound_lies_above_every_rows_largest_score(group):
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 2, group, 5, 4)) * 3  # (B, Hkv, G, T, Dh)
    k_t = rng.standard_normal((2, 2, 1, 4, 5)) * 3  # (B, Hkv, 1, Dh, T)
    bound = _norm_bound(q, k_t)
    assert bound.shape == (2, 2, group, 5)
    assert np.all(bound >= (q @ k_t).max(axis=-1) - 1e-12)
