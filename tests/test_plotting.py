"""attnlab.plotting: Japanese text renders without missing glyphs; heatmaps label axes;
figure helpers leave matplotlib's global defaults alone."""

import re
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab import causal_mask, softmax  # noqa: E402
from attnlab.plotting import (  # noqa: E402
    BLUE,
    GREY,
    OKABE_ITO,
    VERMILLION,
    figure_to_png,
    new_figure,
    plot_attention,
    use_japanese_font,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_japanese_text_draws_without_missing_glyph_warnings():
    assert use_japanese_font() == "IPAexGothic"
    fig, ax = plt.subplots()
    ax.set_title("アテンションの重み（スケーリングなし）√d_k × θ → −1")
    ax.set_xlabel("キー位置")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.canvas.draw()


def test_plot_attention_labels_rows_as_queries_and_columns_as_keys():
    use_japanese_font()
    weights = softmax(np.arange(12.0).reshape(3, 4))
    ax = plot_attention(weights, ["a", "b", "c"], ["w", "x", "y", "z"], title="題")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "題"
    assert ax.images[0].get_array().shape == (3, 4)


def test_plot_attention_writes_only_the_visible_weights():
    use_japanese_font()
    weights = np.tril(np.full((3, 3), 1 / 3))
    ax = plot_attention(weights, mask=causal_mask(3))
    assert len(ax.texts) == 6  # the lower triangle with its diagonal


def test_plot_attention_draws_into_a_given_axes():
    fig, axes = plt.subplots(1, 2)
    returned = plot_attention(np.eye(2), ax=axes[1], annotate=False)
    assert returned is axes[1]
    assert not returned.texts


@pytest.mark.parametrize(
    ("weights", "kwargs", "fragment"),
    [
        (np.ones(3), {}, r"weights\.shape=\(3,\)"),
        (np.eye(3), {"query_labels": ["a", "b"]}, "query_labels の長さ 2"),
        (np.eye(3), {"key_labels": ["a"] * 4}, "key_labels の長さ 4"),
    ],
)
def test_plot_attention_rejects_bad_input_in_japanese(weights, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        plot_attention(weights, **kwargs)


def test_new_figure_leaves_the_global_defaults_alone():
    with matplotlib.rc_context({"figure.figsize": (3.0, 2.0), "figure.dpi": 72.0}):
        for _ in range(2):
            fig, _ = new_figure((5.0, 4.0))
            assert plt.rcParams["figure.figsize"] == [3.0, 2.0]
            assert plt.rcParams["figure.dpi"] == 72.0
            assert tuple(fig.get_size_inches()) == (5.0, 4.0) and fig.dpi == 100
    assert plt.get_fignums() == []  # not a pyplot figure


def test_use_japanese_font_sets_the_defaults_for_pyplot():
    with matplotlib.rc_context({"figure.figsize": (3.0, 2.0), "font.family": ["serif"]}):
        assert use_japanese_font() == "IPAexGothic"
        assert plt.rcParams["figure.figsize"] == [6.4, 4.0]
        assert plt.rcParams["figure.dpi"] == 100


def test_a_new_figure_draws_japanese_text_without_missing_glyphs_and_the_same_png():
    def draw() -> bytes:
        fig, ax = new_figure((3.0, 2.0))
        ax.set_title("スコアを√d_k で割る")
        return figure_to_png(fig)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert draw() == draw()


def test_the_palette_is_okabe_ito_by_name():
    assert len(OKABE_ITO) == 8 and len(set(OKABE_ITO.values())) == 8
    assert (BLUE, VERMILLION) == (OKABE_ITO["blue"], OKABE_ITO["vermillion"]) == (
        "#0072B2", "#D55E00")
    assert all(re.fullmatch(r"#[0-9A-F]{6}", colour) for colour in [*OKABE_ITO.values(), GREY])
