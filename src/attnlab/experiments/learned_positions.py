"""A learned position table trained on sequences shorter than the table (chapter 07).

The model of :mod:`attnlab.model` with ``positional="learned"`` learns previous-token
copy (:class:`attnlab.tasks.PreviousToken`) on sequences of ``TRAIN_LEN`` tokens while its
table has ``LEARNED_CONFIG.max_len`` rows. The functions here measure what training did
to each row of the table, what the trained rows look like next to each other, and what
the model does at positions whose rows it never trained.
"""

import numpy as np

from attnlab._validate import choice, generator, positive_float, positive_int
from attnlab.attention import split_heads
from attnlab.model import ModelConfig, check_config, forward, init_params, layer_weights
from attnlab.tasks import PreviousToken
from attnlab.training import TrainResult, train

#: The chapter's model: one layer of two heads, a table of 64 positions.
LEARNED_CONFIG = ModelConfig(vocab_size=16, d_model=32, n_heads=2, n_layers=1, max_len=64,
                             positional="learned")
#: The task: copy the previous token, from 16 token ids.
LEARNED_TASK = PreviousToken(vocab_size=16)
#: Length of every training sequence: rows ``TRAIN_LEN … max_len−1`` are never used.
TRAIN_LEN = 16
#: Adam steps of one run (about a second on an idle 2-core machine).
LEARNED_STEPS = 100


def train_short(
    rng: np.random.Generator,
    *,
    config: ModelConfig = LEARNED_CONFIG,
    train_len: int = TRAIN_LEN,
    steps: int = LEARNED_STEPS,
    batch_size: int = 32,
    pos_std: float | None = None,
) -> TrainResult:
    """Train the chapter's model on previous-token copy with sequences of ``train_len``.

    Parameters
    ----------
    rng : np.random.Generator
        ``np.random.default_rng(seed)``; the same state gives the same run.
    config : ModelConfig
        Must use ``positional="learned"`` and have ``max_len ≥ train_len``.
    train_len, steps, batch_size : int
    pos_std : float, optional
        The standard deviation of the table's initial rows. None keeps the model's
        N(0, 1) initialisation (rows as long as the token embeddings); BERT starts its
        table at 0.02, GPT-2 at 0.01. The other parameters are drawn as usual.

    Returns
    -------
    TrainResult
        As :func:`attnlab.training.train`; ``initial["pos"]`` and ``params["pos"]`` are
        the table before and after, each (max_len, D).

    Taught in chapter 07.
    """
    config = check_config(config)
    if config.positional != "learned":
        raise ValueError(
            f"この実験は学習可能な位置埋め込みのモデルで行います: positional={config.positional!r}"
        )
    train_len = positive_int(train_len, "train_len")
    if train_len > config.max_len:
        raise ValueError(
            f"train_len={train_len} が表の行数 max_len={config.max_len} を超えています"
        )
    task = PreviousToken(vocab_size=config.vocab_size)
    rng = generator(rng)
    start = None
    if pos_std is not None:
        start = init_params(config, rng.spawn(1)[0])
        start["pos"] = start["pos"] * positive_float(pos_std, "pos_std")  # N(0, pos_std²)
    return train(config, task, steps=steps, rng=rng, batch_size=batch_size,
                 seq_len=train_len, init_params=start)


#: How :func:`extend_table` fills the rows of a longer table.
EXTEND_METHODS = ("copy", "interpolate")


def extend_table(rows: np.ndarray, new_len: int, method: str) -> np.ndarray:
    """A longer position table made from trained rows, without training.

    ``"copy"`` repeats the rows one block after another (Longformer filled rows 512 …
    4095 with copies of RoBERTa's 512); ``"interpolate"`` spreads them over the new
    length, position p taking the row at ``p · (n − 1)/(new_len − 1)`` of the old table,
    linearly interpolated between its two neighbours (ViT's interpolation of its table
    for larger images, in one dimension).

    Parameters
    ----------
    rows : np.ndarray
        Shape (n, D): the trained rows, n ≥ 2.
    new_len : int
        The length of the new table, at least n.
    method : {"copy", "interpolate"}

    Returns
    -------
    np.ndarray
        Shape (new_len, D), the dtype of ``rows``.

    Taught in chapter 07.
    """
    rows = np.asarray(rows)
    new_len = positive_int(new_len, "new_len")
    choice(method, "method", EXTEND_METHODS)
    if rows.ndim != 2 or len(rows) < 2:
        raise ValueError(f"rows は 2 行以上の (n, D) の配列である必要があります: "
                         f"rows.shape={rows.shape}")
    n = len(rows)
    if new_len < n:
        raise ValueError(f"new_len={new_len} が元の行数 n={n} より小さいです")
    if method == "copy":
        return rows[np.arange(new_len) % n]  # (new_len, D)
    where = np.arange(new_len) * (n - 1) / (new_len - 1)  # (new_len,) old positions
    low = np.minimum(np.floor(where).astype(int), n - 2)  # (new_len,)
    frac = (where - low)[:, None]  # (new_len, 1)
    return ((1 - frac) * rows[low] + frac * rows[low + 1]).astype(rows.dtype)


def row_movement(result: TrainResult) -> np.ndarray:
    """How far training moved each row of the position table: ``‖after − before‖``.

    Returns
    -------
    np.ndarray
        Shape (max_len,), float64: the Euclidean length of each row's change. Exactly 0
        for a row that no step changed.

    Taught in chapter 07.
    """
    change = result.params["pos"].astype(np.float64) - result.initial["pos"]  # (max_len, D)
    return np.linalg.norm(change, axis=-1)  # (max_len,)


def cosine_similarity(rows: np.ndarray) -> np.ndarray:
    """Cosine similarity of every pair of rows.

    Parameters
    ----------
    rows : np.ndarray
        Shape (N, D), no row all zeros.

    Returns
    -------
    np.ndarray
        Shape (N, N), float64: entry (p, q) is ``rows[p]·rows[q] / (‖rows[p]‖ ‖rows[q]‖)``.

    Taught in chapter 07.
    """
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(
            f"rows は (N, D) の 2 次元配列である必要があります: rows.shape={rows.shape}"
        )
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)  # (N, 1)
    if np.any(norms == 0):
        raise ValueError("rows にすべて 0 の行があります: その行のコサイン類似度は定まりません")
    unit = rows / norms  # (N, D)
    return unit @ unit.T  # (N, N)


def similarity_by_lag(similarity: np.ndarray, max_lag: int) -> np.ndarray:
    """The mean of a similarity matrix along each diagonal: rows ``lag`` apart.

    Parameters
    ----------
    similarity : np.ndarray
        Shape (N, N).
    max_lag : int
        Lags ``1 … max_lag`` (< N).

    Returns
    -------
    np.ndarray
        Shape (max_lag,): entry ``lag − 1`` is the mean of ``similarity[p, p + lag]``.

    Taught in chapter 07.
    """
    similarity = np.asarray(similarity, dtype=np.float64)
    max_lag = positive_int(max_lag, "max_lag")
    if max_lag >= similarity.shape[0]:
        raise ValueError(
            f"max_lag={max_lag} は行の数 N={similarity.shape[0]} より小さくしてください"
        )
    return np.array([np.diagonal(similarity, lag).mean() for lag in range(1, max_lag + 1)])


def positional_scores(params: dict, config: ModelConfig, n_positions: int,
                      layer: int = 0) -> np.ndarray:
    """The part of each head's scores that comes from the position rows alone.

    Query position p and key position j give ``(pos[p] W_Q)_h · (pos[j] W_K)_h / √Dh``
    for head h: the score the two positions would have if the tokens added nothing.

    Parameters
    ----------
    params : dict
        Parameters of a learned-position model (``pos`` and the layer's matrices).
    config : ModelConfig
        With ``n_kv_heads == n_heads``.
    n_positions : int
        The first ``n_positions`` rows of the table are used (≤ max_len).
    layer : int

    Returns
    -------
    np.ndarray
        Shape (H, n_positions, n_positions): rows are query positions, columns keys.

    Taught in chapter 07.
    """
    config = check_config(config)
    n_positions = positive_int(n_positions, "n_positions")
    if n_positions > config.max_len:
        raise ValueError(
            f"n_positions={n_positions} が表の行数 max_len={config.max_len} を超えています"
        )
    if config.n_kv_heads != config.n_heads:
        raise ValueError(f"n_kv_heads={config.n_kv_heads} と n_heads={config.n_heads} が"
                         "違うモデルには使えません")
    proj = layer_weights(params, layer)
    rows = np.asarray(params["pos"][:n_positions], dtype=np.float64)  # (T, D)
    q = split_heads(rows @ proj.w_q, config.n_heads)  # (H, T, Dh)
    k = split_heads(rows @ proj.w_k, config.n_heads)  # (H, T, Dh)
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(config.d_head)  # (H, T, T)


def accuracy_by_position(params: dict, config: ModelConfig, seq_len: int,
                         rng: np.random.Generator, batch_size: int = 256) -> np.ndarray:
    """Accuracy of previous-token copy at each position of sequences of ``seq_len``.

    Parameters
    ----------
    params : dict
    config : ModelConfig
    seq_len : int
        At most ``config.max_len`` (the model raises IndexError past it).
    rng : np.random.Generator
        Draws the evaluation batch.
    batch_size : int

    Returns
    -------
    np.ndarray
        Shape (seq_len,): the share of sequences whose most likely token at t is the
        token at t−1. Position 0 has nothing to copy and is NaN.

    Taught in chapter 07.
    """
    config = check_config(config)
    batch = PreviousToken(vocab_size=config.vocab_size)(generator(rng), batch_size, seq_len)
    logits = forward(params, batch.tokens, config).logits  # (B, T, V)
    hit = logits.argmax(axis=-1) == batch.targets  # (B, T)
    accuracy = hit.mean(axis=0)  # (T,)
    accuracy[~batch.loss_mask[0]] = np.nan
    return accuracy
