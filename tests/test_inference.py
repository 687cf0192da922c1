"""attnlab.inference: decoding with a cache gives the full forward pass's logits."""

import numpy as np
import pytest

from attnlab import multi_head_attention, scaled_dot_product_attention
from attnlab.inference import (
    EMPTY,
    band_mask,
    cache_slots,
    decode,
    empty_cache,
    generate,
    online_softmax_attention,
    receptive_field,
)
from attnlab.model import ModelConfig, forward, init_params, layer_projections
from attnlab.positional import alibi_bias, lookup_positions, sinusoidal_encoding

T = 12
# (positional, extra config): every scheme the model supports, RoPE with each scaling.
SCHEMES = [
    ("none", {}),
    ("sinusoidal", {}),
    ("learned", {}),
    ("rope", {}),
    ("rope", {"rope_scale": 2.0}),
    ("rope", {"rope_scale": 2.0, "rope_scaling": "ntk"}),
    ("rope", {"rope_scale": 2.0, "rope_scaling": "yarn", "rope_original_max_len": 8}),
    ("alibi", {}),
]


def make(positional, extra, n_kv_heads=2, n_layers=2):
    config = ModelConfig(vocab_size=11, d_model=16, n_heads=4, n_layers=n_layers, max_len=T,
                         positional=positional, n_kv_heads=n_kv_heads, dtype="float64",
                         **extra)
    rng = np.random.default_rng(0)
    return config, init_params(config, rng), rng.integers(0, 11, size=(3, T))


def decode_all(params, tokens, config, split, **cache_kwargs):
    """Prefill the first ``split`` tokens, then one token per call; all logits."""
    cache = empty_cache(config, tokens.shape[0], **cache_kwargs)
    step = decode(params, tokens[:, :split], cache, config)
    logits = [step.logits]
    for t in range(split, tokens.shape[1]):
        step = decode(params, tokens[:, t:t + 1], step.cache, config)
        logits.append(step.logits)
    return np.concatenate(logits, axis=1), step.cache


@pytest.mark.parametrize("positional, extra", SCHEMES)
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cached_decoding_equals_the_full_forward(positional, extra, n_kv_heads):
    config, params, tokens = make(positional, extra, n_kv_heads)
    full = forward(params, tokens, config).logits  # (B, T, V)
    for split in (1, 5, T):
        cached, cache = decode_all(params, tokens, config, split)
        np.testing.assert_allclose(cached, full, rtol=0, atol=1e-10)
        assert cache.length == T


def reference_with_mask(params, tokens, config, mask):
    """The full forward pass with ``mask`` (T, T) instead of the causal mask."""
    T_ = tokens.shape[1]
    x = params["embed"][tokens]
    if config.positional == "sinusoidal":
        x = x + sinusoidal_encoding(T_, config.d_model)
    elif config.positional == "learned":
        x = x + lookup_positions(params["pos"], np.arange(T_))
    bias = alibi_bias(config.n_heads, T_) if config.positional == "alibi" else None
    for layer in range(config.n_layers):
        out, _ = multi_head_attention(x, layer_projections(params, layer), config.n_heads,
                                      n_kv_heads=config.n_kv_heads, mask=mask,
                                      rope=config.rope, bias=bias)
        x = x + out
    return x @ params["unembed"]


@pytest.mark.parametrize("positional, extra", SCHEMES)
@pytest.mark.parametrize("window, sinks", [(1, 0), (3, 0), (4, 1), (5, 2)])
def test_a_rolling_buffer_equals_full_attention_with_a_band_mask(positional, extra, window,
                                                                 sinks):
    config, params, tokens = make(positional, extra)
    want = reference_with_mask(params, tokens, config, band_mask(T, window, sinks))
    for split in (1, 7):
        got, cache = decode_all(params, tokens, config, split, window=window, sinks=sinks)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
        # the memory stopped growing: sinks + W slots, every one of them used
        assert cache.layers[0].k.shape[2] == sinks + window
        assert (cache.layers[0].positions != EMPTY).all()


def test_the_window_forgets_what_left_it():
    config, params, tokens = make("rope", {})
    _, cache = decode_all(params, tokens, config, 1, window=3, sinks=1)
    assert sorted(cache.layers[1].positions) == [0, T - 3, T - 2, T - 1]


def test_cache_slots_roll_after_the_sinks():
    np.testing.assert_array_equal(cache_slots(np.arange(9), 5, window=3, sinks=2),
                                  [0, 1, 2, 3, 4, 2, 3, 4, 2])
    np.testing.assert_array_equal(cache_slots(np.arange(4), 5, None, 0), np.arange(4))


def test_receptive_field_grows_with_depth():
    assert receptive_field(4096, 32) == 32 * 4095 + 1
    # the mask of two stacked windows of 3: position 8 reaches back to 4
    m = band_mask(9, 3).astype(int)
    reach = (m @ m)[8]
    assert np.flatnonzero(reach).min() == 9 - receptive_field(3, 2)


def test_generate_matches_greedy_decoding_without_a_cache():
    config, params, tokens = make("rope", {})
    out = generate(params, tokens[:, :4], config, 5)
    seq = tokens[:, :4]
    for _ in range(5):
        nxt = forward(params, seq, config).logits[:, -1].argmax(-1)[:, None]
        seq = np.concatenate([seq, nxt], axis=1)
    np.testing.assert_array_equal(out, seq)


@pytest.mark.parametrize("bad, message", [
    (dict(window=0), "window"),
    (dict(sinks=2), "sinks=2"),
    (dict(sinks=-1, window=2), "sinks"),
    (dict(capacity=3, window=4), "capacity=3"),
])
def test_bad_cache_arguments_name_the_argument(bad, message):
    config, _, _ = make("none", {})
    with pytest.raises(ValueError, match=message):
        empty_cache(config, 2, **bad)


@pytest.mark.parametrize("func", ["band_mask", "cache_slots"])
@pytest.mark.parametrize("bad, message", [
    (dict(window=0, sinks=0), "window=0"),
    (dict(window=-2, sinks=0), "window=-2"),
    (dict(window=2.5, sinks=0), "window=2.5"),
    (dict(window=2, sinks=-1), "sinks=-1"),
    (dict(window=None, sinks=-1), "sinks=-1"),
])
def test_a_window_below_one_or_negative_sinks_are_refused_naming_the_value(func, bad,
                                                                           message):
    # a window of 0 would see nothing (band_mask) or divide by zero (cache_slots)
    with pytest.raises(ValueError, match=message):
        if func == "band_mask":
            band_mask(4, **bad)
        else:
            cache_slots(np.arange(5), 5, **bad)


def test_a_cache_of_the_wrong_shape_or_a_position_going_back_is_refused():
    config, params, tokens = make("rope", {})
    cache = empty_cache(config, 2)  # two sequences; tokens has three
    with pytest.raises(ValueError, match="B=3"):
        decode(params, tokens, cache, config)
    step = decode(params, tokens[:, :4], empty_cache(config, 3), config)
    back = step.cache._replace(length=2)  # the cache holds position 3 already
    with pytest.raises(ValueError, match="前に戻れません"):
        decode(params, tokens[:, 4:5], back, config)
    with pytest.raises(ValueError, match="capacity"):
        decode(params, tokens[:, :5], empty_cache(config, 3, capacity=4), config)


@pytest.mark.parametrize("block_size", [1, 3, 16, 64])
def test_online_softmax_equals_the_softmax(block_size):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, n, 8)) for n in (10, 37, 37))
    k[..., 5, :] *= 300  # very large scores: the running maximum must rescale
    mask = rng.random((10, 37)) < 0.5
    mask[:, 36] = True  # every query keeps a key
    mask[:, :16] = False  # whole blocks masked for every query
    want, _ = scaled_dot_product_attention(q, k, v, mask)
    got = online_softmax_attention(q, k, v, mask, block_size=block_size)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_online_softmax_refuses_a_query_with_no_key():
    q = k = v = np.ones((2, 4))
    with pytest.raises(ValueError, match="すべて隠して"):
        online_softmax_attention(q, k, v, np.zeros((2, 2), dtype=bool), block_size=1)


def test_band_mask_sees_the_window_and_the_sinks():
    want = np.array([[1, 0, 0, 0, 0],
                     [1, 1, 0, 0, 0],
                     [1, 1, 1, 0, 0],
                     [1, 0, 1, 1, 0],
                     [1, 0, 0, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(band_mask(5, 2, sinks=1), want)


# --- MLA ---------------------------------------------------------------------------------------

def mla_setup():
    from attnlab.inference import init_mla
    from attnlab.positional import RoPE
    rng = np.random.default_rng(3)
    weights = init_mla(32, 4, 8, 4, 12, 16, rng=rng)
    return weights, RoPE(), rng.standard_normal((2, 9, 32))


def test_mla_equals_attention_over_the_reconstructed_keys():
    from attnlab.inference import mla_attention
    weights, rope, x = mla_setup()
    out, cache = mla_attention(x, weights, 4, rope=rope)
    # the same thing written as ordinary attention: per-head keys [k_C ; k_R]
    H, T = 4, x.shape[1]
    c_q = x @ weights.w_dq
    q = np.concatenate([np.stack(np.split(c_q @ weights.w_uq, H, -1), 1),
                        rope.apply(np.stack(np.split(c_q @ weights.w_qr, H, -1), 1),
                                   np.arange(T))], axis=-1)
    k_c = np.stack(np.split(cache.latent @ weights.w_uk, H, -1), 1)
    k = np.concatenate([k_c, np.broadcast_to(cache.k_rope[:, None], (2, H, T, 4))], -1)
    v = np.stack(np.split(cache.latent @ weights.w_uv, H, -1), 1)
    heads, _ = scaled_dot_product_attention(q, k, v, np.tril(np.ones((T, T), bool)))
    want = np.concatenate(list(np.moveaxis(heads, 1, 0)), -1) @ weights.w_o
    np.testing.assert_allclose(out, want, atol=1e-12)


def test_absorbed_scores_equal_the_unabsorbed_ones():
    from attnlab.inference import mla_absorbed_scores, mla_attention
    weights, rope, x = mla_setup()
    H, T = 4, x.shape[1]
    _, cache = mla_attention(x, weights, H, rope=rope)
    got = mla_absorbed_scores(x[:, -3:], cache, weights, H, rope=rope,
                              positions=np.arange(T - 3, T))
    c_q = x[:, -3:] @ weights.w_dq
    q_c = np.stack(np.split(c_q @ weights.w_uq, H, -1), 1)
    q_r = rope.apply(np.stack(np.split(c_q @ weights.w_qr, H, -1), 1), np.arange(T - 3, T))
    k_c = np.stack(np.split(cache.latent @ weights.w_uk, H, -1), 1)
    want = (q_c @ k_c.mT + q_r @ cache.k_rope[:, None].mT) / np.sqrt(8 + 4)
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_rope_on_the_content_key_cannot_be_absorbed():
    """Rotating k_C by its position: the absorbed product would have to change with m − n."""
    from attnlab.positional import RoPE
    rng = np.random.default_rng(4)
    w_uq, w_uk = rng.standard_normal((6, 8)), rng.standard_normal((5, 8))
    c_q, c_kv = rng.standard_normal(6), rng.standard_normal(5)
    rope = RoPE()
    absorbed = w_uq @ w_uk.T  # (d_cq, d_c)
    for m, n in [(3, 1), (7, 2)]:
        rotated = (rope.apply((c_q @ w_uq)[None], [m])[0]
                   @ rope.apply((c_kv @ w_uk)[None], [n])[0])
        assert not np.isclose(rotated, c_q @ absorbed @ c_kv)


def test_deepseek_v2_caches_what_the_paper_says():
    from attnlab.inference import cached_values_per_token
    # DeepSeek-V2: 128 heads of 128, d_c = 4·128 = 512, Dr = 64: 576 per token and layer,
    # "equivalent to GQA with only 2.25 groups" (the paper's Table 1)
    mla = cached_values_per_token("mla", n_heads=128, d_head=128, d_latent=512, d_rope=64)
    gqa = cached_values_per_token("gqa", n_heads=128, d_head=128, n_kv_heads=1)
    assert mla == 576 and mla / gqa == 2.25
    assert cached_values_per_token("mha", n_heads=128, d_head=128) / mla == 32768 / 576


def test_mla_refuses_a_latent_wider_than_the_model():
    from attnlab.inference import init_mla
    with pytest.raises(ValueError, match="d_c=40"):
        init_mla(32, 4, 8, 4, 40, 16, rng=np.random.default_rng(0))


def test_decode_refuses_the_t5_bias_it_does_not_compute():
    config, params, tokens = make("t5", {})
    with pytest.raises(ValueError, match="positional='t5'"):
        decode(params, tokens, empty_cache(config, tokens.shape[0]), config)
