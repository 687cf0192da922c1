"""Chapter 04's live figure: pick a head of the trained model and see its map and scores."""

from collections.abc import Callable

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from attnlab.experiments.head_roles import CONFIG, EXAMPLE_PERIODS, SEEDS, head_map, trained_model
from attnlab.head_roles import induction_mask
from attnlab.plotting import (
    WEIGHT_CMAP,
    new_figure,
    set_colorbar_label,
    set_ylabel_horizontal,
)
from attnlab.widgets.core import InteractiveFigure, interactive_figure, register_widget

_T = 32
_TICKS = np.arange(0, _T, 4)


def head_picker_plot() -> tuple[Figure, Callable[..., list]]:
    """One head's attention weights on one example; dots mark the induction targets.

    Returns
    -------
    fig : Figure
    update : callable
        ``update(layer=1, head=0, example=0)`` draws that state.

    Not taught: the picture of :func:`head_picker_widget`.
    """
    trained_model(SEEDS[0])  # train once (cached) before the first update is timed
    fig, ax = new_figure((6.4, 4.6), margins={"left": 0.18, "right": 0.92, "bottom": 0.15,
                                               "top": 0.86})
    image = ax.imshow(np.zeros((_T, _T)), cmap=WEIGHT_CMAP, vmin=0.0, vmax=1.0)
    targets = ax.scatter([], [], s=8, color="white", edgecolors="black", linewidths=0.4,
                         label="誘導の的（前の出現の次の位置）")
    colourbar = fig.colorbar(image, ax=ax, shrink=0.85, pad=0.02)
    set_colorbar_label(colourbar, "重み")
    ax.set_xticks(_TICKS)
    ax.set_yticks(_TICKS)
    ax.set(xlabel="キーの位置 j")
    set_ylabel_horizontal(ax, "クエリの\n位置 i", where="left")
    fig.legend(handles=[targets], loc="lower right", frameon=False)
    heading = fig.suptitle("", fontsize=11)

    def update(layer: int = 1, head: int = 0, example: int = 0) -> list:
        result = head_map(layer, head, example)
        image.set_data(result.weights)
        rows, cols = np.nonzero(induction_mask(result.tokens[None])[0])
        targets.set_offsets(np.column_stack([cols, rows]) if rows.size else np.empty((0, 2)))
        heading.set_text(
            f"層 {layer}・ヘッド {head}、例 {example}（周期 {EXAMPLE_PERIODS[example]}）\n"
            f"直前トークン指標 {result.previous:.2f}、誘導指標 {result.induction:.2f}")
        return [image, targets, heading]

    return fig, update


@register_widget("head_picker")
def head_picker_widget() -> InteractiveFigure:
    """Live figure: layer, head and example of the chapter's trained model.

    Taught in chapter 04.
    """
    controls = {
        "layer": widgets.ToggleButtons(options=list(range(CONFIG.n_layers)), value=1,
                                       description="層", style={"button_width": "auto"}),
        "head": widgets.ToggleButtons(options=list(range(CONFIG.n_heads)), value=0,
                                      description="ヘッド", style={"button_width": "auto"}),
        "example": widgets.ToggleButtons(
            options=[(f"周期 {p}", i) for i, p in enumerate(EXAMPLE_PERIODS)], value=0,
            description="例", style={"button_width": "auto"}),
    }
    return interactive_figure(head_picker_plot, controls, title="ヘッドを選ぶ")
