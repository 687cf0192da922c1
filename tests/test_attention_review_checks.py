"""Chapter 01's self-check check_attention: each typical wrong answer gets its diagnosis;
nothing escapes a check. The machinery of attnlab.checks.core (call_student,
returned_array, checker, call_refusing) is tested here through it."""

import builtins
import contextlib
import functools
import io
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab.attention
from attnlab import RoPE, scaled_dot_product_attention, softmax
from attnlab.checks import (
    CHECKS,
    CheckResult,
    Mistake,
    Raised,
    Unimplemented,
    call_student,
    check_attention,
    checker,
    returned_array,
)
from attnlab.checks.attention_review import _attention_cases
from attnlab.checks.core import call_refusing


def student_attention(*, scale="sqrt", axis=-1, mask_mode="right", form="q@k.T",
                      stable=True, returns="both"):
    """A student's my_attention with the chosen mistakes, written the way students do."""

    def my_attention(q, k, v, mask=None):
        products = {"q@k.T": lambda: q @ k.T, "q@k": lambda: q @ k,
                    "k@q.T": lambda: k @ q.T}
        scores = products[form]()
        d_k = q.shape[-1]
        scores = scores / {"sqrt": np.sqrt(d_k), "none": 1.0, "d": d_k}[scale]
        if mask is not None:
            if mask_mode == "right":
                scores = np.where(mask, scores, -np.inf)
            elif mask_mode == "zero":
                scores = np.where(mask, scores, 0.0)
            elif mask_mode == "inverted":
                scores = np.where(mask, -np.inf, scores)
        if stable:
            scores = scores - scores.max(axis=axis, keepdims=True)
        e = np.exp(scores)
        weights = e / e.sum(axis=axis, keepdims=True)
        if mask is not None and mask_mode == "after":
            weights = weights * mask
        out = weights @ v
        return {"both": (out, weights), "swapped": (weights, out), "out": out,
                "weights": weights, "none": None, "three": (out, weights, v),
                "int": (out.astype(int), weights.astype(int))}[returns]

    return my_attention


def _verdict(capsys, func):
    result = check_attention(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    assert isinstance(result, CheckResult) and text == f"{result}\n"
    return result.passed, text


def test_the_right_answer_passes(capsys):
    ok, text = _verdict(capsys, student_attention())
    assert ok is True and text.startswith("【正解】my_attention")


def test_the_reference_itself_is_rejected_because_the_chapter_imports_it(capsys):
    from attnlab import scaled_dot_product_attention

    ok, text = _verdict(capsys, scaled_dot_product_attention)
    assert ok is False and "scaled_dot_product_attention を呼んでいます" in text


def test_a_minus_1e9_mask_is_also_right(capsys):
    def my_attention(q, k, v, mask=None):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        if mask is not None:
            scores = np.where(mask, scores, -1e9)
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
        return weights @ v, weights

    assert _verdict(capsys, my_attention)[0] is True


def test_the_student_edition_stub_is_reported_as_unimplemented(capsys):
    def my_attention(q, k, v, mask=None):
        raise NotImplementedError("ここを実装してください")

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and text.startswith("【未実装】")


WRONG = {
    "softmax over the wrong axis": ({"axis": 0}, "softmax を取る軸が違います"),
    "√d_k forgotten": ({"scale": "none"}, "√d_k で割るのを忘れています"),
    "divided by d_k": ({"scale": "d"}, "d_k で割っています"),
    "k not transposed": ({"form": "q@k"}, "スコアを q @ k で計算していませんか"),
    "scores as k q^T": ({"form": "k@q.T"}, "スコアを k @ q.T で計算していませんか"),
    "mask ignored": ({"mask_mode": "ignored"}, "mask を無視しています"),
    "masked with 0": ({"mask_mode": "zero"}, "0 ではなく -np.inf"),
    "mask inverted": ({"mask_mode": "inverted"}, "mask の向きが逆です"),
    "mask after softmax": ({"mask_mode": "after"}, "softmax の後で重みを 0 にしています"),
    "unstable softmax": ({"stable": False}, "nan か inf が出ました"),
    "out and weights swapped": ({"returns": "swapped"}, "順番が逆です"),
    "only out": ({"returns": "out"}, "出力 out だけを返しています"),
    "only weights": ({"returns": "weights"}, "重み weights だけを返しています"),
    "None returned": ({"returns": "none"}, "None が返されました"),
    "three values": ({"returns": "three"}, "要素が 3 個です"),
    "integer arrays": ({"returns": "int"}, "浮動小数点の配列を返してください"),
    "no scaling and wrong axis": (
        {"scale": "none", "axis": 0},
        "np.sqrt(d_k) です。softmax を取る軸が違います"),  # both mistakes, in one verdict
    "divided by d_k and mask inverted": (
        {"scale": "d", "mask_mode": "inverted"}, "d_k で割っています。割るのは √d_k"),
}


@pytest.mark.parametrize("mistakes, diagnosis", WRONG.values(), ids=WRONG.keys())
def test_each_typical_mistake_gets_its_diagnosis(capsys, mistakes, diagnosis):
    ok, text = _verdict(capsys, student_attention(**mistakes))
    assert ok is False
    assert text.startswith("【不正解】my_attention: ")
    assert diagnosis in text


def test_the_mask_case_is_named_when_only_the_mask_is_wrong(capsys):
    _, text = _verdict(capsys, student_attention(mask_mode="ignored"))
    assert "マスクありのケース" in text


def test_a_function_without_a_mask_argument_is_told_to_add_it(capsys):
    def my_attention(q, k, v):
        return student_attention()(q, k, v)

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "TypeError" in text and "mask=None" in text


def test_an_exception_is_named_with_its_type_and_message(capsys):
    def my_attention(q, k, v, mask=None):
        raise KeyError("scores")

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "KeyError: 'scores'" in text and "マスクなしのケース" in text


def test_a_wrong_output_with_right_weights_is_pointed_at_weights_at_v(capsys):
    def my_attention(q, k, v, mask=None):
        out, weights = student_attention()(q, k, v, mask)
        return out + 1.0, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "weights @ v" in text


def test_weights_that_do_not_sum_to_one_are_reported(capsys):
    def my_attention(q, k, v, mask=None):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        weights = np.exp(scores) / np.exp(scores).sum()  # the whole matrix sums to 1
        return weights @ v, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "各行の和が 1 になっていません" in text


STRANGE_RETURNS = [
    "a string",
    [[1, 2], [3]],
    (object(), object()),
    (np.zeros((3, 6)), "weights"),
    (np.zeros((2, 2)), np.zeros((2, 2))),
    12,
]


@pytest.mark.parametrize("value", STRANGE_RETURNS, ids=range(len(STRANGE_RETURNS)))
def test_strange_return_values_are_explained_without_raising(capsys, value):
    ok, text = _verdict(capsys, lambda q, k, v, mask=None: value)
    assert ok is False and text.startswith("【不正解】")


def test_not_a_function_is_explained(capsys):
    ok, text = _verdict(capsys, np.zeros(3))
    assert ok is False and "関数を渡してください" in text


def test_an_answer_that_modifies_its_inputs_is_told_so(capsys):
    def my_attention(q, k, v, mask=None):
        result = student_attention()(q, k, v, mask)
        q[:] = 0.0
        k[:] = 0.0
        return result

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "値は正しいのですが、受け取った q、k そのものを書き換えています" in text
    cases = _attention_cases()
    assert not np.allclose(cases[0].q, 0.0)  # the check's own inputs are intact


def test_scaling_q_in_place_is_rejected_though_its_values_are_right(capsys):
    """q /= √d_k gives the right result on separate arrays, but my_attention(x, x, x)
    then scales k as well, and the caller's x changes."""
    def my_attention(q, k, v, mask=None):
        q /= np.sqrt(q.shape[-1])
        scores = q @ k.T
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        return weights @ v, weights

    x = np.random.default_rng(3).normal(size=(4, 6))
    before = x.copy()
    _, weights = my_attention(x, x, x)
    assert not np.array_equal(x, before)  # what the message warns about, really
    assert not np.allclose(weights, scaled_dot_product_attention(before, before, before)[1])
    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "受け取った q そのものを書き換えています（q /= …" in text
    assert "my_attention(x, x, x)" in text and "q = q / np.sqrt(d_k)" in text


def test_an_answer_that_writes_into_the_mask_is_told_so(capsys):
    def my_attention(q, k, v, mask=None):
        if mask is not None:
            mask[:, 0] = True  # "make sure every row sees something"
        return student_attention()(q, k, v, mask)

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "受け取った mask そのものを書き換えています（mask[...]" in text


def _always_masking(fill):
    """A student who applies the mask without checking for None."""
    def my_attention(q, k, v, mask=None):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        scores = np.where(mask, scores, fill)  # mask=None hides every key
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
        return weights @ v, weights
    return my_attention


def test_a_mask_applied_when_mask_is_none_is_named(capsys):
    ok, text = _verdict(capsys, _always_masking(-np.inf))
    assert ok is False and "mask=None のときにもマスクをかけていませんか" in text
    assert "最大値を引く" not in text  # the max is subtracted already: not the cause
    ok, text = _verdict(capsys, _always_masking(-1e9))  # every row uniform, no nan
    assert ok is False and "一様（1/Tk）" in text and "if mask is not None:" in text


def test_nan_only_with_a_mask_points_at_the_mask(capsys):
    def my_attention(q, k, v, mask=None):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores * np.where(mask, 1.0, -np.inf)  # -inf · negative scores
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
        return weights @ v, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "マスクありのケースで nan か inf" in text
    assert "マスクのかけ方" in text


def test_a_float16_answer_is_told_about_precision(capsys):
    def my_attention(q, k, v, mask=None):
        q, k, v = (a.astype(np.float16) for a in (q, k, v))
        scores = q @ k.T / np.float16(np.sqrt(q.shape[-1]))  # float16 throughout
        if mask is not None:
            scores = np.where(mask, scores, np.float16(-np.inf))
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        return weights @ v, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "float16 では精度が足りません" in text
    assert "行ごとの和" not in text  # not the self-contradicting sums [1.0, 1.0, 1.0]


def test_the_sums_message_shows_a_deviation_that_rounding_would_hide(capsys):
    def my_attention(q, k, v, mask=None):
        out, weights = _attention(q, k, v, mask)
        return out, weights * (1 + 1e-4)

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "1 との差 1.0e-04" in text


def test_weights_returned_transposed_are_named(capsys):
    def my_attention(q, k, v, mask=None):
        out, weights = _attention(q, k, v, mask)
        return out, weights.T

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "weights を転置して返しています" in text
    assert "k @ q.T" not in text  # the scores are right: no wrong guess about them


def test_the_scale_applied_after_softmax_is_named(capsys):
    def my_attention(q, k, v, mask=None):
        out, weights = _attention(q, k, v, mask, divisor=lambda q, k, v: 1.0)
        weights = weights / np.sqrt(q.shape[-1])
        return weights @ v, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "0.378 = 1/√d_k（d_k = 7）" in text
    assert "softmax の前のスコア" in text


@pytest.mark.parametrize("where", ["max", "sum"])
def test_keepdims_forgotten_gets_the_hint(capsys, where):
    def my_attention(q, k, v, mask=None):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        if where == "max":
            scores = scores - scores.max(axis=-1)
            e = np.exp(scores)
            weights = e / e.sum(axis=-1, keepdims=True)
        else:
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights = e / e.sum(axis=-1)
        return weights @ v, weights

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and "could not be broadcast" in text and "keepdims=True" in text


def test_numpy_warnings_of_the_students_code_are_not_printed(capsys, recwarn):
    _verdict(capsys, student_attention(stable=False))
    assert "RuntimeWarning" not in capsys.readouterr().err
    assert len(recwarn) == 0


def test_call_student_returns_exceptions_and_copies_inputs():
    x = np.ones(3)

    def clobber(a):
        a[:] = 0
        raise ValueError("だめ")

    result = call_student(clobber, x)
    assert isinstance(result, Raised) and str(result.error) == "だめ"
    assert np.all(x == 1)


class _Holder:
    """A callable object whose method hands the work to the reference."""

    def __call__(self, q, k, v, mask=None):
        return getattr(attnlab.attention, "scaled_dot_" + "product_attention")(q, k, v, mask)


def test_call_refusing_refuses_the_reference_however_it_is_reached():
    q, k, v = (np.ones((2, 3)) for _ in range(3))
    references = {scaled_dot_product_attention: "使っています"}
    for answer in (scaled_dot_product_attention, _Holder(),
                   functools.partial(scaled_dot_product_attention, mask=None),
                   lambda q, k, v: attnlab.attention.scaled_dot_product_attention(q, k, v)):
        with pytest.raises(Mistake, match="^使っています$"):
            call_refusing(answer, references, q, k, v)
    # a class: any of its methods; without a message, the standard one naming it
    with pytest.raises(Mistake, match="attnlab の RoPE を使っています。この練習問題では RoPE を"):
        call_refusing(lambda x: RoPE(convention="half").apply(x, [0, 1]), (RoPE,), q)


def test_call_refusing_returns_what_call_student_returns():
    q, k, v = (np.ones((2, 3)) for _ in range(3))
    out, weights = call_refusing(student_attention(), (softmax,), q, k, v)
    assert np.allclose(weights, 0.5) and np.allclose(out, 1.0)
    raised = call_refusing(lambda q, k, v: q @ k, (softmax,), q, k, v)
    assert isinstance(raised, Raised) and isinstance(raised.error, ValueError)

    def stub(q, k, v):
        raise NotImplementedError

    before = sys.getprofile()
    with pytest.raises(Unimplemented):
        call_refusing(stub, (softmax,), q, k, v)
    assert sys.getprofile() is before  # the hook is removed, whatever the answer did


def test_returned_array_explains_none_shape_and_dtype():
    with pytest.raises(Mistake, match="None"):
        returned_array(None, "pe", (2, 2))
    with pytest.raises(Mistake, match=r"形が \(3,\) です"):
        returned_array(np.zeros(3), "pe", (2, 2))
    with pytest.raises(Mistake, match="dtype が int64"):
        returned_array(np.zeros((2, 2), dtype=np.int64), "pe", (2, 2))


def test_a_bug_inside_a_check_is_reported_in_one_line(capsys):
    @checker("よし")
    def check_broken(func):
        raise ZeroDivisionError("division by zero")

    assert check_broken(lambda: None).passed is False
    text = capsys.readouterr().out
    assert "ZeroDivisionError" in text and "Traceback" not in text
    assert "check_broken" not in CHECKS  # only the checks attnlab/checks/__init__.py lists


_ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | st.builds(lambda shape, x: np.full(shape, x),
                st.lists(st.integers(0, 6), max_size=3).map(tuple), st.floats()),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)
_ERRORS = st.sampled_from([ValueError, TypeError, IndexError, KeyError, ZeroDivisionError,
                           AttributeError, RuntimeError, FloatingPointError])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(returned=_ANYTHING)
def test_no_return_value_makes_the_check_raise_or_pass(returned):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_attention(lambda q, k, v, mask=None: returned)
    assert not ok
    assert printed.getvalue().startswith("【不正解】") and "Traceback" not in printed.getvalue()


@settings(max_examples=30, deadline=None)
@given(error=_ERRORS, message=st.text(max_size=200))
def test_no_exception_of_the_students_code_escapes_the_check(error, message):
    def my_attention(q, k, v, mask=None):
        raise error(message)

    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_attention(my_attention)
    assert not ok and error.__name__ in printed.getvalue()


# Chapter 01's self-check against answers written only for the chapter's example, and
# against answers that call the package's own functions (the chapter imports them).
#
# The chapter's example has T = 5 tokens, d_k = 4 and a causal mask; the hidden cases have
# other sizes, none square and none a power of two, and a mask that is not causal.

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


# ---------------------------------------------------------------------------------------
# What a notebook shows: the check's line, nothing more (no bare True/False under it).

def test_a_checks_result_shows_nothing_more_in_a_notebook(capsys):
    """IPython shows a cell's last value with ``display_formatter.format`` (ipykernel sends
    what it returns as ``Out[n]``): empty for a check's result, which printed its line."""
    from IPython.core.formatters import DisplayFormatter

    formatter = DisplayFormatter()
    for func in (student_attention(), student_attention(axis=0)):
        result = check_attention(func)
        line = capsys.readouterr().out
        assert formatter.format(result) == ({}, {})
        assert capsys.readouterr().out == ""  # no second line, no True/False
        assert line == f"{result}\n" and bool(result) is result.passed
    assert formatter.format(True)[0] == {"text/plain": "True"}  # what it showed before


def test_evaluate_at_the_end_of_a_cell_shows_its_line_once(capsys):
    from IPython.core.formatters import DisplayFormatter

    result = check_attention.evaluate(student_attention(scale="none"))
    assert capsys.readouterr().out == ""  # evaluate prints nothing by itself
    assert DisplayFormatter().format(result) == ({}, {})
    assert capsys.readouterr().out == f"{result}\n" and "√d_k" in str(result)


def test_a_result_is_data_whether_printed_or_not():
    result = check_attention.evaluate(student_attention())
    with contextlib.redirect_stdout(io.StringIO()):
        printed = check_attention(student_attention())
    assert printed == result and printed.printed and not result.printed
    assert repr(printed) == repr(result) == (
        f"CheckResult(verdict='正解', message={result.message!r})")


# ---------------------------------------------------------------------------------------
# An exception in the student's code: the line of the student's code, not a traceback.

NAME_ERROR_CELL = """\
import numpy as np

def my_attention(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(Dh)
    weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
    return weights @ v, weights
"""


@pytest.fixture
def ipython():
    """An IPython shell without a kernel: cells compile as in a notebook (named, cached)."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    main, names = sys.modules["__main__"], set(vars(builtins))
    shell = InteractiveShell.instance(config=config)
    yield shell
    InteractiveShell.clear_instance()
    sys.modules["__main__"] = main  # the shell made its namespace the __main__ module
    for name in set(vars(builtins)) - names:  # and added display, __IPYTHON__
        delattr(builtins, name)


def test_an_exception_names_the_cell_and_line_of_the_students_code(capsys, ipython):
    ipython.run_cell("x = 1", store_history=True)
    ipython.run_cell(NAME_ERROR_CELL, store_history=True)  # In[2]
    ok, text = _verdict(capsys, ipython.user_ns["my_attention"])
    assert ok is False
    assert ("例外 NameError: name 'Dh' is not defined が発生しました"
            "（セル In[2] の 4 行目：scores = q @ k.T / np.sqrt(Dh)）。") in text


def test_an_exception_inside_numpy_names_the_students_line_that_called_it(capsys, ipython):
    ipython.run_cell("import numpy as np\n\n"
                     "def split(x):\n"
                     "    return np.split(x, 3, axis=-1)  # 3 does not divide d_k, numpy raises\n\n"
                     "def my_attention(q, k, v, mask=None):\n"
                     "    parts = split(q)\n"
                     "    return parts, parts\n", store_history=True)
    ok, text = _verdict(capsys, ipython.user_ns["my_attention"])
    assert ok is False and "ValueError: array split does not result" in text
    # the deepest line that is the student's: in split, not in numpy, not in my_attention
    # (a long line is cut at 60 characters)
    assert ("（セル In[1] の 4 行目：return np.split(x, 3, axis=-1)  # 3 does not divide d_k,"
            " nu…）") in text


def test_a_function_from_a_file_is_named_by_file_and_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(NAME_ERROR_CELL, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import mine

    ok, text = _verdict(capsys, mine.my_attention)
    assert ok is False and "（mine.py の 4 行目：scores = q @ k.T / np.sqrt(Dh)）" in text


def test_code_without_a_file_gets_the_line_number_alone(capsys):
    namespace = {}
    exec(compile(NAME_ERROR_CELL, "<string>", "exec"), namespace)
    ok, text = _verdict(capsys, namespace["my_attention"])
    assert ok is False and "が発生しました（4 行目）。" in text


def test_an_error_raised_by_attnlab_itself_has_no_student_line(capsys):
    from attnlab import scaled_dot_product_attention, split_heads

    def my_attention(q, k, v, mask=None):
        return split_heads(q[None], q.shape[-1] + 1), None  # attnlab raises: not divisible

    ok, text = _verdict(capsys, my_attention)
    assert ok is False and f"{Path(__file__).name} の" in text and "return split_heads" in text
    result = call_student(scaled_dot_product_attention, np.ones((2, 3)), np.ones((4, 3)),
                          np.ones((5, 3)))
    assert isinstance(result, Raised) and result.where == ""  # no line is the student's


def test_a_real_kernel_shows_one_line_with_the_cell_and_no_true_or_false(tmp_path):
    """The whole path in a Jupyter kernel (nbclient): the check cell's only output is the
    printed line, and the exception is placed in the cell as the kernel numbers it."""
    import nbformat

    from scripts.book import execute_notebook

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from attnlab.checks import check_attention"),
        nbformat.v4.new_code_cell(NAME_ERROR_CELL),
        nbformat.v4.new_code_cell("check_attention(my_attention)"),
        nbformat.v4.new_code_cell("check_attention.evaluate(my_attention)"),
        nbformat.v4.new_code_cell("def my_attention(q, k, v, mask=None):\n"
                                  "    raise NotImplementedError('ここを実装してください')\n\n\n"
                                  "check_attention(my_attention)"),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"}})
    execute_notebook(nb, tmp_path, timeout=60)
    outputs = [cell.outputs for cell in nb.cells]
    assert outputs[0] == []
    wrong = ("【不正解】my_attention: マスクなしのケースで例外 NameError: name 'Dh' is not "
             "defined が発生しました（セル In[2] の 4 行目：scores = q @ k.T / np.sqrt(Dh)）。\n")
    for shown in outputs[2:4]:  # the check, and evaluate as a cell's last value
        assert [(o.output_type, o.get("text")) for o in shown] == [("stream", wrong)]
    assert [o.output_type for o in outputs[4]] == ["stream"]
    assert outputs[4][0].text.startswith("【未実装】")
