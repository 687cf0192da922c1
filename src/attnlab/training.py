"""Training and measuring the toy transformer of :mod:`attnlab.model`.

Adam, :func:`train` (deterministic for a given ``rng``; its ``step`` chooses the readable
model's training step or the fast one, :data:`STEPS`), :func:`evaluate` (the model's
forward pass and loss), and the two head-removal measurements of chapter 04: the loss
with each head switched off alone (:func:`ablation_losses`) and the pruning curve
(:func:`pruning_curve`).
"""

import math
from typing import NamedTuple

import numpy as np

from attnlab import fast_training, model
from attnlab._validate import generator, model_batch, model_params, positive_float, positive_int
from attnlab.model import (
    ModelConfig,
    _cross_entropy,
    check_config,
    forward,
    param_shapes,
)
from attnlab.parallel import _keep_freed_memory
from attnlab.tasks import Batch

#: The training steps :func:`train` can take (``step=``): ``"readable"`` is
#: :func:`attnlab.model.loss_grads_accuracy`, the model a learner reads (its forward pass,
#: then ``_block_backward``); ``"fast"`` is :func:`attnlab.fast_training.loss_grads_accuracy`,
#: the same equations arranged for speed (equal to float rounding, checked by
#: ``tests/test_fast_training.py``).
STEPS = ("readable", "fast")


def _training_step(step: str):
    """The function ``(params, batch, config) → (loss, grads, accuracy)`` that ``step``
    names (:data:`STEPS`), looked up when called: a changed ``attnlab.model`` trains.

    Not taught: how :func:`train` chooses its step (book page 「model.py を読む」).
    """
    if step == "readable":
        return model.loss_grads_accuracy
    if step == "fast":
        return fast_training.loss_grads_accuracy
    raise ValueError(
        f"step は {' か '.join(map(repr, STEPS))} のどちらかである必要があります: step={step!r}"
    )


class Adam:
    """Adam (Kingma & Ba, 2015) over a dict of parameters, updated in place.

    Taught in chapter 02.
    """

    def __init__(self, params: dict, lr: float = 1e-2, betas=(0.9, 0.999), eps: float = 1e-8):
        self.lr = positive_float(lr, "lr")
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.t = 0  # steps taken
        self.m = {name: np.zeros_like(p) for name, p in params.items()}  # mean of g
        self.v = {name: np.zeros_like(p) for name, p in params.items()}  # mean of g²

    def step(self, params: dict, grads: dict) -> None:
        """One update of every parameter that has a gradient."""
        self.t += 1
        for name, g in grads.items():
            self.m[name] = self.beta1 * self.m[name] + (1.0 - self.beta1) * g
            self.v[name] = self.beta2 * self.v[name] + (1.0 - self.beta2) * g * g
            m_hat = self.m[name] / (1.0 - self.beta1 ** self.t)  # bias corrections
            v_hat = self.v[name] / (1.0 - self.beta2 ** self.t)
            params[name] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def cosine_lr(peak: float, steps: int, floor: float = 0.1):
    """A learning-rate schedule for :func:`train`: cosine decay from ``peak`` at the first
    update to ``peak · floor`` at the last, as nanoGPT decays to a tenth of its peak.

    A constant step size leaves Adam's parameters moving by about ``lr`` per step to the
    end, so a model evaluated at the last step is one sample of a noisy walk; a decayed
    step size lets it settle (the study of chapter 10 uses it).

    Returns
    -------
    callable
        ``schedule(i)`` → the step size of update ``i`` (0, …, steps − 1).

    Taught in chapter 10.
    """
    peak = positive_float(peak, "peak")
    steps = positive_int(steps, "steps")
    floor = float(floor)
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor は 0 以上 1 以下です: floor={floor!r}")

    def schedule(i: int) -> float:
        progress = i / max(steps - 1, 1)  # 0 at the first update, 1 at the last
        return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))

    return schedule


class TrainResult(NamedTuple):
    """What :func:`train` returns: the parameters before and after, and one row per step."""

    params: dict
    loss: np.ndarray  # (steps,) training loss of each step's batch, before the update
    accuracy: np.ndarray  # (steps,) accuracy on the selected positions of that batch
    initial: dict  # the parameters before the first step (a copy)


def train(
    config: ModelConfig,
    task,
    *,
    steps: int,
    rng: np.random.Generator,
    batch_size: int = 64,
    seq_len: int = 32,
    lr=1e-2,
    init_params: dict | None = None,
    callback=None,
    step: str = "fast",
) -> TrainResult:
    """Train a fresh model on a task with Adam; the same ``rng`` state gives the same result.

    Every step draws a batch, computes the loss and its gradients, and takes one
    :meth:`Adam.step`. The loss and gradients are those of
    :func:`attnlab.model.loss_and_grads`; ``step`` says which code computes them.

    Parameters
    ----------
    config : ModelConfig
    task : callable
        ``task(rng, batch_size, seq_len)`` → :class:`attnlab.tasks.Batch`, e.g. a task
        from :mod:`attnlab.tasks`. Every step draws a new batch.
    steps, batch_size, seq_len : int
    rng : np.random.Generator
        Split into two independent streams: one for the initial parameters, one for
        the batches. ``np.random.default_rng(seed)`` for a run you can repeat.
    lr : float or callable
        Adam's step size, or a schedule ``lr(i)`` → the step size of update ``i``
        (0, …, steps − 1), e.g. :func:`cosine_lr`.
    init_params : dict, optional
        Parameters to start from (e.g. pooled to fewer K/V heads for uptraining), with
        the keys and shapes of :func:`attnlab.model.param_shapes`; they are copied, not
        changed. None (the default): fresh random parameters from ``rng``. The batches
        are the same either way.
    callback : callable, optional
        ``callback(step, params)``, called before the first update (``step=0``) and
        after each update (``step`` = updates done), e.g. to record snapshots during
        training. ``params`` is the live dict: copy what you keep.
    step : {"fast", "readable"}
        ``"readable"``: the model you read, :func:`attnlab.model.loss_grads_accuracy`
        (its forward pass and ``_block_backward``), so that a change to
        :mod:`attnlab.model` changes what is learned. ``"fast"`` (the default):
        :mod:`attnlab.fast_training`, the same numbers to float rounding, arranged for
        speed (not taught).

    Returns
    -------
    TrainResult
        ``params``, the per-step ``loss`` and ``accuracy`` (each (steps,)), and the
        ``initial`` parameters, so that a chapter can see what training changed.

    Taught in chapter 02.
    """
    config = check_config(config)
    loss_grads_accuracy = _training_step(step)
    steps = positive_int(steps, "steps")
    batch_size = positive_int(batch_size, "batch_size")
    seq_len = positive_int(seq_len, "seq_len")
    rng = generator(rng)
    schedule = lr if callable(lr) else _constant(positive_float(lr, "lr"))
    if not callable(task):
        raise ValueError(
            "task は task(rng, batch_size, seq_len) と呼べる関数である必要があります: "
            f"{task!r}"
        )
    task_vocab = getattr(task, "vocab_size", None)
    if task_vocab is not None and task_vocab > config.vocab_size:
        raise ValueError(
            f"タスクの語彙 vocab_size={task_vocab} がモデルの vocab_size={config.vocab_size} "
            "より大きいです"
        )
    if callback is not None and not callable(callback):
        raise ValueError(
            f"callback は callback(step, params) と呼べる関数である必要があります: {callback!r}"
        )
    init_rng, data_rng = rng.spawn(2)
    if init_params is None:
        params = model.init_params(config, init_rng)
    else:
        given = model_params(init_params, param_shapes(config))
        params = {name: np.array(given[name], dtype=config.dtype) for name in param_shapes(config)}
    initial = {name: value.copy() for name, value in params.items()}
    optimiser = Adam(params, lr=_step_size(schedule, 0))
    _keep_freed_memory()  # once per process, for either step: glibc keeps freed arrays
    losses, accuracies = np.empty(steps), np.empty(steps)
    if callback is not None:
        callback(0, params)
    for i in range(steps):
        batch = task(data_rng, batch_size, seq_len)
        loss, grads, accuracy = loss_grads_accuracy(params, batch, config)
        optimiser.lr = _step_size(schedule, i)
        optimiser.step(params, grads)
        losses[i], accuracies[i] = loss, accuracy
        if callback is not None:
            callback(i + 1, params)
    return TrainResult(params, losses, accuracies, initial)


def _constant(lr: float):
    """The schedule of a constant step size."""
    return lambda i: lr


def _step_size(schedule, i: int) -> float:
    """``schedule(i)``, checked: a Japanese ValueError naming ``lr`` and the step."""
    value = schedule(i)
    if not isinstance(value, (int, float, np.floating)) or not value > 0 or value == math.inf:
        raise ValueError(f"lr({i}) は正の有限の数である必要があります: {value!r}")
    return float(value)


def evaluate(
    params: dict, batch: Batch, config: ModelConfig, *, ablate=None
) -> tuple[float, float]:
    """Loss and accuracy on a batch, no gradients.

    Accuracy is the share of selected positions where the most likely token is the
    target. ``ablate`` switches heads off as in :func:`attnlab.model.forward`.

    Taught in chapter 02.
    """
    config = check_config(config)
    tokens, targets, loss_mask = model_batch(batch, config)
    logits = forward(params, tokens, config, ablate=ablate).logits  # (B, T, V)
    loss, _, accuracy = _cross_entropy(logits[loss_mask], targets[loss_mask])
    return loss, accuracy


def ablation_losses(params: dict, batch: Batch, config: ModelConfig) -> np.ndarray:
    """The loss on ``batch`` with each head switched off, one at a time.

    Returns
    -------
    np.ndarray
        Shape (n_layers, H): entry (l, h) is the loss with head h of layer l off and
        every other head on. Compare with ``evaluate(params, batch, config)[0]``.

    Taught in chapter 04.
    """
    config = check_config(config)
    losses = np.empty((config.n_layers, config.n_heads))
    for layer, head in np.ndindex(losses.shape):
        losses[layer, head] = evaluate(params, batch, config, ablate=[(layer, head)])[0]
    return losses


class PruningCurve(NamedTuple):
    """What :func:`pruning_curve` returns."""

    order: list  # the heads (layer, head), in the order they were switched off
    loss: np.ndarray  # (n_layers·H + 1,): loss with the first k heads of `order` off
    accuracy: np.ndarray  # (n_layers·H + 1,): accuracy likewise


def pruning_curve(params: dict, batch: Batch, config: ModelConfig, order=None) -> PruningCurve:
    """Switch heads off one after another and measure the model after each.

    Parameters
    ----------
    params, batch, config
        As for :func:`evaluate`.
    order : list of (int, int), optional
        Every head (layer, head) once. By default the heads whose removal alone costs
        least (:func:`ablation_losses`) go first, ranked once: the kind of baseline
        Michel et al. (2019) compare with (they rank by the score drop of each head
        removed alone, BLEU or accuracy); their own method orders by the importance I_h.

    Returns
    -------
    PruningCurve
        ``loss[0]`` and ``accuracy[0]`` are the full model's; the last entries have
        every head off.

    Taught in chapter 04.
    """
    config = check_config(config)
    every = [(layer, head) for layer in range(config.n_layers) for head in range(config.n_heads)]
    if order is None:
        alone = ablation_losses(params, batch, config)  # (L, H)
        order = [every[i] for i in np.argsort(alone, axis=None, kind="stable")]
    else:
        order = [tuple(int(i) for i in pair) for pair in order]
        if sorted(order) != every:
            raise ValueError(
                f"order にはすべてのヘッド (層, ヘッド) をちょうど 1 回ずつ並べてください: "
                f"{len(every)} 個のヘッドに対して order={order}"
            )
    results = [evaluate(params, batch, config, ablate=order[:k]) for k in range(len(order) + 1)]
    loss, accuracy = (np.array(column) for column in zip(*results, strict=True))
    return PruningCurve(order, loss, accuracy)
