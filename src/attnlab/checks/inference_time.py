"""Chapter 11's self-checks: one step of a KV cache with RoPE, and merging two blocks of
the online softmax.

- ``cache_step(q, k, v, cache_k, cache_v, rope) -> (out, cache_k, cache_v)``: the n new
  tokens' q, k, v (H, n, Dh), not rotated yet; the cache (H, S, Dh) holds the keys of
  positions 0 … S−1 already rotated, and their values. The new tokens are at positions
  S … S+n−1: rotate q and k there, append k and v to the cache along the position axis,
  attend causally (a new token does not see the new tokens after it), return the output
  (H, n, Dh) and the grown cache (H, S+n, Dh) twice.
- ``merge_blocks(m_a, l_a, acc_a, m_b, l_b, acc_b) -> (m, l, acc)``: two blocks' running
  maximum m (Tq, 1), sum l = Σ exp(score − m) (Tq, 1) and weighted sum of values
  acc = Σ exp(score − m)·v (Tq, Dv), merged as if the scores were one block.

As every check of the book, the diagnosis is computed: each typical mistake is built from
the same inputs, and the answer is compared with each.
"""

from __future__ import annotations

import math

import numpy as np

from attnlab.checks.core import (
    Mistake,
    Raised,
    call_refusing,
    checker,
    raised_message,
    returned_array,
    shape_of,
)
from attnlab.inference import decode, online_softmax_attention
from attnlab.positional import RoPE

_CACHE_REFERENCES = (decode,)  # the whole model's step: it would do the exercise
_MERGE_REFERENCES = (online_softmax_attention,)  # the blocks merged inside it


# --- the cache step ------------------------------------------------------------------------

#: (case name, H, S cached, n new, Dh, RoPE base): an empty cache (a prefill), one new
#: token, a chunk of new tokens, another base.
_CACHE_CASES = (
    ("キャッシュ 5・新しいトークン 3 のケース", 2, 5, 3, 8, 10000.0),
    ("キャッシュ 7・新しいトークン 1 のケース", 3, 7, 1, 6, 10000.0),
    ("空のキャッシュ・新しいトークン 4 のケース（プレフィル）", 2, 0, 4, 8, 10000.0),
    ("キャッシュ 6・新しいトークン 2・base 100 のケース", 1, 6, 2, 4, 100.0),
    ("キャッシュ 3・新しいトークン 3 のケース", 2, 3, 3, 4, 10000.0),
)


def _attend(q, keys, values, query_pos, key_pos, causal=True):
    scores = q @ keys.swapaxes(-1, -2) / math.sqrt(q.shape[-1])  # (H, n, S + n)
    if causal:
        scores = np.where(key_pos[None, :] <= query_pos[:, None], scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ values  # (H, n, Dh)


def _cache_variants(q, k, v, cache_k, cache_v, rope):
    """The right output and what each typical mistake returns: name → (out, cache_k)."""
    S, n = cache_k.shape[1], q.shape[1]
    pos = S + np.arange(n)  # (n,)
    all_pos = np.arange(S + n)  # (S + n,)
    q_r, k_r = rope.apply(q, pos), rope.apply(k, pos)
    keys = np.concatenate([cache_k, k_r], axis=1)  # (H, S + n, Dh)
    values = np.concatenate([cache_v, v], axis=1)
    variants = {"right": (_attend(q_r, keys, values, pos, all_pos), keys)}
    restart = np.arange(n)  # positions restarting at 0 for the new tokens
    k_0 = np.concatenate([cache_k, rope.apply(k, restart)], axis=1)
    variants["restart"] = (_attend(rope.apply(q, restart), k_0, values, pos, all_pos), k_0)
    # the same restart in the mask too: query t sees only keys 0 … t of the whole cache
    variants["restart mask"] = (_attend(rope.apply(q, restart), k_0, values, restart,
                                        all_pos), k_0)
    again = np.concatenate([rope.apply(cache_k, np.arange(S)), k_r], axis=1)
    variants["twice"] = (_attend(q_r, again, values, pos, all_pos), again)  # cached keys
    twice = rope.apply(keys, all_pos)  # every key rotated once more, the new ones too
    variants["twice all"] = (_attend(q_r, twice, values, pos, all_pos), twice)
    variants["unmasked"] = (_attend(q_r, keys, values, pos, all_pos, causal=False), keys)
    raw = np.concatenate([cache_k, k], axis=1)
    variants["unrotated"] = (_attend(q, raw, values, pos, all_pos), raw)
    return variants


_AXIS = ("キャッシュは位置の軸（(H, S, Dh) の S、axis=1 か axis=-2）で足します。"
         "連結する軸を確かめてください。")

_CACHE_DIAGNOSES = {
    "restart": (
        "新しいトークンの位置を 0 から数え直しています。キャッシュに S 個のトークンがあれば、"
        "新しいトークンの位置は S, S+1, … です（positions = S + np.arange(n)）。"
    ),
    "restart mask": (
        "新しいトークンの位置を 0 から数え直しています（回転にもマスクにも同じ位置を"
        "使っています）。そのため q と k の回転がずれ、マスクも新しいトークン t に"
        "キャッシュの位置 0 … t しか見せません。キャッシュに S 個のトークンがあれば、"
        "新しいトークンの位置は S, S+1, … です（positions = S + np.arange(n)）。"
        "回転とマスクの両方にこの位置を使います。"
    ),
    "twice": (
        "キャッシュのキーをもう一度回しています。キャッシュのキーは書き込んだときに"
        "すでに自分の位置で回してあるので、回すのは新しい q と k だけです。"
    ),
    "twice all": (
        "キーを 2 回回しています（足したあとのキャッシュ全体をもう一度回しています）。"
        "キャッシュのキーはすでに回してあり、新しい k も一度回したら、そのまま足します。"
    ),
    "unmasked": (
        "新しいトークンどうしにマスクがありません。キャッシュに足したあとのキーのうち、"
        "クエリより後の位置のものは見えないようにします（key_pos <= query_pos）。"
        "1 トークンずつなら気づきませんが、プレフィルで未来を読んでしまいます。"
    ),
    "unrotated": (
        "q と k を回していません。RoPE のモデルでは、新しいトークンの q と k を"
        "その位置で回してから、k をキャッシュに足します。"
    ),
}


def _check_cache_case(func, case, H, S, n, Dh, base, rng):
    rope = RoPE(base=base)
    q, k, v = rng.standard_normal((3, H, n, Dh))  # (H, n, Dh) each
    cache_v = rng.standard_normal((H, S, Dh))
    cache_k = rope.apply(rng.standard_normal((H, S, Dh)), np.arange(S))  # rotated
    result = call_refusing(func, _CACHE_REFERENCES, q, k, v, cache_k, cache_v, rope)
    if isinstance(result, Raised):
        if "concatenat" in str(result.error) or "dimension" in str(result.error):
            raise Mistake(raised_message(result, case) + _AXIS)
        raise Mistake(raised_message(result, case))
    if not isinstance(result, tuple | list) or len(result) != 3:
        raise Mistake(f"{case}で返り値が (out, cache_k, cache_v) の 3 つ組ではありません。"
                      "return out, cache_k, cache_v と書いてください。")
    out_value, k_value, v_value = result
    grown = (H, S + n, Dh)
    for name, value in (("cache_k", k_value), ("cache_v", v_value)):
        shape = shape_of(value)
        if shape is not None and len(shape) == 3 and shape != grown and (
                math.prod(shape) == math.prod(grown)):
            raise Mistake(f"{case}で {name} の形が {shape} です（{grown} のはず）。" + _AXIS)
    out_value = returned_array(out_value, f"{case}の out", (H, n, Dh))
    k_value = returned_array(k_value, f"{case}の cache_k", grown)
    v_value = returned_array(v_value, f"{case}の cache_v", grown)
    variants = _cache_variants(q, k, v, cache_k, cache_v, rope)
    right_out, right_keys = variants["right"]
    if np.allclose(out_value, right_out, atol=1e-5) and np.allclose(k_value, right_keys,
                                                                    atol=1e-5):
        if not np.allclose(v_value, np.concatenate([cache_v, v], axis=1), atol=1e-5):
            raise Mistake(f"{case}で cache_v が違います。バリューは回さずに、"
                          "そのままキャッシュに足します。")
        return
    for name, (out_wrong, _keys) in variants.items():
        if name != "right" and np.allclose(out_value, out_wrong, atol=1e-5):
            raise Mistake(f"{case}で出力が違います。" + _CACHE_DIAGNOSES[name])
    if np.allclose(out_value, right_out, atol=1e-5):
        raise Mistake(f"{case}で、出力は正しいのに、返した cache_k が違います。"
                      "キャッシュには回したあとの新しいキーを足して返します"
                      "（次のステップで回し直さずに使うため）。")
    raise Mistake(f"{case}で出力が違います。位置 S … S+n−1 で q と k を回し、k と v を "
                  "axis=1 でキャッシュに足し、因果マスクを掛けて softmax を取ります。")


@checker("どのケースでも、位置・回転・マスク・連結の軸が正しい。")
def check_cache_step(func) -> None:
    """Check ``func(q, k, v, cache_k, cache_v, rope) -> (out, cache_k, cache_v)``.

    q, k, v (H, n, Dh) are the new tokens' projections before RoPE; cache_k and cache_v
    (H, S, Dh) hold positions 0 … S−1, the keys already rotated.

    Taught in chapter 11.
    """
    rng = np.random.default_rng(11)
    for case in _CACHE_CASES:
        _check_cache_case(func, *case, rng)


# --- merging two blocks of the online softmax ------------------------------------------------

def _block_stats(scores, values):
    """m (Tq, 1), l (Tq, 1), acc (Tq, Dv) of one block; fully masked rows: −inf, 0, 0."""
    m = scores.max(axis=-1, keepdims=True)  # (Tq, 1)
    safe = np.where(np.isfinite(m), m, 0.0)
    p = np.where(np.isfinite(scores), np.exp(scores - safe), 0.0)  # (Tq, b)
    return m, p.sum(axis=-1, keepdims=True), p @ values


#: (case name, Tq, block sizes, Dv, score scale, rows of block b fully masked)
_MERGE_CASES = (
    ("2 ブロック（4 キーと 3 キー）のケース", 5, (4, 3), 6, 1.0, False),
    ("2 つ目のブロックのほうがスコアが大きいケース", 3, (2, 5), 4, 3.0, False),
    ("スコアが 1000 前後の大きなケース", 4, (3, 3), 5, 1000.0, False),
    ("2 つ目のブロックが一部のクエリで全部隠れたケース", 4, (3, 4), 3, 1.0, True),
)


def _merge_case(Tq, blocks, Dv, scale, masked, rng):
    scores = [scale * rng.standard_normal((Tq, b)) for b in blocks]
    if scale == 3.0:
        scores[1] = scores[1] + 4.0  # the second block's maximum is larger
    if masked:
        scores[1][: Tq // 2] = -np.inf  # these queries see no key of block b
    values = [rng.standard_normal((b, Dv)) for b in blocks]
    every = np.concatenate(scores, axis=1)  # (Tq, Tk)
    weights = np.exp(every - every.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    want = weights @ np.concatenate(values)  # (Tq, Dv)
    return [_block_stats(s, v) for s, v in zip(scores, values, strict=True)], want


def _merge_variants(a, b):
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = np.maximum(m_a, m_b)
    fa = np.where(np.isfinite(m_a), np.exp(m_a - m), 0.0)
    fb = np.where(np.isfinite(m_b), np.exp(m_b - m), 0.0)
    return {
        "old sum": (m, l_a + l_b * fb, acc_a * fa + acc_b * fb),
        "twice": (m, l_a * fa + l_b * fb, acc_a * fa * fa + acc_b * fb * fb),
        "no max": (m_b, l_a + l_b, acc_a + acc_b),
        "no rescale": (m, l_a + l_b, acc_a + acc_b),
        "sums not rescaled": (m, l_a + l_b, acc_a * fa + acc_b * fb),
    }


def _same(one, other) -> bool:
    """Whether two (m, l, acc) triples hold the same values (inf and nan included)."""
    with np.errstate(all="ignore"):
        return all(np.allclose(x, y, rtol=1e-5, atol=1e-9, equal_nan=True)
                   for x, y in zip(one, other, strict=True))


_MERGE_DIAGNOSES = {
    "old sum": ("それまでの和 l_a を縮め直していません。最大値が m_a から m に変わったら、"
                "l_a にも acc_a と同じ exp(m_a − m) を掛けます。"),
    "twice": ("出力の和 acc に縮める係数を 2 回掛けています。exp(m_a − m) は l_a と acc_a に "
              "1 回ずつ掛けます。"),
    "no max": ("いまの最大値を使っていません（2 つのブロックの max を取らずに m_b のまま、"
               "または係数なしで足しています）。m = max(m_a, m_b) とし、"
               "それぞれに exp(m_a − m)、exp(m_b − m) を掛けてから足します。"),
    "sums not rescaled": ("acc_a と acc_b は縮めているのに、l_a と l_b を縮めずに足して"
                          "います。l は acc と同じ基準 m で測るので、l_a に exp(m_a − m)、"
                          "l_b に exp(m_b − m) を、acc と同じように掛けてから足します。"),
    "no rescale": ("l と acc を縮めずに足しています。2 つのブロックは違う最大値を引いて"
                   "計算してあるので、m = max(m_a, m_b) に揃えてから足します。"),
}


@checker("どのケースでも 1 つの softmax と一致。")
def check_merge_blocks(func) -> None:
    """Check ``func(m_a, l_a, acc_a, m_b, l_b, acc_b) -> (m, l, acc)``: acc / l must be
    the softmax attention over both blocks, with l and acc measured from the returned m.

    Taught in chapter 11.
    """
    rng = np.random.default_rng(12)
    for case, Tq, blocks, Dv, scale, masked in _MERGE_CASES:
        (a, b), want = _merge_case(Tq, blocks, Dv, scale, masked, rng)
        result = call_refusing(func, _MERGE_REFERENCES, *a, *b)
        if isinstance(result, Raised):
            raise Mistake(raised_message(result, case))
        if not isinstance(result, tuple | list) or len(result) != 3:
            raise Mistake(f"{case}で返り値が (m, l, acc) の 3 つ組ではありません。"
                          "return m, l, acc と書いてください。")
        m = returned_array(result[0], f"{case}の m", (Tq, 1))
        l_sum = returned_array(result[1], f"{case}の l", (Tq, 1))
        acc = returned_array(result[2], f"{case}の acc", (Tq, Dv))
        if not (np.all(np.isfinite(l_sum)) and np.all(np.isfinite(acc))):
            raise Mistake(f"{case}で l か acc に inf か nan があります。exp を取る前に、"
                          "いまの最大値 m = max(m_a, m_b) を引いてください"
                          "（全部隠れたブロックは m_b = −inf、l_b = 0 です）。")
        total = a[1] * np.exp(a[0] - np.maximum(a[0], b[0]))  # (Tq, 1) reference l
        total = total + np.where(np.isfinite(b[0]), b[1] * np.exp(
            np.where(np.isfinite(b[0]), b[0], 0.0) - np.maximum(a[0], b[0])), 0.0)
        # l measured from the returned m: m + log l is the log-sum-exp of the scores,
        # to float32's spacing at |m| (an m near 3000 in float32 is off by ~2e-4)
        with np.errstate(all="ignore"):
            lse = np.asarray(m, dtype=float) + np.log(np.asarray(l_sum, dtype=float))
            right_lse = np.maximum(a[0], b[0]) + np.log(total)
        ok = (np.allclose(acc / l_sum, want, rtol=1e-5, atol=1e-7)
              and np.all(np.abs(lse - right_lse) <= 1e-5 + 3e-7 * np.abs(right_lse)))
        if ok:
            continue
        m_right = np.maximum(a[0], b[0])
        right = (m_right, total, want * total)
        for name, wrong in _merge_variants(a, b).items():
            if _same(wrong, right):
                continue  # this case cannot tell that mistake from the right answer
            if _same((m, l_sum, acc), wrong):
                raise Mistake(f"{case}で値が違います。" + _MERGE_DIAGNOSES[name])
        if np.allclose(acc / l_sum, want, rtol=1e-5, atol=1e-7):
            raise Mistake(f"{case}で acc / l は正しいのに、l が返した m から測った和 "
                          "Σ exp(スコア − m) になっていません。m、l、acc は同じ m を基準に"
                          "します。")
        raise Mistake(f"{case}で値が違います。m = max(m_a, m_b)、"
                      "l = l_a·exp(m_a − m) + l_b·exp(m_b − m)、acc も同じ係数で足します。")
