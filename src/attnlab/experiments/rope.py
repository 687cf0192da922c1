"""Chapter 08's numerics: RoPE in one pair's plane, its long-term decay, its two layouts."""

import math
from typing import NamedTuple

import numpy as np

from attnlab._validate import even_int, int_positions, model_tokens, positive_float
from attnlab.attention import causal_mask, multi_head_attention
from attnlab.model import ModelConfig, layer_projections
from attnlab.positional import RoPE, apply_rope, rope_angles

#: Head width of the live figure's query and key (4 pairs; the figure offers 3).
ROPE_DEMO_D_HEAD = 8
#: Positions m and n the live figure offers: 0 … ROPE_DEMO_POSITIONS − 1.
ROPE_DEMO_POSITIONS = 8
#: Pair indices i the live figure offers.
ROPE_DEMO_PAIRS = (0, 1, 2)
_DEMO_SEED = 808
#: Head width of the chapter's first examples (its own q and k, not the live figure's).
ROPE_EXAMPLE_D_HEAD = 8
#: How far the chapter moves a pair of positions (m, n) together: q_m·k_n stays the same.
ROPE_SHIFTS = (100, 10_000)


class PairPlane(NamedTuple):
    """What :func:`rope_pair_plane` returns."""

    q: np.ndarray  # (T, 2) the pair of q rotated to every position
    k: np.ndarray  # (T, 2) the pair of k rotated to every position
    scores: np.ndarray  # (T, T) this pair's share of q_m · k_n
    full: np.ndarray  # (T, T) the whole q_m · k_n over all pairs
    theta: float  # θ_i of the pair


def rope_demo_vectors() -> tuple[np.ndarray, np.ndarray]:
    """The fixed query and key of the live figure, each (ROPE_DEMO_D_HEAD,).

    Drawn once from a fixed seed; every pair has length between 0.5 and 1.5 so that the
    arrows in the figure stay visible.

    Not taught: the data of :func:`attnlab.widgets.rope_rotation_widget`.
    """
    rng = np.random.default_rng(_DEMO_SEED)
    n_pairs = ROPE_DEMO_D_HEAD // 2
    angle = rng.uniform(0.0, 2 * np.pi, size=(2, n_pairs))  # (2, Dh/2)
    length = rng.uniform(0.5, 1.5, size=(2, n_pairs))
    pairs = np.stack([length * np.cos(angle), length * np.sin(angle)], axis=-1)
    q, k = pairs.reshape(2, ROPE_DEMO_D_HEAD)  # adjacent layout: (2i, 2i+1)
    return q, k


def rope_pair_plane(pair: int, base: float = 10000.0) -> PairPlane:
    """RoPE on the demo q and k at positions 0 … ROPE_DEMO_POSITIONS − 1, seen in one pair.

    Parameters
    ----------
    pair : int
        Pair index i (dimensions 2i, 2i+1), ``0 ≤ i < ROPE_DEMO_D_HEAD / 2``.
    base : float
        RoPE's base.

    Returns
    -------
    PairPlane
        The rotated pair of q and of k at every position (T, 2), the pair's share of
        the dot product and the whole dot product, each (T, T) with row m (query) and
        column n (key), and θ_i.

    Not taught: the numbers of :func:`attnlab.widgets.rope_rotation_widget`.
    """
    n_pairs = ROPE_DEMO_D_HEAD // 2
    if not (isinstance(pair, (int, np.integer)) and 0 <= pair < n_pairs):
        raise ValueError(f"pair は 0 〜 {n_pairs - 1} の整数にしてください: pair={pair!r}")
    q, k = rope_demo_vectors()  # (Dh,) each
    positions = np.arange(ROPE_DEMO_POSITIONS)  # (T,)
    q_rot = apply_rope(np.tile(q, (len(positions), 1)), positions, base)  # (T, Dh)
    k_rot = apply_rope(np.tile(k, (len(positions), 1)), positions, base)  # (T, Dh)
    dims = slice(2 * pair, 2 * pair + 2)
    theta = float(rope_angles([1.0], ROPE_DEMO_D_HEAD, base)[0, pair])
    return PairPlane(q_rot[:, dims], k_rot[:, dims], q_rot[:, dims] @ k_rot[:, dims].T,
                     q_rot @ k_rot.T, theta)


def rope_decay_bound(distances, d_head: int, base: float = 10000.0) -> np.ndarray:
    """RoFormer's relative upper bound of the score: ``(1/(Dh/2)) Σ_j |S_j|`` (§3.4.3).

    ``S_j = Σ_{i<j} e^{i·(m−n)·θ_i}`` is the partial sum of the pairs' unit rotations
    for a relative distance ``m − n``. Summation by parts gives
    ``|q_m · k_n| ≤ max_i |g_{i+1} − g_i| · Σ_j |S_j|`` with the content products
    ``g_i = u_i · conj(w_i)`` (RoFormer's h_i; the book keeps h for the number of heads)
    and ``g_{Dh/2} = 0``, so the mean of ``|S_j|`` bounds the score up to a factor set by
    the content; RoFormer shows that it decays as the distance grows.

    Parameters
    ----------
    distances : array of float
        Relative distances ``m − n``, shape (N,).
    d_head : int
        Head width Dh, even.
    base : float
        RoPE's base.

    Returns
    -------
    np.ndarray
        Shape (N,): the mean of ``|S_j|`` over ``j = 1 … Dh/2`` at each distance; it is
        ``(Dh/2 + 1)/2`` at distance 0.

    Taught in chapter 08.
    """
    d_head = even_int(d_head, "d_head")
    base = positive_float(base, "base")
    angles = rope_angles(np.asarray(distances, dtype=float), d_head, base)  # (N, Dh/2)
    partial = np.cumsum(np.exp(1j * angles), axis=-1)  # (N, Dh/2): S_1 … S_{Dh/2}
    return np.abs(partial).mean(axis=-1)  # (N,)


def half_layout_permutation(d_head: int) -> np.ndarray:
    """The dimension order that turns adjacent pairs into split halves.

    ``perm = [0, 2, 4, …, Dh−2, 1, 3, …, Dh−1]``: after ``y = x[..., perm]`` the pair
    (2i, 2i+1) of ``x`` sits at (i, i + Dh/2) of ``y``, so
    ``apply_rope(y, pos, convention="half") == apply_rope(x, pos)[..., perm]``.
    Permuting the columns of each head of W_Q and W_K this way converts a model from
    one layout to the other without changing any score.

    Parameters
    ----------
    d_head : int
        Head width Dh, even.

    Returns
    -------
    np.ndarray of int
        Shape (Dh,).

    Taught in chapter 08.
    """
    d_head = even_int(d_head, "d_head")
    return np.concatenate([np.arange(0, d_head, 2), np.arange(1, d_head, 2)])


def permute_head_columns(w: np.ndarray, n_heads: int, perm) -> np.ndarray:
    """The columns of every head of a projection matrix reordered by ``perm``.

    Parameters
    ----------
    w : np.ndarray
        Shape (D, H·Dh), e.g. W_Q or W_K; head h owns columns ``h·Dh … (h+1)·Dh − 1``.
    n_heads : int
        H.
    perm : array of int
        Shape (Dh,), a permutation of ``0 … Dh−1``.

    Returns
    -------
    np.ndarray
        Shape (D, H·Dh): column ``h·Dh + j`` is the old column ``h·Dh + perm[j]``.

    Taught in chapter 08.
    """
    w = np.asarray(w)
    if w.ndim != 2 or w.shape[1] % n_heads:
        raise ValueError(
            f"w は (D, H·Dh) の行列で、列の数が n_heads={n_heads} で割り切れる必要が"
            f"あります: w.shape={w.shape}"
        )
    d_head = w.shape[1] // n_heads
    perm = int_positions(perm, "perm")
    if sorted(perm.tolist()) != list(range(d_head)):
        raise ValueError(f"perm は 0 〜 {d_head - 1} の並べ替えである必要があります: perm={perm}")
    cols = (np.arange(n_heads)[:, None] * d_head + perm).ravel()  # (H·Dh,)
    return w[:, cols]


def half_layout_logits(params: dict, tokens, config: ModelConfig) -> np.ndarray:
    """The model of :mod:`attnlab.model` run with split-halves RoPE (``rotate_half``).

    The same layers as :func:`attnlab.model.forward` (``x = x + MHA(x)`` in every layer,
    RoPE on q and k inside each one, then the unembedding), but every layer rotates with
    ``RoPE(convention="half")`` instead of adjacent pairs. A checkpoint trained with
    adjacent pairs and converted right (W_Q and W_K columns permuted per head) gives the
    logits of ``forward`` here.

    Parameters
    ----------
    params : dict
        The model's parameters, as :func:`attnlab.model.init_params` names them.
    tokens : array of int
        Shape (B, T).
    config : ModelConfig
        A model with ``positional="rope"`` and ``causal=True``, base and scale as trained.

    Returns
    -------
    np.ndarray
        Logits, shape (B, T, V).

    Taught in chapter 08.
    """
    if config.positional != "rope" or not config.causal:
        raise ValueError("config は RoPE の因果的なモデル（positional=\"rope\"、causal=True）"
                         f"である必要があります: positional={config.positional!r}、"
                         f"causal={config.causal!r}")
    tokens = model_tokens(tokens, config)  # (B, T)
    rope = RoPE(base=config.rope_base, scale=config.rope_scale, convention="half")
    x = params["embed"][tokens]  # (B, T, D)
    mask = causal_mask(tokens.shape[1])  # (T, T)
    for layer in range(config.n_layers):
        out, _ = multi_head_attention(x, layer_projections(params, layer), config.n_heads,
                                      n_kv_heads=config.n_kv_heads, mask=mask, rope=rope)
        x = x + out  # (B, T, D)
    return x @ params["unembed"]  # (B, T, V)


def rope_expected_scores(distances, d_head: int, base: float = 10000.0):
    """What a score q_m·k_n is on average, by distance m − n, for random unit-variance rows.

    Aligned rows (k = q, each entry N(0, 1)): every pair adds ``E|pair|²·cos((m−n)θ_i)
    = 2·cos((m−n)θ_i)``, so ``E[q_m·k_n] = Σ_i 2·cos((m−n)·θ_i)`` falls from ``Dh`` at
    distance 0 as the pairs turn apart. Independent q and k: a rotation keeps the
    distribution, so ``q_m·k_n`` is distributed as ``q·k`` at every distance; given q it
    is ``N(0, ‖q‖²)``, hence ``E|q_m·k_n| = √(2/π)·E‖q‖`` with the chi mean
    ``E‖q‖ = √2·Γ((Dh+1)/2)/Γ(Dh/2)`` (about ``√(2·Dh/π)``; ``q·k`` itself is a sum of
    products, not a normal variable) whatever the distance: RoFormer's decaying bound
    says nothing about it.

    Parameters
    ----------
    distances : array of float
        Shape (N,).
    d_head : int
        Head width Dh, even.
    base : float

    Returns
    -------
    (aligned, independent) : (np.ndarray, float)
        ``aligned`` shape (N,); ``independent`` one number.

    Taught in chapter 08.
    """
    d_head = even_int(d_head, "d_head")
    base = positive_float(base, "base")
    angles = rope_angles(np.asarray(distances, dtype=float), d_head, base)  # (N, Dh/2)
    aligned = 2.0 * np.cos(angles).sum(axis=-1)  # (N,)
    mean_norm = math.sqrt(2.0) * math.exp(math.lgamma((d_head + 1) / 2)
                                          - math.lgamma(d_head / 2))  # E‖q‖
    return aligned, float(np.sqrt(2.0 / np.pi) * mean_norm)
