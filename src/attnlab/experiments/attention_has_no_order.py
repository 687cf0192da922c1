"""Chapter 05: what a model without positions cannot learn, and the exact ceiling.

A model with no positional information and no causal mask is permutation-equivariant:
its output at position t depends only on the token at t and on the multiset of tokens
in the row. On :class:`attnlab.tasks.PreviousToken` (copy the token ``offset`` places
back) such a model can do no better than guess the most frequent of the *other* tokens
of the row. This module computes that ceiling exactly and trains the chapter's model
with and without positions so that the two can be compared.

With a causal mask the same argument holds for one layer, prefix by prefix: the output
at t depends on the token at t and the multiset of tokens ``0 … t``
(:func:`prefix_bag_ceiling`). Two causal layers are not bound by it: the second reads
what the first wrote at every earlier position (:func:`train_causal_without_positions`,
:func:`position_probe`).
"""

import math
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from attnlab._validate import generator, positive_int
from attnlab.attention import MHAProjections, causal_mask, multi_head_attention
from attnlab.model import (
    ModelConfig,
    check_config,
    forward,
    layer_keys,
    layer_projections,
)
from attnlab.parallel import _one_blas_thread
from attnlab.tasks import PreviousToken
from attnlab.training import evaluate, train

#: The model of chapter 05: one layer, no causal mask (so that nothing but the
#: positional scheme differs between the runs).
NO_ORDER_MODEL = dict(vocab_size=32, d_model=32, n_heads=2, n_layers=1, max_len=32,
                      causal=False)
#: Training settings of chapter 05's runs.
NO_ORDER_STEPS = 120
NO_ORDER_BATCH_SIZE = 32
NO_ORDER_SEQ_LEN = 32
NO_ORDER_LR = 1e-2
#: Rows of the fresh batch each trained model is evaluated on.
NO_ORDER_EVAL_ROWS = 512
#: Seeds of the chapter's runs (one generator each).
NO_ORDER_SEEDS = (0, 1, 2, 3, 4)


def _binomial_product(a: list[int], b: list[int], n: int) -> list[int]:
    """Counts of sequences made by interleaving: ``c[s] = Σ_j C(s, j)·a[j]·b[s−j]``."""
    return [sum(math.comb(s, j) * a[j] * b[s - j] for j in range(s + 1)) for s in range(n + 1)]


def _sequences_with_counts_at_most(n: int, vocab_size: int, most: int) -> int:
    """How many of the ``|𝒱|^n`` sequences of length n use no token more than ``most`` times."""
    one_token = [1 if s <= most else 0 for s in range(n + 1)]  # one token used s times
    result, power, k = [1] + [0] * n, one_token, vocab_size
    while k:  # exponentiation by squaring: |𝒱| tokens side by side
        if k & 1:
            result = _binomial_product(result, power, n)
        power = _binomial_product(power, power, n)
        k >>= 1
    return result[n]


@lru_cache(maxsize=64)
def _exact_ceiling(vocab_size: int, seq_len: int) -> Fraction:
    n = seq_len - 1  # the other tokens of the row
    total = vocab_size**n
    # E[max count] = Σ_k P(max count ≥ k)
    expected_max = sum(
        Fraction(total - _sequences_with_counts_at_most(n, vocab_size, k - 1), total)
        for k in range(1, n + 1)
    )
    return expected_max / n


def bag_of_tokens_ceiling(vocab_size: int, seq_len: int) -> float:
    """The best expected accuracy any order-blind model can reach on ``PreviousToken``.

    Without positions and without a mask, the prediction at t is a function of the
    token at t and the multiset of the row. Given both, the token ``offset`` places
    back sits in one of the other ``T − 1`` places, each equally likely, so the best
    guess is the most frequent of the other tokens and it is right with probability
    ``max_b c_b / (T − 1)`` (``c_b``: how often b occurs among the other tokens).
    Tokens are drawn independently and uniformly, so the other ``T − 1`` tokens are
    ``T − 1`` uniform draws whatever the token at t is, and the ceiling is
    ``E[max_b c_b] / (T − 1)`` for a multinomial with ``T − 1`` draws over ``|𝒱|``
    equally likely tokens. It is computed exactly, with integer counts of sequences;
    it does not depend on the offset.

    Parameters
    ----------
    vocab_size : int
        ``|𝒱|``, the number of token ids of the task.
    seq_len : int
        T, at least 2.

    Returns
    -------
    float
        The ceiling, between ``1/|𝒱|``-ish and 1.

    Taught in chapter 05.
    """
    vocab_size = positive_int(vocab_size, "vocab_size")
    seq_len = positive_int(seq_len, "seq_len")
    if seq_len < 2:
        raise ValueError(f"seq_len は 2 以上である必要があります: seq_len={seq_len}")
    return float(_exact_ceiling(vocab_size, seq_len))


def order_blind_ceiling(tokens, loss_mask, vocab_size: int) -> float:
    """The expected accuracy of the best order-blind guess on these rows.

    For every scored position t: count the tokens of the row other than the one at t;
    the best guess is right with probability ``max count / (T − 1)``. The mean over all
    scored positions of the batch. Its expectation over random rows is
    :func:`bag_of_tokens_ceiling`.

    Parameters
    ----------
    tokens : np.ndarray of int
        Shape (B, T), ids in ``0 … vocab_size−1``.
    loss_mask : np.ndarray of bool
        Shape (B, T); the positions that are scored.
    vocab_size : int

    Returns
    -------
    float

    Taught in chapter 05.
    """
    tokens = np.asarray(tokens)
    loss_mask = np.asarray(loss_mask, dtype=bool)
    vocab_size = positive_int(vocab_size, "vocab_size")
    if tokens.ndim != 2 or tokens.shape != loss_mask.shape or tokens.shape[1] < 2:
        raise ValueError(
            "tokens と loss_mask は同じ形 (B, T)、T ≥ 2 である必要があります: "
            f"tokens.shape={tokens.shape}, loss_mask.shape={loss_mask.shape}"
        )
    if not loss_mask.any():
        raise ValueError("loss_mask にスコアを付ける位置が 1 つもありません")
    counts = np.stack([np.bincount(row, minlength=vocab_size) for row in tokens])  # (B, V)
    b, t = np.nonzero(loss_mask)  # the scored positions
    others = counts[b].copy()  # (N, V)
    others[np.arange(len(b)), tokens[b, t]] -= 1  # leave out the token at t itself
    return float(np.mean(others.max(axis=-1) / (tokens.shape[1] - 1)))


class NoOrderRun(NamedTuple):
    """One training run of chapter 05 (what :func:`train_previous_token` returns)."""

    positional: str
    loss: np.ndarray  # (steps,) training loss per step
    accuracy: np.ndarray  # (steps,) training accuracy per step
    eval_loss: float  # on a fresh batch
    eval_accuracy: float  # on the same fresh batch
    eval_ceiling: float  # order_blind_ceiling of that batch


def no_order_config(positional: str) -> ModelConfig:
    """The chapter's model with the given positional scheme.

    Parameters
    ----------
    positional : str
        ``"none"`` or one of the schemes of :class:`attnlab.model.ModelConfig`.

    Returns
    -------
    ModelConfig

    Not taught: the settings behind train_previous_token.
    """
    return ModelConfig(**NO_ORDER_MODEL, positional=positional)


def train_previous_token(
    positional: str, *, rng: np.random.Generator, steps: int = NO_ORDER_STEPS
) -> NoOrderRun:
    """Train the chapter's model on ``PreviousToken`` and evaluate it on a fresh batch.

    Parameters
    ----------
    positional : str
        ``"none"`` (no positions at all) or e.g. ``"learned"``.
    rng : np.random.Generator
        Split into a training stream and an evaluation stream.
    steps : int
        Adam steps, each on a fresh batch of ``NO_ORDER_BATCH_SIZE`` rows.

    Returns
    -------
    NoOrderRun
        The curves, the accuracy and loss on a fresh batch of ``NO_ORDER_EVAL_ROWS``
        rows, and that batch's order-blind ceiling.

    Taught in chapter 05.
    """
    config = no_order_config(positional)
    train_rng, eval_rng = generator(rng).spawn(2)
    task = PreviousToken(vocab_size=config.vocab_size)
    result = train(config, task, steps=steps, rng=train_rng, batch_size=NO_ORDER_BATCH_SIZE,
                   seq_len=NO_ORDER_SEQ_LEN, lr=NO_ORDER_LR)
    batch = task(eval_rng, NO_ORDER_EVAL_ROWS, NO_ORDER_SEQ_LEN)
    loss, accuracy = evaluate(result.params, batch, config)
    ceiling = order_blind_ceiling(batch.tokens, batch.loss_mask, config.vocab_size)
    return NoOrderRun(positional, result.loss, result.accuracy, float(loss), float(accuracy),
                      ceiling)


# --- a causal mask without positions: one layer, then two --------------------------------

#: Chapter 05's causal model without positions (section 6); ``n_layers`` is chosen per run.
CAUSAL_MODEL = dict(vocab_size=16, d_model=32, n_heads=2, max_len=16, causal=True,
                    positional="none")
#: Training settings of the causal runs (about 1.5 s each on an idle 2-core machine).
CAUSAL_SEQ_LEN = 16
CAUSAL_STEPS = 300
CAUSAL_LR = 1e-2
#: Rows of the fresh batch each causal run is evaluated on.
CAUSAL_EVAL_ROWS = 512


def prefix_bag_ceiling(vocab_size: int, seq_len: int) -> np.ndarray:
    """The best accuracy at each position of one causal layer without positions.

    With a causal mask and no positions, one layer's output at t is a function of the
    token at t and the multiset of the tokens ``0 … t``: the keys a query sees are a
    set, in no order. The token at ``t − 1`` is one of the ``t`` others of that prefix,
    each place equally likely, so the ceiling at t is :func:`bag_of_tokens_ceiling`
    for a row of ``t + 1`` tokens (``offset = 1``).

    Parameters
    ----------
    vocab_size : int
        ``|𝒱|``.
    seq_len : int
        T, at least 2.

    Returns
    -------
    np.ndarray
        Shape (T,): NaN at position 0 (nothing to copy), then the ceiling at
        ``t = 1 … T−1`` (1.0 at t = 1, where the only other token is the answer).

    Taught in chapter 05.
    """
    vocab_size = positive_int(vocab_size, "vocab_size")
    seq_len = positive_int(seq_len, "seq_len")
    if seq_len < 2:
        raise ValueError(f"seq_len は 2 以上である必要があります: seq_len={seq_len}")
    ceiling = np.full(seq_len, np.nan)  # (T,)
    for t in range(1, seq_len):
        ceiling[t] = bag_of_tokens_ceiling(vocab_size, t + 1)
    return ceiling


class CausalRun(NamedTuple):
    """One causal run without positions (what :func:`train_causal_without_positions` returns)."""

    config: ModelConfig
    params: dict
    loss: np.ndarray  # (steps,) training loss per step
    accuracy: np.ndarray  # (T,) accuracy at each position on a fresh batch; NaN at 0
    ablated: np.ndarray  # (T,) the same with every head of layer 0 switched off
    even: np.ndarray  # (T,) the same with layer 0's W_Q = 0: every head of it even


def causal_config(n_layers: int) -> ModelConfig:
    """The causal model of chapter 05, section 6, with ``n_layers`` layers.

    Not taught: the settings behind train_causal_without_positions.
    """
    return ModelConfig(**CAUSAL_MODEL, n_layers=positive_int(n_layers, "n_layers"))


def _accuracy_at_each_position(params: dict, batch, config: ModelConfig,
                               ablate=None) -> np.ndarray:
    logits = forward(params, batch.tokens, config, ablate=ablate).logits  # (B, T, V)
    hit = logits.argmax(axis=-1) == batch.targets  # (B, T)
    accuracy = hit.mean(axis=0)  # (T,)
    accuracy[~batch.loss_mask[0]] = np.nan
    return accuracy


def train_causal_without_positions(
    n_layers: int, *, rng: np.random.Generator, steps: int = CAUSAL_STEPS
) -> CausalRun:
    """Train a causal model without positions on ``PreviousToken`` and test it by position.

    Parameters
    ----------
    n_layers : int
        1 or more attention layers (each with a causal mask, no positions).
    rng : np.random.Generator
        Split into a training stream and an evaluation stream.
    steps : int
        Adam steps, each on a fresh batch of 32 rows of ``CAUSAL_SEQ_LEN`` tokens.

    Returns
    -------
    CausalRun
        The loss curve, and the accuracy at each position on a fresh batch of
        ``CAUSAL_EVAL_ROWS`` rows: as trained, with the heads of the first layer
        switched off (the later layers then read the token embeddings only), and with
        the first layer's ``W_Q`` set to 0 (no retraining: every score of the first
        layer is equal, so each of its heads averages the values it may see).

    Taught in chapter 05.
    """
    config = causal_config(n_layers)
    train_rng, eval_rng = generator(rng).spawn(2)
    task = PreviousToken(vocab_size=config.vocab_size)
    result = train(config, task, steps=steps, rng=train_rng, batch_size=32,
                   seq_len=CAUSAL_SEQ_LEN, lr=CAUSAL_LR)
    batch = task(eval_rng, CAUSAL_EVAL_ROWS, CAUSAL_SEQ_LEN)
    first_layer = [(0, head) for head in range(config.n_heads)]
    even = dict(result.params)  # the first layer with W_Q = 0: every score equal
    even[layer_keys(0)[0]] = np.zeros_like(result.params[layer_keys(0)[0]])
    return CausalRun(config, result.params, result.loss,
                     _accuracy_at_each_position(result.params, batch, config),
                     _accuracy_at_each_position(result.params, batch, config, first_layer),
                     _accuracy_at_each_position(even, batch, config))


def residual_stream(params: dict, tokens: np.ndarray, config: ModelConfig,
                    n_layers: int) -> np.ndarray:
    """The residual stream after the first ``n_layers`` layers of a model without positions.

    ``x = embed[tokens]``, then ``x = x + MHA(x)`` layer by layer, with the causal mask if
    the model has one: the computation of :func:`attnlab.model.forward` before the
    unembedding, in float64.

    Parameters
    ----------
    params : dict
    tokens : np.ndarray of int
        Shape (B, T).
    config : ModelConfig
        ``positional="none"``.
    n_layers : int
        0 (the token embeddings) up to ``config.n_layers``.

    Returns
    -------
    np.ndarray
        Shape (B, T, D).

    Not taught: what :func:`position_probe` reads.
    """
    config = check_config(config)
    if config.positional != "none":
        raise ValueError(f"positional={config.positional!r} のモデルには使えません"
                         "（位置を入れないモデル positional='none' 用です）")
    if not 0 <= n_layers <= config.n_layers:
        raise ValueError(f"n_layers={n_layers} は 0 〜 {config.n_layers} にしてください")
    tokens = np.asarray(tokens)
    T = tokens.shape[-1]
    mask = causal_mask(T) if config.causal else None  # (T, T)
    x = np.asarray(params["embed"], dtype=np.float64)[tokens]  # (B, T, D)
    for layer in range(n_layers):
        weights = MHAProjections(*(np.asarray(w, dtype=np.float64)
                               for w in layer_projections(params, layer)))
        out, _ = multi_head_attention(x, weights, config.n_heads, mask=mask)  # (B, T, D)
        x = x + out
    return x


@_one_blas_thread  # small products: a second BLAS thread only waits
def position_probe(params: dict, config: ModelConfig, rng: np.random.Generator,
                   n_rows: int = 400) -> np.ndarray:
    """How much of the position a linear map reads from the residual stream, layer by layer.

    A least-squares linear map (with a constant) from the residual stream at each
    position to the number of that position is fitted on ``n_rows`` fresh rows and scored
    on ``n_rows`` others: R² = 1 − (squared error) / (variance of the position).

    Parameters
    ----------
    params : dict
    config : ModelConfig
        A model without positions.
    rng : np.random.Generator
        Draws the two batches.
    n_rows : int

    Returns
    -------
    np.ndarray
        Shape (n_layers + 1,): R² on the held-out rows after 0 layers (the token
        embeddings: about 0), 1 layer, … .

    Taught in chapter 05.
    """
    config = check_config(config)
    rng = generator(rng)
    n_rows = positive_int(n_rows, "n_rows")
    task = PreviousToken(vocab_size=config.vocab_size)
    fit, held_out = (task(rng, n_rows, CAUSAL_SEQ_LEN) for _ in range(2))
    position = np.tile(np.arange(CAUSAL_SEQ_LEN, dtype=np.float64), n_rows)  # (B·T,)
    scores = []
    for n_layers in range(config.n_layers + 1):
        features = [residual_stream(params, batch.tokens, config, n_layers)
                    .reshape(-1, config.d_model) for batch in (fit, held_out)]  # (B·T, D)
        a_fit, a_test = (np.column_stack([f, np.ones(len(f))]) for f in features)
        coef, *_ = np.linalg.lstsq(a_fit, position, rcond=None)  # (D + 1,)
        error = position - a_test @ coef  # (B·T,)
        scores.append(1.0 - error @ error / np.sum((position - position.mean()) ** 2))
    return np.array(scores)


def _fresh_attention(params: dict, config: ModelConfig, rng: np.random.Generator,
                     n_rows) -> list[np.ndarray]:
    """The attention weights of a causal model on ``n_rows`` fresh rows of the chapter's
    task (length :data:`CAUSAL_SEQ_LEN`): one (B, H, T, T) float64 array per layer."""
    config = check_config(config)
    if not config.causal:
        raise ValueError(f"causal={config.causal!r} のモデルには使えません"
                         "（因果マスクのあるモデル用です）")
    n_rows = positive_int(n_rows, "n_rows")
    batch = PreviousToken(vocab_size=config.vocab_size)(rng, n_rows, CAUSAL_SEQ_LEN)
    attn = forward(params, batch.tokens, config).attn  # n_layers × (B, H, T, T)
    return [np.asarray(weights, dtype=np.float64) for weights in attn]


def previous_position_attention(params: dict, config: ModelConfig,
                                rng: np.random.Generator, n_rows: int = 512) -> np.ndarray:
    """How much each head attends to the previous position, against an even spread.

    On ``n_rows`` fresh rows, the weight the query at position i puts on the key at
    i − 1, times i + 1 (the number of keys a causal query sees), averaged over the rows and
    over the positions i = 2 … T − 1. A head that spreads its weight evenly over the keys
    it sees (every score equal) scores 1; a head that looks only at i − 1 scores the mean
    of i + 1, about 10 at T = 16.

    In the first layer of a model without positions, on rows of independent tokens, the
    ratio is about 1 whatever the head does: the keys other than the query's own are
    exchangeable there, so on average each gets the same share of the weight the query
    does not keep for itself. It says nothing about how evenly such a head spreads its
    weight (:func:`first_layer_heads` measures that); it is informative from the second
    layer on, where the keys carry what the first layer wrote.

    Parameters
    ----------
    params : dict
    config : ModelConfig
        A causal model.
    rng : np.random.Generator
        Draws the rows.
    n_rows : int

    Returns
    -------
    np.ndarray
        Shape (n_layers, H): one ratio per layer and head.

    Taught in chapter 05.
    """
    rng = generator(rng)
    attn = _fresh_attention(params, config, rng, n_rows)  # n_layers × (B, H, T, T)
    i = np.arange(2, CAUSAL_SEQ_LEN)  # (T - 2,) queries with two or more keys before
    ratios = []
    for weights in attn:
        on_previous = weights[:, :, i, i - 1]  # (B, H, T - 2)
        ratios.append((on_previous * (i + 1)).mean(axis=(0, 2)))  # (H,)
    return np.array(ratios)


class FirstLayerHeads(NamedTuple):
    """What each head of the first layer does (what :func:`first_layer_heads` returns)."""

    entropy: np.ndarray  # (H,) normalised entropy of the weights: 1 = even, 0 = one key
    top_weight: np.ndarray  # (H,) largest weight × (i + 1): 1 = even, i + 1 = one key
    self_weight: np.ndarray  # (H,) weight on the query's own key × (i + 1)
    symmetric: np.ndarray  # (H,) (1 − own weight)·(i + 1)/i: the i − 1 ratio by symmetry
    probe: np.ndarray  # (H,) position_probe's R² after layer 1 with this head alone


def _one_head_kept(params: dict, config: ModelConfig, head: int) -> dict:
    """A copy of ``params`` whose first layer writes only ``head``'s output."""
    params = dict(params)
    key = layer_keys(0)[3]  # the first layer's w_o: (D, D), rows = the heads' outputs
    w_o = np.array(params[key], copy=True)  # (D, D)
    rows = np.arange(config.d_model) // config.d_head  # (D,): the head of each row
    w_o[rows != head] = 0.0  # the other heads write nothing
    params[key] = w_o
    return params


@_one_blas_thread  # small products: a second BLAS thread only waits
def first_layer_heads(params: dict, config: ModelConfig, rng: np.random.Generator,
                      n_rows: int = 512) -> FirstLayerHeads:
    """How sharply each first-layer head attends, and how much position it writes alone.

    On ``n_rows`` fresh rows, for the queries i = 2 … T − 1 (averaged over rows and
    queries): the entropy of the query's weights divided by ``log(i + 1)``, its largest
    weight times i + 1, and its weight on its own key times i + 1. A head that spreads
    its weight evenly scores 1 on all three. ``symmetric`` is what
    :func:`previous_position_attention` gives if the weight the query does not keep for
    itself is shared evenly, on average, by the other i keys: ``(1 − w_ii)(i + 1)/i``.
    Then :func:`position_probe` after layer 1
    with every other head of the layer switched off (its rows of ``W_O`` set to 0).

    Parameters
    ----------
    params : dict
    config : ModelConfig
        A causal model without positions.
    rng : np.random.Generator
        Draws the rows, then the probe's batches.
    n_rows : int

    Returns
    -------
    FirstLayerHeads
        Five arrays of shape (H,).

    Taught in chapter 05.
    """
    config = check_config(config)
    rng = generator(rng)
    weights = _fresh_attention(params, config, rng, n_rows)[0]  # (B, H, T, T), layer 1
    i = np.arange(2, CAUSAL_SEQ_LEN)  # (T - 2,) queries with two or more keys before
    rows = weights[:, :, i, :]  # (B, H, T - 2, T): 0 past the query
    safe = np.where(rows > 0, rows, 1.0)  # log(1) = 0 where the weight is 0
    entropy = -(rows * np.log(safe)).sum(axis=-1) / np.log(i + 1)  # (B, H, T - 2)
    top = rows.max(axis=-1) * (i + 1)  # (B, H, T - 2)
    own = weights[:, :, i, i] * (i + 1)  # (B, H, T - 2)
    symmetric = (1 - weights[:, :, i, i]) * (i + 1) / i  # (B, H, T - 2)
    seed = rng.integers(2**32)  # the probe reads the same rows for every head
    probe = [position_probe(_one_head_kept(params, config, head), config,
                            np.random.default_rng(seed))[1]
             for head in range(config.n_heads)]
    return FirstLayerHeads(entropy.mean(axis=(0, 2)), top.mean(axis=(0, 2)),
                           own.mean(axis=(0, 2)), symmetric.mean(axis=(0, 2)),
                           np.array(probe))
