"""Chapter 12: the whole book on one page, computed by the chapters' own functions.

Each ``chNN_…`` function measures the one result chapter NN asserts, by calling that
chapter's experiment functions with that chapter's settings, imported from its module
(the ``CHNN_…`` constants below name them after the chapter; none is retyped). Nothing is
retyped from a chapter's output either: ``tests/test_summary.py`` compares what chapter 12
prints with what every chapter's committed notebook prints, so the two cannot drift apart.

:func:`length_study` repeats chapter 10's study for its first seed only (the same runs
and evaluation batches as that seed's; the three seeds and their spread are chapter
10's, and retraining them all would take most of this chapter's time);
:func:`encoding_rows` lays its accuracies next to what each positional scheme is: where
it enters the model, its extra parameters, and whether the first layer's attention
weights depend on the distance m − n only (measured by moving the same tokens to other
positions, :func:`shift_difference`).
"""

import dataclasses
import time
from typing import NamedTuple

import numpy as np

from attnlab._validate import generator, positive_int
from attnlab.attention import causal_mask, init_mha, multi_head_attention
from attnlab.costs import mha_cost
from attnlab.experiments.attention_has_no_order import (
    NO_ORDER_MODEL,
    NO_ORDER_SEEDS,
    NO_ORDER_SEQ_LEN,
    bag_of_tokens_ceiling,
    train_previous_token,
)
from attnlab.experiments.attention_review import (
    SHARPNESS_D_K,
    SHARPNESS_EXAMPLE_N_KEYS,
    sharpness_samples,
)
from attnlab.experiments.context_extension import COVERAGE_SCALES, angle_coverage
from attnlab.experiments.inference_time import DEEPSEEK_V2_MLA, WINDOW_CONTEXT, WINDOW_MODEL
from attnlab.experiments.learned_positions import (
    LEARNED_CONFIG,
    LEARNED_RUNS,
    LEARNED_SEED,
    TRAIN_LEN,
    accuracy_by_position,
    row_movement,
)
from attnlab.experiments.learned_positions import train_short as train_learned
from attnlab.experiments.length_generalization import (
    LENGTH_METHODS,
    LENGTH_MODEL,
    LENGTH_SEEDS,
    LENGTH_TRAIN_LEN,
    evaluate_study,
    finetune_comparison,
    length_config,
    method_config,
    train_study,
)
from attnlab.experiments.rope import ROPE_EXAMPLE_D_HEAD, ROPE_SHIFTS
from attnlab.experiments.sinusoidal_encoding import GRAM_D_MODEL, GRAM_OFFSETS, GRAM_SEQ_LEN
from attnlab.experiments.split_and_concat import SHAPE_D_MODELS, SHAPE_N_HEADS, SHAPE_SEQ_LEN
from attnlab.experiments.what_heads_capture import (
    KV_CONTEXT_LEN,
    KV_EXAMPLE_MODEL,
    PRESETS,
    format_bytes,
    kv_cost,
)
from attnlab.experiments.why_heads import (
    EXAMPLE_D_MODEL,
    EXAMPLE_SCORE,
    EXAMPLE_TOKENS,
    heads_output,
    value_coefficients,
)
from attnlab.inference import cached_values_per_token
from attnlab.model import ModelConfig, forward, init_params, layer_projections, param_shapes
from attnlab.positional import (
    alibi_slopes,
    apply_rope,
    lookup_positions,
    sinusoidal_encoding,
)
from attnlab.tasks import PreviousToken

#: Chapter 01: the number of keys of its one-query example, a row of its table.
CH01_N_KEYS = SHARPNESS_EXAMPLE_N_KEYS
#: Chapter 02's hand-built example: its tokens, values of width 16, target score c = 8.
CH02_TOKENS, CH02_D_MODEL, CH02_SCORE = len(EXAMPLE_TOKENS), EXAMPLE_D_MODEL, EXAMPLE_SCORE
#: Chapter 03's table: the widest model of the shape explorer.
CH03_D_MODEL = max(SHAPE_D_MODELS)
#: Chapter 04's table: context length and the model it quotes.
CH04_CONTEXT, CH04_MODEL = KV_CONTEXT_LEN, KV_EXAMPLE_MODEL
#: Chapter 05: the seeds of the chapter's training runs.
CH05_SEEDS = NO_ORDER_SEEDS
#: Chapter 06: positions and width of the dot-product matrix, and the offsets printed.
CH06_LENGTH, CH06_D_MODEL, CH06_OFFSETS = GRAM_SEQ_LEN, GRAM_D_MODEL, GRAM_OFFSETS
#: Chapter 07: the notebook's generator seed (its first spawn trains, the second evaluates).
CH07_SEED, CH07_RUNS = LEARNED_SEED, LEARNED_RUNS
#: Chapter 08: head width and the shifts tried (the chapter shifts by 100 and 10000).
CH08_D_HEAD, CH08_SHIFTS = ROPE_EXAMPLE_D_HEAD, ROPE_SHIFTS
#: Chapter 09: the context scales whose unseen pairs the chapter counts.
CH09_SCALES = COVERAGE_SCALES
#: Chapter 11: the sliding-window model and context length of its cache table, and
#: DeepSeek-V2's attention sizes (128 heads of 128, d_c = 512, d_R = 64).
CH11_MODEL, CH11_CONTEXT, CH11_MLA = WINDOW_MODEL, WINDOW_CONTEXT, DEEPSEEK_V2_MLA
#: Chapter 10: the seeds of its study that this chapter repeats: only the first (0).
CH10_SEEDS = (min(LENGTH_SEEDS),)


class Headline(NamedTuple):
    """One chapter's measured result: the numbers, and one line that shows them."""

    chapter: int
    values: dict  # name → number, as measured
    numbers: str  # the numbers, as the chapter prints them
    meaning: str  # what they are (Japanese)


def ch01_saturation() -> Headline:
    """Chapter 01: the mean largest softmax weight at the widest d_k, unscaled and scaled.

    Taught in chapter 12.
    """
    d_k = max(SHARPNESS_D_K)
    raw = float(sharpness_samples(d_k, False, CH01_N_KEYS)[1].mean())
    scaled = float(sharpness_samples(d_k, True, CH01_N_KEYS)[1].mean())
    return Headline(1, {"割らない": raw, "√d_k で割る": scaled},
                    f"{raw:.3f} → {scaled:.3f}",
                    f"最大の重みの平均（d_k = {d_k}、キー {CH01_N_KEYS} 個、割らない → 割る）")


def ch02_arrival(rng: np.random.Generator) -> Headline:
    """Chapter 02: how much of each of two targets reaches the output, 1 head vs 2 heads.

    Taught in chapter 12.
    """
    rng = generator(rng)
    T, D, c = CH02_TOKENS, CH02_D_MODEL, CH02_SCORE
    half = D // 2
    values = rng.normal(size=(T, D))  # (T, D): first half syntax, second half meaning
    subj, mod = 0, T - 2
    one = np.zeros((1, T))  # (H=1, T): one head wants both targets
    one[0, [subj, mod]] = c
    two = np.zeros((2, T))  # (H=2, T): one target per head
    two[0, subj] = two[1, mod] = c
    arrived = {}
    for name, scores in (("1 ヘッド", one), ("2 ヘッド", two)):
        out = heads_output(scores, values)  # (D,)
        arrived[name] = float(value_coefficients(out[:half], values[:, :half])[subj])
    return Headline(2, arrived,
                    f"{arrived['1 ヘッド']:.3f} vs {arrived['2 ヘッド']:.3f}",
                    f"ターゲットに届いた量（1 ヘッド vs 幅半分の 2 ヘッド、c = {c:g}）")


def ch03_costs() -> Headline:
    """Chapter 03: parameters and matrix-product FLOPs of MHA for every head count.

    Taught in chapter 12.
    """
    costs = [mha_cost(CH03_D_MODEL, h, SHAPE_SEQ_LEN) for h in SHAPE_N_HEADS]
    params = {c.params["total"] for c in costs}
    flops = {c.flops["total"] for c in costs}
    if len(params) != 1 or len(flops) != 1:
        raise AssertionError("mha_cost がヘッド数によって変わりました")
    p, f = params.pop(), flops.pop()
    return Headline(3, {"パラメータ": p, "FLOPs": f},
                    f"{p:,} / {f:,}",
                    f"パラメータ / FLOPs（d_model = {CH03_D_MODEL}、T = {SHAPE_SEQ_LEN}、"
                    f"h = {SHAPE_N_HEADS[0]}〜{SHAPE_N_HEADS[-1]} で同じ）")


def ch04_kv_cache() -> Headline:
    """Chapter 04: the KV cache of a published GQA model, and of the same model as MHA.

    Taught in chapter 12.
    """
    preset = PRESETS[CH04_MODEL]
    gqa = kv_cost(preset, preset.n_kv_heads, CH04_CONTEXT).total_bytes
    mha = kv_cost(preset, preset.n_heads, CH04_CONTEXT).total_bytes
    return Headline(4, {"GQA": gqa, "MHA": mha},
                    f"{format_bytes(gqa)} vs {format_bytes(mha)}",
                    f"{CH04_MODEL} の KV キャッシュ（{CH04_CONTEXT} トークン、fp16、"
                    f"K/V ヘッド {preset.n_kv_heads} vs {preset.n_heads}）")


def ch05_no_order(rng: np.random.Generator) -> Headline:
    """Chapter 05: permutation equivariance, the no-position ceiling and trained accuracy.

    ``rng`` draws the input and the projections of the equivariance check; the training
    runs use the chapter's seeds.

    Taught in chapter 12.
    """
    rng = generator(rng)
    T, D, H = 5, 8, 2
    x = rng.normal(size=(T, D))  # (T, D)
    weights = init_mha(D, H, rng=rng)
    perm = rng.permutation(T)
    out, _ = multi_head_attention(x, weights, H)  # (T, D)
    out_p, _ = multi_head_attention(x[perm], weights, H)  # (T, D): rows reordered
    error = float(np.abs(out_p - out[perm]).max())
    vocab = NO_ORDER_MODEL["vocab_size"]
    ceiling = bag_of_tokens_ceiling(vocab, NO_ORDER_SEQ_LEN)
    acc = {scheme: [train_previous_token(scheme, rng=np.random.default_rng(seed)).eval_accuracy
                    for seed in CH05_SEEDS] for scheme in ("none", "learned")}
    values = {"等価性の誤差": error, "上限": ceiling, "位置なし": acc["none"],
              "学習可能な表": acc["learned"]}
    blind = " ".join(f"{a:.2f}" for a in acc["none"])
    ordered = " ".join(f"{a:.2f}" for a in acc["learned"])
    return Headline(5, values,
                    f"{blind} / {ordered}（上限 {ceiling:.3f}）",
                    f"正解率：位置なし / 学習可能な表（{len(CH05_SEEDS)} シード）、"
                    f"上限は並びを見ない予測の上限")


def ch06_toeplitz() -> Headline:
    """Chapter 06: PE(pos)·PE(pos′) is one number per offset pos − pos′.

    Taught in chapter 12.
    """
    pe = sinusoidal_encoding(CH06_LENGTH, CH06_D_MODEL)  # (T, D)
    gram = pe @ pe.T  # (T, T)
    spread = max(float(np.ptp(np.diagonal(gram, k)))
                 for k in range(-CH06_LENGTH + 1, CH06_LENGTH))
    by_offset = np.array([np.diagonal(gram, -k).mean() for k in CH06_OFFSETS])
    shown = " ".join(f"{v:.3f}" for v in by_offset)
    offsets = ", ".join(str(k) for k in CH06_OFFSETS)
    return Headline(6, {"対角線の中の幅": spread, "内積": by_offset},
                    shown, f"PE(pos)·PE(pos′)、pos − pos′ = {offsets}（d_model = {CH06_D_MODEL}）")


def ch07_unused_rows() -> Headline:
    """Chapter 07: rows of a learned table that training never used, and what they give.

    Taught in chapter 12.
    """
    rng = np.random.default_rng(CH07_SEED)
    runs = [train_learned(run_rng) for run_rng in rng.spawn(CH07_RUNS)]
    moved = max(float(row_movement(run)[TRAIN_LEN:].max()) for run in runs)
    past = [float(np.nanmean(accuracy_by_position(run.params, LEARNED_CONFIG,
                                                  LEARNED_CONFIG.max_len, eval_rng)[TRAIN_LEN:]))
            for run, eval_rng in zip(runs, rng.spawn(CH07_RUNS), strict=True)]
    chance = 1 / LEARNED_CONFIG.vocab_size
    shown = " ".join(f"{a:.2f}" for a in past)
    return Headline(7, {"使わなかった行の移動": moved, "その位置の正解率": past},
                    f"{moved:.1f} / {shown}（当て推量 {chance:.3f}）",
                    "使わなかった行の移動 / その位置での正解率")


def ch08_relative(rng: np.random.Generator) -> Headline:
    """Chapter 08: after RoPE, q_m·k_n is unchanged when m and n move together.

    Taught in chapter 12.
    """
    rng = generator(rng)
    q, k = rng.normal(size=(2, 1, CH08_D_HEAD))  # (1, Dh) each
    worst = 0.0
    for m, n in ((3, 1), (5, 9), (0, 7)):
        base = (apply_rope(q, [m]) @ apply_rope(k, [n]).T).item()
        for shift in CH08_SHIFTS:
            moved = (apply_rope(q, [m + shift]) @ apply_rope(k, [n + shift]).T).item()
            worst = max(worst, abs(moved - base))
    shifts = ", ".join(f"{s:,}" for s in CH08_SHIFTS)
    return Headline(8, {"ずらしたときの差": worst},
                    "< 1e-9", f"q_m·k_n と q_{{m+c}}·k_{{n+c}} の差の最大（c = {shifts}）")


def ch09_unseen_pairs() -> Headline:
    """Chapter 09: RoPE pairs that reach angles training never saw, extrapolated and PI.

    Taught in chapter 12.
    """
    plain = {s: int(angle_coverage("外挿", s).unseen.sum()) for s in CH09_SCALES}
    pi = {s: int(angle_coverage("PI", s).unseen.sum()) for s in CH09_SCALES}
    n_pairs = angle_coverage("外挿", 1).theta.size
    scales = ", ".join(str(s) for s in CH09_SCALES)
    return Headline(9, {"外挿": plain, "PI": pi, "ペアの数": n_pairs},
                    f"{plain[CH09_SCALES[0]]} / {n_pairs} → {pi[CH09_SCALES[0]]}",
                    f"見たことのない角度に出るペア（外挿 → PI、s = {scales}）")


def ch11_inference() -> Headline:
    """Chapter 11: the cache a sliding window keeps, and MLA's cache per token.

    Mistral 7B v0.1's KV cache at :data:`CH11_CONTEXT` tokens with its window and with
    every token kept; DeepSeek-V2's values cached per token and layer, MLA vs MHA.

    Taught in chapter 12.
    """
    preset = PRESETS[CH11_MODEL]
    windowed = kv_cost(preset, preset.n_kv_heads, CH11_CONTEXT).total_bytes
    full = kv_cost(preset, preset.n_kv_heads, CH11_CONTEXT, window=False).total_bytes
    mla = cached_values_per_token("mla", **CH11_MLA)
    mha = cached_values_per_token("mha", n_heads=CH11_MLA["n_heads"],
                                  d_head=CH11_MLA["d_head"])
    return Headline(11, {"ウィンドウ": windowed, "全部": full, "MLA": mla, "MHA": mha},
                    f"{format_bytes(windowed)} vs {format_bytes(full)} / {mla} vs {mha:,}",
                    f"KV キャッシュ：{CH11_MODEL}（{CH11_CONTEXT:,} トークン、W vs 全部）"
                    "/ MLA vs MHA")


class LengthStudy(NamedTuple):
    """What :func:`length_study` returns."""

    runs: dict  # seed → {trained kind: TrainedRun}
    accuracy: dict  # method → (seeds, 3) accuracies at L, 2L, 4L
    seconds: float  # wall-clock time of the whole study


def length_study(seeds=CH10_SEEDS) -> LengthStudy:
    """Chapter 10's study: five kinds trained at L per seed, eight methods at L, 2L, 4L.

    The same runs and evaluation batches as the chapter for each seed of ``seeds``
    (by default its first seed only): :func:`train_kinds` per seed (run on every core by
    :func:`train_study`), and the batches drawn from
    ``np.random.default_rng(LENGTH_EVAL_SEED_OFFSET + seed)`` (:func:`evaluate_study`).

    Taught in chapter 12.
    """
    start = time.perf_counter()
    task = PreviousToken(vocab_size=LENGTH_MODEL["vocab_size"])
    runs = train_study(seeds, task)
    per_seed = evaluate_study(runs, task)  # seed -> {method: (3,)}, chapter 10's batches
    accuracy = {m: np.stack([per_seed[s][m] for s in seeds]) for m in LENGTH_METHODS}
    return LengthStudy(runs, accuracy, time.perf_counter() - start)


def ch10_length(study: LengthStudy) -> Headline:
    """Chapter 10: accuracy at 4L of the methods the chapter's reading turns on.

    Taught in chapter 12.
    """
    methods = ("RoPE 外挿", "RoPE+PI", "RoPE+YaRN", "ALiBi")
    at_4l = {m: float(study.accuracy[m][:, 2].mean()) for m in methods}
    shown = " / ".join(f"{at_4l[m]:.2f}" for m in methods)
    seeds = list(study.runs)
    which = f"シード {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} シードの平均"
    return Headline(10, at_4l, shown, f"4L での正解率（{which}）：{' / '.join(methods)}")


def finetune_4l(study: LengthStudy) -> dict[str, np.ndarray]:
    """Chapter 10's fine-tune at 4L of every seed's RoPE model, extrapolated and with PI.

    :func:`finetune_comparison` on the study's runs: the same batches as the chapter.

    Returns
    -------
    dict of str to np.ndarray
        ``"RoPE 外挿"`` and ``"RoPE+PI"`` → accuracies, shape (seeds, len(FINETUNE_MARKS)),
        the marks of chapter 10's fine-tune at 4L.

    Taught in chapter 12.
    """
    task = PreviousToken(vocab_size=LENGTH_MODEL["vocab_size"])
    return finetune_comparison(study.runs, task, (4,))[4]


# --- the encodings side by side ------------------------------------------------------------

#: Where each scheme puts the position into the model.
ENTRY = {"none": "入らない", "sinusoidal": "入力に足す", "learned": "入力に足す",
         "rope": "q・k を回す", "alibi": "スコアに足す"}


def first_layer_weights(params: dict, config: ModelConfig, tokens: np.ndarray,
                        positions) -> np.ndarray:
    """The first layer's attention weights with the tokens placed at ``positions``.

    The model of :mod:`attnlab.model` always numbers a row ``0 … T−1``; here the same
    arithmetic takes any positions: the sinusoidal or learned rows of those positions
    are added to the embeddings, RoPE turns q and k by their angles, ALiBi adds
    −a_ℓ·|p_i − p_j| (head ℓ). At ``positions = 0 … T−1`` it equals ``forward(…).attn[0]``.

    Parameters
    ----------
    params : dict
    config : ModelConfig
    tokens : np.ndarray of int
        Shape (B, T).
    positions : array of int
        Shape (T,).

    Returns
    -------
    np.ndarray
        Shape (B, H, T, T).

    Taught in chapter 12.
    """
    positions = np.asarray(positions)
    T = tokens.shape[1]
    if positions.shape != (T,):
        raise ValueError(f"positions の形 {positions.shape} が系列長 T={T} と合いません")
    x = params["embed"][tokens]  # (B, T, D)
    if config.positional == "sinusoidal":
        table = sinusoidal_encoding(int(positions.max()) + 1, config.d_model,
                                    dtype=config.dtype)  # (max pos + 1, D)
        x = x + table[positions]
    elif config.positional == "learned":
        x = x + lookup_positions(params["pos"], positions)  # (T, D) over B
    bias = None
    if config.positional == "alibi":
        distance = np.abs(positions[:, None] - positions[None, :])  # (T, T)
        bias = -alibi_slopes(config.n_heads)[:, None, None] * distance  # (H, T, T)
    _, attn = multi_head_attention(x, layer_projections(params, 0), config.n_heads,
                                   n_kv_heads=config.n_kv_heads,
                                   mask=causal_mask(T) if config.causal else None,
                                   rope=config.rope, bias=bias,
                                   positions=positions if config.rope else None)
    return attn  # (B, H, T, T)


def shift_difference(params: dict, config: ModelConfig, tokens: np.ndarray,
                     shift: int) -> float:
    """The largest change of the first layer's weights when every token moves by ``shift``.

    0 (to rounding) when the scores depend on the positions only through m − n.

    Taught in chapter 12.
    """
    T = tokens.shape[1]
    here = first_layer_weights(params, config, tokens, np.arange(T))
    there = first_layer_weights(params, config, tokens, np.arange(T) + shift)
    return float(np.abs(there - here).max())


def runs_past(config: ModelConfig, length: int) -> bool:
    """Whether the model accepts a sequence of ``length`` tokens at all.

    Taught in chapter 12.
    """
    length = positive_int(length, "length")
    params = init_params(config, np.random.default_rng(0))
    try:
        forward(params, np.zeros((1, length), dtype=int), config)
    except IndexError:
        return False
    return True


def extra_parameters(config: ModelConfig) -> int:
    """Parameters the positional scheme adds to the same model without positions.

    Taught in chapter 12.
    """
    def count(cfg):
        return sum(int(np.prod(shape)) for shape in param_shapes(cfg).values())

    none = dataclasses.replace(config, positional="none")
    return count(config) - count(none)


class EncodingRow(NamedTuple):
    """One row of :func:`encoding_rows`."""

    method: str
    entry: str  # where the position enters (ENTRY)
    extra_params: int
    shift_difference: float  # the largest change of layer-0 weights, tokens moved by L
    runs_past: bool  # the model accepts 4L tokens
    accuracy: np.ndarray | None  # (seeds, 3) at L, 2L, 4L; None for the L-row table


#: The table of L rows: not trained, it is the 4L-row table's first L rows (chapter 10).
SHORT_TABLE = "学習（L 行）"


def encoding_rows(study: LengthStudy, *, rng: np.random.Generator,
                  train_len: int = LENGTH_TRAIN_LEN) -> list[EncodingRow]:
    """Every method of chapter 10, plus the table of L rows, with what defines it.

    ``shift_difference`` uses the first seed's trained model on one batch of ``rng``,
    moved by ``train_len`` positions, at ``4 · train_len`` settings for the RoPE methods
    (as chapter 10 evaluates them at 4L).

    Taught in chapter 12.
    """
    rng = generator(rng)
    first = next(iter(study.runs.values()))
    tokens = rng.integers(LENGTH_MODEL["vocab_size"], size=(8, train_len))  # (8, L)
    rows = []
    for method, (kind, scaling) in LENGTH_METHODS.items():
        config = length_config(kind, train_len)
        run_config = method_config(config, scaling, train_len, 4 * train_len)
        params = first[kind].params
        rows.append(EncodingRow(
            method, ENTRY[config.positional], extra_parameters(config),
            shift_difference(params, run_config, tokens, train_len),
            runs_past(config, 4 * train_len), study.accuracy[method]))
        if kind == "学習（4L 行）":
            short = length_config(kind, train_len, table_factor=1)
            rows.append(EncodingRow(SHORT_TABLE, ENTRY["learned"], extra_parameters(short),
                                    float("nan"), runs_past(short, 2 * train_len), None))
    return rows

