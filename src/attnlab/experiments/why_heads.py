"""Chapter 02: a query that must read two places, measured by hand and in training.

- :func:`value_coefficients` writes an attention output in the basis of the values, so
  "how much of each position's value reached the output" is a number, not a picture.
- :func:`run_heads` trains the toy model of :mod:`attnlab.model` on
  :class:`attnlab.tasks.TwoPositions` for several head counts at a fixed ``d_model`` and
  several seeds, and records each run's loss curve and its accuracy per attribute
  (:func:`attribute_accuracy`); :func:`offset_weight` says how much weight the heads of
  a trained model put on the places i−1 and i−2.
"""

import copy
import time
from typing import NamedTuple

import numpy as np

from attnlab._validate import choice, generator, positive_int
from attnlab.attention import softmax
from attnlab.model import ModelConfig, forward
from attnlab.parallel import on_cores
from attnlab.tasks import Batch, TwoPositions
from attnlab.training import evaluate, train

#: Head counts the chapter compares (all divide ``D_MODEL``).
HEAD_COUNTS = (1, 2, 4, 8, 16)
#: The fixed model width: the heads share it, so every head count has the same parameters.
D_MODEL = 64
#: Training budget of one run, small enough for 20 runs in a notebook.
STEPS = 200
BATCH_SIZE = 32
SEQ_LEN = 16
#: The chapter's hand-built example: the sentence, the width of its value rows, and the
#: score c a query gives each of its targets.
EXAMPLE_TOKENS = ("友人", "は", "ケーキ", "を", "とても", "ゆっくり", "食べた")
EXAMPLE_D_MODEL = 16
EXAMPLE_SCORE = 8.0


def value_coefficients(out: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Write an output as a combination of the value rows: ``out = coef @ values``.

    When the value rows are linearly independent the coefficients are unique; for an
    attention output they are the weights, so ``coef[j]`` is how much of ``values[j]``
    reached the output (1 = all of it, 0.5 = half of it, mixed with the rest).

    Parameters
    ----------
    out : np.ndarray
        Shape (..., Dv): one output vector or several.
    values : np.ndarray
        Shape (T, Dv) with T ≤ Dv and linearly independent rows.

    Returns
    -------
    np.ndarray
        Shape (..., T).

    Raises
    ------
    ValueError
        If the shapes do not fit, or the rows of ``values`` are not independent (then
        the coefficients are not determined), or ``out`` is not in their span.

    Taught in chapter 02.
    """
    out = np.asarray(out, dtype=float)
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or out.ndim < 1 or out.shape[-1] != values.shape[1]:
        raise ValueError(
            "out は (..., Dv)、values は (T, Dv) である必要があります: "
            f"out.shape={out.shape}, values.shape={values.shape}"
        )
    n_values = values.shape[0]
    rank = np.linalg.matrix_rank(values)
    if rank < n_values:
        raise ValueError(
            f"values の {n_values} 行が一次独立ではありません（階数 {rank}）: "
            "係数が 1 通りに決まりません"
        )
    flat = out.reshape(-1, values.shape[1])  # (N, Dv)
    coef, *_ = np.linalg.lstsq(values.T, flat.T, rcond=None)  # (T, N)
    residual = flat - coef.T @ values  # (N, Dv)
    scale = max(1.0, float(np.abs(flat).max()))
    if np.abs(residual).max() > 1e-8 * scale:
        raise ValueError("out が values の行の一次結合になっていません")
    return coef.T.reshape(out.shape[:-1] + (n_values,))


def heads_output(scores: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One query's output when each head reads its own column block of the values.

    Head ℓ turns its scores into weights with a softmax and averages the columns
    ``ℓ·Dh … (ℓ+1)·Dh − 1`` of the values (Dh = D / H); the heads' outputs are
    concatenated in head order. With H = 1 it is one head over the whole width.

    Parameters
    ----------
    scores : np.ndarray
        Shape (H, T): the scaled scores of one query in every head.
    values : np.ndarray
        Shape (T, D), D divisible by H.

    Returns
    -------
    np.ndarray
        Shape (D,).

    Taught in chapter 02.
    """
    scores = np.asarray(scores, dtype=float)
    values = np.asarray(values, dtype=float)
    if scores.ndim != 2 or values.ndim != 2 or scores.shape[1] != values.shape[0]:
        raise ValueError(
            "scores は (H, T)、values は (T, D) である必要があります: "
            f"scores.shape={scores.shape}, values.shape={values.shape}"
        )
    H, (T, D) = scores.shape[0], values.shape
    if D % H:
        raise ValueError(f"D={D} は H={H} で割り切れません")
    weights = softmax(scores, axis=-1)  # (H, T)
    blocks = values.reshape(T, H, D // H).transpose(1, 0, 2)  # (H, T, Dh)
    out = np.einsum("ht,htd->hd", weights, blocks)  # (H, Dh)
    return out.reshape(D)  # heads side by side


def two_positions_config(n_heads: int, *, d_model: int = D_MODEL,
                         seq_len: int = SEQ_LEN, n_layers: int = 1) -> ModelConfig:
    """The chapter's model for :class:`~attnlab.tasks.TwoPositions`: one causal layer
    with learned positions; only the number of heads changes (and, for the exercise on
    two layers of one head each, the number of layers).

    Taught in chapter 02.
    """
    return ModelConfig(vocab_size=TwoPositions().vocab_size, d_model=d_model,
                       n_heads=n_heads, n_layers=n_layers, max_len=seq_len)


def attribute_accuracy(params: dict, batch: Batch, config: ModelConfig,
                       task: TwoPositions) -> tuple[float, float]:
    """The share of scored positions whose predicted colour, and predicted shape, is right.

    The prediction is the most likely token; its colour is compared with the target's
    colour (that of i−1) and its shape with the target's shape (that of i−2).

    Returns
    -------
    colour, shape : float

    Taught in chapter 02.
    """
    logits = forward(params, batch.tokens, config).logits  # (B, T, V)
    pred = logits.argmax(axis=-1)[batch.loss_mask]  # (N,)
    target = batch.targets[batch.loss_mask]  # (N,)
    colour = np.mean(task.colour(pred) == task.colour(target))
    shape = np.mean(task.shape(pred) == task.shape(target))
    return float(colour), float(shape)


def offset_weight(attn: np.ndarray, offset: int) -> np.ndarray:
    """Mean weight each head gives to the key ``offset`` places back.

    Averaged over the batch and over the queries i ≥ 2 (those TwoPositions scores).

    Parameters
    ----------
    attn : np.ndarray
        Shape (B, H, T, T), one layer's weights from :func:`attnlab.model.forward`.
    offset : int
        1 for the previous token, 2 for the one before it.

    Returns
    -------
    np.ndarray
        Shape (H,).

    Taught in chapter 02.
    """
    attn = np.asarray(attn)
    if attn.ndim != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attn は (B, H, T, T) である必要があります: attn.shape={attn.shape}")
    offset = positive_int(offset, "offset")
    T = attn.shape[-1]
    if offset > 2 or T < 3:
        raise ValueError(f"offset は 1 か 2、T は 3 以上にしてください: offset={offset}, T={T}")
    t = np.arange(2, T)
    return attn[:, :, t, t - offset].mean(axis=(0, 2))  # (H,)


class HeadRun(NamedTuple):
    """One training run of :func:`run_heads`."""

    n_heads: int
    seed: int  # index of the run's random stream (the same streams for every head count)
    loss: np.ndarray  # (steps,) training loss per step
    accuracy: float  # on the evaluation batch
    colour_accuracy: float
    shape_accuracy: float
    params: dict
    seconds: float  # wall-clock time of the training (varies between machines)


def run_heads(
    head_counts=HEAD_COUNTS,
    n_seeds=3,
    *,
    rng: np.random.Generator,
    eval_batch: Batch,
    task: TwoPositions | None = None,
    d_model: int = D_MODEL,
    steps: int = STEPS,
    batch_size: int = BATCH_SIZE,
    seq_len: int = SEQ_LEN,
    lr: float = 1e-2,
    n_layers: int = 1,
) -> list[HeadRun]:
    """Train one model per head count and seed on TwoPositions; measure each run.

    ``rng`` is split into independent streams; run ``s`` of every head count starts
    from a copy of stream ``s``, so all head counts see the same batches. The runs are
    independent, so they are trained side by side on the CPU cores
    (:func:`attnlab.parallel.on_cores`; one core: one after the other, the same results,
    bit for bit).

    Parameters
    ----------
    head_counts : sequence of int
        Each must divide ``d_model``.
    n_seeds : int or dict of int to int
        Runs per head count: one number for all, or ``{n_heads: n_seeds}`` to give a
        head count more runs (each must be listed).
    rng : np.random.Generator
    eval_batch : Batch
        A fixed batch (not trained on) for the accuracies.
    task : TwoPositions, optional
        Default ``TwoPositions()``.
    d_model, steps, batch_size, seq_len : int
    lr : float
        Adam's step size; the chapter's runs use 1e-2 and compare 3e-3.
    n_layers : int
        Layers of the model (1 in the chapter's study, 2 in its exercise).

    Returns
    -------
    list of HeadRun
        Ordered by head count, then seed.

    Taught in chapter 02.
    """
    calls = _head_calls(head_counts, n_seeds, rng=rng, eval_batch=eval_batch, task=task,
                        d_model=d_model, steps=steps, batch_size=batch_size,
                        seq_len=seq_len, lr=lr, n_layers=n_layers)
    # the runs are independent (each from its own stream): trained side by side on the
    # CPU cores, with the same results as one after the other
    return on_cores(_head_run, calls)


def _head_calls(head_counts=HEAD_COUNTS, n_seeds=3, *, rng: np.random.Generator,
                eval_batch: Batch, task: TwoPositions | None = None, d_model: int = D_MODEL,
                steps: int = STEPS, batch_size: int = BATCH_SIZE, seq_len: int = SEQ_LEN,
                lr: float = 1e-2, n_layers: int = 1) -> list[tuple]:
    """The calls of :func:`_head_run` that :func:`run_heads` makes (its arguments, its
    defaults): one per head count and seed, seed ``s`` from a copy of stream ``s``."""
    task = TwoPositions() if task is None else task
    if not isinstance(n_seeds, dict):
        n_seeds = dict.fromkeys(head_counts, n_seeds)
    missing = [n_heads for n_heads in head_counts if n_heads not in n_seeds]
    if missing:
        raise ValueError(f"n_seeds にヘッド数 {missing} の実行回数がありません")
    counts = {n_heads: positive_int(n_seeds[n_heads], "n_seeds") for n_heads in head_counts}
    streams = generator(rng).spawn(max(counts.values()))
    calls = [(n_heads, seed, copy.deepcopy(stream), task, eval_batch,
              dict(d_model=d_model, steps=steps, batch_size=batch_size, seq_len=seq_len,
                   lr=lr, n_layers=n_layers))
             for n_heads in head_counts
             for seed, stream in enumerate(streams[:counts[n_heads]])]
    return calls


def _head_run(n_heads: int, seed: int, stream: np.random.Generator, task: TwoPositions,
              eval_batch: Batch, settings: dict) -> HeadRun:
    """One run of :func:`run_heads`: train from ``stream``, then measure on ``eval_batch``."""
    config = two_positions_config(n_heads, d_model=settings["d_model"],
                                  seq_len=settings["seq_len"], n_layers=settings["n_layers"])
    start = time.perf_counter()
    result = train(config, task, steps=settings["steps"], rng=stream,
                   batch_size=settings["batch_size"], seq_len=settings["seq_len"],
                   lr=settings["lr"])
    seconds = time.perf_counter() - start
    _, accuracy = evaluate(result.params, eval_batch, config)
    colour, shape = attribute_accuracy(result.params, eval_batch, config, task)
    return HeadRun(n_heads, seed, result.loss, float(accuracy), colour, shape,
                   result.params, seconds)


def runs_by_heads(runs: list[HeadRun], field: str) -> dict[int, np.ndarray]:
    """One field of the runs, stacked over seeds for each head count.

    ``runs_by_heads(runs, "loss")[2]`` is (n_seeds, steps); a scalar field gives
    (n_seeds,).

    Taught in chapter 02.
    """
    choice(field, "field", HeadRun._fields)
    grouped: dict[int, list] = {}
    for run in runs:
        grouped.setdefault(run.n_heads, []).append(getattr(run, field))
    return {n_heads: np.array(values) for n_heads, values in grouped.items()}
