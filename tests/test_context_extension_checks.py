"""Chapter 09's self-checks (the NTK-aware base, YaRN's frequencies) accept every right
answer, diagnose each typical mistake, fail an answer right only for the chapter's
example, and refuse the package's functions that the chapter imports."""

import contextlib
import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.checks import check_ntk_scaled_base, check_yarn_inv_freq
from attnlab.checks.context_extension import _YARN_CASES
from attnlab.checks.core import REPEAT_NOTE, reset_attempts
from attnlab.positional import (
    ntk_scaled_base,
    rope_inv_freq,
    yarn_correction_range,
    yarn_inv_freq,
    yarn_ramp,
)
from scripts.book import SOLUTION_COLUMNS, display_width


@pytest.fixture(autouse=True)
def _first_attempt():
    """Each test starts as a student's first attempt (fix_on_repeat counts per kernel)."""
    reset_attempts()
    yield
    reset_attempts()


def verdict(check, func, capsys):
    ok = check(func)
    return ok, capsys.readouterr().out


#: The formula the exercise asks the student to derive, as code or as a sentence.
FORMULA = ("scale ** (d_head / (d_head - 2))", "ではなく d_head / (d_head - 2)")


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
    (lambda base, scale, d: base * scale, "最後のペアの番号を d_head/2 に"),
    (lambda base, scale, d: base * scale ** (d // (d - 2)), "整数の割り算"),
    (lambda base, scale, d: base * scale ** d / (d - 2), "括弧"),
    (lambda base, scale, d: base * scale ** ((d - 2) / d), "逆数"),
    (lambda base, scale, d: scale ** (d / (d - 2)), "掛け忘れ"),
    (lambda base, scale, d: base / scale ** (d / (d - 2)), "割っています"),
    (lambda base, scale, d: base * scale ** 2, "遅くしすぎています"),
    (lambda base, scale, d: base * scale ** (64 / 62), "d_head = 64 のときの値"),
    (lambda base, scale, d: base * scale ** (16 / 14), "d_head = 16 のときの値"),
    (lambda base, scale, d: base * scale ** (d / (d - 1)), "次元の番号 d_head − 1"),
    (lambda base, scale, d: base * scale ** (2 * d / (d - 2)), "2 が抜けていませんか"),
    (lambda base, scale, d: int(base * scale ** (d / (d - 2))), "整数に丸めて"),
])
def test_each_ntk_mistake_gets_its_diagnosis(func, diagnosis, capsys):
    ok, out = verdict(check_ntk_scaled_base, func, capsys)
    assert not ok and "【不正解】" in out and diagnosis in out, out
    assert not any(formula in out for formula in FORMULA), out  # never on a first attempt


@pytest.mark.parametrize("func", [
    lambda base, scale, d: base * scale ** d / (d - 2),  # parentheses
    lambda base, scale, d: base * scale ** ((d - 2) / d),  # inverted
    lambda base, scale, d: scale ** (d / (d - 2)),  # base forgotten
    lambda base, scale, d: base / scale ** (d / (d - 2)),  # base divided
])
def test_named_ntk_mistakes_give_the_formula_only_on_a_repeated_attempt(func, capsys):
    _, first = verdict(check_ntk_scaled_base, func, capsys)
    assert REPEAT_NOTE in first and not any(formula in first for formula in FORMULA), first
    _, second = verdict(check_ntk_scaled_base, func, capsys)
    assert REPEAT_NOTE not in second and any(formula in second for formula in FORMULA), second


@pytest.mark.parametrize("func, ratio, tendency", [
    (lambda base, scale, d: base, "base′ が base と同じ", "まだ速すぎます"),  # PI's habit
    (lambda base, scale, d: base * scale ** (d / (d + 2)), "元の 0.4228 倍", "まだ速すぎます"),
    (lambda base, scale, d: base ** (d / (d - 2)) * scale, "元の 0.3087 倍", "遅くしすぎ"),
])
def test_another_wrong_base_is_told_how_far_it_misses_the_conditions(func, ratio,
                                                                     tendency, capsys):
    _, first = verdict(check_ntk_scaled_base, func, capsys)
    assert ratio in first and tendency in first and "1/s = 0.4 倍" in first, first
    assert "条件 1 は満たしています" in first and REPEAT_NOTE in first
    assert not any(formula in first for formula in FORMULA) and "正しい値" not in first
    _, second = verdict(check_ntk_scaled_base, func, capsys)
    # on a repeated attempt, the equation of condition 2 to solve, still not the answer
    assert "base′ について解いてください" in second and FORMULA[0] not in second, second


def test_caret_for_power_is_explained(capsys):
    ok, out = verdict(check_ntk_scaled_base, lambda b, s, d: b * s ^ (d / (d - 2)), capsys)
    assert not ok and "TypeError" in out and "XOR" in out and "**" in out, out


def test_a_non_positive_base_is_explained(capsys):
    ok, out = verdict(check_ntk_scaled_base, lambda b, s, d: -b, capsys)
    assert not ok and "正の数" in out, out


def test_strange_ntk_returns_are_explained(capsys):
    for value, words in [(None, "None"), ("abc", "数ではありません"), ([1.0, 2.0], "形")]:
        ok, out = verdict(check_ntk_scaled_base, lambda b, s, d, v=value: v, capsys)
        assert not ok and words in out, out

    def stub(base, scale, d_head):
        raise NotImplementedError

    ok, out = verdict(check_ntk_scaled_base, stub, capsys)
    assert not ok and "【未実装】" in out


def test_the_ntk_success_line_fits_a_folded_solution(capsys):
    ok, out = verdict(check_ntk_scaled_base, lambda b, s, d: b * s ** (d / (d - 2)), capsys)
    assert ok and display_width(out.rstrip("\n").replace("<lambda>", "my_ntk_scaled_base"))\
        <= SOLUTION_COLUMNS


@pytest.mark.parametrize("func, name", [
    (ntk_scaled_base, "ntk_scaled_base"),
    (lambda base, scale, d: ntk_scaled_base(base, scale, d), "ntk_scaled_base"),
    (lambda base, scale, d: rope_inv_freq(d, base, scale, "ntk")[1] ** (-d / 2), "rope_inv_freq"),
])
def test_the_package_ntk_functions_are_refused(func, name, capsys):
    ok, out = verdict(check_ntk_scaled_base, func, capsys)
    assert not ok and f"attnlab の {name} を使っています" in out, out


def test_an_ntk_answer_right_only_for_the_chapters_example_fails(capsys):
    # the chapter prints d_head = 64: an exponent written as 64 / 62 passes only there
    ok, out = verdict(check_ntk_scaled_base, lambda base, scale, d: base * scale ** (64 / 62),
                      capsys)
    assert not ok and "【不正解】" in out


# --- check_yarn_inv_freq -------------------------------------------------------------------

def yarn_vectorised(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0):
    theta = base ** (-np.arange(0, d_head, 2) / d_head)  # (Dh/2,)

    def index(turns):  # the pair index that turns `turns` times over L
        return d_head * np.log(original_max_len / (2 * np.pi * turns)) / (2 * np.log(base))

    low = max(math.floor(index(beta_fast)), 0)
    high = min(math.ceil(index(beta_slow)), d_head - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d_head // 2) - low) / (high - low), 0, 1)  # 1: interpolate
    return theta / scale * ramp + theta * (1 - ramp)


def yarn_loop(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0):
    def index(turns):
        return d_head * math.log(original_max_len / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = min(max(math.floor(index(beta_fast)), 0), d_head - 1)
    high = min(max(math.ceil(index(beta_slow)), 0), d_head - 1)
    out = []
    for i in range(d_head // 2):
        theta = 1 / base ** (2 * i / d_head)
        keep = 1.0 - min(max((i - low) / max(high - low, 0.001), 0.0), 1.0)
        out.append(keep * theta + (1 - keep) * theta / scale)
    return out  # a list is fine


def yarn_float32(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return yarn_vectorised(d_head, base, scale, original_max_len, beta_fast,
                           beta_slow).astype(np.float32)


@pytest.mark.parametrize("func", [yarn_vectorised, yarn_loop, yarn_float32])
def test_right_yarn_answers_pass(func, capsys):
    ok, out = verdict(check_yarn_inv_freq, func, capsys)
    assert ok and "【正解】" in out, out
    assert display_width(out.rstrip("\n").replace(func.__name__, "my_yarn_inv_freq"))\
        <= SOLUTION_COLUMNS


def yarn_with(mistake):
    def my_yarn_inv_freq(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0):
        theta = base ** (-np.arange(0, d_head, 2) / d_head)
        two_pi = 1.0 if mistake == "no 2π" else 2 * np.pi

        def index(turns):
            return d_head * np.log(original_max_len / (two_pi * turns)) / (2 * np.log(base))

        if mistake == "θ without its 2":
            theta = base ** (-np.arange(d_head // 2) / d_head)
        if mistake == "L·s":
            original_max_len = original_max_len * scale  # "the length we extend to"
        low, high = index(beta_fast), index(beta_slow)
        if mistake == "betas swapped":
            low, high = high, low
        if mistake == "floor and ceil swapped":
            low, high = math.ceil(low), math.floor(high)
        elif mistake == "round":
            low, high = round(low), round(high)
        elif mistake != "no rounding":
            low, high = math.floor(low), math.ceil(high)
        if mistake == "clamp to the pairs":  # "the pair indices stop at d_head/2 − 1"
            low, high = max(low, 0), min(high, d_head // 2 - 1)
        elif mistake != "no clamp":
            low, high = max(low, 0), min(high, d_head - 1)
        if mistake == "section 4's edges":
            low, high = 3, 16
        if low == high and mistake != "no guard":
            high += 0.001
        i = np.arange(d_head // 2)
        if mistake == "ramp over dimensions":
            i = np.arange(0, d_head, 2)
        if mistake == "ramp from 1":
            i = i + 1
        ramp = np.clip((i - low) / (high - low), 0, 1)
        if mistake == "paper's ramp":
            turns = original_max_len * theta / (2 * np.pi)
            ramp = 1 - np.clip((turns - beta_slow) / (beta_fast - beta_slow), 0, 1)
        if mistake == "ramp reversed":
            ramp = 1 - ramp
        if mistake == "returns γ̃":
            return 1 - ramp
        if mistake == "times s":
            return theta * scale * ramp + theta * (1 - ramp)
        return theta / scale * ramp + theta * (1 - ramp)
    return my_yarn_inv_freq


@pytest.mark.parametrize("mistake, diagnosis", [
    ("ramp reversed", "ランプの向きが逆"),
    ("paper's ramp", "論文の式の γ(r)"),
    ("no clamp", "[0, d_head − 1] に収めていません"),
    ("no rounding", "丸めていません"),
    ("floor and ceil swapped", "切り捨てと切り上げが逆"),
    ("betas swapped", "beta_fast と beta_slow が逆"),
    ("no 2π", "2π が抜けています"),
    ("times s", "s 倍しています"),
    ("round", "四捨五入（round）"),
    ("L·s", "広げた後の長さ L·s"),
    ("θ without its 2", "θ_i = base^(−2i/d_head) の 2 が抜けています"),
    ("clamp to the pairs", "high を最後のペアの番号 d_head/2 − 1 で止めています"),
    ("no guard", "high に 0.001 を足してください"),
    ("ramp over dimensions", "次元の番号 0, 2, 4"),
    ("ramp from 1", "1 から数えています"),
    ("section 4's edges", "第 4 節の例の値 3, 16"),
    ("returns γ̃", "ランプを返しています"),
])
def test_each_yarn_mistake_gets_its_diagnosis(mistake, diagnosis, capsys):
    ok, out = verdict(check_yarn_inv_freq, yarn_with(mistake), capsys)
    assert not ok and diagnosis in out, out
    assert out.count("\n") == 1 and "Traceback" not in out


def test_the_hidden_yarn_cases_reach_both_edges_of_the_clamp():
    """A case whose high edge is past the last pair (clamping high to d_head/2 − 1 shows)
    and one whose edges are both clamped to the same value (the 0.001 guard shows)."""
    edges = [(d_head, yarn_correction_range(d_head, base, L, beta_fast=fast, beta_slow=slow))
             for _, d_head, base, _, L, fast, slow in _YARN_CASES]
    assert any(high > d_head // 2 - 1 for d_head, (low, high) in edges)
    assert any(low == high for _, (low, high) in edges)


def test_a_loop_without_the_guard_is_told_why_it_divides_by_zero(capsys):
    def my_yarn_inv_freq(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0):
        def index(turns):
            return d_head * math.log(original_max_len / (turns * 2 * math.pi)) / (
                2 * math.log(base))

        low = max(math.floor(index(beta_fast)), 0)
        high = min(math.ceil(index(beta_slow)), d_head - 1)
        out = []
        for i in range(d_head // 2):
            theta = base ** (-2 * i / d_head)
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # ZeroDivisionError
            out.append(ramp * theta / scale + (1 - ramp) * theta)
        return out

    ok, out = verdict(check_yarn_inv_freq, my_yarn_inv_freq, capsys)
    assert not ok and "ZeroDivisionError" in out and "0.001 を足して" in out, out


def test_yarn_without_the_beta_arguments_is_told_the_signature(capsys):
    def my_yarn_inv_freq(d_head, base, scale, original_max_len):
        return yarn_vectorised(d_head, base, scale, original_max_len)

    ok, out = verdict(check_yarn_inv_freq, my_yarn_inv_freq, capsys)
    assert not ok and "TypeError" in out and "beta_fast=32.0" in out


def test_a_yarn_answer_right_only_for_the_chapters_example_fails(capsys):
    # the chapter prints θ'/θ for d_head = 64, L = 512, s = 4: written in, it passes only there
    shown = yarn_inv_freq(64, 10000.0, 4.0, 512)
    ok, out = verdict(check_yarn_inv_freq, lambda *args, **kwargs: shown.copy(), capsys)
    assert not ok and "【不正解】" in out
    # and the band edges (3, 16) of that example, written in
    low, high = yarn_correction_range(64, 10000.0, 512)

    def fixed_edges(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0):
        theta = base ** (-np.arange(0, d_head, 2) / d_head)
        ramp = np.clip((np.arange(d_head // 2) - low) / (high - low), 0, 1)
        return theta / scale * ramp + theta * (1 - ramp)

    assert not check_yarn_inv_freq(fixed_edges)
    capsys.readouterr()


@pytest.mark.parametrize("func, name", [
    (yarn_inv_freq, "yarn_inv_freq"),
    (lambda d, b, s, L, beta_fast=32.0, beta_slow=1.0: rope_inv_freq(d, b, s, "yarn", L),
     "rope_inv_freq"),
    (lambda d, b, s, L, beta_fast=32.0, beta_slow=1.0:
     (b ** (-np.arange(0, d, 2) / d)) * (1 - yarn_ramp(d, b, L) * (1 - 1 / s)), "yarn_ramp"),
])
def test_the_package_yarn_functions_are_refused(func, name, capsys):
    ok, out = verdict(check_yarn_inv_freq, func, capsys)
    assert not ok and f"attnlab の {name} を使っています" in out, out


def test_the_yarn_stub_and_strange_returns(capsys):
    def stub(d_head, base, scale, original_max_len, beta_fast=32.0, beta_slow=1.0):
        raise NotImplementedError

    ok, out = verdict(check_yarn_inv_freq, stub, capsys)
    assert not ok and "【未実装】" in out
    for value, words in [(None, "None"), ("abc", "数値"), (np.ones(7), "形")]:
        ok, out = verdict(check_yarn_inv_freq, lambda *a, v=value, **k: v, capsys)
        assert not ok and words in out, out


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.floats(), st.text(),
                 st.lists(st.floats(allow_nan=False), max_size=40)))
def test_any_return_value_gives_one_line(value):
    for check in (check_yarn_inv_freq, check_ntk_scaled_base):
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            ok = check(lambda *args, **kwargs: value)
        assert ok.passed is False and printed.getvalue().count("\n") == 1
