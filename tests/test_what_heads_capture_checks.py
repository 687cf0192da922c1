"""Chapter 04's self-checks: every correct style passes, every listed mistake is named."""

from itertools import combinations

import numpy as np
import pytest

from attnlab.attention import softmax
from attnlab.checks import check_grouped_query_attention, check_max_context
from attnlab.checks.what_heads_capture import _CONTEXT_CASES, _context_candidates, _gqa_cases
from attnlab.costs import kv_cache_bytes


def _verdict(capsys, check, func):
    ok = check(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return ok, text


# --- check_max_context --------------------------------------------------------------------------


def context_floor_division(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1,
                           bytes_per_value=2):
    per_token = 2 * n_layers * n_kv_heads * d_head * batch * bytes_per_value
    return memory_bytes // per_token


def context_int(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1,
                bytes_per_value=2):
    return int(memory_bytes / (2 * n_layers * n_kv_heads * d_head * batch * bytes_per_value))


def context_numpy_floor(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1,
                        bytes_per_value=2):
    per_token = np.prod([2, n_layers, n_kv_heads, d_head, batch, bytes_per_value])
    return np.floor(memory_bytes / per_token)  # a numpy float with a whole value


def context_with_kv_cache_bytes(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1,
                                bytes_per_value=2):
    # the package's formula for one token is allowed: the exercise asks for its consequence
    return memory_bytes // kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, batch,
                                          bytes_per_value)


def context_search(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1,
                   bytes_per_value=2):
    def cache(tokens):
        return 2 * n_layers * n_kv_heads * d_head * tokens * batch * bytes_per_value

    low, high = 0, 1
    while cache(high) <= memory_bytes:
        high *= 2
    while high - low > 1:  # the last length that fits
        middle = (low + high) // 2
        low, high = (middle, high) if cache(middle) <= memory_bytes else (low, middle)
    return low


@pytest.mark.parametrize("func", [context_floor_division, context_int, context_numpy_floor,
                                  context_with_kv_cache_bytes, context_search])
def test_context_every_correct_style_passes(capsys, func):
    ok, text = _verdict(capsys, check_max_context, func)
    assert ok and text.startswith("【正解】"), text


def wrong_context(*, two=2, heads="kv", layers=True, batch_used=True, bits=False,
                  rounding="floor", batch_default=1):
    def my_max_context(memory_bytes, n_layers, n_heads, n_kv_heads, d_head,
                       batch=batch_default, bytes_per_value=2):
        count = n_kv_heads if heads == "kv" else n_heads
        per_token = two * (n_layers if layers else 1) * count * d_head
        per_token *= batch if batch_used else 1
        per_token *= bytes_per_value * (8 if bits else 1)
        tokens = memory_bytes / per_token
        return {"floor": np.floor, "round": round, "ceil": np.ceil,
                "none": float}[rounding](tokens)

    return my_max_context


@pytest.mark.parametrize("mistake, words", [
    (dict(two=1), ["K と V", "係数 2"]),
    (dict(heads="query"), ["n_heads", "K/V ヘッドの分だけ"]),
    (dict(layers=False), ["1 層分"]),
    (dict(batch_used=False), ["batch を掛け忘れ"]),
    (dict(bits=True), ["ビット"]),
    (dict(rounding="round"), ["四捨五入"]),
    (dict(rounding="ceil"), ["切り上げ"]),
    (dict(rounding="none"), ["切り捨てずに"]),
    (dict(two=1, bits=True), ["係数 2", "ビット"]),
    (dict(heads="query", layers=False), ["n_heads", "1 層分"]),
    (dict(heads="query", rounding="round"), ["n_heads", "四捨五入"]),
    (dict(batch_default=2), ["既定値"]),
])
def test_context_each_mistake_is_named(capsys, mistake, words):
    ok, text = _verdict(capsys, check_max_context, wrong_context(**mistake))
    assert not ok and text.startswith("【不正解】")
    for word in words:
        assert word in text, text


def test_context_stub_none_text_and_exceptions(capsys):
    def stub(memory_bytes, n_layers, n_heads, n_kv_heads, d_head, batch=1, bytes_per_value=2):
        raise NotImplementedError

    ok, text = _verdict(capsys, check_max_context, stub)
    assert not ok and "【未実装】" in text
    for func, word in [(lambda *a, **k: None, "None"), (lambda *a, **k: "big", "str"),
                       (lambda *a, **k: 1 / 0, "ZeroDivisionError"),
                       (lambda *a, **k: 12345, "一致しません")]:
        ok, text = _verdict(capsys, check_max_context, func)
        assert not ok and word in text, text


def test_context_cases_tell_every_single_mistake_and_rounding_apart():
    candidates = [_context_candidates(case) for case in _CONTEXT_CASES]
    singles = [key for key in candidates[0] if len(key[0]) <= 1]
    answers = {key: tuple(found[key] for found in candidates) for key in singles}
    assert len(set(answers.values())) == len(singles)  # each has its own list of answers
    fractions = [case[0] / kv_cache_bytes(case[1], *case[3:5], 1, *case[5:]) % 1
                 for case in _CONTEXT_CASES]
    assert all(0.05 < f < 0.95 for f in fractions)  # no budget is a multiple
    assert min(fractions) < 0.5 < max(fractions)  # round is floor once, ceil once
    for _, L, H, Hkv, Dh, *_ in _CONTEXT_CASES[:2]:
        assert all(n & (n - 1) for n in (L, H, Hkv, Dh))  # no power of two


@pytest.mark.parametrize("names", [names for size in (1, 2)
                                   for names in combinations(
                                       ["no_two", "query_heads", "one_layer", "no_batch",
                                        "bits"], size)])
@pytest.mark.parametrize("rounding", ["floor", "round", "ceil", "none"])
def test_context_every_pair_of_mistakes_is_named(capsys, names, rounding):
    words = {"no_two": "係数 2", "query_heads": "n_heads を掛けて", "one_layer": "1 層分",
             "no_batch": "batch を掛け忘れ", "bits": "ビット数"}
    func = wrong_context(two=1 if "no_two" in names else 2,
                         heads="query" if "query_heads" in names else "kv",
                         layers="one_layer" not in names, batch_used="no_batch" not in names,
                         bits="bits" in names, rounding=rounding)
    ok, text = _verdict(capsys, check_max_context, func)
    assert not ok
    for name in names:
        assert words[name] in text, text
    for name in set(words) - set(names):
        assert words[name] not in text, text
    if rounding == "none":
        assert "切り捨てずに" in text, text


def test_an_answer_right_only_for_a_round_budget_is_refused(capsys):
    # 80 GiB for Llama 2 70B divides exactly (2.5 MiB per token with MHA, 320 KiB with
    # GQA): rounding instead of flooring is right there, and wrong in the hidden cases
    func = wrong_context(rounding="round")
    for n_kv_heads in (64, 8):
        args = (80 * 2**30, 80, 64, n_kv_heads, 128)
        assert func(*args) == context_floor_division(*args)
    ok, text = _verdict(capsys, check_max_context, func)
    assert not ok and "四捨五入" in text


# --- check_grouped_query_attention --------------------------------------------------------------


def gqa_repeat(q, k, v, mask=None):
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return weights @ v, weights


def gqa_loop(q, k, v, mask=None):
    H, Hkv = q.shape[0], k.shape[0]
    outs, weights = [], []
    for i in range(H):
        j = i // (H // Hkv)
        s = q[i] @ k[j].T / np.sqrt(q.shape[-1])
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        w = e / e.sum(axis=-1, keepdims=True)
        outs.append(w @ v[j])
        weights.append(w)
    return np.array(outs), np.array(weights)


def gqa_float32_einsum(q, k, v, mask=None):
    q, k, v = (a.astype(np.float32) for a in (q, k, v))
    Hkv, T, Dh = k.shape
    qg = q.reshape(Hkv, -1, T, Dh)  # (Hkv, group, T, Dh)
    s = np.einsum("ggtd,gsd->ggts".replace("gg", "ab").replace("gsd", "asd"), qg, k)
    s = s / np.float32(np.sqrt(Dh))
    if mask is not None:
        s = np.where(mask, s, np.float32(-np.inf))
    w = softmax(s, axis=-1).astype(np.float32)
    out = np.einsum("abts,asd->abtd", w, v)
    return out.reshape(-1, T, Dh), w.reshape(-1, T, T)


@pytest.mark.parametrize("func", [gqa_repeat, gqa_loop, gqa_float32_einsum])
def test_gqa_every_correct_style_passes(capsys, func):
    ok, text = _verdict(capsys, check_grouped_query_attention, func)
    assert ok and text.startswith("【正解】"), text


def gqa_tile(q, k, v, mask=None):
    reps = q.shape[0] // k.shape[0]
    return gqa_repeat(q, np.tile(k, (reps, 1, 1)), np.tile(v, (reps, 1, 1)), mask)


def gqa_modulo(q, k, v, mask=None):
    H, Hkv = q.shape[0], k.shape[0]
    order = [i % Hkv for i in range(H)]
    return gqa_repeat(q, k[order], v[order], mask)


def gqa_first(q, k, v, mask=None):
    H = q.shape[0]
    return gqa_repeat(q, np.repeat(k[:1], H, axis=0), np.repeat(v[:1], H, axis=0), mask)


def gqa_per_kv_head(q, k, v, mask=None):
    out, weights = gqa_repeat(q, k, v, mask)
    return out, weights[:: q.shape[0] // k.shape[0]]


def gqa_no_mask(q, k, v, mask=None):
    return gqa_repeat(q, k, v, None)


def gqa_no_scale(q, k, v, mask=None):
    return gqa_repeat(q * np.sqrt(q.shape[-1]), k, v, mask)


def gqa_wrong_out(q, k, v, mask=None):
    out, weights = gqa_repeat(q, k, v, mask)
    return out[::-1], weights


@pytest.mark.parametrize("func, words", [
    (gqa_tile, ["順番に配って", "i // (H // Hkv)"]),
    (gqa_modulo, ["i % Hkv"]),
    (gqa_first, ["K/V ヘッド 0 だけ"]),
    (gqa_per_kv_head, ["(Hkv, T, T)"]),
    (gqa_no_mask, ["mask を無視"]),
    (gqa_no_scale, ["一致しません"]),
    (gqa_wrong_out, ["出力が違います"]),
    (lambda q, k, v, mask=None: None, ["None"]),
    (lambda q, k, v, mask=None: gqa_repeat(q, k, v, mask)[0], ["2 つ組"]),
    (lambda q, k, v, mask=None: q.undefined, ["AttributeError"]),
])
def test_gqa_each_mistake_is_named(capsys, func, words):
    ok, text = _verdict(capsys, check_grouped_query_attention, func)
    assert not ok and text.startswith("【不正解】"), text
    for word in words:
        assert word in text, text


def test_gqa_stub_is_unimplemented(capsys):
    def stub(q, k, v, mask=None):
        raise NotImplementedError

    ok, text = _verdict(capsys, check_grouped_query_attention, stub)
    assert not ok and "【未実装】" in text


def gqa_fitted_to_the_toy(q, k, v, mask=None):
    """Right for the chapter's toy (groups of 2), wrong when a group has 3 query heads."""
    return gqa_repeat(q, np.repeat(k, 2, axis=0)[:q.shape[0]] if k.shape[0] * 2 >= q.shape[0]
                      else np.resize(k, q.shape), np.repeat(v, 2, axis=0)[:q.shape[0]]
                      if v.shape[0] * 2 >= q.shape[0] else np.resize(v, q.shape), mask)


def test_the_gqa_cases_include_sizes_that_are_not_powers_of_two():
    shapes = [(q.shape[0], k.shape[0], q.shape[-1]) for _, q, k, _, _ in _gqa_cases()]
    assert any(all(n & (n - 1) for n in (H, Hkv, Dh)) for H, Hkv, Dh in shapes)
    assert any(H // Hkv == 3 for H, Hkv, _ in shapes)


def test_a_gqa_fitted_to_the_toys_groups_is_refused(capsys):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(4, 5, 16)), rng.normal(size=(2, 5, 16)), rng.normal(size=(2, 5, 16))
    np.testing.assert_allclose(gqa_fitted_to_the_toy(q, k, v)[1], gqa_repeat(q, k, v)[1])
    ok, text = _verdict(capsys, check_grouped_query_attention, gqa_fitted_to_the_toy)
    assert not ok and text.startswith("【不正解】")
