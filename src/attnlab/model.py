"""A small attention-only transformer in numpy, with a hand-written backward pass.

The architecture of the induction-head papers (Elhage et al. 2021, Olsson et al. 2022):
token embedding, optionally plus absolute positions (sinusoidal or a learned table),
then ``n_layers`` residual blocks ``x = x + MHA(x)``, then the unembedding and a softmax
cross-entropy on the positions a loss mask selects. No MLP, no LayerNorm. RoPE rotates
q and k inside attention; ALiBi adds a distance penalty to the scores.

Parameters live in a plain dict, so a chapter can look at, change or zero any matrix:

==========================  ==================
``embed``                   (V, D)
``pos`` (learned only)      (max_len, D)
``layers.{l}.w_q``          (D, D)
``layers.{l}.w_k``          (D, Hkv·Dh)
``layers.{l}.w_v``          (D, Hkv·Dh)
``layers.{l}.w_o``          (D, D)
``unembed``                 (D, V)
==========================  ==================

Arrays are float32 by default, which makes a training step about a third faster;
``dtype="float64"`` gives the precision the gradient check needs. The forward pass of
each block is the one of :func:`attnlab.multi_head_attention` (tested equal); it keeps
what the backward pass needs.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from attnlab._validate import choice, generator, positive_float, positive_int, token_ids
from attnlab.attention import (
    MHAWeights,
    _head_counts,
    causal_mask,
    init_mha,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from attnlab.positional import RoPE, alibi_bias, lookup_positions, sinusoidal_encoding

POSITIONAL = ("none", "sinusoidal", "learned", "rope", "alibi")
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class ModelConfig:
    """The shape and position scheme of the toy transformer.

    Attributes
    ----------
    vocab_size : int
        V, the number of token ids ``0 … V−1``.
    d_model : int
        D, the width of the residual stream.
    n_heads : int
        H, query heads per layer; must divide ``d_model``.
    n_layers : int
        Number of attention blocks.
    max_len : int
        The longest sequence the model accepts with learned positions (the table has
        this many rows). Other schemes accept any length; ``max_len`` is only recorded.
    positional : {"none", "sinusoidal", "learned", "rope", "alibi"}
        How positions enter: added to the embeddings (sinusoidal, learned), rotating q
        and k (rope), a score bias (alibi), or not at all (none).
    n_kv_heads : int, optional
        Hkv for grouped-query attention; must divide ``n_heads``. None means H.
    causal : bool
        True: a query sees only keys at its own or earlier positions.
    rope_base, rope_scale : float
        RoPE's base and position-interpolation factor (``positions / rope_scale``).
    dtype : {"float32", "float64"}
        The precision of parameters and activations.

    Taught in chapter 02 (なぜヘッドを分けるのか); positions in chapters 07 and 10.
    """

    vocab_size: int
    d_model: int
    n_heads: int
    n_layers: int
    max_len: int
    positional: str = "learned"
    n_kv_heads: int | None = None
    causal: bool = True
    rope_base: float = 10000.0
    rope_scale: float = 1.0
    dtype: str = "float32"

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "max_len"):
            positive_int(getattr(self, name), name)
        choice(self.positional, "positional", POSITIONAL)
        choice(self.dtype, "dtype", DTYPES)
        _head_counts(self.d_model, self.n_heads, self.n_kv_heads)
        if not isinstance(self.causal, (bool, np.bool_)):
            raise ValueError(
                "causal は True か False である必要があります: "
                f"causal={self.causal!r}"
            )
        positive_float(self.rope_base, "rope_base")
        positive_float(self.rope_scale, "rope_scale")
        if self.positional == "rope" and self.d_head % 2:
            raise ValueError(
                "RoPE は次元を 2 つずつ回転させるので d_head は偶数である必要があります: "
                f"d_head={self.d_head} (d_model={self.d_model}, n_heads={self.n_heads})"
            )

    @property
    def kv_heads(self) -> int:
        """Hkv, with ``None`` resolved to H."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def d_head(self) -> int:
        """Dh = D / H."""
        return self.d_model // self.n_heads

    @property
    def rope(self) -> RoPE | None:
        """The RoPE settings attention uses, or None for the other schemes."""
        if self.positional != "rope":
            return None
        return RoPE(base=self.rope_base, scale=self.rope_scale)


def layer_keys(layer: int) -> tuple[str, str, str, str]:
    """The names of one layer's matrices in ``params``: ``layers.{layer}.w_q`` … ``w_o``.

    Taught in chapter 04 (各ヘッドは何を捉えているのか).
    """
    return tuple(f"layers.{layer}.{name}" for name in MHAWeights._fields)


def layer_weights(params: dict, layer: int) -> MHAWeights:
    """The four matrices of one attention layer, as :mod:`attnlab.attention` takes them.

    ``layer_weights(params, 0)`` can go straight to :func:`attnlab.multi_head_attention`
    or :func:`attnlab.mean_pool_kv`; ``params.update(zip(layer_keys(0), weights))`` puts
    changed matrices back.

    Taught in chapter 04 (各ヘッドは何を捉えているのか).
    """
    keys = layer_keys(layer)
    missing = [key for key in keys if key not in params]
    if missing:
        raise ValueError(f"params に {missing[0]!r} がありません: layer={layer} の層はありません")
    return MHAWeights(*(params[key] for key in keys))


def param_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """The name and shape of every parameter the model has, in a fixed order.

    Taught in chapter 02 (なぜヘッドを分けるのか).
    """
    V, D, d_kv = config.vocab_size, config.d_model, config.kv_heads * config.d_head
    shapes = {"embed": (V, D)}
    if config.positional == "learned":
        shapes["pos"] = (config.max_len, D)
    for layer in range(config.n_layers):
        w_q, w_k, w_v, w_o = layer_keys(layer)
        shapes.update({w_q: (D, D), w_k: (D, d_kv), w_v: (D, d_kv), w_o: (D, D)})
    shapes["unembed"] = (D, V)
    return shapes


def init_params(config: ModelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random parameters: embeddings and learned positions N(0, 1), matrices N(0, 1/D).

    With unit-variance inputs the scaled scores and the logits both start near unit
    variance, which is what LayerNorm would otherwise arrange.

    Parameters
    ----------
    config : ModelConfig
    rng : np.random.Generator

    Returns
    -------
    dict of str to np.ndarray
        The keys and shapes of :func:`param_shapes`, in ``config.dtype``.

    Taught in chapter 02 (なぜヘッドを分けるのか).
    """
    _check_config(config)
    rng = generator(rng)
    V, D = config.vocab_size, config.d_model
    params = {"embed": rng.standard_normal((V, D))}
    if config.positional == "learned":
        params["pos"] = rng.standard_normal((config.max_len, D))
    for layer in range(config.n_layers):
        weights = init_mha(D, config.n_heads, config.n_kv_heads, rng=rng)
        params.update(zip(layer_keys(layer), weights, strict=True))
    params["unembed"] = rng.standard_normal((D, V)) / math.sqrt(D)
    return {name: value.astype(config.dtype) for name, value in params.items()}


# --- checks -------------------------------------------------------------------------------

def _check_config(config) -> ModelConfig:
    if not isinstance(config, ModelConfig):
        raise ValueError(
            f"config は attnlab.model.ModelConfig(...) である必要があります: config={config!r}"
        )
    return config


def _check_params(params, config: ModelConfig) -> dict[str, np.ndarray]:
    if not isinstance(params, dict):
        raise ValueError(
            "params はパラメータの dict である必要があります: "
            f"type={type(params).__name__}"
        )
    for name, shape in param_shapes(config).items():
        if name not in params:
            raise ValueError(
                f"params に {name!r} がありません: "
                "init_params(config, rng) で作ってください"
            )
        if np.shape(params[name]) != shape:
            raise ValueError(
                f"params[{name!r}] の形が config と合いません: shape={np.shape(params[name])}, "
                f"期待される形={shape}"
            )
    return params


def _check_tokens(tokens, config: ModelConfig) -> np.ndarray:
    tokens = token_ids(tokens, "tokens")
    if tokens.size == 0:
        raise ValueError(f"tokens が空です: tokens.shape={tokens.shape}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= config.vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"トークン ID {bad} は語彙の範囲外です: vocab_size={config.vocab_size} なので "
            f"0 〜 {config.vocab_size - 1} だけが使えます"
        )
    T = tokens.shape[1]
    if config.positional == "learned" and T > config.max_len:
        # IndexError, as attnlab.positional.lookup_positions: the table has no such row
        raise IndexError(
            f"系列長 T={T} が max_len={config.max_len} を超えています: 学習可能な位置埋め込みの"
            f"表には位置 0 〜 {config.max_len - 1} の行しかなく、位置 {config.max_len} 以降の行は"
            "ありません"
        )
    return tokens


def _check_ablate(ablate, config: ModelConfig) -> dict[int, np.ndarray]:
    """``ablate`` (pairs (layer, head)) as a keep-vector (H,) per affected layer."""
    keep = {}
    for pair in ablate or ():
        try:
            layer, head = (int(i) for i in pair)
        except (TypeError, ValueError):
            raise ValueError(
                f"ablate の要素は (層, ヘッド) の組である必要があります: {pair!r}"
            ) from None
        if not (0 <= layer < config.n_layers and 0 <= head < config.n_heads):
            raise ValueError(
                f"ablate の (層, ヘッド)=({layer}, {head}) はモデルにありません: 層は 0 〜 "
                f"{config.n_layers - 1}、ヘッドは 0 〜 {config.n_heads - 1} です"
            )
        keep.setdefault(layer, np.ones(config.n_heads, dtype=config.dtype))[head] = 0.0
    return keep


# --- forward ------------------------------------------------------------------------------

class Forward(NamedTuple):
    """What :func:`forward` returns."""

    logits: np.ndarray  # (B, T, V)
    attn: tuple[np.ndarray, ...]  # one (B, H, T, T) per layer


def _attention_inputs(config: ModelConfig, T: int):
    """The mask (T, T) or None, and the score bias (H, T, T) or None, for length T."""
    mask = causal_mask(T) if config.causal else None
    bias = None
    if config.positional == "alibi":
        bias = alibi_bias(config.n_heads, T, dtype=config.dtype)  # (H, T, T)
    return mask, bias


def _embed(params, tokens: np.ndarray, config: ModelConfig) -> np.ndarray:
    """Token embedding plus the absolute positions, if the scheme adds them: (B, T, D)."""
    T = tokens.shape[1]
    x = params["embed"][tokens]  # (B, T, D)
    if config.positional == "sinusoidal":
        x = x + sinusoidal_encoding(T, config.d_model, dtype=config.dtype)  # (T, D), over B
    elif config.positional == "learned":
        x = x + lookup_positions(params["pos"], np.arange(T))  # (T, D)
    return x


class _BlockCache(NamedTuple):
    """What one block's forward pass keeps for its backward pass."""

    x: np.ndarray  # (B, T, D) the block's input
    q: np.ndarray  # (B, H, T, Dh) after RoPE, if any
    k: np.ndarray  # (B, H, T, Dh) after RoPE, repeated for the query heads of a group
    v: np.ndarray  # (B, H, T, Dh) repeated likewise
    attn: np.ndarray  # (B, H, T, T)
    heads: np.ndarray  # (B, H, T, Dh) every head's output, before switching any off
    concat: np.ndarray  # (B, T, D) the heads that are on, side by side
    keep: np.ndarray | None  # (H,) 1 for a head that is on, 0 for one switched off


def _block(x, params, layer, config, mask, bias, keep):
    """One block ``x + MHA(x)``; returns the new x and what the backward pass needs."""
    w_q, w_k, w_v, w_o = layer_weights(params, layer)
    H, G = config.n_heads, config.n_heads // config.kv_heads
    rope = config.rope
    positions = np.arange(x.shape[1])
    B, T, D = x.shape
    rows = x.reshape(-1, D)  # (B·T, D): one 2-D product per projection

    def project(w, n):  # (B, n, T, Dh), contiguous for the stacked products below
        return np.ascontiguousarray(split_heads((rows @ w).reshape(B, T, -1), n))

    q = project(w_q, H)  # (B, H, T, Dh)
    k = project(w_k, config.kv_heads)  # (B, Hkv, T, Dh)
    v = project(w_v, config.kv_heads)  # (B, Hkv, T, Dh)
    if rope is not None:
        q = rope.apply(q, positions)  # (B, H, T, Dh)
        k = rope.apply(k, positions)  # (B, Hkv, T, Dh)
    if G > 1:
        k = np.repeat(k, G, axis=1)  # (B, H, T, Dh): query head i reads K/V head i // G
        v = np.repeat(v, G, axis=1)  # (B, H, T, Dh)
    heads, attn = scaled_dot_product_attention(q, k, v, mask, bias=bias)  # (B,H,T,Dh), (B,H,T,T)
    if keep is None:
        concat = merge_heads(heads)  # (B, T, D)
    else:
        concat = merge_heads(heads * keep[:, None, None])  # a head switched off adds nothing
    cache = _BlockCache(x, q, k, v, attn, heads, concat, keep)
    return x + (concat.reshape(-1, D) @ w_o).reshape(B, T, D), cache  # (B, T, D)


def _forward(params, tokens, config, ablate):
    keep = _check_ablate(ablate, config)
    mask, bias = _attention_inputs(config, tokens.shape[1])
    x = _embed(params, tokens, config)  # (B, T, D)
    caches = []
    for layer in range(config.n_layers):
        x, cache = _block(x, params, layer, config, mask, bias, keep.get(layer))
        caches.append(cache)
    logits = x @ params["unembed"]  # (B, T, V)
    return logits, x, caches


def forward(params: dict, tokens: np.ndarray, config: ModelConfig, *, ablate=None) -> Forward:
    """Run the model: logits for the next token and every layer's attention weights.

    Parameters
    ----------
    params : dict of str to np.ndarray
        As made by :func:`init_params`.
    tokens : np.ndarray of int
        Shape (B, T), ids in ``0 … V−1``.
    config : ModelConfig
    ablate : iterable of (int, int), optional
        Heads ``(layer, head)`` to switch off: their output is zeroed before W_o, so the
        rest of the model runs as if they were not there.

    Returns
    -------
    Forward
        ``logits`` (B, T, V) and ``attn``, a tuple of one (B, H, T, T) array per layer.

    Taught in chapter 02 (なぜヘッドを分けるのか); ablation in chapter 04.
    """
    params, tokens, config = _check_call(params, tokens, config)
    logits, _, caches = _forward(params, tokens, config, ablate)
    return Forward(logits, tuple(cache.attn for cache in caches))


# --- loss and backward --------------------------------------------------------------------

def _check_call(params, tokens, config):
    """The checked ``(params, tokens, config)`` of every public entry point."""
    config = _check_config(config)
    return _check_params(params, config), _check_tokens(tokens, config), config


def _check_targets(tokens, targets, loss_mask, config):
    targets = token_ids(targets, "targets")
    loss_mask = np.asarray(loss_mask)
    if targets.shape != tokens.shape:
        raise ValueError(
            f"targets の形が tokens と一致しません: targets.shape={targets.shape}, "
            f"tokens.shape={tokens.shape}"
        )
    if loss_mask.shape != tokens.shape:
        raise ValueError(
            f"loss_mask の形が tokens と一致しません: loss_mask.shape={loss_mask.shape}, "
            f"tokens.shape={tokens.shape}"
        )
    loss_mask = loss_mask.astype(bool)
    if not loss_mask.any():
        raise ValueError("loss_mask がすべて False です: 損失を測る位置が 1 つもありません")
    chosen = targets[loss_mask]
    if chosen.min() < 0 or chosen.max() >= config.vocab_size:
        bad = chosen.min() if chosen.min() < 0 else chosen.max()
        raise ValueError(
            f"targets の ID {int(bad)} は語彙の範囲外です: vocab_size={config.vocab_size}"
        )
    return targets, loss_mask


def _cross_entropy(logits, targets, loss_mask):
    """Mean cross-entropy over the selected positions, its gradient and the accuracy."""
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (B, T, V)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (B, T, V)
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]  # (B, T)
    n = loss_mask.sum()
    loss = -picked[loss_mask].sum() / n
    d_logits = np.exp(log_probs)  # softmax (B, T, V); dL/dlogits = softmax − one-hot
    b, t = np.indices(targets.shape)  # (B, T) each
    d_logits[b, t, targets] -= 1.0
    d_logits *= loss_mask[..., None] / n  # only the selected positions count
    correct = logits.argmax(axis=-1) == targets  # (B, T)
    return float(loss), d_logits, float(correct[loss_mask].mean())


def _block_backward(d_x, params, layer, config, cache, grads):
    """Gradients of one block ``x + MHA(x)``: fills ``grads`` and returns dL/dx.

    The forward pass, per head, and the backward pass in reverse order (``d·`` is the
    gradient of the loss with respect to ·; y is the block's output)::

        q, k, v = x W_q, x W_k, x W_v    →  dW = xᵀ d(q|k|v),  dx = dy + Σ d(q|k|v) Wᵀ
        q, k = RoPE(q), RoPE(k)           →  d(q|k) rotated back by the opposite angles
        S = q kᵀ / √Dh (+ bias, mask)     →  dq = dS k / √Dh,  dk = dSᵀ q / √Dh
        A = softmax(S)                    →  dS = A ⊙ (dA − Σ_j A ⊙ dA)
        O = A v                           →  dA = dO vᵀ,  dv = Aᵀ dO
        y = x + concat(O) W_o             →  dW_o = concatᵀ dy,  dO = dy W_oᵀ

    Taught in chapter 02 (なぜヘッドを分けるのか).
    """
    x, q, k, v, attn, heads, concat, keep = cache
    w_q, w_k, w_v, w_o = layer_weights(params, layer)
    key_q, key_k, key_v, key_o = layer_keys(layer)
    B, T, D = x.shape
    H, Hkv, Dh = config.n_heads, config.kv_heads, config.d_head
    rows = x.reshape(-1, D)  # (B·T, D)

    # y = x + concat(O) W_o
    grads[key_o] = concat.reshape(-1, D).T @ d_x.reshape(-1, D)  # (D, D)
    d_concat = (d_x.reshape(-1, D) @ w_o.T).reshape(B, T, D)  # (B, T, D)
    # a contiguous copy: numpy's stacked matmul is only fast on contiguous blocks
    d_heads = np.ascontiguousarray(split_heads(d_concat, H))  # (B, H, T, Dh)
    if keep is not None:
        d_heads *= keep[:, None, None]
    # O = A v
    d_v = attn.swapaxes(-1, -2) @ d_heads  # (B, H, T, Dh)
    d_attn = d_heads @ v.swapaxes(-1, -2)  # (B, H, T, T)
    # A = softmax(S), row by row: dS = A ⊙ (dA − Σ_j A·dA); hidden keys have A = 0.
    # Σ_j A_ij·dA_ij = Σ_j A_ij (dO_i·v_j) = dO_i·O_i: one product per query over Dh,
    # not over all T keys (the trick FlashAttention uses).
    row_sums = (d_heads * heads).sum(axis=-1, keepdims=True)  # (B, H, T, 1)
    d_scores = d_attn  # in place, dA becomes dS; 1/√Dh of the scores q·k/√Dh folded in
    d_scores -= row_sums
    d_scores *= attn * (1.0 / math.sqrt(Dh))  # (B, H, T, T)
    # S = q kᵀ / √Dh
    d_q = d_scores @ k  # (B, H, T, Dh)
    d_k = d_scores.swapaxes(-1, -2) @ q  # (B, H, T, Dh)
    # the G query heads of a group read the same K/V head: their gradients add up
    if H > Hkv:
        d_k = d_k.reshape(B, Hkv, H // Hkv, T, Dh).sum(axis=2)  # (B, Hkv, T, Dh)
        d_v = d_v.reshape(B, Hkv, H // Hkv, T, Dh).sum(axis=2)  # (B, Hkv, T, Dh)
    rope = config.rope
    if rope is not None:
        # a rotation's transpose is the rotation by the opposite angle
        positions = -np.arange(T)
        d_q = rope.apply(d_q, positions)
        d_k = rope.apply(d_k, positions)
    # q, k, v = x W_q, x W_k, x W_v, and the residual path x → y
    d_rows = d_x.reshape(-1, D).copy()  # (B·T, D): the residual path passes d_x through
    for key, w, d_proj in ((key_q, w_q, d_q), (key_k, w_k, d_k), (key_v, w_v, d_v)):
        d_proj = merge_heads(d_proj).reshape(-1, w.shape[1])  # (B·T, D or Hkv·Dh)
        grads[key] = rows.T @ d_proj  # (D, ·)
        d_rows += d_proj @ w.T  # (B·T, D)
    return d_rows.reshape(B, T, D)


def loss_and_grads(
    params: dict,
    tokens: np.ndarray,
    targets: np.ndarray,
    loss_mask: np.ndarray,
    config: ModelConfig,
    *,
    ablate=None,
) -> tuple[float, dict[str, np.ndarray]]:
    """Mean cross-entropy over the selected positions, and its gradient by backprop.

    Parameters
    ----------
    params : dict of str to np.ndarray
    tokens, targets : np.ndarray of int
        Shape (B, T); ``targets[b, t]`` is the id the model should predict at (b, t).
    loss_mask : np.ndarray of bool
        Shape (B, T); True where the loss is measured.
    config : ModelConfig
    ablate : iterable of (int, int), optional
        Heads switched off, as in :func:`forward`.

    Returns
    -------
    loss : float
    grads : dict of str to np.ndarray
        Same keys and shapes as ``params``.

    Taught in chapter 02 (なぜヘッドを分けるのか).
    """
    loss, grads, _ = _loss_grads_accuracy(params, tokens, targets, loss_mask, config, ablate)
    return loss, grads


def _loss_grads_accuracy(params, tokens, targets, loss_mask, config, ablate=None):
    params, tokens, config = _check_call(params, tokens, config)
    targets, loss_mask = _check_targets(tokens, targets, loss_mask, config)
    logits, x, caches = _forward(params, tokens, config, ablate)
    loss, d_logits, accuracy = _cross_entropy(logits, targets, loss_mask)

    D = config.d_model
    grads = {"unembed": x.reshape(-1, D).T @ d_logits.reshape(-1, config.vocab_size)}  # (D, V)
    d_x = d_logits @ params["unembed"].T  # (B, T, D)
    for layer in reversed(range(config.n_layers)):
        d_x = _block_backward(d_x, params, layer, config, caches[layer], grads)
    # the lookup embed[tokens] is one_hot(tokens) @ embed, so the gradient is one_hotᵀ @ dx:
    # a token used twice collects both gradients
    one_hot = np.eye(config.vocab_size, dtype=d_x.dtype)[tokens.reshape(-1)]  # (B·T, V)
    grads["embed"] = one_hot.T @ d_x.reshape(-1, D)  # (V, D)
    if config.positional == "learned":
        grads["pos"] = np.zeros_like(params["pos"])
        grads["pos"][: tokens.shape[1]] = d_x.sum(axis=0)  # rows past T get no gradient
    return loss, {name: grads[name] for name in params if name in grads}, accuracy


def evaluate(params: dict, batch, config: ModelConfig, *, ablate=None) -> tuple[float, float]:
    """Loss and accuracy on a batch ``(tokens, targets, loss_mask)``, no gradients.

    Accuracy is the share of selected positions where the most likely token is the
    target. ``ablate`` switches heads off as in :func:`forward`.

    Taught in chapter 04 (各ヘッドは何を捉えているのか).
    """
    tokens, targets, loss_mask = batch
    params, tokens, config = _check_call(params, tokens, config)
    targets, loss_mask = _check_targets(tokens, targets, loss_mask, config)
    logits, _, _ = _forward(params, tokens, config, ablate)
    loss, _, accuracy = _cross_entropy(logits, targets, loss_mask)
    return loss, accuracy


def ablation_losses(params: dict, batch, config: ModelConfig) -> np.ndarray:
    """The loss on ``batch`` with each head switched off, one at a time.

    Returns
    -------
    np.ndarray
        Shape (n_layers, H): entry (l, h) is the loss with head h of layer l off and
        every other head on. Compare with ``evaluate(params, batch, config)[0]``.

    Taught in chapter 04 (各ヘッドは何を捉えているのか).
    """
    losses = np.empty((config.n_layers, config.n_heads))
    for layer, head in np.ndindex(losses.shape):
        losses[layer, head] = evaluate(params, batch, config, ablate=[(layer, head)])[0]
    return losses


class PruningCurve(NamedTuple):
    """What :func:`pruning_curve` returns."""

    order: list  # the heads (layer, head), in the order they were switched off
    loss: np.ndarray  # (n_layers·H + 1,): loss with the first k heads of `order` off
    accuracy: np.ndarray  # (n_layers·H + 1,): accuracy likewise


def pruning_curve(params: dict, batch, config: ModelConfig, order=None) -> PruningCurve:
    """Switch heads off one after another and measure the model after each.

    Parameters
    ----------
    params, batch, config
        As for :func:`evaluate`.
    order : list of (int, int), optional
        Every head (layer, head) once. By default the heads whose removal alone costs
        least (:func:`ablation_losses`) go first, as in Michel et al. (2019).

    Returns
    -------
    PruningCurve
        ``loss[0]`` and ``accuracy[0]`` are the full model's; the last entries have
        every head off.

    Taught in chapter 04 (各ヘッドは何を捉えているのか).
    """
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


# --- training -----------------------------------------------------------------------------

class Adam:
    """Adam (Kingma & Ba, 2015) over a dict of parameters, updated in place.

    Taught in chapter 02 (なぜヘッドを分けるのか).
    """

    def __init__(self, params: dict, lr: float = 1e-2, betas=(0.9, 0.999), eps: float = 1e-8):
        self.lr = positive_float(lr, "lr")
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.t = 0
        self.m = {name: np.zeros_like(p) for name, p in params.items()}
        self.v = {name: np.zeros_like(p) for name, p in params.items()}

    def step(self, params: dict, grads: dict) -> None:
        """One update of every parameter that has a gradient."""
        self.t += 1
        c1 = 1.0 - self.beta1 ** self.t  # bias corrections of the running means
        c2 = 1.0 - self.beta2 ** self.t
        for name, g in grads.items():
            m, v = self.m[name], self.v[name]
            m *= self.beta1
            m += (1.0 - self.beta1) * g
            v *= self.beta2
            v += (1.0 - self.beta2) * g * g
            params[name] -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


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
    batch_size: int = 64,
    seq_len: int = 32,
    lr: float = 1e-2,
    seed: int = 0,
) -> TrainResult:
    """Train a fresh model on a task with Adam; the same seed gives the same result.

    Parameters
    ----------
    config : ModelConfig
    task : callable
        ``task(rng, batch, seq_len)`` → ``(tokens, targets, loss_mask)``, each (B, T);
        e.g. a task from :mod:`attnlab.tasks`. Every step draws a new batch.
    steps, batch_size, seq_len : int
    lr : float
        Adam's step size.
    seed : int
        Seeds both the initial parameters and the batches (two independent streams).

    Returns
    -------
    TrainResult
        ``params``, the per-step ``loss`` and ``accuracy`` (each (steps,)), and the
        ``initial`` parameters, so that a chapter can see what training changed.

    Taught in chapter 02 (なぜヘッドを分けるのか).
    """
    config = _check_config(config)
    steps = positive_int(steps, "steps")
    batch_size = positive_int(batch_size, "batch_size")
    seq_len = positive_int(seq_len, "seq_len")
    if not callable(task):
        raise ValueError(
            "task は task(rng, batch, seq_len) と呼べる関数である必要があります: "
            f"{task!r}"
        )
    task_vocab = getattr(task, "vocab_size", None)
    if task_vocab is not None and task_vocab > config.vocab_size:
        raise ValueError(
            f"タスクの語彙 vocab_size={task_vocab} がモデルの vocab_size={config.vocab_size} "
            "より大きいです"
        )
    init_rng, data_rng = np.random.default_rng(seed).spawn(2)
    params = init_params(config, init_rng)
    initial = {name: value.copy() for name, value in params.items()}
    optimiser = Adam(params, lr=lr)
    losses, accuracies = np.empty(steps), np.empty(steps)
    for step in range(steps):
        tokens, targets, loss_mask = task(data_rng, batch_size, seq_len)
        loss, grads, accuracy = _loss_grads_accuracy(params, tokens, targets, loss_mask, config)
        optimiser.step(params, grads)
        losses[step], accuracies[step] = loss, accuracy
    return TrainResult(params, losses, accuracies, initial)
