"""Chapter 04's experiments: which roles the heads of a small model take, and what they cost.

A 2-layer attention-only model (:mod:`attnlab.model`) is trained on
:class:`attnlab.tasks.RepeatedSequence`. :func:`trained_model` is cached, so the chapter,
its live head picker and the tests share one training per seed; everything else reads
the trained parameters on one fixed evaluation batch.

Heads are found by measurement, not by eye: the two scores of :mod:`attnlab.head_roles`
(the induction score is Olsson et al.'s prefix matching), :func:`copying_score` (their
second property: the head raises the logit of the token it attends to), and
interventions (:func:`head_scores` with heads switched off, :func:`one_side_induction`
with them taken out of layer 1's keys or queries alone). :func:`head_importance` is
Michel et al.'s gradient-based importance and :func:`importance_pruning_curve` prunes in
its order; :func:`greedy_pruning_curve` re-measures after every head it switches off.
"""

import functools
from typing import NamedTuple

import numpy as np

from attnlab.attention import (
    causal_mask,
    mean_pool_kv,
    multi_head_attention,
    softmax,
    split_heads,
)
from attnlab.costs import kv_cache_bytes
from attnlab.head_roles import induction_mask, induction_score, previous_token_score
from attnlab.model import (
    ModelConfig,
    forward,
    init_params,
    layer_keys,
    layer_projections,
    loss_and_grads,
)
from attnlab.parallel import on_cores
from attnlab.tasks import Batch, RepeatedSequence
from attnlab.training import PruningCurve, ablation_losses, evaluate, pruning_curve, train

#: The chapter's model: V=32, D=64, H=4, L=2, learned positions, causal.
CONFIG = ModelConfig(vocab_size=32, d_model=64, n_heads=4, n_layers=2, max_len=32)
#: Repeated random segments; the period P of each row is drawn from 4 … T/2 = 16.
TASK = RepeatedSequence(vocab_size=32)
#: The seeds the chapter trains; every claim is checked on each.
SEEDS = (0, 1, 2, 3, 4, 5)
#: Training steps of every run (batch 64, T = 32, Adam with lr 1e-2).
STEPS = 200
#: Parameters are recorded every this many steps, for the emergence curves.
RECORD_EVERY = 5
#: The longest period is T/2, so the first copy of every token lies in positions 0 … 15.
FIRST_COPY = 16
#: Steps of the short uptraining after pooling K/V heads: 5% of STEPS, the share of the
#: original pre-training Ainslie et al. uptrain for.
UPTRAIN_STEPS = 10
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


#: The models trained so far, by seed (:func:`trained_model`, :func:`seed_studies`).
_TRAINED: dict[int, TrainedModel] = {}


def trained_model(seed: int) -> TrainedModel:
    """Train the chapter's model on :data:`TASK` for :data:`STEPS` steps (cached per seed).

    Deterministic: ``train(CONFIG, TASK, steps=STEPS, rng=np.random.default_rng(seed))``,
    recording a copy of the parameters every :data:`RECORD_EVERY` steps. Treat the
    result as read-only: it is shared by every caller.

    Taught in chapter 04.
    """
    seed = int(seed)
    if seed not in _TRAINED:
        _TRAINED[seed] = _train_seed(seed)
    return _TRAINED[seed]


def _train_seed(seed: int) -> TrainedModel:
    """The training of :func:`trained_model`, not cached."""
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
    """The fixed batch every measurement of the chapter uses: 128 rows of T = 32.

    Taught in chapter 04.
    """
    return TASK(np.random.default_rng(_EVAL_SEED), 128, _SEQ_LEN)


class HeadScores(NamedTuple):
    """What :func:`head_scores` returns; each array is (n_layers, H)."""

    previous: np.ndarray  # previous-token score over all positions
    previous_early: np.ndarray  # previous-token score on queries and keys 0 … 15
    induction: np.ndarray  # induction score


def head_scores(params: dict, batch: Batch | None = None, *, ablate=None) -> HeadScores:
    """Previous-token and induction scores of every head of the chapter's model.

    Parameters
    ----------
    params : dict
        Parameters of a model with :data:`CONFIG`.
    batch : Batch, optional
        Default :func:`eval_batch`.
    ablate : iterable of (int, int), optional
        Heads ``(layer, head)`` switched off while measuring, as in
        :func:`attnlab.model.forward`: the scores of the later layers then show what
        those heads contribute to the later heads' weights.

    Returns
    -------
    HeadScores
        ``previous``, ``previous_early`` (only the first :data:`FIRST_COPY` positions)
        and ``induction``, each of shape (n_layers, H).

    Taught in chapter 04.
    """
    batch = eval_batch() if batch is None else batch
    return _scores(forward(params, batch.tokens, CONFIG, ablate=ablate).attn, batch.tokens)


def _scores(attn: list, tokens: np.ndarray) -> HeadScores:
    """The three scores from each layer's weights (B, H, T, T)."""
    previous = np.stack([previous_token_score(a) for a in attn])  # (L, H)
    early = np.stack([previous_token_score(a[:, :, :FIRST_COPY, :FIRST_COPY])
                      for a in attn])  # (L, H)
    induction = np.stack([induction_score(a, tokens) for a in attn])  # (L, H)
    return HeadScores(previous, early, induction)


def one_side_induction(params: dict, heads, side: str,
                       batch: Batch | None = None) -> np.ndarray:
    """Layer 1's induction scores with layer-0 ``heads`` removed from one side only.

    Layer 1 reads the residual stream ``x1 = x0 + (layer 0's output)`` three times:
    its queries ``x1 W_Q``, keys ``x1 W_K`` and values ``x1 W_V``. Here the output of
    ``heads`` (layer 0) is taken out of one of them alone: with ``side="key"`` the keys
    are computed from the residual stream without those heads and the queries from the
    full one; ``side="query"`` is the mirror. The weights depend on queries and keys
    only, so the values (left intact) do not enter the score. If the induction score
    falls when the heads leave the keys alone, layer 1 finds its targets through what
    those heads wrote into the keys: K-composition (Elhage et al., 2021).

    Parameters
    ----------
    params : dict
        Parameters of a model with :data:`CONFIG`.
    heads : iterable of (int, int)
        Heads of layer 0, ``(0, head)``; an empty list removes nothing.
    side : {"key", "query"}
        Which input of layer 1 loses the heads' output.
    batch : Batch, optional
        Default :func:`eval_batch`.

    Returns
    -------
    np.ndarray
        Shape (H,): the induction score of each head of layer 1.

    Taught in chapter 04.
    """
    if side not in ("key", "query"):
        raise ValueError(f"side は \"key\" か \"query\" です: side={side!r}")
    heads = [tuple(int(i) for i in pair) for pair in heads]
    if any(layer != 0 for layer, _ in heads):
        raise ValueError(f"heads は層 0 のヘッド (0, ヘッド) だけです: heads={heads}")
    batch = eval_batch() if batch is None else batch
    tokens = batch.tokens  # (B, T)
    T, H, Dh = tokens.shape[1], CONFIG.n_heads, CONFIG.d_head
    x0 = params["embed"][tokens] + params["pos"][:T]  # (B, T, D)
    w0 = layer_projections(params, 0)
    keep = np.ones(H)
    keep[[head for _, head in heads]] = 0.0  # (H,): 0 for the heads removed
    rows = np.repeat(keep, Dh)[:, None]  # (H*Dh, 1): W_O's rows of each head
    full = x0 + multi_head_attention(x0, w0, H, mask=causal_mask(T))[0]  # (B, T, D)
    cut = x0 + multi_head_attention(x0, w0._replace(w_o=w0.w_o * rows), H,
                                    mask=causal_mask(T))[0]  # (B, T, D)
    x_q, x_k = (full, cut) if side == "key" else (cut, full)
    w1 = layer_projections(params, 1)
    q = split_heads(x_q @ w1.w_q, H)  # (B, H, T, Dh)
    k = split_heads(x_k @ w1.w_k, H)  # (B, H, T, Dh)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(Dh)  # (B, H, T, T)
    weights = softmax(np.where(causal_mask(T), scores, -np.inf), axis=-1)  # (B, H, T, T)
    return induction_score(weights, tokens)  # (H,)


class Emergence(NamedTuple):
    """What :func:`emergence` returns."""

    steps: np.ndarray  # (n,) training steps
    previous_early: np.ndarray  # (n, n_layers, H) previous-token score, positions 0 … 15
    induction: np.ndarray  # (n, n_layers, H)
    accuracy: np.ndarray  # (n,) in-context accuracy on the first EMERGENCE_ROWS rows


#: Rows of :func:`eval_batch` that :func:`emergence` measures at every snapshot.
EMERGENCE_ROWS = 64


def emergence(seed: int) -> Emergence:
    """The heads' scores and the in-context accuracy at every recorded step of a run.

    Measured on the first :data:`EMERGENCE_ROWS` rows of :func:`eval_batch` (the 41
    snapshots of every seed are the chapter's largest evaluation; the curves are read
    only coarsely: which step crosses 0.5, below 0.2 at step 20, above 0.8 at step 60).

    Taught in chapter 04.
    """
    run = trained_model(seed)
    tokens, targets, loss_mask = (a[:EMERGENCE_ROWS] for a in eval_batch())
    scores, accuracy = [], []
    for params in run.snapshots:
        logits, attn = forward(params, tokens, CONFIG)  # (B, T, V), L × (B, H, T, T)
        scores.append(_scores(attn, tokens))
        accuracy.append((logits.argmax(axis=-1) == targets)[loss_mask].mean())
    return Emergence(run.steps, np.stack([s.previous_early for s in scores]),
                     np.stack([s.induction for s in scores]), np.array(accuracy))


def copying_score(params: dict, batch: Batch | None = None,
                  layer: int = CONFIG.n_layers - 1) -> np.ndarray:
    """How often each head of the last layer raises most the logit of the token it reads.

    Olsson et al. define an induction head by prefix matching (the induction score) and
    copying: "the head's output increases the logit corresponding to the attended-to
    token". In the chapter's attention-only model a last-layer head reaches the logits
    only directly, so its effect is ``logits − logits with the head switched off``. The
    score is the share of the positions whose token occurred before at which the token
    the head attends to most is the one whose logit it raises most: 1 for a head that
    always copies what it reads, about 1/|V| for one that writes something unrelated.

    Parameters
    ----------
    params : dict
    batch : Batch, optional
        Default :func:`eval_batch`.
    layer : int
        Must be the last layer, where the effect is the head's own.

    Returns
    -------
    np.ndarray
        Shape (H,).

    Taught in chapter 04.
    """
    if layer != CONFIG.n_layers - 1:
        raise ValueError(f"copying_score は最後の層だけを測ります: layer={layer}、"
                         f"最後の層は {CONFIG.n_layers - 1} です")
    batch = eval_batch() if batch is None else batch
    tokens = batch.tokens  # (B, T)
    full = forward(params, tokens, CONFIG)
    seen = induction_mask(tokens).any(axis=-1)  # (B, T): the token occurred before
    scores = np.empty(CONFIG.n_heads)
    for head in range(CONFIG.n_heads):
        without = forward(params, tokens, CONFIG, ablate=[(layer, head)]).logits
        effect = full.logits - without  # (B, T, V): what the head adds to the logits
        read = full.attn[layer][:, head].argmax(axis=-1)  # (B, T): key it reads most
        attended = np.take_along_axis(tokens, read, axis=1)  # (B, T): that key's token
        scores[head] = (effect.argmax(axis=-1) == attended)[seen].mean()
    return scores


def mask_gradients(params: dict, batch: Batch, config: ModelConfig = CONFIG) -> np.ndarray:
    """∂L/∂ξ for every head: the loss's slope in a factor ξ on the head's output.

    With ξ = 1 for every head (the model as trained), ξ scales head ℓ's output before
    W_O, which is the same as scaling the rows of W_O that head ℓ writes through. So the
    slope is ``⟨W_O^(ℓ), ∂L/∂W_O^(ℓ)⟩``, read off one backward pass
    (:func:`attnlab.model.loss_and_grads`). ``−∂L/∂ξ`` is the first-order estimate of
    the change of the loss when the head is switched off (ξ: 1 → 0).

    Parameters
    ----------
    params : dict
    batch : Batch
    config : ModelConfig
        Default :data:`CONFIG`, the chapter's model.

    Returns
    -------
    np.ndarray
        Shape (n_layers, H).

    Taught in chapter 04.
    """
    _, grads = loss_and_grads(params, batch, config)
    H, Dh = config.n_heads, config.d_head
    slopes = np.empty((config.n_layers, H))
    for layer in range(config.n_layers):
        key = f"layers.{layer}.w_o"
        w_o = params[key].reshape(H, Dh, -1)  # (H, Dh, D): the rows of each head
        slopes[layer] = (w_o * grads[key].reshape(H, Dh, -1)).sum(axis=(1, 2))  # (H,)
    return slopes


def head_importance(params: dict, batch: Batch | None = None, *,
                    normalize: bool = True) -> np.ndarray:
    """Michel et al.'s importance score of every head: ``I = E_x |∂L(x)/∂ξ|``.

    The mean over the sequences x of the batch of the absolute slope of each sequence's
    loss in the head's mask variable ξ (:func:`mask_gradients`); as the paper does,
    each layer's scores are divided by their ℓ2 norm (``normalize``). Heads with low
    scores are pruned first.

    Returns
    -------
    np.ndarray
        Shape (n_layers, H).

    On the chapter's nearly perfect model the per-sequence slopes are tiny, so heads
    whose scores are close can swap places with the last bits of training (it can
    differ between CPU levels): the chapter reads the curve it gives
    (:func:`importance_pruning_curve`) only coarsely.

    Taught in chapter 04.
    """
    batch = eval_batch() if batch is None else batch
    rows = range(batch.tokens.shape[0])
    slopes = np.stack([mask_gradients(params, Batch(*(part[b:b + 1] for part in batch)))
                       for b in rows])  # (B, n_layers, H)
    importance = np.abs(slopes).mean(axis=0)  # (n_layers, H)
    if normalize:
        importance = importance / np.linalg.norm(importance, axis=1, keepdims=True)
    return importance


def importance_pruning_curve(params: dict, batch: Batch | None = None) -> PruningCurve:
    """Prune in Michel et al.'s order: the lowest importance I (:func:`head_importance`,
    normalised per layer) first, ranked once.

    Returns
    -------
    PruningCurve
        ``order``, and ``loss``, ``accuracy`` with the first k heads of ``order`` off.

    Taught in chapter 04.
    """
    batch = eval_batch() if batch is None else batch
    importance = head_importance(params, batch)  # (L, H)
    every = [(layer, head) for layer in range(CONFIG.n_layers)
             for head in range(CONFIG.n_heads)]
    order = [every[i] for i in np.argsort(importance, axis=None, kind="stable")]
    return pruning_curve(params, batch, CONFIG, order=order)


def greedy_pruning_curve(params: dict, batch: Batch | None = None) -> PruningCurve:
    """Switch heads off one by one, each time the one whose removal now costs least.

    Unlike :func:`attnlab.training.pruning_curve`, which ranks the heads once by the
    loss with each removed alone, every step here re-measures the loss of removing each
    remaining head given the heads already off, and removes the cheapest.

    Returns
    -------
    PruningCurve
        ``order``, and ``loss``, ``accuracy`` with the first k heads of ``order`` off.

    Taught in chapter 04.
    """
    batch = eval_batch() if batch is None else batch
    every = [(layer, head) for layer in range(CONFIG.n_layers)
             for head in range(CONFIG.n_heads)]
    off: list[tuple[int, int]] = []
    results = [evaluate(params, batch, CONFIG)]
    while len(off) < len(every):
        trials = {pair: evaluate(params, batch, CONFIG, ablate=off + [pair])
                  for pair in every if pair not in off}
        cheapest = min(trials, key=lambda pair: trials[pair][0])
        off.append(cheapest)
        results.append(trials[cheapest])
    loss, accuracy = (np.array(column) for column in zip(*results, strict=True))
    return PruningCurve(off, loss, accuracy)


class SeedStudy(NamedTuple):
    """What :func:`seed_studies` returns for one seed."""

    run: TrainedModel  # trained_model(seed)
    emergence: Emergence  # emergence(seed)
    once: PruningCurve  # pruning_curve(run.params, eval_batch(), CONFIG)
    greedy: PruningCurve  # greedy_pruning_curve(run.params)
    importance: PruningCurve  # importance_pruning_curve(run.params)
    uptrained: dict  # (n_kv_heads, how) -> uptrained(seed, n_kv_heads, how)
    ablation: np.ndarray  # (L, H): ablation_losses(run.params, eval_batch(), CONFIG)


def seed_studies(seeds, *, workers: int | None = None) -> dict[int, SeedStudy]:
    """Every seed's run with its measurements of sections 6 and 7, the seeds side by side.

    For each seed: :func:`trained_model`, :func:`emergence`, the pruning curve in the
    order of the heads' losses alone (:func:`attnlab.training.pruning_curve` on
    :func:`eval_batch`) with those losses (:func:`attnlab.training.ablation_losses`),
    :func:`greedy_pruning_curve`, :func:`importance_pruning_curve` and
    :func:`uptrained` for every ``(n_kv_heads, how)`` of :data:`STUDY_POOLINGS` (put in
    this process's cache). Each seed is one call of :func:`attnlab.parallel.on_cores`
    that trains it (unless trained already) and measures it at once, so the seeds
    share the CPU cores with one start of the processes; the results are the same,
    bit for bit, as those functions called one after the other (with one core, that is
    what runs). ``workers`` as for :func:`~attnlab.parallel.on_cores` (default: as many
    as the cores and the seeds).
    It teaches nothing of its own: it runs those functions side by side, for speed.

    Taught in chapter 04.
    """
    seeds = [int(seed) for seed in seeds]
    todo = list(dict.fromkeys(seeds))
    studies = on_cores(_study_seed, [(seed, _TRAINED.get(seed)) for seed in todo],
                       workers=workers)
    for seed, study in zip(todo, studies, strict=True):
        _TRAINED.setdefault(seed, study.run)
        for (n_kv, how), result in study.uptrained.items():
            _UPTRAINED.setdefault((seed, n_kv, how), result)
    done = dict(zip(todo, studies, strict=True))
    return {seed: done[seed] for seed in seeds}


def _study_seed(seed: int, run: TrainedModel | None) -> SeedStudy:
    """One seed of :func:`seed_studies`: its training if ``run`` is None, then its
    measurements. In a fresh process the run is put in that process's cache first, so
    that :func:`emergence` reads it instead of training again."""
    run = _train_seed(seed) if run is None else run
    _TRAINED.setdefault(seed, run)
    batch = eval_batch()
    pooled = {key: uptrained(seed, *key) for key in STUDY_POOLINGS}
    # pruning_curve's own order, from the ablation losses kept for section 7
    alone = ablation_losses(run.params, batch, CONFIG)  # (L, H)
    every = [(layer, head) for layer in range(CONFIG.n_layers)
             for head in range(CONFIG.n_heads)]
    order = [every[i] for i in np.argsort(alone, axis=None, kind="stable")]
    return SeedStudy(run, emergence(seed),
                     pruning_curve(run.params, batch, CONFIG, order=order),
                     greedy_pruning_curve(run.params, batch),
                     importance_pruning_curve(run.params, batch), pooled, alone)


#: How :func:`pooled_params` makes a group's K/V head: Ainslie et al.'s mean and the two
#: controls they compare it with (their Figure 4).
POOLINGS = ("mean", "first", "random")

#: The uptrained runs :func:`seed_studies` makes for each seed: the mean at h_kv = 2 and
#: all three ways at h_kv = 1 (MQA, the conversion of Ainslie et al.'s Figure 4).
STUDY_POOLINGS = ((2, "mean"),) + tuple((1, how) for how in POOLINGS)


def pooled_params(params: dict, n_kv_heads: int, how: str = "mean") -> tuple[ModelConfig, dict]:
    """Convert every layer to ``n_kv_heads`` K/V heads by mean-pooling (Ainslie et al.).

    Returns the config with ``n_kv_heads`` and the new parameters (a copy: W_Q, W_O,
    the embeddings and the unembedding unchanged; W_K and W_V pooled per group by
    :func:`attnlab.mean_pool_kv`). ``how`` selects the K/V head of each group as
    Ainslie et al.'s controls do: ``"mean"`` (their method), ``"first"`` (the first
    head of the group, the others dropped) or ``"random"`` (W_K and W_V drawn afresh
    as :func:`attnlab.model.init_params` draws them, rng 0; nothing of them kept).

    Taught in chapter 04.
    """
    if how not in POOLINGS:
        raise ValueError(f"how は {POOLINGS} のどれかです: how={how!r}")
    config = ModelConfig(**{**CONFIG.__dict__, "n_kv_heads": int(n_kv_heads)})
    pooled = dict(params)
    fresh = init_params(config, np.random.default_rng(0))  # for how="random"
    group, Dh = CONFIG.n_heads // config.n_kv_heads, CONFIG.d_head
    for layer in range(CONFIG.n_layers):
        weights = mean_pool_kv(layer_projections(params, layer), CONFIG.n_heads, n_kv_heads)
        if how == "first":
            old = layer_projections(params, layer)
            first = [j * group * Dh + i for j in range(config.n_kv_heads) for i in range(Dh)]
            weights = weights._replace(w_k=old.w_k[:, first], w_v=old.w_v[:, first])
        elif how == "random":
            new = layer_projections(fresh, layer)
            weights = weights._replace(w_k=new.w_k, w_v=new.w_v)
        pooled.update(zip(layer_keys(layer), weights, strict=True))
    return config, pooled


#: The uptrained models so far, by (seed, n_kv_heads, how) (:func:`uptrained`).
_UPTRAINED: dict[tuple[int, int, str], tuple[ModelConfig, dict]] = {}


def uptrained(seed: int, n_kv_heads: int, how: str = "mean") -> tuple[ModelConfig, dict]:
    """Pool the trained model of ``seed`` to ``n_kv_heads``, then train it briefly.

    :func:`pooled_params` with ``how``, then :data:`UPTRAIN_STEPS` steps of Adam from
    the pooled parameters on new batches (rng ``[seed, 1]``, the same for every
    ``how``). Cached (:func:`seed_studies` fills the cache for every seed it runs);
    returns (config, params).

    Taught in chapter 04.
    """
    key = (int(seed), int(n_kv_heads), how)
    if key not in _UPTRAINED:
        config, pooled = pooled_params(trained_model(seed).params, n_kv_heads, how)
        result = train(config, TASK, steps=UPTRAIN_STEPS,
                       rng=np.random.default_rng([seed, 1]), init_params=pooled)
        _UPTRAINED[key] = config, result.params
    return _UPTRAINED[key]


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


# --- sharing K/V heads: what the cache costs in real configurations -------------------------


class Preset(NamedTuple):
    """A published attention configuration (FACTS.md; the toy is :data:`CONFIG`)."""

    n_layers: int
    n_heads: int
    n_kv_heads: int  # as published
    d_head: int
    sliding_window: int | None = None  # keys a query sees (rolling-buffer cache); None: all
    context_len: int | None = None  # the context length the model was trained for


#: Layers / query heads / K/V heads / head width of real models and of the book's toy.
PRESETS = {
    "Llama 2 7B": Preset(32, 32, 32, 128, context_len=4096),
    "Llama 2 70B": Preset(80, 64, 8, 128, context_len=4096),
    "Llama 3 8B": Preset(32, 32, 8, 128, context_len=8192),
    "Mistral 7B v0.1": Preset(32, 32, 8, 128, sliding_window=4096, context_len=8192),
    "本書のモデル": Preset(CONFIG.n_layers, CONFIG.n_heads, CONFIG.n_kv_heads, CONFIG.d_head,
                        context_len=CONFIG.max_len),
}
#: The chapter's KV-cache example: the context length of its table, and the published
#: GQA model whose cache it works out.
KV_CONTEXT_LEN = 4096
KV_EXAMPLE_MODEL = "Llama 2 70B"


class KVCost(NamedTuple):
    """What :func:`kv_cost` returns."""

    kv_params: int  # parameters of W_K and W_V over all layers
    bytes_per_token: int  # KV cache of one token (batch 1)
    total_bytes: int  # KV cache of seq_len tokens (batch 1)


def kv_divisors(n_heads: int) -> list[int]:
    """The K/V head counts a layer with ``n_heads`` query heads can have (divisors of H).

    Taught in chapter 04.
    """
    return [d for d in range(n_heads, 0, -1) if n_heads % d == 0]


def kv_cost(preset: Preset, n_kv_heads: int, seq_len: int, bytes_per_value: int = 2, *,
            window: bool = True) -> KVCost:
    """K/V projection parameters and KV-cache bytes of a configuration with ``n_kv_heads``.

    d_model = H · Dh; the W_K and W_V of a layer are each (d_model, Hkv · Dh). The cache
    sizes come from :func:`attnlab.costs.kv_cache_bytes` (fp16 by default), with the
    preset's sliding window (a rolling buffer of W tokens) unless ``window=False``.

    Taught in chapter 04.
    """
    if preset.n_heads % n_kv_heads:
        raise ValueError(
            f"n_kv_heads={n_kv_heads} は n_heads={preset.n_heads} の約数にしてください")
    d_model = preset.n_heads * preset.d_head
    kv_params = 2 * preset.n_layers * d_model * n_kv_heads * preset.d_head
    per_token = kv_cache_bytes(preset.n_layers, n_kv_heads, preset.d_head, 1,
                               bytes_per_value=bytes_per_value)
    total = kv_cache_bytes(preset.n_layers, n_kv_heads, preset.d_head, seq_len,
                           bytes_per_value=bytes_per_value,
                           sliding_window=preset.sliding_window if window else None)
    return KVCost(kv_params, per_token, total)


def format_bytes(n_bytes: float) -> str:
    """``1.25 GiB``, ``512 KiB``: binary units, 3 significant digits.

    Taught in chapter 04.
    """
    value, unit = float(n_bytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:.3g} {unit}"
