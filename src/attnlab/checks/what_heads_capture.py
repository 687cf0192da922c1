"""Chapter 04's self-checks: the longest context a KV cache fits in, and grouped-query attention.

- ``my_max_context(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1,
  bytes_per_value=2) -> int``: the most tokens whose KV cache fits in ``memory_bytes``;
- ``my_gqa(q, k, v, mask=None) -> (out (H, T, Dh), weights (H, T, T))`` with q
  (H, T, Dh) and k, v (Hkv, T, Dh): query head i reads K/V head i // (H / Hkv).

The diagnosis is computed: the check builds what each typical mistake would return and
says which one the answer matches.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations, product
from numbers import Number

import numpy as np

from attnlab.attention import causal_mask, scaled_dot_product_attention
from attnlab.checks.core import (
    Mistake,
    Raised,
    call_student,
    checker,
    raised_message,
    returned_array,
    returned_pair,
    shape_of,
)
from attnlab.costs import kv_cache_bytes

# --- the longest context that fits ------------------------------------------------------------

#: (memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch, bytes_per_value). No budget
#: is a multiple of the bytes per token, and the fractions of a token left over (0.14, 0.91,
#: 0.63) put rounding to nearest on the side of rounding up in one case and of rounding down
#: in another. The first two cases have no size that is a power of two; the last is a real
#: model's shape (Llama 2 70B) with 80 GB, not GiB. Every single mistake, with every
#: rounding, gives another list of answers (a test checks it).
_CONTEXT_CASES = (
    (1_000_620, 5, 6, 3, 7, 3, 2),
    (1_002_804, 7, 9, 3, 5, 2, 4),
    (80_000_000_000, 80, 64, 8, 128, 1, 2),
)

#: Each mistake multiplies the bytes per token by a factor that depends on the case.
_CONTEXT_MISTAKES = {
    "no_two": (lambda L, H, Hkv, Dh, B, b: 1 / 2,
               "K と V の 2 つ分を数えていません（係数 2 がありません）。キャッシュにはキーと"
               "バリューの両方を置きます。"),
    "query_heads": (lambda L, H, Hkv, Dh, B, b: H / Hkv,
                    "K/V ヘッド数 n_kv_heads ではなくクエリのヘッド数 n_heads を掛けています。"
                    "キャッシュに置くのは K/V ヘッドの分だけです。"),
    "one_layer": (lambda L, H, Hkv, Dh, B, b: 1 / L,
                  "1 層分しか数えていません。n_layers 層それぞれが自分の K と V を持ちます。"),
    "no_batch": (lambda L, H, Hkv, Dh, B, b: 1 / B,
                 "batch を掛け忘れています。系列ごとに別のキャッシュが要ります。"),
    "bits": (lambda L, H, Hkv, Dh, B, b: 8,
             "ビット数で数えています。bytes_per_value はバイト数なので、8 を掛けないでください。"),
}

#: How the division was turned into a number of tokens, and what is wrong with each.
_ROUNDINGS = {
    "floor": (np.floor, ""),
    "round": (np.round, "四捨五入しています。端数の分のトークンはキャッシュに入りきらないので、"
                        "切り捨ててください（//）。"),
    "ceil": (np.ceil, "切り上げています。それではキャッシュが memory_bytes を超えます。"
                      "切り捨ててください（//）。"),
    "none": (lambda x: x, "割り算の結果を切り捨てずに返しています。トークンの数は整数です"
                          "（// で割るか、int() で切り捨ててください）。"),
}


def _bytes_per_token(L, H, Hkv, Dh, B, b) -> int:
    return kv_cache_bytes(L, Hkv, Dh, 1, batch_size=B, bytes_per_value=b)


def _context_reference(memory, L, H, Hkv, Dh, B, b) -> int:
    return memory // _bytes_per_token(L, H, Hkv, Dh, B, b)


def _context_candidates(case: tuple) -> dict[tuple[tuple[str, ...], str], float]:
    """What every combination of mistakes returns: (mistakes, rounding) → value."""
    memory, *shape = case
    right = _bytes_per_token(*shape)
    found = {}
    for size, rounding in product(range(4), _ROUNDINGS):
        for names in combinations(_CONTEXT_MISTAKES, size):
            factor = np.prod([_CONTEXT_MISTAKES[name][0](*shape) for name in names])
            found[names, rounding] = float(_ROUNDINGS[rounding][0](memory / (right * factor)))
    return found


def _as_number(value, case: str) -> float:
    if isinstance(value, Raised):
        raise Mistake(raised_message(value, case))
    if value is None:
        raise Mistake("None が返されました。最後に return を書き忘れていませんか。")
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Number):
        raise Mistake(
            f"返り値が {type(value).__name__} です。トークンの数を 1 つの数で返してください。")
    return float(value)


def _diagnose_context(answers: list[float], cases: list[tuple]) -> str:
    """The mistakes that reproduce every answer, fewest first.

    In one case rounding to nearest gives the same number as rounding down or up, so the
    rounding is read off all the cases together; when two roundings explain everything,
    the message says what both have in common.
    """
    candidates = [_context_candidates(case) for case in cases]
    for names in (names for size in range(4) for names in combinations(_CONTEXT_MISTAKES, size)):
        fitting = [rounding for rounding in _ROUNDINGS
                   if all(np.isclose(got, found[names, rounding], rtol=1e-12)
                          for got, found in zip(answers, candidates, strict=True))]
        if not fitting or (not names and "floor" in fitting):
            continue
        text = [_CONTEXT_MISTAKES[name][1] for name in names]
        if "floor" not in fitting:
            text.append(_ROUNDINGS[fitting[0]][1] if len(fitting) == 1 else _ROUND_UP_OR_NEAR)
        return "".join(text)
    case = cases[next(i for i, (got, c) in enumerate(zip(answers, cases, strict=True))
                      if got != _context_reference(*c))]
    return (f"値が正しい {_context_reference(*case)} と一致しません。1 トークンのキャッシュは "
            "2（K と V）× n_layers × n_kv_heads × d_head × batch × bytes_per_value バイトで、"
            "memory_bytes をそれで割って切り捨てます。")


_ROUND_UP_OR_NEAR = ("端数を切り捨てていません（四捨五入か切り上げ）。端数の分のトークンは"
                     "キャッシュに入りきらないので、切り捨ててください（//）。")


@checker("端数のある予算と既定の引数を含む隠れたケースで一致。")
def check_max_context(func: Callable) -> None:
    """Check ``func(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1,
    bytes_per_value=2)``: the most tokens whose KV cache fits in ``memory_bytes``.

    The answer is ``memory_bytes // (2 · n_layers · n_kv_heads · d_head · batch ·
    bytes_per_value)``. Diagnoses: K and V not both counted, query heads instead of K/V
    heads, one layer only, the batch forgotten, bits instead of bytes (and their
    combinations), rounded or rounded up instead of down, not rounded at all, wrong
    defaults.

    Taught in chapter 04.
    """
    answers = [_as_number(call_student(func, *case), f"ケース {index}")
               for index, case in enumerate(_CONTEXT_CASES, start=1)]
    if any(got != _context_reference(*case) for got, case in zip(answers, _CONTEXT_CASES,
                                                                 strict=True)):
        raise Mistake(_diagnose_context(answers, list(_CONTEXT_CASES)))
    memory, L, H, Hkv, Dh = _CONTEXT_CASES[0][:5]
    got = _as_number(call_student(func, memory, L, H, Hkv, Dh), "既定の引数のケース")
    defaults = (memory, L, H, Hkv, Dh, 1, 2)
    if got != _context_reference(*defaults):
        raise Mistake(
            "batch と bytes_per_value を省いたときの値が違います。既定値は batch=1、"
            "bytes_per_value=2（fp16）です。" + _diagnose_context([got], [defaults])
        )


# --- grouped-query attention ------------------------------------------------------------------


def _gqa_reference(q, k, v, mask, assign) -> tuple[np.ndarray, np.ndarray]:
    """Attention of each query head with the K/V head ``assign[i]``."""
    outs, weights = zip(*(scaled_dot_product_attention(q[i], k[j], v[j], mask=mask)
                          for i, j in enumerate(assign)), strict=True)
    return np.stack(outs), np.stack(weights)  # (H, T, Dh), (H, T, T)


def _assignments(H: int, Hkv: int) -> dict[str, list[int]]:
    group = H // Hkv
    return {
        "groups": [i // group for i in range(H)],
        "round_robin": [i % Hkv for i in range(H)],
        "first": [0] * H,
    }


_GQA_DIAGNOSES = {
    "round_robin": (
        "K/V ヘッドを順番に配っています（i % Hkv や np.tile）。GQA では連続する "
        "H/Hkv 個のクエリヘッドが 1 つの K/V ヘッドを共有します: クエリヘッド i が読むのは "
        "K/V ヘッド i // (H // Hkv) です（np.repeat(k, H // Hkv, axis=0)）。"
    ),
    "first": "すべてのクエリヘッドが K/V ヘッド 0 だけを読んでいます。",
}


def _gqa_cases() -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]:
    rng = np.random.default_rng(20260404)
    cases = []
    # groups of 3 and 2, MHA and MQA; the last case has no size that is a power of two (9
    # query heads in 3 groups, d_head = 5), so an answer fitted to the chapter's toy (4
    # heads, groups of 2, d_head = 16) fails there
    for H, Hkv, T, Dh, masked in ((6, 2, 5, 4, False), (6, 3, 5, 4, True), (4, 4, 6, 3, False),
                                   (4, 1, 6, 3, True), (9, 3, 7, 5, True)):
        q = rng.normal(size=(H, T, Dh))
        k = rng.normal(size=(Hkv, T, Dh))
        v = rng.normal(size=(Hkv, T, Dh))
        mask = causal_mask(T) if masked else None
        label = {H: "MHA", 1: "MQA"}.get(Hkv, "GQA")
        name = f"{label}（H={H}, Hkv={Hkv}{'、因果マスクあり' if masked else ''}）のケース"
        cases.append((name, q, k, v, mask))
    return cases


def _unpack(value, name: str, H: int, Hkv: int, T: int, Dh: int):
    if isinstance(value, Raised):
        raise Mistake(raised_message(value, name))
    value = returned_pair(value, (H, T, Dh), (H, T, T))
    if shape_of(value[1]) == (Hkv, T, T) and Hkv != H:
        raise Mistake(
            f"{name}: weights の形が (Hkv, T, T) = {(Hkv, T, T)} です。重みはクエリヘッドごとに"
            f"できるので (H, T, T) = {(H, T, T)} です。K/V ヘッドを H 個に広げてから計算して"
            "ください。"
        )
    out = returned_array(value[0], "out（1 つ目の返り値）", (H, T, Dh))
    weights = returned_array(value[1], "weights（2 つ目の返り値）", (H, T, T))
    return out, weights


@checker("隠れたケース（GQA・MHA・MQA、マスク有無）で出力も重みも一致。")
def check_grouped_query_attention(func: Callable) -> None:
    """Check ``func(q, k, v, mask=None) -> (out (H, T, Dh), weights (H, T, T))``.

    q is (H, T, Dh), k and v are (Hkv, T, Dh); query head i must read K/V head
    i // (H / Hkv). Diagnoses round-robin assignment (i % Hkv, ``np.tile``), one K/V head
    for all, weights per K/V head, and the mask ignored.

    Taught in chapter 04.
    """
    for name, q, k, v, mask in _gqa_cases():
        (H, T, Dh), Hkv = q.shape, k.shape[0]
        out, weights = _unpack(call_student(func, q, k, v, mask), name, H, Hkv, T, Dh)
        want_out, want_weights = _gqa_reference(q, k, v, mask, _assignments(H, Hkv)["groups"])
        if np.allclose(weights, want_weights, rtol=1e-4, atol=1e-6):
            if not np.allclose(out, want_out, rtol=1e-4, atol=1e-6):
                raise Mistake(f"{name}: 重みは正しいのに出力が違います。クエリヘッド i の出力は "
                              "weights[i] @ v[i // (H // Hkv)] です。")
            continue
        for wrong, assign in _assignments(H, Hkv).items():
            if wrong == "groups":
                continue
            candidate = _gqa_reference(q, k, v, mask, assign)[1]
            if np.allclose(weights, candidate, rtol=1e-4, atol=1e-6):
                raise Mistake(f"{name}: {_GQA_DIAGNOSES[wrong]}")
        if mask is not None:
            unmasked = _gqa_reference(q, k, v, None, _assignments(H, Hkv)["groups"])[1]
            if np.allclose(weights, unmasked, rtol=1e-4, atol=1e-6):
                raise Mistake(f"{name}: mask を無視しています。mask が False の位置のスコアを "
                              "-inf にしてください。")
        raise Mistake(
            f"{name}: 重みが正しい値と一致しません。K/V ヘッドを np.repeat(k, H // Hkv, axis=0) "
            "で H 個に広げてから、ヘッドごとに softmax(q @ k の転置 / √d_k) を計算して"
            "いるか確かめてください。"
        )
