"""Tests of attnlab.model and attnlab.training: the toy transformer, its backward pass,
Adam, train, evaluation, ablation and pruning."""

import itertools
import math

import numpy as np
import pytest

from attnlab import causal_mask, mean_pool_kv, multi_head_attention, sinusoidal_encoding
from attnlab.model import (
    POSITIONAL,
    ModelConfig,
    forward,
    init_params,
    layer_keys,
    layer_projections,
    loss_and_grads,
    param_shapes,
)
from attnlab.positional import alibi_bias
from attnlab.tasks import Batch, PreviousToken
from attnlab.training import Adam, ablation_losses, evaluate, pruning_curve, train

SMALL = dict(vocab_size=7, d_model=8, n_heads=4, n_layers=2, max_len=6, dtype="float64")


def small(**changes) -> ModelConfig:
    return ModelConfig(**{**SMALL, **changes})


def small_batch(config: ModelConfig, seed: int = 0, B: int = 2, T: int = 5):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, config.vocab_size, (B, T))
    targets = rng.integers(0, config.vocab_size, (B, T))
    loss_mask = rng.random((B, T)) < 0.7
    loss_mask[0, 0] = True
    return Batch(tokens, targets, loss_mask)


ALL_SETTINGS = list(itertools.product(POSITIONAL, (True, False), (None, 2, 1)))


def setting_id(setting) -> str:
    positional, causal, n_kv_heads = setting
    kv = "mha" if n_kv_heads is None else f"kv{n_kv_heads}"
    return f"{positional}-{'causal' if causal else 'full'}-{kv}"


# --- config and parameters ----------------------------------------------------------------

def test_param_shapes_follow_the_config():
    config = small(positional="learned", n_kv_heads=2)
    shapes = param_shapes(config)
    assert shapes == {
        "embed": (7, 8), "pos": (6, 8),
        "layers.0.w_q": (8, 8), "layers.0.w_k": (8, 4), "layers.0.w_v": (8, 4),
        "layers.0.w_o": (8, 8),
        "layers.1.w_q": (8, 8), "layers.1.w_k": (8, 4), "layers.1.w_v": (8, 4),
        "layers.1.w_o": (8, 8),
        "unembed": (8, 7),
    }


@pytest.mark.parametrize("positional", POSITIONAL)
def test_only_learned_positions_have_a_table(positional):
    params = init_params(small(positional=positional), np.random.default_rng(0))
    assert ("pos" in params) == (positional == "learned")
    assert {k: v.shape for k, v in params.items()} == param_shapes(small(positional=positional))


def test_init_params_is_deterministic_for_a_seed():
    a = init_params(small(), np.random.default_rng(3))
    b = init_params(small(), np.random.default_rng(3))
    c = init_params(small(), np.random.default_rng(4))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["embed"], c["embed"])


BAD_CONFIGS = [
    (dict(positional="absolute"), "positional='absolute' は使えません"),
    (dict(d_model=10, n_heads=4), "d_model=10 は n_heads=4 で割り切れません"),
    (dict(n_kv_heads=3), "n_heads=4 は n_kv_heads=3 で割り切れません"),
    (dict(d_model=12, n_heads=4, positional="rope"), "d_head は偶数である必要があります: d_head=3"),
    (dict(vocab_size=0), "vocab_size は 1 以上の整数"),
    (dict(n_layers=1.5), "n_layers は 1 以上の整数"),
    (dict(causal="yes"), "causal は True か False"),
    (dict(rope_scale=0.0), "rope_scale は正の有限な数"),
    (dict(dtype="float16"), "dtype='float16' は使えません"),
]


@pytest.mark.parametrize("changes, message", BAD_CONFIGS)
def test_bad_config_is_refused_in_japanese(changes, message):
    with pytest.raises(ValueError, match=message):
        small(**changes)


# --- forward ------------------------------------------------------------------------------

def forward_from_attention_module(params, tokens, config):
    """The model written directly with attnlab.attention and attnlab.positional."""
    T = tokens.shape[1]
    x = params["embed"][tokens]
    if config.positional == "sinusoidal":
        x = x + sinusoidal_encoding(T, config.d_model)
    if config.positional == "learned":
        x = x + params["pos"][:T]
    mask = causal_mask(T) if config.causal else None
    bias = alibi_bias(config.n_heads, T) if config.positional == "alibi" else None
    if config.positional == "t5":
        bias = params["t5_bias"][:, t5_buckets_by_loop(T, config)]  # (H, T, T)
    attns = []
    for layer in range(config.n_layers):
        weights = layer_projections(params, layer)
        out, attn = multi_head_attention(x, weights, config.n_heads, n_kv_heads=config.n_kv_heads,
                                         mask=mask, rope=config.rope, bias=bias)
        x = x + out
        attns.append(attn)
    return x @ params["unembed"], attns


def t5_buckets_by_loop(T: int, config) -> np.ndarray:
    """T5's ``_relative_position_bucket`` (Raffel et al. 2020's code), one pair at a time."""
    out = np.zeros((T, T), dtype=int)
    for i in range(T):
        for j in range(T):
            n, bucket, rel = config.t5_n_buckets, 0, j - i
            if not config.causal:
                n //= 2
                bucket += n if rel > 0 else 0
                rel = abs(rel)
            else:
                rel = -min(rel, 0)
            exact = n // 2
            if rel < exact:
                out[i, j] = bucket + rel
            else:
                far = exact + int(math.log(rel / exact) / math.log(config.t5_max_distance / exact)
                                  * (n - exact))
                out[i, j] = bucket + min(far, n - 1)
    return out


def test_t5_buckets_follow_the_t5_code():
    from attnlab.positional import t5_buckets
    for causal in (True, False):
        for n, far in ((32, 128), (16, 16), (8, 20), (4, 3)):
            config = small(positional="t5", causal=causal, t5_n_buckets=n, t5_max_distance=far)
            np.testing.assert_array_equal(
                t5_buckets(40, n, far, bidirectional=not causal), t5_buckets_by_loop(40, config))
    # T5's own configuration, causal: distances 0–15 exact, 128 and beyond in bucket 31
    causal = t5_buckets(200, 32, 128)
    assert list(causal[15, :16][::-1]) == list(range(16))
    assert causal[199, 199 - 128] == 31 and causal[199, 0] == 31 and causal[199, 199 - 100] == 30


@pytest.mark.parametrize("causal", [True, False])
def test_t5_bias_gradient_matches_finite_differences_across_log_buckets(causal):
    # 4 buckets per direction up to distance 3: T = 5 reaches the exact, the log-spaced
    # and the clamped buckets; the table is shared by both layers
    config = small(positional="t5", causal=causal, t5_n_buckets=8 if not causal else 4,
                   t5_max_distance=3)
    assert numerical_gradient_error(config) < 1e-6


def test_t5_kind_is_rejected_with_too_few_distances():
    with pytest.raises(ValueError, match="max_distance"):
        small(positional="t5", t5_n_buckets=8, t5_max_distance=4)


@pytest.mark.parametrize("setting", ALL_SETTINGS, ids=setting_id)
def test_forward_is_multi_head_attention_in_a_residual_stack(setting):
    positional, causal, n_kv_heads = setting
    config = small(positional=positional, causal=causal, n_kv_heads=n_kv_heads)
    params = init_params(config, np.random.default_rng(1))
    tokens, _, _ = small_batch(config)
    result = forward(params, tokens, config)
    logits, attns = forward_from_attention_module(params, tokens, config)
    np.testing.assert_allclose(result.logits, logits, rtol=1e-12, atol=1e-12)
    assert len(result.attn) == config.n_layers
    for got, want in zip(result.attn, attns, strict=True):
        assert got.shape == (2, config.n_heads, 5, 5)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("positional", POSITIONAL)
def test_a_causal_model_never_reads_later_tokens(positional):
    config = small(positional=positional)
    params = init_params(config, np.random.default_rng(2))
    tokens = np.array([[1, 2, 3, 4, 5]])
    changed = tokens.copy()
    changed[0, 3:] = [0, 6]
    a = forward(params, tokens, config).logits
    b = forward(params, changed, config).logits
    np.testing.assert_array_equal(a[:, :3], b[:, :3])
    assert not np.allclose(a[:, 3:], b[:, 3:])


def test_switching_off_every_head_leaves_embedding_and_unembedding():
    config = small(positional="learned")
    params = init_params(config, np.random.default_rng(3))
    tokens, _, _ = small_batch(config)
    every_head = [(layer, head) for layer in range(2) for head in range(4)]
    logits = forward(params, tokens, config, ablate=every_head).logits
    direct = (params["embed"][tokens] + params["pos"][:5]) @ params["unembed"]
    np.testing.assert_allclose(logits, direct, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layer, head", [(0, 0), (1, 2), (0, 3)])
def test_switching_off_a_head_equals_zeroing_its_rows_of_w_o(layer, head):
    config = small(n_kv_heads=2)
    params = init_params(config, np.random.default_rng(4))
    tokens, _, _ = small_batch(config)
    zeroed = {k: v.copy() for k, v in params.items()}
    d_head = config.d_head
    zeroed[f"layers.{layer}.w_o"][head * d_head:(head + 1) * d_head] = 0.0
    ablated = forward(params, tokens, config, ablate=[(layer, head)])
    np.testing.assert_allclose(ablated.logits, forward(zeroed, tokens, config).logits,
                               rtol=1e-12, atol=1e-12)
    assert not np.allclose(ablated.logits, forward(params, tokens, config).logits)


@pytest.mark.parametrize("ablate, message", [
    ([(2, 0)], r"\(層, ヘッド\)=\(2, 0\) はモデルにありません"),
    ([(0, 4)], r"\(層, ヘッド\)=\(0, 4\) はモデルにありません"),
    ([3], "ablate の要素は \\(層, ヘッド\\) の組"),
])
def test_ablating_a_head_that_does_not_exist_is_refused(ablate, message):
    config = small()
    params = init_params(config, np.random.default_rng(0))
    with pytest.raises(ValueError, match=message):
        forward(params, np.zeros((1, 3), dtype=int), config, ablate=ablate)


def test_sinusoidal_and_rope_models_accept_sequences_past_max_len():
    for positional in ("sinusoidal", "rope", "alibi", "none"):
        config = small(positional=positional)
        params = init_params(config, np.random.default_rng(0))
        assert forward(params, np.zeros((1, 20), dtype=int), config).logits.shape == (1, 20, 7)


def test_a_model_whose_kv_heads_agree_in_pairs_pools_to_the_same_gqa_model():
    config, gqa_config = small(), small(n_kv_heads=2)
    params = init_params(config, np.random.default_rng(9))
    d_head = config.d_head
    for layer in range(config.n_layers):
        for name in ("w_k", "w_v"):
            w = params[f"layers.{layer}.{name}"]
            for head in (1, 3):  # head 1 copies head 0, head 3 copies head 2
                w[:, head * d_head:(head + 1) * d_head] = w[:, (head - 1) * d_head:head * d_head]
    assert layer_projections(params, 1).w_q is params["layers.1.w_q"]
    gqa = dict(params)
    for layer in range(config.n_layers):
        pooled = mean_pool_kv(layer_projections(params, layer), n_heads=4, n_kv_heads=2)
        gqa.update(zip(layer_keys(layer), pooled, strict=True))
    tokens, _, _ = small_batch(config)
    np.testing.assert_allclose(forward(gqa, tokens, gqa_config).logits,
                               forward(params, tokens, config).logits, rtol=1e-12, atol=1e-12)
    message = "params に 'layers.2.w_q' がありません: layer=2 の層はありません"
    with pytest.raises(ValueError, match=message):
        layer_projections(params, 2)


def test_ablation_losses_switch_off_one_head_at_a_time():
    config = small()
    params = init_params(config, np.random.default_rng(10))
    batch = small_batch(config, B=4)
    losses = ablation_losses(params, batch, config)
    assert losses.shape == (2, 4)
    for layer, head in [(0, 0), (1, 3)]:
        assert losses[layer, head] == evaluate(params, batch, config, ablate=[(layer, head)])[0]
    assert len(np.unique(losses)) == 8


def test_the_pruning_curve_goes_from_the_full_model_to_no_heads():
    config = small()
    params = init_params(config, np.random.default_rng(11))
    batch = small_batch(config, B=4)
    curve = pruning_curve(params, batch, config)
    assert curve.loss.shape == curve.accuracy.shape == (9,)
    assert curve.loss[0] == evaluate(params, batch, config)[0]
    every = [(layer, head) for layer in range(2) for head in range(4)]
    assert curve.loss[-1] == evaluate(params, batch, config, ablate=every)[0]
    alone = ablation_losses(params, batch, config)
    assert [alone[pair] for pair in curve.order] == sorted(alone.ravel().tolist())
    assert curve.loss[1] == alone.min()


def test_a_pruning_order_is_followed_and_must_name_every_head_once():
    config = small()
    params = init_params(config, np.random.default_rng(12))
    batch = small_batch(config, B=4)
    order = [(1, 3), (1, 2), (1, 1), (1, 0), (0, 3), (0, 2), (0, 1), (0, 0)]
    curve = pruning_curve(params, batch, config, order=order)
    assert curve.order == order
    assert curve.loss[2] == evaluate(params, batch, config, ablate=order[:2])[0]
    with pytest.raises(ValueError, match="すべてのヘッド .* をちょうど 1 回ずつ"):
        pruning_curve(params, batch, config, order=order[:-1] + [(1, 3)])


# --- loss and gradients -------------------------------------------------------------------

def test_loss_is_the_mean_cross_entropy_of_the_selected_positions():
    config = small()
    params = init_params(config, np.random.default_rng(5))
    tokens, targets, loss_mask = small_batch(config)
    logits = forward(params, tokens, config).logits
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    loss, _ = loss_and_grads(params, Batch(tokens, targets, loss_mask), config)
    assert loss == pytest.approx(-picked[loss_mask].mean(), rel=1e-12)
    eval_loss, accuracy = evaluate(params, (tokens, targets, loss_mask), config)
    assert eval_loss == pytest.approx(loss, rel=1e-12)
    assert accuracy == pytest.approx((logits.argmax(-1) == targets)[loss_mask].mean())


def numerical_gradient_error(config, ablate=None, seed=0, entries=6, eps=1e-5):
    """Worst relative error between backprop and central differences, over all parameters.

    For every parameter array: the derivative along ``entries`` random single entries
    and along one random direction through the whole array (which touches every entry
    at once); the error of the array is ``‖numeric − backprop‖ / (‖numeric‖ + ‖backprop‖)``
    over those derivatives, as in cs231n's gradient check.
    """
    rng = np.random.default_rng(seed)
    params = init_params(config, rng)
    batch = small_batch(config, seed)
    _, grads = loss_and_grads(params, batch, config, ablate=ablate)
    assert grads.keys() == params.keys()

    def loss_at(name, direction, step):
        moved = dict(params)
        moved[name] = params[name] + step * direction
        return loss_and_grads(moved, batch, config, ablate=ablate)[0]

    worst = 0.0
    for name, value in params.items():
        assert grads[name].shape == value.shape
        directions = []
        for flat in rng.choice(value.size, size=min(entries, value.size), replace=False):
            one = np.zeros(value.size)
            one[flat] = 1.0
            directions.append(one.reshape(value.shape))
        directions.append(rng.standard_normal(value.shape))
        numeric = np.array([(loss_at(name, d, eps) - loss_at(name, d, -eps)) / (2 * eps)
                            for d in directions])
        analytic = np.array([np.sum(grads[name] * d) for d in directions])
        scale = np.linalg.norm(numeric) + np.linalg.norm(analytic)
        assert scale > 1e-6, f"{name}: the check needs a gradient that is not zero"
        worst = max(worst, np.linalg.norm(numeric - analytic) / scale)
    return worst


@pytest.mark.parametrize("setting", ALL_SETTINGS, ids=setting_id)
def test_backprop_matches_finite_differences(setting):
    positional, causal, n_kv_heads = setting
    config = small(positional=positional, causal=causal, n_kv_heads=n_kv_heads)
    assert numerical_gradient_error(config) < 1e-6


def test_backprop_matches_finite_differences_with_heads_switched_off_and_rope_scaled():
    config = small(positional="rope", rope_scale=3.0, n_kv_heads=2)
    assert numerical_gradient_error(config, ablate=[(0, 1), (1, 3)]) < 1e-6


def test_a_switched_off_head_gets_no_gradient_through_its_output():
    config = small(n_layers=1)
    params = init_params(config, np.random.default_rng(6))
    _, grads = loss_and_grads(params, small_batch(config), config, ablate=[(0, 1)])
    d_head = config.d_head
    assert np.all(grads["layers.0.w_o"][d_head:2 * d_head] == 0)
    assert np.all(grads["layers.0.w_q"][:, d_head:2 * d_head] == 0)
    assert np.any(grads["layers.0.w_q"][:, :d_head] != 0)


def test_learned_rows_past_the_sequence_get_no_gradient():
    config = small(positional="learned")
    params = init_params(config, np.random.default_rng(7))
    _, grads = loss_and_grads(params, small_batch(config, T=4), config)
    assert np.all(grads["pos"][4:] == 0)
    assert np.all(np.any(grads["pos"][:4] != 0, axis=1))


@pytest.mark.parametrize("positional", POSITIONAL)
def test_float32_stays_float32_and_agrees_with_float64(positional):
    wide = small(positional=positional, n_kv_heads=2)
    narrow = small(positional=positional, n_kv_heads=2, dtype="float32")
    params = init_params(wide, np.random.default_rng(8))
    params32 = {k: v.astype(np.float32) for k, v in params.items()}
    batch = small_batch(wide)
    result = forward(params32, batch.tokens, narrow, ablate=[(0, 1)])
    assert result.logits.dtype == np.float32
    assert all(a.dtype == np.float32 for a in result.attn)
    loss32, grads32 = loss_and_grads(params32, batch, narrow)
    loss64, grads64 = loss_and_grads(params, batch, wide)
    assert all(g.dtype == np.float32 for g in grads32.values())
    assert loss32 == pytest.approx(loss64, rel=1e-5)
    for name in grads64:
        np.testing.assert_allclose(grads32[name], grads64[name], rtol=1e-3, atol=1e-5)


def test_init_params_uses_the_dtype_of_the_config():
    params = init_params(small(dtype="float32"), np.random.default_rng(0))
    assert all(value.dtype == np.float32 for value in params.values())


# --- bad input ----------------------------------------------------------------------------

@pytest.fixture
def model():
    config = small(positional="learned")
    return config, init_params(config, np.random.default_rng(0))


@pytest.mark.parametrize("tokens, message", [
    ([[0, 7, 1]], "トークン ID 7 は語彙の範囲外です: vocab_size=7 なので 0 〜 6"),
    ([[0, -1, 1]], "トークン ID -1 は語彙の範囲外です"),
    ([[0.0, 1.0]], "tokens はトークン ID の整数配列である必要があります: dtype=float64"),
    ([0, 1, 2], r"tokens は \(B, T\) の 2 次元配列である必要があります: tokens.shape=\(3,\)"),
])
def test_bad_tokens_are_refused_in_japanese(model, tokens, message):
    config, params = model
    with pytest.raises(ValueError, match=message):
        forward(params, tokens, config)


def test_a_learned_table_has_no_row_past_max_len(model):
    config, params = model
    message = "系列長 T=7 が max_len=6 を超えています: .*位置 0 〜 5 の行しかなく"
    with pytest.raises(IndexError, match=message):
        forward(params, np.zeros((1, 7), dtype=int), config)


def test_bad_targets_and_masks_are_refused_in_japanese(model):
    config, params = model
    tokens, targets, loss_mask = small_batch(config)
    cases = [
        ((tokens, targets[:, :4], loss_mask),
         r"targets の形が tokens と一致しません: targets.shape=\(2, 4\)"),
        ((tokens, targets, loss_mask[:1]),
         r"loss_mask の形が tokens と一致しません: loss_mask.shape=\(1, 5\)"),
        ((tokens, targets, np.zeros_like(loss_mask)), "loss_mask がすべて False です"),
        ((tokens, np.where(loss_mask, 9, 0), loss_mask), "targets の ID 9 は語彙の範囲外です"),
        ((tokens, targets * 1.0, loss_mask), "targets はトークン ID の整数配列"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            loss_and_grads(params, Batch(*args), config)


def test_parameters_that_do_not_fit_the_config_are_refused(model):
    config, params = model
    tokens = np.zeros((1, 3), dtype=int)
    missing = {k: v for k, v in params.items() if k != "layers.1.w_v"}
    with pytest.raises(ValueError, match="params に 'layers.1.w_v' がありません"):
        forward(missing, tokens, config)
    other = small(positional="learned", n_kv_heads=1)
    with pytest.raises(ValueError, match=r"params\['layers.0.w_k'\] の形が config と合いません: "
                                         r"shape=\(8, 8\), 期待される形=\(8, 2\)"):
        forward(params, tokens, other)
    with pytest.raises(ValueError, match="config は attnlab.model.ModelConfig"):
        forward(params, tokens, {"d_model": 8})


# --- Adam and train -----------------------------------------------------------------------

def test_adams_first_step_moves_every_entry_by_lr_against_its_gradient():
    params = {"w": np.array([1.0, -2.0, 3.0])}
    grads = {"w": np.array([0.5, -1e-3, 40.0])}
    Adam(params, lr=0.1).step(params, grads)
    np.testing.assert_allclose(params["w"], [0.9, -1.9, 2.9], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_is_the_formula_of_the_paper_step_by_step(dtype):
    """m ← β1 m + (1 − β1) g, v ← β2 v + (1 − β2) g², θ ← θ − lr (m / (1 − β1^t)) /
    (√(v / (1 − β2^t)) + ε), for every parameter, as chapter 07 writes it."""
    rng = np.random.default_rng(13)
    params = {"a": rng.standard_normal((3, 4)).astype(dtype),
              "b": rng.standard_normal(5).astype(dtype)}
    theta = {name: value.copy() for name, value in params.items()}
    m = {name: np.zeros_like(value) for name, value in params.items()}
    v = {name: np.zeros_like(value) for name, value in params.items()}
    adam = Adam(params, lr=0.03)
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, 6):
        grads = {name: rng.standard_normal(value.shape).astype(dtype)
                 for name, value in params.items()}
        if t == 3:
            del grads["b"]  # a parameter without a gradient this step does not move
        adam.step(params, grads)
        for name, g in grads.items():
            m[name] = b1 * m[name] + (1 - b1) * g
            v[name] = b2 * v[name] + (1 - b2) * g * g
            theta[name] = theta[name] - 0.03 * (m[name] / (1 - b1 ** t)) / (
                np.sqrt(v[name] / (1 - b2 ** t)) + eps)
        for name in params:
            assert params[name].dtype == dtype
            np.testing.assert_allclose(params[name], theta[name], rtol=1e-6, atol=1e-7)


def test_training_is_deterministic_for_a_seed():
    config = small(n_layers=1)
    task = PreviousToken(vocab_size=7)
    a = train(config, task, steps=5, batch_size=4, seq_len=6, rng=np.random.default_rng(1))
    b = train(config, task, steps=5, batch_size=4, seq_len=6, rng=np.random.default_rng(1))
    c = train(config, task, steps=5, batch_size=4, seq_len=6, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.accuracy, b.accuracy)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert not np.array_equal(a.loss, c.loss)
    assert a.loss.shape == a.accuracy.shape == (5,)


def test_training_lowers_the_loss():
    config = small(n_layers=1, positional="learned", vocab_size=5)
    result = train(config, PreviousToken(vocab_size=5), steps=60, batch_size=16, seq_len=6,
                   rng=np.random.default_rng(0))
    assert result.loss[-10:].mean() < 0.5 * result.loss[:5].mean()


def test_rows_of_the_table_never_trained_stay_as_initialised():
    config = small(positional="learned", max_len=12, n_layers=1)
    result = train(config, PreviousToken(vocab_size=7), steps=10, batch_size=4, seq_len=5,
                   rng=np.random.default_rng(3))
    initial = result.initial["pos"]
    np.testing.assert_array_equal(result.params["pos"][5:], initial[5:])
    assert not np.allclose(result.params["pos"][:5], initial[:5])


def test_train_refuses_a_task_with_a_larger_vocabulary():
    message = "タスクの語彙 vocab_size=32 がモデルの vocab_size=7 より大きい"
    with pytest.raises(ValueError, match=message):
        train(small(), PreviousToken(vocab_size=32), steps=1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="steps は 1 以上の整数"):
        train(small(), PreviousToken(vocab_size=7), steps=0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng は np.random.default_rng"):
        train(small(), PreviousToken(vocab_size=7), steps=1, rng=0)


def test_train_with_one_rng_equals_the_seed_spawned_into_init_and_data_streams():
    """The two streams are ``rng.spawn(2)``: the parameters and the first batch can be
    rebuilt from them, so a chapter can say where every random number came from."""
    config = small(n_layers=1)
    task = PreviousToken(vocab_size=7)
    result = train(config, task, steps=1, batch_size=4, seq_len=6, rng=np.random.default_rng(5))
    init_rng, data_rng = np.random.default_rng(5).spawn(2)
    initial = init_params(config, init_rng)
    assert all(np.array_equal(result.initial[k], initial[k]) for k in initial)
    loss, _ = loss_and_grads(initial, task(data_rng, 4, 6), config)
    assert result.loss[0] == loss


def test_n_kv_heads_is_one_field_none_meaning_every_head():
    assert small().n_kv_heads == 4
    assert small(n_kv_heads=2).n_kv_heads == 2
    assert small() == small(n_kv_heads=4)
    assert not hasattr(small(), "kv_heads")


@pytest.mark.parametrize("call", [
    lambda p, b: ablation_losses(p, b, {"d_model": 8}),
    lambda p, b: pruning_curve(p, b, "config"),
    lambda p, b: evaluate(p, b, None),
    lambda p, b: param_shapes(3),
])
def test_every_entry_point_refuses_a_config_that_is_not_one_in_japanese(model, call):
    config, params = model
    with pytest.raises(ValueError, match="config は attnlab.model.ModelConfig"):
        call(params, small_batch(config))


@pytest.mark.parametrize("batch", [(np.zeros((1, 3), dtype=int),), "tokens", None])
def test_a_batch_that_is_not_three_arrays_is_refused_in_japanese(model, batch):
    config, params = model
    with pytest.raises(ValueError, match=r"batch は Batch\(tokens, targets, loss_mask\)"):
        loss_and_grads(params, batch, config)
