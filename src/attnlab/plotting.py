"""Presentation base: the book's figure style, the shared palette, figure helpers, heatmaps.

Every figure of the course (pyplot figures in the notebooks, the live figures of
:mod:`attnlab.widgets`) follows one style, set once by :func:`use_book_style`:

- **size**: :data:`FIGURE_WIDTH` inches wide, the width of the book's text column. The book
  shows one inch of a figure as :data:`FIGURE_DPI` CSS pixels, so a figure of the column's
  width is shown at its own size and a point of text is the same on every page;
- **text**: IPAexGothic at :data:`FONT_SIZE` pt (titles :data:`TITLE_SIZE`, ticks and
  legends :data:`SMALL_FONT_SIZE`); nothing smaller than :data:`MIN_FONT_SIZE` pt, which is
  11 px on the page (the browser test measures it);
- **pixels**: PNGs at :data:`PNG_SCALE` × :data:`FIGURE_DPI` dots per inch, shown at half
  their pixel size: sharp on high-density screens. Each PNG records the smallest font size
  it holds (:data:`PNG_FONT_KEY`), so a test can compute the text size a reader sees;
- **colours**: the Okabe–Ito palette, one colour per positional method
  (:data:`METHOD_STYLES`), ``viridis`` for attention weights, one diverging map;
- **dark mode**: the book shows a dark version of each figure on a dark page
  (:func:`dark_colours`): the paper is transparent and every grey — text, axes, ticks, black
  lines, light fills — takes the lightness that keeps its contrast with the page; the
  palette's colours stay as they are, and so do colour maps that rise from dark to light
  (viridis, cividis); a map that is light at its low end or in its middle (Greys, PuOr)
  is drawn with its lightness turned over (:func:`dark_colour_map`), so that no bright
  panel glares on the dark page and "more" still stands out from the page.

Japanese axis labels are written horizontally (:func:`set_ylabel_horizontal`,
:func:`set_colorbar_label`), never turned on their side. Plotting functions take an
optional ``ax``, return the axes they drew on, and never call ``plt.show()``.
"""

import base64
import colorsys
import contextlib
import functools
import io
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from cycler import cycler
from matplotlib import colors as mcolors
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection, PathCollection, QuadMesh
from matplotlib.colorbar import Colorbar
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.transforms import ScaledTranslation
from PIL import Image, PngImagePlugin

#: The Okabe–Ito palette, distinguishable with every common colour-vision deficiency.
#: A condition keeps its colour across the figures of a chapter (e.g. vermillion =
#: without, blue = with); a positional method keeps its colour across the book
#: (:data:`METHOD_STYLES`).
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}
BLACK = OKABE_ITO["black"]
ORANGE = OKABE_ITO["orange"]
SKY_BLUE = OKABE_ITO["sky_blue"]
BLUISH_GREEN = OKABE_ITO["bluish_green"]
YELLOW = OKABE_ITO["yellow"]
BLUE = OKABE_ITO["blue"]
VERMILLION = OKABE_ITO["vermillion"]
REDDISH_PURPLE = OKABE_ITO["reddish_purple"]
#: Neutral grey for reference lines (a uniform weight, a baseline), never a condition.
GREY = "#999999"
#: The darker grey of "no position at all" (:data:`METHOD_STYLES`): told apart from every
#: palette colour with each colour-vision deficiency, and from the reference lines' grey.
DARK_GREY = "#666666"

#: The font every figure uses (shipped with ``matplotlib-fontja``).
JAPANESE_FONT = "IPAexGothic"

#: Sequential colour map used for every attention weight map (perceptually uniform and
#: readable with colour-vision deficiencies).
WEIGHT_CMAP = "viridis"
#: Diverging colour map for signed values (an encoding's entries, a cosine similarity):
#: negative purple, zero white, positive orange, in every chapter.
DIVERGING_CMAP = "PuOr_r"

# ---------------------------------------------------------------------------------------
# The book's figure style
# ---------------------------------------------------------------------------------------

#: CSS pixels per inch of a figure: the book shows a figure ``w`` inches wide at
#: ``FIGURE_DPI * w`` pixels (the PNG's pixels divided by :data:`PNG_SCALE`).
FIGURE_DPI = 100
#: Pixels of a saved PNG per CSS pixel: twice as sharp as the page needs, for
#: high-density screens; the image is shown at half its pixel size.
PNG_SCALE = 2
#: Width of every figure (inches): the book's text column is 688 px wide at the browser
#: test's 1280 px window (narrower windows shrink the figure with the column).
FIGURE_WIDTH = 6.8
#: Default height (inches) of a figure with one row of axes.
FIGURE_HEIGHT = 3.2
#: Body text of a figure (axis labels), in points: 13.9 px on the page.
FONT_SIZE = 10.0
#: Axes titles.
TITLE_SIZE = 11.0
#: Tick labels, legends, notes in a figure: 12.5 px on the page.
SMALL_FONT_SIZE = 9.0
#: The smallest text a figure may hold (numbers written in the cells of a map): 11.1 px.
MIN_FONT_SIZE = 8.0
#: The smallest on-screen text size (CSS px) the browser test accepts.
MIN_TEXT_PX = 11.0

#: matplotlib settings of the style (see the module docstring).
BOOK_RC: dict[str, Any] = {
    "font.family": [JAPANESE_FONT],
    "font.size": FONT_SIZE,
    "axes.titlesize": TITLE_SIZE,
    "axes.labelsize": FONT_SIZE,
    "figure.titlesize": TITLE_SIZE,
    "xtick.labelsize": SMALL_FONT_SIZE,
    "ytick.labelsize": SMALL_FONT_SIZE,
    "legend.fontsize": SMALL_FONT_SIZE,
    "legend.title_fontsize": SMALL_FONT_SIZE,
    "legend.facecolor": "white",  # a paper-coloured box (dark in the dark version)
    "figure.figsize": (FIGURE_WIDTH, FIGURE_HEIGHT),
    "figure.dpi": FIGURE_DPI,
    "savefig.dpi": FIGURE_DPI * PNG_SCALE,
    "axes.unicode_minus": True,
    # lines and bars without a colour of their own take the palette's, in this order
    "axes.prop_cycle": cycler(color=[BLUE, VERMILLION, BLUISH_GREEN, ORANGE, REDDISH_PURPLE,
                                     SKY_BLUE, BLACK]),
}

#: PNG text chunks the style writes: the smallest font size (pt) of the figure's text,
#: and the resolution (dots per inch) the figure was drawn at.
PNG_FONT_KEY = "attnlab:smallest-font-pt"
PNG_DPI_KEY = "attnlab:dpi"

#: The dark page (pydata-sphinx-theme's dark background) and the text colour the dark
#: version of a figure draws black as.
DARK_PAGE = "#121212"
DARK_INK = "#E6E6E6"

#: Key of a figure's output metadata (under ``image/png``) that holds its dark version, a
#: base64 PNG: the book shows it on a dark page (``attnlab.live_book``); Jupyter ignores it.
DARK_PNG_KEY = "attnlab_dark_png"

#: Environment variable that the scripts storing a notebook's outputs for the book set to
#: ``"1"`` (``make notebooks``: ``scripts.book.execute_notebook``): then each figure also
#: carries its dark version (:data:`DARK_PNG_KEY`). A reader's kernel leaves it out:
#: Jupyter shows only the light picture, and each figure is drawn once instead of twice.
BOOK_OUTPUTS_ENV = "ATTNLAB_BOOK_OUTPUTS"


@functools.cache
def _register_font() -> None:
    """Add IPAexGothic to matplotlib's fonts and make it the default family, once."""
    import matplotlib_fontja

    matplotlib_fontja.japanize()


def use_book_style() -> str:
    """Use the book's figure style for pyplot figures: Japanese text, sizes, PNGs.

    Registers the IPAexGothic font shipped with ``matplotlib-fontja`` and makes it the
    default family, so titles and labels in Japanese render without missing-glyph
    warnings; sets the figure size of the book's column, the font sizes and the resolution
    (:data:`BOOK_RC`). In Jupyter it also shows each figure as the book's PNG
    (:func:`figure_pngs`): sharp, with the record of its smallest font (and, when the
    outputs are stored for the book, its dark version). A notebook calls it once in its
    setup cell; calling it again is harmless.

    Returns
    -------
    str
        The font family now in use.

    Taught in chapter 01.
    """
    _register_font()
    mpl.rcParams.update(BOOK_RC)
    _show_figures_as_book_pngs()
    return mpl.rcParams["font.family"][0]


@contextlib.contextmanager
def book_style() -> Iterator[None]:
    """Within the block, new figures and artists follow the book's style (:data:`BOOK_RC`).

    matplotlib's global defaults are restored afterwards. A live figure's plot is built in
    it (``attnlab.widgets.core``), so it looks the same in a kernel, a test and the book's
    build, whatever the process set before.

    Not taught: the figure style of live figures.
    """
    _register_font()
    with mpl.rc_context(BOOK_RC):
        yield


def new_figure(
    figsize: tuple[float, float] | None = None,
    ncols: int = 1,
    *,
    margins: Mapping[str, float] | None = None,
) -> tuple[Figure, Any]:
    """A fresh Figure (not managed by ``pyplot``) in the book's style, with ``ncols`` axes.

    The layout is fixed (``margins``, passed to ``Figure.subplots_adjust``), not
    recomputed on every draw: a live figure's updates stay fast and its axes do not jump.
    The style (fonts, sizes) applies to this figure only; matplotlib's global defaults are
    left as they are.

    Parameters
    ----------
    figsize : tuple of float, optional
        Width and height in inches (:data:`FIGURE_DPI` CSS pixels per inch); default the
        book's column, :data:`FIGURE_WIDTH` × :data:`FIGURE_HEIGHT`.
    ncols : int
        Number of side-by-side axes.
    margins : mapping, optional
        ``left, right, bottom, top, wspace`` as fractions of the figure.

    Returns
    -------
    fig : Figure
    axes : Axes, or an array of Axes if ``ncols > 1``

    Not taught: the figure every live figure draws on (widgets/README.md).
    """
    with book_style():
        fig = Figure(figsize=figsize or (FIGURE_WIDTH, FIGURE_HEIGHT), dpi=FIGURE_DPI)
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, ncols)
    fig.subplots_adjust(**{"left": 0.08, "right": 0.98, "bottom": 0.15, "top": 0.85,
                           "wspace": 0.25, **(margins or {})})
    return fig, axes


# ---------------------------------------------------------------------------------------
# Colours: one per positional method
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MethodStyle:
    """How a positional method is drawn in every figure of the book.

    Attributes
    ----------
    label : str
        The method's name as the book writes it.
    colour : str
        Its colour (Okabe–Ito, or :data:`DARK_GREY` for no position at all).
    linestyle, marker : str
        A line style and a marker, so that the methods differ without colour too.

    Not taught: the book's colour table (:data:`METHOD_STYLES`).
    """

    label: str
    colour: str
    linestyle: str
    marker: str

    def plot_kwargs(self) -> dict[str, str]:
        """``color``, ``linestyle``, ``marker`` and ``label`` for ``Axes.plot``."""
        return {"color": self.colour, "linestyle": self.linestyle, "marker": self.marker,
                "label": self.label}


#: One colour (and line style and marker) per positional method, in every chapter.
#: Absolute encodings are dashed, RoPE and its extensions solid (RoPE blue, PI sky blue),
#: ALiBi dash-dotted, no position dotted dark grey. Any two differ by ΔE ≥ 15 (CIELAB) for
#: normal vision and simulated protanopia, deuteranopia and tritanopia (tests). Keys are
#: short names; :func:`method_style` accepts the book's names (``label``) too.
METHOD_STYLES: dict[str, MethodStyle] = {
    "nope": MethodStyle("位置なし", DARK_GREY, ":", "x"),
    "sinusoidal": MethodStyle("正弦波", ORANGE, "--", "s"),
    "learned": MethodStyle("学習可能", REDDISH_PURPLE, "--", "D"),
    "rope": MethodStyle("RoPE", BLUE, "-", "o"),
    "pi": MethodStyle("PI", SKY_BLUE, "-", "^"),
    "ntk": MethodStyle("NTK", BLUISH_GREEN, "-", "v"),
    "yarn": MethodStyle("YaRN", VERMILLION, "-", "P"),
    "alibi": MethodStyle("ALiBi", BLACK, "-.", "*"),
}
#: The colour of each method (:data:`METHOD_STYLES`), by short name.
METHOD_COLOURS: dict[str, str] = {key: style.colour for key, style in METHOD_STYLES.items()}

# Other names the chapters give the methods: RoPE without extension is "外挿".
_METHOD_ALIASES = {
    "none": "nope", "なし": "nope", "位置なし": "nope", "NoPE": "nope",
    "正弦波": "sinusoidal", "学習可能": "learned", "学習可能な位置": "learned",
    "学習": "learned", "学習（4L 行）": "learned", "学習（L 行）": "learned",  # ch. 10, 11
    "RoPE": "rope", "外挿": "rope", "RoPE 外挿": "rope",
    "PI": "pi", "RoPE+PI": "pi", "NTK": "ntk", "RoPE+NTK": "ntk",
    "YaRN": "yarn", "RoPE+YaRN": "yarn", "ALiBi": "alibi",
}


def method_style(method: str) -> MethodStyle:
    """The style of a positional method, by short name (``"rope"``) or book name (``"正弦波"``).

    Raises
    ------
    ValueError
        For a name the table does not know (the message lists the names).

    Taught in chapter 05.
    """
    key = method if method in METHOD_STYLES else _METHOD_ALIASES.get(method.strip())
    if key is None:
        raise ValueError(
            f"method={method!r} は色の表にありません: {', '.join(METHOD_STYLES)} か "
            f"{', '.join(_METHOD_ALIASES)} のどれかです")
    return METHOD_STYLES[key]


# ---------------------------------------------------------------------------------------
# Horizontal Japanese labels
# ---------------------------------------------------------------------------------------

def set_ylabel_horizontal(ax: plt.Axes, text: str, *, where: str = "above") -> Text:
    """Write the y axis's label horizontally, never turned on its side.

    ``where="above"``: over the top of the axis, starting at it (a line or bar chart: the
    label names the values the axis counts). Call it after ``set_title``: the title moves
    up to make room. ``where="left"``: left of the tick labels, centred (a map whose rows
    are named, e.g. queries; break a long label with ``"\\n"``).

    Returns
    -------
    matplotlib Text
        The axis label.

    Taught in chapter 01.
    """
    if where not in ("above", "left"):
        raise ValueError(f"where={where!r} は 'above' か 'left' のどちらかです")
    label = ax.yaxis.label
    label.set_text(text)
    label.set_rotation(0)
    if where == "left":  # matplotlib places it left of the tick labels, as a turned label
        label.set_horizontalalignment("right")
        label.set_verticalalignment("center")
        label.set_multialignment("center")
        return label
    gap = 0.35 * label.get_size()
    label.set_horizontalalignment("left")
    label.set_verticalalignment("bottom")
    ax.yaxis.set_label_coords(0.0, 1.0, transform=ax.transAxes + ScaledTranslation(
        0, gap / 72, ax.figure.dpi_scale_trans))
    if ax.get_title():
        ax.set_title(ax.get_title(), pad=mpl.rcParams["axes.titlepad"] + gap
                     + 1.3 * label.get_size())
    return label


def set_colorbar_label(colorbar: Colorbar, text: str) -> Text:
    """Label a vertical colour bar horizontally, above it (e.g. 「重み」).

    Returns
    -------
    matplotlib Text
        The label (the colour bar's axes title).

    Taught in chapter 01.
    """
    colorbar.set_label("")
    return colorbar.ax.set_title(text, fontsize=SMALL_FONT_SIZE, loc="center", pad=6)


# ---------------------------------------------------------------------------------------
# Figures as PNG: the record of the smallest font, the dark version
# ---------------------------------------------------------------------------------------

def smallest_font_size(fig: Figure) -> float | None:
    """The smallest font size (pt) of any visible, non-empty text of ``fig``; None if none.

    Not taught: what the PNGs record for the browser test.
    """
    sizes = [text.get_fontsize() for text in fig.findobj(Text)
             if text.get_visible() and text.get_text().strip() and text.get_alpha() != 0]
    return min(sizes) if sizes else None


def _png_info(fig: Figure, dpi: float) -> dict[str, str]:
    smallest = smallest_font_size(fig)
    info = {PNG_DPI_KEY: f"{dpi:g}"}
    if smallest is not None:
        info[PNG_FONT_KEY] = f"{smallest:g}"
    return info


def canvas_to_png(canvas: FigureCanvasAgg) -> bytes:
    """PNG bytes of what ``canvas`` holds now, without drawing it again.

    The PNG records the figure's smallest font size and its resolution
    (:data:`PNG_FONT_KEY`, :data:`PNG_DPI_KEY`).

    Not taught: how a live figure becomes a picture.
    """
    image = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba())
    info = PngImagePlugin.PngInfo()
    for key, value in _png_info(canvas.figure, canvas.figure.dpi).items():
        info.add_text(key, value)
    buffer = io.BytesIO()
    dots = canvas.figure.dpi
    image.save(buffer, format="png", compress_level=1, pnginfo=info, dpi=(dots, dots))
    return buffer.getvalue()


def figure_to_png(fig: Figure, *, scale: float = 1, dark: bool = False) -> bytes:
    """Draw ``fig`` and return PNG bytes; the same figure always gives the same bytes.

    Parameters
    ----------
    fig : Figure
    scale : float
        Pixels per pixel of the figure's own resolution: the book draws live figures at
        :data:`PNG_SCALE`, a live figure in Jupyter at 1.
    dark : bool
        Draw the dark version (:func:`dark_colours`, transparent paper).

    The figure is drawn in the book's style (:func:`book_style`): a live figure's picture
    does not depend on what the process set.

    Not taught: how a live figure becomes a picture.
    """
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    dpi = fig.dpi
    with contextlib.ExitStack() as stack:
        stack.enter_context(book_style())  # ticks made while drawing follow the style too
        if dark:
            stack.enter_context(dark_colours(fig))
        if scale != 1:
            fig.set_dpi(dpi * scale)
            stack.callback(fig.set_dpi, dpi)
        canvas.draw()
        return canvas_to_png(canvas)


def book_png(fig: Figure, *, dark: bool = False) -> bytes:
    """A pyplot figure as the book shows it: :data:`PNG_SCALE` × sharper, cropped to its
    content, with the record of its smallest font; ``dark`` for the dark version.

    A figure without a colour map (lines, bars, text) is stored with a palette of 256
    colours, which its few colours and their anti-aliasing fill without a visible change:
    about a quarter of the bytes. A colour map keeps every colour (a palette would band it).

    Not taught: how a notebook figure becomes the book's picture.
    """
    dpi = fig.dpi * PNG_SCALE
    buffer = io.BytesIO()
    _lay_out(fig)  # the first layout pass; tick labels get the text the record counts
    info = _png_info(fig, dpi)
    colour_map = _has_colour_map(fig)
    # a PNG that is read again at once is not compressed: the same pixels, 0.05 s sooner
    pil_kwargs = {} if colour_map else {"compress_level": 0}
    with dark_colours(fig) if dark else contextlib.nullcontext():
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight",
                    facecolor="none" if dark else fig.get_facecolor(), metadata=info,
                    pil_kwargs=pil_kwargs)
    if colour_map:
        return buffer.getvalue()
    image = Image.open(buffer)
    palette = image.convert("RGBA").quantize(256, method=Image.Quantize.FASTOCTREE)
    text = PngImagePlugin.PngInfo()
    for key, value in info.items():
        text.add_text(key, value)
    out = io.BytesIO()
    palette.save(out, format="png", optimize=True, pnginfo=text, dpi=(dpi, dpi))
    return out.getvalue()


def _lay_out(fig: Figure) -> None:
    """The pass :func:`book_png` makes before ``savefig``, which the smallest-font record
    reads (tick labels get their text in it) and which the pictures depend on
    (constrained layout moves the axes again on a second pass, savefig's).

    A figure whose every axes constrained layout places (a grid's axes, and colour bars
    made with ``ax=``) needs only the layout: it measures every axes, which gives each
    tick label its text, and leaves the figure as a draw that renders nothing would
    (tested), 0.2 s sooner. Any other figure (no engine, ``add_axes``, an axes out of the
    layout, tight layout, a layout already switched off) gets that draw. A layout that
    cannot be made is skipped, as :meth:`Figure.draw` skips it.
    """
    engine = fig.get_layout_engine()
    laid_out = isinstance(engine, ConstrainedLayoutEngine) and all(
        ax.get_in_layout() and (ax.get_subplotspec() is not None
                                or hasattr(ax, "_colorbar_info"))  # a colour bar of ax=
        for ax in fig.axes)
    if not fig.axes or not laid_out:
        fig.draw_without_rendering()
        return
    try:
        engine.execute(fig)
    except ValueError:  # as Figure.draw: e.g. compressed layout over two grids
        pass


def _has_colour_map(fig: Figure) -> bool:
    """Whether ``fig`` draws a colour map (an image, a mesh, colour-mapped points)."""
    return any(isinstance(a, AxesImage) or (isinstance(a, Collection)
                                              and a.get_array() is not None)
               for a in fig.findobj())


def figure_pngs(fig: Figure) -> tuple[str, dict[str, Any]] | None:
    """A figure's display in Jupyter: the base64 PNG and its metadata.

    The metadata give the size to show it at (half its pixels) and, when the outputs are
    stored for the book (:data:`BOOK_OUTPUTS_ENV`), under :data:`DARK_PNG_KEY` the dark
    version, which the book shows on a dark page. None for a figure without axes (nothing
    to show), as Jupyter's own display does.

    Not taught: how a notebook figure becomes the book's picture.
    """
    if not fig.axes and not fig.lines:
        return None
    light = book_png(fig)
    width, height = Image.open(io.BytesIO(light)).size
    metadata = {"width": width // PNG_SCALE, "height": height // PNG_SCALE}
    if os.environ.get(BOOK_OUTPUTS_ENV) == "1":
        metadata[DARK_PNG_KEY] = base64.b64encode(book_png(fig, dark=True)).decode("ascii")
    return base64.b64encode(light).decode("ascii"), metadata


def _show_figures_as_book_pngs() -> None:
    """In a Jupyter kernel with the inline backend, display figures with :func:`figure_pngs`."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        return
    shell = get_ipython()
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    backend = mpl.get_backend()
    if not formatters or "inline" not in backend:
        return
    # Load the inline backend now: on its first use it registers its own PNG formatter,
    # which would otherwise replace this one.
    plt.switch_backend(backend)
    formatters["image/png"].for_type(Figure, figure_pngs)


# ---------------------------------------------------------------------------------------
# The dark version
# ---------------------------------------------------------------------------------------

def _luminance(rgb: Sequence[float]) -> float:
    """Relative luminance (WCAG 2) of an sRGB colour with channels in [0, 1]."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(colour_a, colour_b) -> float:
    """WCAG contrast ratio of two colours (1 to 21).

    Not taught: a check of the figure style.
    """
    la = _luminance(mcolors.to_rgb(colour_a))
    lb = _luminance(mcolors.to_rgb(colour_b))
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def _grey_of_luminance(target: float) -> float:
    """The sRGB channel value of the grey with relative luminance ``target``."""
    c = target * 12.92 if target <= 0.0031308 else 1.055 * target ** (1 / 2.4) - 0.055
    return float(np.clip(c, 0.0, 1.0))


def dark_equivalent(colour) -> tuple[float, float, float, float]:
    """The colour a dark version draws for ``colour`` (RGBA).

    A grey (black, white, and anything with little saturation) becomes the grey with the
    same contrast against :data:`DARK_PAGE` as it had against white, up to
    :data:`DARK_INK`: black text becomes light, a light fill dark, a mid grey stays about as
    visible. Colours (the palette) are kept: they read on both pages.

    Not taught: the dark version of the book's figures.
    """
    r, g, b, a = mcolors.to_rgba(colour)
    _, lightness, saturation = colorsys.rgb_to_hls(r, g, b)
    if max(r, g, b) - min(r, g, b) > 0.12 and saturation > 0.15:
        return (r, g, b, a)
    contrast = 1.05 / (_luminance((r, g, b)) + 0.05)  # against white
    page = _luminance(mcolors.to_rgb(DARK_PAGE))
    ink = _luminance(mcolors.to_rgb(DARK_INK))
    target = min(contrast * (page + 0.05) - 0.05, ink)
    grey = _grey_of_luminance(max(target, page))
    return (grey, grey, grey, a)


#: Lightness (HLS) of the darkest and the lightest colour of a map turned over for the dark
#: page (:func:`dark_colour_map`): above the page's, below its text's.
DARK_MAP_LIGHTNESS = (0.16, 0.86)
#: A masked ("bad") cell of a map turned over: a mid-dark grey, told apart from the page.
DARK_BAD = "#444444"


def _dark_map(cmap: mcolors.Colormap) -> mcolors.Colormap:
    samples = cmap(np.linspace(0, 1, 256))  # (256, 4)
    light = np.array([_luminance(c[:3]) for c in samples])
    bad = cmap.get_bad()
    light_grey_bad = bad[3] > 0 and _is_grey(bad) and _luminance(bad[:3]) > 0.3
    # a map that rises to its lightest colour at its high end reads on a dark page as it is
    if light.max() < 0.6 or np.argmax(light) >= 0.9 * len(light):
        return cmap.with_extremes(bad=DARK_BAD) if light_grey_bad else cmap
    low, high = DARK_MAP_LIGHTNESS
    turned = []
    for r, g, b, a in samples:
        hue, lightness, saturation = colorsys.rgb_to_hls(r, g, b)
        turned.append((*colorsys.hls_to_rgb(hue, low + (1 - lightness) * (high - low),
                                            saturation), a))
    under, over = cmap.get_under(), cmap.get_over()
    return mcolors.ListedColormap(turned, name=f"{cmap.name}_dark").with_extremes(
        bad=DARK_BAD if light_grey_bad else bad,
        under=None if np.allclose(under, samples[0]) else dark_equivalent(under),
        over=None if np.allclose(over, samples[-1]) else dark_equivalent(over))


def dark_colour_map(cmap) -> mcolors.Colormap:
    """The colour map a dark version draws for ``cmap``.

    A map whose lightest colour is its high end (viridis, cividis, magma) is kept: "more"
    is lighter on both pages. Any other map with a light colour (a sequential map from
    white, Greys or Blues; a diverging map through white, PuOr or RdBu; a map of two
    colours whose one is light grey) has its lightness turned over, hue and saturation kept,
    between :data:`DARK_MAP_LIGHTNESS`: white becomes a dark grey just above the page,
    a dark end becomes light. A grey "bad" colour (masked cells) becomes :data:`DARK_BAD`.

    Not taught: the dark version of the book's figures.
    """
    cmap = plt.get_cmap(cmap) if isinstance(cmap, str) else cmap
    key = id(cmap)
    if key not in _DARK_MAPS or _DARK_MAPS[key][0] is not cmap:
        _DARK_MAPS[key] = (cmap, _dark_map(cmap))
    return _DARK_MAPS[key][1]


#: Contrast with the dark page that a coloured mark needs (WCAG's 3:1 for graphics).
MARK_CONTRAST = 3.0


def _marks_map(cmap: mcolors.Colormap) -> mcolors.Colormap:
    """A map kept for the dark page (dark to light: viridis) as scattered marks draw it:
    it starts where its colour stands 3:1 from the page (viridis' #440154 vanishes into
    #121212: a trajectory's first points were lost, issue 48). A filled map (a heatmap)
    keeps its dark end: there "less" may look like the page."""
    samples = cmap(np.linspace(0, 1, 256))  # (256, 4)
    visible = [contrast_ratio(c[:3], DARK_PAGE) >= MARK_CONTRAST for c in samples]
    start = visible.index(True) if any(visible) else 0
    if start == 0:
        return cmap
    return mcolors.ListedColormap(samples[start:], name=f"{cmap.name}_marks_dark")


#: Colour maps already turned: (the map, its dark version) by the map's id.
_DARK_MAPS: dict[int, tuple[mcolors.Colormap, mcolors.Colormap]] = {}


def _map_colour_at(image: AxesImage, x: float, y: float):
    """The colour ``image`` draws at display point (x, y), or None (outside, or RGB)."""
    data = image.get_array()
    if data is None or data.ndim != 2:
        return None
    ax = image.axes
    u, v = ax.transData.inverted().transform((x, y))
    left, right, bottom, top = image.get_extent()
    rows, cols = data.shape
    fx, fy = (u - left) / (right - left), (v - bottom) / (top - bottom)
    if not (0 <= fx < 1 and 0 <= fy < 1):
        return None
    col = int(fx * cols)
    row = int((1 - fy) * rows) if image.origin == "upper" else int(fy * rows)
    value = data[min(row, rows - 1), min(col, cols - 1)]
    if np.ma.is_masked(value) or not np.isfinite(value):
        return image.get_cmap().get_bad()
    return image.get_cmap()(image.norm(value))


def _ink_for(background) -> tuple[float, float, float, float]:
    """Black or white, whichever reads better on ``background``."""
    return ((0, 0, 0, 1) if contrast_ratio(background[:3], "black")
            >= contrast_ratio(background[:3], "white") else (1, 1, 1, 1))


def _is_grey(colour) -> bool:
    r, g, b, _ = mcolors.to_rgba(colour)
    return max(r, g, b) - min(r, g, b) <= 0.12


def _over_a_map(artist, maps: list, renderer) -> bool:
    """Whether ``artist`` is drawn over a map (an image, a mesh) of its axes: text in a cell."""
    if not maps:
        return False
    if isinstance(artist, Collection) and len(artist.get_offsets()):  # e.g. scatter points
        points = artist.get_offset_transform().transform(artist.get_offsets())
        x, y = np.mean(points, axis=0)
    else:
        try:
            box = artist.get_window_extent(renderer)
        except (RuntimeError, TypeError):
            return False
        x, y = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    if not np.isfinite([x, y]).all():  # e.g. an empty line
        return False
    return any(m.get_window_extent(renderer).contains(x, y) for m in maps)


@contextlib.contextmanager
def dark_colours(fig: Figure) -> Iterator[Figure]:
    """Within the block, ``fig`` has its dark-page colours (:func:`dark_equivalent`).

    Text, lines, patches and uncoloured collections change; colour-mapped images and
    collections do not (but for the map turned over, :func:`dark_colour_map`, and for
    scattered points on a dark-to-light map, which start where the map stands 3:1 from
    the page, :data:`MARK_CONTRAST`), and neither does anything drawn over a colour-mapped
    image (the numbers in the cells of a heatmap keep the colour chosen for their cell). The paper
    (figure and axes backgrounds) is transparent. Everything is restored afterwards.

    Not taught: the dark version of the book's figures.
    """
    undo: list[tuple[Any, str, Any]] = []

    def change(artist, getter: str, setter: str, value, *, was=None) -> None:
        undo.append((artist, setter, getattr(artist, getter)() if was is None else was))
        getattr(artist, setter)(value)

    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()  # for the positions of text (no drawing)
    maps_of = {id(ax): [a for a in ax.get_children() if isinstance(a, AxesImage | QuadMesh)]
               for ax in fig.axes}
    decorations = {id(a) for ax in fig.axes for a in _decorations(ax)}
    paper = [fig.patch, *(ax.patch for ax in fig.axes)]
    try:
        for patch in paper:
            change(patch, "get_facecolor", "set_facecolor", (0, 0, 0, 0))
        turned = set()  # maps drawn with their lightness turned over (dark_colour_map)
        for artist in fig.findobj():
            mapped = isinstance(artist, AxesImage) or (
                isinstance(artist, Collection) and artist.get_array() is not None)
            if mapped and (dark := dark_colour_map(artist.get_cmap())) is not \
                    artist.get_cmap():
                change(artist, "get_cmap", "set_cmap", dark)
                turned.add(id(artist))
            elif mapped and isinstance(artist, PathCollection) and \
                    (marks := _marks_map(artist.get_cmap())) is not artist.get_cmap():
                change(artist, "get_cmap", "set_cmap", marks)  # its colour bar follows
        for artist in fig.findobj():
            if artist in paper or isinstance(artist, AxesImage | Figure):
                continue
            ax = getattr(artist, "axes", None)
            maps = maps_of.get(id(ax), [])
            on_map = ax is not None and id(artist) not in decorations and _over_a_map(
                artist, maps, renderer)
            if on_map:
                _on_a_turned_map(artist, [m for m in maps if id(m) in turned], renderer,
                                 change)
                continue
            _darken(artist, change)
        yield fig
    finally:
        for artist, setter, value in reversed(undo):
            getattr(artist, setter)(value)


def _on_a_turned_map(artist, maps: list, renderer, change) -> None:
    """Text or a line over a map whose lightness the dark version turned over: grey text
    (a number in a cell) becomes black or white for the cell's new colour; a white line
    (a separator between groups of rows) takes the page's colour."""
    if isinstance(artist, Text) and maps and _is_grey(artist.get_color()):
        box = artist.get_window_extent(renderer)
        x, y = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
        for image in maps:
            colour = _map_colour_at(image, x, y) if isinstance(image, AxesImage) else None
            if colour is not None:
                change(artist, "get_color", "set_color", _ink_for(colour))
                break
    elif isinstance(artist, Line2D) and maps:
        colour = artist.get_color()
        if _visible_colour(colour) and _is_grey(colour) and _luminance(
                mcolors.to_rgb(colour)) > 0.8:
            change(artist, "get_color", "set_color", mcolors.to_rgba(DARK_PAGE))


def _decorations(ax) -> set:
    """Spines, axes and their ticks: drawn on the paper even where a map fills the axes."""
    found = set(ax.spines.values())
    for axis in (ax.xaxis, ax.yaxis):
        found.update(axis.findobj())
    return found


def _visible_colour(value) -> bool:
    try:
        return mcolors.to_rgba(value)[3] > 0
    except (ValueError, TypeError):
        return False


def _darken(artist, change) -> None:
    if isinstance(artist, Text):
        change(artist, "get_color", "set_color", dark_equivalent(artist.get_color()))
        if (box := artist.get_bbox_patch()) is not None:  # a text's own box
            _darken(box, change)
    elif isinstance(artist, Line2D):
        # read all three first: markers of colour "auto" follow the line's new colour
        values = {name: getattr(artist, f"get_{name}")()
                  for name in ("color", "markeredgecolor", "markerfacecolor")}
        for name, value in values.items():
            if isinstance(value, str) and value in ("none", "None", "auto"):
                continue
            if _visible_colour(value):
                change(artist, f"get_{name}", f"set_{name}", dark_equivalent(value),
                       was=value)
    elif isinstance(artist, Patch):
        for name in ("facecolor", "edgecolor"):
            value = getattr(artist, f"get_{name}")()
            if _visible_colour(value):
                change(artist, f"get_{name}", f"set_{name}", dark_equivalent(value))
    elif isinstance(artist, Collection) and artist.get_array() is None:
        # read both first: an edge of colour "face" follows the face's new colour
        values = {name: np.asarray(getattr(artist, f"get_{name}")())
                  for name in ("facecolor", "edgecolor")}
        for name, value in values.items():
            if value.ndim == 2 and len(value) and (value[:, 3] > 0).any():
                change(artist, f"get_{name}", f"set_{name}",
                       [dark_equivalent(tuple(row)) for row in value], was=value)


# ---------------------------------------------------------------------------------------
# Attention weights
# ---------------------------------------------------------------------------------------

def plot_attention(
    weights: np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: plt.Axes | None = None,
    title: str = "アテンションの重み",
    annotate: bool = True,
    mask: np.ndarray | None = None,
    colorbar: bool = True,
) -> plt.Axes:
    """Heatmap of attention weights: one row per query, one column per key.

    The row label (クエリ) is written horizontally left of the rows, the colour bar's label
    (重み) above the bar.

    Parameters
    ----------
    weights : np.ndarray
        Shape (Tq, Tk), rows summing to 1.
    query_labels, key_labels : sequence of str, optional
        Tick labels for the rows (queries) and columns (keys); default ``0, 1, …``.
    ax : matplotlib Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str
        Axes title.
    annotate : bool
        Write each weight in its cell (rounded to two decimals).
    mask : np.ndarray of bool, optional
        Shape (Tq, Tk); cells that are False (hidden keys) are hatched grey.
    colorbar : bool
        Draw a colour bar next to the map. Maps side by side share one: pass False and
        add it once with ``fig.colorbar(ax.images[0], ax=axes)``.

    Returns
    -------
    matplotlib Axes

    Taught in chapter 01.
    """
    weights = np.asarray(weights)
    if weights.ndim != 2:
        raise ValueError(
            f"weights は (Tq, Tk) の2次元配列である必要があります: weights.shape={weights.shape}"
        )
    n_q, n_k = weights.shape
    query_labels = _labels(query_labels, n_q, "query_labels")
    key_labels = _labels(key_labels, n_k, "key_labels")
    if ax is None:
        size = (max(3.6, 0.55 * n_k + 2.4), max(2.6, 0.5 * n_q + 1.0))
        _, ax = plt.subplots(figsize=size, layout="constrained")
    image = ax.imshow(weights, cmap=WEIGHT_CMAP, vmin=0.0, vmax=1.0)
    if mask is not None:
        hidden = ~np.asarray(mask, dtype=bool)
        shade = np.ma.masked_where(~hidden, np.ones_like(weights))
        ax.imshow(shade, cmap="Greys", vmin=0.0, vmax=2.0, alpha=0.9)
    if annotate:
        for i in range(n_q):
            for j in range(n_k):
                if mask is not None and not mask[i][j]:
                    continue
                value = weights[i, j]
                colour = BLACK if value > 0.6 else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center",
                        color=colour, fontsize=SMALL_FONT_SIZE)
    ax.set_xticks(range(n_k), key_labels)
    ax.set_yticks(range(n_q), query_labels)
    ax.set_xlabel("キー（参照される側）")
    ax.set_title(title)
    set_ylabel_horizontal(ax, "クエリ\n（参照する側）", where="left")
    if colorbar:
        set_colorbar_label(ax.figure.colorbar(image, ax=ax, shrink=0.8), "重み")
    return ax


def _labels(labels: Sequence[str] | None, n: int, name: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} の長さ {len(labels)} が重みの軸の長さ {n} と一致しません")
    return labels
