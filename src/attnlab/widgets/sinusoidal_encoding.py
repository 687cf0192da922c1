"""Chapter 06's live figure: one position's sinusoidal encoding and its dot products."""

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure

from attnlab.experiments.sinusoidal_encoding import (
    EXPLORER_D_MODEL,
    EXPLORER_POSITIONS,
    EXPLORER_SEQ_LEN,
    explorer_state,
)
from attnlab.plotting import (
    BLACK,
    BLUE,
    FIGURE_WIDTH,
    GREY,
    VERMILLION,
    new_figure,
    set_ylabel_horizontal,
)
from attnlab.widgets.core import (
    InteractiveFigure,
    interactive_figure,
    register_widget,
    slider,
    toggle,
)


def sinusoidal_explorer_plot() -> tuple[Figure, Callable[..., list]]:
    """PE(pos) over the dimensions (left) and PE(pos′)·PE(pos) over pos′ (right).

    Blue dots are the sine dimensions 2i, vermillion the cosine dimensions 2i+1. The
    right panel divides the dot product by its largest value d_model/2 (its value at
    pos′ = pos), so every width shares one axis.

    Returns
    -------
    fig : Figure
    update : callable
        ``update(pos=5, d_model=64)`` draws that state.

    Not taught: the picture of :func:`sinusoidal_explorer_widget`.
    """
    fig, (ax_vec, ax_dot) = new_figure(
        (FIGURE_WIDTH, 4.2), ncols=2, margins={"left": 0.08, "right": 0.98, "bottom": 0.13,
                                               "top": 0.72, "wspace": 0.25})
    heading = fig.suptitle("")
    (sin_dots,) = ax_vec.plot([], [], "o", color=BLUE, label="sin（次元 2i）")
    (cos_dots,) = ax_vec.plot([], [], "s", color=VERMILLION, label="cos（次元 2i+1）")
    ax_vec.axhline(0.0, color=GREY, linewidth=0.8)
    ax_vec.set(xlim=(-0.02, 1.0), ylim=(-1.15, 2.0), yticks=[-1, 0, 1],
               xlabel="次元の番号 / $d_\\mathrm{model}$（左ほど速い波）",
               title="位置 pos の符号化ベクトル")
    set_ylabel_horizontal(ax_vec, "PE(pos) の値")
    ax_vec.legend(loc="upper right")  # above the values (at most 1): headroom to 2

    n = np.arange(EXPLORER_SEQ_LEN)
    (curve,) = ax_dot.plot(n, np.zeros_like(n, dtype=float), color=BLACK, marker=".",
                           markersize=3, linewidth=1.0)
    here = ax_dot.axvline(0.0, color=VERMILLION, linestyle="--", label="pos′ = pos")
    ax_dot.set(xlim=(0, EXPLORER_SEQ_LEN - 1), ylim=(0.0, 1.3), yticks=[0, 0.5, 1],
               xlabel="もう一方の位置 pos′",
               title="PE(pos′)·PE(pos)：\nすべての位置 pos′ との内積")
    set_ylabel_horizontal(ax_dot, "内積 ÷ ($d_\\mathrm{model}$/2)")
    ax_dot.legend(loc="upper right")
    changing = [heading, sin_dots, cos_dots, curve, here]

    def update(pos: int = 5, d_model: int = 64) -> list:
        vector, dots = explorer_state(pos, d_model)  # (D,), (T,)
        frac = np.arange(d_model) / d_model  # (D,) column j at j / D
        size = 5.0 if d_model <= 32 else 3.0
        sin_dots.set_data(frac[0::2], vector[0::2])
        cos_dots.set_data(frac[1::2], vector[1::2])
        sin_dots.set_markersize(size)
        cos_dots.set_markersize(size)
        curve.set_ydata(dots / (d_model / 2))
        here.set_xdata([pos, pos])
        heading.set_text(f"pos = {pos}、$d_\\mathrm{{model}}$ = {d_model}")
        return changing

    return fig, update


@register_widget("sinusoidal_explorer")
def sinusoidal_explorer_widget() -> InteractiveFigure:
    """Live figure: a position and d_model → its encoding and its dot products.

    Taught in chapter 06.
    """
    controls = {
        "pos": slider(EXPLORER_POSITIONS, 5, "位置 pos"),
        "d_model": toggle(EXPLORER_D_MODEL, 64, "d_model"),
    }
    return interactive_figure(sinusoidal_explorer_plot, controls,
                              title="正弦波位置エンコーディングの探検")
