"""Chapter 08's checks: every correct style passes; each typical mistake gets its
diagnosis; an answer right only for the chapter's example fails; the package's own
functions, which the chapter imports, are refused."""

import contextlib
import functools
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab import RoPE
from attnlab.checks import check_half_layout, check_rope_half
from attnlab.experiments.rope import half_layout_permutation, permute_head_columns
from attnlab.positional import apply_rope, rope_angles
from scripts.book import SOLUTION_COLUMNS, display_width


def student_rope(*, layout="half", sign=1.0, two_i=True, use_positions=True,
                 use_base=True, dtype=None, one_based=False, over_half=False,
                 swap_cos_sin=False, paper_from_0=False):
    """A student's my_rope_half with the chosen mistakes, written with cos and sin."""

    def my_rope_half(x, positions, base=10000.0):
        T, d_head = x.shape
        half = d_head // 2
        b = base if use_base else 10000.0
        i = np.arange(half)
        if one_based:  # the paper's θ_i = base^(−2(i−1)/d) with i = 1, 2, … as 2i/d
            i = np.arange(1, half + 1)
        theta = b ** (-(2 * i if two_i else i) / d_head)
        if paper_from_0:  # the paper's base^(−2(i−1)/d) with i = 0, 1, …
            theta = b ** (-2 * (i - 1) / d_head)
        if over_half:  # the exponent divided by Dh/2: base^(−2i/(Dh/2))
            theta = b ** (-2 * i / (d_head / 2))
        pos = np.asarray(positions) if use_positions else np.arange(T)
        angles = sign * pos[:, None] * theta  # (T, Dh/2)
        if dtype is not None:
            x, angles = x.astype(dtype), angles.astype(dtype)
        cos, sin = np.cos(angles), np.sin(angles)
        if swap_cos_sin:
            cos, sin = sin, cos
        if layout == "mixed":  # the angles of adjacent pairs, with rotate_half
            cos = np.repeat(cos, 2, axis=-1)
            sin = np.repeat(sin, 2, axis=-1)
            return x * cos + np.concatenate([-x[:, half:], x[:, :half]], axis=-1) * sin
        if layout == "adjacent":  # section 1's cell
            a, c = x[:, 0::2], x[:, 1::2]
        else:
            a, c = x[:, :half], x[:, half:]
        r1 = a * cos - c * sin
        r2 = a * sin + c * cos
        out = np.empty_like(x)
        if layout == "adjacent":
            out[:, 0::2], out[:, 1::2] = r1, r2
        else:
            out[:, :half], out[:, half:] = r1, r2
        return out

    return my_rope_half


def _verdict(capsys, func):
    ok = check_rope_half(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return ok, text


# --- correct answers, however written --------------------------------------------------

def rotate_half_rope(x, positions, base=10000.0):
    # Hugging Face: angles concatenated twice, rotate_half(x) = [-x2 | x1]
    d_head = x.shape[-1]
    theta = 1.0 / base ** (np.arange(0, d_head, 2) / d_head)
    angles = np.concatenate([np.outer(positions, theta)] * 2, axis=-1)  # (T, Dh)
    x1, x2 = np.split(x, 2, axis=-1)
    return x * np.cos(angles) + np.concatenate([-x2, x1], axis=-1) * np.sin(angles)


def complex_rope(x, positions, base=10000.0):
    half = x.shape[-1] // 2
    z = x[:, :half] + 1j * x[:, half:]  # (T, Dh/2)
    theta = base ** (-np.arange(0, 2 * half, 2) / (2 * half))
    z = z * np.exp(1j * np.outer(positions, theta))
    return np.concatenate([z.real, z.imag], axis=-1)


def loop_rope(x, positions, base=10000.0):
    out = np.zeros(x.shape)
    T, d_head = x.shape
    half = d_head // 2
    for t in range(T):
        for i in range(half):
            angle = positions[t] * base ** (-2 * i / d_head)
            a, b = x[t, i], x[t, i + half]
            out[t, i] = a * np.cos(angle) - b * np.sin(angle)
            out[t, i + half] = a * np.sin(angle) + b * np.cos(angle)
    return out.tolist()  # a list is fine too


def matrix_rope(x, positions, base=10000.0):
    T, d_head = x.shape
    half = d_head // 2
    out = np.empty_like(x)
    for t in range(T):
        rotation = np.zeros((d_head, d_head))
        for i in range(half):
            angle = positions[t] / base ** (2 * i / d_head)
            c, s = np.cos(angle), np.sin(angle)
            rotation[np.ix_([i, i + half], [i, i + half])] = [[c, -s], [s, c]]
        out[t] = rotation @ x[t]
    return out


def through_the_permutation(x, positions, base=10000.0):
    # section 5: half(x) = adjacent(x[:, P⁻¹])[:, P], the adjacent rotation written out
    d_head = x.shape[-1]
    perm = np.concatenate([np.arange(0, d_head, 2), np.arange(1, d_head, 2)])
    y = x[:, np.argsort(perm)]  # the adjacent layout of the same pairs
    rotated = student_rope(layout="adjacent")(y, positions, base)
    return rotated[:, perm]


CORRECT = {
    "cos and sin": student_rope(),
    "float32": student_rope(dtype=np.float32),
    "rotate_half (Hugging Face)": rotate_half_rope,
    "complex numbers": complex_rope,
    "two loops, returns a list": loop_rope,
    "a block rotation matrix": matrix_rope,
    "section 5's permutation": through_the_permutation,
}


@pytest.mark.parametrize("func", CORRECT.values(), ids=CORRECT.keys())
def test_every_correct_style_passes(capsys, func):
    ok, text = _verdict(capsys, func)
    assert ok.passed is True and text.startswith("【正解】"), text


def test_the_success_line_fits_a_folded_solution(capsys):
    ok, text = _verdict(capsys, student_rope())
    assert ok and display_width(text.rstrip("\n").replace("<lambda>", "my_rope_half"))\
        <= SOLUTION_COLUMNS


# --- the package's own functions (imported by the chapter's setup cell) are refused -----

_global_alias = apply_rope


def _helper(x, positions, base):
    return apply_rope(x, positions, base, convention="half")


def with_helper(x, positions, base=10000.0):
    return _helper(x, positions, base)


REFERENCE_ANSWERS = {
    "apply_rope itself": (apply_rope, "apply_rope"),
    "a lambda around it": (
        lambda x, positions, base=10000.0: apply_rope(x, positions, base, convention="half"),
        "apply_rope"),
    "functools.partial": (functools.partial(apply_rope, convention="half"), "apply_rope"),
    "a global alias": (
        lambda x, positions, base=10000.0: _global_alias(x, positions, base, "half"),
        "apply_rope"),
    "through a helper": (with_helper, "apply_rope"),
    "RoPE().apply": (
        lambda x, positions, base=10000.0: RoPE(base=base, convention="half").apply(
            x, positions),
        "RoPE"),
    "rope_angles for the angles": (
        lambda x, positions, base=10000.0: x * np.cos(np.tile(
            rope_angles(positions, x.shape[1], base), 2)),
        "rope_angles"),
}


@pytest.mark.parametrize("func, name", REFERENCE_ANSWERS.values(), ids=REFERENCE_ANSWERS.keys())
def test_the_package_functions_are_refused(capsys, func, name):
    ok, text = _verdict(capsys, func)
    assert ok.passed is False and f"attnlab の {name} を使っています" in text, text


def test_a_students_own_helper_named_like_a_package_function_is_not_refused(capsys):
    # a notebook where the student wrote a helper of their own called rope_angles: it
    # shadows the imported one and never runs attnlab's code, so the answer is theirs
    namespace = {"np": np}
    exec("def rope_angles(positions, d_head, base):\n"
         "    theta = base ** (-np.arange(0, d_head, 2) / d_head)\n"
         "    return np.outer(positions, theta)\n"
         "def my_rope_half(x, positions, base=10000.0):\n"
         "    angles = np.tile(rope_angles(positions, x.shape[1], base), 2)\n"
         "    half = x.shape[1] // 2\n"
         "    turned = np.concatenate([-x[:, half:], x[:, :half]], axis=1)\n"
         "    return x * np.cos(angles) + turned * np.sin(angles)\n", namespace)
    ok, text = _verdict(capsys, namespace["my_rope_half"])
    assert ok.passed is True, text


def test_an_answer_right_only_for_the_chapters_example_fails(capsys):
    # the chapter's example: Dh = 8, its θ = [1, 0.1, 0.01, 0.001] written in
    def my_rope_half(x, positions, base=10000.0):
        half = x.shape[1] // 2
        theta = np.resize(np.array([1.0, 0.1, 0.01, 0.001]), half)
        angles = np.asarray(positions)[:, None] * theta
        z = (x[:, :half] + 1j * x[:, half:]) * np.exp(1j * angles)
        return np.concatenate([z.real, z.imag], axis=-1)

    ok, text = _verdict(capsys, my_rope_half)
    assert ok.passed is False, text


def test_the_student_edition_stub_is_reported_as_unimplemented(capsys):
    def my_rope_half(x, positions, base=10000.0):
        raise NotImplementedError("ここを実装してください")

    ok, text = _verdict(capsys, my_rope_half)
    assert ok.passed is False and text.startswith("【未実装】")


# --- the typical mistakes ---------------------------------------------------------------

WRONG = {
    "adjacent pairs (section 1's cell copied)": ({"layout": "adjacent"}, "隣り合う次元 (2i, 2i+1)"),
    "adjacent angles with rotate_half": ({"layout": "mixed"}, "違う角度で回っています"),
    "cos and sin swapped": ({"swap_cos_sin": True}, "cos と sin が入れ替わって"),
    "pairs counted from 1": ({"one_based": True},
                             "1 から数えた番号 i = 1, 2, … を入れています"),
    "exponent over Dh/2": ({"over_half": True}, "base^(−4i/Dh)"),
    "the paper's 1-based formula with i from 0": ({"paper_from_0": True},
                                                  "0 から数えた番号 i = 0, 1, … を入れています"),
    "cos and sin swapped, in float32": ({"swap_cos_sin": True, "dtype": np.float32},
                                        "cos と sin が入れ替わって"),
    "sign reversed": ({"sign": -1.0}, "回転の向きが逆です"),
    "i instead of 2i": ({"two_i": False}, "いまの θ_i は base^(−i/Dh) で"),
    "row index instead of positions": ({"use_positions": False}, "行の番号 0, 1"),
    "base ignored": ({"use_base": False}, "引数 base を使っていません"),
    "adjacent pairs and sign reversed": (
        {"layout": "adjacent", "sign": -1.0}, "隣り合う次元 (2i, 2i+1) を 1 つのペアにして"
        "います（第 1 節のセルの並べ方）。この問題のペアは前半と後半、次元 i と i + Dh/2 です。"
        "回転の向きが逆です"),
    "i instead of 2i, in float32": ({"two_i": False, "dtype": np.float32}, "base^(−i/Dh)"),
    "mixed layout, row index": ({"layout": "mixed", "use_positions": False},
                                "違う角度で回っています"),
}


@pytest.mark.parametrize("mistakes, diagnosis", WRONG.values(), ids=WRONG.keys())
def test_each_typical_mistake_gets_its_diagnosis(capsys, mistakes, diagnosis):
    ok, text = _verdict(capsys, student_rope(**mistakes))
    assert ok.passed is False
    assert text.startswith("【不正解】my_rope_half: "), text
    assert diagnosis in text, text


def test_the_np_repeat_bug_is_not_called_the_layout_mix_up(capsys):
    # θ0, θ0, θ1, θ1, … with rotate_half turns the two members of a pair by different
    # angles: not a rotation. §5's mix-up (a correct RoPE in the wrong layout) keeps
    # lengths; this bug does not, so the message must not send the student to §5's case.
    _, text = _verdict(capsys, student_rope(layout="mixed"))
    assert "回転ではない" in text and "長さが変わり" in text, text
    assert "別の、もっと悪いバグ" in text, text
    assert "np.concatenate" not in text  # says what went wrong, not the code


@pytest.mark.parametrize("mistakes", [{"sign": -1.0}, {"two_i": False}, {"layout": "mixed"},
                                      {"swap_cos_sin": True}, {"one_based": True}])
def test_the_messages_do_not_hand_over_the_formula(capsys, mistakes):
    _, text = _verdict(capsys, student_rope(**mistakes))
    assert "a·cos − b·sin" not in text and "[−後半 | 前半]" not in text, text


def test_np_repeat_with_the_sign_reversed_does_not_call_it_a_rotation(capsys):
    # the np.repeat map is not a rotation, so "every pair turned by −positions[t]·θ_i"
    # would be false after it; the sign is named without it
    _, text = _verdict(capsys, student_rope(layout="mixed", sign=-1.0))
    assert "違う角度で回っています" in text and "回転の向きも逆です" in text, text
    assert "−positions[t]·θ_i だけ回した" not in text, text


def test_the_adjacent_layout_mistake_is_only_one_diagnosis(capsys):
    _, text = _verdict(capsys, student_rope(layout="adjacent"))
    assert "回転の向き" not in text and "行の番号" not in text


def test_returning_x_unrotated_is_named(capsys):
    ok, text = _verdict(capsys, lambda x, positions, base=10000.0: x)
    assert ok.passed is False and "x がそのまま返っています" in text


def test_a_rotation_that_changes_lengths_is_named(capsys):
    def my_rope_half(x, positions, base=10000.0):
        return 2.0 * student_rope()(x, positions, base)

    ok, text = _verdict(capsys, my_rope_half)
    assert ok.passed is False and "ノルム" in text


def test_a_function_without_base_is_told_to_add_it(capsys):
    def my_rope_half(x, positions):
        return student_rope()(x, positions)

    ok, text = _verdict(capsys, my_rope_half)
    assert ok.passed is False and "TypeError" in text and "base=10000.0" in text


def test_a_wrong_shape_is_explained(capsys):
    ok, text = _verdict(capsys, lambda x, positions, base=10000.0: x[:, :2])
    assert ok.passed is False and "形" in text


def test_the_checks_inputs_survive_a_function_that_modifies_them(capsys):
    def my_rope_half(x, positions, base=10000.0):
        out = student_rope()(x, positions, base)
        x[:] = 0.0
        positions[:] = 0
        return out

    assert _verdict(capsys, my_rope_half)[0].passed is True


_ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | st.builds(lambda shape, x: np.full(shape, x),
                st.lists(st.integers(0, 16), max_size=3).map(tuple), st.floats()),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(returned=_ANYTHING)
def test_no_return_value_makes_the_check_raise_or_pass(returned):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_rope_half(lambda x, positions, base=10000.0: returned)
    assert ok.passed is False
    assert printed.getvalue().startswith("【不正解】") and "Traceback" not in printed.getvalue()


@settings(max_examples=20, deadline=None)
@given(error=st.sampled_from([ValueError, TypeError, IndexError, KeyError]),
       message=st.text(max_size=100))
def test_no_exception_of_the_students_code_escapes_the_check(error, message):
    def my_rope_half(x, positions, base=10000.0):
        raise error(message)

    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_rope_half(my_rope_half)
    assert ok.passed is False and error.__name__ in printed.getvalue()


# --- check_half_layout: an adjacent-pair checkpoint converted to rotate_half -------------

def _perm(d_head):
    return np.concatenate([np.arange(0, d_head, 2), np.arange(1, d_head, 2)])


def convert_by_index(params, n_heads, n_kv_heads):
    out = {name: value.copy() for name, value in params.items()}
    for name, value in params.items():
        count = {"w_q": n_heads, "w_k": n_kv_heads}.get(name.rsplit(".", 1)[-1])
        if count is None:
            continue
        d_head = value.shape[1] // count
        cols = (np.arange(count)[:, None] * d_head + _perm(d_head)).ravel()
        out[name] = value[:, cols]
    return out


def convert_by_reshape(params, n_heads, n_kv_heads):
    out = dict(params)  # a new dict; unchanged matrices may be shared
    for name in params:
        if name.endswith((".w_q", ".w_k")):
            count = n_heads if name.endswith(".w_q") else n_kv_heads
            w = params[name]
            D, cols = w.shape
            d_head = cols // count
            heads = w.reshape(D, count, d_head // 2, 2)  # (D, H, Dh/2, 2)
            out[name] = heads.transpose(0, 1, 3, 2).reshape(D, cols)
    return out


def convert_by_loops(params, n_heads, n_kv_heads):
    out = {}
    for name, value in params.items():
        new = np.array(value, dtype=float)
        if name.endswith((".w_q", ".w_k")):
            count = n_heads if name.endswith(".w_q") else n_kv_heads
            d_head = value.shape[1] // count
            for h in range(count):
                for i in range(d_head // 2):
                    new[:, h * d_head + i] = value[:, h * d_head + 2 * i]
                    new[:, h * d_head + i + d_head // 2] = value[:, h * d_head + 2 * i + 1]
        out[name] = new.tolist() if name == "embed" else new  # lists are fine too
    return out


@pytest.mark.parametrize("func", [convert_by_index, convert_by_reshape, convert_by_loops])
def test_correct_conversions_pass(capsys, func):
    ok = check_half_layout(func)
    text = capsys.readouterr().out
    assert ok.passed is True and text.startswith("【正解】"), text
    assert display_width(text.rstrip("\n").replace(func.__name__, "my_to_half_layout"))\
        <= SOLUTION_COLUMNS


def convert_with(mistake):
    def my_to_half_layout(params, n_heads, n_kv_heads):
        out = {name: value.copy() for name, value in params.items()}
        for name, value in params.items():
            kind = name.rsplit(".", 1)[-1]
            heads = {"w_q": n_heads, "w_k": n_kv_heads}
            if mistake == "v_too":
                heads["w_v"] = n_kv_heads
            if mistake == "k_missing":
                heads.pop("w_k")
            if kind not in heads:
                continue
            d_head = value.shape[1] // heads[kind]
            perm = np.argsort(_perm(d_head)) if mistake == "inverse" else _perm(d_head)
            if mistake == "whole":
                out[name] = value[:, _perm(value.shape[1])]
            elif mistake == "rows":
                rows = (np.arange(value.shape[0] // d_head)[:, None] * d_head + perm).ravel()
                out[name] = value[rows, :]
            else:
                cols = (np.arange(heads[kind])[:, None] * d_head + perm).ravel()
                out[name] = value[:, cols]
        return out
    return my_to_half_layout


CONVERSION_MISTAKES = {
    "the inverse permutation": (convert_with("inverse"), "並べ替えが逆向き"),
    "rows instead of columns": (convert_with("rows"), "行を並べ替えています"),
    "one permutation over all heads": (convert_with("whole"), "列全体を 1 つの並べ替え"),
    "W_K forgotten": (convert_with("k_missing"), "W_K を並べ替えていません"),
    "W_V permuted too": (convert_with("v_too"), "W_V の列も並べ替えています"),
}


@pytest.mark.parametrize("func, diagnosis", CONVERSION_MISTAKES.values(),
                         ids=CONVERSION_MISTAKES.keys())
def test_each_conversion_mistake_is_diagnosed(capsys, func, diagnosis):
    ok = check_half_layout(func)
    text = capsys.readouterr().out
    assert ok.passed is False and diagnosis in text, text
    assert text.count("\n") == 1 and "Traceback" not in text


def test_w_k_with_the_query_head_count_is_explained(capsys):
    def my_to_half_layout(params, n_heads, n_kv_heads):
        return convert_by_index(params, n_heads, n_heads)  # GQA: W_K has Hkv heads

    ok = check_half_layout(my_to_half_layout)
    text = capsys.readouterr().out
    assert ok.passed is False and "GQA" in text, text


def test_the_inverse_permutation_message_does_not_hand_over_the_indexing(capsys):
    ok = check_half_layout(convert_with("inverse"))
    text = capsys.readouterr().out
    assert ok.passed is False and "並べ替えが逆向き" in text, text
    assert "元の列 2i" not in text and "2i + 1" not in text, text


def test_converting_only_layer_0_mentions_the_layers(capsys):
    def my_to_half_layout(params, n_heads, n_kv_heads):
        converted = convert_by_index(params, n_heads, n_kv_heads)
        out = dict(params)
        for name in ("layers.0.w_q", "layers.0.w_k"):  # hard-coded keys
            out[name] = converted[name]
        return out

    ok = check_half_layout(my_to_half_layout)
    text = capsys.readouterr().out
    assert ok.passed is False and "層 1 の W_Q と W_K が元のまま" in text, text
    assert "すべての層" in text and text.count("\n") == 1


def test_converting_only_layer_0_names_every_layer_left(capsys):
    # the MQA case has 3 layers: a GQA-aware answer that still skips layers 1 and 2
    def my_to_half_layout(params, n_heads, n_kv_heads):
        converted = convert_by_index(params, n_heads, n_kv_heads)
        n_layers = sum(name.endswith(".w_q") for name in params)
        if n_layers < 3:
            return converted
        out = dict(params)
        for name in ("layers.0.w_q", "layers.0.w_k"):
            out[name] = converted[name]
        return out

    ok = check_half_layout(my_to_half_layout)
    text = capsys.readouterr().out
    assert ok.passed is False and "層 1、2 の W_Q と W_K" in text, text


def test_a_reshape_that_ignores_gqa_gets_a_japanese_message(capsys):
    def my_to_half_layout(params, n_heads, n_kv_heads):
        out = dict(params)
        for name in params:
            if name.endswith((".w_q", ".w_k")):
                w = params[name]
                D, cols = w.shape
                d_head = params["layers.0.w_q"].shape[1] // n_heads
                heads = w.reshape(D, n_heads, d_head // 2, 2)  # W_K too: n_heads
                out[name] = heads.transpose(0, 1, 3, 2).reshape(D, cols)
        return out

    ok = check_half_layout(my_to_half_layout)
    text = capsys.readouterr().out
    assert ok.passed is False and text.startswith("【不正解】"), text
    assert "行列を分けられませんでした" in text and "n_kv_heads" in text, text
    assert text.index("GQA") < text.index("ValueError"), text  # the cause first
    assert "Traceback" not in text and text.count("\n") == 1


def test_other_exceptions_of_a_conversion_are_reported_as_before(capsys):
    def my_to_half_layout(params, n_heads, n_kv_heads):
        raise KeyError("layers.0.w_x")

    ok = check_half_layout(my_to_half_layout)
    text = capsys.readouterr().out
    assert ok.passed is False and "KeyError" in text and "分けられませんでした" not in text


def test_changing_the_callers_checkpoint_is_named(capsys):
    def my_to_half_layout(params, n_heads, n_kv_heads):
        converted = convert_by_index(params, n_heads, n_kv_heads)
        params.update(converted)  # in place: the original checkpoint is gone
        return params

    ok = check_half_layout(my_to_half_layout)
    text = capsys.readouterr().out
    assert ok.passed is False and "書き換えています" in text, text


def test_an_answer_for_the_chapters_model_only_fails(capsys):
    # chapter 08's model: Dh = 8, one layer, no GQA: the permutation written out
    def my_to_half_layout(params, n_heads, n_kv_heads):
        out = dict(params)
        perm = [0, 2, 4, 6, 1, 3, 5, 7]
        for name in ("layers.0.w_q", "layers.0.w_k"):
            w = params[name]
            out[name] = np.concatenate([w[:, h * 8:(h + 1) * 8][:, perm]
                                        for h in range(w.shape[1] // 8)], axis=1)
        return out

    assert check_half_layout(my_to_half_layout).passed is False
    assert "【不正解】" in capsys.readouterr().out


def _with_permute_head_columns(params, n_heads, n_kv_heads):
    d_head = params["layers.0.w_q"].shape[1] // n_heads
    perm = np.r_[0:d_head:2, 1:d_head:2]  # the permutation written by hand
    return {name: permute_head_columns(w, n_heads if name.endswith("w_q") else n_kv_heads, perm)
            if name.endswith(("w_q", "w_k")) else w for name, w in params.items()}


@pytest.mark.parametrize("func, name", [
    (_with_permute_head_columns, "permute_head_columns"),
    (lambda p, h, k: {n: v[:, half_layout_permutation(v.shape[1])] for n, v in p.items()},
     "half_layout_permutation"),
    # both: the message names the one that ran first (the argument, before the call)
    (lambda p, h, k: {n: (permute_head_columns(v, h if n.endswith("w_q") else k,
                                               half_layout_permutation(v.shape[1] // h))
                          if n.endswith(("w_q", "w_k")) else v) for n, v in p.items()},
     "half_layout_permutation"),
])
def test_the_chapters_conversion_functions_are_refused(capsys, func, name):
    assert check_half_layout(func).passed is False
    assert f"attnlab の {name} を使っています" in capsys.readouterr().out


def test_strange_returns_and_the_stub(capsys):
    def stub(params, n_heads, n_kv_heads):
        raise NotImplementedError

    assert check_half_layout(stub).passed is False
    assert "【未実装】" in capsys.readouterr().out
    for value, words in [(None, "None"), ([], "dict"), ({"embed": 1}, "がありません")]:
        assert check_half_layout(lambda p, h, k, v=value: v).passed is False
        assert words in capsys.readouterr().out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(returned=_ANYTHING)
def test_no_return_value_makes_the_conversion_check_raise(returned):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_half_layout(lambda params, n_heads, n_kv_heads: returned)
    assert ok.passed is False
    assert printed.getvalue().startswith("【不正解】") and "Traceback" not in printed.getvalue()
