"""Chapter 08's self-check: ``my_apply_rope(x, positions, base=10000.0) -> rotated``.

The diagnosis is computed, not guessed: the check builds what each typical mistake
would return (split halves instead of adjacent pairs, the rotation's sign reversed,
θ_i = base^(−i/Dh) instead of base^(−2i/Dh), the row index instead of the given
positions, the base ignored) and says which combination the answer matches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

import numpy as np

from attnlab.checks.core import (
    Mistake,
    Raised,
    call_student,
    checker,
    raised_message,
    returned_array,
)
from attnlab.positional import apply_rope

_DIAGNOSES = {
    ("layout", "half"): (
        "前後半のペア（次元 i と i + Dh/2、rotate_half の並べ方）で回しています。"
        "この問題では隣り合う次元 (2i, 2i+1) を 1 つのペアにしてください。"
    ),
    ("sign", -1): (
        "回転の向きが逆です。ペア (a, b) は (a·cos − b·sin, a·sin + b·cos) に移ります"
        "（複素数なら (a + ib)·e^{+i·pos·θ}）。"
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
    ]


def _candidate(case: _Case, layout: str, sign: int, exponent: str, positions: str,
               base: str) -> np.ndarray:
    """What the answer would be with the given (possibly wrong) choices: (T, Dh)."""
    x = case.x
    T, d_head = x.shape
    b = 10000.0 if (case.base is None or base == "ignored") else case.base
    i = np.arange(d_head // 2)  # (Dh/2,)
    theta = b ** (-(2.0 if exponent == "2i" else 1.0) * i / d_head)  # (Dh/2,)
    pos = np.arange(T) if positions == "rows" else case.positions  # (T,)
    angles = sign * pos[:, None] * theta  # (T, Dh/2)
    if layout == "adjacent":
        a, b_ = x[:, 0::2], x[:, 1::2]  # (T, Dh/2) each
    else:
        a, b_ = x[:, : d_head // 2], x[:, d_head // 2:]
    r1 = a * np.cos(angles) - b_ * np.sin(angles)
    r2 = a * np.sin(angles) + b_ * np.cos(angles)
    out = np.empty_like(x)
    if layout == "adjacent":
        out[:, 0::2], out[:, 1::2] = r1, r2
    else:
        out[:, : d_head // 2], out[:, d_head // 2:] = r1, r2
    return out


_CHOICES = (
    ("layout", ("adjacent", "half")),
    ("sign", (1, -1)),
    ("exponent", ("2i", "i")),
    ("positions", ("given", "rows")),
    ("base", ("used", "ignored")),
)
_RIGHT = ("adjacent", 1, "2i", "given", "used")


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
            "cos と sin の組み合わせを確かめてください。"
        )
    return (
        "値が apply_rope と一致しません。角度 positions[:, None] · θ、ペア (2i, 2i+1)、"
        "(a·cos − b·sin, a·sin + b·cos) の順に、途中の値を比べてみてください。"
    )


@checker("行番号と違う位置・base=100 で apply_rope と一致。")
def check_apply_rope(func: Callable) -> None:
    """Check ``func(x, positions, base=10000.0) -> rotated`` against the reference.

    ``x`` is (T, Dh) and ``positions`` (T,); each adjacent pair (2i, 2i+1) of row t
    must be turned by ``positions[t] · θ_i`` with ``θ_i = base^(−2i/Dh)``. Prints
    【正解】, 【未実装】 or 【不正解】 with a diagnosis (split halves, the sign reversed, i
    where the formula has 2i, the row index instead of the positions, the base ignored,
    x returned unrotated, a wrong shape, an exception).

    Parameters
    ----------
    func : callable
        The student's ``my_apply_rope``.

    Returns
    -------
    bool
        True if every hidden case matches.

    Taught in chapter 08.
    """
    for case in _rope_cases():
        if case.base is None:
            result = call_student(func, case.x, case.positions)
        else:
            result = call_student(func, case.x, case.positions, base=case.base)
        if isinstance(result, Raised):
            message = raised_message(result, case.name)
            if isinstance(result.error, TypeError) and "base" in str(result.error):
                message += (
                    "base 引数を受け取れるよう、def my_apply_rope(x, positions, "
                    "base=10000.0) と書いてください。"
                )
            raise Mistake(message)
        rotated = returned_array(result, "返り値", case.x.shape)
        if not np.all(np.isfinite(rotated)):
            raise Mistake(f"{case.name}で nan か inf が出ました。")
        base = 10000.0 if case.base is None else case.base
        expected = apply_rope(case.x, case.positions, base=base)
        if not _close(rotated, expected):
            raise Mistake(f"{case.name}: {_diagnose(case, rotated)}")
