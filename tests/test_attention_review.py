"""Chapter 01: the softmax sharpens with d_k unless the scores are divided by √d_k, the
live figure's shortcut agrees with the computation from full vectors, and the gradient
to the query (‖∂p/∂q‖) is what the chain rule says.

The figure draws each score as ``|q| · z`` instead of building ``d_k``-wide vectors; the
chapter computes the same statistic from full random vectors. These tests keep the two
in agreement, so the notebook does not need a cell for it.
"""

import numpy as np
import pytest

from attnlab import softmax
from attnlab.experiments.attention_review import (
    SHARPNESS_D_K,
    SHARPNESS_N_KEYS,
    SHARPNESS_TRIALS,
    query_jacobian_norms,
    sharpness_samples,
)


def _largest_from_vectors(d_k: int, scaled: bool, n_keys: int) -> np.ndarray:
    rng = np.random.default_rng([1, d_k, n_keys])
    q = rng.normal(size=(SHARPNESS_TRIALS, 1, d_k))  # (trials, 1, d_k)
    k = rng.normal(size=(SHARPNESS_TRIALS, n_keys, d_k))  # (trials, Tk, d_k)
    raw = (q @ k.transpose(0, 2, 1))[:, 0, :]  # (trials, Tk)
    scores = raw / np.sqrt(d_k) if scaled else raw
    return softmax(scores, axis=-1).max(axis=-1)  # (trials,)


@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("d_k", SHARPNESS_D_K)
def test_shortcut_matches_full_vectors_mean(d_k, scaled):
    shortcut = sharpness_samples(d_k, scaled, 16)[1]
    full = _largest_from_vectors(d_k, scaled, 16)
    assert abs(shortcut.mean() - full.mean()) < 0.02


@pytest.mark.parametrize("scaled", [False, True])
def test_shortcut_matches_full_vectors_distribution(scaled):
    shortcut = sharpness_samples(256, scaled, 16)[1]
    full = _largest_from_vectors(256, scaled, 16)
    quantiles = [0.1, 0.25, 0.5, 0.75, 0.9]
    np.testing.assert_allclose(np.quantile(shortcut, quantiles),
                               np.quantile(full, quantiles), atol=0.04)


def test_one_query_is_built_from_full_vectors():
    one_raw, _ = sharpness_samples(256, False, 16)
    one_scaled, _ = sharpness_samples(256, True, 16)
    # the same draw: dividing the scores by √d_k flattens the same query's weights
    assert np.argmax(one_raw) == np.argmax(one_scaled)
    assert one_raw.max() > one_scaled.max()


def test_without_scaling_the_largest_weight_grows_with_d_k_and_with_scaling_it_does_not():
    for n_keys in SHARPNESS_N_KEYS:
        raw = [sharpness_samples(d, False, n_keys)[1].mean() for d in SHARPNESS_D_K]
        scaled = [sharpness_samples(d, True, n_keys)[1].mean() for d in SHARPNESS_D_K]
        assert np.all(np.diff(raw) > 0), n_keys
        assert raw[-1] > 0.85, n_keys
        assert np.ptp(scaled) < 0.05, n_keys


def test_sharpness_weights_are_softmax_rows():
    one, largest = sharpness_samples(64, True, 16)
    assert one.shape == (16,) and np.isclose(one.sum(), 1.0)
    assert np.all((largest >= 1 / 16 - 1e-12) & (largest <= 1.0))


@pytest.mark.parametrize("bad", [{"d_k": 5}, {"n_keys": 3}])
def test_sharpness_rejects_values_outside_the_domain(bad):
    args = {"d_k": 64, "scaled": True, "n_keys": 16, **bad}
    with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
        sharpness_samples(**args)


def _weights(q, k, scaled):  # q (d_k,), k (Tk, d_k) -> p (Tk,)
    scale = np.sqrt(q.shape[-1]) if scaled else 1.0
    return softmax(k @ q / scale)


@pytest.mark.parametrize("scaled", [False, True])
def test_query_jacobian_norms_match_finite_differences(scaled):
    rng = np.random.default_rng(11)
    n, n_keys, d_k, eps = 3, 7, 11, 1e-6  # sizes that are not round
    q = rng.normal(size=(n, d_k))
    k = rng.normal(size=(n, n_keys, d_k))
    norms = query_jacobian_norms(q, k, scaled)
    for t in range(n):
        columns = []
        for c in range(d_k):
            step = np.zeros(d_k)
            step[c] = eps
            columns.append((_weights(q[t] + step, k[t], scaled)
                            - _weights(q[t] - step, k[t], scaled)) / (2 * eps))
        numeric = np.stack(columns, axis=-1)  # (Tk, d_k): ∂p/∂q by central differences
        np.testing.assert_allclose(norms[t], np.linalg.norm(numeric), rtol=1e-6)


@pytest.mark.parametrize("scaled", [False, True])
def test_query_jacobian_norms_are_the_softmax_jacobian_times_the_keys(scaled):
    rng = np.random.default_rng(12)
    q, k = rng.normal(size=(4, 9)), rng.normal(size=(4, 5, 9))
    scale = np.sqrt(9) if scaled else 1.0
    expected = []
    for t in range(4):
        p = _weights(q[t], k[t], scaled)
        dp_dz = np.diag(p) - np.outer(p, p)  # (Tk, Tk)
        expected.append(np.linalg.norm(dp_dz @ k[t] / scale))
    np.testing.assert_allclose(query_jacobian_norms(q, k, scaled), expected, rtol=1e-12)


def test_without_scaling_the_gradient_to_q_vanishes_for_about_half_the_queries_at_d_k_1024():
    # The chapter's claim (16 keys): unscaled, the mean ‖∂p/∂q‖ is larger than scaled (the
    # factor k is √d_k larger), yet the median is near 0: about half the queries get almost
    # nothing and a few near-ties carry the sum.
    rng = np.random.default_rng(2026)
    q = rng.normal(size=(SHARPNESS_TRIALS, 1024))
    k = rng.normal(size=(SHARPNESS_TRIALS, 16, 1024))
    raw, scaled = query_jacobian_norms(q, k, False), query_jacobian_norms(q, k, True)
    assert raw.mean() > 4 * scaled.mean()
    assert np.median(raw) < 1e-2 < 0.2 < np.median(scaled)
    assert 0.4 < np.mean(raw < 1e-3) < 0.65 and np.mean(scaled < 1e-3) == 0.0
    top = np.sort(raw)[::-1][: SHARPNESS_TRIALS // 10]  # the 10% largest
    assert top.sum() / raw.sum() > 0.6


def _gradient_spread(d_k: int, n_keys: int, n: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, d_k, n_keys])
    q, k = rng.normal(size=(n, d_k)), rng.normal(size=(n, n_keys, d_k))
    raw, scaled = query_jacobian_norms(q, k, False), query_jacobian_norms(q, k, True)
    return {"median_raw": np.median(raw), "median_scaled": np.median(scaled),
            "below": np.mean(raw < 1e-3)}


@pytest.mark.parametrize("n_keys", [16, 64])
def test_at_the_papers_d_k_64_the_unscaled_median_is_the_larger(n_keys):
    # The chapter's caveat: at d_k = 64 (Vaswani et al.'s) the toy shows no vanishing —
    # few queries below 1e-3, and the typical query gets more gradient unscaled.
    spread = _gradient_spread(64, n_keys, 1000, seed=3)
    assert spread["median_raw"] > 2 * spread["median_scaled"]
    assert spread["below"] < 0.1


def test_with_more_keys_fewer_queries_lose_the_gradient_at_d_k_1024():
    # The chapter's caveat: how many queries lose the gradient depends on the number of
    # keys (closer top two scores with more keys): at d_k = 1024 fewer with 64 than 16.
    few, many = _gradient_spread(1024, 16, 500, seed=4), _gradient_spread(1024, 64, 500, seed=4)
    assert 0.25 < many["below"] < few["below"] - 0.04
    assert many["median_raw"] < many["median_scaled"]


def test_query_jacobian_norms_name_the_shapes_of_bad_input():
    with pytest.raises(ValueError, match=r"q.shape=\(3, 4\), k.shape=\(3, 5, 6\)"):
        query_jacobian_norms(np.zeros((3, 4)), np.zeros((3, 5, 6)), True)
