"""How the softmax sharpens as d_k grows when the scores are not divided by √d_k."""

import numpy as np

from attnlab._validate import choice
from attnlab.attention import softmax

#: Widths of q and k that the experiment (and its live figure) offers.
SHARPNESS_D_K = (4, 16, 64, 256, 1024)
#: Numbers of keys that the experiment offers.
SHARPNESS_N_KEYS = (4, 16, 64)
#: Number of random queries behind the distribution of the largest weight.
SHARPNESS_TRIALS = 2000
_SHARPNESS_SEED = 2026


def sharpness_samples(d_k: int, scaled: bool, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Softmax weights of random queries over random keys.

    Components of q and k are independent standard normal. Given q, each score q·k_j is
    normal with variance ``|q|²`` and the scores of different keys are independent, so the
    scores of many queries are drawn exactly as ``|q| · z`` with ``|q|² ~ χ²(d_k)`` and
    ``z ~ N(0, 1)``, without building ``d_k``-wide vectors. One query is built in full.
    Both scalings of the same ``(d_k, n_keys)`` use the same draws.

    Parameters
    ----------
    d_k : int
        Width of q and k, one of ``SHARPNESS_D_K``.
    scaled : bool
        Divide the scores by ``√d_k``.
    n_keys : int
        Number of keys (Tk), one of ``SHARPNESS_N_KEYS``.

    Returns
    -------
    one : np.ndarray
        Shape (Tk,): the weights of one query (fixed seed).
    largest : np.ndarray
        Shape (SHARPNESS_TRIALS,): the largest weight of each of many queries (fixed seed).

    Raises
    ------
    ValueError
        If ``d_k`` or ``n_keys`` is not one of the offered values.

    Taught in chapter 01.
    """
    choice(d_k, "d_k", SHARPNESS_D_K)
    choice(n_keys, "n_keys", SHARPNESS_N_KEYS)
    rng = np.random.default_rng([_SHARPNESS_SEED, d_k, n_keys])  # same draws for both scalings
    scale = np.sqrt(d_k) if scaled else 1.0
    q = rng.normal(size=d_k)  # (d_k,)
    k = rng.normal(size=(n_keys, d_k))  # (Tk, d_k)
    one = softmax(k @ q / scale)  # (Tk,)
    q_norm = np.sqrt(rng.chisquare(d_k, size=(SHARPNESS_TRIALS, 1)))  # (trials, 1)
    scores = q_norm * rng.standard_normal((SHARPNESS_TRIALS, n_keys))  # (trials, Tk)
    largest = softmax(scores / scale, axis=-1).max(axis=-1)  # (trials,)
    return one, largest
