"""Chapter 11's self-check (position interpolation) accepts every right answer, diagnoses
each typical mistake, and fails an answer right only for whole ratios L′/L."""

import math

import numpy as np
import pytest

from attnlab.checks import check_interpolate_positions
from scripts.book import SOLUTION_COLUMNS, display_width


def verdict(check, func, capsys):
    ok = check(func)
    return ok, capsys.readouterr().out


# --- check_interpolate_positions --------------------------------------------------------------

def interp_vectorised(positions, train_len, target_len):
    return positions * train_len / target_len


def interp_loop(positions, train_len, target_len):
    return [p * (train_len / target_len) for p in positions]


def interp_float32(positions, train_len, target_len):
    return (np.asarray(positions, dtype=np.float32) / np.float32(target_len / train_len))


def interp_divide(positions, train_len, target_len):
    scale = target_len / train_len
    return np.array([float(p) / scale for p in positions])


@pytest.mark.parametrize("func", [interp_vectorised, interp_loop, interp_float32,
                                  interp_divide])
def test_right_interpolations_pass(func, capsys):
    ok, out = verdict(check_interpolate_positions, func, capsys)
    assert ok and "【正解】" in out


@pytest.mark.parametrize("func, diagnosis", [
    (lambda p, a, b: p * b / a, "target_len / train_len 倍"),
    (lambda p, a, b: np.round(p * a / b), "丸めています"),
    (lambda p, a, b: (p * a / b).astype(int), "切り捨て"),
    (lambda p, a, b: p * a // b, "切り捨て"),
    (lambda p, a, b: np.floor(p * a / b + 0.5), "丸めています"),
    (lambda p, a, b: np.arange(len(p)) * a / b, "行の番号"),
    (lambda p, a, b: p * (a // b), "整数の割り算"),
    (lambda p, a, b: p / (b // a), "倍率 s = target_len / train_len を整数"),
    (lambda p, a, b: p / round(b / a), "倍率 s = target_len / train_len を整数"),
    (lambda p, a, b: p / math.ceil(b / a), "倍率 s = target_len / train_len を整数"),
    (lambda p, a, b: p * (a - 1) / (b - 1), "最後の位置 L′ − 1 を L − 1 に合わせて"),
    (lambda p, a, b: p / b, "値が正しくありません"),
])
def test_each_interpolation_mistake_gets_its_diagnosis(func, diagnosis, capsys):
    ok, out = verdict(check_interpolate_positions, func, capsys)
    assert not ok and "【不正解】" in out and diagnosis in out, out


def test_right_values_as_integers_are_not_possible_and_wrong_shapes_are_explained(capsys):
    ok, out = verdict(check_interpolate_positions, lambda p, a, b: (p * a / b)[:-1], capsys)
    assert not ok and "形" in out
    ok, out = verdict(check_interpolate_positions, lambda p, a, b: None, capsys)
    assert not ok and "None" in out
    ok, out = verdict(check_interpolate_positions, lambda p, a, b: "abc", capsys)
    assert not ok and "数値" in out


def test_the_stub_and_exceptions_are_reported_without_a_traceback(capsys):
    def stub(positions, train_len, target_len):
        raise NotImplementedError

    ok, out = verdict(check_interpolate_positions, stub, capsys)
    assert not ok and "【未実装】" in out
    ok, out = verdict(check_interpolate_positions, lambda p, a, b: 1 / 0, capsys)
    assert not ok and "ZeroDivisionError" in out and "Traceback" not in out


def test_the_success_line_fits_a_folded_solution(capsys):
    ok, out = verdict(check_interpolate_positions, interp_vectorised, capsys)
    assert ok and display_width(out.rstrip("\n").replace("interp_vectorised",
                                                          "my_interpolate_positions"))\
        <= SOLUTION_COLUMNS


def test_an_answer_right_only_for_whole_ratios_fails(capsys):
    # 512 → 768: // gives 1, the positions come back unchanged
    ok, out = verdict(check_interpolate_positions, lambda p, a, b: p / (b // a), capsys)
    assert not ok and "s = 1.5" in out, out
    # the chapter's example (L = 16 → 4L): a scale of 4 written in
    ok, out = verdict(check_interpolate_positions, lambda p, a, b: p / 4, capsys)
    assert not ok and "【不正解】" in out
