"""Chapter 10: train short, test long — every positional scheme on one task.

One task (:class:`attnlab.tasks.PreviousToken`: copy the token one place back, a rule
fixed by a relative position alone), one model size, trained at length L and evaluated
at L, 2L and 4L. Five kinds of model are trained (no positions, sinusoidal, a learned
table of 4L rows, RoPE, ALiBi); the RoPE model is then evaluated four ways, by changing
only its settings with :func:`dataclasses.replace` as chapter 09 did: plain RoPE at the
longer length (extrapolation), position interpolation, the NTK-aware base and YaRN, each
with ``rope_scale`` = evaluation length / L. Accuracy is measured on the positions the
model never saw in training (query positions i ≥ L); at L itself, on every scored position.

Two ablations of YaRN run on the same trained RoPE models and the same batches
(:data:`LENGTH_ABLATIONS`): the ramp linear in the number of turns, as Peng et al. write
it, and YaRN without its temperature. Both are inference-time changes: no training.

Then a short fine-tune at 2L and 4L of the trained RoPE model, once as it is
(extrapolation) and once with position interpolation: Chen et al.'s comparison in
miniature.

The runs are independent (each draws from its own generator), so :func:`train_study`
and :func:`finetune_comparison` share them among the CPU cores (:func:`on_cores`, not
taught), and :func:`evaluate_study` its evaluations (:func:`on_threads`); the results are
the same, bit for bit, as one run after the other.
"""

import dataclasses
import time
from typing import NamedTuple

import numpy as np

from attnlab._validate import choice, generator, positive_int
from attnlab.experiments.context_extension import yarn_ablation
from attnlab.model import ModelConfig, check_config, forward
from attnlab.parallel import on_cores, on_threads
from attnlab.training import cosine_lr, train

#: The model of the chapter: one layer, eight heads (so that ALiBi's steepest slope is
#: 1/2), head width 8 (four RoPE pairs). float64: in float32 the trained sinusoidal model
#: came out differently on other CPU instruction sets (accuracies moved in the second
#: decimal); in float64 every printed digit is the same.
LENGTH_MODEL = dict(vocab_size=32, d_model=64, n_heads=8, n_layers=1, dtype="float64")
#: Training length L and the evaluation lengths L, 2L, 4L.
LENGTH_TRAIN_LEN = 16
LENGTH_FACTORS = (1, 2, 4)
#: Training settings of every run. 170 steps: the first count tried at which the slowest
#: kind (ALiBi) is above 0.9 at L by 0.02 on every seed (0.920, 0.935, 0.930 on seeds 0–2;
#: at 150 and 160 steps seed 0 was at 0.902 and 0.903, at 100 and 120 below 0.9); 200
#: steps (and 400, when it was tried) moved no conclusion of the chapter.
LENGTH_STEPS = 170
LENGTH_BATCH_SIZE = 32
LENGTH_LR = 1e-2
#: Rows of each evaluation batch: 64 rows count 960, 1,024 and 3,072 positions at L, 2L
#: and 4L, a standard error of at most 0.016 on an accuracy (0.009 at 4L): smaller than
#: every difference the chapter compares, though not always than the seeds' spread (the
#: chapter says so).
LENGTH_EVAL_ROWS = 64
#: Fine-tuning at 4L: steps, and the steps after which the accuracy is measured.
FINETUNE_STEPS = 40
FINETUNE_MARKS = (0, 5, 10, 20, 40)
#: The seeds of the chapter's study, and the evaluation batches' seeds (offset + seed).
LENGTH_SEEDS = (0, 1, 2)
LENGTH_EVAL_SEED_OFFSET = 100
#: The fine-tunes, by length factor: the steps after which the accuracy is measured (the
#: last is the number of steps; at 2L PI is past 0.95 by step 20 on every seed), rows of
#: the evaluation batch, rows of each training batch (at 4L, 16 rows of 4L = 32 rows of
#: 2L tokens a step), and the seed offsets of the evaluation batches and of the training
#: batches (offset + seed).
FINETUNE_SETTINGS = {
    2: dict(marks=FINETUNE_MARKS[:4], eval_rows=LENGTH_EVAL_ROWS,
            batch_size=LENGTH_BATCH_SIZE, eval_offset=300, train_offset=400),
    4: dict(marks=FINETUNE_MARKS, eval_rows=LENGTH_EVAL_ROWS, batch_size=16,
            eval_offset=500, train_offset=600),
}

#: The trained kinds of model: label → ``positional`` of :class:`ModelConfig`.
TRAINED_KINDS = {
    "位置なし": "none",
    "正弦波": "sinusoidal",
    "学習（4L 行）": "learned",
    "RoPE": "rope",
    "ALiBi": "alibi",
}
#: The compared methods: label → (trained kind, RoPE scaling at evaluation or None).
LENGTH_METHODS = {
    "位置なし": ("位置なし", None),
    "正弦波": ("正弦波", None),
    "学習（4L 行）": ("学習（4L 行）", None),
    "RoPE 外挿": ("RoPE", None),
    "RoPE+PI": ("RoPE", "pi"),
    "RoPE+NTK": ("RoPE", "ntk"),
    "RoPE+YaRN": ("RoPE", "yarn"),
    "ALiBi": ("ALiBi", None),
}
#: YaRN taken apart on the trained RoPE models (labels as LENGTH_METHODS): the paper's
#: ramp γ(r), linear in the turns, and the reference ramp without the temperature.
LENGTH_ABLATIONS = {
    "YaRN（論文のランプ）": ("RoPE", "yarn_turns"),
    "YaRN（温度なし）": ("RoPE", "yarn_no_temp"),
}


def length_config(kind: str, train_len: int = LENGTH_TRAIN_LEN, *,
                  table_factor: int = 4) -> ModelConfig:
    """The chapter's model for one trained kind, with a learned table of
    ``table_factor · train_len`` rows and YaRN's trained length set to ``train_len``.

    Parameters
    ----------
    kind : str
        A key of :data:`TRAINED_KINDS`.
    train_len : int
        L, the training length.
    table_factor : int
        The learned table has this many times L rows (only rows 0 … L−1 are trained).

    Taught in chapter 10.
    """
    choice(kind, "kind", TRAINED_KINDS)
    train_len = positive_int(train_len, "train_len")
    table_factor = positive_int(table_factor, "table_factor")
    return ModelConfig(**LENGTH_MODEL, max_len=table_factor * train_len,
                       positional=TRAINED_KINDS[kind], rope_original_max_len=train_len)


#: The chapter's two ablations of YaRN, by the name :func:`method_config` takes: the
#: paper's ramp γ(r), linear in the turns, and YaRN without its temperature. They are
#: the experiment's, not the model's:
#: :func:`attnlab.experiments.context_extension.yarn_ablation`.
YARN_ABLATIONS = {"yarn_turns": {"ramp": "turns"}, "yarn_no_temp": {"temperature": False}}


def method_config(config: ModelConfig, scaling: str | None, train_len: int,
                  eval_len: int, *, band: dict | None = None) -> ModelConfig:
    """The trained model's settings for running at ``eval_len``.

    With ``scaling`` None the model runs unchanged (RoPE: extrapolation); with
    ``"pi"``, ``"ntk"`` or ``"yarn"`` the RoPE settings are stretched by
    s = eval_len / train_len (s = 1 at the training length changes nothing); with a
    name of :data:`YARN_ABLATIONS`, YaRN with one part changed. ``band``
    (``{"beta_fast": β, "beta_slow": α}``) sets YaRN's band for the YaRN methods.

    Taught in chapter 10.
    """
    config = check_config(config)
    if scaling is None:
        return config
    choice(scaling, "scaling", ("pi", "ntk", "yarn", *YARN_ABLATIONS))
    if config.positional != "rope":
        raise ValueError(
            f"scaling={scaling!r} は RoPE のモデルにだけ使えます: positional={config.positional!r}"
        )
    train_len = positive_int(train_len, "train_len")
    eval_len = positive_int(eval_len, "eval_len")
    if eval_len < train_len:
        raise ValueError(
            f"eval_len={eval_len} が train_len={train_len} より短いです: 伸ばす方法は "
            "訓練より長い系列のためのものです"
        )
    stretched = dataclasses.replace(
        config, rope_scale=eval_len / train_len, rope_original_max_len=train_len,
        rope_scaling="yarn" if scaling in YARN_ABLATIONS else scaling)
    if scaling not in YARN_ABLATIONS and band is None:
        return stretched
    if stretched.rope_scaling != "yarn":
        raise ValueError(f"band は YaRN の方法にだけ使えます: scaling={scaling!r}")
    return yarn_ablation(stretched, **YARN_ABLATIONS.get(scaling, {}), **(band or {}))


def accuracy_from(params: dict, batch, config: ModelConfig, start: int = 0) -> float:
    """Accuracy on the scored positions ``i ≥ start`` of a batch.

    Parameters
    ----------
    params : dict
    batch : attnlab.tasks.Batch
        Tokens, targets and loss_mask, each (B, T).
    config : ModelConfig
    start : int
        The first position counted (0: every scored position).

    Returns
    -------
    float
        The share of counted positions where the most likely token is the target.

    Taught in chapter 10.
    """
    if not isinstance(start, (int, np.integer)) or start < 0:
        raise ValueError(f"start は 0 以上の整数である必要があります: start={start!r}")
    T = batch.tokens.shape[1]
    if start >= T:
        raise ValueError(f"start={start} が系列長 T={T} 以上です: 数える位置がありません")
    logits = forward(params, batch.tokens, config).logits  # (B, T, V)
    right = logits.argmax(axis=-1) == batch.targets  # (B, T)
    counted = batch.loss_mask.copy()
    counted[:, :start] = False
    if not counted.any():
        raise ValueError(f"start={start} 以降にスコアを付ける位置がありません")
    return float(right[counted].mean())


def position_accuracy(params: dict, batch, config: ModelConfig) -> np.ndarray:
    """Accuracy at each query position, over the rows of a batch where it is scored.

    Parameters
    ----------
    params : dict
    batch : attnlab.tasks.Batch
        Tokens, targets and loss_mask, each (B, T).
    config : ModelConfig
        The setting the model runs in at length T.

    Returns
    -------
    np.ndarray
        Shape (T,); NaN at positions that no row scores.

    :func:`position_study`, which chapter 10 calls, makes it for every seed and method.

    Not taught: the accuracies by position of one model on one batch.
    """
    logits = forward(params, batch.tokens, config).logits  # (B, T, V)
    right = (logits.argmax(axis=-1) == batch.targets) & batch.loss_mask  # (B, T)
    scored = batch.loss_mask.sum(axis=0)  # (T,)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(scored > 0, right.sum(axis=0) / np.maximum(scored, 1), np.nan)


class TrainedRun(NamedTuple):
    """One trained model: its parameters, the training time and its last accuracy."""

    params: dict
    seconds: float  # wall-clock time of the training run
    final_accuracy: float  # mean training accuracy over the last 20 steps


def train_short(config: ModelConfig, task, *, rng: np.random.Generator,
                train_len: int = LENGTH_TRAIN_LEN, steps: int = LENGTH_STEPS,
                batch_size: int = LENGTH_BATCH_SIZE, lr: float = LENGTH_LR) -> TrainedRun:
    """Train the chapter's model at length ``train_len`` and time the run.

    Not taught: one run of :func:`train_kinds`.
    """
    rng = generator(rng)
    start = time.perf_counter()
    result = train(config, task, steps=steps, rng=rng, batch_size=batch_size,
                   seq_len=train_len, lr=lr)
    seconds = time.perf_counter() - start
    return TrainedRun(result.params, seconds, float(result.accuracy[-20:].mean()))


def evaluation_batches(task, rng: np.random.Generator, train_len: int = LENGTH_TRAIN_LEN,
                       factors=LENGTH_FACTORS, rows: int = LENGTH_EVAL_ROWS) -> list:
    """The evaluation batches of :func:`evaluate_lengths`: one per length, in order.

    An ``rng`` of the same seed gives the same batches, so a later cell can look again
    at the very sequences the table was measured on.

    Returns
    -------
    list of attnlab.tasks.Batch
        One batch of ``rows`` rows per ``factor · train_len``.

    Taught in chapter 10.
    """
    rng = generator(rng)
    train_len = positive_int(train_len, "train_len")
    return [task(rng, rows, positive_int(f, "factors の要素") * train_len) for f in factors]


def evaluate_lengths(runs: dict, task, *, rng: np.random.Generator,
                     train_len: int = LENGTH_TRAIN_LEN, factors=LENGTH_FACTORS,
                     rows: int = LENGTH_EVAL_ROWS,
                     methods: dict | None = None) -> dict[str, np.ndarray]:
    """Accuracy of every method of :data:`LENGTH_METHODS` at every evaluation length.

    Every method sees the same batch at a given length. At ``train_len`` every scored
    position counts; at longer lengths only the positions ``i ≥ train_len``, which the
    model never saw in training. ``methods`` (label → (trained kind, scaling)) replaces
    :data:`LENGTH_METHODS`, e.g. :data:`LENGTH_ABLATIONS`: an ``rng`` of the same seed
    draws the same batches.

    Parameters
    ----------
    runs : dict
        Trained kind (a key of :data:`TRAINED_KINDS`) → its :class:`TrainedRun` (or the
        parameters), all of one seed.
    task : callable
    rng : np.random.Generator
        Draws the evaluation batches.

    Returns
    -------
    dict of str to np.ndarray
        Method label → accuracies, shape (len(factors),).

    :func:`evaluate_study`, which chapters 10 and 12 call, makes the same evaluations for
    every seed, shared among the CPU cores.

    Not taught: the evaluations of one seed, one after the other.
    """
    train_len = positive_int(train_len, "train_len")
    lengths = [positive_int(f, "factors の要素") * train_len for f in factors]
    batches = evaluation_batches(task, rng, train_len, factors, rows)  # (rows, length) each
    out = {}
    for method, (kind, scaling) in (LENGTH_METHODS if methods is None else methods).items():
        if kind not in runs:
            raise ValueError(f"runs に {kind!r} の学習済みモデルがありません")
        params = getattr(runs[kind], "params", runs[kind])
        config = length_config(kind, train_len)
        out[method] = np.array([
            accuracy_from(params, batch, method_config(config, scaling, train_len, length),
                          start=0 if length == train_len else train_len)
            for length, batch in zip(lengths, batches, strict=True)
        ])
    return out


def _check_kinds(runs: dict, methods: dict) -> None:
    """Every seed of ``runs`` has a trained model of every kind that ``methods`` use."""
    for seed, by_kind in runs.items():
        for kind, _ in methods.values():
            if kind not in by_kind:
                raise ValueError(f"runs[{seed!r}] に {kind!r} の学習済みモデルがありません")


def _evaluate_method(run, task, seed: int, method: str, kind_scaling: tuple,
                     train_len: int, factors, rows: int) -> np.ndarray:
    """One method of :func:`evaluate_study` for one seed: its row of
    :func:`evaluate_lengths`, on the batches that seed's generator draws."""
    kind, _ = kind_scaling
    return evaluate_lengths({kind: run}, task,
                            rng=np.random.default_rng(LENGTH_EVAL_SEED_OFFSET + seed),
                            train_len=train_len, factors=factors, rows=rows,
                            methods={method: kind_scaling})[method]


def evaluate_study(runs: dict, task, *, methods: dict | None = None,
                   train_len: int = LENGTH_TRAIN_LEN, factors=LENGTH_FACTORS,
                   rows: int = LENGTH_EVAL_ROWS, workers: int | None = None) -> dict:
    """:func:`evaluate_lengths` for every seed of ``runs``, each seed's batches drawn by
    ``np.random.default_rng(LENGTH_EVAL_SEED_OFFSET + seed)``.

    The evaluations (one per seed and method) are independent, so :func:`on_threads`
    shares them among the CPU cores (a forward pass over a long batch is a few large numpy
    operations, which run in threads side by side); every one draws its seed's batches
    anew (the same batches), and the result is the same, bit for bit, as evaluating one
    seed after the other.

    Parameters
    ----------
    runs : dict
        seed → {trained kind: :class:`TrainedRun` (or the parameters)}, as
        :func:`train_study` returns it.
    task : callable
    methods : dict, optional
        Label → (trained kind, scaling); :data:`LENGTH_METHODS` by default.
    train_len, factors, rows
        As for :func:`evaluate_lengths`.
    workers : int, optional
        As for :func:`on_threads`.

    Returns
    -------
    dict
        seed → {method: accuracies, shape (len(factors),)}.

    Taught in chapter 10.
    """
    methods = LENGTH_METHODS if methods is None else methods
    train_len = positive_int(train_len, "train_len")
    factors = tuple(positive_int(f, "factors の要素") for f in factors)
    rows = positive_int(rows, "rows")
    _check_kinds(runs, methods)
    calls = [(runs[seed][kind], task, seed, method, (kind, scaling), train_len, factors, rows)
             for seed in runs for method, (kind, scaling) in methods.items()]
    done = iter(on_threads(_evaluate_method, calls, workers=workers))
    return {seed: {method: next(done) for method in methods} for seed in runs}


def _position_method(run, batch, kind_scaling: tuple, train_len: int) -> np.ndarray:
    """One method of :func:`position_study` for one seed: :func:`position_accuracy` in
    the method's setting at the batch's length."""
    kind, scaling = kind_scaling
    config = method_config(length_config(kind, train_len), scaling, train_len,
                           batch.tokens.shape[1])
    return position_accuracy(getattr(run, "params", run), batch, config)


def position_study(runs: dict, batches: dict, *, methods: dict | None = None,
                   train_len: int = LENGTH_TRAIN_LEN,
                   workers: int | None = None) -> dict[str, np.ndarray]:
    """Accuracy at each query position, for every method and every seed.

    For seed ``s`` and a method (trained kind, scaling), the model ``runs[s][kind]`` runs on
    ``batches[s]`` in the setting ``method_config(length_config(kind, train_len), scaling,
    train_len, T)`` of the batch's length T, and :func:`position_accuracy` averages each
    position over the rows. The calls (one per seed and method) are independent, so
    :func:`on_threads` shares them among the CPU cores, as :func:`evaluate_study` does;
    the result is the same, bit for bit, as one call after the other.

    Parameters
    ----------
    runs : dict
        seed → {trained kind: :class:`TrainedRun` (or the parameters)}, as
        :func:`train_study` returns it.
    batches : dict
        seed → attnlab.tasks.Batch, (B, T), one for every seed of ``runs``, all of the
        same length T.
    methods : dict, optional
        Label → (trained kind, scaling); :data:`LENGTH_METHODS` by default.
    train_len : int
        The training length L of the runs (the RoPE scalings stretch L to T).
    workers : int, optional
        As for :func:`on_threads`.

    Returns
    -------
    dict of str to np.ndarray
        Method label → accuracies, shape (seeds, T), the seeds in the order of ``runs``;
        NaN at positions that no row scores.

    Taught in chapter 10.
    """
    methods = LENGTH_METHODS if methods is None else methods
    train_len = positive_int(train_len, "train_len")
    if not runs:
        raise ValueError("runs が空です: シードごとの学習済みモデルを渡してください")
    missing = [seed for seed in runs if seed not in batches]
    if missing:
        raise ValueError(f"batches にシード {missing} のバッチがありません")
    lengths = {batches[seed].tokens.shape[1] for seed in runs}
    if len(lengths) > 1:
        raise ValueError(f"batches の系列長がそろっていません: {sorted(lengths)}")
    _check_kinds(runs, methods)
    calls = [(runs[seed][kind], batches[seed], (kind, scaling), train_len)
             for method, (kind, scaling) in methods.items() for seed in runs]
    done = iter(on_threads(_position_method, calls, workers=workers))
    return {method: np.stack([next(done) for _ in runs]) for method in methods}


def finetune_curve(params: dict, config: ModelConfig, task, *, rng: np.random.Generator,
                   eval_batch, train_len: int = LENGTH_TRAIN_LEN,
                   steps: int = FINETUNE_STEPS, marks=FINETUNE_MARKS,
                   batch_size: int = LENGTH_BATCH_SIZE, lr: float = LENGTH_LR) -> np.ndarray:
    """Fine-tune trained parameters at the length of ``eval_batch``; accuracy as it goes.

    ``config`` is the setting the model is fine-tuned and evaluated with (e.g. the RoPE
    model unchanged, or with position interpolation). Accuracy is measured on the
    positions ``i ≥ train_len`` of ``eval_batch`` after each number of updates in
    ``marks`` (0 = before fine-tuning).

    Returns
    -------
    np.ndarray
        Shape (len(marks),).

    Not taught: one curve of :func:`finetune_comparison`.
    """
    config = check_config(config)
    marks = tuple(int(m) for m in marks)
    if any(m < 0 or m > steps for m in marks):
        raise ValueError(f"marks は 0 〜 steps={steps} の整数にしてください: marks={marks}")
    seq_len = eval_batch.tokens.shape[1]
    curve = {}

    def record(step, live):
        if step in marks:
            curve[step] = accuracy_from(live, eval_batch, config, start=train_len)

    train(config, task, steps=steps, rng=generator(rng), batch_size=batch_size,
          seq_len=seq_len, lr=lr, init_params=params, callback=record)
    return np.array([curve[m] for m in marks])


def train_kinds(seed: int, task, train_len: int = LENGTH_TRAIN_LEN, *,
                steps: int = LENGTH_STEPS) -> dict[str, TrainedRun]:
    """Every kind of :data:`TRAINED_KINDS` trained at ``train_len`` for one seed
    (``steps`` updates each; the chapter's runs take :data:`LENGTH_STEPS`).

    ``np.random.default_rng(seed)`` is split into one stream per kind, so each kind's run
    is the same whichever other kinds are trained.

    :func:`train_study`, which chapter 10 calls, makes the same runs on every core.

    Not taught: the runs of one seed, one after the other.
    """
    streams = _kind_streams(seed)
    return {kind: train_short(length_config(kind, train_len), task, rng=streams[kind],
                              train_len=train_len, steps=steps)
            for kind in TRAINED_KINDS}


def _kind_streams(seed: int) -> dict[str, np.random.Generator]:
    """``np.random.default_rng(seed)`` split into one stream per trained kind."""
    streams = np.random.default_rng(seed).spawn(len(TRAINED_KINDS))
    return dict(zip(TRAINED_KINDS, streams, strict=True))


def _train_kind(seed: int, kind: str, task, train_len: int, steps: int) -> TrainedRun:
    """The run of ``kind`` that :func:`train_kinds` makes for ``seed``."""
    return train_short(length_config(kind, train_len), task, rng=_kind_streams(seed)[kind],
                       train_len=train_len, steps=steps)


def train_study(seeds, task, train_len: int = LENGTH_TRAIN_LEN, *,
                steps: int = LENGTH_STEPS, workers: int | None = None) -> dict:
    """Every kind of :data:`TRAINED_KINDS` trained at ``train_len`` for every seed.

    For each seed, ``np.random.default_rng(seed)`` is split into one stream per kind,
    so each kind's run is the same whichever other kinds or seeds are trained. The runs
    are independent, so :func:`on_cores` shares them among the CPU cores; the result is
    ``{seed: train_kinds(seed, task, …)}``, bit for bit.

    Returns
    -------
    dict
        seed → {trained kind: :class:`TrainedRun`}.

    Taught in chapter 10.
    """
    calls = [(seed, kind, task, train_len, steps) for seed in seeds for kind in TRAINED_KINDS]
    done = iter(on_cores(_train_kind, calls, workers=workers))
    return {seed: {kind: next(done) for kind in TRAINED_KINDS} for seed in seeds}


def _finetune_seed(params: dict, config: ModelConfig, task, seed: int, setting: dict,
                   length: int, train_len: int) -> np.ndarray:
    """One curve of :func:`finetune_comparison`: one seed's batches of ``setting``."""
    eval_batch = task(np.random.default_rng(setting["eval_offset"] + seed),
                      setting["eval_rows"], length)  # (rows, factor · L)
    return finetune_curve(params, config, task,
                          rng=np.random.default_rng(setting["train_offset"] + seed),
                          eval_batch=eval_batch, train_len=train_len,
                          steps=setting["marks"][-1], marks=setting["marks"],
                          batch_size=setting["batch_size"])


def _finetune_calls(runs: dict, task, factor: int, train_len: int) -> tuple[list, list]:
    """The names of :func:`finetune_comparison`'s curves for one factor and its calls of
    :func:`_finetune_seed`: every name's seeds, one name after the other."""
    choice(factor, "factor", FINETUNE_SETTINGS)
    length = factor * train_len
    config = length_config("RoPE", train_len)
    configs = {"RoPE 外挿": config,
               "RoPE+PI": method_config(config, "pi", train_len, length)}
    setting = FINETUNE_SETTINGS[factor]  # as this process has it, passed to every call
    calls = [(by_kind["RoPE"].params, cfg, task, seed, setting, length, train_len)
             for cfg in configs.values() for seed, by_kind in runs.items()]
    return list(configs), calls


def finetune_comparison(runs: dict, task, factors=(4, 2),
                        train_len: int = LENGTH_TRAIN_LEN, *,
                        workers: int | None = None) -> dict[int, dict[str, np.ndarray]]:
    """Fine-tune every seed's RoPE model at ``factor · train_len`` for each factor,
    extrapolated and with PI.

    ``runs`` is seed → {kind: TrainedRun} (:func:`train_study`); the steps, batches and
    their seeds are those of :data:`FINETUNE_SETTINGS` for each factor. The curves are
    independent and share the CPU cores (:func:`on_cores`; the longest first), so the
    curves of a factor are the same, bit for bit, whichever other factors are listed.

    Parameters
    ----------
    runs : dict
    task : callable
    factors : sequence of int
        Keys of :data:`FINETUNE_SETTINGS` (the chapter's: 4 and 2).
    train_len : int
    workers : int, optional
        As for :func:`on_cores`.

    Returns
    -------
    dict of int to dict of str to np.ndarray
        factor → ``"RoPE 外挿"`` and ``"RoPE+PI"`` → accuracies, shape
        (seeds, len(marks)), the marks of ``FINETUNE_SETTINGS[factor]``.

    Taught in chapter 10.
    """
    if isinstance(factors, (int, np.integer)) or not len(factors):
        raise ValueError("factors は倍率の並び（例: (4, 2) や (4,)）にしてください: "
                         f"factors={factors!r}")
    factors = [int(factor) for factor in factors]
    plans = {factor: _finetune_calls(runs, task, factor, train_len) for factor in factors}
    calls = [call for _, factor_calls in plans.values() for call in factor_calls]
    # a call: (params, config, task, seed, setting, length, train_len)
    curves = iter(on_cores(_finetune_seed, calls, workers=workers,
                           cost=lambda call: call[5] * call[4]["marks"][-1]))
    return {factor: {name: np.stack([next(curves) for _ in runs]) for name in names}
            for factor, (names, _) in plans.items()}  # factor -> name -> (seeds, marks)


# --- the study: every kind to a plateau, two tasks, five seeds (make study-length_generalization)

#: The study behind chapter 10's conclusions, too large for a Run All: run once by
#: ``make study-length_generalization`` and read by chapters 10 and 12 from
#: ``notebooks/studies/length_generalization.json`` (:mod:`attnlab.studies`).
#:
#: - ``tasks``: the chapter's distance-1 task (copy the token one back) and a task whose
#:   rule is a content-based read at distances that grow with the sequence:
#:   :class:`attnlab.tasks.RepeatedSequence` (chapter 04's task; periods up to T/2, so
#:   at 4L = 64 the token to read lies up to 32 = 2L back, beyond every trained
#:   distance). Each task has its model depth, steps and learning rate: one layer
#:   copies one back; a content read needs two (an induction head, chapter 04).
#: - ``kinds``: every trained kind of :data:`TRAINED_KINDS` plus the T5 bias; the RoPE
#:   models are also evaluated with PI, NTK, YaRN and the YaRN ablations
#:   (:data:`STUDY_ROPE_METHODS`).
#: - ``steps``: one budget per task, the same for every kind and not tuned to any
#:   threshold of the results, with the step size decayed by a cosine from ``lr`` to
#:   ``lr · lr_floor`` (:func:`attnlab.training.cosine_lr`; at a constant step size the
#:   evaluation numbers of one run jump by several hundredths between checkpoints). Every
#:   run is trained twice, at ``steps`` and at half of it, each with its own decay: the
#:   evaluation numbers are converged where the mean over seeds of the two budgets differ
#:   by at most ``converged`` (:func:`study_convergence`), and the chapter says which do
#:   not. The study also records each run's training curve and the change between its
#:   last two tenths (``plateau``: flat below 0.005).
#: - ``t5``: 16 buckets (8 exact distances 0–7, 8 log-spaced up to 16 = L; at this size
#:   the log-spaced half holds 8–15 one each and 15 and beyond share the last bucket), one
#:   table per head shared by the layers, as T5 does; with max_distance = L every bucket
#:   is trained, as in T5 (max_distance 128 < 512 trained tokens). T5 adds the bias to
#:   the unscaled scores (its initialisation absorbs √Dh); here it is added to the
#:   scaled scores, as ALiBi's is (the same family of functions).
LENGTH_STUDY_CONFIG = {
    "tasks": {
        "previous_token": {"task": "PreviousToken", "n_layers": 1, "steps": 6000,
                           "lr": 0.01},
        "repeated_sequence": {"task": "RepeatedSequence", "n_layers": 2, "steps": 12000,
                              "lr": 0.003},
    },
    "kinds": ["none", "sinusoidal", "learned", "rope", "alibi", "t5"],
    "seeds": [0, 1, 2, 3, 4],
    "train_len": LENGTH_TRAIN_LEN,
    "factors": list(LENGTH_FACTORS),
    "vocab_size": 32, "d_model": 64, "n_heads": 8, "dtype": "float64",
    "batch_size": LENGTH_BATCH_SIZE,
    "eval_rows": LENGTH_EVAL_ROWS,
    "t5_n_buckets": 16, "t5_max_distance": LENGTH_TRAIN_LEN,
    "curve_points": 50,
    "plateau": 0.005,
    "lr_floor": 0.1,
    "converged": 0.01,
    # YaRN's band (α, β) rescaled to the toy: at L = 16 pair 0 turns 2.5 times, so the
    # paper's α = 1, β = 32 (for L = 2048–4096, where pair 0 turns 326–652 times) put
    # every pair below β. β = 1 and α = β/32 keep the paper's ratio β/α = 32 and put
    # pair 0 above β (kept), pair 1 inside the ramp and pairs 2–3 below α (interpolated),
    # as the paper's values do for LLaMA's fast, middle and slow pairs.
    "yarn_rescaled": {"beta_fast": 1.0, "beta_slow": 1.0 / 32},
}
#: The trained kinds of the study: ``positional`` of ModelConfig → label of the chapter.
STUDY_KIND_LABELS = {"none": "位置なし", "sinusoidal": "正弦波", "learned": "学習（4L 行）",
                     "rope": "RoPE", "alibi": "ALiBi", "t5": "T5 バイアス"}
#: The methods evaluated on each trained RoPE model: label → (scaling, YaRN band or
#: None). "縮小" is the band ``yarn_rescaled`` of the config.
STUDY_ROPE_METHODS = {
    "RoPE 外挿": (None, None),
    "RoPE+PI": ("pi", None),
    "RoPE+NTK": ("ntk", None),
    "RoPE+YaRN": ("yarn", None),
    "YaRN（論文のランプ）": ("yarn_turns", None),
    "YaRN（温度なし）": ("yarn_no_temp", None),
    "YaRN（α, β 縮小）": ("yarn", "rescaled"),
    "YaRN（論文のランプ, α, β 縮小）": ("yarn_turns", "rescaled"),
}
#: Replay tolerances on another machine (another CPU kernel of the BLAS, or another
#: numpy): training in float64 for thousands of steps, one rounding difference can move
#: the parameters a little and an argmax over 32 logits can then flip at a few of the
#: 960–3,072 scored positions. 0.005 is half of the last digit the chapters print: a
#: replay within it cannot move a printed accuracy by more than one in its last digit.
#: On the machine that made the artefact the replay must agree bit for bit.
LENGTH_STUDY_TOLERANCES = {"accuracy": 0.005, "accuracy_half": 0.005, "curve": 0.005,
                           "plateau_change": 0.005, "far_weight": 0.005, "by_period": 0.01,
                           "by_period_half": 0.01}


def _study_task(name: str, config: dict):
    """The task object of one entry of ``config["tasks"]``."""
    from attnlab import tasks

    spec = config["tasks"][name]
    if spec["task"] == "PreviousToken":
        return tasks.PreviousToken(vocab_size=config["vocab_size"])
    return tasks.RepeatedSequence(vocab_size=config["vocab_size"])


def check_length_study(config: dict) -> dict:
    """The study's config, checked (a Japanese ValueError naming the key).

    Not taught: the validation :func:`attnlab.studies.load_study` runs.
    """
    if not isinstance(config, dict):
        raise ValueError(f"config は辞書である必要があります: {config!r}")
    missing = sorted(set(LENGTH_STUDY_CONFIG) - set(config))
    extra = sorted(set(config) - set(LENGTH_STUDY_CONFIG))
    if missing or extra:
        raise ValueError(f"config のキーが違います: 足りない {missing}, 余分 {extra}")
    tasks_ = config["tasks"]
    if not isinstance(tasks_, dict) or not tasks_:
        raise ValueError(f"config['tasks'] は空でない辞書である必要があります: {tasks_!r}")
    for name, spec in tasks_.items():
        if not isinstance(spec, dict) or set(spec) != {"task", "n_layers", "steps", "lr"}:
            raise ValueError(f"config['tasks'][{name!r}] には task, n_layers, steps, lr が"
                             f"必要です: {spec!r}")
        choice(spec["task"], f"config['tasks'][{name!r}]['task']",
               ("PreviousToken", "RepeatedSequence"))
        positive_int(spec["n_layers"], "n_layers")
        positive_int(spec["steps"], "steps")
        if not isinstance(spec["lr"], float) or not spec["lr"] > 0:
            raise ValueError(f"config['tasks'][{name!r}]['lr'] は正の数です: {spec['lr']!r}")
    kinds = config["kinds"]
    if not isinstance(kinds, list) or not kinds:
        raise ValueError(f"config['kinds'] は空でないリストです: {kinds!r}")
    for kind in kinds:
        choice(kind, "config['kinds'] の要素", STUDY_KIND_LABELS)
    seeds = config["seeds"]
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
            or not all(isinstance(s, int) and s >= 0 for s in seeds)):
        raise ValueError(f"config['seeds'] は重複のない 0 以上の整数のリストです: {seeds!r}")
    for key in ("train_len", "vocab_size", "d_model", "n_heads", "batch_size", "eval_rows",
                "t5_n_buckets", "t5_max_distance", "curve_points"):
        positive_int(config[key], f"config['{key}']")
    factors = config["factors"]
    if not isinstance(factors, list) or factors[:1] != [1]:
        raise ValueError(f"config['factors'] は 1 で始まるリストです: {factors!r}")
    for factor in factors:
        positive_int(factor, "config['factors'] の要素")
    choice(config["dtype"], "config['dtype']", ("float32", "float64"))
    for name, spec in tasks_.items():
        if spec["steps"] % 2:
            raise ValueError(f"config['tasks'][{name!r}]['steps']={spec['steps']} は偶数です"
                             "（半分の予算でも訓練します）")
        if spec["steps"] % config["curve_points"]:
            raise ValueError(f"config['tasks'][{name!r}]['steps']={spec['steps']} が "
                             f"curve_points={config['curve_points']} で割り切れません")
    band = config["yarn_rescaled"]
    if not isinstance(band, dict) or set(band) != {"beta_fast", "beta_slow"}:
        raise ValueError(f"config['yarn_rescaled'] には beta_fast と beta_slow が必要です: "
                         f"{band!r}")
    if not 0 < band["beta_slow"] < band["beta_fast"]:
        raise ValueError(f"config['yarn_rescaled'] は 0 < beta_slow < beta_fast です: {band!r}")
    for key in ("plateau", "converged"):
        if not isinstance(config[key], float) or not 0 < config[key] < 1:
            raise ValueError(f"config['{key}'] は 0 と 1 の間の数です: {config[key]!r}")
    if not isinstance(config["lr_floor"], float) or not 0 <= config["lr_floor"] <= 1:
        raise ValueError(f"config['lr_floor'] は 0 以上 1 以下の数です: {config['lr_floor']!r}")
    _study_config(config, next(iter(tasks_)), kinds[0])  # the model settings validate
    return config


def _study_config(config: dict, task: str, kind: str) -> ModelConfig:
    """The model of one (task, kind) of the study."""
    L = config["train_len"]
    return ModelConfig(vocab_size=config["vocab_size"], d_model=config["d_model"],
                       n_heads=config["n_heads"], n_layers=config["tasks"][task]["n_layers"],
                       dtype=config["dtype"], max_len=max(config["factors"]) * L,
                       positional=kind, rope_original_max_len=L,
                       t5_n_buckets=config["t5_n_buckets"],
                       t5_max_distance=config["t5_max_distance"])


def _study_methods(config: dict, kind: str) -> dict:
    """Label → the setting maker ``(model config, eval_len) -> config`` of one kind."""
    L = config["train_len"]
    if kind != "rope":
        return {STUDY_KIND_LABELS[kind]: lambda cfg, length: cfg}
    band = config["yarn_rescaled"]
    methods = {}
    for label, (scaling, which) in STUDY_ROPE_METHODS.items():
        def make(cfg, length, scaling=scaling, which=which):
            return method_config(cfg, scaling, L, length,
                                 band=band if which == "rescaled" else None)
        methods[label] = make
    return methods


def _periods(tokens: np.ndarray) -> np.ndarray:
    """The period of each row of a RepeatedSequence batch: the first t > 0 at which the
    first token comes back (the segment's tokens are distinct). (B,)"""
    back = tokens[:, 1:] == tokens[:, :1]  # (B, T−1)
    return np.where(back.any(axis=1), back.argmax(axis=1) + 1, tokens.shape[1])


def _study_keys(config: dict) -> list[dict]:
    """Every run of the study: one (task, kind, seed)."""
    return [{"task": task, "kind": kind, "seed": seed} for task in config["tasks"]
            for kind in config["kinds"] for seed in config["seeds"]]


def _study_run(config: dict, key: dict) -> dict:
    """One run of the study: train (task, kind, seed) at L for the task's ``steps`` and,
    separately, for half of them (each with its own cosine decay, :func:`cosine_lr`), and
    evaluate every method of the kind at every length after each. The generators are
    ``default_rng([seed, t, k])`` for training (t, k: the task's and kind's places in
    :data:`LENGTH_STUDY_CONFIG`; the half budget draws the same first batches) and
    ``default_rng([seed, t, 1000])`` for the evaluation batches, which every kind and
    both budgets of one (task, seed) therefore share."""
    task_name, kind, seed = key["task"], key["kind"], key["seed"]
    t = list(LENGTH_STUDY_CONFIG["tasks"]).index(task_name)
    k = list(STUDY_KIND_LABELS).index(kind)
    spec = config["tasks"][task_name]
    task = _study_task(task_name, config)
    model = _study_config(config, task_name, kind)
    L = config["train_len"]
    eval_rng = np.random.default_rng([seed, t, 1000])
    batches = [task(eval_rng, config["eval_rows"], f * L) for f in config["factors"]]
    values = {}
    for steps, suffix in ((spec["steps"], ""), (spec["steps"] // 2, "_half")):
        result = train(model, task, steps=steps, rng=np.random.default_rng([seed, t, k]),
                       batch_size=config["batch_size"], seq_len=L,
                       lr=cosine_lr(spec["lr"], steps, config["lr_floor"]))
        if not suffix:
            points = config["curve_points"]
            values["curve"] = result.accuracy.reshape(points, -1).mean(axis=1)  # (points,)
            tenth = len(result.accuracy) // 10
            values["plateau_change"] = float(result.accuracy[-tenth:].mean()
                                             - result.accuracy[-2 * tenth:-tenth].mean())
        for name, value in _study_evaluate(config, task_name, kind, model, result.params,
                                           batches).items():
            family, _, label = name.partition("/")
            if suffix and family == "far_weight":
                continue  # the attention beyond L is read at the full budget only
            values[f"{family}{suffix}/{label}"] = value
    return {"key": key, "values": values}


def _study_evaluate(config: dict, task_name: str, kind: str, model: ModelConfig,
                    params: dict, batches: list) -> dict:
    """Every method of one trained model at every length: accuracy (L, 2L, 4L), the
    weight beyond L at the longest length (per layer) and, on the repeated sequence, the
    accuracy by period (≤ L/2, L/2–L, > L) at the longest length."""
    L = config["train_len"]
    values = {}
    for label, make in _study_methods(config, kind).items():
        accuracies, far, by_period = [], [], []
        for factor, batch in zip(config["factors"], batches, strict=True):
            length = factor * L
            cfg = make(model, length)
            out = forward(params, batch.tokens, cfg)
            right = (out.logits.argmax(axis=-1) == batch.targets) & batch.loss_mask  # (B, T)
            counted = batch.loss_mask.copy()
            if factor > 1:
                counted[:, :L] = False  # only the positions never seen in training
            accuracies.append(right[counted].sum() / counted.sum())
            if factor == max(config["factors"]):
                # the weight on keys at distance ≥ L, mean over the queries i ≥ L, rows
                # and heads, per layer
                i = np.arange(length)
                beyond = (i[:, None] - i[None, :]) >= L  # (T, T)
                far = [float(a[:, :, L:, :][..., beyond[L:]].sum() / a[:, :, L:, 0].size)
                       for a in out.attn]
                if task_name == "repeated_sequence":
                    period = _periods(batch.tokens)[:, None]  # (B, 1)
                    bands = (period <= L // 2, (period > L // 2) & (period <= L), period > L)
                    by_period = [float(right[counted & band].sum() / max((counted & band).sum(), 1))
                                 for band in bands]
        values[f"accuracy/{label}"] = np.array(accuracies)
        values[f"far_weight/{label}"] = np.array(far)
        if by_period:
            values[f"by_period/{label}"] = np.array(by_period)
    return values


def run_length_study(config: dict) -> list[dict]:
    """Every run of the study (:func:`_study_run` per (task, kind, seed)) on the cores.

    Not taught: ``make study-length_generalization``.
    """
    config = check_length_study(config)
    keys = _study_keys(config)
    return on_cores(_study_run, [(config, key) for key in keys],
                    cost=lambda call: (call[0]["tasks"][call[1]["task"]]["steps"]
                                       * call[0]["tasks"][call[1]["task"]]["n_layers"]))


def replay_length_study(config: dict) -> dict:
    """The cheapest run to replay: the distance-1 task, the RoPE model (which also checks
    PI, NTK and YaRN), the first seed.

    Not taught: the replay spec of the study.
    """
    return {**config, "tasks": {"previous_token": config["tasks"]["previous_token"]},
            "kinds": ["rope"], "seeds": config["seeds"][:1]}


def _make_length_study():
    from attnlab.studies import Study

    return Study(name="length_generalization", run=run_length_study,
                 config=LENGTH_STUDY_CONFIG, check=check_length_study,
                 replay=replay_length_study, tolerances=LENGTH_STUDY_TOLERANCES)


#: The study as :mod:`attnlab.studies` runs, loads and replays it.
LENGTH_STUDY = _make_length_study()


# --- reading the study's artefact (chapters 10 and 12) ---------------------------------------

def study_values(artefact: dict, task: str, quantity: str) -> dict[str, np.ndarray]:
    """One quantity of the study for every method, the seeds stacked.

    Parameters
    ----------
    artefact : dict
        What :func:`attnlab.studies.load_study` returns for ``"length_generalization"``.
    task : str
        A key of the study's ``config["tasks"]``.
    quantity : str
        ``"accuracy"`` (L, 2L, 4L), ``"far_weight"`` (per layer), ``"by_period"``, the
        same two at half the budget (``"accuracy_half"``, ``"by_period_half"``), or
        ``"curve"`` and ``"plateau_change"`` (per trained kind, labelled by the kind).

    Returns
    -------
    dict of str to np.ndarray
        Method label → array (seeds, …), the seeds in the config's order.

    Taught in chapter 10.
    """
    config = artefact["config"]
    choice(task, "task", config["tasks"])
    seeds = config["seeds"]
    out: dict[str, list] = {}
    for record in artefact["records"]:
        key, values = record["key"], record["values"]
        if key["task"] != task:
            continue
        for name, value in values.items():
            family, _, label = name.partition("/")
            if family != quantity:
                continue
            label = label or STUDY_KIND_LABELS[key["kind"]]
            out.setdefault(label, [None] * len(seeds))[seeds.index(key["seed"])] = value
    if not out:
        raise ValueError(f"研究の結果に task={task!r} の {quantity!r} がありません")
    return {label: np.array(rows, dtype=float) for label, rows in out.items()}


class Convergence(NamedTuple):
    """One evaluation number of the study at the full budget and at half of it."""

    full: float  # mean over seeds at the full budget
    half: float  # mean over seeds at half of it
    change: float  # mean over seeds of full − half
    stderr: float  # standard error of the per-seed change
    converged: bool  # |change| ≤ the config's ``converged``


def study_convergence(artefact: dict, task: str, quantity: str = "accuracy",
                      index: int = -1) -> dict[str, Convergence]:
    """Whether one evaluation number of every method had stopped moving: its mean over
    seeds at the full budget against half of it.

    Parameters
    ----------
    artefact : dict
        What :func:`attnlab.studies.load_study` returns for ``"length_generalization"``.
    task : str
        A key of the study's ``config["tasks"]``.
    quantity : {"accuracy", "by_period"}
    index : int
        Which entry: for ``"accuracy"`` the length (−1: 4L), for ``"by_period"`` the
        band of periods (−1: P > L).

    Returns
    -------
    dict of str to Convergence
        Method label → the two means, the change, its standard error and the verdict.

    Taught in chapter 10.
    """
    choice(quantity, "quantity", ("accuracy", "by_period"))
    full = study_values(artefact, task, quantity)
    half = study_values(artefact, task, f"{quantity}_half")
    limit = artefact["config"]["converged"]
    out = {}
    for label, values in full.items():
        a, b = values[:, index], half[label][:, index]  # (seeds,)
        change = a - b
        out[label] = Convergence(float(a.mean()), float(b.mean()), float(change.mean()),
                                 float(change.std(ddof=1) / np.sqrt(len(change))),
                                 bool(abs(change.mean()) <= limit))
    return out


def spread(values) -> tuple[float, float, float, float]:
    """Mean, minimum, maximum and standard error (std with ddof=1 over √n) of seeds' values.

    Taught in chapter 10.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or len(values) < 2:
        raise ValueError(f"values は 2 つ以上のシードの 1 次元の配列にしてください: "
                         f"shape={values.shape}")
    return (float(values.mean()), float(values.min()), float(values.max()),
            float(values.std(ddof=1) / np.sqrt(len(values))))
