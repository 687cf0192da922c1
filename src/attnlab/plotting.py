"""Presentation base: the Japanese font, the shared palette, figure helpers, heatmaps.

Every figure of the course (pyplot figures in the notebooks, the live figures of
:mod:`attnlab.widgets`) draws Japanese text with IPAexGothic and takes its colours from
the Okabe–Ito palette below. Plotting functions take an optional ``ax``, return the axes
they drew on, and never call ``plt.show()``.
"""

import functools
import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

#: The Okabe–Ito palette, distinguishable with every common colour-vision deficiency.
#: A condition keeps its colour across the figures of a chapter (e.g. vermillion =
#: without, blue = with).
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

#: The font every figure uses (shipped with ``matplotlib-fontja``).
JAPANESE_FONT = "IPAexGothic"

#: Sequential colour map used for every attention weight map (perceptually uniform and
#: readable with colour-vision deficiencies).
WEIGHT_CMAP = "viridis"


@functools.cache
def _register_font() -> None:
    """Add IPAexGothic to matplotlib's fonts and make it the default family, once."""
    import matplotlib_fontja

    matplotlib_fontja.japanize()


def use_japanese_font() -> str:
    """Set matplotlib's defaults for the course's pyplot figures: Japanese text, 100 dpi.

    Registers the IPAexGothic font shipped with ``matplotlib-fontja`` and makes it the
    default family, so titles and labels in Japanese render without missing-glyph
    warnings; sets the default figure size and resolution. A notebook calls it once in
    its setup cell; calling it again is harmless.

    Returns
    -------
    str
        The font family now in use.

    Taught in chapter 01.
    """
    _register_font()
    mpl.rcParams["font.family"] = [JAPANESE_FONT]
    mpl.rcParams["figure.dpi"] = 100
    mpl.rcParams["savefig.dpi"] = 100
    mpl.rcParams["figure.figsize"] = (6.4, 4.0)
    return mpl.rcParams["font.family"][0]


def new_figure(
    figsize: tuple[float, float],
    ncols: int = 1,
    *,
    margins: Mapping[str, float] | None = None,
) -> tuple[Figure, Any]:
    """A fresh Figure (not managed by ``pyplot``) with Japanese text and ``ncols`` axes.

    The layout is fixed (``margins``, passed to ``Figure.subplots_adjust``), not
    recomputed on every draw: a live figure's updates stay fast and its axes do not jump.
    Only the figure's own size and resolution are set; matplotlib's global defaults are
    left as they are.

    Parameters
    ----------
    figsize : tuple of float
        Width and height in inches (100 dpi).
    ncols : int
        Number of side-by-side axes.
    margins : mapping, optional
        ``left, right, bottom, top, wspace`` as fractions of the figure.

    Returns
    -------
    fig : Figure
    axes : Axes, or an array of Axes if ``ncols > 1``

    Not taught: the figure every live figure draws on (CONTRIBUTING.md).
    """
    _register_font()
    fig = Figure(figsize=figsize, dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols)
    fig.subplots_adjust(**{"left": 0.08, "right": 0.98, "bottom": 0.15, "top": 0.85,
                           "wspace": 0.25, **(margins or {})})
    return fig, axes


def canvas_to_png(canvas: FigureCanvasAgg) -> bytes:
    """PNG bytes of what ``canvas`` holds now, without drawing it again.

    Not taught: how a live figure becomes a picture.
    """
    image = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba())
    buffer = io.BytesIO()
    image.save(buffer, format="png", compress_level=1)
    return buffer.getvalue()


def figure_to_png(fig: Figure) -> bytes:
    """Draw ``fig`` and return PNG bytes; the same figure always gives the same bytes.

    Not taught: how a live figure becomes a picture.
    """
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    return canvas_to_png(canvas)


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
        size = (max(3.0, 0.55 * n_k + 1.6), max(2.6, 0.5 * n_q + 1.0))
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
                        color=colour, fontsize=9)
    ax.set_xticks(range(n_k), key_labels)
    ax.set_yticks(range(n_q), query_labels)
    ax.set_xlabel("キー（参照される側）")
    ax.set_ylabel("クエリ（参照する側）")
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8, label="重み")
    return ax


def _labels(labels: Sequence[str] | None, n: int, name: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} の長さ {len(labels)} が重みの軸の長さ {n} と一致しません")
    return labels
