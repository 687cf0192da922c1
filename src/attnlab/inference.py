"""Attention at inference time: a KV cache, a sliding window, sinks, and the online softmax.

Generating text runs the model once per new token. Without a cache every step runs the
whole prefix again (T tokens through every layer, T² scores); with a cache each layer
keeps the keys and values it has already computed, and a step computes q, k and v of the
new token only and one row of scores against the cached keys.

The cache of one layer is a buffer of fixed capacity: ``k`` and ``v`` (B, Hkv, S, Dh) and
``positions`` (S,), the position each slot holds (−1: empty). Keys are stored *after*
RoPE's rotation, so each key is rotated once, when it is written; the scores of a new
query against the stored keys are those of the full forward pass because RoPE's score
depends only on the positions, which the rotation already carries. ALiBi's bias and the
masks are computed from ``positions``, so the order of the slots does not matter
(attention is a weighted sum over a set of keys: chapter 05).

A *policy* says which slot a new position goes to:

- the full cache keeps every position (capacity ≥ the longest sequence);
- a sliding window of W keys (Mistral 7B v0.1: W = 4,096) is a rolling buffer of W
  slots, position p written at slot p mod W: memory stops growing at W;
- attention sinks (Xiao et al. 2023) keep the first ``sinks`` positions for ever and a
  rolling window after them.

:func:`online_softmax_attention` computes attention block by block over the keys with a
running maximum and sum (Milakov & Gimelshein 2018), the idea FlashAttention rests on.

Taught in chapter 11.
"""

import math
from typing import NamedTuple

import numpy as np

from attnlab._validate import model_params, model_tokens, positive_int
from attnlab.attention import merge_heads, split_heads
from attnlab.model import ModelConfig, check_config, layer_projections, param_shapes
from attnlab.positional import alibi_slopes, lookup_positions, sinusoidal_encoding

EMPTY = -1  # the position of a slot that holds nothing yet


# --- the cache ------------------------------------------------------------------------------

class LayerCache(NamedTuple):
    """The keys and values one layer has stored.

    k, v : (B, Hkv, S, Dh) — keys after RoPE's rotation, values; S slots.
    positions : (S,) int — the position each slot holds, ``EMPTY`` (−1) if none.
    """

    k: np.ndarray
    v: np.ndarray
    positions: np.ndarray


class KVCache(NamedTuple):
    """Every layer's :class:`LayerCache` and how the slots are reused.

    ``length`` is how many tokens have been read, i.e. the position of the next token.
    ``window`` is None (keep every key) or the number of keys a query sees, itself
    included; ``sinks`` positions 0 … sinks−1 are kept whatever the window.
    """

    layers: tuple[LayerCache, ...]
    length: int
    window: int | None
    sinks: int


def empty_cache(config: ModelConfig, batch_size: int, capacity: int | None = None, *,
                window: int | None = None, sinks: int = 0) -> KVCache:
    """A cache with no token in it.

    Parameters
    ----------
    config : ModelConfig
    batch_size : int
        B, the number of sequences decoded side by side.
    capacity : int, optional
        S, the number of slots per layer. Default: ``config.max_len`` for a full cache,
        ``sinks + window`` with a window (more slots than that are never used).
    window : int, optional
        W ≥ 1: a query sees the W most recent keys (itself included) and the sinks.
    sinks : int
        How many first positions stay in the cache for ever (0: none); needs a window.

    Returns
    -------
    KVCache

    Taught in chapter 11.
    """
    config = check_config(config)
    B = positive_int(batch_size, "batch_size")
    window, sinks = _window_and_sinks(window, sinks)
    if sinks and window is None:
        raise ValueError(
            f"sinks={sinks} はウィンドウ window と一緒に使います: window=None では全部のキーが"
            "残るので、シンクを別に残す意味がありません"
        )
    needed = config.max_len if window is None else sinks + window
    S = needed if capacity is None else positive_int(capacity, "capacity")
    if window is not None and S < sinks + window:
        raise ValueError(
            f"capacity={S} では sinks={sinks} と window={window} のキーが入りません: "
            f"{sinks + window} 以上にしてください"
        )
    Hkv, Dh = config.n_kv_heads, config.d_head
    layers = tuple(
        LayerCache(np.zeros((B, Hkv, S, Dh), dtype=config.dtype),
                   np.zeros((B, Hkv, S, Dh), dtype=config.dtype),
                   np.full(S, EMPTY))
        for _ in range(config.n_layers))
    return KVCache(layers, 0, window, sinks)


def _window_and_sinks(window, sinks) -> tuple[int | None, int]:
    """``window`` (None or an int ≥ 1) and ``sinks`` (an int ≥ 0), or a ValueError."""
    if window is not None:
        window = positive_int(window, "window")
    if isinstance(sinks, bool) or not isinstance(sinks, (int, np.integer)) or sinks < 0:
        raise ValueError(f"sinks は 0 以上の整数である必要があります: sinks={sinks!r}")
    return window, int(sinks)


def cache_slots(positions: np.ndarray, capacity: int, window: int | None,
                sinks: int) -> np.ndarray:
    """The slot each position is written to: (n,) → (n,).

    Full cache: slot = position. Sliding window: slot = position mod W (a rolling
    buffer: the newest key overwrites the one that just left the window). Sinks: the
    first ``sinks`` positions keep slots 0 … sinks−1, the rest roll through the W slots
    after them.

    Taught in chapter 11.
    """
    window, sinks = _window_and_sinks(window, sinks)
    positions = np.asarray(positions)
    if window is None:
        if positions.size and positions.max() >= capacity:
            raise ValueError(
                f"位置 {int(positions.max())} はキャッシュの容量 capacity={capacity} を"
                "超えます: 容量を増やすか window を使ってください"
            )
        return positions
    rolling = sinks + (positions - sinks) % window  # (n,) slots after the sinks
    return np.where(positions < sinks, positions, rolling)


def visible(query_pos: np.ndarray, key_pos: np.ndarray, window: int | None,
            sinks: int) -> np.ndarray:
    """Which keys each query may attend to: (n,), (S,) → (n, S) bool.

    A key is visible when it holds a position (not ``EMPTY``), is not in the query's
    future, and is within the window (``query − key < W``) or is a sink.

    Not taught: the mask :func:`decode` builds (the chapter shows :func:`band_mask`).
    """
    q = query_pos[:, None]  # (n, 1)
    k = key_pos[None, :]  # (1, S)
    ok = (k != EMPTY) & (k <= q)  # (n, S) causal
    if window is not None:
        ok &= (q - k < window) | (k < sinks)
    return ok


# --- one step of decoding -------------------------------------------------------------------

def _embed_at(params, tokens: np.ndarray, positions: np.ndarray,
              config: ModelConfig) -> np.ndarray:
    """Token embedding plus absolute positions for tokens at ``positions``: (B, n, D)."""
    x = params["embed"][tokens]  # (B, n, D)
    if config.positional == "sinusoidal":
        table = sinusoidal_encoding(int(positions[-1]) + 1, config.d_model,
                                    dtype=config.dtype)  # (p_last + 1, D)
        x = x + table[positions]  # (n, D), over B
    elif config.positional == "learned":
        x = x + lookup_positions(params["pos"], positions)  # (n, D), over B
    return x


def _attend_cached(x: np.ndarray, proj, cache: LayerCache, positions: np.ndarray,
                   config: ModelConfig, window: int | None, sinks: int):
    """One layer for the new tokens x (B, n, D) at ``positions`` (n,): its output
    (B, n, D), the attention weights (B, H, n, S + n) and the keys and values to store."""
    w_q, w_k, w_v, w_o = proj
    H, Hkv, Dh = config.heads
    B, n, _ = x.shape
    G = H // Hkv  # query heads per K/V head

    q = split_heads(x @ w_q, H)  # (B, H, n, Dh)
    k_new = split_heads(x @ w_k, Hkv)  # (B, Hkv, n, Dh)
    v_new = split_heads(x @ w_v, Hkv)  # (B, Hkv, n, Dh)
    if config.rope is not None:
        q = config.rope.apply(q, positions)  # rotated by the queries' own positions
        k_new = config.rope.apply(k_new, positions)  # rotated once, now, and stored so

    # The stored keys and the new ones: the new tokens also see each other (causally).
    k_all = np.concatenate([cache.k, k_new], axis=-2)  # (B, Hkv, S + n, Dh)
    v_all = np.concatenate([cache.v, v_new], axis=-2)  # (B, Hkv, S + n, Dh)
    key_pos = np.concatenate([cache.positions, positions])  # (S + n,)

    q = q.reshape(B, Hkv, G, n, Dh)  # (B, Hkv, G, n, Dh)
    scores = q @ k_all[:, :, None].mT / math.sqrt(Dh)  # (B, Hkv, G, n, S + n)
    scores = scores.reshape(B, H, n, -1)  # (B, H, n, S + n)
    if config.positional == "alibi":
        distance = positions[:, None] - key_pos[None, :]  # (n, S + n)
        slopes = alibi_slopes(H).astype(config.dtype)  # (H,)
        scores = scores - slopes[:, None, None] * distance  # (B, H, n, S + n)
    mask = visible(positions, key_pos, window, sinks)  # (n, S + n)
    scores = np.where(mask, scores, -np.inf)  # masked before the softmax, not after
    scores = scores - scores.max(axis=-1, keepdims=True)
    attn = np.exp(scores)
    attn /= attn.sum(axis=-1, keepdims=True)  # (B, H, n, S + n)
    out = attn.reshape(B, Hkv, G, n, -1) @ v_all[:, :, None]  # (B, Hkv, G, n, Dh)
    out = merge_heads(out.reshape(B, H, n, Dh)) @ w_o  # (B, n, D)
    return out, attn, k_new, v_new


def _store(cache: LayerCache, k_new: np.ndarray, v_new: np.ndarray, positions: np.ndarray,
           window: int | None, sinks: int) -> LayerCache:
    """The layer's cache with the new keys and values written into their slots."""
    k, v, held = cache.k.copy(), cache.v.copy(), cache.positions.copy()
    slots = cache_slots(positions, held.shape[0], window, sinks)  # (n,)
    k[:, :, slots] = k_new  # a later position overwrites an earlier one in the same slot
    v[:, :, slots] = v_new
    held[slots] = positions
    return LayerCache(k, v, held)


class Step(NamedTuple):
    """What :func:`decode` returns."""

    logits: np.ndarray  # (B, n, V) for the n tokens just read
    cache: KVCache  # the cache with them written in
    attn: tuple[np.ndarray, ...]  # one (B, H, n, S + n) per layer, over cache slots + new


def decode(params: dict, tokens: np.ndarray, cache: KVCache, config: ModelConfig) -> Step:
    """Read ``tokens`` after what ``cache`` holds: their logits and the grown cache.

    The first call (an empty cache, the whole prompt) is the *prefill*; then each call
    reads one token. The new tokens take positions ``cache.length …``; each layer's new
    keys and values are computed once and written into the cache.

    Parameters
    ----------
    params : dict of str to np.ndarray
    tokens : np.ndarray of int
        Shape (B, n): the next n tokens of each sequence.
    cache : KVCache
        From :func:`empty_cache` or a previous :func:`decode`.
    config : ModelConfig

    Returns
    -------
    Step
        ``logits`` (B, n, V), the new ``cache`` and each layer's attention weights.

    Taught in chapter 11.
    """
    config = check_config(config)
    if config.positional == "t5":
        raise ValueError(
            "positional='t5' のモデルはこのキャッシュでは読めません: T5 の相対位置バイアスは"
            "まだ decode に入っていません（none・sinusoidal・learned・rope・alibi が使えます）"
        )
    params = model_params(params, param_shapes(config))
    tokens = model_tokens(tokens, config)
    cache = _check_cache(cache, config, tokens.shape[0])
    B, n = tokens.shape
    positions = cache.length + np.arange(n)  # (n,) positions continue, never restart
    if config.positional == "learned" and positions[-1] >= config.max_len:
        raise IndexError(
            f"位置 {int(positions[-1])} は学習可能な位置の表 (max_len={config.max_len}) に"
            "ありません"
        )
    x = _embed_at(params, tokens, positions, config)  # (B, n, D)
    layers, attns = [], []
    for layer, layer_cache in enumerate(cache.layers):
        out, attn, k_new, v_new = _attend_cached(
            x, layer_projections(params, layer), layer_cache, positions, config,
            cache.window, cache.sinks)
        x = x + out  # (B, n, D)
        layers.append(_store(layer_cache, k_new, v_new, positions, cache.window, cache.sinks))
        attns.append(attn)
    logits = x @ params["unembed"]  # (B, n, V)
    new_cache = KVCache(tuple(layers), cache.length + n, cache.window, cache.sinks)
    return Step(logits, new_cache, tuple(attns))


def _check_cache(cache, config: ModelConfig, batch_size: int) -> KVCache:
    """``cache`` unchanged, or a Japanese ValueError naming what does not fit."""
    if not isinstance(cache, KVCache):
        raise ValueError(f"cache は empty_cache(...) か decode(...).cache です: cache={cache!r}")
    if len(cache.layers) != config.n_layers:
        raise ValueError(f"cache の層の数 {len(cache.layers)} がモデルの "
                         f"n_layers={config.n_layers} と違います")
    want = (batch_size, config.n_kv_heads, None, config.d_head)
    for layer, c in enumerate(cache.layers):
        shape = c.k.shape
        if (c.k.ndim != 4 or shape[0] != want[0] or shape[1] != want[1]
                or shape[3] != want[3] or c.v.shape != shape
                or c.positions.shape != (shape[2],)):
            raise ValueError(
                f"cache の層 {layer} の形が合いません: k.shape={shape}, "
                f"v.shape={c.v.shape}, positions.shape={c.positions.shape}。"
                f"k と v は (B={batch_size}, Hkv={config.n_kv_heads}, S, Dh={config.d_head})、"
                "positions は (S,) です"
            )
        held = c.positions[c.positions != EMPTY]
        if held.size and held.max() >= cache.length:
            raise ValueError(
                f"cache の層 {layer} に位置 {int(held.max())} がありますが、"
                f"cache.length={cache.length} です: 位置は前に戻れません"
            )
    return cache


def generate(params: dict, prompt: np.ndarray, config: ModelConfig, n_new: int, *,
             window: int | None = None, sinks: int = 0,
             capacity: int | None = None) -> np.ndarray:
    """Greedy decoding with a cache: the prompt (B, T) followed by ``n_new`` tokens.

    The prompt is read in one call (the prefill), then one token per call, each the
    largest logit of the step before.

    Returns
    -------
    np.ndarray of int
        Shape (B, T + n_new).

    Not taught: the chapter calls :func:`decode` step by step instead.
    """
    config = check_config(config)
    prompt = model_tokens(prompt, config)
    n_new = positive_int(n_new, "n_new")
    if capacity is None and window is None:
        capacity = prompt.shape[1] + n_new
    cache = empty_cache(config, prompt.shape[0], capacity, window=window, sinks=sinks)
    step = decode(params, prompt, cache, config)  # prefill
    out = [prompt]
    for _ in range(n_new):
        token = step.logits[:, -1].argmax(axis=-1)[:, None]  # (B, 1)
        out.append(token)
        step = decode(params, token, step.cache, config)
    return np.concatenate(out, axis=1)


def band_mask(seq_len: int, window: int | None = None, sinks: int = 0) -> np.ndarray:
    """The full (T, T) mask that a sliding window with sinks amounts to.

    ``band_mask(T)`` is the causal mask; with a window, query i sees keys
    ``i − W < j ≤ i`` and the sinks ``j < sinks``.

    Taught in chapter 11.
    """
    T = positive_int(seq_len, "seq_len")
    window, sinks = _window_and_sinks(window, sinks)
    pos = np.arange(T)
    return visible(pos, pos, window, sinks)


def receptive_field(window: int, n_layers: int) -> int:
    """How far back the last layer can see through a window of W keys: n_layers·(W − 1) + 1
    positions (each layer reaches W − 1 further back through the one below).

    Taught in chapter 11.
    """
    window = positive_int(window, "window")
    n_layers = positive_int(n_layers, "n_layers")
    return n_layers * (window - 1) + 1


# --- the online softmax -----------------------------------------------------------------------

def online_softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None, *,
                             block_size: int = 16) -> np.ndarray:
    """``softmax(q kᵀ / √Dh) v`` over key blocks, with a running maximum and sum.

    The T_q × T_k score matrix never exists: each block of ``block_size`` keys gives a
    (T_q, block) piece of scores; ``m`` (the largest score so far), ``l`` (the sum of
    ``exp(score − m)`` so far) and ``acc`` (the weighted sum of values so far, with the
    same factor) are updated; when the maximum grows from m to m′, what was summed so far
    is multiplied by ``exp(m − m′)``. At the end ``acc / l`` is the attention output.

    Parameters
    ----------
    q : (..., Tq, Dh); k : (..., Tk, Dh); v : (..., Tk, Dv)
    mask : bool array broadcastable to (..., Tq, Tk), optional (True = visible)
    block_size : int
        Keys per block.

    Returns
    -------
    np.ndarray
        (..., Tq, Dv), equal to :func:`attnlab.scaled_dot_product_attention`'s output.

    Taught in chapter 11.
    """
    q, k, v = (np.asarray(a, dtype=np.result_type(a, np.float32)) for a in (q, k, v))
    block_size = positive_int(block_size, "block_size")
    *lead, Tq, Dh = q.shape
    Tk = k.shape[-2]
    if k.shape[-1] != Dh or v.shape[-2] != Tk:
        raise ValueError(f"q, k, v の形が合いません: q.shape={q.shape}, k.shape={k.shape}, "
                         f"v.shape={v.shape}")
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), (*lead, Tq, Tk))
    dtype = np.result_type(q, k, v)
    m = np.full((*lead, Tq, 1), -np.inf, dtype=dtype)  # running maximum
    l_sum = np.zeros((*lead, Tq, 1), dtype=dtype)  # running sum of exp(score − m)
    acc = np.zeros((*lead, Tq, v.shape[-1]), dtype=dtype)  # running weighted sum of v
    for start in range(0, Tk, block_size):
        stop = min(start + block_size, Tk)
        s = q @ k[..., start:stop, :].mT / math.sqrt(Dh)  # (..., Tq, b)
        if mask is not None:
            s = np.where(mask[..., start:stop], s, -np.inf)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., Tq, 1)
        # A row with no visible key so far keeps m = −inf: nothing to rescale, nothing added.
        seen = np.isfinite(m_new)
        safe = np.where(seen, m_new, 0.0)
        p = np.where(seen, np.exp(s - safe), 0.0)  # (..., Tq, b)
        rescale = np.where(seen, np.exp(np.where(seen, m, 0.0) - safe), 1.0)  # exp(m − m′)
        rescale = np.where(np.isfinite(m), rescale, 0.0)  # nothing was summed yet
        l_sum = l_sum * rescale + p.sum(axis=-1, keepdims=True)
        acc = acc * rescale + p @ v[..., start:stop, :]
        m = m_new
    if not np.isfinite(m).all():
        raise ValueError("mask があるクエリのキーをすべて隠しています: 重みを配る先がありません")
    return acc / l_sum  # (..., Tq, Dv)


# --- multi-head latent attention (DeepSeek-V2) -----------------------------------------------

class MLAProjections(NamedTuple):
    """The projection matrices of multi-head latent attention (DeepSeek-V2, 2024, §2.1).

    Row-vector convention (x @ W), as the rest of the course. H heads of Dh (the content
    part), Dr the width of the decoupled RoPE part, d_c the KV latent, d_cq the query
    latent.

    w_dq : (D, d_cq)       the query's down-projection, c_Q = x W_DQ
    w_uq : (d_cq, H·Dh)    the query's content part, q_C = c_Q W_UQ
    w_qr : (d_cq, H·Dr)    the query's RoPE part, q_R = RoPE(c_Q W_QR), one per head
    w_dkv : (D, d_c)       the KV latent, c_KV = x W_DKV: what the cache keeps
    w_uk : (d_c, H·Dh)     the keys' content part, k_C = c_KV W_UK
    w_uv : (d_c, H·Dh)     the values, v = c_KV W_UV
    w_kr : (D, Dr)         the decoupled RoPE key, k_R = RoPE(x W_KR), shared by all heads
    w_o : (H·Dh, D)
    """

    w_dq: np.ndarray
    w_uq: np.ndarray
    w_qr: np.ndarray
    w_dkv: np.ndarray
    w_uk: np.ndarray
    w_uv: np.ndarray
    w_kr: np.ndarray
    w_o: np.ndarray


class MLASizes(NamedTuple):
    """H, Dh, Dr, d_c, d_cq of :class:`MLAProjections` (read off the shapes)."""

    n_heads: int
    d_head: int
    d_rope: int
    d_latent: int
    d_q_latent: int


def mla_sizes(proj: MLAProjections, n_heads: int) -> MLASizes:
    """The sizes of ``proj``, or a Japanese ValueError naming the matrix that does not fit.

    Not taught: the checks every MLA function makes of its matrices.
    """
    if not isinstance(proj, MLAProjections):
        raise ValueError(f"proj は MLAProjections(...) である必要があります: {type(proj)!r}")
    H = positive_int(n_heads, "n_heads")
    D, d_cq = proj.w_dq.shape
    d_c = proj.w_dkv.shape[1]
    if d_c >= D:
        raise ValueError(f"潜在ベクトルの幅 d_c={d_c} が d_model={D} 以上です: "
                         "MLA の潜在ベクトルは d_model より小さくして圧縮します")
    if proj.w_uq.shape[1] % H or proj.w_qr.shape[1] % H:
        raise ValueError(f"w_uq {proj.w_uq.shape} と w_qr {proj.w_qr.shape} の列数は "
                         f"n_heads={H} で割り切れる必要があります")
    Dh, Dr = proj.w_uq.shape[1] // H, proj.w_qr.shape[1] // H
    want = {"w_dq": (D, d_cq), "w_uq": (d_cq, H * Dh), "w_qr": (d_cq, H * Dr),
            "w_dkv": (D, d_c), "w_uk": (d_c, H * Dh), "w_uv": (d_c, H * Dh),
            "w_kr": (D, Dr), "w_o": (H * Dh, D)}
    for name, shape in want.items():
        if getattr(proj, name).shape != shape:
            raise ValueError(f"{name} の形 {getattr(proj, name).shape} が {shape} では"
                             "ありません")
    if Dr % 2:
        raise ValueError(f"RoPE の部分の幅 Dr={Dr} は偶数である必要があります")
    return MLASizes(H, Dh, Dr, d_c, d_cq)


def init_mla(d_model: int, n_heads: int, d_head: int, d_rope: int, d_latent: int,
             d_q_latent: int, *, rng: np.random.Generator) -> MLAProjections:
    """Random MLA matrices, each N(0, 1/fan-in).

    Taught in chapter 11.
    """
    D, H = positive_int(d_model, "d_model"), positive_int(n_heads, "n_heads")
    Dh, Dr = positive_int(d_head, "d_head"), positive_int(d_rope, "d_rope")
    d_c, d_cq = positive_int(d_latent, "d_latent"), positive_int(d_q_latent, "d_q_latent")
    shapes = [(D, d_cq), (d_cq, H * Dh), (d_cq, H * Dr), (D, d_c), (d_c, H * Dh),
              (d_c, H * Dh), (D, Dr), (H * Dh, D)]
    proj = MLAProjections(*(rng.standard_normal(s) / math.sqrt(s[0]) for s in shapes))
    mla_sizes(proj, H)  # the same checks as every other entry point
    return proj


class MLACache(NamedTuple):
    """What MLA stores per token: the latent c_KV (B, S, d_c) and the RoPE key
    k_R (B, S, Dr), already rotated. No per-head key or value is stored."""

    latent: np.ndarray
    k_rope: np.ndarray


def _rms_norm(x: np.ndarray, eps: float | None) -> np.ndarray:
    """x / √(mean(x²) + eps) over the last axis (RMSNorm with its scale at 1); None: x."""
    if eps is None:
        return x
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


def mla_attention(x: np.ndarray, proj: MLAProjections, n_heads: int, *, rope,
                  positions=None, causal: bool = True, norm_eps: float | None = None):
    """Multi-head latent attention as DeepSeek-V2 writes it (eqs. 9–19), without its YaRN
    scaling: output (B, T, D) and the cache.

    The paper's equations have no normalisation; its released code (and transformers'
    ``DeepseekV2Attention``) puts an RMSNorm on each latent, c_Q and c_KV, before the
    up-projections: ``norm_eps`` (e.g. 1e-6) adds them, with their scales at 1.

    Per head i: q_i = [q_C,i ; q_R,i], k_i = [k_C,i ; k_R] (k_R shared by the heads),
    score = q_i·k_i / √(Dh + Dr), v_i = (c_KV W_UV)_i.

    Parameters
    ----------
    x : np.ndarray
        (B, T, D).
    proj : MLAProjections
    n_heads : int
    rope : attnlab.positional.RoPE
        Rotates the Dr-wide parts.
    positions : array of int, optional
        (T,); default 0 … T−1.
    causal : bool
    norm_eps : float, optional
        None: no normalisation (the paper's equations); a float: RMSNorm on c_Q and c_KV.

    Returns
    -------
    out : np.ndarray
        (B, T, D).
    cache : MLACache
        The latent and the rotated RoPE key of every token.

    Taught in chapter 11.
    """
    H, Dh, Dr, d_c, _ = mla_sizes(proj, n_heads)
    B, T, _ = x.shape
    positions = np.arange(T) if positions is None else np.asarray(positions)

    c_q = _rms_norm(x @ proj.w_dq, norm_eps)  # (B, T, d_cq)
    q_c = split_heads(c_q @ proj.w_uq, H)  # (B, H, T, Dh)
    q_r = rope.apply(split_heads(c_q @ proj.w_qr, H), positions)  # (B, H, T, Dr)
    latent = _rms_norm(x @ proj.w_dkv, norm_eps)  # (B, T, d_c): what is cached
    k_c = split_heads(latent @ proj.w_uk, H)  # (B, H, T, Dh)
    v = split_heads(latent @ proj.w_uv, H)  # (B, H, T, Dh)
    k_r = rope.apply(x @ proj.w_kr, positions)  # (B, T, Dr): one for all heads

    scores = (q_c @ k_c.mT  # (B, H, T, T) content part
              + q_r @ k_r[:, None].mT)  # (B, H, T, T) position part, k_R over heads
    scores = scores / math.sqrt(Dh + Dr)
    if causal:
        scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    attn = np.exp(scores)
    attn /= attn.sum(axis=-1, keepdims=True)  # (B, H, T, T)
    out = merge_heads(attn @ v) @ proj.w_o  # (B, T, D)
    return out, MLACache(latent, k_r)


def mla_absorbed_scores(x_q: np.ndarray, cache: MLACache, proj: MLAProjections, n_heads: int,
                        *, rope, positions, norm_eps: float | None = None) -> np.ndarray:
    """The scores of new queries against the cache, with W_UK absorbed into the query.

    q_C,i · k_C,i = (c_Q W_UQ,i)(c_KV W_UK,i)ᵀ = c_Q (W_UQ,i W_UK,iᵀ) c_KVᵀ: the product
    W_UQ,i W_UK,iᵀ (d_cq, d_c) is computed once, and the cached latent is used as it is —
    no per-head key is ever rebuilt. This works only because nothing position-dependent
    sits between W_UQ and W_UK: with RoPE on k_C, a rotation R_m would stand between
    them and the product would change with every position. That is why the position
    goes into separate, decoupled parts q_R and k_R.

    Parameters
    ----------
    x_q : np.ndarray
        (B, n, D): the inputs of the new queries.
    cache : MLACache
        Latents (B, S, d_c) and rotated RoPE keys (B, S, Dr) of the keys.
    positions : array of int
        (n,): the queries' positions.
    norm_eps : float, optional
        As in :func:`mla_attention`.

    Returns
    -------
    np.ndarray
        (B, H, n, S): the scores before the mask, equal to :func:`mla_attention`'s.

    Taught in chapter 11.
    """
    H, Dh, Dr, d_c, d_cq = mla_sizes(proj, n_heads)
    w_uq = proj.w_uq.reshape(d_cq, H, Dh)  # (d_cq, H, Dh)
    w_uk = proj.w_uk.reshape(d_c, H, Dh)  # (d_c, H, Dh)
    absorbed = np.einsum("qhd,chd->hqc", w_uq, w_uk)  # (H, d_cq, d_c): W_UQ,i W_UK,iᵀ

    c_q = _rms_norm(x_q @ proj.w_dq, norm_eps)  # (B, n, d_cq)
    q_latent = np.einsum("bnq,hqc->bhnc", c_q, absorbed)  # (B, H, n, d_c)
    content = q_latent @ cache.latent[:, None].mT  # (B, H, n, S)
    q_r = rope.apply(split_heads(c_q @ proj.w_qr, H), positions)  # (B, H, n, Dr)
    position = q_r @ cache.k_rope[:, None].mT  # (B, H, n, S)
    return (content + position) / math.sqrt(Dh + Dr)


def cached_values_per_token(kind: str, *, n_heads: int, d_head: int, n_kv_heads: int = 1,
                            d_latent: int = 0, d_rope: int = 0) -> int:
    """How many numbers one layer caches per token.

    MHA: 2·H·Dh; GQA: 2·Hkv·Dh (MQA: Hkv = 1); MLA: d_c + Dr (the latent and the
    shared RoPE key).

    Taught in chapter 11.
    """
    H, Dh = positive_int(n_heads, "n_heads"), positive_int(d_head, "d_head")
    if kind == "mha":
        return 2 * H * Dh
    if kind == "gqa":
        return 2 * positive_int(n_kv_heads, "n_kv_heads") * Dh
    if kind == "mla":
        return positive_int(d_latent, "d_latent") + positive_int(d_rope, "d_rope")
    raise ValueError(f"kind は 'mha'・'gqa'・'mla' のどれかです: kind={kind!r}")
