"""Chapter 06's numerics: the sinusoidal explorer, the four terms of a score, a model's
dimensions permuted, and a model run on given embeddings."""

from typing import NamedTuple

import numpy as np

from attnlab._validate import choice
from attnlab.model import ModelConfig, check_config, layer_keys, run_layers
from attnlab.positional import sinusoidal_encoding

#: Widths the sinusoidal explorer offers.
EXPLORER_D_MODEL = (16, 32, 64, 128)
#: Positions the explorer's slider offers (48 × 4 widths = 192 states).
EXPLORER_POSITIONS = tuple(range(48))
#: Number of positions whose dot product with the chosen one the explorer shows.
EXPLORER_SEQ_LEN = 64


def explorer_state(pos: int, d_model: int) -> tuple[np.ndarray, np.ndarray]:
    """The encoding of one position and its dot product with every shown position.

    Parameters
    ----------
    pos : int
        One of ``EXPLORER_POSITIONS``.
    d_model : int
        One of ``EXPLORER_D_MODEL``.

    Returns
    -------
    vector : np.ndarray
        Shape (D,): ``PE(pos)``.
    dots : np.ndarray
        Shape (EXPLORER_SEQ_LEN,): ``PE(pos′) · PE(pos)`` for ``pos′ = 0 …
        EXPLORER_SEQ_LEN−1``. Its largest value is ``D/2``, at ``pos′ = pos``.

    Raises
    ------
    ValueError
        If ``pos`` or ``d_model`` is not one of the offered values.

    Taught in chapter 06.
    """
    if pos not in EXPLORER_POSITIONS:
        raise ValueError(f"pos={pos!r} は 0 〜 {EXPLORER_POSITIONS[-1]} の整数にしてください")
    choice(d_model, "d_model", EXPLORER_D_MODEL)
    pe = sinusoidal_encoding(EXPLORER_SEQ_LEN, d_model)  # (T, D)
    return pe[pos], pe @ pe[pos]  # (D,), (T,)


def logits_from_embeddings(params: dict, x: np.ndarray, config: ModelConfig) -> np.ndarray:
    """Run the blocks and the unembedding of a model on inputs ``x`` built elsewhere.

    ``x`` replaces what :func:`attnlab.model.forward` builds from the tokens (the token
    embedding plus the positions), so a chapter can feed a model embeddings with the
    positions added in another (e.g. a wrong) way. With ``x = embed[tokens] + PE`` the
    logits equal ``forward(params, tokens, config).logits``.

    Parameters
    ----------
    params : dict of str to np.ndarray
        As made by :func:`attnlab.model.init_params`.
    x : np.ndarray
        Shape (B, T, D): the input of the first block.
    config : ModelConfig
        Its ``positional`` must add positions to the embeddings ("sinusoidal",
        "learned") or use none ("none").

    Returns
    -------
    np.ndarray
        Shape (B, T, V).

    Taught in chapter 06.
    """
    config = check_config(config)
    if config.positional not in ("none", "sinusoidal", "learned"):
        raise ValueError(
            f"positional={config.positional!r} のモデルは位置をアテンションの中で使うので、"
            "埋め込みからは計算できません（none・sinusoidal・learned のどれか）")
    return run_layers(params, x, config)  # (B, T, V)


class ScoreTerms(NamedTuple):
    """The four parts of ``(e_i + p_i) W_Q W_Kᵀ (e_j + p_j)ᵀ``, each (T, T).

    Rows are query positions i, columns key positions j; unscaled (before ÷ √d_k).
    """

    token_token: np.ndarray  # e_i W_Q W_Kᵀ e_jᵀ
    token_position: np.ndarray  # e_i W_Q W_Kᵀ p_jᵀ
    position_token: np.ndarray  # p_i W_Q W_Kᵀ e_jᵀ
    position_position: np.ndarray  # p_i W_Q W_Kᵀ p_jᵀ


def score_terms(tokens: np.ndarray, positions: np.ndarray, w_q: np.ndarray,
                w_k: np.ndarray) -> ScoreTerms:
    """Split the unscaled scores of inputs ``tokens + positions`` into their four terms.

    With ``x_i = e_i + p_i`` (a token's embedding plus its position's vector), the
    unscaled score ``q_i · k_j = x_i W_Q W_Kᵀ x_jᵀ`` is the sum of a token–token, a
    token–position, a position–token and a position–position term (Ke et al. 2021).

    Parameters
    ----------
    tokens : np.ndarray
        Shape (T, D): the token embeddings e_i.
    positions : np.ndarray
        Shape (T, D): the vectors p_i added to them (e.g. ``sinusoidal_encoding(T, D)``).
    w_q, w_k : np.ndarray
        Shape (D, d_k) each.

    Returns
    -------
    ScoreTerms
        Four (T, T) arrays whose sum is ``(tokens + positions) @ w_q @ ((tokens +
        positions) @ w_k).T``.

    Taught in chapter 06.
    """
    e, p = np.asarray(tokens, dtype=np.float64), np.asarray(positions, dtype=np.float64)
    if e.ndim != 2 or e.shape != p.shape:
        raise ValueError("tokens と positions は同じ形 (T, D) である必要があります: "
                         f"tokens.shape={e.shape}, positions.shape={p.shape}")
    w_qk = np.asarray(w_q, dtype=np.float64) @ np.asarray(w_k, dtype=np.float64).T  # (D, D)
    return ScoreTerms(e @ w_qk @ e.T, e @ w_qk @ p.T, p @ w_qk @ e.T, p @ w_qk @ p.T)


def permute_model_dimensions(params: dict, perm: np.ndarray, n_layers: int) -> dict:
    """The same model with the dimensions of its residual stream reordered by ``perm``.

    New dimension j is old dimension ``perm[j]`` everywhere the residual stream is read
    or written: the columns of the token embedding (and of a learned position table),
    the rows of every layer's W_Q, W_K, W_V (they read it), the columns of every W_O (it
    writes it) and the rows of the unembedding. Fed ``x[..., perm]``, the permuted model
    computes exactly what the original computes on ``x``. Permuting fewer matrices (say,
    only the next layer's rows) does not.

    Parameters
    ----------
    params : dict
        As made by :func:`attnlab.model.init_params`.
    perm : np.ndarray of int
        Shape (D,): a permutation of ``0 … D−1``.
    n_layers : int
        The model's number of layers.

    Returns
    -------
    dict
        New arrays; ``params`` is not changed.

    Taught in chapter 06.
    """
    perm = np.asarray(perm)
    D = params["embed"].shape[1]
    if perm.shape != (D,) or not np.array_equal(np.sort(perm), np.arange(D)):
        raise ValueError(f"perm は 0 〜 {D - 1} の並べ替え（長さ {D}）である必要があります: "
                         f"perm.shape={perm.shape}")
    out = {name: np.array(value, copy=True) for name, value in params.items()}
    out["embed"] = params["embed"][:, perm]  # (V, D): writes the stream
    if "pos" in params:
        out["pos"] = params["pos"][:, perm]  # (max_len, D)
    for layer in range(n_layers):
        w_q, w_k, w_v, w_o = layer_keys(layer)
        for key in (w_q, w_k, w_v):
            out[key] = params[key][perm, :]  # (D, ·): rows read the stream
        out[w_o] = params[w_o][:, perm]  # (D, D): columns write it
    out["unembed"] = params["unembed"][perm, :]  # (D, V): reads the stream
    return out
