"""check_position_lookup: every correct style passes, each typical mistake gets its diagnosis."""

import contextlib
import functools
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab.positional
from attnlab.checks import CHECKS, check_position_lookup
from attnlab.checks.learned_positions import _inside_cases, _outside_cases
from attnlab.positional import lookup_positions


def _verdict(capsys, func):
    ok = check_position_lookup(func)
    text = capsys.readouterr().out
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return ok, text


# --- correct answers, written in different styles ------------------------------------------

def fancy_index(table, positions):
    table = np.asarray(table)
    p = np.asarray(positions)
    if np.any(p < 0) or np.any(p >= len(table)):
        raise IndexError(f"位置 {p} は範囲外です")
    return table[p]


def loop_over_flat_positions(table, positions):
    p = np.asarray(positions)
    rows = []
    for pos in p.ravel().tolist():
        if not 0 <= pos < len(table):
            raise IndexError(pos)
        rows.append(table[pos])
    return np.array(rows, dtype=table.dtype).reshape(p.shape + (table.shape[1],))


def one_hot_matmul(table, positions):
    p = np.asarray(positions)
    if p.min() < 0 or p.max() > len(table) - 1:
        raise IndexError("範囲外")
    one_hot = np.eye(len(table), dtype=table.dtype)[p]  # (..., max_len)
    return one_hot @ table


def take_with_raise_mode(table, positions):
    p = np.asarray(positions)
    if (p < 0).any():
        raise IndexError("負の位置")
    return np.take(table, p, axis=0, mode="raise")  # raises IndexError past the end


def recursive_lists(table, positions):
    if isinstance(positions, (list, tuple, np.ndarray)) and np.ndim(positions) > 0:
        return np.stack([recursive_lists(table, p) for p in positions])
    pos = int(positions)
    if pos < 0 or pos >= table.shape[0]:
        raise IndexError(pos)
    return table[pos].astype(np.float64)


@pytest.mark.parametrize("func", [fancy_index, loop_over_flat_positions, one_hot_matmul,
                                  take_with_raise_mode, recursive_lists])
def test_every_correct_style_passes(capsys, func):
    ok, text = _verdict(capsys, func)
    assert ok.passed is True and text.startswith("【正解】"), text


def test_the_check_is_collected_under_its_name():
    assert CHECKS["check_position_lookup"] is check_position_lookup


def test_the_student_edition_stub_is_reported_as_unimplemented(capsys):
    def my_lookup(table, positions):
        raise NotImplementedError("位置の表を引く関数を書いてください")

    ok, text = _verdict(capsys, my_lookup)
    assert ok.passed is False and text.startswith("【未実装】")


# --- typical mistakes ------------------------------------------------------------------------

def plain_numpy_index(table, positions):
    return table[np.asarray(positions)]  # -1 silently becomes the last row


def clipped(table, positions):
    return table[np.clip(positions, 0, len(table) - 1)]


def take_clip(table, positions):
    return np.take(table, positions, axis=0, mode="clip")


def take_wrap(table, positions):
    return np.take(table, positions, axis=0, mode="wrap")


def checks_only_the_upper_end(table, positions):
    p = np.asarray(positions)
    if np.any(p >= len(table)):
        raise IndexError("範囲外")
    return table[p]  # negative positions wrap


def greater_than_instead_of_greater_or_equal(table, positions):
    p = np.asarray(positions)
    if np.any(p < 0) or np.any(p > len(table)):
        raise IndexError("範囲外")
    return np.take(table, p, axis=0, mode="clip")  # len(table) gives the last row


def value_error_instead_of_index_error(table, positions):
    p = np.asarray(positions)
    if np.any(p < 0) or np.any(p >= len(table)):
        raise ValueError("範囲外です")
    return table[p]


def rejects_the_last_row(table, positions):
    p = np.asarray(positions)
    if np.any(p < 0) or np.any(p >= len(table) - 1):
        raise IndexError("範囲外")
    return table[p]


def counted_from_one(table, positions):
    p = np.asarray(positions)
    if np.any(p < 1) or np.any(p > len(table)):
        raise IndexError("範囲外")
    return table[p - 1]


def shifted_by_one(table, positions):
    return table[np.asarray(positions) - 1]  # counted from 1: position 0 wraps


def only_1d_positions(table, positions):
    rows = []
    for pos in positions:
        if pos < 0 or pos >= len(table):
            raise IndexError(pos)
        rows.append(table[pos])
    return np.array(rows)


def flattened_rows(table, positions):
    return fancy_index(table, np.ravel(positions))


def rounded_to_int(table, positions):
    return fancy_index(table, positions).astype(int)


MISTAKES = [
    (plain_numpy_index, "表の末尾から数えた行"),
    (checks_only_the_upper_end, "NumPy の負の添字は後ろから数える"),
    (take_wrap, "表の末尾から数えた行"),
    (clipped, "最初の行 table[0]"),
    (take_clip, "切り詰めて"),
    (greater_than_instead_of_greater_or_equal, "p >= len(table) で判定します"),
    (value_error_instead_of_index_error, "IndexError を出してください（いまは ValueError）"),
    (rejects_the_last_row, "最後の位置 len(table) − 1 = 10 も表の中です"),
    (counted_from_one, "位置は 0 から数えます"),
    (shifted_by_one, "1 つ前の行 table[p - 1]"),
    (only_1d_positions, "どんな形の配列でも受け付けてください"),
    (flattened_rows, "positions の形 (2, 3) の後ろに D を付けた形"),
    (rounded_to_int, "整数に丸めずに"),
    (lambda table, positions: None, "None"),
]


@pytest.mark.parametrize("func, diagnosis", MISTAKES, ids=[f.__name__ for f, _ in MISTAKES])
def test_each_typical_mistake_gets_its_diagnosis(capsys, func, diagnosis):
    ok, text = _verdict(capsys, func)
    assert ok.passed is False and text.startswith("【不正解】"), text
    assert diagnosis in text, text


def test_a_clip_at_the_end_is_named_as_the_last_row(capsys):
    def clip_only_the_end(table, positions):
        p = np.asarray(positions)
        if np.any(p < 0):
            raise IndexError("負の位置")
        return table[np.minimum(p, len(table) - 1)]

    ok, text = _verdict(capsys, clip_only_the_end)
    assert ok.passed is False and "最後の行 table[10]" in text and "位置 11" in text, text


def test_wrapping_past_the_end_is_named(capsys):
    def wrap_only_the_end(table, positions):
        p = np.asarray(positions)
        if np.any(p < 0):
            raise IndexError("負の位置")
        return table[p % len(table)]

    ok, text = _verdict(capsys, wrap_only_the_end)
    assert ok.passed is False and "割った余りの行" in text, text


def test_zeros_for_an_outside_position_are_told_to_raise(capsys):
    def zero_row(table, positions):
        p = np.asarray(positions)
        inside = (p >= 0) & (p < len(table))
        rows = np.zeros(p.shape + (table.shape[1],), dtype=table.dtype)
        rows[inside] = table[p[inside]]
        return rows

    ok, text = _verdict(capsys, zero_row)
    assert ok.passed is False and "負の位置でエラーが出ません" in text, text


def test_the_checks_inputs_survive_a_function_that_modifies_them(capsys):
    def my_lookup(table, positions):
        rows = fancy_index(table, positions).copy()
        table[:] = 0.0
        return rows

    assert _verdict(capsys, my_lookup)[0].passed is True


_ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | st.builds(lambda shape, x: np.full(shape, x),
                st.lists(st.integers(0, 6), max_size=3).map(tuple), st.floats()),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)
_ERRORS = st.sampled_from([ValueError, TypeError, IndexError, KeyError, ZeroDivisionError,
                           AttributeError, RuntimeError])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(returned=_ANYTHING)
def test_no_return_value_makes_the_check_raise_or_pass(returned):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_position_lookup(lambda table, positions: returned)
    assert ok.passed is False
    assert printed.getvalue().startswith("【不正解】") and "Traceback" not in printed.getvalue()


@settings(max_examples=30, deadline=None)
@given(error=_ERRORS, message=st.text(max_size=200))
def test_no_exception_of_the_students_code_escapes_the_check(error, message):
    def my_lookup(table, positions):
        raise error(message)

    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check_position_lookup(my_lookup)
    assert ok.passed is False and error.__name__ in printed.getvalue()


# --- sizes unlike the chapter's example, and the reference itself ---------------------------

def eight_rows_written_in(table, positions):
    """Right for the chapter's example table of 8 rows only."""
    p = np.asarray(positions)
    if np.any(p < 0) or np.any(p >= 8):
        raise IndexError("範囲外")
    return table[p]


def test_an_answer_right_only_for_the_chapters_table_is_named(capsys):
    example = np.random.default_rng(0).normal(size=(8, 4))  # the chapter's (8, 4) table
    np.testing.assert_array_equal(eight_rows_written_in(example, [3, 7]), example[[3, 7]])
    with pytest.raises(IndexError):
        eight_rows_written_in(example, [8])
    ok, text = _verdict(capsys, eight_rows_written_in)
    assert ok.passed is False and "行数 8 を書き込んでいませんか" in text, text


def test_the_hidden_tables_are_not_the_chapters_size_nor_powers_of_two():
    tables = {case.table.shape for case in _inside_cases()}
    tables |= {case.table.shape for case, _ in _outside_cases()}
    for rows, width in tables:
        assert rows != 8 and rows & (rows - 1) != 0 and rows != width


def through_the_module(table, positions):
    return attnlab.positional.lookup_positions(table, positions)


def checked_then_delegated(table, positions):
    p = np.asarray(positions)
    if np.any(p < 0):
        raise IndexError("負の位置")
    return lookup_positions(table, p)


@pytest.mark.parametrize("answer", [
    lookup_positions, through_the_module, checked_then_delegated,
    functools.partial(lookup_positions),
    lambda table, positions: lookup_positions(table, positions),
], ids=["itself", "module", "wrapper", "partial", "lambda"])
def test_the_reference_is_refused_however_it_is_passed(capsys, answer):
    ok, text = _verdict(capsys, answer)
    assert ok.passed is False and "lookup_positions をそのまま使っています" in text, text
