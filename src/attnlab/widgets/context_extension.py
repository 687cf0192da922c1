"""Chapter 09's live figure: what 外挿, PI, NTK and YaRN do to every RoPE frequency."""

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure

from attnlab.experiments.context_extension import (
    EXTENSION_D_HEAD,
    EXTENSION_METHODS,
    EXTENSION_SCALES,
    EXTENSION_TRAIN_LEN,
    angle_coverage,
)
from attnlab.plotting import (
    BLACK,
    FIGURE_WIDTH,
    GREY,
    method_style,
    new_figure,
    set_ylabel_horizontal,
)
from attnlab.widgets.core import (
    InteractiveFigure,
    interactive_figure,
    register_widget,
    toggle,
)

#: One colour per method, the book's (attnlab.plotting.METHOD_STYLES; 外挿 is plain RoPE).
METHOD_COLOURS = {method: method_style(method).colour for method in ("外挿", "PI", "NTK", "YaRN")}


def context_extension_plot() -> tuple[Figure, Callable[..., list]]:
    """Turns reached per pair against training (left), neighbours' resolution (right).

    Returns
    -------
    fig : Figure
    update : callable
        ``update(method="外挿", scale=2)`` draws that state.

    Not taught: the picture of :func:`context_extension_widget`.
    """
    fig, (ax_turns, ax_res) = new_figure(
        (FIGURE_WIDTH, 4.4), ncols=2,
        margins={"left": 0.1, "right": 0.98, "bottom": 0.27, "top": 0.75, "wspace": 0.3})
    heading = fig.suptitle("", fontsize=11, linespacing=1.5)
    pairs = np.arange(EXTENSION_D_HEAD // 2)
    plain = angle_coverage("外挿", 1)
    trained_turns = plain.trained_max / (2 * np.pi)  # (Dh/2,)

    ax_turns.fill_between(pairs, 1e-3, trained_turns, color=GREY, alpha=0.3, linewidth=0,
                          label="訓練で見た範囲")
    ax_turns.axhline(1.0, color=GREY, linestyle=":", linewidth=1)
    ax_turns.text(pairs[-1], 1.2, "1 周", color=GREY, ha="right", va="bottom")
    (target,) = ax_turns.plot(pairs, trained_turns, marker="o", markersize=3)
    (unseen,) = ax_turns.plot([], [], linestyle="none", marker="x", color=BLACK,
                              markersize=7, label="見たことのない角度")
    # the legend is drawn once: one entry per method colour, the same in every state
    for method, colour in METHOD_COLOURS.items():
        ax_turns.plot([], [], color=colour, marker="o", markersize=3, label=method)
    ax_turns.set(yscale="log", ylim=(1e-3, 1e6), xlim=(-0.5, pairs[-1] + 0.5),
                 xlabel="ペアの番号 i（右ほど低周波）", title="各ペアが回る角度")
    set_ylabel_horizontal(ax_turns, "角度の幅（周）")

    ax_res.axhline(1.0, color=GREY, linestyle=":", linewidth=1, label="訓練と同じ")
    (one_over_s,) = ax_res.plot([pairs[0], pairs[-1]], [1.0, 1.0], color=GREY,
                                linestyle="--", linewidth=1, label="1/s")
    (resolution,) = ax_res.plot(pairs, np.ones(len(pairs)), marker="o", markersize=3)
    ax_res.set(ylim=(0, 1.3), xlim=(-0.5, pairs[-1] + 0.5),
               xlabel="ペアの番号 i（右ほど低周波）", title="隣り合う位置の角度の差（訓練 = 1）")
    set_ylabel_horizontal(ax_res, r"$\theta'_i \,/\, \theta_i$")
    # one legend for both axes, below them (the same in every state)
    handles, labels = (sum(pair, []) for pair in zip(
        ax_turns.get_legend_handles_labels(), ax_res.get_legend_handles_labels(), strict=True))
    fig.legend(handles, labels, loc="lower center", ncols=4, frameon=False)
    changing = [heading, target, unseen, one_over_s, resolution]

    def update(method: str = "外挿", scale: int = 2) -> list:
        cov = angle_coverage(method, scale)
        colour = METHOD_COLOURS[method]
        long_len = scale * EXTENSION_TRAIN_LEN
        temperature = ""
        if method == "YaRN" and scale > 1:
            temperature = (f"、q と k を {cov.attention_factor:.3f} 倍"
                           f"（スコア {cov.attention_factor ** 2:.3f} 倍）")
        heading.set_text(
            f"{method}、s = {scale}：訓練 {EXTENSION_TRAIN_LEN} 位置 → {long_len} 位置"
            f"{temperature}\n見たことのない角度に出るペア: {int(cov.unseen.sum())} / {len(pairs)}")
        target.set_ydata(cov.target_max / (2 * np.pi))
        target.set_color(colour)
        unseen.set_data(pairs[cov.unseen], cov.target_max[cov.unseen] / (2 * np.pi))
        one_over_s.set_ydata([1 / scale, 1 / scale])
        resolution.set_ydata(cov.resolution)
        resolution.set_color(colour)
        return changing

    return fig, update


@register_widget("context_extension")
def context_extension_widget() -> InteractiveFigure:
    """Live figure: the method of context extension and the scale s.

    Taught in chapter 09.
    """
    controls = {
        "method": toggle(EXTENSION_METHODS, "外挿", "方法"),
        "scale": toggle(EXTENSION_SCALES, 2, "s"),
    }
    return interactive_figure(context_extension_plot, controls, title="コンテキスト拡張")
