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
``dtype="float64"`` gives the precision the gradient check needs. Each block runs the
one forward pass of :func:`attnlab.attention.attention_pass`, the same as
:func:`attnlab.multi_head_attention`, and keeps what the backward pass needs. Training
(Adam, ``train``, evaluation, ablation) is in :mod:`attnlab.training`.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from attnlab._validate import (
    choice,
    generator,
    positive_float,
    positive_int,
    rope_head,
    token_ids,
)
from attnlab.attention import (
    AttentionPass,
    HeadCounts,
    MHAWeights,
    attention_pass,
    causal_mask,
    head_counts,
    init_mha,
    merge_heads,
    split_heads,
)
from attnlab.positional import (
    ROPE_SCALINGS,
    RoPE,
    alibi_bias,
    lookup_positions,
    sinusoidal_encoding,
)
from attnlab.tasks import Batch

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
        Hkv for grouped-query attention; must divide ``n_heads``. None is stored as H.
    causal : bool
        True: a query sees only keys at its own or earlier positions.
    rope_base, rope_scale : float
        RoPE's base and position-interpolation factor (``positions / rope_scale``).
    rope_scaling : {"pi", "ntk", "yarn"}
        How ``rope_scale`` stretches the context (see :class:`attnlab.positional.RoPE`):
        position interpolation (the default, as before), NTK-aware base, or YaRN with its
        attention temperature.
    rope_original_max_len : int, optional
        The trained length YaRN needs; None means ``max_len``.
    dtype : {"float32", "float64"}
        The precision of parameters and activations.

    Taught in chapter 02.
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
    rope_scaling: str = "pi"
    rope_original_max_len: int | None = None

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "max_len"):
            positive_int(getattr(self, name), name)
        choice(self.positional, "positional", POSITIONAL)
        choice(self.dtype, "dtype", DTYPES)
        heads = head_counts(self.d_model, self.n_heads, self.n_kv_heads)
        object.__setattr__(self, "n_kv_heads", heads.n_kv_heads)  # one field: None means H
        if not isinstance(self.causal, (bool, np.bool_)):
            raise ValueError(
                "causal は True か False である必要があります: "
                f"causal={self.causal!r}"
            )
        positive_float(self.rope_base, "rope_base")
        positive_float(self.rope_scale, "rope_scale")
        choice(self.rope_scaling, "rope_scaling", ROPE_SCALINGS)
        if self.rope_original_max_len is not None:
            positive_int(self.rope_original_max_len, "rope_original_max_len")
        if self.positional == "rope":
            rope_head(self.d_head, f"d_model={self.d_model}, n_heads={self.n_heads}")

    @property
    def heads(self) -> HeadCounts:
        """``(n_heads, n_kv_heads, d_head)``."""
        return HeadCounts(self.n_heads, self.n_kv_heads, self.d_model // self.n_heads)

    @property
    def d_head(self) -> int:
        """Dh = D / H."""
        return self.d_model // self.n_heads

    @property
    def rope(self) -> RoPE | None:
        """The RoPE settings attention uses, or None for the other schemes."""
        if self.positional != "rope":
            return None
        if self.rope_scaling == "pi":
            return RoPE(base=self.rope_base, scale=self.rope_scale)
        original = self.rope_original_max_len or self.max_len
        return RoPE(base=self.rope_base, scale=self.rope_scale, scaling=self.rope_scaling,
                    original_max_len=original)


def layer_keys(layer: int) -> tuple[str, str, str, str]:
    """The names of one layer's matrices in ``params``: ``layers.{layer}.w_q`` … ``w_o``.

    Taught in chapter 04.
    """
    return tuple(f"layers.{layer}.{name}" for name in MHAWeights._fields)


def layer_weights(params: dict, layer: int) -> MHAWeights:
    """The four matrices of one attention layer, as :mod:`attnlab.attention` takes them.

    ``layer_weights(params, 0)`` can go straight to :func:`attnlab.multi_head_attention`
    or :func:`attnlab.mean_pool_kv`; ``params.update(zip(layer_keys(0), weights))`` puts
    changed matrices back.

    Taught in chapter 04.
    """
    keys = layer_keys(layer)
    missing = [key for key in keys if key not in params]
    if missing:
        raise ValueError(f"params に {missing[0]!r} がありません: layer={layer} の層はありません")
    return MHAWeights(*(params[key] for key in keys))


def param_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """The name and shape of every parameter the model has, in a fixed order.

    Taught in chapter 02.
    """
    config = check_config(config)
    V, D, d_kv = config.vocab_size, config.d_model, config.n_kv_heads * config.d_head
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

    Taught in chapter 02.
    """
    config = check_config(config)
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


# --- checks at the public entry points ------------------------------------------------------

def check_config(config) -> ModelConfig:
    """``config`` unchanged, or a Japanese ValueError if it is not a :class:`ModelConfig`.

    Not taught: the first check of every function that takes a config.
    """
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


def _check_batch(batch, config: ModelConfig) -> Batch:
    """``batch`` as a :class:`Batch` whose targets and loss mask fit its tokens."""
    if not isinstance(batch, tuple) or len(batch) != 3:
        raise ValueError(
            "batch は Batch(tokens, targets, loss_mask) である必要があります"
            "（attnlab.tasks のタスクが返すもの）: "
            f"type={type(batch).__name__}"
        )
    tokens, targets, loss_mask = batch
    tokens = _check_tokens(tokens, config)
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
    return Batch(tokens, targets, loss_mask)


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


def _embed(params, tokens: np.ndarray, config: ModelConfig) -> np.ndarray:
    """Token embedding plus the absolute positions, if the scheme adds them: (B, T, D)."""
    T = tokens.shape[1]
    x = params["embed"][tokens]  # (B, T, D)
    if config.positional == "sinusoidal":
        x = x + sinusoidal_encoding(T, config.d_model, dtype=config.dtype)  # (T, D), over B
    elif config.positional == "learned":
        x = x + lookup_positions(params["pos"], np.arange(T))  # (T, D)
    return x


class _Trace(NamedTuple):
    """What the forward pass keeps for the backward pass."""

    x: np.ndarray  # (B, T, D) the residual stream after the last block
    inputs: list  # each block's input (B, T, D)
    passes: list  # each block's AttentionPass
    keep: dict  # layer → (H,) keep-vector, for the layers with heads switched off


def _forward(params, tokens, config, ablate, for_backward: bool):
    """Logits (B, T, V) and the trace of the forward pass; arguments already checked."""
    keep = _check_ablate(ablate, config)
    x = _embed(params, tokens, config)  # (B, T, D)
    return _layers(params, x, config, keep, for_backward)


def _layers(params, x, config, keep, for_backward: bool):
    """The attention layers and the unembedding on the residual stream x (B, T, D)."""
    T = x.shape[1]
    mask = causal_mask(T) if config.causal else None  # (T, T)
    bias = alibi_bias(config.n_heads, T, dtype=config.dtype) if (
        config.positional == "alibi") else None  # (H, T, T)
    inputs, passes = [], []
    for layer in range(config.n_layers):
        result = attention_pass(x, layer_weights(params, layer), config.heads, mask=mask,
                                bias=bias, rope=config.rope, keep=keep.get(layer),
                                for_backward=for_backward)
        inputs.append(x)
        passes.append(result)
        x = x + result.out  # (B, T, D)
    logits = x @ params["unembed"]  # (B, T, V)
    return logits, _Trace(x, inputs, passes, keep)


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

    Taught in chapter 02.
    """
    config = check_config(config)
    params = _check_params(params, config)
    tokens = _check_tokens(tokens, config)
    logits, trace = _forward(params, tokens, config, ablate, for_backward=False)
    return Forward(logits, tuple(result.attn for result in trace.passes))


def run_layers(params: dict, x: np.ndarray, config: ModelConfig) -> np.ndarray:
    """The model's layers and unembedding on inputs ``x`` built outside it.

    :func:`forward` is ``_embed`` (token embedding plus sinusoidal or learned positions)
    followed by this; here the caller makes the input, e.g. with positions added another
    way. RoPE and ALiBi still act inside attention as ``config`` says.

    Parameters
    ----------
    params : dict of str to np.ndarray
    x : np.ndarray
        Shape (B, T, D): the residual stream before the first layer.
    config : ModelConfig

    Returns
    -------
    np.ndarray
        Shape (B, T, V).

    Not taught: the layer stack of :func:`forward`, for experiments that build the input.
    """
    config = check_config(config)
    params = _check_params(params, config)
    x = np.asarray(x, dtype=config.dtype)
    if x.ndim != 3 or x.shape[-1] != config.d_model:
        raise ValueError(f"x は (B, T, D={config.d_model}) の配列にしてください: "
                         f"x.shape={x.shape}")
    return _layers(params, x, config, {}, for_backward=False)[0]


# --- loss and backward --------------------------------------------------------------------

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


def _block_backward(d_y, x, result: AttentionPass, weights: MHAWeights, keys, config, keep,
                    grads):
    """Gradients of one block ``y = x + MHA(x)``: fills ``grads`` and returns dL/dx.

    The forward pass (:func:`attnlab.attention.attention_pass`) and the backward pass in
    reverse order (``d·`` is the gradient of the loss with respect to ·). The G query
    heads that share a K/V head are stacked along time, (Hkv, G·T), in both passes, so
    the products below add up the gradients of a shared K/V head by themselves::

        q, k, v = x W_q / √Dh, x W_k, x W_v  →  dW = xᵀ d(q|k|v),  dx = dy + Σ d(q|k|v) Wᵀ
        q, k = RoPE(q), RoPE(k)               →  d(q|k) rotated back by the opposite angles
        S = q kᵀ (+ bias, mask)               →  dq = dS k,  dk = dSᵀ q
        A = softmax(S)                        →  dS = A ⊙ (dA − Σ_j A ⊙ dA)
        O = A v                               →  dA = dO vᵀ,  dv = Aᵀ dO
        y = x + concat(O) W_o                 →  dW_o = concatᵀ dy,  dO = dy W_oᵀ
    """
    w_q, w_k, w_v, w_o = weights
    key_q, key_k, key_v, key_o = keys
    B, T, D = x.shape
    H, Hkv, Dh = config.heads
    G = H // Hkv
    rows = x.reshape(-1, D)  # (B·T, D)
    d_rows_y = d_y.reshape(-1, D)  # (B·T, D)

    # y = x + concat(O) W_o
    grads[key_o] = result.concat.reshape(-1, D).T @ d_rows_y  # (D, D)
    d_concat = (d_rows_y @ w_o.T).reshape(B, T, D)  # (B, T, D)
    d_heads = split_heads(d_concat, H)  # (B, H, T, Dh), a view
    if keep is not None:
        d_heads = d_heads * keep[:, None, None]  # a switched-off head passes nothing back
    d_out = d_heads.reshape(B, Hkv, G * T, Dh)  # (B, Hkv, G·T, Dh), grouped (a copy)
    attn = result.attn.reshape(B, Hkv, G * T, T)  # (B, Hkv, G·T, T), a view
    # O = A v
    d_v = attn.swapaxes(-1, -2) @ d_out  # (B, Hkv, T, Dh): the group's gradients add up
    d_scores = d_out @ result.v.swapaxes(-1, -2)  # dA (B, Hkv, G·T, T)
    # A = softmax(S), row by row: dS = A ⊙ (dA − Σ_j A·dA); hidden keys have A = 0.
    # Σ_j A_ij·dA_ij = Σ_j A_ij (dO_i·v_j) = dO_i·O_i: one product per query over Dh,
    # not over all T keys (the trick FlashAttention uses).
    out_heads = result.heads.reshape(B, Hkv, G * T, Dh)  # (B, Hkv, G·T, Dh)
    d_scores -= (d_out * out_heads).sum(axis=-1, keepdims=True)  # dA − Σ_j A·dA, in place
    d_scores *= attn  # dS (B, Hkv, G·T, T)
    # S = q kᵀ, with q already divided by √Dh
    d_q = (d_scores @ result.k).reshape(B, H, T, Dh)  # (B, H, T, Dh)
    d_q *= 1.0 / math.sqrt(Dh)  # the scaling q = x W_q / √Dh
    d_k = d_scores.swapaxes(-1, -2) @ result.q  # (B, Hkv, T, Dh): the group's gradients add up
    rope = config.rope
    if rope is not None:
        # a rotation's transpose is the rotation by the opposite angle
        back = -np.arange(T)
        d_q = rope.apply(d_q, back)
        d_k = rope.apply(d_k, back)
    # q, k, v = x W_q, x W_k, x W_v, and the residual path x → y
    d_rows = d_rows_y.copy()  # (B·T, D): the residual path passes dy through
    for key, w, d_proj in ((key_q, w_q, d_q), (key_k, w_k, d_k), (key_v, w_v, d_v)):
        d_proj = merge_heads(d_proj).reshape(-1, w.shape[1])  # (B·T, D or Hkv·Dh)
        grads[key] = rows.T @ d_proj  # (D, ·)
        d_rows += d_proj @ w.T  # (B·T, D)
    return d_rows.reshape(B, T, D)


def loss_and_grads(
    params: dict,
    batch: Batch,
    config: ModelConfig,
    *,
    ablate=None,
) -> tuple[float, dict[str, np.ndarray]]:
    """Mean cross-entropy over the selected positions, and its gradient by backprop.

    Parameters
    ----------
    params : dict of str to np.ndarray
    batch : Batch
        ``(tokens, targets, loss_mask)``, each (B, T), as a task of :mod:`attnlab.tasks`
        returns it: ``targets[b, t]`` is the id the model should predict at (b, t), and
        the loss is measured where ``loss_mask`` is True.
    config : ModelConfig
    ablate : iterable of (int, int), optional
        Heads switched off, as in :func:`forward`.

    Returns
    -------
    loss : float
    grads : dict of str to np.ndarray
        Same keys and shapes as ``params``.

    Taught in chapter 02.
    """
    loss, grads, _ = loss_grads_accuracy(params, batch, config, ablate=ablate)
    return loss, grads


def loss_grads_accuracy(params, batch, config, *, ablate=None, backward: bool = True):
    """Loss, gradients (None if ``backward`` is False) and accuracy on one batch.

    Not taught: what :func:`loss_and_grads` and :mod:`attnlab.training` share.
    """
    config = check_config(config)
    params = _check_params(params, config)
    tokens, targets, loss_mask = _check_batch(batch, config)
    logits, trace = _forward(params, tokens, config, ablate, for_backward=backward)
    loss, d_logits, accuracy = _cross_entropy(logits, targets, loss_mask)
    if not backward:
        return loss, None, accuracy

    D = config.d_model
    grads = {"unembed": trace.x.reshape(-1, D).T @ d_logits.reshape(-1, config.vocab_size)}
    d_x = d_logits @ params["unembed"].T  # (B, T, D)
    for layer in reversed(range(config.n_layers)):
        d_x = _block_backward(d_x, trace.inputs[layer], trace.passes[layer],
                              layer_weights(params, layer), layer_keys(layer), config,
                              trace.keep.get(layer), grads)
    # the lookup embed[tokens] is one_hot(tokens) @ embed, so the gradient is one_hotᵀ @ dx:
    # a token used twice collects both gradients
    one_hot = np.eye(config.vocab_size, dtype=d_x.dtype)[tokens.reshape(-1)]  # (B·T, V)
    grads["embed"] = one_hot.T @ d_x.reshape(-1, D)  # (V, D)
    if config.positional == "learned":
        grads["pos"] = np.zeros_like(params["pos"])
        grads["pos"][: tokens.shape[1]] = d_x.sum(axis=0)  # rows past T get no gradient
    return loss, {name: grads[name] for name in params if name in grads}, accuracy
