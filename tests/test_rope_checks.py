"""check_apply_rope: every correct style passes; each typical mistake gets its diagnosis."""

import contextlib
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.checks import check_apply_rope
from attnlab.positional import apply_rope


def student_rope(*, layout="adjacent", sign=1.0, two_i=True, use_positions=True,
                 use_base=True, dtype=None):
    """A student's my_apply_rope with the chosen mistakes, written with cos and sin."""

    def my_apply_rope(x, positions, base=10000.0):
        T, d_head = x.shape
        b = base if use_base else 10000.0
        i = np.arange(d_head // 2)
        theta = b ** (-(2 * i if two_i else i) / d_head)
        pos = np.asarray(positions) if use_positions else np.arange(T)
        angles = sign * pos[:, None] * theta  # (T, Dh/2)
        if dtype is not None:
            x, angles = x.astype(dtype), angles.astype(dtype)
        if layout == "adjacent":
            a, c = x[:, 0::2], x[:, 1::2]
        else:
            a, c = x[:, : d_head // 2], x[:, d_head // 2:]
        r1 = a * np.cos(angles) - c * np.sin(angles)
        r2 = a * np.sin(angles) + c * np.cos(angles)
        out = np.empty_like(x)
        if layout == "adjacent":
            out[:, 0::2], out[:, 1::2] = r1, r2
        else:
            out[:, : d_head // 2], out[:, d_head // 2:] = r1, r2
        return out

    return my_apply_rope


def _verdict(capsys, func):
    ok = check_apply_rope(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return ok, text


# --- correct answers, however written --------------------------------------------------

def complex_rope(x, positions, base=10000.0):
    d_head = x.shape[-1]
    z = x[:, 0::2] + 1j * x[:, 1::2]  # (T, Dh/2)
    theta = base ** (-np.arange(0, d_head, 2) / d_head)
    z = z * np.exp(1j * np.outer(positions, theta))
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


def loop_rope(x, positions, base=10000.0):
    out = np.zeros(x.shape)
    T, d_head = x.shape
    for t in range(T):
        for i in range(d_head // 2):
            angle = positions[t] * base ** (-2 * i / d_head)
            a, b = x[t, 2 * i], x[t, 2 * i + 1]
            out[t, 2 * i] = a * np.cos(angle) - b * np.sin(angle)
            out[t, 2 * i + 1] = a * np.sin(angle) + b * np.cos(angle)
    return out.tolist()  # a list is fine too


def matrix_rope(x, positions, base=10000.0):
    T, d_head = x.shape
    out = np.empty_like(x)
    for t in range(T):
        rotation = np.zeros((d_head, d_head))
        for i in range(d_head // 2):
            angle = positions[t] / base ** (2 * i / d_head)
            c, s = np.cos(angle), np.sin(angle)
            rotation[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
        out[t] = rotation @ x[t]
    return out


def rotate_every_two_rope(x, positions, base=10000.0):
    # GPT-J style: duplicated angles and a rotate-every-two helper
    d_head = x.shape[-1]
    theta = 1.0 / base ** (np.arange(0, d_head, 2) / d_head)
    angles = np.repeat(np.outer(positions, theta), 2, axis=-1)  # (T, Dh)
    rotated = np.stack([-x[:, 1::2], x[:, 0::2]], axis=-1).reshape(x.shape)
    return x * np.cos(angles) + rotated * np.sin(angles)


CORRECT = {
    "cos and sin": student_rope(),
    "float32": student_rope(dtype=np.float32),
    "complex numbers": complex_rope,
    "two loops, returns a list": loop_rope,
    "a block-diagonal rotation matrix": matrix_rope,
    "rotate every two (GPT-J)": rotate_every_two_rope,
    "the reference": apply_rope,
}


@pytest.mark.parametrize("func", CORRECT.values(), ids=CORRECT.keys())
def test_every_correct_style_passes(capsys, func):
    ok, text = _verdict(capsys, func)
    assert ok is True and text.startswith("【正解】"), text


def test_the_student_edition_stub_is_reported_as_unimplemented(capsys):
    def my_apply_rope(x, positions, base=10000.0):
        raise NotImplementedError("ここを実装してください")

    ok, text = _verdict(capsys, my_apply_rope)
    assert ok is False and text.startswith("【未実装】")


# --- the typical mistakes ---------------------------------------------------------------

WRONG = {
    "split halves": ({"layout": "half"}, "前後半のペア"),
    "sign reversed": ({"sign": -1.0}, "回転の向きが逆です"),
    "i instead of 2i": ({"two_i": False}, "base^(−i/Dh) になっています"),
    "row index instead of positions": ({"use_positions": False}, "行の番号 0, 1"),
    "base ignored": ({"use_base": False}, "引数 base を使っていません"),
    "split halves and sign reversed": (
        {"layout": "half", "sign": -1.0}, "前後半のペア（次元 i と i + Dh/2、rotate_half "
        "の並べ方）で回しています。この問題では隣り合う次元 (2i, 2i+1) を 1 つのペアに"
        "してください。回転の向きが逆です"),
    "i instead of 2i, in float32": ({"two_i": False, "dtype": np.float32}, "base^(−i/Dh)"),
}


@pytest.mark.parametrize("mistakes, diagnosis", WRONG.values(), ids=WRONG.keys())
def test_each_typical_mistake_gets_its_diagnosis(capsys, mistakes, diagnosis):
    ok, text = _verdict(capsys, student_rope(**mistakes))
    assert ok is False
    assert text.startswith("【不正解】my_apply_rope: "), text
    assert diagnosis in text, text


def test_the_split_halves_mistake_is_only_one_diagnosis(capsys):
    _, text = _verdict(capsys, student_rope(layout="half"))
    assert "回転の向き" not in text and "行の番号" not in text


def test_returning_x_unrotated_is_named(capsys):
    ok, text = _verdict(capsys, lambda x, positions, base=10000.0: x)
    assert ok is False and "x がそのまま返っています" in text


def test_a_rotation_that_changes_lengths_is_named(capsys):
    def my_apply_rope(x, positions, base=10000.0):
        return 2.0 * student_rope()(x, positions, base)

    ok, text = _verdict(capsys, my_apply_rope)
    assert ok is False and "ノルム" in text


def test_a_function_without_base_is_told_to_add_it(capsys):
    def my_apply_rope(x, positions):
        return student_rope()(x, positions)

    ok, text = _verdict(capsys, my_apply_rope)
    assert ok is False and "TypeError" in text and "base=10000.0" in text


def test_a_wrong_shape_is_explained(capsys):
    ok, text = _verdict(capsys, lambda x, positions, base=10000.0: x[:, :2])
    assert ok is False and "形" in text


def test_the_checks_inputs_survive_a_function_that_modifies_them(capsys):
    def my_apply_rope(x, positions, base=10000.0):
        out = student_rope()(x, positions, base)
        x[:] = 0.0
        positions[:] = 0
        return out

    assert _verdict(capsys, my_apply_rope)[0] is True


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
        ok = check_apply_rope(lambda x, positions, base=10000.0: returned)
    assert ok is False
    assert printed.getvalue().startswith("【不正解】") and "Traceback" not in printed.getvalue()


@settings(max_examples=20, deadline=None)
@given(error=st.sampled_from([ValueError, TypeError, IndexError, KeyError]),
       message=st.text(max_size=100))
def test_no_exception_of_the_students_code_escapes_the_check(error, message):
    def my_apply_rope(x, positions, base=10000.0):
        raise error(message)

    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_apply_rope(my_apply_rope)
    assert ok is False and error.__name__ in printed.getvalue()
