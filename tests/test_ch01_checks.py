"""Chapter 01's self-check against answers written only for the chapter's example, and
against answers that call the package's own functions (the chapter imports them).

The chapter's example has T = 5 tokens, d_k = 4 and a causal mask; the hidden cases have
other sizes, none square and none a power of two, and a mask that is not causal.
"""

import sys

import numpy as np
import pytest

import attnlab.attention
from attnlab import scaled_dot_product_attention, softmax
from attnlab.checks import check_attention
from attnlab.checks.attention import _attention_cases


def _verdict(capsys, func):
    ok = check_attention(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text and text.count("\n") == 1, text
    return ok, text


def _attention(q, k, v, mask=None, divisor=None, causal=False):
    """A student's attention; ``divisor`` replaces √d_k, ``causal`` replaces ``mask``."""
    scores = q @ k.T / (np.sqrt(q.shape[-1]) if divisor is None else divisor(q, k, v))
    if causal and mask is not None:
        mask = np.tril(np.ones(scores.shape, dtype=bool))
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
    return weights @ v, weights


def test_the_hidden_cases_are_neither_square_nor_round_nor_the_example():
    cases = _attention_cases()
    assert len({(c.q.shape, c.k.shape, c.v.shape) for c in cases}) >= 2  # two sizes
    for case in cases:
        (Tq, d_k), Tk, d_v = case.q.shape, case.k.shape[0], case.v.shape[1]
        assert Tq != Tk and 5 not in (Tq, Tk) and 4 not in (d_k, d_v)  # not the example
        for size in (d_k, Tk, d_v):
            assert size & (size - 1) != 0  # not a power of two (1, 2, 4, 8, …)
        assert len({Tq, Tk, d_k, d_v}) == 4  # a size mixed up with another shows
    masks = [c.mask for c in cases if c.mask is not None and c.mask.shape[0] > 1]
    assert masks and not any(np.array_equal(m, np.tril(np.ones_like(m))) for m in masks)


# Answers that fit the example (√4 = 2, a causal mask) or mix up sizes that are equal or
# close there; the hidden cases tell every one of them apart.
WRITTEN_FOR_THE_EXAMPLE = {
    "√d_k hard-coded as 2 (d_k = 4)": (
        {"divisor": lambda q, k, v: 2.0}, "本文の例の √d_k（d_k = 4）を固定"),
    "√ of the number of keys": (
        {"divisor": lambda q, k, v: np.sqrt(k.shape[0])}, "キーの数 Tk（k.shape[0]）"),
    "√ of the number of queries": (
        {"divisor": lambda q, k, v: np.sqrt(q.shape[0])}, "クエリの数 Tq（q.shape[0]）"),
    "√ of the value width": (
        {"divisor": lambda q, k, v: np.sqrt(v.shape[-1])}, "バリューの幅 d_v（v.shape[-1]）"),
    "another constant": ({"divisor": lambda q, k, v: 3.0}, "スコアを 3 で割っているようです"),
    "its own causal mask": ({"causal": True}, "自分で作った因果マスク（np.tril）"),
}


@pytest.mark.parametrize("mistake, diagnosis", WRITTEN_FOR_THE_EXAMPLE.values(),
                         ids=WRITTEN_FOR_THE_EXAMPLE.keys())
def test_an_answer_right_only_for_the_chapters_example_is_rejected(capsys, mistake,
                                                                   diagnosis):
    def my_attention(q, k, v, mask=None):
        return _attention(q, k, v, mask, **mistake)

    # right on the chapter's example: T = 5, d_k = 4, causal mask
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 5, 4))
    causal = np.tril(np.ones((5, 5), dtype=bool))
    if "divisor" not in mistake or mistake["divisor"](q, k, v) == 2.0:
        for got, want in zip(my_attention(q, k, v, causal),
                             scaled_dot_product_attention(q, k, v, causal), strict=True):
            np.testing.assert_allclose(got, want)
    ok, text = _verdict(capsys, my_attention)
    assert ok is False and diagnosis in text


def test_loops_over_the_examples_five_tokens_are_rejected(capsys):
    def my_attention(q, k, v, mask=None):
        weights = np.zeros((5, 5))
        for i in range(5):
            for j in range(5):
                weights[i, j] = q[i] @ k[j] / np.sqrt(4)
        weights = np.exp(weights) / np.exp(weights).sum(axis=-1, keepdims=True)
        return weights @ v, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and text.startswith("【不正解】")


def test_the_scaled_dot_product_attention_of_attnlab_is_rejected_however_it_is_called(
        capsys):
    answers = {
        "the function itself": scaled_dot_product_attention,
        "a wrapper": lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, mask),
        "through the module": lambda q, k, v, mask=None: (
            attnlab.attention.scaled_dot_product_attention(q, k, v, mask=mask)),
    }
    for name, answer in answers.items():
        ok, text = _verdict(capsys, answer)
        assert ok is False and "scaled_dot_product_attention を呼んでいます" in text, name


def test_an_answer_with_the_softmax_of_attnlab_is_rejected(capsys):
    def my_attention(q, k, v, mask=None):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        weights = softmax(scores, axis=-1)
        return weights @ v, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "softmax も自分で書いてください" in text


def test_answers_in_other_correct_styles_pass(capsys):
    def with_einsum(q, k, v, mask=None):
        scores = np.einsum("id,jd->ij", q, k) / q.shape[-1] ** 0.5
        if mask is not None:
            scores[~mask] = -np.inf
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights = e / e.sum(axis=1, keepdims=True)
        return np.einsum("ij,jd->id", weights, v), weights

    def in_float32(q, k, v, mask=None):
        out, weights = _attention(q.astype(np.float32), k.astype(np.float32),
                                  v.astype(np.float32), mask)
        return out, weights

    def in_pure_python(q, k, v, mask=None):
        import math

        Tq, Tk, d_k = len(q), len(k), len(q[0])
        weights = []
        for i in range(Tq):
            row = [sum(q[i][t] * k[j][t] for t in range(d_k)) / math.sqrt(d_k)
                   for j in range(Tk)]
            row = [s if mask is None or mask[i][j] else -math.inf for j, s in enumerate(row)]
            top = max(row)
            e = [math.exp(s - top) for s in row]
            weights.append([x / sum(e) for x in e])
        out = [[sum(weights[i][j] * v[j][c] for j in range(Tk)) for c in range(len(v[0]))]
               for i in range(Tq)]
        return np.array(out), np.array(weights)

    for answer in (with_einsum, in_float32, in_pure_python):
        assert _verdict(capsys, answer)[0] is True, answer.__name__


def test_the_check_leaves_no_profile_hook_behind(capsys):
    def hook(frame, event, arg):
        return None

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        _verdict(capsys, scaled_dot_product_attention)
        assert sys.getprofile() is hook
    finally:
        sys.setprofile(previous)
