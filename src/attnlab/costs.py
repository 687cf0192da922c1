"""What multi-head attention costs: parameters, FLOPs and the K/V cache.

Exact counts from the shapes alone, no arrays: the chapters compare them with measured
timings and with published model configurations.
"""

import math
from typing import NamedTuple

import numpy as np

from attnlab._validate import positive_int
from attnlab.attention import head_counts


class MHACost(NamedTuple):
    """What :func:`mha_cost` returns: parameter and FLOP counts of one attention layer."""

    params: dict[str, int]
    flops: dict[str, int]


def mha_cost(
    d_model: int,
    n_heads: int,
    seq_len: int,
    n_kv_heads: int | None = None,
    *,
    batch_size: int = 1,
) -> MHACost:
    """Exact parameters and FLOPs of multi-head attention, stage by stage.

    A multiply-add counts as 2 FLOPs; only the matrix products are counted (the softmax
    costs a few operations per score, ``H·T²`` scores). The scores and the weighted sum
    are counted in full even with a causal mask, as a dense implementation computes them.

    Parameters
    ----------
    d_model, n_heads, seq_len : int
        D, H, T.
    n_kv_heads : int, optional
        Hkv; None means H.
    batch_size : int
        B; FLOPs scale with it, parameters do not.

    Returns
    -------
    MHACost
        ``params`` with keys w_q, w_k, w_v, w_o, total; ``flops`` with keys q_proj,
        k_proj, v_proj, scores, weighted_sum, out_proj, total.

    Taught in chapter 03.
    """
    d_model = positive_int(d_model, "d_model")
    T = positive_int(seq_len, "seq_len")
    B = positive_int(batch_size, "batch_size")
    n_heads, n_kv_heads, d_head = head_counts(d_model, n_heads, n_kv_heads)
    d_kv = n_kv_heads * d_head
    params = {"w_q": d_model * d_model, "w_k": d_model * d_kv, "w_v": d_model * d_kv,
              "w_o": d_model * d_model}
    params["total"] = sum(params.values())
    flops = {
        "q_proj": 2 * B * T * d_model * d_model,
        "k_proj": 2 * B * T * d_model * d_kv,
        "v_proj": 2 * B * T * d_model * d_kv,
        "scores": 2 * B * n_heads * T * T * d_head,
        "weighted_sum": 2 * B * n_heads * T * T * d_head,
        "out_proj": 2 * B * T * d_model * d_model,
    }
    flops["total"] = sum(flops.values())
    return MHACost(params=params, flops=flops)


def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
    *,
    sliding_window: int | None = None,
) -> int:
    """Memory of the K/V cache: ``2 (K and V) · layers · Hkv · Dh · T · B · bytes``.

    ``bytes_per_value=2`` is fp16/bf16. With sliding-window attention (each query sees
    only the last ``sliding_window`` keys, as in Mistral 7B v0.1 with W = 4096), a
    rolling buffer keeps only those: the cache holds ``min(T, W)`` tokens per layer and
    stops growing at W.

    Parameters
    ----------
    n_layers, n_kv_heads, d_head, seq_len, batch_size, bytes_per_value : int
        Layers, Hkv, Dh, T, B and the bytes of one value; each ≥ 1.
    sliding_window : int, optional
        W ≥ 1, the number of most recent tokens each query attends to; None (the
        default) means every token is kept.

    Returns
    -------
    int
        Bytes.

    Taught in chapter 04.
    """
    values = [positive_int(v, name) for v, name in (
        (n_layers, "n_layers"), (n_kv_heads, "n_kv_heads"), (d_head, "d_head"),
        (seq_len, "seq_len"), (batch_size, "batch_size"), (bytes_per_value, "bytes_per_value"))]
    values[3] = _cached_tokens(values[3], sliding_window)
    return 2 * math.prod(values)


def _cached_tokens(seq_len: int, sliding_window: int | None = None) -> int:
    """How many tokens the K/V cache holds after ``seq_len`` tokens: ``min(T, W)``.

    Without a window (None) every token stays; with a sliding window of W tokens a
    rolling buffer overwrites the oldest, so the cache stops growing at W.
    """
    T = positive_int(seq_len, "seq_len")
    if sliding_window is None:
        return T
    if (isinstance(sliding_window, bool) or not isinstance(sliding_window, (int, np.integer))
            or sliding_window < 1):
        raise ValueError(
            "sliding_window は 1 以上の整数（窓のトークン数）か None（窓なし）である必要が"
            f"あります: sliding_window={sliding_window!r}")
    return min(T, int(sliding_window))


class DecodeCost(NamedTuple):
    """What :func:`decode_attention_cost` returns: one decoding step's attention."""

    flops: int  # multiply-adds × 2 of the scores and the weighted sum, every layer
    kv_bytes: int  # bytes of K and V read from the cache, every layer


def decode_attention_cost(
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    d_head: int,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
    *,
    sliding_window: int | None = None,
) -> DecodeCost:
    """FLOPs and cache reads of attention when one new token is generated.

    The new query of each of the ``n_heads`` heads is scored against ``seq_len`` cached
    keys and averages as many cached values: ``2 · 2 · layers · H · Dh · T · B`` FLOPs.
    Every cached key and value is read once: :func:`kv_cache_bytes` of ``seq_len``
    tokens. Sharing K/V heads (``n_kv_heads < n_heads``) shrinks the reads, not the
    FLOPs; the ratio ``flops / kv_bytes`` is ``2 · H / (Hkv · bytes_per_value)``. With
    a ``sliding_window`` W, T is replaced by ``min(T, W)`` in
    both.

    Taught in chapter 04.
    """
    n_layers = positive_int(n_layers, "n_layers")
    d_head = positive_int(d_head, "d_head")
    T = _cached_tokens(seq_len, sliding_window)  # the keys one query reads
    B = positive_int(batch_size, "batch_size")
    n_heads, n_kv_heads, _ = head_counts(n_heads * d_head, n_heads, n_kv_heads)
    flops = 2 * 2 * n_layers * n_heads * d_head * T * B  # scores and weighted sum
    kv_bytes = kv_cache_bytes(n_layers, n_kv_heads, d_head, T, batch_size=B,
                              bytes_per_value=bytes_per_value)
    return DecodeCost(flops, kv_bytes)


class DecodeReads(NamedTuple):
    """What :func:`decode_step_reads` returns: bytes read from memory in one step."""

    params: int  # every parameter once, shared by the whole batch
    kv_cache: int  # every sequence's own K/V cache
    total: int  # params + kv_cache


def decode_step_reads(
    n_params: int,
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
    *,
    sliding_window: int | None = None,
) -> DecodeReads:
    """Bytes one decoding step reads from memory: the parameters plus the K/V cache.

    To generate the next token of ``batch_size`` sequences at once, each parameter matrix
    is read once and applied to the B new tokens together, so the parameters cost
    ``n_params · bytes`` whatever B is. Each sequence has its own cache, so the cache
    costs :func:`kv_cache_bytes` of B sequences. Fewer K/V heads shrink only the second
    term; what that saves of the total depends on B and T. Activations and the
    logits are left out (small next to both at these sizes).

    Parameters
    ----------
    n_params : int
        Parameters of the model (e.g. :func:`llama_param_count`).
    n_layers, n_kv_heads, d_head, seq_len, batch_size, bytes_per_value : int
        As for :func:`kv_cache_bytes`; the parameters use the same ``bytes_per_value``.
    sliding_window : int, optional
        As for :func:`kv_cache_bytes`.

    Returns
    -------
    DecodeReads
        ``params``, ``kv_cache`` and ``total`` in bytes.

    Taught in chapter 04.
    """
    n_params = positive_int(n_params, "n_params")
    size = positive_int(bytes_per_value, "bytes_per_value")
    param_bytes = n_params * size
    cache = kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch_size, size,
                           sliding_window=sliding_window)
    return DecodeReads(param_bytes, cache, param_bytes + cache)


def llama_param_count(
    n_layers: int,
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    d_ff: int,
    vocab_size: int,
) -> int:
    """Parameters of a LLaMA-style decoder: the model a chapter compares its cache with.

    Token embedding (V × D); per layer W_Q and W_O (D × D each), W_K and W_V
    (D × Hkv·Dh each), a gated MLP of three D × d_ff matrices and two RMSNorm weight
    vectors (D each); a final RMSNorm (D) and an untied unembedding (D × V). No biases.

    Taught in chapter 04.
    """
    n_layers = positive_int(n_layers, "n_layers")
    d_ff = positive_int(d_ff, "d_ff")
    vocab_size = positive_int(vocab_size, "vocab_size")
    n_heads, n_kv_heads, d_head = head_counts(d_model, n_heads, n_kv_heads)
    attention = 2 * d_model * d_model + 2 * d_model * n_kv_heads * d_head
    mlp = 3 * d_model * d_ff
    per_layer = attention + mlp + 2 * d_model
    return vocab_size * d_model + n_layers * per_layer + d_model + d_model * vocab_size
