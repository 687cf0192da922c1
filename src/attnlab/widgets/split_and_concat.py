"""Chapter 03's live figure: how the shapes move through multi-head attention."""

from collections.abc import Callable

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.text import Text

from attnlab.experiments.split_and_concat import (
    SHAPE_D_MODELS,
    SHAPE_N_HEADS,
    SHAPE_SEQ_LEN,
    mha_stages,
)
from attnlab.plotting import (
    BLACK,
    BLUE,
    FIGURE_WIDTH,
    GREY,
    SKY_BLUE,
    SMALL_FONT_SIZE,
    TITLE_SIZE,
    VERMILLION,
    new_figure,
)
from attnlab.widgets.core import (
    InteractiveFigure,
    dropdown,
    interactive_figure,
    register_widget,
    slider,
)

#: What each stage's shape means, in the symbols of the text (same order as mha_stages).
#: The symbols in mathtext, as the prose typesets them (issue 48, M4).
_MODEL = r"$(T, d_\mathrm{model})$"
_SYMBOLS = (_MODEL, _MODEL + " ×3", "$(h, T, d_k)$ ×3", "$(h, T, T)$", "$(h, T, d_k)$",
            _MODEL, _MODEL)
_NAMES = ("入力 $X$", "射影 $XW_Q, XW_K, XW_V$", "ヘッドに分割", r"スコア $QK^\top/\sqrt{d_k}$",
          "各ヘッドの出力", "結合 Concat", r"出力 $\mathrm{Concat} \cdot W_O$")
_FLOP_RANGE = (1e5, 3e10)  # every state's FLOPs fit, with room for the labels


def _si(n: int) -> str:
    """A count in a few characters: 805.3M, 33.6M, 1.0G."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _column(ax, x: float, n_rows: int) -> Text:
    """One right-aligned text of ``n_rows`` lines whose lines sit on the rows of ``ax``.

    Row ``i`` is at y = i (ylim ``(n_rows - 0.5, -0.5)``). The line pitch of a text is
    linear in its ``linespacing``; two trial layouts give the spacing that matches the
    rows' pitch in pixels.
    """
    fig = ax.figure
    text = ax.text(x, (n_rows - 1) / 2, "", va="center", ha="right",
                   fontsize=SMALL_FONT_SIZE,
                   color=BLACK, multialignment="right")
    renderer = fig.canvas.get_renderer()

    def pitch(spacing: float) -> float:
        text.set_linespacing(spacing)
        text.set_text("(128, 1024)\n(8, 128, 128)")
        two = text.get_window_extent(renderer).height
        text.set_text("(128, 1024)")
        return two - text.get_window_extent(renderer).height

    rows_px = ax.get_window_extent(renderer).height / n_rows
    p1, p2 = pitch(1.0), pitch(2.0)
    text.set_linespacing(1.0 + (rows_px - p1) / (p2 - p1))
    text.set_text("")
    return text


def shape_explorer_plot() -> tuple[Figure, Callable[..., list]]:
    """The stages of one attention layer (left) and the FLOPs of each stage (right).

    Returns
    -------
    fig : Figure
    update : callable
        ``update(d_model=512, n_heads=8)`` draws that state.

    Not taught: the picture of :func:`shape_explorer_widget`.
    """
    fig, (ax_tab, ax_bar) = new_figure(
        (FIGURE_WIDTH, 4.0), ncols=2,
        margins={"left": 0.01, "right": 0.97, "bottom": 0.2, "top": 0.7, "wspace": 0.04})
    ax_tab.set_position([0.01, 0.27, 0.62, 0.45])
    ax_bar.set_position([0.64, 0.27, 0.33, 0.45])
    heading = fig.text(0.5, 0.96, "", ha="center", va="top", fontsize=TITLE_SIZE)

    # W_Q's columns cut into h blocks: one colour per block, alternating
    ax_strip = fig.add_axes([0.13, 0.8, 0.85, 0.05])
    strip = ax_strip.imshow(np.zeros((1, 1)), cmap=ListedColormap([BLUE, SKY_BLUE]),
                            vmin=0, vmax=1, aspect="auto", extent=(0, 1, 0, 1),
                            interpolation="nearest")
    ax_strip.set(xticks=[], yticks=[])
    fig.text(0.12, 0.825, "$W_Q$ の列を\n$h$ 個に分ける", ha="right", va="center",
             fontsize=SMALL_FONT_SIZE)

    rows = np.arange(len(_NAMES))
    ax_tab.set(xlim=(0, 1), ylim=(len(_NAMES) - 0.5, -0.5))
    ax_tab.axis("off")
    for y, name, symbol in zip(rows, _NAMES, _SYMBOLS, strict=True):
        ax_tab.text(0.0, y, name, va="center", fontsize=SMALL_FONT_SIZE)
        ax_tab.text(0.47, y, symbol, va="center", fontsize=SMALL_FONT_SIZE, color=GREY)
    shapes = _column(ax_tab, 0.99, len(rows))  # one text for every row: faster to draw
    ax_tab.text(0.47, -0.85, "形（記号）", fontsize=SMALL_FONT_SIZE, color=GREY)
    ax_tab.text(0.99, -0.85, "形（この状態）", fontsize=SMALL_FONT_SIZE, color=GREY,
                ha="right")

    # blue: the projections (T·D² terms); vermillion: the T²·D terms of every head
    colours = [VERMILLION if i in (3, 4) else BLUE for i in rows]
    bars = ax_bar.barh(rows, np.ones(len(rows)), left=_FLOP_RANGE[0], height=0.6,
                       color=colours)
    labels = [ax_bar.text(0, y, "", va="center", fontsize=SMALL_FONT_SIZE) for y in rows]
    ax_bar.set(xscale="log", xlim=_FLOP_RANGE, ylim=(len(_NAMES) - 0.5, -0.5), yticks=[])
    ax_bar.set_xticks([1e6, 1e8, 1e10], ["$10^6$", "$10^8$", "$10^{10}$"])
    ax_bar.set_xlabel(f"行列積の FLOPs（$T$ = {SHAPE_SEQ_LEN}）", fontsize=SMALL_FONT_SIZE)
    ax_bar.tick_params(labelsize=SMALL_FONT_SIZE)

    # the numbers below the table: a fixed label, then the value of the state
    values = {}
    for key, x, y, label, note in (
            ("params", 0.01, 0.09, r"パラメータ $4 \cdot d_\mathrm{model}^2$", "$h$ によらない"),
            ("flops", 0.01, 0.03, "行列積の FLOPs の合計", "$h$ によらない"),
            ("rows", 0.52, 0.09, r"softmax の行 $h \cdot T$", "$h$ に比例"),
            ("scores", 0.52, 0.03, r"スコアの個数 $h \cdot T^2$", "$h$ に比例")):
        fig.text(x, y, label, fontsize=SMALL_FONT_SIZE)
        values[key] = fig.text(x + 0.32, y, "", fontsize=SMALL_FONT_SIZE, ha="right")
        fig.text(x + 0.325, y, f"（{note}）", fontsize=SMALL_FONT_SIZE, color=GREY)
    moving = [i for i, stage in enumerate(mha_stages(64, 1).stages) if stage.flops]
    for i, label in enumerate(labels):
        if i not in moving:  # the same in every state: drawn once, with the axes
            label.set_position((_FLOP_RANGE[0] * 1.3, i))
            label.set_text("" if i == 0 else "並べ替えだけ")
    changing = [heading, strip, shapes, *bars,
                *(labels[i] for i in moving), *values.values()]

    def update(d_model: int = 512, n_heads: int = 8) -> list:
        result = mha_stages(d_model, n_heads)
        heading.set_text(rf"$d_\mathrm{{model}}$ = {d_model},  $h$ = {n_heads}  →  "
                         rf"$d_k = d_\mathrm{{model}} / h$ = {result.d_head}")
        strip.set_data((np.arange(n_heads) % 2)[None, :])  # (1, H)
        shapes.set_text("\n".join(str(stage.shape) for stage in result.stages))
        for stage, bar, label in zip(result.stages, bars, labels, strict=True):
            bar.set_width(max(stage.flops - _FLOP_RANGE[0], 0))
            if stage.flops:
                label.set_position((stage.flops * 1.3, bar.get_y() + bar.get_height() / 2))
                label.set_text(_si(stage.flops))
        values["params"].set_text(f"{result.params:,}")
        values["flops"].set_text(_si(sum(s.flops for s in result.stages)))
        values["rows"].set_text(f"{result.n_softmax_rows:,}")
        values["scores"].set_text(f"{result.n_scores:,}")
        return changing

    return fig, update


@register_widget("shape_explorer")
def shape_explorer_widget() -> InteractiveFigure:
    """Live figure: d_model and the number of heads h.

    Taught in chapter 03.
    """
    controls = {
        "d_model": dropdown(SHAPE_D_MODELS, 512, "d_model"),
        "n_heads": slider(SHAPE_N_HEADS, 8, "ヘッド数 h"),
    }
    return interactive_figure(shape_explorer_plot, controls, title="形の探検")
