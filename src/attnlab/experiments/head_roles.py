"""Chapter 04's experiments: which roles the heads of a small model take, and what they cost.

A 2-layer attention-only model (:mod:`attnlab.model`) is trained on
:class:`attnlab.tasks.RepeatedSequence`. :func:`trained_model` is cached, so the chapter,
its live head picker and the tests share one training per seed; everything else reads
the trained parameters on one fixed evaluation batch.
"""

import functools
from typing import NamedTuple

import numpy as np

from attnlab.attention import mean_pool_kv
from attnlab.head_roles import induction_score, previous_token_score
from attnlab.model import ModelConfig, forward, layer_keys, layer_weights
from attnlab.tasks import Batch, RepeatedSequence
from attnlab.training import evaluate, train

#: The chapter's model: V=32, D=64, H=4, L=2, learned positions, causal.
CONFIG = ModelConfig(vocab_size=32, d_model=64, n_heads=4, n_layers=2, max_len=32)
#: Repeated random segments; the period P of each row is drawn from 4 … T/2 = 16.
TASK = RepeatedSequence(vocab_size=32)
#: The seeds the chapter trains; every claim is checked on each.
SEEDS = (0, 1)
#: Training steps of every run (batch 64, T = 32, Adam with lr 1e-2).
STEPS = 200
#: Parameters are recorded every this many steps, for the emergence curves.
RECORD_EVERY = 5
#: The longest period is T/2, so the first copy of every token lies in positions 0 … 15.
FIRST_COPY = 16
#: Steps of the short uptraining after pooling K/V heads.
UPTRAIN_STEPS = 30
_SEQ_LEN = 32
_EVAL_SEED = 123
_EXAMPLE_SEED = 2026
#: The periods of the examples the head picker offers.
EXAMPLE_PERIODS = (5, 8, 13)


class TrainedModel(NamedTuple):
    """What :func:`trained_model` returns."""

    params: dict  # the parameters after training
    initial: dict  # the parameters before training
    loss: np.ndarray  # (STEPS,) training loss per step
    accuracy: np.ndarray  # (STEPS,) training accuracy per step
    steps: np.ndarray  # (n,) the steps at which parameters were recorded, 0 … STEPS
    snapshots: tuple  # (n,) parameter dicts recorded at those steps


@functools.lru_cache(maxsize=None)
def trained_model(seed: int) -> TrainedModel:
    """Train the chapter's model on :data:`TASK` for :data:`STEPS` steps (cached per seed).

    Deterministic: ``train(CONFIG, TASK, steps=STEPS, rng=np.random.default_rng(seed))``,
    recording a copy of the parameters every :data:`RECORD_EVERY` steps. Treat the
    result as read-only: it is shared by every caller.

    Taught in chapter 04.
    """
    seed = int(seed)
    steps, snapshots = [], []

    def record(step: int, params: dict) -> None:
        if step % RECORD_EVERY == 0:
            steps.append(step)
            snapshots.append({name: value.copy() for name, value in params.items()})

    result = train(CONFIG, TASK, steps=STEPS, rng=np.random.default_rng(seed),
                   callback=record)
    return TrainedModel(result.params, result.initial, result.loss, result.accuracy,
                        np.array(steps), tuple(snapshots))


@functools.lru_cache(maxsize=1)
def eval_batch() -> Batch:
    """The fixed batch every measurement of the chapter uses: 256 rows of T = 32.

    Taught in chapter 04.
    """
    return TASK(np.random.default_rng(_EVAL_SEED), 256, _SEQ_LEN)


class HeadScores(NamedTuple):
    """What :func:`head_scores` returns; each array is (n_layers, H)."""

    previous: np.ndarray  # previous-token score over all positions
    previous_early: np.ndarray  # previous-token score on queries and keys 0 … 15
    induction: np.ndarray  # induction score


def head_scores(params: dict, batch: Batch | None = None) -> HeadScores:
    """Previous-token and induction scores of every head of the chapter's model.

    Parameters
    ----------
    params : dict
        Parameters of a model with :data:`CONFIG`.
    batch : Batch, optional
        Default :func:`eval_batch`.

    Returns
    -------
    HeadScores
        ``previous``, ``previous_early`` (only the first :data:`FIRST_COPY` positions)
        and ``induction``, each of shape (n_layers, H).

    Taught in chapter 04.
    """
    batch = eval_batch() if batch is None else batch
    attn = forward(params, batch.tokens, CONFIG).attn  # n_layers × (B, H, T, T)
    previous = np.stack([previous_token_score(a) for a in attn])  # (L, H)
    early = np.stack([previous_token_score(a[:, :, :FIRST_COPY, :FIRST_COPY])
                      for a in attn])  # (L, H)
    induction = np.stack([induction_score(a, batch.tokens) for a in attn])  # (L, H)
    return HeadScores(previous, early, induction)


class Emergence(NamedTuple):
    """What :func:`emergence` returns."""

    steps: np.ndarray  # (n,) training steps
    previous_early: np.ndarray  # (n, n_layers, H) previous-token score, positions 0 … 15
    induction: np.ndarray  # (n, n_layers, H)
    accuracy: np.ndarray  # (n,) in-context accuracy on the evaluation batch


def emergence(seed: int) -> Emergence:
    """The heads' scores and the in-context accuracy at every recorded step of a run.

    Taught in chapter 04.
    """
    run = trained_model(seed)
    batch = eval_batch()
    scores = [head_scores(params, batch) for params in run.snapshots]
    accuracy = [evaluate(params, batch, CONFIG)[1] for params in run.snapshots]
    return Emergence(run.steps, np.stack([s.previous_early for s in scores]),
                     np.stack([s.induction for s in scores]), np.array(accuracy))


def pooled_params(params: dict, n_kv_heads: int) -> tuple[ModelConfig, dict]:
    """Convert every layer to ``n_kv_heads`` K/V heads by mean-pooling (Ainslie et al.).

    Returns the config with ``n_kv_heads`` and the new parameters (a copy: W_Q, W_O,
    the embeddings and the unembedding unchanged; W_K and W_V pooled per group by
    :func:`attnlab.mean_pool_kv`).

    Taught in chapter 04.
    """
    config = ModelConfig(**{**CONFIG.__dict__, "n_kv_heads": int(n_kv_heads)})
    pooled = dict(params)
    for layer in range(CONFIG.n_layers):
        weights = mean_pool_kv(layer_weights(params, layer), CONFIG.n_heads, n_kv_heads)
        pooled.update(zip(layer_keys(layer), weights, strict=True))
    return config, pooled


@functools.lru_cache(maxsize=None)
def uptrained(seed: int, n_kv_heads: int) -> tuple[ModelConfig, dict]:
    """Pool the trained model of ``seed`` to ``n_kv_heads``, then train it briefly.

    :data:`UPTRAIN_STEPS` steps of Adam from the pooled parameters on new batches
    (rng ``[seed, 1]``). Cached; returns (config, params).

    Taught in chapter 04.
    """
    config, pooled = pooled_params(trained_model(seed).params, n_kv_heads)
    result = train(config, TASK, steps=UPTRAIN_STEPS, rng=np.random.default_rng([seed, 1]),
                   init_params=pooled)
    return config, result.params


@functools.lru_cache(maxsize=1)
def examples() -> np.ndarray:
    """The head picker's examples: one row of T = 32 per period in EXAMPLE_PERIODS.

    Returns (len(EXAMPLE_PERIODS), T) token ids.

    Taught in chapter 04.
    """
    rng = np.random.default_rng(_EXAMPLE_SEED)
    t = np.arange(_SEQ_LEN)
    rows = [rng.permutation(TASK.vocab_size)[:period][t % period] for period in EXAMPLE_PERIODS]
    return np.stack(rows)  # (n_examples, T)


class HeadMap(NamedTuple):
    """What :func:`head_map` returns."""

    weights: np.ndarray  # (T, T) the head's attention weights
    tokens: np.ndarray  # (T,) the example
    previous: float  # previous-token score of the head on the example, all positions
    induction: float  # induction score of the head on the example


def head_map(layer: int, head: int, example: int, seed: int = SEEDS[0]) -> HeadMap:
    """One head's attention weights on one example, with its two scores there.

    Taught in chapter 04.
    """
    tokens = examples()[example][None]  # (1, T)
    attn = forward(trained_model(seed).params, tokens, CONFIG).attn[layer]  # (1, H, T, T)
    previous = float(previous_token_score(attn)[head])
    induction = float(induction_score(attn, tokens)[head])
    return HeadMap(attn[0, head], tokens[0], previous, induction)
