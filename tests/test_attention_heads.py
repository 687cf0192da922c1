"""Correctness of multi-head attention in attnlab.attention: heads, GQA/MQA, costs."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.attention import (
    MHAProjections,
    causal_mask,
    head_counts,
    init_mha,
    mean_pool_kv,
    merge_heads,
    multi_head_attention,
    multi_head_attention_loop,
    scaled_dot_product_attention,
    split_heads,
)
from attnlab.costs import kv_cache_bytes, mha_cost
from attnlab.positional import RoPE, alibi_bias, sinusoidal_encoding


@st.composite
def mha_setups(draw, even_head=False):
    """(x, weights, n_heads, n_kv_heads) for a random small layer, with or without batch."""
    n_kv_heads = draw(st.sampled_from([1, 2, 3]))
    group = draw(st.sampled_from([1, 2, 4]))
    n_heads = n_kv_heads * group
    d_head = draw(st.sampled_from([2, 4, 6] if even_head else [1, 2, 3, 4]))
    T = draw(st.integers(1, 6))
    lead = draw(st.sampled_from([(), (2,), (2, 3)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d_model = n_heads * d_head
    x = rng.normal(size=(*lead, T, d_model))
    weights = init_mha(d_model, n_heads, n_kv_heads, rng=rng)
    return x, weights, n_heads, n_kv_heads


def repeat_kv_heads(weights: MHAProjections, n_heads: int, n_kv_heads: int) -> MHAProjections:
    """The plain-MHA weights that GQA stands for: each K/V head copied to its query heads."""
    d_model = weights.w_q.shape[0]
    d_head = d_model // n_heads

    def repeat(w):
        blocks = w.reshape(d_model, n_kv_heads, d_head)
        return np.repeat(blocks, n_heads // n_kv_heads, axis=1).reshape(d_model, d_model)

    return weights._replace(w_k=repeat(weights.w_k), w_v=repeat(weights.w_v))


# --- split and merge ---------------------------------------------------------------------

@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4), st.sampled_from([(), (2,), (3, 2)]))
def test_merge_heads_undoes_split_heads(n_heads, T, d_head, lead):
    x = np.arange(np.prod(lead, dtype=int) * T * n_heads * d_head, dtype=float)
    x = x.reshape(*lead, T, n_heads * d_head)
    heads = split_heads(x, n_heads)
    assert heads.shape == (*lead, n_heads, T, d_head)
    np.testing.assert_array_equal(merge_heads(heads), x)


def test_head_counts_of_the_article_and_of_gqa():
    assert head_counts(512, 8) == (8, 8, 64)
    assert head_counts(512, 8, 2) == (8, 2, 64)
    assert head_counts(4096, 32, 8).d_head == 128


def test_head_i_holds_column_block_i():
    x = np.arange(2 * 12, dtype=float).reshape(2, 12)  # (T, D)
    heads = split_heads(x, 3)  # (H, T, Dh)
    for i in range(3):
        np.testing.assert_array_equal(heads[i], x[:, 4 * i : 4 * (i + 1)])


# --- batched equals loop, one head, GQA ---------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(mha_setups(even_head=True), st.booleans(), st.booleans(), st.booleans())
def test_loop_over_heads_equals_the_batched_version(setup, causal, use_rope, use_bias):
    x, weights, n_heads, n_kv_heads = setup
    T = x.shape[-2]
    kwargs = {
        "n_kv_heads": n_kv_heads,
        "mask": causal_mask(T) if causal else None,
        "rope": RoPE(convention="half", scale=2.0) if use_rope else None,
        "bias": alibi_bias(n_heads, T) if use_bias else None,
    }
    out, attn = multi_head_attention(x, weights, n_heads, **kwargs)
    out_loop, attn_loop = multi_head_attention_loop(x, weights, n_heads, **kwargs)
    assert out.shape == x.shape and attn.shape == (*x.shape[:-2], n_heads, T, T)
    np.testing.assert_allclose(out, out_loop, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(attn, attn_loop, rtol=1e-10, atol=1e-12)


def test_one_head_is_scaled_dot_product_attention_then_w_o():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 8))
    w = init_mha(8, 1, rng=rng)
    out, attn = multi_head_attention(x, w, 1, mask=causal_mask(5))
    head, weights = scaled_dot_product_attention(x @ w.w_q, x @ w.w_k, x @ w.w_v,
                                                 mask=causal_mask(5))
    np.testing.assert_allclose(out, head @ w.w_o)
    np.testing.assert_allclose(attn[0], weights)


def test_concat_times_w_o_is_the_sum_over_heads_of_their_row_blocks():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 12))
    w = init_mha(12, 3, rng=rng)
    out, _ = multi_head_attention(x, w, 3)
    per_head = []
    for i in range(3):
        cols = slice(4 * i, 4 * (i + 1))
        head, _ = scaled_dot_product_attention(x @ w.w_q[:, cols], x @ w.w_k[:, cols],
                                               x @ w.w_v[:, cols])
        per_head.append(head @ w.w_o[cols, :])  # (T, Dh) @ (Dh, D)
    np.testing.assert_allclose(out, sum(per_head))


@settings(max_examples=40, deadline=None)
@given(mha_setups())
def test_gqa_is_mha_with_each_kv_head_repeated_for_its_group(setup):
    x, weights, n_heads, n_kv_heads = setup
    out, attn = multi_head_attention(x, weights, n_heads, n_kv_heads=n_kv_heads)
    full = repeat_kv_heads(weights, n_heads, n_kv_heads)
    out_mha, attn_mha = multi_head_attention(x, full, n_heads)
    np.testing.assert_allclose(out, out_mha, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(attn, attn_mha, rtol=1e-10, atol=1e-12)


def test_n_kv_heads_equal_to_n_heads_is_plain_mha():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, 8))
    w = init_mha(8, 4, rng=rng)
    out, attn = multi_head_attention(x, w, 4, n_kv_heads=4)
    out_default, attn_default = multi_head_attention(x, w, 4)
    np.testing.assert_array_equal(out, out_default)
    np.testing.assert_array_equal(attn, attn_default)


def test_one_kv_head_is_mqa_every_query_head_reads_the_same_keys():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 8))
    w = init_mha(8, 4, 1, rng=rng)
    assert w.w_k.shape == w.w_v.shape == (8, 2)
    out, attn = multi_head_attention(x, w, 4, n_kv_heads=1)
    k, v = x @ w.w_k, x @ w.w_v  # the single K/V head: (T, Dh)
    heads = []
    for i in range(4):
        head, weights = scaled_dot_product_attention(x @ w.w_q[:, 2 * i : 2 * i + 2], k, v)
        np.testing.assert_allclose(attn[i], weights)
        heads.append(head)
    np.testing.assert_allclose(out, np.concatenate(heads, axis=-1) @ w.w_o)


@given(mha_setups())
def test_mean_pooling_identical_kv_heads_changes_nothing(setup):
    x, small, n_heads, n_kv_heads = setup
    full = repeat_kv_heads(small, n_heads, n_kv_heads)  # identical K/V heads in each group
    pooled = mean_pool_kv(full, n_heads, n_kv_heads)
    np.testing.assert_allclose(pooled.w_k, small.w_k, rtol=1e-12, atol=1e-15)
    out_full, _ = multi_head_attention(x, full, n_heads)
    out_pooled, _ = multi_head_attention(x, pooled, n_heads, n_kv_heads=n_kv_heads)
    np.testing.assert_allclose(out_pooled, out_full, rtol=1e-10, atol=1e-12)


def test_mean_pooling_averages_the_column_blocks_of_each_group():
    rng = np.random.default_rng(4)
    w = init_mha(8, 4, rng=rng)  # Dh = 2
    pooled = mean_pool_kv(w, 4, 2)
    np.testing.assert_allclose(pooled.w_k[:, 0:2], (w.w_k[:, 0:2] + w.w_k[:, 2:4]) / 2)
    np.testing.assert_allclose(pooled.w_v[:, 2:4], (w.w_v[:, 4:6] + w.w_v[:, 6:8]) / 2)
    np.testing.assert_array_equal(pooled.w_q, w.w_q)
    np.testing.assert_array_equal(pooled.w_o, w.w_o)


# --- order: permutation equivariance and what breaks it ---------------------------------

@settings(max_examples=40, deadline=None)
@given(mha_setups(), st.integers(0, 2**32 - 1))
def test_without_positions_and_mask_attention_is_permutation_equivariant(setup, seed):
    x, weights, n_heads, n_kv_heads = setup
    perm = np.random.default_rng(seed).permutation(x.shape[-2])
    out, attn = multi_head_attention(x, weights, n_heads, n_kv_heads=n_kv_heads)
    out_p, attn_p = multi_head_attention(x[..., perm, :], weights, n_heads, n_kv_heads=n_kv_heads)
    np.testing.assert_allclose(out_p, out[..., perm, :], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(attn_p, attn[..., perm, :][..., perm], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("breaker", ["sinusoidal", "rope", "causal"])
def test_positions_or_a_causal_mask_break_permutation_equivariance(breaker):
    rng = np.random.default_rng(6)
    T, D = 6, 8
    x = rng.normal(size=(T, D))
    w = init_mha(D, 2, rng=rng)
    perm = np.array([1, 0, 2, 3, 4, 5])  # swap the first two tokens
    kwargs = {"rope": RoPE()} if breaker == "rope" else {}
    if breaker == "causal":
        kwargs["mask"] = causal_mask(T)
    pe = sinusoidal_encoding(T, D) if breaker == "sinusoidal" else 0.0

    def run(tokens):
        out, _ = multi_head_attention(tokens + pe, w, 2, **kwargs)
        return out

    assert not np.allclose(run(x[perm]), run(x)[perm])
    if breaker == "causal":  # tokens after the swapped pair see the same set: unchanged
        np.testing.assert_allclose(run(x[perm])[2:], run(x)[2:])


# --- float32 ----------------------------------------------------------------------------------

def test_rope_positions_per_batch_row_equal_separate_calls():
    rng = np.random.default_rng(12)
    x = rng.normal(size=(2, 5, 8))
    w = init_mha(8, 2, rng=rng)
    pos = np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])  # (B, T)
    out, _ = multi_head_attention(x, w, 2, rope=RoPE(), positions=pos)
    for b in range(2):
        out_b, _ = multi_head_attention(x[b], w, 2, rope=RoPE(), positions=pos[b])
        np.testing.assert_allclose(out[b], out_b)


def test_shifting_every_rope_position_changes_nothing():
    rng = np.random.default_rng(13)
    x = rng.normal(size=(6, 8))
    w = init_mha(8, 2, rng=rng)
    out, attn = multi_head_attention(x, w, 2, rope=RoPE(), mask=causal_mask(6))
    out_s, attn_s = multi_head_attention(x, w, 2, rope=RoPE(), mask=causal_mask(6),
                                         positions=np.arange(6) + 1000)
    np.testing.assert_allclose(attn_s, attn, atol=1e-10)
    np.testing.assert_allclose(out_s, out, atol=1e-10)


@pytest.mark.parametrize("fn", [multi_head_attention, multi_head_attention_loop])
def test_float32_stays_float32(fn):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 5, 8)).astype(np.float32)
    w = init_mha(8, 4, 2, rng=rng, dtype=np.float32)
    out, attn = fn(x, w, 4, n_kv_heads=2, mask=causal_mask(5), rope=RoPE(),
                   bias=alibi_bias(4, 5))
    assert out.dtype == np.float32 and attn.dtype == np.float32
    out64, _ = fn(x.astype(np.float64), MHAProjections(*(a.astype(np.float64) for a in w)), 4,
                  n_kv_heads=2, mask=causal_mask(5), rope=RoPE(), bias=alibi_bias(4, 5))
    np.testing.assert_allclose(out, out64, rtol=1e-4, atol=1e-5)


def test_init_mha_shapes_and_scale():
    w = init_mha(512, 8, 2, rng=np.random.default_rng(8))
    assert [a.shape for a in w] == [(512, 512), (512, 128), (512, 128), (512, 512)]
    assert abs(w.w_q.std() * np.sqrt(512) - 1) < 0.01


def test_init_mha_is_deterministic_for_a_seed():
    a = init_mha(16, 4, rng=np.random.default_rng(9))
    b = init_mha(16, 4, rng=np.random.default_rng(9))
    for wa, wb in zip(a, b, strict=True):
        np.testing.assert_array_equal(wa, wb)


# --- costs -------------------------------------------------------------------------------------

def counted_mha(x, w, n_heads, n_kv_heads):
    """Multi-head attention in scalar Python loops, counting every multiply-add by stage."""
    T, D = x.shape
    d_head = D // n_heads
    group = n_heads // n_kv_heads
    macs = dict.fromkeys(["q_proj", "k_proj", "v_proj", "scores", "weighted_sum", "out_proj"], 0)

    def matmul(a, b, stage):
        out = np.zeros((a.shape[0], b.shape[1]))
        for i, j, t in itertools.product(range(a.shape[0]), range(b.shape[1]), range(a.shape[1])):
            out[i, j] += a[i, t] * b[t, j]
            macs[stage] += 1
        return out

    q = matmul(x, w.w_q, "q_proj")
    k = matmul(x, w.w_k, "k_proj")
    v = matmul(x, w.w_v, "v_proj")
    heads = []
    for h in range(n_heads):
        c = slice(h * d_head, (h + 1) * d_head)
        kv = slice((h // group) * d_head, (h // group + 1) * d_head)
        scores = matmul(q[:, c], k[:, kv].T, "scores") / np.sqrt(d_head)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        heads.append(matmul(e / e.sum(axis=-1, keepdims=True), v[:, kv], "weighted_sum"))
    out = matmul(np.concatenate(heads, axis=-1), w.w_o, "out_proj")
    return out, macs


@pytest.mark.parametrize(("d_model", "n_heads", "n_kv_heads", "T"),
                         [(4, 1, None, 3), (6, 3, None, 4), (8, 4, 2, 5), (8, 4, 1, 2)])
def test_cost_formulas_match_counted_multiply_adds(d_model, n_heads, n_kv_heads, T):
    rng = np.random.default_rng(10)
    x = rng.normal(size=(T, d_model))
    w = init_mha(d_model, n_heads, n_kv_heads, rng=rng)
    out, macs = counted_mha(x, w, n_heads, n_kv_heads or n_heads)
    np.testing.assert_allclose(out, multi_head_attention(x, w, n_heads, n_kv_heads=n_kv_heads)[0])
    cost = mha_cost(d_model, n_heads, T, n_kv_heads)
    for stage, count in macs.items():
        assert cost.flops[stage] == 2 * count, stage
    assert cost.flops["total"] == 2 * sum(macs.values())
    assert cost.params["total"] == sum(a.size for a in w)
    assert {k: cost.params[k] for k in MHAProjections._fields} == {
        k: getattr(w, k).size for k in MHAProjections._fields}


def test_cost_does_not_depend_on_the_number_of_heads():
    costs = [mha_cost(512, h, 128) for h in (1, 2, 4, 8, 16)]
    assert len({c.flops["total"] for c in costs}) == 1
    assert len({c.params["total"] for c in costs}) == 1


def test_cost_scales_with_batch():
    one, eight = mha_cost(64, 4, 10, batch_size=1), mha_cost(64, 4, 10, batch_size=8)
    assert eight.flops["total"] == 8 * one.flops["total"]
    assert eight.params == one.params


def test_kv_cache_bytes_of_published_configurations():
    # 2 (K and V) x layers x K/V heads x head dim x tokens x bytes (FACTS.md)
    assert kv_cache_bytes(32, 32, 128, 1) == 524_288  # Llama 2 7B: 512 KiB per token
    assert kv_cache_bytes(32, 8, 128, 1) == 131_072  # Llama 3 8B, Mistral 7B: 128 KiB
    assert kv_cache_bytes(80, 8, 128, 4096, batch_size=2) == 2 * 80 * 8 * 128 * 4096 * 2 * 2


# --- bad input ------------------------------------------------------------------------------

def _layer(d_model=8, n_heads=4, n_kv_heads=None):
    rng = np.random.default_rng(11)
    return rng.normal(size=(5, d_model)), init_mha(d_model, n_heads, n_kv_heads, rng=rng)


def _hide_query(i, T=5):
    mask = causal_mask(T)
    mask[i] = False
    return mask


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: init_mha(10, 3, rng=np.random.default_rng()),
         "d_model=10 は n_heads=3 で割り切れません"),
        (lambda: init_mha(12, 6, 4, rng=np.random.default_rng()),
         "n_heads=6 は n_kv_heads=4 で割り切れません"),
        (lambda: init_mha(8, 0, rng=np.random.default_rng()), "n_heads=0"),
        (lambda: init_mha(8, 2, rng=7), "rng="),
        (lambda: split_heads(np.zeros((3, 10)), 4), "d_model=10 は n_heads=4"),
        (lambda: merge_heads(np.zeros((3, 4))), r"x\.shape=\(3, 4\)"),
        (lambda: multi_head_attention(*_layer(), 3), "d_model=8 は n_heads=3"),
        (lambda: multi_head_attention(*_layer(), 4, n_kv_heads=3), "n_heads=4 は n_kv_heads=3"),
        (lambda: multi_head_attention(*_layer(n_kv_heads=2), 4),
         r"proj\.w_k の形 \(8, 4\)"),
        (lambda: multi_head_attention(_layer()[0][:, :6], _layer()[1], 2),
         r"proj\.w_q の形 \(8, 8\)"),
        (lambda: multi_head_attention(np.zeros(8), _layer()[1], 4), r"x\.shape=\(8,\)"),
        (lambda: multi_head_attention(*_layer(), 4, mask=np.ones((4, 4), dtype=bool)),
         r"mask の形 \(4, 4\)"),
        (lambda: multi_head_attention(*_layer(), 4, mask=np.ones((5, 5))), "mask.dtype=float64"),
        (lambda: multi_head_attention(*_layer(), 4, mask=_hide_query(2)),
         "クエリ位置 2 のキーをすべて"),
        (lambda: multi_head_attention(*_layer(), 4, bias=np.zeros((3, 5, 5))),
         r"bias の形 \(3, 5, 5\)"),
        (lambda: multi_head_attention(*_layer(), 4, positions=np.arange(5)), "rope=None"),
        (lambda: multi_head_attention(*_layer(), 4, rope=RoPE(), positions=np.arange(4)),
         "系列長 T=5"),
        (lambda: multi_head_attention(*_layer(), 4, rope=RoPE(), positions=np.zeros((2, 5))),
         r"positions の形 \(2, 5\)"),
        (lambda: multi_head_attention(*_layer(12, 4), 4, rope=RoPE()), "d_head=3"),
        (lambda: multi_head_attention(*_layer(), 4, rope="yes"), "rope="),
        (lambda: multi_head_attention(_layer()[0] * np.nan, _layer()[1], 4), "x に NaN"),
        (lambda: multi_head_attention(_layer()[0], (1, 2), 4), "MHAProjections"),
        (lambda: mean_pool_kv(_layer()[1], 4, 3), "n_heads=4 は n_kv_heads=3"),
        (lambda: mha_cost(8, 4, 0), "seq_len=0"),
        (lambda: kv_cache_bytes(32, 8, 128, 1, bytes_per_value=0), "bytes_per_value=0"),
    ],
)
def test_bad_input_gets_a_japanese_error_naming_the_value(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()
