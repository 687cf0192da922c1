"""Chapter 08's self-checks: ``my_rope_half(x, positions, base=10000.0) -> rotated``
(RoPE in the split-halves layout of ``rotate_half``, as Hugging Face's LLaMA and GPT-NeoX
write it) and ``my_to_half_layout(params, n_heads, n_kv_heads) -> params`` (a checkpoint
trained with adjacent pairs, converted to run with ``rotate_half``).

The diagnosis is computed, not guessed: the check builds what each typical mistake would
return (adjacent pairs, as the chapter's first cell rotates them; the angles laid out
for adjacent pairs with ``np.repeat`` and used with ``rotate_half``, which turns the two
members of a pair by different angles, so it is not a rotation at all (lengths change,
scores depend on absolute position), a bug of its own and worse than the chapter's
layout mix-up of §5, where each layout is still a correct RoPE; the rotation's sign
reversed; cos and sin swapped; θ_i = base^(−i/Dh), base^(−4i/Dh), base^(−2(i+1)/Dh)
(pairs counted from 1) or the paper's 1-based base^(−2(i−1)/Dh) with i from 0, instead
of base^(−2i/Dh); the row index instead of the given positions; the base ignored; for
the conversion, the inverse permutation, rows instead of columns, one permutation over
all heads, W_K or W_V handled like W_Q, only layer 0 converted, W_K split into n_heads
heads under GQA) and says which one the answer matches. Each message first says what the
answer did, then where to look; it does not hand over the code.

A check refuses the package's own function when the chapter's setup cell imports it
(:func:`attnlab.checks.core.call_refusing`): the exercise asks the student to write it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import product

import numpy as np

from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    checker,
    raised_message,
    returned_array,
)
from attnlab.experiments.rope import (
    half_layout_logits,
    half_layout_permutation,
    permute_head_columns,
)
from attnlab.model import ModelConfig, forward, init_params, layer_keys
from attnlab.positional import RoPE, apply_rope, rope_angles

#: The package's functions the chapter imports that an answer must not use.
_ROPE_REFERENCES = (apply_rope, RoPE, rope_angles)

_DIAGNOSES = {
    ("layout", "adjacent"): (
        "回している次元の組が違います。隣り合う次元 (2i, 2i+1) を 1 つのペアにしています"
        "（第 1 節のセルの並べ方）。この問題のペアは前半と後半、次元 i と i + Dh/2 です。"
    ),
    ("layout", "mixed"): (
        "ペアの 2 つの次元が違う角度で回っています。角度を隣接ペアの順（θ_0, θ_0, θ_1, "
        "θ_1, …、np.repeat の並べ方）にしたまま前後半の回転に使うと、次元 i と i + Dh/2 に"
        "別の θ が掛かります。これは回転ではないので、ベクトルの長さが変わり、スコアも "
        "m − n だけでは決まりません（第 5 節の「並べ方の混同」とは別の、もっと悪いバグです）。"
        "ペア (i, i + Dh/2) の 2 つの次元が同じ角度 positions[t]·θ_i で回っているかを"
        "確かめてください。"
    ),
    ("sign", -1): (
        "回転の向きが逆です。どのペアも、角度 −positions[t]·θ_i だけ回した値になっています。"
        "sin の項の符号か、rotate_half で符号を付ける側を確かめてください。"
    ),
    ("trig", "swapped"): (
        "位置 0（角度 0）の行でも x が変わっています。角度 0 では cos = 1、sin = 0 なので"
        "回転は何もしないはずです。cos と sin が入れ替わっていないかを確かめてください。"
    ),
    ("exponent", "i"): (
        "θ_i が正しい値より大きく、ペアが速く回りすぎています。いまの θ_i は "
        "base^(−i/Dh) で、指数の 2 が抜けています。"
    ),
    ("exponent", "4i"): (
        "θ_i が正しい値より小さく、ペアがゆっくり回りすぎています。いまの θ_i は "
        "base^(−4i/Dh)、つまり指数を Dh ではなく Dh/2 で割っています。"
    ),
    ("exponent", "one-based"): (
        "ペア 0 が 1 位置で 1 ラジアン回っていません（θ の最初が 1 ではなく base^(−2/Dh)）。"
        "この本の式 base^(−2i/Dh) に、1 から数えた番号 i = 1, 2, … を入れています。"
        "第 1 節のとおり、この本ではペアを 0 から数え、ペア 0 の θ は 1 です。"
    ),
    ("exponent", "paper-from-0"): (
        "ペア 0 が 1 位置で 1 ラジアン回っていません（θ の最初が 1 より大きい base^(2/Dh)）。"
        "論文の 1 から数える式 base^(−2(i−1)/Dh) に、0 から数えた番号 i = 0, 1, … を"
        "入れています。第 1 節のとおり、番号の数え始めと式をそろえてください。"
    ),
    ("positions", "rows"): (
        "positions を使わず、行の番号 0, 1, …, T−1 を位置にしています。"
        "角度は与えられた positions[t] · θ_i です。"
    ),
    ("base", "ignored"): (
        "引数 base を使っていません（いつも 10000 になっています）。"
        "θ_i の底には引数の値を使ってください。"
    ),
}


#: The reversed sign after the np.repeat diagnosis (the map is no rotation to name).
_SIGN_AFTER_MIXED = (
    "そのうえ、回転の向きも逆です（sin の項の符号か、rotate_half で符号を付ける側を"
    "確かめてください）。"
)


@dataclass(frozen=True)
class _Case:
    name: str
    x: np.ndarray  # (T, Dh)
    positions: np.ndarray  # (T,) int
    base: float | None  # None: the student's default is used


def _rope_cases() -> list[_Case]:
    rng = np.random.default_rng(20260808)
    # positions deliberately differ from the row index 0 … T−1 and are not sorted
    return [
        _Case("位置 [5, 0, 3, 9, 2, 7]・Dh=8 のケース", rng.normal(size=(6, 8)),
              np.array([5, 0, 3, 9, 2, 7]), None),
        _Case("base=100・Dh=12 のケース", rng.normal(size=(4, 12)),
              np.array([11, 4, 30, 8]), 100.0),
        _Case("大きな位置 [1000, 2500, 40]・Dh=16 のケース", rng.normal(size=(3, 16)),
              np.array([1000, 2500, 40]), 10000.0),
        _Case("Dh=10（ペアが 5 つ）・base=500・長さ 7 のケース", rng.normal(size=(7, 10)),
              np.array([3, 14, 1, 0, 27, 9, 6]), 500.0),
    ]


#: θ_i's exponent, −(factor)·(i + shift)/Dh, for each choice of the answer.
_EXPONENTS = {"2i": (2.0, 0), "i": (1.0, 0), "4i": (4.0, 0), "one-based": (2.0, 1),
              "paper-from-0": (2.0, -1)}


def _candidate(case: _Case, layout: str, sign: int, trig: str, exponent: str,
               positions: str, base: str) -> np.ndarray:
    """What the answer would be with the given (possibly wrong) choices: (T, Dh)."""
    x = case.x
    T, d_head = x.shape
    half = d_head // 2
    b = 10000.0 if (case.base is None or base == "ignored") else case.base
    i = np.arange(half)  # (Dh/2,)
    factor, shift = _EXPONENTS[exponent]
    theta = b ** (-factor * (i + shift) / d_head)  # (Dh/2,)
    pos = np.arange(T) if positions == "rows" else case.positions  # (T,)
    angles = sign * pos[:, None] * theta  # (T, Dh/2)
    cos, sin = np.cos(angles), np.sin(angles)  # (T, Dh/2) each
    if trig == "swapped":
        cos, sin = sin, cos
    if layout == "mixed":  # angles for adjacent pairs, rotation of split halves
        cos = np.repeat(cos, 2, axis=-1)  # (T, Dh): θ_0, θ_0, θ_1, θ_1, …
        sin = np.repeat(sin, 2, axis=-1)
        rotated_half = np.concatenate([-x[:, half:], x[:, :half]], axis=-1)  # (T, Dh)
        return x * cos + rotated_half * sin
    if layout == "half":
        a, b_ = x[:, :half], x[:, half:]  # (T, Dh/2) each
    else:
        a, b_ = x[:, 0::2], x[:, 1::2]
    r1 = a * cos - b_ * sin
    r2 = a * sin + b_ * cos
    out = np.empty_like(x)
    if layout == "half":
        out[:, :half], out[:, half:] = r1, r2
    else:
        out[:, 0::2], out[:, 1::2] = r1, r2
    return out


_CHOICES = (
    ("layout", ("half", "adjacent", "mixed")),
    ("sign", (1, -1)),
    ("trig", ("right", "swapped")),
    ("exponent", tuple(_EXPONENTS)),
    ("positions", ("given", "rows")),
    ("base", ("used", "ignored")),
)
_RIGHT = ("half", 1, "right", "2i", "given", "used")


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    # float32 answers are right: their angles at position 2500 carry ~1e-4 of error
    return bool(np.allclose(a, b, rtol=1e-3, atol=1e-3))


def _diagnose(case: _Case, rotated: np.ndarray) -> str:
    """Name the mistakes whose combination reproduces ``rotated``."""
    names = [name for name, _ in _CHOICES]
    for values in product(*(options for _, options in _CHOICES)):
        if values == _RIGHT or (case.base is None and values[-1] == "ignored"):
            continue
        if _close(rotated, _candidate(case, *values)):
            found = [(n, v) for n, v in zip(names, values, strict=True)
                     if (n, v) in _DIAGNOSES]
            texts = [_DIAGNOSES[f] for f in found]
            if ("layout", "mixed") in found and ("sign", -1) in found:
                # not a rotation: "turned by −positions[t]·θ_i" would be false
                texts[found.index(("sign", -1))] = _SIGN_AFTER_MIXED
            return "".join(texts)
    if _close(rotated, case.x):
        return "x がそのまま返っています。各ペアを positions[t]·θ_i だけ回してください。"
    norms = np.linalg.norm(rotated, axis=-1)
    if not np.allclose(norms, np.linalg.norm(case.x, axis=-1), rtol=1e-3):
        return (
            "各行の長さ（ノルム）が x と変わっています。回転は長さを変えません。"
            "cos と sin の組み合わせと、ペアの 2 つの次元が同じ角度で回っているかを"
            "確かめてください。"
        )
    return (
        "値が前後半の RoPE と一致しません（よくある間違いのどれとも違う値です）。"
        "位置 0 の行がそのままか、ペア 0 が 1 位置で 1 ラジアン回るか、ペア (i, i + Dh/2) の"
        "長さが変わらないかを、小さな x で 1 つずつ確かめてください。"
    )


@checker("行番号と違う位置・Dh=10 でも前後半の RoPE と一致。")
def check_rope_half(func: Callable) -> None:
    """Check ``func(x, positions, base=10000.0) -> rotated``: RoPE in the split-halves
    layout (``apply_rope(..., convention="half")``).

    ``x`` is (T, Dh) and ``positions`` (T,); each pair (i, i + Dh/2) of row t must be
    turned by ``positions[t] · θ_i`` with ``θ_i = base^(−2i/Dh)``. Prints 【正解】,
    【未実装】 or 【不正解】 with a diagnosis (adjacent pairs, the angles laid out for
    adjacent pairs, the sign reversed, cos and sin swapped, i or 4i where the formula has
    2i, pairs counted from 1, the row index instead of the positions, the base ignored,
    x returned unrotated, a wrong shape, an exception).

    Parameters
    ----------
    func : callable
        The student's ``my_rope_half``.

    Returns
    -------
    CheckResult
        True (``.passed``) if every hidden case matches.

    Taught in chapter 08.
    """
    for case in _rope_cases():
        if case.base is None:
            result = call_refusing(func, _ROPE_REFERENCES, case.x, case.positions)
        else:
            result = call_refusing(func, _ROPE_REFERENCES, case.x, case.positions,
                                   base=case.base)
        if isinstance(result, Raised):
            message = raised_message(result, case.name)
            if isinstance(result.error, TypeError) and "base" in str(result.error):
                message += (
                    "base 引数を受け取れるよう、def my_rope_half(x, positions, "
                    "base=10000.0) と書いてください。"
                )
            raise Mistake(message)
        rotated = returned_array(result, "返り値", case.x.shape)
        if not np.all(np.isfinite(rotated)):
            raise Mistake(f"{case.name}で nan か inf が出ました。")
        base = 10000.0 if case.base is None else case.base
        expected = apply_rope(case.x, case.positions, base=base, convention="half")
        if not _close(rotated, expected):
            raise Mistake(f"{case.name}: {_diagnose(case, rotated)}")


# --- converting a checkpoint from adjacent pairs to rotate_half ----------------------------

#: (case name, Dh, H, Hkv, layers): head widths that are not powers of two, GQA and MQA.
_CONVERT_CASES = (
    ("Dh=6・ヘッド 4・K/V ヘッド 2（GQA）・2 層のケース", 6, 4, 2, 2),
    ("Dh=10・ヘッド 3・1 層のケース", 10, 3, 3, 1),
    ("Dh=12・ヘッド 2・K/V ヘッド 1（MQA）・3 層のケース", 12, 2, 1, 3),
)

_CONVERT_DIAGNOSES = {
    "inverse": ("並べ替えが逆向きです。前後半の並べ方を隣接ペアに戻す並べ替えになっています。"
                "変換したあとの列 i に、元のどの列が来るかを確かめてください。"),
    "rows": ("W_Q と W_K の行を並べ替えています。ペアの次元はヘッドの出力の側、"
             "つまり列（最後の軸）です。"),
    "whole": ("行列の列全体を 1 つの並べ替えにしています。並べ替えはヘッドごとに、"
              "そのヘッドの Dh 列の中で行います。"),
    "k_missing": ("W_K を並べ替えていません。スコア q·k が同じになるには、"
                  "W_Q と W_K の両方が要ります。"),
    "q_missing": ("W_Q を並べ替えていません。スコア q·k が同じになるには、"
                  "W_Q と W_K の両方が要ります。"),
    "v_too": ("W_V の列も並べ替えています。RoPE で回すのはクエリとキーだけなので、"
              "W_V（と W_O）はそのままです。"),
}


def _convert(params: dict, n_heads: int, n_kv_heads: int, how: str) -> dict:
    """The conversion, right (``how="right"``) or with one of the typical mistakes."""
    out = {name: np.array(value, copy=True) for name, value in params.items()}
    n_layers = sum(1 for name in params if name.endswith(".w_q"))
    d_head = params["layers.0.w_q"].shape[1] // n_heads
    perm = half_layout_permutation(d_head)
    if how == "inverse":
        perm = np.argsort(perm)
    for layer in range(n_layers):
        w_q, w_k, w_v, _ = layer_keys(layer)
        heads = {w_q: n_heads, w_k: n_kv_heads}
        if how == "v_too":
            heads[w_v] = n_kv_heads
        if how == "k_missing":
            del heads[w_k]
        if how == "q_missing":
            del heads[w_q]
        for name, count in heads.items():
            if how == "rows":
                out[name] = permute_head_columns(params[name].T, params[name].shape[0]
                                                 // d_head, perm).T
            elif how == "whole":
                out[name] = params[name][:, half_layout_permutation(params[name].shape[1])]
            else:
                out[name] = permute_head_columns(params[name], count, perm)
    return out


def _converted(result, params: dict, case: str) -> dict:
    if result is None:
        raise Mistake("返り値が None です。変換した dict を return してください。")
    if not isinstance(result, Mapping):
        raise Mistake(f"{case}: 返り値が {type(result).__name__} です。"
                      "params と同じキーを持つ dict を返してください。")
    missing = [name for name in params if name not in result]
    if missing:
        raise Mistake(f"{case}: 返り値の dict に {missing[0]!r} がありません。"
                      "変えない行列も含めて、すべてのキーを返してください。")
    return {name: returned_array(result[name], f"{case}の {name}", params[name].shape)
            for name in params}


_CONVERT_REFERENCES = (permute_head_columns, half_layout_permutation)


def _layers_left(params: dict, converted: dict, n_heads: int, n_kv_heads: int) -> str:
    """The later layers left as they were, when layer 0 is converted right ("" if not)."""
    right = _convert(params, n_heads, n_kv_heads, "right")
    n_layers = sum(1 for name in params if name.endswith(".w_q"))
    first = layer_keys(0)[:2]  # W_Q and W_K of layer 0
    if n_layers < 2 or not all(np.allclose(converted[n], right[n]) for n in first):
        return ""
    left = [str(layer) for layer in range(1, n_layers)
            if all(np.array_equal(converted[n], params[n]) for n in layer_keys(layer)[:2])]
    return "、".join(left)


def _conversion_error(raised: Raised, case: str, d_head: int, n_heads: int,
                      n_kv_heads: int) -> str:
    """The message for an exception of the answer: under GQA, a failed reshape of W_K
    most often splits it into n_heads heads."""
    message = raised_message(raised, case)
    if n_kv_heads < n_heads and isinstance(raised.error, ValueError) \
            and "reshape" in str(raised.error):
        return (f"{case}で行列を分けられませんでした。このケースは K/V ヘッドが {n_kv_heads} 個"
                f"（GQA/MQA）で、W_K の列は {n_kv_heads} × {d_head} = {n_kv_heads * d_head} 列"
                f"しかありません。W_K を n_heads={n_heads} 個のヘッドに分けていないか、"
                f"W_K には n_kv_heads を使っているかを確かめてください（元の例外: "
                f"{message.removeprefix(case + 'で例外 ').rstrip('。')}）。")
    return message


@checker("GQA・3 層のモデルでも出力が元と一致。")
def check_half_layout(func: Callable) -> None:
    """Check ``func(params, n_heads, n_kv_heads) -> params`` that converts a checkpoint
    trained with adjacent pairs to the ``rotate_half`` layout.

    Each hidden case is a RoPE model of :mod:`attnlab.model` (GQA, MQA, several layers,
    head widths that are not powers of two). The answer must run with split-half RoPE
    to the same logits as the original with adjacent pairs, and leave the passed
    ``params`` unchanged.

    Taught in chapter 08.
    """
    rng = np.random.default_rng(20260809)
    for case, d_head, n_heads, n_kv_heads, n_layers in _CONVERT_CASES:
        config = ModelConfig(vocab_size=11, d_model=d_head * n_heads, n_heads=n_heads,
                             n_kv_heads=n_kv_heads, n_layers=n_layers, max_len=9,
                             positional="rope", dtype="float64")
        params = init_params(config, rng)
        given = {name: value.copy() for name, value in params.items()}
        result = call_refusing(func, _CONVERT_REFERENCES, given, n_heads, n_kv_heads)
        if isinstance(result, Raised):
            raise Mistake(_conversion_error(result, case, d_head, n_heads, n_kv_heads))
        if any(not np.array_equal(given[name], params[name]) for name in params):
            raise Mistake(f"{case}: 渡した params の行列を書き換えています。元のチェックポイントは"
                          "そのまま残し、新しい dict（行列も新しい配列）を返してください。")
        converted = _converted(result, params, case)
        tokens = rng.integers(0, config.vocab_size, size=(3, 9))  # (B, T)
        right = forward(params, tokens, config).logits  # adjacent pairs, (B, T, V)
        if np.allclose(half_layout_logits(converted, tokens, config), right, rtol=1e-6, atol=1e-8):
            continue
        for how, diagnosis in _CONVERT_DIAGNOSES.items():
            candidate = _convert(params, n_heads, n_kv_heads, how)
            if all(np.allclose(converted[name], candidate[name]) for name in params):
                raise Mistake(f"{case}: {diagnosis}")
        layers = _layers_left(params, converted, n_heads, n_kv_heads)
        if layers:
            raise Mistake(f"{case}: 層 0 は正しく変換できていますが、層 {layers} の W_Q と W_K が"
                          "元のままです。RoPE はどの層のアテンションでも使われるので、"
                          "すべての層（\"layers.0.…\"、\"layers.1.…\"、…）を変換してください。")
        if any(not np.allclose(converted[name], params[name])
               for name in ("embed", "unembed")):
            raise Mistake(f"{case}: embed か unembed が変わっています。"
                          "変えるのは W_Q と W_K だけです。")
        raise Mistake(f"{case}: 前後半の RoPE で動かすと出力が元のモデルと一致しません。"
                      "各ヘッドの Dh 列の中で、隣接ペア (2i, 2i+1) を (i, i + Dh/2) に移して"
                      "いるか、W_K のヘッド数が n_kv_heads かを確かめてください。")
