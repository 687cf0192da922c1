"""Correctness of attnlab.attention: softmax, causal_mask, scaled_dot_product_attention."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from attnlab import causal_mask, scaled_dot_product_attention, softmax

finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=64)
score_arrays = arrays(np.float64, array_shapes(min_dims=1, max_dims=3, max_side=6), elements=finite)


def reference_attention(q, k, v, mask=None):
    """Query-by-query attention with Python loops, written for clarity only."""
    n_q, d_k = q.shape
    out = np.zeros((n_q, v.shape[1]))
    weights = np.zeros((n_q, k.shape[0]))
    for i in range(n_q):
        scores = np.array([q[i] @ k[j] / np.sqrt(d_k) for j in range(k.shape[0])])
        if mask is not None:
            scores = np.where(mask[i], scores, -np.inf)
        e = np.exp(scores - scores.max())
        weights[i] = e / e.sum()
        out[i] = weights[i] @ v
    return out, weights


# --- softmax ---------------------------------------------------------------------------

@given(score_arrays)
def test_softmax_rows_sum_to_one(x):
    p = softmax(x, axis=-1)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)
    assert np.all(p >= 0)


@given(score_arrays, st.floats(min_value=-1e3, max_value=1e3))
def test_softmax_ignores_an_added_constant(x, c):
    np.testing.assert_allclose(softmax(x + c), softmax(x), atol=1e-9)


@given(score_arrays)
def test_softmax_along_axis_zero_is_the_transpose(x):
    if x.ndim < 2:
        return
    np.testing.assert_allclose(softmax(x, axis=0), np.swapaxes(softmax(np.swapaxes(x, 0, -1)),
                                                                 0, -1))


def test_softmax_is_finite_at_large_magnitudes():
    for dtype in (np.float32, np.float64):
        x = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]], dtype=dtype)
        p = softmax(x)
        assert np.all(np.isfinite(p))
        np.testing.assert_allclose(p, [[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)


def test_softmax_keeps_float32():
    x = np.ones((2, 3), dtype=np.float32)
    assert softmax(x).dtype == np.float32


def test_softmax_gives_zero_weight_to_minus_infinity():
    p = softmax(np.array([0.0, -np.inf, 0.0]))
    np.testing.assert_array_equal(p, [0.5, 0.0, 0.5])


def test_softmax_of_equal_scores_is_uniform():
    np.testing.assert_allclose(softmax(np.full(5, 3.7)), np.full(5, 0.2))


@pytest.mark.parametrize(
    ("x", "kwargs", "fragment"),
    [
        (np.array([[0.0, 1.0]]), {"axis": 2}, "axis=2"),
        (np.array(1.0), {}, "ndim=0"),
        (np.array([-np.inf, -np.inf]), {}, "-inf"),
        (np.array([0.0, np.nan]), {}, "NaN"),
        (np.array(["a", "b"]), {}, "dtype="),
        (np.zeros((2, 0)), {}, "長さが 0"),
    ],
)
def test_softmax_rejects_bad_input_in_japanese(x, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        softmax(x, **kwargs)


# --- causal_mask -----------------------------------------------------------------------

@given(st.integers(min_value=1, max_value=40))
def test_causal_mask_allows_exactly_keys_up_to_the_query(T):
    mask = causal_mask(T)
    i, j = np.indices((T, T))
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, j <= i)


@pytest.mark.parametrize("T", [0, -3, 2.5, "4", True, None])
def test_causal_mask_rejects_a_bad_length(T):
    with pytest.raises(ValueError, match="seq_len="):
        causal_mask(T)


# --- scaled_dot_product_attention ------------------------------------------------------

@st.composite
def qkv(draw):
    n_q = draw(st.integers(1, 6))
    n_k = draw(st.integers(1, 6))
    d_k = draw(st.integers(1, 8))
    d_v = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([0.1, 1.0, 10.0]))
    return (scale * rng.normal(size=(n_q, d_k)), scale * rng.normal(size=(n_k, d_k)),
            rng.normal(size=(n_k, d_v)))


@given(qkv())
def test_attention_equals_the_query_by_query_reference(data):
    q, k, v = data
    out, weights = scaled_dot_product_attention(q, k, v)
    ref_out, ref_weights = reference_attention(q, k, v)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out, ref_out, rtol=1e-9, atol=1e-12)


@given(qkv())
def test_each_output_is_a_weighted_average_of_the_values(data):
    q, k, v = data
    out, weights = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0)
    tol = 1e-9 * (1 + np.abs(v).max())
    assert np.all(out >= v.min(axis=0) - tol)
    assert np.all(out <= v.max(axis=0) + tol)


def test_attention_divides_the_scores_by_sqrt_d_k():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 16)), rng.normal(size=(5, 16)), rng.normal(size=(5, 2))
    _, weights = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(weights, softmax(q @ k.T / 4.0))


def test_leading_axes_broadcast_like_separate_calls():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 3, 4, 8))  # (B, H, Tq, Dh)
    k = rng.normal(size=(2, 3, 5, 8))
    v = rng.normal(size=(2, 3, 5, 6))
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 6) and weights.shape == (2, 3, 4, 5)
    for b in range(2):
        for h in range(3):
            o, w = scaled_dot_product_attention(q[b, h], k[b, h], v[b, h])
            np.testing.assert_allclose(out[b, h], o)
            np.testing.assert_allclose(weights[b, h], w)


def test_float32_in_gives_float32_out():
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(4, 8)).astype(np.float32) for _ in range(3))
    out, weights = scaled_dot_product_attention(q, k, v, mask=causal_mask(4))
    assert out.dtype == np.float32 and weights.dtype == np.float32


@given(qkv())
def test_masked_keys_get_exactly_zero_weight(data):
    q, k, v = data
    n_q, n_k = q.shape[0], k.shape[0]
    rng = np.random.default_rng(n_q * 7 + n_k)
    mask = rng.random((n_q, n_k)) < 0.5
    mask[np.arange(n_q), rng.integers(0, n_k, n_q)] = True  # every query keeps one key
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.all(weights[~mask] == 0.0)
    ref_out, ref_weights = reference_attention(q, k, v, mask)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out, ref_out, rtol=1e-9, atol=1e-12)


def test_with_a_causal_mask_the_future_does_not_change_the_past():
    rng = np.random.default_rng(3)
    T, d = 6, 4
    x = rng.normal(size=(T, d))
    out, _ = scaled_dot_product_attention(x, x, x, mask=causal_mask(T))
    x_changed = x.copy()
    x_changed[-1] += 10.0  # change only the last token
    out_changed, _ = scaled_dot_product_attention(x_changed, x_changed, x_changed,
                                                  mask=causal_mask(T))
    np.testing.assert_array_equal(out[:-1], out_changed[:-1])
    assert not np.allclose(out[-1], out_changed[-1])


def test_first_query_under_a_causal_mask_returns_the_first_value():
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    out, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    np.testing.assert_allclose(out[0], v[0])


def test_an_all_hidden_query_is_located_in_the_batch():
    q = k = v = np.zeros((2, 3, 4, 8))
    mask = np.ones((2, 3, 4, 4), dtype=bool)
    mask[1, 2, 3] = False
    with pytest.raises(ValueError, match=r"先頭の軸の番号 \(1, 2\) のクエリ位置 3"):
        scaled_dot_product_attention(q, k, v, mask=mask)


def test_a_mask_broadcasts_over_batch_and_heads():
    rng = np.random.default_rng(5)
    q = k = v = rng.normal(size=(2, 3, 4, 8))
    out, weights = scaled_dot_product_attention(q, k, v, mask=causal_mask(4))
    assert np.all(np.triu(weights[1, 2], k=1) == 0.0)
    o, _ = scaled_dot_product_attention(q[1, 2], k[1, 2], v[1, 2], mask=causal_mask(4))
    np.testing.assert_allclose(out[1, 2], o)


@pytest.mark.parametrize(
    ("shapes", "mask", "fragment"),
    [
        (((3, 4), (5, 6), (5, 2)), None, r"q\.shape=\(3, 4\), k\.shape=\(5, 6\)"),
        (((3, 4), (5, 4), (6, 2)), None, r"k\.shape=\(5, 4\), v\.shape=\(6, 2\)"),
        (((4,), (5, 4), (5, 2)), None, r"q\.shape=\(4,\)"),
        (((2, 3, 4), (3, 5, 4), (3, 5, 2)), None, "ブロードキャスト"),
        (((3, 4), (5, 4), (5, 2)), np.ones((3, 4), dtype=bool), r"mask の形 \(3, 4\)"),
        (((3, 4), (5, 4), (5, 2)), np.ones((3, 5)), "mask.dtype=float64"),
        (((3, 4), (5, 4), (5, 2)), np.array([[True] * 5, [False] * 5, [True] * 5]),
         "クエリ位置 1 のキーをすべて"),
    ],
)
def test_attention_rejects_bad_input_in_japanese(shapes, mask, fragment):
    rng = np.random.default_rng(6)
    q, k, v = (rng.normal(size=s) for s in shapes)
    with pytest.raises(ValueError, match=fragment):
        scaled_dot_product_attention(q, k, v, mask=mask)


def test_a_bias_is_added_to_the_scaled_scores():
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    bias = rng.normal(size=(3, 5))
    _, weights = scaled_dot_product_attention(q, k, v, bias=bias)
    np.testing.assert_allclose(weights, softmax(q @ k.T / 2.0 + bias))


@pytest.mark.parametrize(
    ("bias", "fragment"),
    [(np.zeros((4, 5)), r"bias の形 \(4, 5\)"), (np.full((3, 5), np.nan), "bias に NaN"),
     (np.array([["a"] * 5] * 3), "bias は数値")],
)
def test_a_bad_bias_is_rejected_in_japanese(bias, fragment):
    q, k, v = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))
    with pytest.raises(ValueError, match=fragment):
        scaled_dot_product_attention(q, k, v, bias=bias)
