"""A small attention-only transformer in numpy, with its backward pass written out.

The architecture of the induction-head papers (Elhage et al. 2021, Olsson et al. 2022):
token embedding, optionally plus absolute positions (sinusoidal or a learned table),
then ``n_layers`` residual blocks ``x = x + MHA(x)``, then the unembedding and a softmax
cross-entropy on the positions a loss mask selects. No MLP, no LayerNorm. RoPE rotates
q and k inside attention; ALiBi adds a distance penalty to the scores.

Read it top to bottom: the config, the parameters, the forward pass (each block is
:func:`attnlab.attention.attention_pass`, the forward pass of
:func:`attnlab.multi_head_attention`), the loss, and the backward pass, which undoes the
forward pass one line at a time, from the last line to the first. Adam, ``train`` and
evaluation are in :mod:`attnlab.training` (``train(..., step="readable")`` trains by
this file's :func:`loss_grads_accuracy`); the argument checks in ``attnlab._validate``.
``@_one_blas_thread`` (from :mod:`attnlab.parallel`) only keeps the BLAS library on one
thread during a call; it changes no number. The book page 「model.py を読む」
(``book/model_walkthrough.md``) reads this file in order.

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

Arrays are float32 by default (faster); ``dtype="float64"`` gives the precision the
gradient check needs.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from attnlab._validate import (
    choice,
    generator,
    model_batch,
    model_params,
    model_tokens,
    positive_float,
    positive_int,
    rope_head,
)
from attnlab.attention import (
    AttentionPass,
    HeadCounts,
    MHAProjections,
    attention_pass,
    causal_mask,
    head_counts,
    init_mha,
    merge_heads,
    split_heads,
)
from attnlab.parallel import _one_blas_thread
from attnlab.positional import (
    ROPE_SCALINGS,
    RoPE,
    RoPETables,
    alibi_bias,
    lookup_positions,
    sinusoidal_encoding,
    t5_bias,
    t5_buckets,
)
from attnlab.tasks import Batch

POSITIONAL = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
DTYPES = ("float32", "float64")


# --- config and parameters ------------------------------------------------------------------

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
        this many rows). Other schemes accept any length; for them ``max_len`` only
        serves as YaRN's trained length when ``rope_original_max_len`` is None.
    positional : {"none", "sinusoidal", "learned", "rope", "alibi", "t5"}
        How positions enter: added to the embeddings (sinusoidal, learned), rotating q
        and k (rope), a fixed score bias (alibi), a learned score bias per distance
        bucket (t5), or not at all (none).
    n_kv_heads : int, optional
        Hkv for grouped-query attention; must divide ``n_heads``. None is stored as H.
    causal : bool
        True: a query sees only keys at its own or earlier positions.
    rope_base, rope_scale : float
        RoPE's base and its context scale s = L′ / L (1: plain RoPE). How s acts is
        ``rope_scaling``'s: only ``"pi"`` divides the positions (``positions / s``); NTK
        enlarges the base and YaRN changes each pair's frequency.
    rope_scaling : {"pi", "ntk", "yarn"}
        How ``rope_scale`` stretches the context (``attnlab.positional.ROPE_SCALINGS``;
        see :class:`attnlab.positional.RoPE`): position interpolation (the default),
        NTK-aware base, or YaRN with its attention temperature.
    rope_original_max_len : int, optional
        The trained length YaRN needs; None means ``max_len``.
    t5_n_buckets, t5_max_distance : int
        The T5 bias's buckets and where their log spacing ends
        (:func:`attnlab.positional.t5_buckets`); one learned number per bucket and head,
        the same table in every layer, as in T5. Chapter 10.
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
    t5_n_buckets: int = 16
    t5_max_distance: int = 16

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
        if self.positional == "t5":  # the buckets' own checks
            t5_buckets(1, self.t5_n_buckets, self.t5_max_distance,
                       bidirectional=not self.causal)

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


def check_config(config) -> ModelConfig:
    """``config`` unchanged, or a Japanese ValueError if it is not a :class:`ModelConfig`.

    Not taught: the first check of every function that takes a config.
    """
    if not isinstance(config, ModelConfig):
        raise ValueError(
            f"config は attnlab.model.ModelConfig(...) である必要があります: config={config!r}"
        )
    return config


def layer_keys(layer: int) -> tuple[str, str, str, str]:
    """The names of one layer's matrices in ``params``: ``layers.{layer}.w_q`` … ``w_o``.

    Taught in chapter 04.
    """
    return tuple(f"layers.{layer}.{name}" for name in MHAProjections._fields)


def layer_projections(params: dict, layer: int) -> MHAProjections:
    """The four matrices of one attention layer, as :mod:`attnlab.attention` takes them.

    ``layer_projections(params, 0)`` can go straight to :func:`attnlab.multi_head_attention`
    or :func:`attnlab.mean_pool_kv`; ``params.update(zip(layer_keys(0), proj))`` puts
    changed matrices back.

    Taught in chapter 04.
    """
    keys = layer_keys(layer)
    missing = [key for key in keys if key not in params]
    if missing:
        raise ValueError(f"params に {missing[0]!r} がありません: layer={layer} の層はありません")
    return MHAProjections(*(params[key] for key in keys))


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
    if config.positional == "t5":
        shapes["t5_bias"] = (config.n_heads, config.t5_n_buckets)
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
        proj = init_mha(D, config.n_heads, config.n_kv_heads, rng=rng)
        params.update(zip(layer_keys(layer), proj, strict=True))
    params["unembed"] = rng.standard_normal((D, V)) / math.sqrt(D)
    if config.positional == "t5":  # drawn last: the other kinds draw as before
        H, n_buckets = config.n_heads, config.t5_n_buckets
        params["t5_bias"] = rng.standard_normal((H, n_buckets)) / math.sqrt(D)
    return {name: value.astype(config.dtype) for name, value in params.items()}


# --- forward ------------------------------------------------------------------------------

class Forward(NamedTuple):
    """What :func:`forward` returns."""

    logits: np.ndarray  # (B, T, V)
    attn: tuple[np.ndarray, ...]  # one (B, H, T, T) per layer


class _Trace(NamedTuple):
    """What the forward pass keeps for the backward pass."""

    inputs: list  # each block's input x, (B, T, D)
    passes: list  # each block's AttentionPass: q, k, v, attn, concat, out
    x: np.ndarray  # (B, T, D) the residual stream after the last block
    rope: RoPETables | None  # RoPE's cos and sin (T, Dh/2) each, made once for the pass


def _embed(params, tokens: np.ndarray, config: ModelConfig) -> np.ndarray:
    """Token embedding plus the absolute positions, if the scheme adds them: (B, T, D)."""
    T = tokens.shape[1]
    x = params["embed"][tokens]  # (B, T, D)
    if config.positional == "sinusoidal":
        x = x + sinusoidal_encoding(T, config.d_model, dtype=config.dtype)  # (T, D), over B
    elif config.positional == "learned":
        x = x + lookup_positions(params["pos"], np.arange(T))  # (T, D), over B
    return x


def _heads_kept(ablate, config: ModelConfig) -> dict[int, np.ndarray]:
    """``ablate`` (pairs (layer, head) to switch off) as a keep-vector (H,) of 0 and 1 per
    affected layer: ``{layer: keep}``. A block multiplies its heads' outputs by ``keep``
    before W_o (:func:`attnlab.attention.attention_pass`), so a head with 0 adds nothing."""
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


def _layers(params, x: np.ndarray, config: ModelConfig, keep: dict):
    """The blocks ``x = x + MHA(x)`` and the unembedding on the residual stream x
    (B, T, D): logits (B, T, V) and the trace the backward pass reads."""
    T = x.shape[1]
    mask = causal_mask(T) if config.causal else None  # (T, T)
    bias = (alibi_bias(config.n_heads, T, dtype=config.dtype)
            if config.positional == "alibi" else None)  # (H, T, T)
    if config.positional == "t5":  # one table for every layer, as in T5
        bias = t5_bias(params["t5_bias"], T, config.t5_max_distance,
                       bidirectional=not config.causal)  # (H, T, T)
    # RoPE's angles are the same in every block: their cos and sin, (T, Dh/2) each, once
    rope = (config.rope.tables(T, config.d_head, config.dtype)
            if config.positional == "rope" else None)
    inputs, passes = [], []
    for layer in range(config.n_layers):
        result = attention_pass(x, layer_projections(params, layer), config.heads, mask=mask,
                                bias=bias, rope=rope, keep=keep.get(layer))
        inputs.append(x)
        passes.append(result)
        x = x + result.out  # (B, T, D)
    logits = x @ params["unembed"]  # (B, T, V)
    return logits, _Trace(inputs, passes, x, rope)


@_one_blas_thread
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
    params = model_params(params, param_shapes(config))
    tokens = model_tokens(tokens, config)
    keep = _heads_kept(ablate, config)
    logits, trace = _layers(params, _embed(params, tokens, config), config, keep)
    return Forward(logits, tuple(result.attn for result in trace.passes))


@_one_blas_thread
def run_layers(params: dict, x: np.ndarray, config: ModelConfig) -> np.ndarray:
    """The model's layers and unembedding on inputs ``x`` built outside it.

    :func:`forward` is the token embedding plus sinusoidal or learned positions,
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
    params = model_params(params, param_shapes(config))
    x = np.asarray(x, dtype=config.dtype)
    if x.ndim != 3 or x.shape[-1] != config.d_model:
        raise ValueError(f"x は (B, T, D={config.d_model}) の配列にしてください: "
                         f"x.shape={x.shape}")
    return _layers(params, x, config, {})[0]


# --- loss ---------------------------------------------------------------------------------

def _cross_entropy(logits: np.ndarray, targets: np.ndarray):
    """Mean cross-entropy of logits (N, V) for targets (N,), its gradient dL/dlogits
    (N, V) and the accuracy (the share of rows whose largest logit is the target)."""
    N = len(targets)
    rows = np.arange(N)
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (N, V)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (N, V)
    loss = -log_probs[rows, targets].mean()
    d_logits = np.exp(log_probs)  # softmax (N, V); dL/dlogits = (softmax − one-hot) / N
    d_logits[rows, targets] -= 1.0
    d_logits /= N
    accuracy = (logits.argmax(axis=-1) == targets).mean()
    return float(loss), d_logits, float(accuracy)


# --- backward -------------------------------------------------------------------------------

def t5_table_grad(d_bias: np.ndarray, T: int, config: ModelConfig) -> np.ndarray:
    """The gradient of the T5 table (H, n_buckets) from that of its bias (H, T, T): every
    (i, j) of a bucket adds to the bucket's number.

    Not taught: the last step of the backward pass of the T5 bias (chapter 10).
    """
    buckets = t5_buckets(T, config.t5_n_buckets, config.t5_max_distance,
                         bidirectional=not config.causal)  # (T, T)
    one_hot = np.eye(config.t5_n_buckets, dtype=d_bias.dtype)[buckets]  # (T, T, n_buckets)
    return d_bias.reshape(len(d_bias), T * T) @ one_hot.reshape(T * T, -1)  # (H, n_buckets)


def _block_backward(d_y, x, result: AttentionPass, proj: MHAProjections, config: ModelConfig,
                    keep, rope: RoPETables | None = None
                    ) -> tuple[np.ndarray, MHAProjections, np.ndarray]:
    """One block ``y = x + MHA(x)`` backwards: dL/dx (B, T, D), the gradients of its
    four matrices, and dL/dbias (H, T, T) summed over the batch, from dL/dy (B, T, D).

    ``result`` is what :func:`attnlab.attention.attention_pass` kept, and ``rope`` the
    RoPE tables the forward pass turned q and k by (None without RoPE). Each step below
    undoes one line of it, from the last to the first (``d·`` is the gradient of the
    loss with respect to ·; O is the heads' outputs, ``out_heads`` in ``attention_pass``,
    so dO is ``d_heads_out`` below)::

        q, k, v = x W_q, x W_k, x W_v        →  dW = xᵀ d(q|k|v),  dx = dy + Σ d(q|k|v) Wᵀ
        q, k = RoPE(q), RoPE(k)              →  d(q|k) turned by the opposite angles
                                                 (YaRN: times its factor too)
        S = q kᵀ / √Dh (+ bias, mask)        →  dq = dS k / √Dh,  dk = dSᵀ q / √Dh
        A = softmax(S)                       →  dS = A ⊙ (dA − Σ_j A ⊙ dA)
        O = A v                              →  dA = dO vᵀ,  dv = Aᵀ dO
        y = x + concat(O · keep) W_o         →  dW_o = concatᵀ dy,  dO = dy W_oᵀ · keep

    The G query heads that share a K/V head sit on their own axis, (B, Hkv, G, ·, ·),
    as in the forward pass; the K/V head's gradient is the sum over its group.
    """
    w_q, w_k, w_v, w_o = proj
    H, Hkv, Dh = config.heads
    G = H // Hkv
    B, T, D = x.shape
    x_rows = x.reshape(B * T, D)  # (B·T, D): every token of every sequence

    # y = x + concat(O · keep) W_o
    d_w_o = result.concat.reshape(B * T, D).T @ d_y.reshape(B * T, D)  # (D, D)
    d_heads_out = split_heads(d_y @ w_o.T, H)  # dO, the per-head outputs' (B, H, T, Dh)
    if keep is not None:
        d_heads_out = d_heads_out * keep[:, None, None]  # an off head passes nothing back
    d_heads_out = d_heads_out.reshape(B, Hkv, G, T, Dh)  # (B, Hkv, G, T, Dh)
    attn = result.attn.reshape(B, Hkv, G, T, T)  # A (B, Hkv, G, T, T)
    # O = A v
    d_attn = d_heads_out @ result.v.mT  # dA (B, Hkv, G, T, T)
    d_v = (attn.mT @ d_heads_out).sum(axis=2)  # dv (B, Hkv, T, Dh): the group's sum
    # A = softmax(S), row by row; hidden keys have A = 0 and get no gradient
    d_scores = attn * (d_attn - (attn * d_attn).sum(axis=-1, keepdims=True))  # dS
    d_bias = d_scores.sum(axis=0).reshape(H, T, T)  # the bias is added to S: dbias = dS
    # S = q kᵀ / √Dh
    d_scores = d_scores / math.sqrt(Dh)  # (B, Hkv, G, T, T)
    d_q = (d_scores @ result.k).reshape(B, H, T, Dh)  # dq (B, H, T, Dh)
    d_k = (d_scores.mT @ result.q).sum(axis=2)  # dk (B, Hkv, T, Dh): the group's sum
    # q, k = RoPE(q), RoPE(k): a rotation's transpose turns by the opposite angles
    # (and YaRN's factor f multiplies back too: the transpose of f·R is f·Rᵀ)
    if rope is not None:
        d_q = rope.apply_back(d_q)  # (B, H, T, Dh)
        d_k = rope.apply_back(d_k)  # (B, Hkv, T, Dh)
    # q, k, v = x W_q, x W_k, x W_v, split into heads
    d_q, d_k, d_v = merge_heads(d_q), merge_heads(d_k), merge_heads(d_v)  # (B, T, ·)
    grads = MHAProjections(
        w_q=x_rows.T @ d_q.reshape(B * T, -1),  # (D, D)
        w_k=x_rows.T @ d_k.reshape(B * T, -1),  # (D, Hkv·Dh)
        w_v=x_rows.T @ d_v.reshape(B * T, -1),  # (D, Hkv·Dh)
        w_o=d_w_o,
    )
    d_x = d_y + d_q @ w_q.T + d_k @ w_k.T + d_v @ w_v.T  # (B, T, D): dy is the residual path
    return d_x, grads, d_bias


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


@_one_blas_thread
def loss_grads_accuracy(params: dict, batch: Batch, config: ModelConfig, *, ablate=None):
    """:func:`loss_and_grads` and the accuracy on the selected positions.

    The forward pass, the loss, then the backward pass: the unembedding, every block
    from the last to the first (:func:`_block_backward`), and the embedding.
    :func:`attnlab.training.train` records the accuracy too; with ``step="readable"`` it
    trains by this function, so a change made here (or in the functions it calls) changes
    what is learned. Chapter 02 calls :func:`loss_and_grads`, which returns its first two
    values.

    Not taught: no chapter imports it; the book page 「model.py を読む」 reads it.
    """
    config = check_config(config)
    params = model_params(params, param_shapes(config))
    tokens, targets, loss_mask = model_batch(batch, config)
    keep = _heads_kept(ablate, config)
    B, T = tokens.shape
    D, V = config.d_model, config.vocab_size

    x = _embed(params, tokens, config)  # (B, T, D)
    logits, trace = _layers(params, x, config, keep)  # (B, T, V)
    loss, d_chosen, accuracy = _cross_entropy(logits[loss_mask], targets[loss_mask])

    # logits = x W_unembed; the positions outside the loss mask pass no gradient
    d_logits = np.zeros_like(logits)  # (B, T, V)
    d_logits[loss_mask] = d_chosen
    grads = {"unembed": trace.x.reshape(B * T, D).T @ d_logits.reshape(B * T, V)}  # (D, V)
    d_x = d_logits @ params["unembed"].T  # (B, T, D)
    # x = x + MHA(x) for every block, the last one first
    d_bias = 0.0  # (H, T, T): every layer adds the same bias, so their gradients add up
    for layer in reversed(range(config.n_layers)):
        d_x, d_proj, d_layer_bias = _block_backward(
            d_x, trace.inputs[layer], trace.passes[layer], layer_projections(params, layer),
            config, keep.get(layer), trace.rope)
        grads.update(zip(layer_keys(layer), d_proj, strict=True))
        d_bias = d_bias + d_layer_bias
    if config.positional == "t5":  # bias[h, i, j] = table[h, bucket(i, j)]
        grads["t5_bias"] = t5_table_grad(d_bias, T, config)  # (H, n_buckets)
    # x = embed[tokens] + pos
    grads["embed"] = np.zeros_like(params["embed"])  # (V, D)
    np.add.at(grads["embed"], tokens, d_x)  # a token used twice collects both gradients
    if config.positional == "learned":
        grads["pos"] = np.zeros_like(params["pos"])  # (max_len, D)
        grads["pos"][:T] = d_x.sum(axis=0)  # rows past T get no gradient
    return loss, {name: grads[name] for name in params}, accuracy
