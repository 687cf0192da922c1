"""Chapter 11: the measurements of attention at inference time.

The taught code is :mod:`attnlab.inference` (the cache, the window, the sinks, the online
softmax, MLA). This module holds what the chapter measures with it: cached decoding next
to the full forward pass, the rotations a cache saves, the multiply-adds and the time per
generated token, which positions can reach the last token through a window, how much
weight trained heads put on the first position, and the peak memory of the two softmaxes.
"""

import dataclasses
import math
import time
import tracemalloc
from typing import NamedTuple

import numpy as np

from attnlab._validate import positive_int
from attnlab.attention import merge_heads, multi_head_attention, split_heads
from attnlab.experiments.what_heads_capture import CONFIG as HEADS_CONFIG
from attnlab.experiments.what_heads_capture import TASK as HEADS_TASK
from attnlab.inference import (
    MLAProjections,
    band_mask,
    decode,
    empty_cache,
    mla_sizes,
)
from attnlab.model import ModelConfig, forward, init_params, layer_projections
from attnlab.positional import RoPE, alibi_bias, lookup_positions, sinusoidal_encoding
from attnlab.tasks import Batch

#: The position schemes the cache supports (T5's learned bucket bias is not in it).
CACHE_SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi")
#: The small model every equality of the chapter is checked on (float64, GQA 4 → 2).
DEMO_CONFIG = ModelConfig(vocab_size=32, d_model=32, n_heads=4, n_layers=2, max_len=64,
                          n_kv_heads=2, dtype="float64")
#: The model whose time per generated token is measured (float32, as a model runs).
TIMING_CONFIG = ModelConfig(vocab_size=32, d_model=64, n_heads=4, n_layers=2, max_len=1024,
                            positional="rope")
#: The context lengths of the timing (tokens already read when one more is generated).
TIMING_LENGTHS = (64, 128, 256, 512, 1024)
#: The sliding-window table: the model (chapter 04's preset) and the longest length.
WINDOW_MODEL, WINDOW_CONTEXT = "Mistral 7B v0.1", 32768
#: DeepSeek-V2's attention (the paper's §3.1.2): 128 heads of d_k = 128, the KV latent
#: d_c = 4 d_k = 512 and the decoupled RoPE key d_R = d_k / 2 = 64.
DEEPSEEK_V2_MLA = {"n_heads": 128, "d_head": 128, "d_latent": 512, "d_rope": 64}
#: The trained models of the sinks section: chapter 04's model and task, 5 seeds.
SINK_SEEDS = (0, 1, 2, 3, 4)
SINK_CONFIG, SINK_TASK = HEADS_CONFIG, HEADS_TASK
#: The window of the sinks section: periods are 4 … 16, so W = 17 still holds the key
#: an induction head needs, while positions 0 … t − 17 have left the window at t ≥ 17.
SINK_WINDOW = 17
_SINK_EVAL_SEED = 321


def scheme_config(positional: str, n_kv_heads: int = 2) -> ModelConfig:
    """:data:`DEMO_CONFIG` with another position scheme and number of K/V heads.

    Taught in chapter 11.
    """
    return dataclasses.replace(DEMO_CONFIG, positional=positional,
                               n_kv_heads=positive_int(n_kv_heads, "n_kv_heads"))


def cached_logits(params: dict, tokens: np.ndarray, config: ModelConfig, prefill: int, *,
                  window: int | None = None, sinks: int = 0) -> np.ndarray:
    """Decode with a cache: the first ``prefill`` tokens in one call, then one per call.

    Returns every position's logits (B, T, V), to set next to :func:`forward`'s.

    Taught in chapter 11.
    """
    prefill = positive_int(prefill, "prefill")
    B, T = tokens.shape
    capacity = T if window is None else None
    step = decode(params, tokens[:, :prefill],
                  empty_cache(config, B, capacity, window=window, sinks=sinks), config)
    logits = [step.logits]  # (B, prefill, V)
    for t in range(prefill, T):
        step = decode(params, tokens[:, t:t + 1], step.cache, config)
        logits.append(step.logits)  # (B, 1, V)
    return np.concatenate(logits, axis=1)  # (B, T, V)


def forward_with_mask(params: dict, tokens: np.ndarray, config: ModelConfig,
                      mask: np.ndarray) -> np.ndarray:
    """The full forward pass with ``mask`` (T, T) in place of the causal mask: logits
    (B, T, V). With :func:`attnlab.inference.band_mask` it is sliding-window attention
    computed on the whole sequence at once, without a cache.

    Taught in chapter 11.
    """
    T = tokens.shape[1]
    if np.shape(mask) != (T, T):
        raise ValueError(f"mask の形 {np.shape(mask)} が系列の長さ T={T} の ({T}, {T}) では"
                         "ありません")
    x = params["embed"][tokens]  # (B, T, D)
    if config.positional == "sinusoidal":
        x = x + sinusoidal_encoding(T, config.d_model, dtype=config.dtype)
    elif config.positional == "learned":
        x = x + lookup_positions(params["pos"], np.arange(T))
    bias = alibi_bias(config.n_heads, T) if config.positional == "alibi" else None
    rope = config.rope if config.positional == "rope" else None
    for layer in range(config.n_layers):
        out, _ = multi_head_attention(x, layer_projections(params, layer), config.n_heads,
                                      n_kv_heads=config.n_kv_heads, mask=mask, rope=rope,
                                      bias=bias)
        x = x + out  # (B, T, D)
    return x @ params["unembed"]  # (B, T, V)


# --- why the cache holds rotated keys ----------------------------------------------------------

class Rotations(NamedTuple):
    """What :func:`count_rotations` returns."""

    stored_rotated: int  # key vectors rotated when the keys are cached after RoPE
    rotated_on_read: int  # key vectors rotated when raw keys are cached
    max_difference: float  # largest |difference| of the scores of the two ways


def count_rotations(seq_len: int, d_head: int = 8, *,
                    rng: np.random.Generator) -> Rotations:
    """Generate ``seq_len`` tokens of one head both ways, counting RoPE's key rotations.

    Stored rotated: each key is turned once, when it is written. Rotated on read: the
    cache keeps raw keys and every step turns all of them again (t + 1 keys at step t).
    Both give the same scores: q_t·k_n depends only on the positions.

    Taught in chapter 11.
    """
    T, Dh = positive_int(seq_len, "seq_len"), positive_int(d_head, "d_head")
    rope = RoPE()
    q, k = rng.standard_normal((2, T, Dh))  # (T, Dh) each
    stored, raw = [], []
    counts = [0, 0]
    biggest = 0.0
    for t in range(T):
        q_t = rope.apply(q[t:t + 1], [t])  # (1, Dh)
        stored.append(rope.apply(k[t:t + 1], [t]))  # (1, Dh): rotated once, now
        counts[0] += 1
        raw.append(k[t:t + 1])
        keys = rope.apply(np.concatenate(raw), np.arange(t + 1))  # (t + 1, Dh) again
        counts[1] += t + 1
        cached = q_t @ np.concatenate(stored).T  # (1, t + 1)
        biggest = max(biggest, float(np.abs(cached - q_t @ keys.T).max()))
    return Rotations(counts[0], counts[1], biggest)


# --- the cost of one generated token ---------------------------------------------------------

def step_macs(config: ModelConfig, seq_len: int, *, cached: bool) -> int:
    """Multiply-adds to produce the next token after ``seq_len`` tokens have been read.

    With the cache: one token through the projections (q, o: D·D; k, v: D·Hkv·Dh each),
    one row of scores and one weighted sum over the T + 1 keys (H·(T + 1)·Dh each) per
    layer, then the unembedding (D·V). Without: all T + 1 tokens again, with the full
    (T + 1) × (T + 1) scores (the mask hides half, the matrix product computes it all).

    Taught in chapter 11.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int | np.integer) or seq_len < 0:
        raise ValueError(f"seq_len は 0 以上の整数である必要があります: seq_len={seq_len!r}")
    T = int(seq_len) + 1  # the new token is read too
    D, (H, Hkv, Dh), V = config.d_model, config.heads, config.vocab_size
    n = 1 if cached else T  # tokens run through the model
    projections = n * (2 * D * D + 2 * D * Hkv * Dh)
    attention = 2 * H * n * T * Dh  # scores and the weighted sum of values
    return config.n_layers * (projections + attention) + n * D * V


class StepTimes(NamedTuple):
    """What :func:`time_per_token` returns: seconds per generated token, (len(lengths),)."""

    lengths: np.ndarray
    cached: np.ndarray
    full: np.ndarray


def time_per_token(lengths=TIMING_LENGTHS, config: ModelConfig = TIMING_CONFIG, *,
                   repeats: int = 5, rng: np.random.Generator) -> StepTimes:
    """Median wall-clock time of one generated token after T tokens: a :func:`decode`
    call on a cache holding T tokens, and a :func:`forward` over all T + 1 tokens.

    Taught in chapter 11.
    """
    repeats = positive_int(repeats, "repeats")
    params = init_params(config, rng)
    cached, full = [], []
    for T in lengths:
        tokens = rng.integers(config.vocab_size, size=(1, T + 1))  # (1, T + 1)
        cache = decode(params, tokens[:, :T], empty_cache(config, 1, T + 1), config).cache
        samples = [[], []]
        for _ in range(repeats):
            start = time.perf_counter()
            decode(params, tokens[:, T:], cache, config)
            samples[0].append(time.perf_counter() - start)
            start = time.perf_counter()
            forward(params, tokens, config)
            samples[1].append(time.perf_counter() - start)
        cached.append(np.median(samples[0]))
        full.append(np.median(samples[1]))
    return StepTimes(np.asarray(lengths), np.array(cached), np.array(full))


# --- the window's receptive field ------------------------------------------------------------

def influence(window: int, n_layers: int, seq_len: int, *,
              rng: np.random.Generator) -> np.ndarray:
    """Which positions change the last position's logits through a sliding window:
    (seq_len,) bool, measured by changing one token at a time in a random model with
    ``n_layers`` layers and window W (RoPE, so no absolute position leaks in).

    Taught in chapter 11.
    """
    W, L, T = (positive_int(v, name) for v, name in (
        (window, "window"), (n_layers, "n_layers"), (seq_len, "seq_len")))
    config = dataclasses.replace(DEMO_CONFIG, n_layers=L, positional="rope", max_len=T)
    params = init_params(config, rng)
    tokens = rng.integers(config.vocab_size, size=(1, T))  # (1, T)
    mask = band_mask(T, W)  # (T, T)
    last = forward_with_mask(params, tokens, config, mask)[0, -1]  # (V,)
    changed = np.zeros(T, dtype=bool)
    for j in range(T):
        other = tokens.copy()
        other[0, j] = (other[0, j] + 1) % config.vocab_size
        logits = forward_with_mask(params, other, config, mask)[0, -1]  # (V,)
        changed[j] = np.abs(logits - last).max() > 1e-9
    return changed


# --- attention sinks in the course's trained models --------------------------------------------

def sink_batch() -> Batch:
    """The evaluation batch of the sinks section: 128 rows of chapter 04's task, T = 32.

    Taught in chapter 11.
    """
    return SINK_TASK(np.random.default_rng(_SINK_EVAL_SEED), 128, SINK_CONFIG.max_len)


class SinkWeights(NamedTuple):
    """What :func:`first_position_weight` returns; arrays are (n_layers, H)."""

    weight: np.ndarray  # mean weight on position 0, over queries i ≥ from_query
    uniform: float  # the same mean if every query spread its weight evenly: mean 1/(i+1)


def first_position_weight(params: dict, config: ModelConfig, tokens: np.ndarray, *,
                          from_query: int = 16) -> SinkWeights:
    """How much weight each head puts on position 0, averaged over rows and queries
    ``i ≥ from_query`` (late queries, for which position 0 is one key among many).

    Taught in chapter 11.
    """
    attn = forward(params, tokens, config).attn  # per layer (B, H, T, T)
    T = tokens.shape[1]
    queries = np.arange(positive_int(from_query, "from_query"), T)
    weight = np.stack([a[:, :, queries, 0].mean(axis=(0, 2)) for a in attn])  # (L, H)
    return SinkWeights(weight, float(np.mean(1.0 / (queries + 1))))


def window_accuracy(params: dict, config: ModelConfig, batch: Batch, *,
                    window: int | None, sinks: int = 0,
                    from_position: int = SINK_WINDOW) -> float:
    """Next-token accuracy at positions ≥ ``from_position`` when the cache keeps only
    the window (and the sinks); None: the full cache. From position W on, the first
    positions have left a window of W. The whole sequence is read as one prefill
    through the cache code.

    Taught in chapter 11.
    """
    B, T = batch.tokens.shape
    first = positive_int(from_position, "from_position")
    cache = empty_cache(config, B, T if window is None else None, window=window, sinks=sinks)
    logits = decode(params, batch.tokens, cache, config).logits  # (B, T, V)
    right = logits.argmax(axis=-1) == batch.targets  # (B, T)
    scored = batch.loss_mask.astype(bool).copy()
    scored[:, :first] = False  # positions the window has not cut yet
    return float(right[scored].mean())


def kept_positions_accuracy(params: dict, config: ModelConfig, batch: Batch, *,
                            window: int, keep=(), from_position: int = SINK_WINDOW) -> float:
    """Next-token accuracy at positions ≥ ``from_position`` under a band mask of
    ``window`` keys plus the positions ``keep`` (seen by every later query): the
    ablation that tells which kept positions help, whether the first ones (sinks) or
    any others. ``keep=()`` is the window alone; ``keep=range(4)`` is four sinks.

    Taught in chapter 11.
    """
    B, T = batch.tokens.shape
    first = positive_int(from_position, "from_position")
    keep = np.asarray(keep, dtype=int).reshape(-1)  # (k,)
    if keep.size and (keep.min() < 0 or keep.max() >= T):
        raise ValueError(f"keep の位置 {keep.tolist()} は 0 以上 T={T} 未満である"
                         "必要があります")
    key = np.arange(T)  # (T,)
    kept = np.isin(key, keep)[None, :] & (key[None, :] <= key[:, None])  # (T, T) causal
    mask = band_mask(T, window) | kept  # (T, T)
    logits = forward_with_mask(params, batch.tokens, config, mask)  # (B, T, V)
    right = logits.argmax(axis=-1) == batch.targets  # (B, T)
    scored = batch.loss_mask.astype(bool).copy()
    scored[:, :first] = False  # positions the window has not cut yet
    return float(right[scored].mean())


# --- memory of the two softmaxes --------------------------------------------------------------

def peak_bytes(func, *args, **kwargs) -> int:
    """The largest amount of memory numpy held at once while ``func(*args, **kwargs)``
    ran (tracemalloc counts every array numpy allocates), minus what was held before.

    Taught in chapter 11.
    """
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        func(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - before


# --- MLA: the scores with and without absorption ---------------------------------------------

def mla_unabsorbed_scores(x: np.ndarray, proj: MLAProjections, n_heads: int, *,
                          rope: RoPE) -> np.ndarray:
    """MLA's scores (B, H, T, T) with every head's key rebuilt from the latent:
    [q_C ; q_R] · [k_C ; k_R] / √(Dh + Dr), before the mask.

    Taught in chapter 11.
    """
    H, Dh, Dr, _, _ = mla_sizes(proj, n_heads)
    positions = np.arange(x.shape[1])
    c_q = x @ proj.w_dq  # (B, T, d_cq)
    q_c = split_heads(c_q @ proj.w_uq, H)  # (B, H, T, Dh)
    q_r = rope.apply(split_heads(c_q @ proj.w_qr, H), positions)  # (B, H, T, Dr)
    latent = x @ proj.w_dkv  # (B, T, d_c)
    k_c = split_heads(latent @ proj.w_uk, H)  # (B, H, T, Dh)
    k_r = rope.apply(x @ proj.w_kr, positions)  # (B, T, Dr)
    return (q_c @ k_c.mT + q_r @ k_r[:, None].mT) / math.sqrt(Dh + Dr)


class ContentRoPE(NamedTuple):
    """What :func:`rope_on_content_scores` returns, both (B, H, T, T)."""

    true: np.ndarray  # RoPE on q_C and k_C themselves, keys rebuilt
    absorbed: np.ndarray  # one W_UQ,i W_UK,iᵀ per head, applied to the cached latent


def rope_on_content_scores(x: np.ndarray, proj: MLAProjections, n_heads: int, *,
                           rope: RoPE) -> ContentRoPE:
    """MLA without the decoupled key: RoPE turns q_C and k_C. The true scores next to
    what absorbing W_UK into the query gives: the rotation R_{n−m} sits between W_UQ,i
    and W_UK,iᵀ, so one fixed product cannot give the scores.

    Taught in chapter 11.
    """
    H, Dh, _, d_c, d_cq = mla_sizes(proj, n_heads)
    positions = np.arange(x.shape[1])
    c_q = x @ proj.w_dq  # (B, T, d_cq)
    latent = x @ proj.w_dkv  # (B, T, d_c)
    q_c = rope.apply(split_heads(c_q @ proj.w_uq, H), positions)  # (B, H, T, Dh)
    k_c = rope.apply(split_heads(latent @ proj.w_uk, H), positions)  # (B, H, T, Dh)
    true = q_c @ k_c.mT / math.sqrt(Dh)  # (B, H, T, T)
    absorbed = np.einsum("qhd,chd->hqc", proj.w_uq.reshape(d_cq, H, Dh),
                         proj.w_uk.reshape(d_c, H, Dh))  # (H, d_cq, d_c)
    q_latent = np.einsum("btq,hqc->bhtc", c_q, absorbed)  # (B, H, T, d_c)
    return ContentRoPE(true, q_latent @ latent[:, None].mT / math.sqrt(Dh))


def mla_output_from_scores(scores: np.ndarray, x: np.ndarray, proj: MLAProjections,
                           n_heads: int) -> np.ndarray:
    """Causal softmax of MLA's scores (B, H, T, T), then values and W_O: (B, T, D).

    Taught in chapter 11.
    """
    H = mla_sizes(proj, n_heads).n_heads
    T = scores.shape[-1]
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)  # (B, H, T, T)
    v = split_heads((x @ proj.w_dkv) @ proj.w_uv, H)  # (B, H, T, Dh)
    return merge_heads(weights @ v) @ proj.w_o  # (B, T, D)


# --- the live figure's state -------------------------------------------------------------------

#: The live figure's positions (0 … 15), windows and sink counts.
CACHE_DEMO_LENGTH = 16
CACHE_DEMO_WINDOWS = (4, 6, 8)
CACHE_DEMO_SINKS = (0, 1, 2)

KEPT, SINK, EVICTED, NOT_YET = 0, 1, 2, 3  # the status of a position in the cache


class CacheState(NamedTuple):
    """What :func:`cache_state` returns."""

    status: np.ndarray  # (CACHE_DEMO_LENGTH,) KEPT, SINK, EVICTED or NOT_YET per position
    slots: np.ndarray  # (sinks + window,) the position each slot holds, −1 if empty


def cache_state(step: int, window: int, sinks: int) -> CacheState:
    """The cache after reading positions 0 … ``step`` with a window of W keys and S sinks:
    each position's status and what each slot holds, written by
    :func:`attnlab.inference.cache_slots` one position at a time.

    Not taught: the state the live figure ``kv_cache_slots`` draws.
    """
    from attnlab.inference import EMPTY, cache_slots, visible

    W = positive_int(window, "window")
    if isinstance(sinks, bool) or not isinstance(sinks, int | np.integer) or sinks < 0:
        raise ValueError(f"sinks は 0 以上の整数である必要があります: sinks={sinks!r}")
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or not (
            0 <= step < CACHE_DEMO_LENGTH):
        raise ValueError(f"step は 0 〜 {CACHE_DEMO_LENGTH - 1} の整数です: step={step!r}")
    slots = np.full(sinks + W, EMPTY)
    for p in range(step + 1):
        slots[cache_slots(np.array([p]), sinks + W, W, sinks)] = p
    positions = np.arange(CACHE_DEMO_LENGTH)
    seen = visible(np.array([step]), positions, W, sinks)[0]  # (T,)
    status = np.where(positions > step, NOT_YET,
                      np.where(~seen, EVICTED, np.where(positions < sinks, SINK, KEPT)))
    return CacheState(status, slots)
