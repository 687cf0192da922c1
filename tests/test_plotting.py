"""attnlab.plotting: Japanese text renders without missing glyphs; heatmaps label axes;
figure helpers leave matplotlib's global defaults alone; the book's figure style (sizes,
PNGs that record their smallest font, the dark version, one colour per method)."""

import base64
import io
import itertools
import re
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib import colors as mcolors  # noqa: E402
from PIL import Image  # noqa: E402

from attnlab import causal_mask, softmax  # noqa: E402
from attnlab.plotting import (  # noqa: E402
    BLACK,
    BLUE,
    BOOK_OUTPUTS_ENV,
    BOOK_RC,
    DARK_BAD,
    DARK_GREY,
    DARK_INK,
    DARK_PAGE,
    DARK_PNG_KEY,
    FIGURE_DPI,
    FIGURE_HEIGHT,
    FIGURE_WIDTH,
    GREY,
    METHOD_COLOURS,
    METHOD_STYLES,
    MIN_FONT_SIZE,
    MIN_TEXT_PX,
    OKABE_ITO,
    ORANGE,
    PNG_DPI_KEY,
    PNG_FONT_KEY,
    PNG_SCALE,
    VERMILLION,
    book_png,
    contrast_ratio,
    dark_colour_map,
    dark_colours,
    dark_equivalent,
    figure_pngs,
    figure_to_png,
    method_style,
    new_figure,
    plot_attention,
    set_colorbar_label,
    set_ylabel_horizontal,
    smallest_font_size,
    use_book_style,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_japanese_text_draws_without_missing_glyph_warnings():
    assert use_book_style() == "IPAexGothic"
    fig, ax = plt.subplots()
    ax.set_title("アテンションの重み（スケーリングなし）√d_k × θ → −1")
    ax.set_xlabel("キー位置")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.canvas.draw()


def test_plot_attention_labels_rows_as_queries_and_columns_as_keys():
    use_book_style()
    weights = softmax(np.arange(12.0).reshape(3, 4))
    ax = plot_attention(weights, ["a", "b", "c"], ["w", "x", "y", "z"], title="題")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "題"
    assert ax.images[0].get_array().shape == (3, 4)


def test_plot_attention_writes_only_the_visible_weights():
    use_book_style()
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
    fig, ax = new_figure()
    assert tuple(fig.get_size_inches()) == (FIGURE_WIDTH, FIGURE_HEIGHT)
    assert ax.title.get_fontsize() == BOOK_RC["axes.titlesize"]
    assert ax.xaxis.get_ticklabels()[0].get_fontsize() == BOOK_RC["xtick.labelsize"]


def test_use_japanese_font_sets_the_books_style_for_pyplot():
    with matplotlib.rc_context({"figure.figsize": (3.0, 2.0), "font.family": ["serif"]}):
        assert use_book_style() == "IPAexGothic"
        assert plt.rcParams["figure.figsize"] == [FIGURE_WIDTH, FIGURE_HEIGHT]
        assert plt.rcParams["figure.dpi"] == FIGURE_DPI
        assert plt.rcParams["savefig.dpi"] == FIGURE_DPI * PNG_SCALE
        for key, value in BOOK_RC.items():
            assert plt.rcParams[key] == (list(value) if isinstance(value, tuple) else value), key


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


# --- the book's figure style ------------------------------------------------------------

def test_the_style_fits_the_books_column_and_its_smallest_text_reads_at_11_px():
    assert FIGURE_WIDTH * FIGURE_DPI <= 688  # the column at the browser test's window
    assert MIN_FONT_SIZE * FIGURE_DPI / 72 >= MIN_TEXT_PX
    sizes = [value for key, value in BOOK_RC.items()
             if key.endswith("size") and key != "figure.figsize"]
    assert sizes and min(sizes) >= MIN_FONT_SIZE


def _png(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


def test_a_png_records_its_smallest_font_and_its_resolution():
    fig, ax = new_figure((3.0, 2.0))
    ax.set_title("題")
    ax.text(0.5, 0.5, "小さな注記", fontsize=8.5)
    ax.text(0.5, 0.2, "  ", fontsize=4)  # empty: not text a reader sees
    assert smallest_font_size(fig) == 8.5
    once, twice = _png(figure_to_png(fig)), _png(figure_to_png(fig, scale=2))
    assert once.text[PNG_FONT_KEY] == "8.5" and once.text[PNG_DPI_KEY] == "100"
    assert twice.text[PNG_DPI_KEY] == "200" and twice.size == (600, 400)
    assert once.size == (300, 200) and fig.dpi == 100  # the figure is left as it was


def test_a_pyplot_figure_is_shown_at_half_its_pixels_with_its_dark_version(monkeypatch):
    use_book_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], color=BLACK, label="線")
    ax.set_xlabel("位置")
    ax.legend()
    monkeypatch.setenv(BOOK_OUTPUTS_ENV, "1")  # as make notebooks runs a chapter
    data, metadata = figure_pngs(fig)
    light = _png(base64.b64decode(data))
    dark = _png(base64.b64decode(metadata[DARK_PNG_KEY]))
    assert light.text[PNG_DPI_KEY] == str(FIGURE_DPI * PNG_SCALE)
    assert float(light.text[PNG_FONT_KEY]) >= MIN_FONT_SIZE
    assert (metadata["width"], metadata["height"]) == (light.width // 2, light.height // 2)
    assert dark.size == light.size
    assert np.asarray(light.convert("RGBA"))[0, 0, 3] == 255  # white paper
    assert np.asarray(dark.convert("RGBA"))[0, 0, 3] == 0  # transparent paper
    assert figure_pngs(plt.figure()) is None


def test_a_readers_kernel_draws_no_dark_version_and_the_same_light_picture(monkeypatch):
    """Jupyter shows only the light picture: a reader's Run All does not draw the dark one
    (half of each figure's time), and the picture shown is the book's, byte for byte."""
    use_book_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], color=BLACK, label="線")
    ax.legend()
    monkeypatch.delenv(BOOK_OUTPUTS_ENV, raising=False)
    reader, reader_metadata = figure_pngs(fig)
    monkeypatch.setenv(BOOK_OUTPUTS_ENV, "1")
    book, book_metadata = figure_pngs(fig)
    assert DARK_PNG_KEY not in reader_metadata and DARK_PNG_KEY in book_metadata
    assert reader == book
    assert reader_metadata == {key: value for key, value in book_metadata.items()
                               if key != DARK_PNG_KEY}


def test_in_jupyter_the_style_displays_figures_as_the_books_pngs(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv(BOOK_OUTPUTS_ENV, "1")

    shell = InteractiveShell.instance()
    try:
        with matplotlib.rc_context({"backend": "module://matplotlib_inline.backend_inline"}):
            use_book_style()
            fig, ax = plt.subplots()
            ax.plot([0, 1])
            data, metadata = shell.display_formatter.format(fig)
    finally:
        InteractiveShell.clear_instance()
        plt.switch_backend("agg")
    assert DARK_PNG_KEY in metadata["image/png"]
    assert _png(base64.b64decode(data["image/png"])).text[PNG_DPI_KEY] == "200"


def test_the_dark_version_keeps_each_greys_contrast_with_the_page():
    for grey in ["#ffffff", "#eeeeee", "0.9", "#999999", DARK_GREY, "#333333"]:
        before = contrast_ratio(grey, "white")
        after = contrast_ratio(dark_equivalent(grey), DARK_PAGE)
        assert after == pytest.approx(before, rel=0.02), grey
    assert mcolors.to_hex(dark_equivalent(BLACK)) == DARK_INK.lower()
    assert contrast_ratio(DARK_INK, DARK_PAGE) >= 12
    for colour in OKABE_ITO.values():  # the palette reads on both pages and is kept
        if colour != BLACK:
            assert dark_equivalent(colour) == mcolors.to_rgba(colour)


def _heatmap_with_a_legend():
    use_book_style()
    fig, (ax_map, ax_line) = plt.subplots(1, 2)
    plot_attention(np.array([[0.9, 0.1], [0.3, 0.7]]), ax=ax_map, colorbar=False)
    ax_line.plot([0, 1], [0, 1], color=BLACK, label="黒い線")
    ax_line.plot([0, 1], [1, 0], color=BLUE, label="青い線")
    ax_line.fill_between([0, 1], 0, 0.2, color="0.9")
    ax_line.legend()
    return fig, ax_map, ax_line


def test_the_dark_version_lightens_what_lies_on_the_paper_and_keeps_what_lies_on_a_map():
    fig, ax_map, ax_line = _heatmap_with_a_legend()
    before = figure_to_png(fig)
    with dark_colours(fig):
        assert fig.patch.get_facecolor()[3] == 0 and ax_line.patch.get_facecolor()[3] == 0
        texts = [ax_line.xaxis.get_ticklabels()[0], ax_map.title, ax_map.yaxis.label,
                 *ax_line.get_legend().get_texts()]
        for text in texts:
            assert contrast_ratio(text.get_color(), DARK_PAGE) >= 4.5, text.get_text()
        black_line, blue_line = ax_line.lines
        assert contrast_ratio(black_line.get_color(), DARK_PAGE) >= 4.5
        assert mcolors.to_hex(blue_line.get_color()) == BLUE.lower()
        legend_box = ax_line.get_legend().legendPatch.get_facecolor()
        assert contrast_ratio(legend_box[:3], DARK_PAGE) < 1.1  # the page, not a white box
        cells = {t.get_text(): mcolors.to_hex(t.get_color()) for t in ax_map.texts}
        assert cells == {"0.90": "#000000", "0.10": "#ffffff", "0.30": "#ffffff",
                         "0.70": "#000000"}  # chosen for their cells, kept
    assert figure_to_png(fig) == before  # everything restored


def _luminance_of(colour) -> float:
    c = _linear(colour[:3] if not isinstance(colour, str) else colour)
    return float(0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2])


def test_the_dark_version_turns_over_maps_that_are_light_at_the_low_end_or_the_middle():
    # issue 48, M7: no bright panel on the dark page; "more" still stands out from it
    page = _luminance_of(DARK_PAGE)
    diverging = dark_colour_map("PuOr_r")
    assert _luminance_of(diverging(0.5)) < 0.04 and contrast_ratio(diverging(0.5)[:3],
                                                                    DARK_PAGE) < 1.6
    assert min(_luminance_of(diverging(0.0)), _luminance_of(diverging(1.0))) > 4 * page
    greys = dark_colour_map("Greys")
    assert _luminance_of(greys(0.0)) < 0.04 < 0.5 < _luminance_of(greys(1.0))
    two = dark_colour_map(mcolors.ListedColormap(["#eeeeee", ORANGE]))
    assert _luminance_of(two(0.0)) < 0.04
    for kept in ("viridis", "cividis"):  # dark to light already: the same map
        cmap = plt.get_cmap(kept)
        assert dark_colour_map(cmap) is cmap
    masked = plt.get_cmap("cividis").with_extremes(bad="#EEEEEE")
    assert mcolors.to_hex(dark_colour_map(masked).get_bad()) == DARK_BAD


def test_scattered_points_on_a_dark_to_light_map_stand_out_from_the_dark_page():
    # issue 48, m15: viridis' dark end (#440154) vanished into the page; a heatmap keeps it
    fig, (ax_points, ax_cells) = plt.subplots(1, 2)
    points = ax_points.scatter([0, 1, 2], [0, 1, 2], c=[0.0, 5.0, 10.0], cmap="viridis")
    bar = fig.colorbar(points, ax=ax_points)
    cells = ax_cells.imshow(np.arange(4.0).reshape(2, 2), cmap="viridis")
    with dark_colours(fig):
        first = points.get_cmap()(0.0)
        assert contrast_ratio(first[:3], DARK_PAGE) >= 3
        assert contrast_ratio(plt.get_cmap("viridis")(0.0)[:3], DARK_PAGE) < 1.5
        assert points.get_cmap()(1.0) == plt.get_cmap("viridis")(1.0)  # the light end kept
        assert bar.cmap is points.get_cmap()  # the colour bar shows the same colours
        assert cells.get_cmap().name == "viridis"
    assert points.get_cmap().name == "viridis"  # the light version as it was
    plt.close(fig)


def test_the_dark_version_gives_numbers_on_a_turned_map_the_ink_of_their_new_cell():
    use_book_style()
    fig, ax = plt.subplots()
    ax.imshow(np.array([[0.05, 0.55]]), cmap="Greys", vmin=0, vmax=0.6)
    light_cell = ax.text(0, 0, "0.05", ha="center", va="center", color="black")
    dark_cell = ax.text(1, 0, "0.55", ha="center", va="center", color="white")
    separator = ax.axhline(0, color="white")
    before = figure_to_png(fig)
    with dark_colours(fig):
        (image,) = ax.images
        for text, value in ((light_cell, 0.05), (dark_cell, 0.55)):
            cell = image.get_cmap()(image.norm(value))
            assert contrast_ratio(text.get_color()[:3], cell[:3]) >= 4.5, text.get_text()
        assert mcolors.to_hex(separator.get_color()) == DARK_PAGE.lower()
    assert figure_to_png(fig) == before  # everything restored
    plt.close(fig)


# --- one colour per method ---------------------------------------------------------------

_MACHADO_2009 = {  # simulation of full colour-vision deficiencies (Machado et al. 2009)
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
}


def _lab(linear_rgb: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                    [0.0193, 0.1192, 0.9505]]) @ linear_rgb / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _linear(colour) -> np.ndarray:
    c = np.asarray(mcolors.to_rgb(colour))
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


@pytest.mark.parametrize("vision", ["normal", *_MACHADO_2009])
def test_every_two_methods_differ_in_colour_for_colour_blind_readers(vision):
    matrix = np.eye(3) if vision == "normal" else np.array(_MACHADO_2009[vision])
    lab = {key: _lab(np.clip(matrix @ _linear(colour), 0, 1))
           for key, colour in METHOD_COLOURS.items()}
    for a, b in itertools.combinations(lab, 2):
        assert np.linalg.norm(lab[a] - lab[b]) >= 15, (vision, a, b)


def test_methods_differ_without_colour_too_and_use_the_palette():
    styles = list(METHOD_STYLES.values())
    assert len({(s.linestyle, s.marker) for s in styles}) == len(styles)
    assert len({s.marker for s in styles}) == len(styles)
    assert set(METHOD_COLOURS.values()) <= {*OKABE_ITO.values(), DARK_GREY}
    assert len(set(METHOD_COLOURS.values())) == len(METHOD_COLOURS)
    assert DARK_GREY != GREY and contrast_ratio(DARK_GREY, GREY) > 1.5


@pytest.mark.parametrize(("name", "key"), [
    ("rope", "rope"), ("外挿", "rope"), ("RoPE 外挿", "rope"), ("正弦波", "sinusoidal"),
    ("学習可能な位置", "learned"), ("学習可能", "learned"), ("none", "nope"),
    ("位置なし", "nope"), ("RoPE+YaRN", "yarn"), ("ALiBi", "alibi"), ("PI", "pi"),
])
def test_method_style_takes_short_and_book_names(name, key):
    assert method_style(name) is METHOD_STYLES[key]
    assert method_style(name).plot_kwargs()["color"] == METHOD_COLOURS[key]


def test_an_unknown_method_is_named_in_japanese():
    with pytest.raises(ValueError, match="method='Rope' は色の表にありません"):
        method_style("Rope")


# --- horizontal labels --------------------------------------------------------------------

def _extent(artist):
    return artist.get_window_extent(artist.figure.canvas.get_renderer())


def test_a_y_label_above_the_axis_is_horizontal_and_under_the_title():
    use_book_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_title("題名はここ")
    label = set_ylabel_horizontal(ax, "アテンションの重み")
    fig.canvas.draw()
    box, title, axes = _extent(label), _extent(ax.title), ax.get_window_extent()
    assert label.get_rotation() == 0
    assert box.width > box.height  # written along the line, not turned
    assert box.y0 >= axes.y1 and title.y0 >= box.y1  # above the axes, below the title
    assert box.x0 == pytest.approx(axes.x0, abs=1)  # starting at the axis


def test_a_y_label_left_of_a_map_is_horizontal_and_left_of_the_tick_labels():
    use_book_style()
    fig, ax = plt.subplots(layout="constrained")
    ax.imshow(np.eye(3))
    set_ylabel_horizontal(ax, "クエリ\n（参照する側）", where="left")
    fig.canvas.draw()
    box = _extent(ax.yaxis.label)
    ticks = max(_extent(t).x1 for t in ax.get_yticklabels())
    assert ax.yaxis.label.get_rotation() == 0 and box.x1 <= min(
        _extent(t).x0 for t in ax.get_yticklabels()) < ticks
    with pytest.raises(ValueError, match="where='top'"):
        set_ylabel_horizontal(ax, "x", where="top")


def test_a_colour_bars_label_is_horizontal_above_the_bar():
    use_book_style()
    fig, ax = plt.subplots()
    bar = fig.colorbar(ax.imshow(np.eye(2)), ax=ax)
    label = set_colorbar_label(bar, "重み")
    fig.canvas.draw()
    assert bar.ax.get_ylabel() == "" and label.get_rotation() == 0
    assert _extent(label).y0 >= bar.ax.get_window_extent().y1


def test_plot_attention_writes_its_labels_horizontally():
    use_book_style()
    ax = plot_attention(np.eye(2))
    colour_bar = ax.figure.axes[1]
    assert ax.yaxis.label.get_rotation() == 0 and "クエリ" in ax.get_ylabel()
    assert colour_bar.get_title() == "重み" and colour_bar.get_ylabel() == ""
    fig = ax.figure
    assert smallest_font_size(fig) >= MIN_FONT_SIZE
    assert float(_png(book_png(fig)).text[PNG_FONT_KEY]) >= MIN_FONT_SIZE


def test_the_dark_version_changes_markers_and_edges_that_follow_a_colour_once():
    fig, ax = new_figure()
    (line,) = ax.plot([0, 1], [0, 1], color=BLACK, marker=".")  # markers of colour "auto"
    dots = ax.scatter([0, 1], [1, 0], color=BLACK, edgecolors="face")
    before = figure_to_png(fig)
    with dark_colours(fig):
        for colour in (line.get_color(), line.get_markeredgecolor(),
                       line.get_markerfacecolor(), *dots.get_facecolor(),
                       *dots.get_edgecolor()):
            assert mcolors.to_hex(colour) == DARK_INK.lower()
    assert figure_to_png(fig) == before


def test_a_figure_without_a_colour_map_is_stored_with_a_palette_and_a_map_is_not():
    use_book_style()
    fig, ax = plt.subplots()
    (line,) = ax.plot([0, 1], [1, 0])
    assert mcolors.to_hex(line.get_color()) == BLUE.lower()  # the palette's first colour
    lines = _png(book_png(fig))
    assert lines.mode == "P" and lines.text[PNG_FONT_KEY]
    fig, ax = plt.subplots()
    ax.imshow(np.random.default_rng(0).random((8, 8)))
    assert _png(book_png(fig)).mode == "RGBA"  # a palette would band the colour map
    assert book_png(fig) == book_png(fig)


def test_every_method_name_of_chapters_10_and_11_has_its_book_style():
    from attnlab.experiments.length_generalization import LENGTH_METHODS
    from attnlab.experiments.summary import SHORT_TABLE
    from attnlab.plotting import METHOD_STYLES, method_style

    learned = METHOD_STYLES["learned"]
    assert method_style("学習（4L 行）") == learned and method_style(SHORT_TABLE) == learned
    for method in LENGTH_METHODS:
        assert method_style(method) in METHOD_STYLES.values(), method


def _grid_figure():
    """Constrained layout as the chapters use it: a colour bar of ax=, a legend outside,
    a title over the figure, a log axis, an arrow."""
    fig, axes = plt.subplots(1, 2, figsize=(FIGURE_WIDTH, 3.0), layout="constrained")
    axes[0].semilogy([0, 1, 2], [0.2, 9.0, 0.4], color=BLUE, marker="o", label="線")
    axes[0].annotate("山", xy=(1, 9.0), xytext=(1.5, 2.0), arrowprops={"arrowstyle": "->"})
    image = axes[1].imshow(np.arange(12.0).reshape(3, 4), cmap="viridis")
    set_colorbar_label(fig.colorbar(image, ax=axes[1]), "重み")
    set_ylabel_horizontal(axes[0], r"正解率（$i \geq L$）")
    axes[0].set(xticks=[0, 1, 2], xticklabels=["L", "2L", "4L"], title="題")
    fig.suptitle("図の題")
    fig.legend(loc="outside lower center")
    return fig


def _small_ticks(ax):
    ax.plot([0, 1], [1, 0], color=BLUE)
    ax.tick_params(labelsize=7)  # the smallest text: only the tick labels carry it


def _added_axes_figure():  # an axes the layout does not place
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    ax.plot([0, 1], [0, 1], color=BLUE)
    _small_ticks(fig.add_axes((0.6, 0.6, 0.3, 0.3)))
    return fig


def _tight_figure():  # fig.tight_layout(): the engine left behind does nothing
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], color=BLUE)
    fig.tight_layout()
    _small_ticks(ax.twinx())
    return fig


def _compressed_subfigures():  # a layout that cannot be made: skipped, as a draw does
    fig = plt.figure(figsize=(FIGURE_WIDTH, 3.0), layout="compressed")
    for sub in fig.subfigures(1, 2):
        sub.subplots().plot([0, 1], [1, 0], color=BLUE)
    return fig


def _plain_figure():  # no layout engine
    fig, ax = new_figure((3.0, 2.0))
    _small_ticks(ax)
    return fig


@pytest.mark.parametrize("make, smallest", [
    (_grid_figure, None), (_added_axes_figure, "7"), (_tight_figure, "7"),
    (_compressed_subfigures, None), (_plain_figure, "7")])
def test_book_png_lays_out_as_a_draw_without_rendering_would(monkeypatch, make, smallest):
    """book_png's first pass runs only the layout where constrained layout places every
    axes (0.2 s sooner): the picture, its dark version and the font record are those of
    a full draw that renders nothing, for every kind of figure; the record counts the
    tick labels of axes the layout does not place."""
    import attnlab.plotting as plotting

    use_book_style()
    new = [book_png(fig, dark=dark) for fig in [make()] for dark in (False, True)]
    monkeypatch.setattr(plotting, "_lay_out", lambda fig: fig.draw_without_rendering())
    drawn = [book_png(fig, dark=dark) for fig in [make()] for dark in (False, True)]
    assert new == drawn
    if smallest is not None:
        assert _png(new[0]).text[PNG_FONT_KEY] == smallest
