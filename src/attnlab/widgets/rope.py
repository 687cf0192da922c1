"""Chapter 08's live figure: RoPE turns q and k in one pair's plane; the score sees m − n."""

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attnlab.experiments.rope import (
    ROPE_DEMO_D_HEAD,
    ROPE_DEMO_PAIRS,
    ROPE_DEMO_POSITIONS,
    rope_pair_plane,
)
from attnlab.plotting import (
    BLACK,
    BLUE,
    FIGURE_WIDTH,
    GREY,
    SMALL_FONT_SIZE,
    VERMILLION,
    WEIGHT_CMAP,
    new_figure,
    set_colorbar_label,
    set_ylabel_horizontal,
)
from attnlab.widgets.core import (
    InteractiveFigure,
    interactive_figure,
    register_widget,
    slider,
    toggle,
)

_PLANES = {pair: rope_pair_plane(pair) for pair in ROPE_DEMO_PAIRS}
_LIMIT = 1.7  # the demo pairs have length ≤ 1.5


def rope_rotation_plot() -> tuple[Figure, Callable[..., list]]:
    """Left: pair i of q_m and k_n in its plane. Right: the pair's q_m·k_n for all m, n.

    Blue is the query, vermillion the key; the faint arrows are the unrotated pair
    (position 0). On the right, the cell (m, n) is framed and every cell with the same
    m − n is marked: they all hold the same value.

    Returns
    -------
    fig : Figure
    update : callable
        ``update(m=5, n=2, pair=0)`` draws that state.

    Not taught: the picture of :func:`rope_rotation_widget`.
    """
    # the plane and the grid side by side, the numbers in a row below: the book's column
    fig, (ax_plane, ax_grid) = new_figure((FIGURE_WIDTH, 4.6), ncols=2)
    ax_plane.set_position((0.02, 0.24, 0.4, 0.62))
    ax_grid.set_position((0.56, 0.28, 0.32, 0.55))
    heading = fig.suptitle("")
    circle = np.linspace(0.0, 2 * np.pi, 200)
    for radius in (0.5, 1.0, 1.5):
        ax_plane.plot(radius * np.cos(circle), radius * np.sin(circle), color=GREY,
                      linewidth=0.5, linestyle=":")
    ax_plane.axhline(0.0, color=GREY, linewidth=0.5)
    ax_plane.axvline(0.0, color=GREY, linewidth=0.5)
    (q0,) = ax_plane.plot([], [], color=BLUE, alpha=0.3, linewidth=2)
    (k0,) = ax_plane.plot([], [], color=VERMILLION, alpha=0.3, linewidth=2)
    (q_arrow,) = ax_plane.plot([], [], color=BLUE, linewidth=2.5, marker="o",
                               markevery=[1], label="クエリ $q_m$")
    (k_arrow,) = ax_plane.plot([], [], color=VERMILLION, linewidth=2.5, marker="s",
                               markevery=[1], label="キー $k_n$")
    ax_plane.set(xlim=(-_LIMIT, _LIMIT), ylim=(-_LIMIT, _LIMIT), aspect="equal",
                 xticks=[], yticks=[], title="ペア i の平面")
    ax_plane.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=2, frameon=False)
    # fixed words are drawn once; only the short numbers change (text is slow to draw)
    for x, words in ((0.03, "このペアの内積"), (0.33, "同じ m−n の組の内積"),
                     (0.7, f"全 {ROPE_DEMO_D_HEAD} 次元の内積")):
        fig.text(x, 0.11, words, fontsize=SMALL_FONT_SIZE, va="top", ha="left")
    readout = [fig.text(x, 0.05, "", fontsize=SMALL_FONT_SIZE, va="top", ha="left")
               for x in (0.03, 0.33, 0.7)]

    T = ROPE_DEMO_POSITIONS
    image = ax_grid.imshow(np.zeros((T, T)), cmap=WEIGHT_CMAP, vmin=-1.3, vmax=1.3)
    # colours of each pair's grid, computed once: an update only swaps the RGBA array
    rgba = {pair: image.to_rgba(plane.scores) for pair, plane in _PLANES.items()}
    colorbar_axes = fig.add_axes((0.9, 0.28, 0.02, 0.55))
    set_colorbar_label(fig.colorbar(image, cax=colorbar_axes),
                       "このペアの\n$q_m \\cdot k_n$")
    same = ax_grid.scatter([], [], s=40, marker="o", facecolors="white",
                           edgecolors=BLACK, linewidths=1.0, zorder=3)
    frame = Rectangle((-0.5, -0.5), 1, 1, fill=False, edgecolor=BLACK, linewidth=2.5)
    ax_grid.add_patch(frame)
    ax_grid.set(xticks=range(T), yticks=range(T), xlabel="キーの位置 n",
                title="同じ m−n のマスは同じ値")
    set_ylabel_horizontal(ax_grid, "クエリの\n位置 m", where="left")
    changing = [heading, q0, k0, q_arrow, k_arrow, *readout, image, same,
                frame]

    def update(m: int = 5, n: int = 2, pair: int = 0) -> list:
        plane = _PLANES[pair]
        q_start, k_start = plane.q[0], plane.k[0]  # position 0: not rotated
        q_m, k_n = plane.q[m], plane.k[n]
        heading.set_text(
            f"ペア {pair}（次元 {2 * pair}, {2 * pair + 1}）、θ = {plane.theta:.3g}："
            f"q は {m}θ = {m * plane.theta:.2f}、k は {n}θ = {n * plane.theta:.2f} 回る")
        q0.set_data([0, q_start[0]], [0, q_start[1]])
        k0.set_data([0, k_start[0]], [0, k_start[1]])
        q_arrow.set_data([0, q_m[0]], [0, q_m[1]])
        k_arrow.set_data([0, k_n[0]], [0, k_n[1]])
        diagonal = [(mm, mm - (m - n)) for mm in range(T) if 0 <= mm - (m - n) < T]
        values = [plane.scores[a, b] for a, b in diagonal]
        readout[0].set_text(f"{plane.scores[m, n]:.3f}")
        readout[1].set_text(f"{len(diagonal)} 組：{min(values):.3f} 〜 {max(values):.3f}")
        readout[2].set_text(f"{plane.full[m, n]:.3f}")
        image.set_data(rgba[pair])
        same.set_offsets(np.array([(b, a) for a, b in diagonal], dtype=float))
        frame.set_xy((n - 0.5, m - 0.5))
        return changing

    return fig, update


@register_widget("rope_rotation")
def rope_rotation_widget() -> InteractiveFigure:
    """Live figure: positions m and n and the pair index i.

    Taught in chapter 08.
    """
    positions = list(range(ROPE_DEMO_POSITIONS))
    controls = {
        "m": slider(positions, 5, "クエリの位置 m"),
        "n": slider(positions, 2, "キーの位置 n"),
        "pair": toggle(ROPE_DEMO_PAIRS, 0, "ペア i"),
    }
    return interactive_figure(rope_rotation_plot, controls, title="RoPE の回転")
