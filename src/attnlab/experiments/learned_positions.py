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
from attnlab.experiments.sinusoidal_encoding import score_terms
from attnlab.model import (
    ModelConfig,
    check_config,
    forward,
    init_params,
    layer_projections,
)
from attnlab.parallel import _one_blas_thread
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
#: The chapter's generator seed, and its independent runs (``rng.spawn(LEARNED_RUNS)``:
#: the first spawn trains, the second evaluates). The runs with the table started at 0.02
#: are ``SMALL_START_RUNS`` more, from the third spawn.
LEARNED_SEED = 2026
LEARNED_RUNS = 5
SMALL_START_RUNS = 5


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

    Query position i and key position j give ``(pos[i] W_Q)_ℓ · (pos[j] W_K)_ℓ / √Dh``
    for head ℓ: the score the two positions would have if the tokens added nothing.

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
    proj = layer_projections(params, layer)
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


def attention_on_previous_row(params: dict, config: ModelConfig, seq_len: int,
                              rng: np.random.Generator,
                              batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """How much attention each query puts on the keys that carry the previous position's row.

    For the query at position i ≥ 1, the candidates are the keys j ≤ i whose row of the
    position table equals the row of i − 1: only i − 1 in a table whose rows all differ,
    every copy of that row in a table made by ``extend_table(..., "copy")``.

    Parameters
    ----------
    params : dict
        A learned-position model (``pos`` has at least ``seq_len`` rows).
    config : ModelConfig
        A causal model with one layer.
    seq_len : int
    rng : np.random.Generator
        Draws the batch.
    batch_size : int

    Returns
    -------
    mass : np.ndarray
        Shape (H, seq_len): the summed weight on the candidates, averaged over the batch.
    share : np.ndarray
        Shape (H, seq_len): the largest candidate's part of that sum, averaged over the
        batch (1 when there is one candidate). Position 0 is NaN in both.

    Taught in chapter 07.
    """
    config = check_config(config)
    if not config.causal:
        raise ValueError(f"causal={config.causal!r} のモデルには使えません"
                         "（因果マスクのあるモデル用です）")
    seq_len = positive_int(seq_len, "seq_len")
    table = np.asarray(params["pos"][:seq_len])  # (T, D)
    batch = PreviousToken(vocab_size=config.vocab_size)(generator(rng), batch_size, seq_len)
    attn = np.asarray(forward(params, batch.tokens, config).attn[0], dtype=np.float64)
    # attn: (B, H, T, T)
    mass = np.full((config.n_heads, seq_len), np.nan)  # (H, T)
    share = np.full((config.n_heads, seq_len), np.nan)  # (H, T)
    for i in range(1, seq_len):
        candidates = np.flatnonzero(np.all(table[: i + 1] == table[i - 1], axis=1))
        on_candidates = attn[:, :, i, candidates]  # (B, H, n_candidates)
        total = on_candidates.sum(axis=-1)  # (B, H)
        mass[:, i] = total.mean(axis=0)
        share[:, i] = (on_candidates.max(axis=-1) / total).mean(axis=0)
    return mass, share


#: The four terms of a score, in the order :func:`score_terms_by_offset` returns them.
SCORE_TERMS = ("token–token", "token–position", "position–token", "position–position")


@_one_blas_thread  # small products: a second BLAS thread only waits
def score_terms_by_offset(params: dict, config: ModelConfig, rng: np.random.Generator,
                          n_rows: int = 256, max_offset: int = 3,
                          seq_len: int = TRAIN_LEN) -> np.ndarray:
    """Each head's score split into chapter 06's four terms, by how far back the key is.

    For ``n_rows`` fresh rows of ``seq_len`` tokens, the first layer's scores of each head
    are split with :func:`attnlab.experiments.sinusoidal_encoding.score_terms` (tokens
    ``embed[tokens]``, positions the table's rows ``0 … seq_len−1``) and divided by
    ``√Dh``; each term is averaged over the rows and over the queries
    ``i = max_offset … seq_len−1``, at the keys ``i − offset``.

    Parameters
    ----------
    params : dict
        A learned-position model.
    config : ModelConfig
    rng : np.random.Generator
        Draws the rows.
    n_rows, max_offset, seq_len : int
        ``max_offset < seq_len ≤ max_len``.

    Returns
    -------
    np.ndarray
        Shape (4, H, max_offset + 1): the terms in the order of ``SCORE_TERMS``, for each
        head, at offset 0 (the query's own key), 1 (the previous key), … .

    Taught in chapter 07.
    """
    config = check_config(config)
    n_rows = positive_int(n_rows, "n_rows")
    seq_len = positive_int(seq_len, "seq_len")
    max_offset = positive_int(max_offset, "max_offset")
    if not max_offset < seq_len <= config.max_len:
        raise ValueError(f"max_offset < seq_len ≤ max_len にしてください: max_offset="
                         f"{max_offset}, seq_len={seq_len}, max_len={config.max_len}")
    batch = PreviousToken(vocab_size=config.vocab_size)(generator(rng), n_rows, seq_len)
    proj = layer_projections(params, 0)
    embed = np.asarray(params["embed"], dtype=np.float64)  # (V, D)
    rows = np.asarray(params["pos"][:seq_len], dtype=np.float64)  # (T, D)
    i = np.arange(max_offset, seq_len)  # (n_queries,)
    total = np.zeros((len(SCORE_TERMS), config.n_heads, max_offset + 1))
    for tokens in batch.tokens:
        for head in range(config.n_heads):
            cols = slice(head * config.d_head, (head + 1) * config.d_head)
            terms = score_terms(embed[tokens], rows, proj.w_q[:, cols],
                                proj.w_k[:, cols])  # four (T, T)
            for n, term in enumerate(terms):
                total[n, head] += [term[i, i - offset].mean()
                                   for offset in range(max_offset + 1)]
    return total / n_rows / np.sqrt(config.d_head)
