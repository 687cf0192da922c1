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
``dtype="float64"`` gives the precision the gradient check needs.

Two paths compute the same model. :func:`forward`, :func:`run_layers` and evaluation
run each block through :func:`attnlab.attention.attention_pass`, the forward pass of
:func:`attnlab.multi_head_attention`, so what a chapter shows agrees to the last bit with
the attention it builds by hand. Training (:func:`loss_and_grads`) takes a path written
for speed (``_block_forward`` and its backward pass ``_block_backward``): the same
equations, arranged so that numpy copies little and BLAS gets products it runs fast; it
agrees with the first path to float rounding (``tests/test_engine_speed.py``). Training
(Adam, ``train``, evaluation, ablation) is in :mod:`attnlab.training`.
"""

import ctypes
import functools
import math
import sys
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from attnlab._validate import (
    choice,
    generator,
    positive_float,
    positive_int,
    rope_head,
    token_ids,
)
from attnlab.attention import (
    HeadCounts,
    MHAWeights,
    attention_pass,
    causal_mask,
    head_counts,
    init_mha,
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


def _keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for the next arrays instead of returning it.

    A training step makes and frees a few dozen arrays of 0.1–1 MB. glibc hands memory
    that large back to the operating system as soon as it is freed, so every step asks
    for it again, and each fresh 4 kB page costs a page fault and zeroing: a third of a
    step of the chapter-sized model went there. Raising the two thresholds keeps the
    memory in the process, where the next step reuses it. Does nothing where the C
    library is not glibc (macOS, Windows).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt's parameter numbers
        return bool(libc.mallopt(m_trim_threshold, 256 << 20)
                    and libc.mallopt(m_mmap_threshold, 32 << 20))
    except (OSError, AttributeError):
        return False


_keep_freed_memory()

_BLAS: ThreadpoolController | None = None


def _one_blas_thread(func):
    """Run ``func`` with the BLAS library on one thread, as it was before afterwards.

    The model's products are small (64-wide): a second BLAS thread spends more on waking
    and synchronising than it saves, and on a shared machine (Binder, Colab, a busy
    laptop) the threads wait for each other. On this course's 2-core machine one thread
    made a training step about 1.5× faster than OpenBLAS's default of one per core
    (``benchmarks/train_speed.py --compare``), and under load it avoided 10× slowdowns.
    The limit holds only inside the call (threadpoolctl), so the rest of a notebook keeps
    the user's setting.
    """
    @functools.wraps(func)
    def limited(*args, **kwargs):
        global _BLAS
        if _BLAS is None:
            _BLAS = ThreadpoolController()  # finds the loaded BLAS once (a few ms)
        with _BLAS.limit(limits=1, user_api="blas"):
            return func(*args, **kwargs)
    return limited
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


class _Inputs(NamedTuple):
    """The first block's input as the model builds it: ``embed[tokens] + pos``."""

    tokens: np.ndarray  # (B·T,) token ids
    embed: np.ndarray  # (V, D)
    pos: np.ndarray | None  # (T, D) the positions added, or None


def _embed(params, tokens: np.ndarray, config: ModelConfig) -> tuple[np.ndarray, _Inputs]:
    """Token embedding plus the absolute positions, if the scheme adds them: (B, T, D),
    and the two parts it was built from."""
    T = tokens.shape[1]
    x = params["embed"][tokens]  # (B, T, D)
    pos = None
    if config.positional == "sinusoidal":
        pos = sinusoidal_encoding(T, config.d_model, dtype=config.dtype)  # (T, D)
    elif config.positional == "learned":
        pos = lookup_positions(params["pos"], np.arange(T))  # (T, D)
    if pos is not None:
        x = x + pos  # over B
    return x, _Inputs(tokens.reshape(-1), params["embed"], pos)


def _by_sequence(rows: np.ndarray, w: np.ndarray, T: int) -> np.ndarray:
    """``rows @ w`` for rows (B·T, K) and w (K, N), as B products of T rows each: (B·T, N).

    For short sequences each product is small enough for BLAS's kernel for small
    matrices, which skips the repacking a large product starts with; here about a fifth
    faster than one product of all B·T rows. The same sums, in BLAS's own order.
    """
    if T > 64:
        return rows @ w
    return (rows.reshape(-1, T, rows.shape[1]) @ np.ascontiguousarray(w)).reshape(-1, w.shape[1])


def _project(rows: np.ndarray, w: np.ndarray, inputs: _Inputs | None, T: int,
             chosen: np.ndarray | None = None) -> np.ndarray:
    """``rows @ w`` (B·T, ·), or ``rows[chosen] @ w`` (N, ·); for the first block's input,
    by its parts.

    The first block's input is ``embed[tokens] + pos``, so its projection is
    ``(embed @ w)[tokens] + pos @ w``: two products of V and T rows, one look-up and one
    addition, instead of a product of all B·T rows.
    """
    if inputs is None:
        return _by_sequence(rows, w, T) if chosen is None else rows[chosen] @ w
    if chosen is not None:
        out = (inputs.embed @ w)[inputs.tokens[chosen]]  # (N, ·)
        if inputs.pos is not None:
            out += (inputs.pos @ w)[chosen % T]
        return out
    out = (inputs.embed @ w)[inputs.tokens]  # (B·T, ·)
    if inputs.pos is not None:
        out.reshape(-1, T, w.shape[1])[...] += inputs.pos @ w  # (T, ·) over B
    return out


class _Trace(NamedTuple):
    """What the forward pass keeps for the backward pass."""

    x: np.ndarray  # (N, D) the residual stream after the last block, rows the loss reads
    blocks: list  # each block's _Block
    keep: dict  # layer → (H,) keep-vector, for the layers with heads switched off
    steps: "_Steps"  # what every block shares: score offset, RoPE tables
    inputs: "_Inputs | None"  # the first block's input by its parts, if the model made it


class _Steps(NamedTuple):
    """What every block of one pass shares, made once per pass."""

    offset: np.ndarray | None  # (H or 1, T, T): ALiBi bias and −inf on hidden keys
    rope: tuple | None  # RoPE's (cos, sin) tables forward and back, each (T, Dh)


class _Block(NamedTuple):
    """One block's forward pass, kept for its backward pass.

    Head arrays are 5-dimensional, (B, Hkv, G, T, Dh): the G = H / Hkv query heads
    that share a K/V head sit on their own axis, and K and V have G = 1 there, which
    the matrix products broadcast. Arrays called ``…_rows`` are (B·T, ·): every token of
    every batch row, one row each, as the projections take them.
    """

    rows: np.ndarray  # (B·T, D) the block's input
    q: np.ndarray | None  # (B, Hkv, G, T, Dh) after RoPE, already divided by √Dh
    k: np.ndarray | None  # (B, Hkv, 1, T, Dh) after RoPE
    v_t: np.ndarray | None  # (B, Hkv, 1, Dh, T) V transposed, contiguous
    attn: np.ndarray  # (B, Hkv, G, T, T) the attention weights
    concat: np.ndarray | None  # (B·T, D) the heads that are on, side by side
    rows_chosen: np.ndarray | None = None  # (N, D) the last block's rows[chosen]
    concat_chosen: np.ndarray | None = None  # (N, D) and concat[chosen]


def _heads(rows: np.ndarray, B: int, T: int, n_kv: int, group: int) -> np.ndarray:
    """The head view (B, Hkv, G, T, Dh) of projected rows (B·T, Hkv·G·Dh): no copy.

    Column block ``j·G + g`` of ``rows`` is query head g of K/V head j, as in
    :func:`attnlab.attention.split_heads`. Each (T, Dh) matrix of the view has rows
    ``Hkv·G·Dh`` numbers apart and unit steps along Dh, a layout BLAS reads directly,
    so the products below neither copy their inputs nor their outputs (``out=``).
    """
    return rows.reshape(B, T, n_kv, group, -1).transpose(0, 2, 3, 1, 4)


_ONES: dict = {}


def _ones(n: int, dtype) -> np.ndarray:
    """A column of n ones: ``a @ _ones(n)`` sums the last axis of a as one matrix product,
    much faster than ``a.sum(axis=-1)`` on many short rows."""
    key = (n, np.dtype(dtype).str)
    if key not in _ONES:
        ones = np.ones((n, 1), dtype=dtype)
        ones.setflags(write=False)
        _ONES[key] = ones
    return _ONES[key]


@functools.lru_cache(maxsize=64)
def _score_offset(n_heads: int, T: int, causal: bool, alibi: bool, dtype: str):
    """What the scores get added before the softmax, (H or 1, T, T), or None.

    The ALiBi bias where a key is visible and −inf where the causal mask hides it:
    one addition does both (``s + b`` and ``s + (−inf) = −inf``, exactly as adding the
    bias and then hiding the keys).
    """
    if not (causal or alibi):
        return None
    offset = (alibi_bias(n_heads, T, dtype=dtype) if alibi
              else np.zeros((1, T, T), dtype=dtype))
    if causal:
        offset = np.where(causal_mask(T), offset, -np.inf).astype(dtype)
    offset.setflags(write=False)
    return offset


@functools.lru_cache(maxsize=64)
def _rope_tables(rope: RoPE, T: int, d_head: int, dtype: str):
    """RoPE as tables for :func:`_rotate`: ``(cos, sin)`` forward and back, and ``swap``.

    ``forward`` turns by the angles of positions 0 … T−1 and ``back`` by the opposite
    angles (a rotation's transpose); each table is (T, 1, Dh), the same for every head.
    The cos and sin are those of :meth:`attnlab.positional.RoPE.apply`, so the rotation
    is the same to the last bit. ``swap`` (Dh, Dh) is the permutation matrix that
    exchanges the two members of every pair.
    """
    if rope.convention == "interleaved":  # pairs (2i, 2i+1)
        first, second = slice(0, None, 2), slice(1, None, 2)
    else:  # pairs (i, i + Dh/2)
        first, second = slice(0, d_head // 2), slice(d_head // 2, None)
    tables = []
    for positions in (np.arange(T), -np.arange(T)):
        angles = rope.angles(positions, d_head)  # (T, Dh/2), float64
        cos = np.cos(angles).astype(dtype)
        sin = np.sin(angles).astype(dtype)
        cos2 = np.empty((T, 1, d_head), dtype=dtype)
        sin2 = np.empty((T, 1, d_head), dtype=dtype)
        cos2[:, 0, first], cos2[:, 0, second] = cos, cos
        sin2[:, 0, first], sin2[:, 0, second] = -sin, sin
        tables.append((cos2, sin2))
    swap = np.zeros((d_head, d_head), dtype=dtype)
    index = np.arange(d_head)
    swap[index[first], index[second]] = 1.0
    swap[index[second], index[first]] = 1.0
    for array in (*tables[0], *tables[1], swap):
        array.setflags(write=False)
    return tuple(tables), swap, rope.attention_factor


def _rotate(rows: np.ndarray, tables, which: int, T: int, d_head: int) -> np.ndarray:
    """RoPE on projected rows (B·T, n·Dh) of n heads: a new (B·T, n·Dh) array.

    Each pair (x1, x2) turns into (x1·cos − x2·sin, x1·sin + x2·cos):
    ``x·[cos, cos] + swap(x)·[−sin, sin]``, where swap exchanges the two members of every
    pair, as one product with a permutation matrix (each output picks one input exactly).
    The same products and sums as :meth:`attnlab.positional.RoPE.apply` (a + (−b) is
    a − b exactly), in a few passes over contiguous arrays instead of strided halves.
    ``which`` is 0 for the angles of the positions, 1 for the opposite angles.
    """
    (cos2, sin2), swap, factor = tables[0][which], tables[1], tables[2]
    x = rows.reshape(-1, T, rows.shape[1] // d_head, d_head)  # (B, T, n, Dh)
    out = x * cos2  # (B, T, n, Dh)
    swapped = (rows.reshape(-1, d_head) @ swap).reshape(x.shape)  # pairs exchanged
    swapped *= sin2
    out += swapped
    if factor != 1.0:
        out *= np.asarray(factor, dtype=out.dtype)
    return out.reshape(rows.shape)


def _norm_bound(q: np.ndarray, k_t: np.ndarray) -> np.ndarray:
    """An upper bound of every row's largest score, (B, Hkv, G, T): |q_i| · max_j |k_j|
    (Cauchy–Schwarz; the offsets add nothing positive) for q (B, Hkv, G, T, Dh) and
    k_t (B, Hkv, 1, Dh, T)."""
    ones = _ones(q.shape[-1], q.dtype)  # (Dh, 1): sums over Dh as products
    q_norms = np.sqrt((q * q) @ ones)[..., 0]  # (B, Hkv, G, T)
    k_norms = np.sqrt(ones.T @ (k_t * k_t))[..., 0, :]  # (B, Hkv, 1, T)
    return q_norms * k_norms.max(axis=-1, keepdims=True)  # (B, Hkv, G, T)


# per dtype: R, √tiny and log √tiny of _softmax_rows (np.finfo is slow to ask every call)
_SOFTMAX_LIMITS = {dtype: (reach, np.sqrt(np.finfo(dtype).tiny),
                           float(np.log(np.sqrt(np.finfo(dtype).tiny))))
                   for dtype, reach in ((np.float32, 64.0), (np.float64, 600.0))}


def _softmax_rows(scores: np.ndarray, offset, recompute, row_bound=None) -> np.ndarray:
    """The softmax over keys of ``scores`` (..., T, T), in place; ``offset`` added first.

    Subtracting any constant c_i from row i leaves its softmax unchanged. The usual c_i
    is the row's maximum, but numpy takes the maxima of many short rows slowly, and
    subtracting one number per row is itself a slow pass (one short loop per row).

    Usually every row gets the same c = M − R, where M is the largest of all the scores
    (one fast reduction): no entry then exceeds exp(R), so nothing overflows (R = 64 in
    float32, 600 in float64), and c folds into the small ``offset`` table, so the shift
    costs no pass of its own. A row's largest entry is at least its score against its
    own key, s_ii (every query sees its own key); if some s_ii lies more than R + L
    below M, its row could underflow (exp(−L) = √tiny: L ≈ 43 in float32), and the rows
    are shifted one by one instead, by c_i = max(s_ii, M_b − R) with M_b the largest
    score of the row's T×T block (one head of one sequence), as sharp heads need.
    A row's sum is at least exp(row max − c_i); the rows whose sum still lies below
    √tiny are made again (from ``recompute()``, all the scores) and shifted by their
    own maxima. The rows are summed by a matrix product with ones.
    """
    T = scores.shape[-1]
    reach, tiny, log_tiny = _SOFTMAX_LIMITS[scores.dtype.type]  # R, √tiny, −L
    largest = scores.max()  # M, over every score, hidden ones too
    own = scores.diagonal(axis1=-2, axis2=-1)  # (..., T) s_ii, a view
    if own.min() >= largest - reach + log_tiny:  # one shift serves every row
        shift = largest - scores.dtype.type(reach)  # c
        if offset is not None:  # ALiBi bias and −inf on hidden keys, and −c, in one pass
            scores += offset - shift  # offset is (H or 1, T, T): a small table
        else:
            scores -= shift
    else:  # scores far apart (sharp heads): a shift per row
        if offset is not None:
            scores += offset
        bound = scores.reshape(*scores.shape[:-2], T * T).max(axis=-1)[..., None]  # M_b
        if row_bound is not None:  # a bound per row, often far below its block's M_b
            bound = np.minimum(bound, row_bound())  # (..., T)
        shift = own.copy()  # (..., T): s_ii (the offset adds 0 there)
        np.maximum(shift, bound - reach, out=shift)
        scores -= shift[..., None]
    np.exp(scores, out=scores)
    sums = scores @ _ones(T, scores.dtype)  # (..., T, 1)
    bad = ~(sums[..., 0] >= tiny)  # (..., T) rows that underflowed (or are not finite)
    if bad.any():  # rare: those rows again, shifted by their own maxima
        rows = recompute()[bad]  # (n, T); only the few bad rows are worked on
        if offset is not None:
            rows += np.broadcast_to(offset, scores.shape)[bad]
        rows -= rows.max(axis=-1, keepdims=True)
        np.exp(rows, out=rows)
        scores[bad] = rows
        sums[bad] = rows.sum(axis=-1, keepdims=True)
    scores *= 1.0 / sums  # one division per row, not per score
    return scores


def _block_forward(x, weights: MHAWeights, config: ModelConfig, steps: _Steps, keep,
                   inputs: _Inputs | None = None,
                   chosen: np.ndarray | None = None) -> tuple[np.ndarray, _Block]:
    """One block ``y = x + MHA(x)`` on x (B, T, D): y and what the backward pass needs.

    The arithmetic of :func:`attnlab.attention.attention_pass` (the forward pass of
    :func:`attnlab.multi_head_attention`), arranged for speed: the heads are views of the
    projections (:func:`_heads`), each product writes straight into the array the next
    step reads, and the softmax is :func:`_softmax_rows`. ``inputs``: x is the model's
    own ``embed[tokens] + pos`` (:func:`_project`). ``chosen`` (N,) for the last block:
    only those rows of y reach the loss, so only their queries are made (the others
    stay 0) and only their rows of y are returned, (N, D).
    """
    w_q, w_k, w_v, w_o = weights
    B, T, D = x.shape
    H, Hkv, Dh = config.heads
    G = H // Hkv
    # q = x (W_q / √Dh): the scaling on D·D numbers instead of a pass over the B·T·D
    # queries (or the H·T² scores); with Dh a power of 4 it is exact, bit for bit
    w_q = w_q * (1.0 / math.sqrt(Dh))
    rows = x.reshape(B * T, D)  # (B·T, D)
    rows_chosen = concat_chosen = None  # (N, D) each, for the last block
    if chosen is None:
        q = _project(rows, w_q, inputs, T)  # (B·T, D)
    else:
        q = np.zeros((B * T, D), dtype=x.dtype)  # (B·T, D): the rows no loss reads stay 0
        rows_chosen = rows[chosen]  # gathered once, for y and for dW_q
        q[chosen] = (_project(rows, w_q, inputs, T, chosen) if inputs is not None
                     else rows_chosen @ w_q)
    k = _project(rows, w_k, inputs, T)  # (B·T, Hkv·Dh)
    if steps.rope is not None:
        q = _rotate(q, steps.rope, 0, T, Dh)
        k = _rotate(k, steps.rope, 0, T, Dh)
    q = _heads(q, B, T, Hkv, G)  # (B, Hkv, G, T, Dh), a view
    k = _heads(k, B, T, Hkv, 1)  # (B, Hkv, 1, T, Dh)
    v = _heads(_project(rows, w_v, inputs, T), B, T, Hkv, 1)  # (B, Hkv, 1, T, Dh)
    if G > 1:
        q = np.ascontiguousarray(q)  # the backward pass stacks each group's queries
    k_t = np.ascontiguousarray(k.swapaxes(-1, -2))  # (B, Hkv, 1, Dh, T)
    scores = q @ k_t  # (B, Hkv, G, T, T), already divided by √Dh
    attn = _softmax_rows(scores, steps.offset, lambda: q @ k_t,
                         lambda: _norm_bound(q, k_t))
    concat = np.empty((B * T, D), dtype=x.dtype)  # (B·T, D)
    np.matmul(attn, v, out=_heads(concat, B, T, Hkv, G))  # every head's output, in place
    if keep is not None:
        concat.reshape(B * T, H, Dh)[...] *= keep[:, None]  # off: adds nothing
    if chosen is not None:  # the last block: only the rows the loss reads, (N, D)
        concat_chosen = concat[chosen]  # gathered once, for y and for dW_o
        y = concat_chosen @ w_o
        y += rows_chosen
    else:
        y = _by_sequence(concat, w_o, T).reshape(B, T, D)  # (B, T, D)
        y += x
    v_t = np.ascontiguousarray(v.swapaxes(-1, -2))  # (B, Hkv, 1, Dh, T)
    return y, _Block(rows, q, k, v_t, attn, concat, rows_chosen, concat_chosen)


def _forward(params, tokens, config, ablate, chosen):
    """The rows ``chosen`` (N,) of the residual stream after the last block (N, D) and
    the trace of the forward pass, for training; arguments already checked."""
    keep = _check_ablate(ablate, config)
    x, inputs = _embed(params, tokens, config)  # (B, T, D)
    return _layers(params, x, config, keep, inputs, chosen)


def _layers(params, x, config, keep, inputs: _Inputs | None = None,
            chosen: np.ndarray | None = None):
    """The attention layers on the residual stream x (B, T, D), before the unembedding;
    ``inputs`` if x is the model's own ``embed[tokens] + pos``; the last block's rows
    ``chosen`` (N,) only, if given."""
    T = x.shape[1]
    rope = config.rope
    offset = _score_offset(config.n_heads, T, bool(config.causal),
                           config.positional == "alibi", config.dtype)
    if offset is not None and len(offset) > 1:
        offset = offset.reshape(config.n_kv_heads, -1, T, T)  # (Hkv, G, T, T) as the scores
    steps = _Steps(offset, None if rope is None else _rope_tables(rope, T, config.d_head,
                                                                   config.dtype))
    blocks = []
    for layer in range(config.n_layers):
        last = layer == config.n_layers - 1
        x, block = _block_forward(x, layer_weights(params, layer), config, steps,
                                  keep.get(layer), inputs if layer == 0 else None,
                                  chosen if last else None)
        blocks.append(block)
    return x, _Trace(x, blocks, keep, steps, inputs)


def _reference_layers(params, x, config, keep) -> tuple[np.ndarray, tuple]:
    """Logits (B, T, V) and every layer's attention (B, H, T, T) on the residual stream
    x (B, T, D), computed as :func:`attnlab.multi_head_attention` computes attention.

    :func:`forward`, :func:`run_layers` and evaluation take this path, so their numbers
    are those of the attention a chapter builds from :mod:`attnlab.attention`, to the
    last bit. Training takes the faster :func:`_layers`, which agrees to float rounding.
    """
    T = x.shape[1]
    mask = causal_mask(T) if config.causal else None  # (T, T)
    bias = alibi_bias(config.n_heads, T, dtype=config.dtype) if (
        config.positional == "alibi") else None  # (H, T, T)
    attns = []
    for layer in range(config.n_layers):
        result = attention_pass(x, layer_weights(params, layer), config.heads, mask=mask,
                                bias=bias, rope=config.rope, keep=keep.get(layer))
        attns.append(result.attn)
        x = x + result.out  # (B, T, D)
    return x @ params["unembed"], tuple(attns)


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
    params = _check_params(params, config)
    tokens = _check_tokens(tokens, config)
    keep = _check_ablate(ablate, config)
    x, _ = _embed(params, tokens, config)  # (B, T, D)
    return Forward(*_reference_layers(params, x, config, keep))


@_one_blas_thread
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
    return _reference_layers(params, x, config, {})[0]


# --- loss and backward --------------------------------------------------------------------

def _cross_entropy(logits, targets, backward: bool = True):
    """Mean cross-entropy of logits (N, V) for targets (N,), its gradient (None if not
    ``backward``) and the accuracy.

    Only the N positions the loss mask selects are given: the others get no gradient.
    """
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (N, V)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (N, V)
    n = len(targets)
    rows = np.arange(n)
    loss = -float(log_probs[rows, targets].sum()) / n
    # the target is the argmax iff its shifted logit is 0 and no earlier one is: with no
    # ties (exactly one 0 per row) that is one look-up, not an argmax over short rows
    top = shifted == 0  # (N, V)
    if np.count_nonzero(top) == n:
        accuracy = float(top[rows, targets].mean())
    else:  # a tie somewhere: argmax takes the first
        accuracy = float((logits.argmax(axis=-1) == targets).mean())
    if not backward:
        return loss, None, accuracy
    d_logits = np.exp(log_probs)  # softmax (N, V); dL/dlogits = softmax − one-hot
    d_logits[rows, targets] -= 1.0
    d_logits *= np.float64(1.0 / n)  # each selected position weighs 1/N
    return loss, d_logits, accuracy


def _block_backward(d_y, block: _Block, weights: MHAWeights, keys, config, steps: _Steps,
                    keep, grads, inputs: _Inputs | None = None,
                    chosen: np.ndarray | None = None):
    """Gradients of one block ``y = x + MHA(x)``: fills ``grads`` and returns dL/dx.

    With ``inputs`` (x = embed[tokens] + pos, see :func:`_project`) the result is
    ``(dL/dembed, dL/dpos)`` instead, (V, D) and (T, D) or None: every product with x
    goes through its parts. With ``chosen`` (the last block), ``d_y`` is (N, D), the rows
    the loss reads; the others are 0, and so are their query gradients.

    ``d_y`` and the result are (B·T, D), one row per token. The forward pass
    (:func:`_block_forward`) and the backward pass in reverse order (``d·`` is the
    gradient of the loss with respect to ·). The G query heads that share a K/V head
    are stacked along time, (Hkv, G·T), where their gradients meet, so the products
    below add up the gradients of a shared K/V head by themselves::

        q, k, v = x W_q / √Dh, x W_k, x W_v  →  dW = xᵀ d(q|k|v),  dx = dy + Σ d(q|k|v) Wᵀ
        q, k = RoPE(q), RoPE(k)               →  d(q|k) rotated back by the opposite angles
        S = q kᵀ (+ bias, mask)               →  dq = dS k,  dk = dSᵀ q
        A = softmax(S)                        →  dS = A ⊙ (dA − Σ_j A ⊙ dA)
        O = A v                               →  dA = dO vᵀ,  dv = Aᵀ dO
        y = x + concat(O) W_o                 →  dW_o = concatᵀ dy,  dO = dy W_oᵀ
    """
    w_q, w_k, w_v, w_o = weights
    key_q, key_k, key_v, key_o = keys
    H, Hkv, Dh = config.heads
    G = H // Hkv
    B, _, _, T, _ = block.attn.shape
    scale = 1.0 / math.sqrt(Dh)
    w_q = w_q * scale  # the forward pass's W_q / √Dh: d_q below is the gradient of q = x w_q
    rows, attn, concat = block.rows, block.attn, block.concat

    # y = x + concat(O) W_o
    if chosen is None:
        grads[key_o] = concat.T @ d_y  # (D, D)
        d_concat = _by_sequence(d_y, w_o.T, T)  # (B·T, D)
    else:  # only the rows the loss reads
        grads[key_o] = block.concat_chosen.T @ d_y  # (D, D)
        d_concat = np.zeros_like(concat)  # (B·T, D)
        d_concat[chosen] = d_y @ w_o.T
        if inputs is not None:  # a one-layer model: the full rows, for the parts below
            d_y, d_y_chosen = np.zeros_like(concat), d_y
            d_y[chosen] = d_y_chosen
    if keep is not None:
        d_concat.reshape(B * T, H, Dh)[...] *= keep[:, None]  # an off head passes nothing
    d_out = _heads(d_concat, B, T, Hkv, G)  # dO (B, Hkv, G, T, Dh), a view
    # O = A v
    d_attn = d_out @ block.v_t  # dA (B, Hkv, G, T, T)
    # A = softmax(S), row by row: dS = A ⊙ (dA − Σ_j A·dA); hidden keys have A = 0.
    # Σ_j A_ij·dA_ij = Σ_j A_ij (dO_i·v_j) = dO_i·O_i: one product per query over Dh,
    # not over all T keys (the trick FlashAttention uses). Summed over Dh by a product
    # with ones, for every (token, head) at once: (B·T·H,) = (B, T, Hkv, G).
    row_dot = (d_concat * concat).reshape(-1, Dh) @ _ones(Dh, d_y.dtype)
    d_attn -= row_dot.reshape(B, T, Hkv, G, 1).transpose(0, 2, 3, 1, 4)
    d_attn *= attn  # dS (B, Hkv, G, T, T)
    # S = q kᵀ, with q already divided by √Dh
    d_q = np.empty_like(d_concat)  # (B·T, D)
    d_k = np.empty((B * T, Hkv * Dh), dtype=d_y.dtype)  # (B·T, Hkv·Dh)
    d_v = np.empty_like(d_k)
    np.matmul(d_attn, block.k, out=_heads(d_q, B, T, Hkv, G))
    if G == 1:  # one query head per K/V head: (B, H, T, ·) throughout
        d_s_t, queries = d_attn[:, :, 0].swapaxes(-1, -2), block.q[:, :, 0]
        attn_t, d_out = attn[:, :, 0].swapaxes(-1, -2), d_out[:, :, 0]
    else:  # the group's queries stacked along time: (B, Hkv, G·T, ·)
        d_s_t = d_attn.reshape(B, Hkv, G * T, T).swapaxes(-1, -2)
        queries = block.q.reshape(B, Hkv, G * T, Dh)
        attn_t = attn.reshape(B, Hkv, G * T, T).swapaxes(-1, -2)
        d_out = np.ascontiguousarray(d_out).reshape(B, Hkv, G * T, Dh)
    # dk: the group's gradients add up
    np.matmul(d_s_t, queries, out=_heads(d_k, B, T, Hkv, 1)[:, :, 0])
    np.matmul(attn_t, d_out, out=_heads(d_v, B, T, Hkv, 1)[:, :, 0])  # dv, likewise
    if steps.rope is not None:
        # a rotation's transpose is the rotation by the opposite angle
        d_q = _rotate(d_q, steps.rope, 1, T, Dh)
        d_k = _rotate(d_k, steps.rope, 1, T, Dh)
    # q, k, v = x W_q, x W_k, x W_v, and the residual path x → y
    projections = ((key_q, w_q, d_q), (key_k, w_k, d_k), (key_v, w_v, d_v))
    if inputs is not None:
        d_x = _first_block_backward(d_y, projections, inputs, config.vocab_size, grads)
        grads[key_q] *= scale  # dW_q = dw_q / √Dh, on D·D numbers
        return d_x
    if chosen is not None:  # dq is 0 outside the rows the loss reads
        d_q_chosen = d_q[chosen]  # (N, D)
        grads[key_q] = block.rows_chosen.T @ d_q_chosen  # (D, D)
        grads[key_q] *= scale
        d_rows = _by_sequence(d_k, w_k.T, T)  # (B·T, D)
        d_rows += _by_sequence(d_v, w_v.T, T)
        d_y += d_q_chosen @ w_q.T  # d_y is this function's own (N, D) array
        d_rows[chosen] += d_y  # and the residual path passes dy
        grads[key_k], grads[key_v] = rows.T @ d_k, rows.T @ d_v
        return d_rows
    d_rows = d_y.copy()  # (B·T, D): the residual path passes dy through
    for key, w, d_proj in projections:
        grads[key] = rows.T @ d_proj  # (D, ·)
        d_rows += _by_sequence(d_proj, w.T, T)  # (B·T, D)
    grads[key_q] *= scale
    return d_rows


def _first_block_backward(d_y, projections, inputs: _Inputs, vocab_size: int, grads):
    """The last step of :func:`_block_backward` when x = embed[tokens] + pos.

    x W = one_hot(tokens) embed W + pos W (over the batch), so with G = one_hotᵀ d(q|k|v)
    (V, ·), the gradients summed token by token, and P = Σ_batch d(q|k|v) (T, ·)::

        dW = embedᵀ G + posᵀ P,   dembed = one_hotᵀ dy + Σ G Wᵀ,   dpos = Σ_batch dy + Σ P Wᵀ

    Products of V and T rows instead of B·T. A token used twice collects both gradients.
    """
    T = len(inputs.pos) if inputs.pos is not None else None
    one_hot = np.eye(vocab_size, dtype=d_y.dtype)[inputs.tokens].T  # (V, B·T)
    d_embed = one_hot @ d_y  # (V, D)
    d_pos = None if T is None else d_y.reshape(-1, T, d_y.shape[1]).sum(axis=0)  # (T, D)
    for key, w, d_proj in projections:
        per_token = one_hot @ d_proj  # (V, ·)
        grads[key] = inputs.embed.T @ per_token  # (D, ·)
        d_embed += per_token @ w.T
        if T is not None:
            per_position = d_proj.reshape(-1, T, d_proj.shape[1]).sum(axis=0)  # (T, ·)
            grads[key] += inputs.pos.T @ per_position
            d_pos += per_position @ w.T
    return d_embed, d_pos


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
def loss_grads_accuracy(params, batch, config, *, ablate=None, backward: bool = True):
    """Loss, gradients (None if ``backward`` is False) and accuracy on one batch.

    Not taught: what :func:`loss_and_grads` and :mod:`attnlab.training` share.
    """
    config = check_config(config)
    params = _check_params(params, config)
    tokens, targets, loss_mask = _check_batch(batch, config)
    if not backward:  # evaluation: the path of forward, to the last bit
        keep = _check_ablate(ablate, config)
        logits, _ = _reference_layers(params, _embed(params, tokens, config)[0], config, keep)
        return _cross_entropy(logits[loss_mask], targets[loss_mask], backward=False)

    # only the positions the mask selects reach the loss: the last block's output, the
    # unembedding, the softmax and their gradients are computed there alone
    chosen = np.flatnonzero(loss_mask)  # (N,) indices into the B·T rows
    x_chosen, trace = _forward(params, tokens, config, ablate, chosen)  # (N, D)
    T = tokens.shape[1]
    logits = x_chosen @ params["unembed"]  # (N, V)
    loss, d_logits, accuracy = _cross_entropy(logits, targets.reshape(-1)[chosen])

    grads = {"unembed": x_chosen.T @ d_logits}  # (D, V)
    d_x = d_logits @ params["unembed"].T  # (N, D): the other positions pass 0
    for layer in reversed(range(config.n_layers)):
        last = layer == config.n_layers - 1
        d_x = _block_backward(d_x, trace.blocks[layer], layer_weights(params, layer),
                              layer_keys(layer), config, trace.steps, trace.keep.get(layer),
                              grads, trace.inputs if layer == 0 else None,
                              chosen if last else None)
    # the first block took x = embed[tokens] + pos and gave the gradients of both parts
    grads["embed"], d_pos = d_x  # (V, D), (T, D) or None
    if config.positional == "learned":
        grads["pos"] = np.zeros_like(params["pos"])
        grads["pos"][:T] = d_pos  # rows past T get no gradient
    return loss, {name: grads[name] for name in params if name in grads}, accuracy
