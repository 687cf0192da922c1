"""Chapter 06's self-checks, its explorer numerics and the model run on given embeddings."""

import contextlib
import io
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.checks import check_add_positional_encoding, check_sinusoidal_encoding
from attnlab.experiments.sinusoidal_encoding import (
    EXPLORER_D_MODEL,
    EXPLORER_POSITIONS,
    EXPLORER_SEQ_LEN,
    explorer_state,
    logits_from_embeddings,
)
from attnlab.model import ModelConfig, forward, init_params
from attnlab.positional import sinusoidal_encoding


def _verdict(check, func):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check(func)
    text = printed.getvalue()
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return ok, text


# --- students' encodings, right and wrong ----------------------------------------------------

def loops_with_math_sin(n_positions, d_model):
    pe = [[0.0] * d_model for _ in range(n_positions)]
    for pos in range(n_positions):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos][2 * i] = math.sin(angle)
            pe[pos][2 * i + 1] = math.cos(angle)
    return pe  # a list of lists is fine


def vectorised_float32(n_positions, d_model):
    pos = np.arange(n_positions, dtype=np.float32)[:, None]
    i = np.arange(0, d_model, 2, dtype=np.float32)
    angle = pos / np.float32(10000.0) ** (i / np.float32(d_model))
    pe = np.zeros((n_positions, d_model), dtype=np.float32)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe


def div_term_with_exp_log(n_positions, d_model):
    """The exp(-log(10000)·2i/d) form of many tutorials."""
    pos = np.arange(n_positions)[:, None]
    div_term = np.exp(np.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = np.zeros((n_positions, d_model))
    pe[:, 0::2] = np.sin(pos * div_term)
    pe[:, 1::2] = np.cos(pos * div_term)
    return pe


def stacked_pairs(n_positions, d_model):
    angle = np.arange(n_positions)[:, None] / 10000 ** (np.arange(d_model // 2) * 2 / d_model)
    return np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(n_positions, d_model)


CORRECT = [loops_with_math_sin, vectorised_float32, div_term_with_exp_log, stacked_pairs,
           sinusoidal_encoding]


def student_encoding(*, order="sin_cos", layout="interleaved", exponent="2i", start=0):
    """A student's encoding with the chosen mistakes, written the way students do."""

    def my_sinusoidal_encoding(n_positions, d_model):
        pe = np.zeros((n_positions, d_model))
        half = d_model // 2
        for row, pos in enumerate(range(start, start + n_positions)):
            for i in range(half):
                for member, col in enumerate((2 * i, 2 * i + 1)):
                    power = {"2i": 2 * i, "i": i, "j": col}[exponent]
                    angle = pos / 10000 ** (power / d_model)
                    use_sin = (member == 0) == (order == "sin_cos")
                    value = math.sin(angle) if use_sin else math.cos(angle)
                    target = col if layout == "interleaved" else i + member * half
                    pe[row, target] = value
        return pe

    return my_sinusoidal_encoding


@pytest.mark.parametrize("func", CORRECT, ids=lambda f: f.__name__)
def test_every_correct_encoding_passes(func):
    ok, text = _verdict(check_sinusoidal_encoding, func)
    assert ok and text.startswith("【正解】"), text


@pytest.mark.parametrize("mistake, words", [
    ({"order": "cos_sin"}, "sin と cos が逆"),
    ({"layout": "concat"}, "[sin | cos]"),
    ({"exponent": "i"}, "指数が i/d_model"),
    ({"exponent": "j"}, "各次元の番号 j"),
    ({"start": 1}, "1 から数えて"),
])
def test_each_encoding_mistake_gets_its_diagnosis(mistake, words):
    ok, text = _verdict(check_sinusoidal_encoding, student_encoding(**mistake))
    assert not ok and text.startswith("【不正解】") and words in text, text


def test_two_mistakes_at_once_are_both_named():
    ok, text = _verdict(check_sinusoidal_encoding,
                        student_encoding(order="cos_sin", start=1))
    assert not ok and "sin と cos が逆" in text and "1 から数えて" in text, text


def test_a_transposed_encoding_is_named():
    ok, text = _verdict(check_sinusoidal_encoding, lambda n, d: sinusoidal_encoding(n, d).T)
    assert not ok and "転置" in text, text


def test_the_stub_is_unimplemented():
    def my_sinusoidal_encoding(n_positions, d_model):
        raise NotImplementedError

    ok, text = _verdict(check_sinusoidal_encoding, my_sinusoidal_encoding)
    assert not ok and text.startswith("【未実装】")


# --- students' additions, right and wrong -----------------------------------------------------

def add_broadcast(x):
    return x + sinusoidal_encoding(x.shape[1], x.shape[2])  # (T, D) broadcast over B


def add_in_a_loop_float32(x):
    out = np.array(x, dtype=np.float32)
    B, T, D = out.shape
    pe = vectorised_float32(T, D)
    for b in range(B):
        out[b] += pe
    return out


def add_in_place(x):
    x += loops_with_math_sin(x.shape[1], x.shape[2])
    return x


def add_by_batch_index_seq_first_table(x):
    """The bug: a (max_len, 1, D) table meant for (T, B, D), sliced with x.shape[0]."""
    pe = sinusoidal_encoding(512, x.shape[-1])[:, None, :]  # (max_len, 1, D)
    return x + pe[: x.shape[0]]


def add_by_batch_index_transposed(x):
    """The bug again: treating axis 0 as the positions."""
    pe = sinusoidal_encoding(x.shape[0], x.shape[-1])  # (B, D)
    return x + pe[:, None, :]


def add_with(encoding):
    return lambda x: x + np.asarray(encoding(x.shape[1], x.shape[2]))


@pytest.mark.parametrize("func", [add_broadcast, add_in_a_loop_float32, add_in_place],
                         ids=lambda f: f.__name__)
def test_every_correct_addition_passes(func):
    ok, text = _verdict(check_add_positional_encoding, func)
    assert ok and text.startswith("【正解】"), text


@pytest.mark.parametrize("func, words", [
    (add_by_batch_index_seq_first_table, "バッチの番号"),
    (add_by_batch_index_transposed, "バッチの番号"),
    (add_with(student_encoding(order="cos_sin")), "sin と cos が逆"),
    (add_with(student_encoding(layout="concat")), "[sin | cos]"),
    (add_with(student_encoding(exponent="i")), "指数が i/d_model"),
    (add_with(student_encoding(start=1)), "1 から数えて"),
    (lambda x: x, "そのまま"),
    (lambda x: np.broadcast_to(sinusoidal_encoding(x.shape[1], x.shape[2]), x.shape),
     "位置エンコーディングだけ"),
    (lambda x: x + sinusoidal_encoding(x.shape[0] * x.shape[1], x.shape[2]).reshape(x.shape),
     "系列ごとに足した値が違います"),
])
def test_each_addition_mistake_gets_its_diagnosis(func, words):
    ok, text = _verdict(check_add_positional_encoding, func)
    assert not ok and text.startswith("【不正解】") and words in text, text


def test_the_batch_index_bug_that_raises_is_explained():
    def add_b_rows(x):
        return x + sinusoidal_encoding(x.shape[0], x.shape[2])  # (B, D) against (B, T, D)

    ok, text = _verdict(check_add_positional_encoding, add_b_rows)
    assert not ok and "B = 4 行の PE" in text, text


def test_the_addition_stub_is_unimplemented():
    def my_add_positional_encoding(x):
        raise NotImplementedError

    ok, text = _verdict(check_add_positional_encoding, my_add_positional_encoding)
    assert not ok and text.startswith("【未実装】")


_ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | st.builds(lambda shape, x: np.full(shape, x),
                st.lists(st.integers(0, 6), max_size=3).map(tuple), st.floats()),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(returned=_ANYTHING)
def test_no_return_value_makes_either_check_raise_or_pass(returned):
    for check, func in [(check_sinusoidal_encoding, lambda n, d: returned),
                        (check_add_positional_encoding, lambda x: returned)]:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            ok = check(func)
        assert ok.passed is False
        assert printed.getvalue().startswith("【不正解】"), printed.getvalue()


# --- the explorer's numbers and the model on given embeddings ---------------------------------

@pytest.mark.parametrize("d_model", EXPLORER_D_MODEL)
def test_explorer_dot_products_peak_at_the_position_with_d_model_over_two(d_model):
    for pos in EXPLORER_POSITIONS[::7]:
        vector, dots = explorer_state(pos, d_model)
        assert vector.shape == (d_model,) and dots.shape == (EXPLORER_SEQ_LEN,)
        assert int(np.argmax(dots)) == pos
        np.testing.assert_allclose(dots[pos], d_model / 2)


def test_explorer_rejects_values_it_does_not_offer():
    with pytest.raises(ValueError, match="d_model"):
        explorer_state(3, 12)
    with pytest.raises(ValueError, match="pos"):
        explorer_state(-1, 16)


@pytest.mark.parametrize("positional", ["none", "sinusoidal", "learned"])
def test_logits_from_embeddings_equal_the_models_forward(positional):
    config = ModelConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=2, max_len=8,
                         positional=positional, dtype="float64")
    rng = np.random.default_rng(6)
    params = init_params(config, rng)
    tokens = rng.integers(0, 11, size=(3, 7))  # (B, T)
    x = params["embed"][tokens]  # (B, T, D)
    if positional == "sinusoidal":
        x = x + sinusoidal_encoding(7, 16)
    elif positional == "learned":
        x = x + params["pos"][:7]
    np.testing.assert_allclose(logits_from_embeddings(params, x, config),
                               forward(params, tokens, config).logits, rtol=1e-10, atol=1e-12)


def test_logits_from_embeddings_refuses_schemes_inside_attention():
    config = ModelConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=1, max_len=8,
                         positional="rope")
    params = init_params(config, np.random.default_rng(0))
    with pytest.raises(ValueError, match="positional"):
        logits_from_embeddings(params, np.zeros((1, 4, 16)), config)
