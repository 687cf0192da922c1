"""Chapter 01: the softmax sharpens with d_k unless the scores are divided by √d_k, and
the live figure's shortcut agrees with the computation from full vectors.

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
