"""Chapter 01: the live figure's shortcut agrees with the computation from full vectors.

The figure draws each score as ``|q| · z`` instead of building ``d_k``-wide vectors; the
chapter computes the same statistic from full random vectors. These tests keep the two
in agreement, so the notebook does not need a cell for it.
"""

import numpy as np
import pytest

from attnlab import softmax
from attnlab.experiments.attention_review import (
    SHARPNESS_D_K,
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
