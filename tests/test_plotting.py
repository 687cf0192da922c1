"""attnlab.plotting: Japanese text renders without missing glyphs; heatmaps label axes."""

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab import causal_mask, softmax  # noqa: E402
from attnlab.plotting import plot_attention, use_japanese_font  # noqa: E402


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
