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



def query_jacobian_norms(q: np.ndarray, k: np.ndarray, scaled: bool) -> np.ndarray:
    """How strongly each query's weights respond to its query vector: ‖∂p/∂q‖.

    For one query the scores are ``z_j = k_j · q / τ`` (``τ = √d_k`` when ``scaled``,
    else 1) and the weights ``p = softmax(z)``. The chain rule through
    ``∂p_j/∂z_l = p_j (δ_jl − p_l)`` and ``∂z_l/∂q = k_l / τ`` gives, for each key j,

        ∂p_j/∂q = p_j (k_j − k̄) / τ,   k̄ = Σ_l p_l k_l  (the weighted mean key),

    the rows of a (Tk, d_k) matrix whose Frobenius norm is returned. It is the part of
    the gradient to ``W_Q`` that passes through the softmax: without the scaling the
    factor ``k / τ`` is √d_k times larger, but ``p_j (k_j − k̄)`` goes to 0 for every j
    once the softmax saturates (one p_j near 1 with k̄ near its key, the others near 0).

    Parameters
    ----------
    q : np.ndarray
        Shape (n, d_k): one query per row.
    k : np.ndarray
        Shape (n, Tk, d_k): the keys of each query.
    scaled : bool
        Divide the scores by ``√d_k``.

    Returns
    -------
    np.ndarray
        Shape (n,): ``‖∂p/∂q‖`` of each query.

    Raises
    ------
    ValueError
        If ``q`` is not (n, d_k) or ``k`` is not (n, Tk, d_k) with the same n and d_k.

    Taught in chapter 01.
    """
    q, k = np.asarray(q, dtype=float), np.asarray(k, dtype=float)
    if q.ndim != 2 or k.ndim != 3 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[1]:
        raise ValueError(
            f"q は (n, d_k)、k は (n, Tk, d_k) の形にしてください: q.shape={q.shape}, "
            f"k.shape={k.shape}"
        )
    n, n_keys, d_k = k.shape
    scale = np.sqrt(d_k) if scaled else 1.0
    z = np.einsum("ntd,nd->nt", k, q) / scale  # (n, Tk): the scores
    p = softmax(z, axis=-1)  # (n, Tk): the weights
    k_bar = np.einsum("nt,ntd->nd", p, k)  # (n, d_k): the weighted mean key
    squared = np.zeros(n)  # (n,): ‖∂p/∂q‖², summed over the rows j
    for j in range(n_keys):
        row = p[:, j, None] * (k[:, j] - k_bar) / scale  # (n, d_k): ∂p_j/∂q
        squared += np.sum(row**2, axis=-1)
    return np.sqrt(squared)
