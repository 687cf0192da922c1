"""Chapter 08's self-checks: ``my_rope_half(x, positions, base=10000.0) -> rotated``
(RoPE in the split-halves layout of ``rotate_half``, as Hugging Face's LLaMA and GPT-NeoX
write it) and ``my_to_half_layout(params, n_heads, n_kv_heads) -> params`` (a checkpoint
trained with adjacent pairs, converted to run with ``rotate_half``).

The diagnosis is computed, not guessed: the check builds what each typical mistake
would return (adjacent pairs, as the chapter's first cell rotates them; the angles laid
out for adjacent pairs and used with ``rotate_half``, the layout-mixing bug of the
chapter; the rotation's sign reversed, θ_i = base^(−i/Dh) instead of base^(−2i/Dh), the
row index instead of the given positions, the base ignored; for the conversion, the
inverse permutation, rows instead of columns, one permutation over all heads, W_K or W_V
handled like W_Q) and says which one the answer matches.

A check refuses the package's own function when the chapter's setup cell imports it
(:func:`refuse_reference`): the exercise asks the student to write it.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import product

import numpy as np

from attnlab.attention import causal_mask, multi_head_attention
from attnlab.checks.core import (
    Mistake,
    Raised,
    call_student,
    checker,
    raised_message,
    returned_array,
)
from attnlab.experiments.rope import half_layout_permutation, permute_head_columns
from attnlab.model import ModelConfig, forward, init_params, layer_keys, layer_weights
from attnlab.positional import RoPE, apply_rope, rope_angles

# --- the package's own functions are not an answer ---------------------------------------


def _unwrap(func):
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__func__", func)  # a bound method: its function


def _code_objects(func):
    """The code of ``func`` and of every function or lambda defined inside it."""
    code = getattr(_unwrap(func), "__code__", None)
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        yield code
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def _reference_used(func, references: Mapping[str, object], depth: int = 2) -> str | None:
    """The name of the reference ``func`` is, calls by name, or calls through a global
    that holds it (also inside the student's own helper functions, ``depth`` deep)."""
    target = _unwrap(func)
    for name, reference in references.items():
        if target is reference:
            return name
    found_globals = getattr(target, "__globals__", {})
    for code in _code_objects(func):
        for used in code.co_names:
            if used in references:
                return used
            value = found_globals.get(used)
            for name, reference in references.items():
                if value is not None and _unwrap(value) is reference:
                    return name
            helper = _unwrap(value) if value is not None else None
            if (depth > 0 and isinstance(helper, types.FunctionType)
                    and helper.__module__ == getattr(target, "__module__", None)
                    and helper is not target):
                inner = _reference_used(helper, references, depth - 1)
                if inner is not None:
                    return inner
    return None


def refuse_reference(func: Callable, references: Mapping[str, object]) -> None:
    """Raise :class:`Mistake` if ``func`` is, or calls, one of the package's ``references``.

    The chapter's setup cell imports these functions, so the student could pass one of
    them, or wrap it, and be told 【正解】 without writing anything. Detected: the function
    itself (or a ``functools.partial`` of it), its name in the student's code, a global
    alias of it, and the same inside the student's own helpers.

    Not taught: machinery of the self-checks (CONTRIBUTING.md).
    """
    used = _reference_used(func, references)
    if used is not None:
        raise Mistake(f"attnlab の {used} を使っています。この練習問題では {used} を使わずに、"
                      "自分で計算してください（書いたあとの確かめには使えます）。")


_ROPE_REFERENCES = {"apply_rope": apply_rope, "RoPE": RoPE, "rope_angles": rope_angles}

_DIAGNOSES = {
    ("layout", "adjacent"): (
        "隣り合う次元 (2i, 2i+1) をペアにしています（第 1 節のセルの並べ方）。"
        "この問題では前半と後半、次元 i と i + Dh/2 を 1 つのペアにしてください。"
    ),
    ("layout", "mixed"): (
        "角度を隣接ペアの順（θ_0, θ_0, θ_1, θ_1, …、np.repeat の並べ方）にして前後半の"
        "回転に使っています。第 5 節の「並べ方の混同」です。前後半では cos と sin を "
        "[角度 | 角度]（np.concatenate）の順に並べます。"
    ),
    ("sign", -1): (
        "回転の向きが逆です。ペア (a, b) は (a·cos − b·sin, a·sin + b·cos) に移ります"
        "（rotate_half(x) は [−後半 | 前半]）。"
    ),
    ("exponent", "i"): (
        "θ_i の指数が違います。θ_i = base^(−2i/Dh) です（i はペアの番号 0, 1, …, Dh/2−1）。"
        "いまは base^(−i/Dh) になっています。"
    ),
    ("positions", "rows"): (
        "positions を使わず、行の番号 0, 1, …, T−1 を位置にしています。"
        "角度は与えられた positions[t] · θ_i です。"
    ),
    ("base", "ignored"): (
        "引数 base を使っていません（いつも 10000 になっています）。"
        "θ_i = base^(−2i/Dh) の base は引数の値です。"
    ),
}


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


def _candidate(case: _Case, layout: str, sign: int, exponent: str, positions: str,
               base: str) -> np.ndarray:
    """What the answer would be with the given (possibly wrong) choices: (T, Dh)."""
    x = case.x
    T, d_head = x.shape
    half = d_head // 2
    b = 10000.0 if (case.base is None or base == "ignored") else case.base
    i = np.arange(half)  # (Dh/2,)
    theta = b ** (-(2.0 if exponent == "2i" else 1.0) * i / d_head)  # (Dh/2,)
    pos = np.arange(T) if positions == "rows" else case.positions  # (T,)
    angles = sign * pos[:, None] * theta  # (T, Dh/2)
    if layout == "mixed":  # angles for adjacent pairs, rotation of split halves
        cos = np.repeat(np.cos(angles), 2, axis=-1)  # (T, Dh): θ_0, θ_0, θ_1, θ_1, …
        sin = np.repeat(np.sin(angles), 2, axis=-1)
        rotated_half = np.concatenate([-x[:, half:], x[:, :half]], axis=-1)  # (T, Dh)
        return x * cos + rotated_half * sin
    if layout == "half":
        a, b_ = x[:, :half], x[:, half:]  # (T, Dh/2) each
    else:
        a, b_ = x[:, 0::2], x[:, 1::2]
    r1 = a * np.cos(angles) - b_ * np.sin(angles)
    r2 = a * np.sin(angles) + b_ * np.cos(angles)
    out = np.empty_like(x)
    if layout == "half":
        out[:, :half], out[:, half:] = r1, r2
    else:
        out[:, 0::2], out[:, 1::2] = r1, r2
    return out


_CHOICES = (
    ("layout", ("half", "adjacent", "mixed")),
    ("sign", (1, -1)),
    ("exponent", ("2i", "i")),
    ("positions", ("given", "rows")),
    ("base", ("used", "ignored")),
)
_RIGHT = ("half", 1, "2i", "given", "used")


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
            return "".join(_DIAGNOSES[f] for f in found)
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
        "値が前後半の apply_rope と一致しません。角度 positions[:, None] · θ、ペア "
        "(i, i + Dh/2)、(a·cos − b·sin, a·sin + b·cos) の順に、途中の値を比べてみてください。"
    )


@checker("行番号と違う位置・Dh=10 でも前後半の RoPE と一致。")
def check_rope_half(func: Callable) -> None:
    """Check ``func(x, positions, base=10000.0) -> rotated``: RoPE in the split-halves
    layout (``apply_rope(..., convention="half")``).

    ``x`` is (T, Dh) and ``positions`` (T,); each pair (i, i + Dh/2) of row t must be
    turned by ``positions[t] · θ_i`` with ``θ_i = base^(−2i/Dh)``. Prints 【正解】,
    【未実装】 or 【不正解】 with a diagnosis (adjacent pairs, the angles laid out for
    adjacent pairs, the sign reversed, i where the formula has 2i, the row index instead
    of the positions, the base ignored, x returned unrotated, a wrong shape, an
    exception).

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
    refuse_reference(func, _ROPE_REFERENCES)
    for case in _rope_cases():
        if case.base is None:
            result = call_student(func, case.x, case.positions)
        else:
            result = call_student(func, case.x, case.positions, base=case.base)
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
    "inverse": ("並べ替えが逆向きです。前後半の並べ方では、新しい列 i に元の列 2i を、"
                "新しい列 i + Dh/2 に元の列 2i + 1 を置きます（new = old[:, perm]）。"),
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


def _half_logits(params: dict, tokens: np.ndarray, config: ModelConfig) -> np.ndarray:
    """The model of :mod:`attnlab.model` with ``rotate_half`` RoPE: logits (B, T, V)."""
    x = params["embed"][tokens]  # (B, T, D)
    mask = causal_mask(tokens.shape[1])  # (T, T)
    for layer in range(config.n_layers):
        out, _ = multi_head_attention(x, layer_weights(params, layer), config.n_heads,
                                      n_kv_heads=config.n_kv_heads, mask=mask,
                                      rope=RoPE(convention="half"))
        x = x + out  # (B, T, D)
    return x @ params["unembed"]  # (B, T, V)


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


_CONVERT_REFERENCES = {"permute_head_columns": permute_head_columns,
                       "half_layout_permutation": half_layout_permutation}


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
    refuse_reference(func, _CONVERT_REFERENCES)
    rng = np.random.default_rng(20260809)
    for case, d_head, n_heads, n_kv_heads, n_layers in _CONVERT_CASES:
        config = ModelConfig(vocab_size=11, d_model=d_head * n_heads, n_heads=n_heads,
                             n_kv_heads=n_kv_heads, n_layers=n_layers, max_len=9,
                             positional="rope", dtype="float64")
        params = init_params(config, rng)
        given = {name: value.copy() for name, value in params.items()}
        result = call_student(func, given, n_heads, n_kv_heads)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, case))
        if any(not np.array_equal(given[name], params[name]) for name in params):
            raise Mistake(f"{case}: 渡した params の行列を書き換えています。元のチェックポイントは"
                          "そのまま残し、新しい dict（行列も新しい配列）を返してください。")
        converted = _converted(result, params, case)
        tokens = rng.integers(0, config.vocab_size, size=(3, 9))  # (B, T)
        right = forward(params, tokens, config).logits  # adjacent pairs, (B, T, V)
        if np.allclose(_half_logits(converted, tokens, config), right, rtol=1e-6, atol=1e-8):
            continue
        for how, diagnosis in _CONVERT_DIAGNOSES.items():
            candidate = _convert(params, n_heads, n_kv_heads, how)
            if all(np.allclose(converted[name], candidate[name]) for name in params):
                raise Mistake(f"{case}: {diagnosis}")
        if any(not np.allclose(converted[name], params[name])
               for name in ("embed", "unembed")):
            raise Mistake(f"{case}: embed か unembed が変わっています。"
                          "変えるのは W_Q と W_K だけです。")
        raise Mistake(f"{case}: 前後半の RoPE で動かすと出力が元のモデルと一致しません。"
                      "各ヘッドの Dh 列の中で、隣接ペア (2i, 2i+1) を (i, i + Dh/2) に移して"
                      "いるか、W_K のヘッド数が n_kv_heads かを確かめてください。")
