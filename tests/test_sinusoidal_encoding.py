"""Chapter 06's self-checks, its explorer numerics and the model run on given embeddings."""

import contextlib
import io
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.checks import check_add_positional_encoding, check_timing_signal
from attnlab.checks.sinusoidal_encoding import _ADD_CASES, _SIGNAL_CASES, _timing_signal
from attnlab.experiments.sinusoidal_encoding import (
    EXPLORER_D_MODEL,
    EXPLORER_POSITIONS,
    EXPLORER_SEQ_LEN,
    explorer_state,
    logits_from_embeddings,
    permute_model_dimensions,
    score_terms,
)
from attnlab.model import ModelConfig, forward, init_params, layer_keys
from attnlab.positional import sinusoidal_encoding


def _verdict(check, func):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        ok = check(func)
    text = printed.getvalue()
    assert "Traceback" not in text
    assert text.count("\n") == 1, text  # one verdict line
    return ok, text


# --- tensor2tensor's timing signal, written right ----------------------------------------

def as_in_tensor2tensor(n_positions, d_model):
    """get_timing_signal_1d, line by line in numpy (min_timescale 1, max_timescale 1e4)."""
    position = np.arange(n_positions, dtype=np.float64)
    num_timescales = d_model // 2
    log_timescale_increment = math.log(1.0e4 / 1.0) / max(num_timescales - 1, 1)
    inv_timescales = 1.0 * np.exp(np.arange(num_timescales) * -log_timescale_increment)
    scaled_time = position[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)


def loops_with_math(n_positions, d_model):
    half = d_model // 2
    pe = [[0.0] * d_model for _ in range(n_positions)]
    for pos in range(n_positions):
        for i in range(half):
            angle = pos / 10000 ** (i / (half - 1))
            pe[pos][i] = math.sin(angle)
            pe[pos][half + i] = math.cos(angle)
    return pe  # a list of lists is fine


def float32_geomspace(n_positions, d_model):
    freq = np.geomspace(1.0, 1e-4, d_model // 2).astype(np.float32)  # 1 … 1/10000
    angle = np.arange(n_positions, dtype=np.float32)[:, None] * freq
    return np.hstack([np.sin(angle), np.cos(angle)])


def paper_function_with_another_base(n_positions, d_model):
    """sinusoidal_encoding reaches it too: base^(2i/d) = 10000^(i/(d/2 − 1))."""
    half = d_model // 2
    return sinusoidal_encoding(n_positions, d_model, base=10000 ** (half / (half - 1)),
                               layout="concat")


CORRECT = [as_in_tensor2tensor, loops_with_math, float32_geomspace,
           paper_function_with_another_base]


def test_the_answer_key_is_tensor2tensors_formula():
    for n, d in _SIGNAL_CASES + ((50, 16), (3, 4)):
        np.testing.assert_allclose(_timing_signal(n, d), as_in_tensor2tensor(n, d),
                                   rtol=0, atol=1e-12)
    last = _timing_signal(2, 16)[1, 7]  # sin(1 · f_7), f_7 = 1/10000 exactly
    assert last == pytest.approx(math.sin(1e-4), rel=1e-12)


@pytest.mark.parametrize("func", CORRECT, ids=lambda f: f.__name__)
def test_every_correct_signal_passes(func):
    ok, text = _verdict(check_timing_signal, func)
    assert ok and text.startswith("【正解】"), text


# --- tensor2tensor's timing signal, written wrong ----------------------------------------

def student_signal(*, layout="concat", step="t2t", order="sin_cos", start=0):
    """A student's signal with the chosen mistakes, written the way students do."""

    def my_timing_signal(n_positions, d_model):
        half = d_model // 2
        pe = np.zeros((n_positions, d_model))
        for row, pos in enumerate(range(start, start + n_positions)):
            for i in range(half):
                if step == "t2t":
                    angle = pos / 10000 ** (i / (half - 1))
                elif step == "paper":
                    angle = pos / 10000 ** (2 * i / d_model)
                else:  # inverted: multiplied by the timescale
                    angle = pos * 10000 ** (i / (half - 1))
                values = (math.sin(angle), math.cos(angle))
                if order == "cos_sin":
                    values = values[::-1]
                cols = (i, half + i) if layout == "concat" else (2 * i, 2 * i + 1)
                pe[row, cols[0]], pe[row, cols[1]] = values
        return pe

    return my_timing_signal


@pytest.mark.parametrize("mistake, words", [
    ({"layout": "interleaved"}, "論文の式の並べ方"),
    ({"step": "paper"}, "d_model/2 − 1 段"),
    ({"step": "inverted"}, "指数の符号が逆"),
    ({"order": "cos_sin"}, "前半に cos"),
    ({"start": 1}, "1 から数えて"),
])
def test_each_signal_mistake_gets_its_diagnosis(mistake, words):
    ok, text = _verdict(check_timing_signal, student_signal(**mistake))
    assert not ok and text.startswith("【不正解】") and words in text, text


def test_two_mistakes_at_once_are_both_named():
    ok, text = _verdict(check_timing_signal, student_signal(layout="interleaved", step="paper"))
    assert not ok and "論文の式の並べ方" in text and "d_model/2 − 1 段" in text, text


def test_the_papers_encoding_from_the_chapter_is_not_the_answer():
    # sinusoidal_encoding is imported by the chapter: as it is, it is the paper's formula
    for layout, words in (("interleaved", "論文の式の並べ方"),
                          ("concat", "sinusoidal_encoding と同じ")):
        ok, text = _verdict(check_timing_signal,
                            lambda n, d, layout=layout: sinusoidal_encoding(n, d, layout=layout))
        assert not ok and words in text, text


def test_a_transposed_signal_is_named():
    ok, text = _verdict(check_timing_signal, lambda n, d: _timing_signal(n, d).T)
    assert not ok and "転置" in text, text


def test_an_answer_right_only_for_the_chapters_sizes_fails():
    def sixteen_wide(n_positions, d_model):
        return as_in_tensor2tensor(n_positions, 16)[:, :d_model]  # d_model = 16 written in

    np.testing.assert_array_equal(sixteen_wide(50, 16), as_in_tensor2tensor(50, 16))
    ok, text = _verdict(check_timing_signal, sixteen_wide)
    assert not ok, text


def test_the_hidden_signal_cases_are_not_square_round_or_powers_of_two():
    for n, d in _SIGNAL_CASES:
        assert n != d and d % 2 == 0 and d >= 4
        assert d & (d - 1) != 0 and d not in (16, 64)
    assert {d // 2 % 2 for _, d in _SIGNAL_CASES} == {0, 1}  # odd and even pair counts


def test_the_signal_stub_is_unimplemented():
    def my_timing_signal(n_positions, d_model):
        raise NotImplementedError

    ok, text = _verdict(check_timing_signal, my_timing_signal)
    assert not ok and text.startswith("【未実装】")


# --- adding the encoding at an offset: right ---------------------------------------------

def add_broadcast(x, offset):
    B, T, D = x.shape
    return x + sinusoidal_encoding(offset + T, D)[offset:]  # (T, D) broadcast over B


def add_in_a_loop_float32(x, offset):
    out = np.array(x, dtype=np.float32)
    B, T, D = out.shape
    for b in range(B):
        for t in range(T):
            out[b, t] += sinusoidal_encoding(offset + t + 1, D)[offset + t].astype(np.float32)
    return out


def add_with_a_leading_axis(x, offset):
    pe = sinusoidal_encoding(offset + x.shape[1], x.shape[2])[None, offset:]  # (1, T, D)
    return np.add(x, pe)


def add_to_a_copy_in_place(x, offset):
    out = x.copy()
    out += sinusoidal_encoding(offset + x.shape[1], x.shape[2])[offset:]
    return out


@pytest.mark.parametrize("func", [add_broadcast, add_in_a_loop_float32,
                                  add_with_a_leading_axis, add_to_a_copy_in_place],
                         ids=lambda f: f.__name__)
def test_every_correct_addition_passes(func):
    ok, text = _verdict(check_add_positional_encoding, func)
    assert ok and text.startswith("【正解】"), text


# --- adding the encoding at an offset: each typical mistake, diagnosed as what it is ------

def pe_rows(first, n, d):
    return sinusoidal_encoding(first + n, d)[first:]  # (n, D)


def in_place(x, offset):
    x += pe_rows(offset, x.shape[1], x.shape[2])
    return x


def out_into_x(x, offset):
    return np.add(x, pe_rows(offset, x.shape[1], x.shape[2]), out=x)


def t_by_1_by_d(x, offset):
    """The encoding built as (T, 1, D): T rows, but on the batch axis."""
    return x + pe_rows(offset, x.shape[1], x.shape[2])[:, None, :]


def scaled_by_root_d(x, offset):
    """Section 8's √d_model applied to x."""
    return x * np.sqrt(x.shape[2]) + pe_rows(offset, x.shape[1], x.shape[2])


def offset_ignored(x, offset):
    return x + sinusoidal_encoding(x.shape[1], x.shape[2])


def offset_only(x, offset):
    return x + sinusoidal_encoding(offset + 1, x.shape[2])[offset]  # right when T = 1


def one_too_far(x, offset):
    return x + pe_rows(offset + 1, x.shape[1], x.shape[2])


def sliced_before_the_offset(x, offset):
    return x + sinusoidal_encoding(x.shape[1], x.shape[2])[offset:]


def not_sliced(x, offset):
    return x + sinusoidal_encoding(offset + x.shape[1], x.shape[2])


def batch_index_seq_first_table(x, offset):
    """The bug: a (max_len, 1, D) table meant for (T, B, D), sliced with x.shape[0]."""
    pe = sinusoidal_encoding(512, x.shape[-1])[:, None, :]  # (max_len, 1, D)
    return x + pe[: x.shape[0]]


def b_rows(x, offset):
    return x + sinusoidal_encoding(x.shape[0], x.shape[2])  # (B, D) against (B, T, D)


def with_a_wrong_encoding(**mistake):
    def add(x, offset):
        B, T, D = x.shape
        half = D // 2
        start = mistake.get("start", 0)
        pos = np.arange(offset + start, offset + start + T)[:, None]
        angle = pos / 10000 ** (2 * np.arange(half) / D)
        first, second = np.sin(angle), np.cos(angle)
        if mistake.get("order") == "cos_sin":
            first, second = second, first
        pe = np.empty((T, D))
        if mistake.get("layout") == "concat":
            pe[:, :half], pe[:, half:] = first, second
        else:
            pe[:, 0::2], pe[:, 1::2] = first, second
        return x + pe

    return add


ADD_MISTAKES = [
    (in_place, "x そのものを書き換えて"),
    (out_into_x, "x そのものを書き換えて"),
    (t_by_1_by_d, "(T, 1, D) = (5, 1, 6) の形で作っています"),
    (scaled_by_root_d, "x に √d_model を掛けています"),
    (offset_ignored, "offset を使っていません"),
    (offset_only, "PE(offset) だけを足しています"),
    (one_too_far, "1 つ後ろにずれています"),
    (sliced_before_the_offset, "offset で切っていませんか"),
    (not_sliced, "pe[offset:] を足してください"),
    (batch_index_seq_first_table, "バッチの番号"),
    (b_rows, "B = 3 行の PE を作っていませんか"),
    (with_a_wrong_encoding(order="cos_sin"), "sin と cos が逆"),
    (with_a_wrong_encoding(layout="concat"), "[sin | cos]"),
    (with_a_wrong_encoding(start=1), "1 つ後ろにずれています"),
    (lambda x, offset: x, "そのまま"),
    (lambda x, offset: np.broadcast_to(pe_rows(offset, x.shape[1], x.shape[2]), x.shape),
     "位置エンコーディングだけ"),
    (lambda x, offset: x + 2 * pe_rows(offset, x.shape[1], x.shape[2]), "2 回足しています"),
    (lambda x, offset: x + sinusoidal_encoding(x.shape[0] * x.shape[1],
                                               x.shape[2]).reshape(x.shape),
     "系列ごとに足した値が違います"),
]


@pytest.mark.parametrize("func, words", ADD_MISTAKES,
                         ids=[getattr(f, "__name__", "lambda") + f"-{i}"
                              for i, (f, _) in enumerate(ADD_MISTAKES)])
def test_each_addition_mistake_gets_its_diagnosis(func, words):
    ok, text = _verdict(check_add_positional_encoding, func)
    assert not ok and text.startswith("【不正解】") and words in text, text


def test_scaling_and_another_mistake_are_both_named():
    def scaled_and_batch_index(x, offset):
        return x * np.sqrt(x.shape[2]) + batch_index_seq_first_table(x, offset) - x

    ok, text = _verdict(check_add_positional_encoding, scaled_and_batch_index)
    assert not ok and "√d_model" in text and "バッチの番号" in text, text


def test_a_mistake_that_shows_only_with_an_offset_is_named_on_that_case():
    def scaled_and_no_offset(x, offset):
        if offset == 0:
            return add_broadcast(x, offset)
        return x * np.sqrt(x.shape[2]) + sinusoidal_encoding(x.shape[1], x.shape[2])

    ok, text = _verdict(check_add_positional_encoding, scaled_and_no_offset)
    assert not ok and "offset 11 のケース" in text, text
    assert "√d_model" in text and "offset を使っていません" in text, text


def test_a_t_by_1_by_d_encoding_on_one_sequence_is_named_by_its_shape():
    """With B = 1 nothing raises: (T, 1, D) + (1, T, D) is (T, T, D)."""
    def quiet_t_by_1_by_d(x, offset):
        if x.shape[0] != 1:  # behave on the other cases, to reach the one-sequence case
            return add_broadcast(x, offset)
        return t_by_1_by_d(x, offset)

    ok, text = _verdict(check_add_positional_encoding, quiet_t_by_1_by_d)
    assert not ok and "(T, T, D)" in text and "(T, 1, D)" in text, text


def test_the_callers_array_is_not_changed_by_the_check():
    seen = []

    def spy(x, offset):
        seen.append(x)
        return add_broadcast(x, offset)

    assert _verdict(check_add_positional_encoding, spy)[0]
    assert len(seen) == len(_ADD_CASES)


def test_the_hidden_additions_include_an_offset_a_single_token_and_a_single_sequence():
    shapes = [(shape, offset) for _, shape, offset in _ADD_CASES]
    assert any(offset == 0 for _, offset in shapes)
    assert any(shape[1] == 1 and offset > 0 for shape, offset in shapes)  # a decoding step
    assert any(shape[0] == 1 and shape[1] > 1 for shape, _ in shapes)  # (T, 1, D) shows
    for (B, T, D), offset in shapes:
        assert B != T and D & (D - 1) != 0
        assert offset == 0 or len({B, T, offset}) == 3


def test_the_addition_stub_is_unimplemented():
    def my_add_positional_encoding(x, offset):
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
    for check, func in [(check_timing_signal, lambda n, d: returned),
                        (check_add_positional_encoding, lambda x, offset: returned)]:
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


# --- the four terms of a score and the permuted model ---------------------------------------

def test_the_four_terms_add_up_to_the_unscaled_score():
    rng = np.random.default_rng(8)
    e, w_q, w_k = rng.normal(size=(9, 12)), rng.normal(size=(12, 5)), rng.normal(size=(12, 5))
    p = sinusoidal_encoding(9, 12)
    terms = score_terms(e, p, w_q, w_k)
    x = e + p
    np.testing.assert_allclose(sum(terms), (x @ w_q) @ (x @ w_k).T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(terms.position_token, (p @ w_q) @ (e @ w_k).T, rtol=1e-12)


def _is_toeplitz(matrix):
    return all(np.ptp(np.diagonal(matrix, k)) < 1e-9
               for k in range(-len(matrix) + 1, len(matrix)))


def test_the_position_term_is_relative_for_rotation_blocks_only():
    d, T = 8, 30
    p = sinusoidal_encoding(T, d)
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=(2, d // 2))
    blocks = np.zeros((d, d))  # W_Q W_K^T with a block [[a, b], [-b, a]] per pair
    for i in range(d // 2):
        blocks[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = [[a[i], b[i]], [-b[i], a[i]]]
    relative = score_terms(np.zeros((T, d)), p, blocks, np.eye(d)).position_position
    assert _is_toeplitz(relative)
    general = score_terms(np.zeros((T, d)), p, rng.normal(size=(d, d)),
                          np.eye(d)).position_position
    assert not _is_toeplitz(general)


def test_score_terms_refuse_inputs_of_two_shapes():
    with pytest.raises(ValueError, match="同じ形"):
        score_terms(np.zeros((3, 4)), np.zeros((4, 4)), np.eye(4), np.eye(4))


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_a_permuted_model_on_permuted_inputs_computes_the_same(positional):
    config = ModelConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=2, max_len=8,
                         positional=positional, dtype="float64")
    rng = np.random.default_rng(10)
    params = init_params(config, rng)
    tokens = rng.integers(0, 11, size=(3, 7))  # (B, T)
    perm = np.concatenate([np.arange(0, 16, 2), np.arange(1, 16, 2)])  # to [sin | cos]
    moved = permute_model_dimensions(params, perm, config.n_layers)
    if positional == "learned":  # the table's columns move with the stream
        np.testing.assert_allclose(forward(moved, tokens, config).logits,
                                   forward(params, tokens, config).logits, rtol=1e-10)
    x = params["embed"][tokens] + sinusoidal_encoding(7, 16)  # (B, T, D), the paper's
    x_concat = moved["embed"][tokens] + sinusoidal_encoding(7, 16, layout="concat")
    np.testing.assert_allclose(logits_from_embeddings(moved, x_concat, config),
                               logits_from_embeddings(params, x, config),
                               rtol=1e-10, atol=1e-12)
    assert params["embed"][0, 1] == moved["embed"][0, 8]  # the input was not changed in place


def test_permuting_only_the_next_layers_rows_changes_the_model():
    config = ModelConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=1, max_len=8,
                         positional="sinusoidal", dtype="float64")
    rng = np.random.default_rng(11)
    params = init_params(config, rng)
    tokens = rng.integers(0, 11, size=(2, 6))
    perm = np.concatenate([np.arange(0, 16, 2), np.arange(1, 16, 2)])
    rows_only = dict(params)
    for key in layer_keys(0)[:3]:
        rows_only[key] = params[key][perm, :]
    x = params["embed"][tokens] + sinusoidal_encoding(6, 16, layout="concat")
    ours = logits_from_embeddings(rows_only, x, config)
    theirs = forward(params, tokens, config).logits
    assert np.abs(ours - theirs).max() > 0.5


def test_permute_model_dimensions_refuses_what_is_not_a_permutation():
    config = ModelConfig(vocab_size=5, d_model=4, n_heads=2, n_layers=1, max_len=4)
    params = init_params(config, np.random.default_rng(0))
    with pytest.raises(ValueError, match="並べ替え"):
        permute_model_dimensions(params, [0, 0, 1, 2], 1)
