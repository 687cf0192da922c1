"""Argument checks shared by the numerics modules.

Each check raises ``ValueError`` with a Japanese message that names the argument and
its value, so a learner sees what to change rather than a numpy traceback.
"""

from collections.abc import Iterable

import numpy as np


def as_float_array(x, name: str) -> np.ndarray:
    """Return ``x`` as a floating array; integers and bools become float64."""
    x = np.asarray(x)
    if x.dtype == object or not (
        np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.bool_)
    ):
        raise ValueError(f"{name} は数値の配列である必要があります: dtype={x.dtype}")
    if np.issubdtype(x.dtype, np.complexfloating):
        raise ValueError(f"{name} は実数の配列である必要があります: dtype={x.dtype}")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    return x


def positive_int(value, name: str) -> int:
    """``value`` as a Python int, or a ValueError if it is not an integer ≥ 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} は 1 以上の整数である必要があります: {name}={value!r}")
    return int(value)


def positive_float(value, name: str) -> float:
    """``value`` as a Python float, or a ValueError if it is not a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} は正の数である必要があります: {name}={value!r}")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} は正の有限な数である必要があります: {name}={value!r}")
    return float(value)


def even_int(value, name: str) -> int:
    """``value`` as a Python int, or a ValueError if it is not an even integer ≥ 2.

    Dimensions that are used in pairs (sinusoids, RoPE) must be even.
    """
    value = positive_int(value, name)
    if value % 2:
        raise ValueError(
            f"{name}={value} は偶数である必要があります: 次元を 2 つずつ組にして使うためです"
        )
    return value


def rope_head(d_head: int, context: str) -> int:
    """``d_head`` unchanged, or a ValueError: RoPE rotates the dimensions of a head in pairs.

    ``context`` says where ``d_head`` came from, e.g. ``"d_model=12, n_heads=4"``.
    """
    if d_head % 2:
        raise ValueError(
            "RoPE は次元を 2 つずつ回転させるので d_head は偶数である必要があります: "
            f"d_head={d_head} ({context})"
        )
    return d_head


def at_least_2d(x: np.ndarray, name: str, axes: str) -> np.ndarray:
    """``x`` unchanged, or a ValueError if it has fewer than 2 axes.

    ``axes`` names the expected shape, e.g. ``"(..., T, D)"``.
    """
    if x.ndim < 2:
        raise ValueError(
            f"{name} は {axes} の形の 2 次元以上の配列である必要があります: "
            f"{name}.shape={x.shape}"
        )
    return x


def choice(value, name: str, allowed: Iterable):
    """``value`` if it is one of ``allowed`` (a tuple, or a dict's keys), else a ValueError
    naming the argument and listing the allowed values."""
    if value not in allowed:
        options = " / ".join(repr(a) for a in allowed)
        raise ValueError(f"{name}={value!r} は使えません: {options} のどれかを指定してください")
    return value


def generator(rng) -> np.random.Generator:
    """``rng`` if it is a numpy Generator, else a ValueError saying how to make one."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng は np.random.default_rng(…) で作った Generator である必要があります: "
            f"rng={rng!r}"
        )
    return rng


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True if an array of ``shape`` broadcasts to ``target`` without growing it."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def finite(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` unchanged, or a ValueError if it holds NaN or ±inf."""
    # min and max carry any NaN or ±inf through, without a boolean array as big as x
    if x.size and not (np.isfinite(np.min(x)) and np.isfinite(np.max(x))):
        raise ValueError(f"{name} に NaN か無限大が含まれています")
    return x


def int_positions(positions, name: str = "positions") -> np.ndarray:
    """Integer positions as an int64 array; floats are accepted only if whole."""
    p = np.asarray(positions)
    if p.dtype == np.bool_ or not np.issubdtype(p.dtype, np.number):
        raise ValueError(f"{name} は整数の配列である必要があります: dtype={p.dtype}")
    if not np.issubdtype(p.dtype, np.integer):
        if not np.all(np.isfinite(p)) or not np.all(p == np.round(p)):
            raise ValueError(f"{name} は整数である必要があります: {name}={_preview(p)}")
        p = p.astype(np.int64)
    return p


def token_ids(tokens, name: str = "tokens") -> np.ndarray:
    """Token ids as an integer (B, T) array, or a ValueError naming ``name``."""
    tokens = np.asarray(tokens)
    if tokens.dtype == np.bool_ or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            f"{name} はトークン ID の整数配列である必要があります: dtype={tokens.dtype}"
        )
    if tokens.ndim != 2:
        raise ValueError(
            f"{name} は (B, T) の 2 次元配列である必要があります: {name}.shape={tokens.shape}"
        )
    return tokens



# --- the inputs of the toy model (attnlab.model, attnlab.training) -------------------------

def model_params(params, shapes: dict) -> dict:
    """``params`` unchanged if it is a dict with every name of ``shapes`` in its shape
    (:func:`attnlab.model.param_shapes`)."""
    if not isinstance(params, dict):
        raise ValueError(
            "params はパラメータの dict である必要があります: "
            f"type={type(params).__name__}"
        )
    for name, shape in shapes.items():
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


def model_tokens(tokens, config) -> np.ndarray:
    """``tokens`` as a (B, T) int array of ids the model of ``config`` (a
    :class:`attnlab.model.ModelConfig`) can read."""
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


def model_batch(batch, config) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``batch`` as ``(tokens, targets, loss_mask)`` whose targets and loss mask fit its
    tokens and the model of ``config``."""
    if not isinstance(batch, tuple) or len(batch) != 3:
        raise ValueError(
            "batch は Batch(tokens, targets, loss_mask) である必要があります"
            "（attnlab.tasks のタスクが返すもの）: "
            f"type={type(batch).__name__}"
        )
    tokens, targets, loss_mask = batch
    tokens = model_tokens(tokens, config)
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
    return tokens, targets, loss_mask


def _preview(a: np.ndarray, n: int = 6) -> str:
    """A short text of the first values of ``a`` for an error message."""
    flat = np.ravel(a)
    head = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in flat[:n].tolist())
    return f"[{head}{', …' if flat.size > n else ''}]"
