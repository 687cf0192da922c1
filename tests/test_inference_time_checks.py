"""Chapter 11's self-checks accept every correct style and name each typical mistake."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.attention import scaled_dot_product_attention, softmax
from attnlab.checks import check_cache_step, check_merge_blocks
from attnlab.inference import decode, online_softmax_attention
from scripts.book import SOLUTION_COLUMNS, display_width

# --- the cache step ------------------------------------------------------------------------

def cache_step(q, k, v, cache_k, cache_v, rope, *, start=None, again=False, mask=True,
               rotate=True, axis=1, mask_start=None):
    S, n = cache_k.shape[1], q.shape[1]
    pos = (S if start is None else start) + np.arange(n)  # (n,)
    if rotate:
        q, k = rope.apply(q, pos), rope.apply(k, pos)
    if again:
        cache_k = rope.apply(cache_k, np.arange(S))
    cache_k = np.concatenate([cache_k, k], axis=axis)
    cache_v = np.concatenate([cache_v, v], axis=axis)
    key_pos = np.arange(cache_k.shape[1])
    query_pos = (S if mask_start is None else mask_start) + np.arange(n)  # (n,)
    visible = key_pos[None, :] <= query_pos[:, None] if mask else None
    out, _ = scaled_dot_product_attention(q, cache_k, cache_v, visible)
    return out, cache_k, cache_v


def right(*args):
    return cache_step(*args)


def loops(q, k, v, cache_k, cache_v, rope):
    H, n, Dh = q.shape
    S = cache_k.shape[1]
    keys, values = list(cache_k.transpose(1, 0, 2)), list(cache_v.transpose(1, 0, 2))
    out = np.zeros((H, n, Dh))
    for t in range(n):  # one token at a time: the prefill as n decode steps
        p = S + t
        keys.append(rope.apply(k[:, t:t + 1], [p])[:, 0])
        values.append(v[:, t])
        q_t = rope.apply(q[:, t:t + 1], [p])[:, 0]  # (H, Dh)
        for h in range(H):
            scores = np.array([q_t[h] @ key[h] for key in keys]) / math.sqrt(Dh)
            out[h, t] = softmax(scores) @ np.array([value[h] for value in values])
    return out, np.stack(keys, axis=1), np.stack(values, axis=1)


def float32(*args):
    return tuple(a.astype(np.float32) for a in cache_step(*args))


@pytest.mark.parametrize("answer", [right, loops, float32])
def test_correct_cache_steps_pass(answer, capsys):
    assert check_cache_step(answer)
    out = capsys.readouterr().out
    assert "【正解】" in out
    assert display_width(out.rstrip("\n").replace(answer.__name__, "my_cache_step")) \
        <= SOLUTION_COLUMNS


@pytest.mark.parametrize("mistake, words", [
    (dict(start=0), "0 から数え直しています"),
    # the natural restart: pos = np.arange(n) for the rotation and the mask alike
    (dict(start=0, mask_start=0), "回転にもマスクにも同じ位置"),
    (dict(again=True), "キャッシュのキーをもう一度回しています"),
    (dict(mask=False), "マスクがありません"),
    (dict(rotate=False), "q と k を回していません"),
    (dict(axis=0), "連結する軸"),
    (dict(axis=2), "連結する軸"),
])
def test_each_cache_mistake_gets_its_diagnosis(mistake, words, capsys):
    def my_cache_step(*args):
        return cache_step(*args, **mistake)

    assert not check_cache_step(my_cache_step)
    out = capsys.readouterr().out
    assert "【不正解】" in out and words in out, out


def test_rotating_the_whole_grown_cache_again_is_named(capsys):
    def my_cache_step(q, k, v, cache_k, cache_v, rope):
        S, n = cache_k.shape[1], q.shape[1]
        pos = S + np.arange(n)
        q, k = rope.apply(q, pos), rope.apply(k, pos)
        cache_k = rope.apply(np.concatenate([cache_k, k], axis=1), np.arange(S + n))
        cache_v = np.concatenate([cache_v, v], axis=1)
        mask = np.arange(S + n)[None, :] <= pos[:, None]
        return scaled_dot_product_attention(q, cache_k, cache_v, mask)[0], cache_k, cache_v

    assert not check_cache_step(my_cache_step)
    assert "キーを 2 回回しています" in capsys.readouterr().out


def test_returning_the_old_cache_is_named(capsys):
    def my_cache_step(q, k, v, cache_k, cache_v, rope):
        out, _, _ = cache_step(q, k, v, cache_k, cache_v, rope)
        return out, cache_k, cache_v

    assert not check_cache_step(my_cache_step)
    assert "【不正解】" in capsys.readouterr().out


def test_the_cache_check_refuses_the_models_decode(capsys):
    def my_cache_step(q, k, v, cache_k, cache_v, rope):
        try:
            decode(None, None, None, None)
        except Exception:
            pass
        return cache_step(q, k, v, cache_k, cache_v, rope)

    assert not check_cache_step(my_cache_step)
    assert "attnlab の decode を使っています" in capsys.readouterr().out


# --- merging two blocks ----------------------------------------------------------------------

def merge(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = np.maximum(m_a, m_b)
    return m, l_a * np.exp(m_a - m) + l_b * np.exp(m_b - m), \
        acc_a * np.exp(m_a - m) + acc_b * np.exp(m_b - m)


def merge_loops(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m, l_sum, acc = (np.zeros_like(m_a), np.zeros_like(l_a), np.zeros_like(acc_a))
    for i in range(len(m_a)):
        top = max(m_a[i, 0], m_b[i, 0])
        fa = math.exp(m_a[i, 0] - top)
        fb = 0.0 if m_b[i, 0] == -math.inf else math.exp(m_b[i, 0] - top)
        m[i], l_sum[i], acc[i] = top, l_a[i] * fa + l_b[i] * fb, acc_a[i] * fa + acc_b[i] * fb
    return m, l_sum, acc


def merge_other_reference(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = np.maximum(m_a, m_b) + 2.0  # any common reference ≥ the max is as good
    return m, l_a * np.exp(m_a - m) + l_b * np.exp(m_b - m), \
        acc_a * np.exp(m_a - m) + acc_b * np.exp(m_b - m)


def merge_float32(*args):
    return tuple(np.asarray(a, dtype=np.float32) for a in merge(*args))


@pytest.mark.parametrize("answer", [merge, merge_loops, merge_other_reference,
                                    merge_float32])
def test_correct_merges_pass(answer, capsys):
    assert check_merge_blocks(answer)
    out = capsys.readouterr().out
    assert "【正解】" in out
    assert display_width(out.rstrip("\n").replace(answer.__name__, "my_merge_blocks")) \
        <= SOLUTION_COLUMNS


def old_sum(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = np.maximum(m_a, m_b)
    return m, l_a + l_b * np.exp(m_b - m), acc_a * np.exp(m_a - m) + acc_b * np.exp(m_b - m)


def twice(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = np.maximum(m_a, m_b)
    fa, fb = np.exp(m_a - m), np.exp(m_b - m)
    return m, l_a * fa + l_b * fb, (acc_a * fa) * fa + (acc_b * fb) * fb


def no_max(m_a, l_a, acc_a, m_b, l_b, acc_b):
    return m_b, l_a + l_b, acc_a + acc_b


def no_rescale(m_a, l_a, acc_a, m_b, l_b, acc_b):
    return np.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b


def sums_not_rescaled(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = np.maximum(m_a, m_b)
    return m, l_a + l_b, acc_a * np.exp(m_a - m) + acc_b * np.exp(m_b - m)


def exp_without_max(m_a, l_a, acc_a, m_b, l_b, acc_b):
    # undo each block's max and add: exp(1000) overflows
    return np.zeros_like(m_a), l_a * np.exp(m_a) + l_b * np.exp(m_b), \
        acc_a * np.exp(m_a) + acc_b * np.exp(m_b)


@pytest.mark.parametrize("answer, words", [
    (old_sum, "それまでの和 l_a を縮め直していません"),
    (twice, "係数を 2 回掛けています"),
    (no_max, "いまの最大値を使っていません"),
    (no_rescale, "l と acc を縮めずに足しています"),
    (sums_not_rescaled, "acc_a と acc_b は縮めているのに"),
    (exp_without_max, "inf か nan"),
])
def test_each_merge_mistake_gets_its_diagnosis(answer, words, capsys):
    assert not check_merge_blocks(answer)
    out = capsys.readouterr().out
    assert "【不正解】" in out and words in out, out


def test_the_merge_check_refuses_the_online_softmax(capsys):
    def my_merge_blocks(*args):
        online_softmax_attention(np.ones((1, 2)), np.ones((1, 2)), np.ones((1, 2)))
        return merge(*args)

    assert not check_merge_blocks(my_merge_blocks)
    assert "attnlab の online_softmax_attention を使っています" in capsys.readouterr().out


# --- both ------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", [check_cache_step, check_merge_blocks])
def test_a_stub_is_unimplemented(check, capsys):
    def stub(*args):
        raise NotImplementedError("ここを実装してください")

    result = check(stub)
    assert not result and result.verdict == "未実装"
    assert "【未実装】" in capsys.readouterr().out


@pytest.mark.parametrize("check", [check_cache_step, check_merge_blocks])
def test_an_error_in_the_answer_is_one_line(check, capsys):
    def broken(*args):
        return 1 / 0

    assert not check(broken)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "ZeroDivisionError" in out and "Traceback" not in out


@settings(max_examples=30, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.floats(), st.text(),
                 st.lists(st.floats(allow_nan=False), max_size=5),
                 st.tuples(st.integers(), st.floats(), st.none())))
def test_any_return_value_gives_one_line(value):
    for check in (check_cache_step, check_merge_blocks):
        result = check.evaluate(lambda *args, value=value: value)
        assert result.verdict in ("正解", "不正解")
        assert "\n" not in result.message
