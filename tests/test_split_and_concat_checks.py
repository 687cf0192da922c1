"""Chapter 03's self-checks: every correct style passes, every typical mistake is named."""

import contextlib
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab import (
    MHAProjections,
    merge_heads,
    multi_head_attention,
    multi_head_attention_loop,
    split_heads,
)
from attnlab.checks import CHECKS, check_multi_head_attention, check_split_heads
from attnlab.checks.core import REPEAT_NOTE, reset_attempts
from attnlab.checks.split_and_concat import LARGE_SCORE, _mha_cases, _split_cases


@pytest.fixture(autouse=True)
def _first_attempt():
    """Each test starts as a student's first attempt (fix_on_repeat counts per kernel)."""
    reset_attempts()
    yield
    reset_attempts()


def _verdict(capsys, check, func):
    result = check(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return result, text


def test_both_checks_are_collected():
    assert CHECKS["check_split_heads"] is check_split_heads
    assert CHECKS["check_multi_head_attention"] is check_multi_head_attention


# --- check_split_heads ---------------------------------------------------------------------

def split_reshape(x, n_heads):
    *lead, T, D = x.shape
    return x.reshape(*lead, T, n_heads, D // n_heads).swapaxes(-2, -3)


def split_stack(x, n_heads):
    d_head = x.shape[-1] // n_heads
    return np.stack([x[..., i * d_head:(i + 1) * d_head] for i in range(n_heads)], axis=-3)


def split_loop_float32(x, n_heads):
    *lead, T, D = x.shape
    d_head = D // n_heads
    out = np.empty((*lead, n_heads, T, d_head), dtype=np.float32)
    for i in range(n_heads):
        out[..., i, :, :] = x[..., :, i * d_head:(i + 1) * d_head]
    return out


def split_moveaxis(x, n_heads):
    *lead, T, D = x.shape
    return np.moveaxis(x.reshape(*lead, T, n_heads, -1), -2, -3).copy()


def split_pure_python(x, n_heads):
    *lead, T, D = x.shape
    d_head = D // n_heads
    rows = x.reshape(-1, T, D).tolist()
    out = [[[row[i * d_head:(i + 1) * d_head] for row in seq] for i in range(n_heads)]
           for seq in rows]
    return np.array(out).reshape(*lead, n_heads, T, d_head)


CORRECT_SPLITS = [split_reshape, split_stack, split_loop_float32, split_moveaxis,
                  split_pure_python]


@pytest.mark.parametrize("func", CORRECT_SPLITS, ids=lambda f: f.__name__)
def test_every_correct_split_passes(capsys, func):
    ok, text = _verdict(capsys, check_split_heads, func)
    assert ok.passed is True and text.startswith("【正解】")


def split_strided(x, n_heads):
    *lead, T, D = x.shape
    return np.moveaxis(x.reshape(*lead, T, D // n_heads, n_heads), -1, -3)


def split_bare(x, n_heads):
    *lead, T, D = x.shape
    return x.reshape(*lead, n_heads, T, D // n_heads)


def split_no_transpose(x, n_heads):
    *lead, T, D = x.shape
    return x.reshape(*lead, T, n_heads, D // n_heads)


def split_stacked_in_front(x, n_heads):
    d_head = x.shape[-1] // n_heads
    return np.stack([x[..., i * d_head:(i + 1) * d_head] for i in range(n_heads)])


def split_only_2d(x, n_heads):
    T, D = x.shape
    return x.reshape(T, n_heads, D // n_heads).transpose(1, 0, 2)


def split_heads_reversed(x, n_heads):
    return split_reshape(x, n_heads)[..., ::-1, :, :]


def split_stub(x, n_heads):
    raise NotImplementedError("ここを実装してください")


WRONG_SPLITS = {
    "strided columns": (split_strided, "H 列おき"),
    "bare reshape": (split_bare, "軸の入れ替えをしていません"),
    "no transpose": (split_no_transpose, "(…, T, H, Dh)"),
    "stacked in front": (split_stacked_in_front, "先頭に積んでいます"),
    "only 2-D x": (split_only_2d, "*lead, T, D = x.shape"),
    "heads in reverse": (split_heads_reversed, "ヘッドが逆の順に並んでいます"),
    "None": (lambda x, n_heads: None, "None"),
}


@pytest.mark.parametrize("func, diagnosis", WRONG_SPLITS.values(), ids=WRONG_SPLITS.keys())
def test_each_wrong_split_gets_its_diagnosis(capsys, func, diagnosis):
    ok, text = _verdict(capsys, check_split_heads, func)
    assert ok.passed is False and text.startswith("【不正解】")
    assert diagnosis in text


@pytest.mark.parametrize("func", [
    split_heads,
    lambda x, n_heads: split_heads(x, n_heads),
    lambda x, n_heads: np.array(split_heads(x.copy(), n_heads)),
], ids=["the reference", "a wrapper", "a wrapper that copies"])
def test_split_heads_itself_is_refused(capsys, func):
    ok, text = _verdict(capsys, check_split_heads, func)
    assert ok.passed is False and "split_heads を使わずに" in text, text


def test_the_split_stub_is_unimplemented(capsys):
    ok, text = _verdict(capsys, check_split_heads, split_stub)
    assert ok.passed is False and text.startswith("【未実装】")


# --- check_multi_head_attention ------------------------------------------------------------

def student_mha(*, split="right", merge="right", scale="head", use_mask=True, use_w_o=True,
                weights_out="heads", stable=True, mask_mode="right"):
    """A student's my_multi_head_attention with the chosen mistakes."""

    def my_multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
        T, D = x.shape
        d_head = D // n_heads

        def cut(a):
            if split == "strided":
                return a.reshape(T, d_head, n_heads).transpose(2, 0, 1)
            if split == "bare":
                return a.reshape(n_heads, T, d_head)
            heads = a.reshape(T, n_heads, d_head).transpose(1, 0, 2)
            return heads[::-1] if split == "reversed" else heads

        q, k, v = cut(x @ w_q), cut(x @ w_k), cut(x @ w_v)  # (H, T, Dh)
        divisor = {"head": np.sqrt(d_head), "model": np.sqrt(D), "none": 1.0,
                   "d_head": d_head}[scale]
        scores = q @ k.transpose(0, 2, 1) / divisor  # (H, T, T)
        if mask is not None and use_mask:
            hide = {"right": ~mask, "inverted": mask, "inverted_1e9": mask, "zero": ~mask,
                    "after_softmax": np.zeros_like(mask),
                    "tril": ~np.tril(np.ones(mask.shape, dtype=bool))}[mask_mode]
            fill = {"inverted_1e9": -1e9, "zero": 0.0}.get(mask_mode, -np.inf)
            scores = np.where(hide, fill, scores)
        if stable:
            scores = scores - scores.max(axis=-1, keepdims=True)
        e = np.exp(scores)
        weights = e / e.sum(axis=-1, keepdims=True)
        if mask is not None and use_mask and mask_mode == "after_softmax":
            weights = weights * mask
        heads = weights @ v  # (H, T, Dh)
        if merge == "bare":
            concat = heads.reshape(T, D)
        elif merge == "reversed":
            concat = heads[::-1].transpose(1, 0, 2).reshape(T, D)
        else:
            concat = heads.transpose(1, 0, 2).reshape(T, D)
        out = concat @ w_o if use_w_o else concat
        returned = {"heads": weights, "mean": weights.mean(axis=0),
                    "mean_keepdims": weights.mean(axis=0, keepdims=True),
                    "first": weights[0],
                    "mean_broadcast": np.broadcast_to(weights.mean(axis=0), weights.shape)}
        return out, returned[weights_out]

    return my_multi_head_attention


def mha_loop(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """A loop over heads with np.concatenate, in float32."""
    x, w_q, w_k, w_v, w_o = (np.asarray(a, dtype=np.float32) for a in (x, w_q, w_k, w_v, w_o))
    d_head = x.shape[1] // n_heads
    outs, all_weights = [], []
    for i in range(n_heads):
        cols = slice(i * d_head, (i + 1) * d_head)
        q, k, v = x @ w_q[:, cols], x @ w_k[:, cols], x @ w_v[:, cols]
        scores = q @ k.T / np.sqrt(d_head)
        if mask is not None:
            scores = np.where(mask, scores, -1e9)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        outs.append(weights @ v)
        all_weights.append(weights)
    return np.concatenate(outs, axis=1) @ w_o, np.array(all_weights)


def mha_sum_over_heads(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Concat·W_O written as Σ_i head_i · W_O[rows of head i]."""
    q, k, v = (split_heads(x @ w, n_heads) for w in (w_q, w_k, w_v))
    d_head = q.shape[-1]
    scores = np.einsum("htd,hsd->hts", q, k) / np.sqrt(d_head)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    heads = weights @ v
    out = sum(heads[i] @ w_o[i * d_head:(i + 1) * d_head] for i in range(n_heads))
    return out, weights


def mha_reference(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    return multi_head_attention(x, MHAProjections(w_q, w_k, w_v, w_o), n_heads, mask=mask)


def mha_reference_loop(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    return multi_head_attention_loop(x, MHAProjections(w_q, w_k, w_v, w_o), n_heads, mask=mask)


@pytest.mark.parametrize("func", [mha_reference, mha_reference_loop],
                         ids=["multi_head_attention", "multi_head_attention_loop"])
def test_the_reference_mha_is_refused(capsys, func):
    ok, text = _verdict(capsys, check_multi_head_attention, func)
    assert ok.passed is False and "を使わずに" in text, text


def mha_with_merge_heads(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    out, weights = student_mha()(x, w_q, w_k, w_v, w_o, n_heads, mask)
    return merge_heads(split_heads(out, 1)), weights  # a no-op round trip


CORRECT_MHA = [student_mha(), mha_loop, mha_sum_over_heads, mha_with_merge_heads]


@pytest.mark.parametrize("func", CORRECT_MHA, ids=["batched", "loop float32", "sum over heads",
                                                   "merge round trip"])
def test_every_correct_mha_passes(capsys, func):
    ok, text = _verdict(capsys, check_multi_head_attention, func)
    assert ok.passed is True and text.startswith("【正解】")


WRONG_MHA = {
    "strided heads": ({"split": "strided"}, "H 列おき"),
    "bare reshape": ({"split": "bare"}, "軸の入れ替えをしていません"),
    "W_o forgotten": ({"use_w_o": False}, "W_O（w_o）を掛けるのを忘れています"),
    "√d_model": ({"scale": "model"}, "√d_model で割っています"),
    "no scaling": ({"scale": "none"}, "割るのを忘れています"),
    "mask ignored": ({"use_mask": False}, "mask を無視しています"),
    "weights averaged": ({"weights_out": "mean"}, "平均しています"),
    "weights averaged, keepdims": ({"weights_out": "mean_keepdims"}, "平均しています"),
    "weights averaged, broadcast": ({"weights_out": "mean_broadcast"}, "平均しています"),
    "one head's weights": ({"weights_out": "first"}, "1 つのヘッドの重みだけ"),
    "bare merge": ({"merge": "bare"}, "そのまま reshape(T, D)"),
    "reversed merge": ({"merge": "reversed"}, "逆の順に結合しています"),
    "reversed heads": ({"split": "reversed"}, "ヘッドが逆の順に並んでいます"),
    "divided by d_k": ({"scale": "d_head"}, "d_k で割っています。割るのは √d_k"),
    "bare merge and W_o forgotten": (
        {"merge": "bare", "use_w_o": False}, "reshape してください。最後に W_O"),
    "√d_model and mask ignored": (
        {"scale": "model", "use_mask": False}, "√d_model で割っています"),  # first case: no mask
    "unstable softmax with mask": ({"stable": False, "scale": "none"}, "割るのを忘れて"),
}


@pytest.mark.parametrize("mistakes, diagnosis", WRONG_MHA.values(), ids=WRONG_MHA.keys())
def test_each_wrong_mha_gets_its_diagnosis(capsys, mistakes, diagnosis):
    ok, text = _verdict(capsys, check_multi_head_attention, student_mha(**mistakes))
    assert ok.passed is False and text.startswith("【不正解】my_multi_head_attention: ")
    assert diagnosis in text


def test_the_mask_case_is_named_when_only_the_mask_is_wrong(capsys):
    _, text = _verdict(capsys, check_multi_head_attention, student_mha(use_mask=False))
    assert "因果マスク" in text


def test_swapped_returns_are_named(capsys):
    def swapped(*args, **kwargs):
        out, weights = student_mha()(*args, **kwargs)
        return weights, out

    ok, text = _verdict(capsys, check_multi_head_attention, swapped)
    assert ok.passed is False and "順番が逆" in text


def test_a_function_without_a_mask_argument_is_told_to_add_it(capsys):
    def my_multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
        return student_mha()(x, w_q, w_k, w_v, w_o, n_heads)

    ok, text = _verdict(capsys, check_multi_head_attention, my_multi_head_attention)
    assert ok.passed is False and "mask=None" in text


def test_the_mha_stub_is_unimplemented(capsys):
    def my_multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
        raise NotImplementedError

    ok, text = _verdict(capsys, check_multi_head_attention, my_multi_head_attention)
    assert ok.passed is False and text.startswith("【未実装】")


_ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | st.builds(lambda shape, x: np.full(shape, x),
                st.lists(st.integers(0, 6), max_size=4).map(tuple), st.floats()),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(returned=_ANYTHING)
def test_no_return_value_makes_either_check_raise_or_pass(returned):
    for check, func in ((check_split_heads, lambda x, n_heads: returned),
                        (check_multi_head_attention,
                         lambda x, a, b, c, d, h, mask=None: returned)):
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            ok = check(func)
        assert ok.passed is False
        assert printed.getvalue().startswith("【不正解】")
        assert "Traceback" not in printed.getvalue()


# --- the hidden cases are not the chapter's sizes ---------------------------------------------


def _is_power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def test_the_hidden_cases_have_sizes_that_are_not_round():
    splits = [(c.x.shape[-1], c.n_heads) for c in _split_cases()]
    assert any(not _is_power_of_two(D // H) for D, H in splits)
    assert any(not _is_power_of_two(D) and not _is_power_of_two(H) for D, H in splits)
    mhas = [(c.x.shape[-1], c.n_heads) for c in _mha_cases()]
    # some case where √d_model, d_head and √d_head are three different numbers
    assert any(len({np.sqrt(D), D // H, np.sqrt(D // H)}) == 3 and not _is_power_of_two(D)
               for D, H in mhas)
    assert (512, 8) not in splits + mhas


def split_for_powers_of_two(x, n_heads):
    """Right when the head width is found by halving: true for 512 / 8, not for 30 / 5."""
    *lead, T, D = x.shape
    d_head = D >> int(np.log2(n_heads))
    if d_head * n_heads != D:
        return np.zeros((*lead, n_heads, T, D // n_heads))
    return x.reshape(*lead, T, n_heads, d_head).swapaxes(-2, -3)


def mha_scaled_by_the_examples_root(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Divides the scores by 8 = √64, the chapter's √d_k, whatever the case."""
    T, D = x.shape
    q, k, v = (split_reshape(x @ w, n_heads) for w in (w_q, w_k, w_v))  # (H, T, Dh)
    scores = q @ k.transpose(0, 2, 1) / 8.0
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return merge_heads(weights @ v) @ w_o, weights


def test_an_answer_right_only_for_the_chapters_sizes_is_refused(capsys):
    x = np.random.default_rng(0).normal(size=(6, 512))  # the chapter's example
    np.testing.assert_allclose(split_for_powers_of_two(x, 8), split_heads(x, 8))
    ok, text = _verdict(capsys, check_split_heads, split_for_powers_of_two)
    assert ok.passed is False and text.startswith("【不正解】")
    ok, text = _verdict(capsys, check_multi_head_attention, mha_scaled_by_the_examples_root)
    assert ok.passed is False and text.startswith("【不正解】")


def mha_chaining_the_chapters_cells(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    from attnlab import scaled_dot_product_attention

    q, k, v = (split_heads(x @ w, n_heads) for w in (w_q, w_k, w_v))  # (H, T, Dh)
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return merge_heads(heads) @ w_o, weights


def test_an_answer_that_chains_the_chapters_cells_is_refused(capsys):
    # split_heads → chapter 01's attention → merge_heads → W_O is chapter 03's §1 copied
    ok, text = _verdict(capsys, check_multi_head_attention, mha_chaining_the_chapters_cells)
    assert ok.passed is False and "scaled_dot_product_attention" in text, text


# --- mask mistakes get chapter 01's diagnoses; large scores; attnlab's softmax ----------------

MASK_MISTAKES = {
    # (mask mode, what the message says, whether it says the case differs only by the mask)
    "inverted, -inf (nan in the all-visible row)": ("inverted", "mask の向きが逆です", "行 4"),
    "inverted, -1e9": ("inverted_1e9", "mask の向きが逆です", "違いはマスクのかけ方にあります"),
    "hidden scores set to 0": ("zero", "隠す位置のスコアを 0 にしています",
                               "違いはマスクのかけ方にあります"),
    "weights * mask after softmax": ("after_softmax", "softmax の後で重みを 0 にしています",
                                     "違いはマスクのかけ方にあります"),
    "np.tril instead of mask": ("tril", "自分で作った因果マスク（np.tril）", "まだらなマスク"),
}


@pytest.mark.parametrize("mode, diagnosis, where", MASK_MISTAKES.values(),
                         ids=MASK_MISTAKES.keys())
def test_each_mask_mistake_gets_chapter_01s_diagnosis(capsys, mode, diagnosis, where):
    ok, text = _verdict(capsys, check_multi_head_attention, student_mha(mask_mode=mode))
    assert ok.passed is False and diagnosis in text and where in text, text
    for wrong_stage in ("split_heads と", "axis=-1", "最大値を引"):  # the old ✗ messages
        assert wrong_stage not in text, text


def test_a_mask_mistake_with_no_candidate_is_still_located_in_the_mask(capsys):
    def half_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
        # hides with -5: not a known mistake, but only the mask differs
        out, weights = student_mha()(x, w_q, w_k, w_v, w_o, n_heads)
        if mask is None:
            return out, weights
        T, D = x.shape
        q, k, v = (split_reshape(x @ w, n_heads) for w in (w_q, w_k, w_v))
        scores = np.where(mask, q @ k.transpose(0, 2, 1) / np.sqrt(D // n_heads), -5.0)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        return merge_heads(weights @ v) @ w_o, weights

    ok, text = _verdict(capsys, check_multi_head_attention, half_mask)
    assert ok.passed is False and "違いはマスクのかけ方にあります" in text, text
    assert "True が「参照してよい」位置" in text


def test_the_large_score_case_overflows_exp():
    case = next(c for c in _mha_cases() if c.name.startswith("スコアがとても大きい"))
    D = case.x.shape[-1]
    q, k = (split_heads(case.x @ w, case.n_heads) for w in (case.weights.w_q, case.weights.w_k))
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(D // case.n_heads)
    assert scores.max() > LARGE_SCORE > 709.8  # np.exp(709.8) is the last finite one


def test_an_unstable_softmax_is_refused(capsys):
    ok, text = _verdict(capsys, check_multi_head_attention, student_mha(stable=False))
    assert ok.passed is False and "スコアがとても大きいケース" in text
    assert "最大値を引く" in text, text


def mha_with_attnlab_softmax(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    from attnlab import softmax

    q, k, v = (split_heads(x @ w, n_heads) for w in (w_q, w_k, w_v))  # (H, T, Dh)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return merge_heads(weights @ v) @ w_o, weights


def test_attnlabs_softmax_is_refused_as_in_chapter_01(capsys):
    ok, text = _verdict(capsys, check_multi_head_attention, mha_with_attnlab_softmax)
    assert ok.passed is False and "attnlab の softmax" in text, text


# --- the code of the fix only on a repeated attempt -------------------------------------------

@pytest.mark.parametrize("func, received", [
    (split_strided, "ヘッド 0 が受け取ったのは x の列 0, 4, 8 でした"),
    (split_bare, "ヘッド 0 が受け取ったのは、x を行の順に読んだ最初の T·Dh = 15 個の値"
                 "（行 0 の全部と行 1 の先頭 3 個）"),
], ids=["strided", "bare reshape"])
def test_a_split_mistake_says_what_head_0_received_then_the_fix(capsys, func, received):
    _, first = _verdict(capsys, check_split_heads, func)
    assert received in first and REPEAT_NOTE in first, first
    assert "swapaxes" not in first and "reshape(…, T, H, Dh)" not in first
    _, second = _verdict(capsys, check_split_heads, func)
    assert received in second and "swapaxes(-2, -3)" in second, second
    assert REPEAT_NOTE not in second


def test_the_mha_split_mistake_also_holds_its_fix_back(capsys):
    _, first = _verdict(capsys, check_multi_head_attention, student_mha(split="bare"))
    assert "Q = x @ w_q を行の順に読んだ" in first and "swapaxes" not in first, first
    _, second = _verdict(capsys, check_multi_head_attention, student_mha(split="bare"))
    assert "swapaxes(-2, -3)" in second


# --- core's messages read as Japanese (walkthrough nits) ----------------------------------------

def test_returned_arrays_messages_have_no_stray_space_and_no_wrong_noun():
    from attnlab.checks.core import Mistake, returned_array

    with pytest.raises(Mistake) as japanese:  # as chapter 10's check names its value
        returned_array(np.zeros((8, 6, 6)), "4 ヘッド・長さ 6 のケースの返り値", (4, 6, 6))
    assert "ケースの返り値の形が (8, 6, 6)" in str(japanese.value)
    with pytest.raises(Mistake) as latin:
        returned_array(np.zeros((2, 2)), "out", (3,))
    assert str(latin.value).startswith("out の形が")
    with pytest.raises(Mistake) as integers:  # a bias array is neither weights nor a mean
        returned_array(np.zeros((4, 6, 6), dtype=int), "返り値", (4, 6, 6))
    assert "返り値の dtype が int" in str(integers.value)
    assert "重みや平均" not in str(integers.value)
