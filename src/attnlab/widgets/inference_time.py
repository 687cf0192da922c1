"""Chapter 11's live figure: the cache filling, the window sliding, the sinks kept."""

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attnlab.experiments.inference_time import (
    CACHE_DEMO_LENGTH,
    CACHE_DEMO_SINKS,
    CACHE_DEMO_WINDOWS,
    EVICTED,
    KEPT,
    NOT_YET,
    SINK,
    cache_state,
)
from attnlab.plotting import BLUE, FIGURE_WIDTH, GREY, SMALL_FONT_SIZE, VERMILLION, new_figure
from attnlab.widgets.core import (
    InteractiveFigure,
    interactive_figure,
    register_widget,
    slider,
    toggle,
)

_FILL = {KEPT: BLUE, SINK: VERMILLION, EVICTED: GREY, NOT_YET: "white"}
_ALPHA = {KEPT: 0.85, SINK: 0.85, EVICTED: 0.35, NOT_YET: 1.0}
_MAX_SLOTS = max(CACHE_DEMO_SINKS) + max(CACHE_DEMO_WINDOWS)


def kv_cache_slots_plot() -> tuple[Figure, Callable[..., list]]:
    """Top: positions 0 … 15, coloured by what the cache does with them after step t.
    Bottom: the cache's slots and the position each one holds (a rolling buffer).

    Returns
    -------
    fig : Figure
    update : callable
        ``update(step=9, window=4, sinks=1)`` draws that state.

    Not taught: the picture of :func:`kv_cache_slots_widget`.
    """
    fig, ax = new_figure((FIGURE_WIDTH, 2.9))
    ax.set(xlim=(-0.6, CACHE_DEMO_LENGTH + 0.1), ylim=(-1.8, 1.8), xticks=[], yticks=[])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.text(-0.5, 1.55, "位置（読んだ順）", fontsize=SMALL_FONT_SIZE)
    ax.text(-0.5, -0.45, "キャッシュのスロット（数字はその位置）", fontsize=SMALL_FONT_SIZE)
    cells = []
    for p in range(CACHE_DEMO_LENGTH):
        cell = Rectangle((p, 0.3), 0.9, 0.9, edgecolor="black", linewidth=0.8)
        ax.add_patch(cell)
        ax.text(p + 0.45, 0.75, str(p), ha="center", va="center",
                fontsize=SMALL_FONT_SIZE)
        cells.append(cell)
    slots, labels = [], []
    for s in range(_MAX_SLOTS):
        slot = Rectangle((s, -1.6), 0.9, 0.9, edgecolor="black", linewidth=0.8)
        ax.add_patch(slot)
        slots.append(slot)
        labels.append(ax.text(s + 0.45, -1.15, "", ha="center", va="center",
                              fontsize=SMALL_FONT_SIZE))
    for x, colour, alpha, name in ((10.6, VERMILLION, 0.85, "シンク"),
                                   (12.5, BLUE, 0.85, "ウィンドウ"),
                                   (14.9, GREY, 0.35, "捨てた")):
        ax.add_patch(Rectangle((x, -1.35), 0.35, 0.35, facecolor=colour, alpha=alpha))
        ax.text(x + 0.45, -1.18, name, va="center", fontsize=SMALL_FONT_SIZE)
    title = ax.set_title("")

    def update(step=9, window=4, sinks=1):
        state = cache_state(step, window, sinks)
        for cell, status in zip(cells, state.status, strict=True):
            cell.set_facecolor(_FILL[int(status)])
            cell.set_alpha(_ALPHA[int(status)])
        for s, (slot, label) in enumerate(zip(slots, labels, strict=True)):
            used = s < len(state.slots)
            held = int(state.slots[s]) if used else -1
            slot.set_visible(used)
            colour = VERMILLION if s < sinks else BLUE
            slot.set_facecolor(colour if held >= 0 else "white")
            slot.set_alpha(0.85 if held >= 0 else 1.0)
            label.set_text(str(held) if held >= 0 else "")
        kept = int(np.sum(state.slots >= 0))
        title.set_text(f"位置 {step} まで読んだキャッシュ：W = {window}、シンク {sinks} 個、"
                       f"{kept} / {sinks + window} スロット使用")
        return [*cells, *slots, *labels, title]

    return fig, update


@register_widget("kv_cache_slots")
def kv_cache_slots_widget() -> InteractiveFigure:
    """Live figure: the step t, the window W and the number of sinks S.

    Taught in chapter 11.
    """
    controls = {
        "step": slider(range(CACHE_DEMO_LENGTH), 9, "位置 t"),
        "window": toggle(CACHE_DEMO_WINDOWS, 4, "W"),
        "sinks": toggle(CACHE_DEMO_SINKS, 1, "シンク"),
    }
    return interactive_figure(kv_cache_slots_plot, controls,
                              title="KV キャッシュのスロット")
