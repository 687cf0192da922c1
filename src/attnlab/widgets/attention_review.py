"""Chapter 01's live figure: how the softmax sharpens without 1/√d_k."""

from collections.abc import Callable

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from attnlab.experiments.attention_review import (
    SHARPNESS_D_K,
    SHARPNESS_N_KEYS,
    SHARPNESS_TRIALS,
    sharpness_samples,
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

_BINS = np.linspace(0.0, 1.0, 21)  # histogram bins of the largest weight


def softmax_sharpness_plot() -> tuple[Figure, Callable[..., list]]:
    """One query's weights (left) and the largest weight over many queries (right).

    Vermillion without scaling, blue with the scores divided by √d_k.

    Returns
    -------
    fig : Figure
    update : callable
        ``update(d_k=256, scaled=False, n_keys=16)`` draws that state.

    Not taught: the picture of :func:`softmax_sharpness_widget`.
    """
    fig, (ax_one, ax_max) = new_figure(
        (FIGURE_WIDTH, 3.8), ncols=2,
        margins={"left": 0.07, "right": 0.98, "bottom": 0.14, "top": 0.74, "wspace": 0.22})
    heading = fig.suptitle("")
    stems = LineCollection([])
    ax_one.add_collection(stems)
    uniform_one = ax_one.axhline(0.0, color=GREY, linestyle=":", label="一様な重み")
    # ylim above 1 leaves headroom for the legend, so a weight of 1 never hides under it
    ax_one.set(xlim=(0, 1), ylim=(0, 1.22), xticks=[], yticks=[0, 0.5, 1],
               xlabel="キー（左から順に）", title="1 つのクエリの重み")
    set_ylabel_horizontal(ax_one, "重み")
    legend_one = ax_one.legend(loc="upper left")

    bars = ax_max.bar(_BINS[:-1], np.zeros(len(_BINS) - 1), width=np.diff(_BINS),
                      align="edge")
    mean_line = ax_max.axvline(0.0, color=BLACK, linestyle="--", label="平均")
    uniform_max = ax_max.axvline(0.0, color=GREY, linestyle=":", label="一様な重み")
    ax_max.set(xlim=(0, 1), ylim=(0, 1.22), xticks=[0, 0.5, 1], yticks=[0, 0.5, 1],
               xlabel="最大の重み", title=f"{SHARPNESS_TRIALS} 個のクエリの最大の重み")
    set_ylabel_horizontal(ax_max, "クエリの割合")
    legend_max = ax_max.legend(loc="upper left", ncols=2)
    mean_label = legend_max.get_texts()[0]
    changing = [heading, stems, uniform_one, legend_one, *bars, mean_line, uniform_max,
                legend_max]

    def update(d_k: int = 256, scaled: bool = False, n_keys: int = 16) -> list:
        one, largest = sharpness_samples(d_k, scaled, n_keys)
        colour = BLUE if scaled else VERMILLION
        how = r"$\sqrt{d_k}$ で割る" if scaled else "割らない"
        heading.set_text(f"$d_k$ = {d_k}、キー {n_keys} 個、スコアを{how}")

        x = (np.arange(n_keys) + 0.5) / n_keys  # (Tk,): keys spread over [0, 1]
        stems.set_segments([[(xj, 0.0), (xj, w)] for xj, w in zip(x, one, strict=True)])
        stems.set_linewidth(200 / n_keys)
        stems.set_color(colour)
        uniform_one.set_ydata([1 / n_keys, 1 / n_keys])

        counts, _ = np.histogram(largest, bins=_BINS)
        for bar, count in zip(bars, counts, strict=True):
            bar.set_height(count / largest.size)
            bar.set_facecolor(colour)
        mean = float(largest.mean())
        mean_line.set_xdata([mean, mean])
        mean_label.set_text(f"平均 {mean:.2f}")
        uniform_max.set_xdata([1 / n_keys, 1 / n_keys])
        return changing

    return fig, update


@register_widget("softmax_sharpness")
def softmax_sharpness_widget() -> InteractiveFigure:
    """Live figure: d_k, the scaling and the number of keys.

    Taught in chapter 01.
    """
    controls = {
        "d_k": slider(SHARPNESS_D_K, 256, "d_k"),
        "scaled": toggle([("割らない", False), ("√d_k で割る", True)], False, "スケーリング"),
        "n_keys": toggle(SHARPNESS_N_KEYS, 16, "キーの数"),
    }
    return interactive_figure(softmax_sharpness_plot, controls, title="softmax の鋭さ")
