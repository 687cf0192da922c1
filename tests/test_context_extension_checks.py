"""Chapter 09's self-checks accept every right answer and diagnose each typical mistake."""

import math

import numpy as np
import pytest

from attnlab.checks import check_interpolate_positions, check_ntk_scaled_base


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


# --- check_ntk_scaled_base ---------------------------------------------------------------------

@pytest.mark.parametrize("func", [
    lambda base, scale, d: base * scale ** (d / (d - 2)),
    lambda base, scale, d: math.exp(math.log(base) + d / (d - 2) * math.log(scale)),
    lambda base, scale, d: np.float32(base) * np.float32(scale) ** np.float32(d / (d - 2)),
    lambda base, scale, d: np.array([base * np.power(scale, d / (d - 2.0))]),
    lambda base, scale, d: base * (scale ** d) ** (1 / (d - 2)),
])
def test_right_ntk_bases_pass(func, capsys):
    ok, out = verdict(check_ntk_scaled_base, func, capsys)
    assert ok and "【正解】" in out, out


@pytest.mark.parametrize("func, diagnosis", [
    (lambda base, scale, d: base * scale, "指数 d_head / (d_head − 2) が抜けて"),
    (lambda base, scale, d: base * scale ** (d // (d - 2)), "整数の割り算"),
    (lambda base, scale, d: base * scale ** d / (d - 2), "括弧"),
    (lambda base, scale, d: base * scale ** ((d - 2) / d), "逆数"),
    (lambda base, scale, d: scale ** (d / (d - 2)), "掛け忘れ"),
    (lambda base, scale, d: base / scale ** (d / (d - 2)), "割っています"),
    (lambda base, scale, d: base * scale ** 2, "正しい値は"),
])
def test_each_ntk_mistake_gets_its_diagnosis(func, diagnosis, capsys):
    ok, out = verdict(check_ntk_scaled_base, func, capsys)
    assert not ok and "【不正解】" in out and diagnosis in out, out


def test_strange_ntk_returns_are_explained(capsys):
    for value, words in [(None, "None"), ("abc", "数ではありません"), ([1.0, 2.0], "形")]:
        ok, out = verdict(check_ntk_scaled_base, lambda b, s, d, v=value: v, capsys)
        assert not ok and words in out, out

    def stub(base, scale, d_head):
        raise NotImplementedError

    ok, out = verdict(check_ntk_scaled_base, stub, capsys)
    assert not ok and "【未実装】" in out
