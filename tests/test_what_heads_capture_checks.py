"""Chapter 04's self-checks: every correct style passes, every listed mistake is named."""

import numpy as np
import pytest

from attnlab.attention import softmax
from attnlab.checks import check_grouped_query_attention, check_kv_cache_bytes


def _verdict(capsys, check, func):
    ok = check(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return ok, text


# --- check_kv_cache_bytes -----------------------------------------------------------------------


def kv_formula(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value


def kv_loop(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    total = 0
    for _ in range(n_layers):
        for _ in ("K", "V"):
            total += n_kv_heads * d_head * seq_len * batch * bytes_per_value
    return total


def kv_numpy(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    return np.prod(np.array([2, n_layers, n_kv_heads, d_head, seq_len, batch,
                             bytes_per_value], dtype=np.int64))  # a numpy integer


def kv_float(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    bits = 16.0 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value
    return bits / 8  # a float with the right value


@pytest.mark.parametrize("func", [kv_formula, kv_loop, kv_numpy, kv_float])
def test_kv_every_correct_style_passes(capsys, func):
    ok, text = _verdict(capsys, check_kv_cache_bytes, func)
    assert ok and text.startswith("【正解】")


def wrong_kv(*, two=2, heads="kv", layers=True, batch_used=True, bits=False, batch_default=1):
    def my_kv(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=batch_default,
              bytes_per_value=2):
        count = n_kv_heads if heads == "kv" else n_heads
        value = two * (n_layers if layers else 1) * count * d_head * seq_len
        value *= batch if batch_used else 1
        return value * bytes_per_value * (8 if bits else 1)

    return my_kv


@pytest.mark.parametrize("mistake, words", [
    (dict(two=1), ["K と V", "係数 2"]),
    (dict(heads="query"), ["n_heads", "K/V ヘッドの分だけ"]),
    (dict(layers=False), ["1 層分"]),
    (dict(batch_used=False), ["batch を掛け忘れ"]),
    (dict(bits=True), ["ビット"]),
    (dict(two=1, bits=True), ["係数 2", "ビット"]),
    (dict(heads="query", layers=False), ["n_heads", "1 層分"]),
    (dict(batch_default=2), ["既定値"]),
])
def test_kv_each_mistake_is_named(capsys, mistake, words):
    ok, text = _verdict(capsys, check_kv_cache_bytes, wrong_kv(**mistake))
    assert not ok and text.startswith("【不正解】")
    for word in words:
        assert word in text, text


def test_kv_stub_none_text_and_exceptions(capsys):
    def stub(n_layers, n_heads, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
        raise NotImplementedError

    ok, text = _verdict(capsys, check_kv_cache_bytes, stub)
    assert not ok and "【未実装】" in text
    for func, word in [(lambda *a, **k: None, "None"), (lambda *a, **k: "big", "str"),
                       (lambda *a, **k: 1 / 0, "ZeroDivisionError"),
                       (lambda *a, **k: 12345, "一致しません")]:
        ok, text = _verdict(capsys, check_kv_cache_bytes, func)
        assert not ok and word in text, text


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
