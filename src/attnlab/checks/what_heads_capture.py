"""Chapter 04's self-checks: the KV-cache size and grouped-query attention.

- ``my_kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=1,
  bytes_per_value=2) -> int``, compared with :func:`attnlab.costs.kv_cache_bytes`;
- ``my_gqa(q, k, v, mask=None) -> (out (H, T, Dh), weights (H, T, T))`` with q
  (H, T, Dh) and k, v (Hkv, T, Dh): query head i reads K/V head i // (H / Hkv).

The diagnosis is computed: the check builds what each typical mistake would return and
says which one the answer matches.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
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

# --- the KV-cache size ------------------------------------------------------------------------

#: (n_layers, n_heads, n_kv_heads, d_head, seq_len, batch, bytes_per_value). In the first
#: case the mistakes multiply the answer by 1/2, H/Hkv = 3, 1/L = 1/5, 1/B = 1/7 and 8:
#: every combination of them gives another number, so the diagnosis is unambiguous.
_KV_CASES = (
    (5, 6, 2, 16, 10, 7, 2),
    (80, 64, 8, 128, 4096, 1, 2),
    (7, 6, 3, 11, 13, 4, 4),
)

#: Each mistake multiplies the right answer by a factor that depends on the case.
_KV_MISTAKES = {
    "no_two": (lambda L, H, Hkv, Dh, T, B, b: 1 / 2,
               "K と V の 2 つ分を数えていません（係数 2 がありません）。キャッシュにはキーと"
               "バリューの両方を置きます。"),
    "query_heads": (lambda L, H, Hkv, Dh, T, B, b: H / Hkv,
                    "K/V ヘッド数 n_kv_heads ではなくクエリのヘッド数 n_heads を掛けています。"
                    "キャッシュに置くのは K/V ヘッドの分だけです。"),
    "one_layer": (lambda L, H, Hkv, Dh, T, B, b: 1 / L,
                  "1 層分しか数えていません。n_layers 層それぞれが自分の K と V を持ちます。"),
    "no_batch": (lambda L, H, Hkv, Dh, T, B, b: 1 / B,
                 "batch を掛け忘れています。系列ごとに別のキャッシュが要ります。"),
    "bits": (lambda L, H, Hkv, Dh, T, B, b: 8,
             "ビット数になっています。bytes_per_value はバイト数なので、8 を掛けないでください。"),
}


def _kv_reference(L, H, Hkv, Dh, T, B, b) -> int:
    return kv_cache_bytes(L, Hkv, Dh, T, batch_size=B, bytes_per_value=b)


def _as_number(value, case: str) -> float:
    if isinstance(value, Raised):
        raise Mistake(raised_message(value, case))
    if value is None:
        raise Mistake("None が返されました。最後に return を書き忘れていませんか。")
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Number):
        raise Mistake(
            f"返り値が {type(value).__name__} です。バイト数を 1 つの数で返してください。")
    return float(value)


def _diagnose_kv(got: float, case: tuple) -> str:
    right = _kv_reference(*case)
    for size in (1, 2, 3):
        for names in combinations(_KV_MISTAKES, size):
            factor = np.prod([_KV_MISTAKES[name][0](*case) for name in names])
            if np.isclose(got, right * factor, rtol=1e-9):
                return "".join(_KV_MISTAKES[name][1] for name in names)
    return (f"値 {got:.6g} が正しい {right} と一致しません。2（K と V）× n_layers × "
            "n_kv_heads × d_head × seq_len × batch × bytes_per_value です。")


@checker("既定の引数も含め kv_cache_bytes と一致。")
def check_kv_cache_bytes(func: Callable) -> None:
    """Check ``func(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=1,
    bytes_per_value=2)`` against :func:`attnlab.costs.kv_cache_bytes`.

    Diagnoses: K and V not both counted, query heads instead of K/V heads, one layer
    only, the batch forgotten, bits instead of bytes (and their combinations), wrong
    defaults.

    Taught in chapter 04.
    """
    for index, case in enumerate(_KV_CASES, start=1):
        name = f"ケース {index}"
        got = _as_number(call_student(func, *case), name)
        if not np.isclose(got, _kv_reference(*case), rtol=1e-12):
            raise Mistake(f"{name}: {_diagnose_kv(got, case)}")
    L, H, Hkv, Dh, T = _KV_CASES[0][:5]
    got = _as_number(call_student(func, L, H, Hkv, Dh, T), "既定の引数のケース")
    if not np.isclose(got, _kv_reference(L, H, Hkv, Dh, T, 1, 2), rtol=1e-12):
        raise Mistake(
            "batch と bytes_per_value を省いたときの値が違います。既定値は batch=1、"
            "bytes_per_value=2（fp16）です。"
            + _diagnose_kv(got, (L, H, Hkv, Dh, T, 1, 2)).removeprefix(
                f"値 {got:.6g} が正しい")
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
    for H, Hkv, T, Dh, masked in ((6, 2, 5, 4, False), (6, 3, 5, 4, True), (4, 4, 6, 3, False),
                                   (4, 1, 6, 3, True)):
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
            "で H 個に広げてから、ヘッドごとに softmax(q @ k の転置 / √Dh) を計算して"
            "いるか確かめてください。"
        )
