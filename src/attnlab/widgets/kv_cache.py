"""Chapter 04's live figure: how many K/V heads, and what the KV cache costs."""

from collections.abc import Callable

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from attnlab.experiments.head_roles import PRESETS, format_bytes, kv_cost, kv_divisors
from attnlab.plotting import (
    BLACK,
    FIGURE_WIDTH,
    GREY,
    SMALL_FONT_SIZE,
    VERMILLION,
    new_figure,
    set_ylabel_horizontal,
)
from attnlab.widgets.core import InteractiveFigure, interactive_figure, register_widget

#: The K/V-head choices, as a rule valid for every preset (every H is a multiple of 4).
KV_CHOICES = {
    "公開値": None,
    "MHA": 1,
    "H/2": 2,
    "H/4": 4,
    "MQA": "mqa",
}
#: Context lengths the figure offers.
CONTEXT_LENGTHS = (1024, 4096, 32768)


def chosen_kv_heads(preset: str, choice: str) -> int:
    """The number of K/V heads that ``choice`` (a key of KV_CHOICES) means for ``preset``.

    Not taught: the control rule of :func:`kv_cache_widget`.
    """
    config = PRESETS[preset]
    rule = KV_CHOICES[choice]
    if rule is None:
        return config.n_kv_heads
    if rule == "mqa":
        return 1
    return config.n_heads // rule


def kv_cache_plot() -> tuple[Figure, Callable[..., list]]:
    """KV cache for every divisor of H (left) and the chosen configuration's numbers (right).

    The bars' heights are on a log scale (each halving of Hkv is one step down); every
    bar carries its size as text. The artists are fixed and only their data change, so
    an update redraws just them.

    Returns
    -------
    fig : Figure
    update : callable
        ``update(preset="Llama 2 70B", kv="公開値", seq_len=4096)`` draws that state.

    Not taught: the picture of :func:`kv_cache_widget`.
    """
    # the bars above, the chosen configuration's numbers below: the book's column width
    fig, (ax_bar, ax_text) = new_figure((FIGURE_WIDTH, 5.6), ncols=2)
    ax_bar.set_position((0.08, 0.57, 0.9, 0.34))
    ax_text.set_position((0.08, 0.03, 0.9, 0.3))
    slots = max(len(kv_divisors(p.n_heads)) for p in PRESETS.values())
    bars = ax_bar.bar(np.arange(slots), np.zeros(slots), width=0.7)
    ticks = [ax_bar.text(0, -0.03, "", ha="center", va="top", fontsize=SMALL_FONT_SIZE)
             for _ in range(slots)]  # Hkv, the cache size and the published mark
    ax_bar.set(xlim=(-0.6, slots - 0.4), ylim=(0, 1.1), xticks=[], yticks=[])
    ax_bar.set_xlabel("K/V ヘッド数 Hkv とキャッシュ（左端 = MHA、右端 = MQA）", labelpad=52)
    heading = ax_bar.set_title(" ")
    set_ylabel_horizontal(ax_bar, "KV キャッシュ（対数目盛）")
    ax_text.axis("off")
    ax_text.set_title("fp16（2 バイト）、バッチ 1", fontsize=10, loc="left")
    facts = ax_text.text(0.0, 0.97, "", transform=ax_text.transAxes, fontsize=10,
                         va="top", color=BLACK, linespacing=1.7)
    total = ax_text.text(0.0, 0.0, "", transform=ax_text.transAxes, fontsize=11,
                         va="bottom", color=VERMILLION)
    changing = [*bars, *ticks, heading, facts, total]

    def update(preset: str = "Llama 2 70B", kv: str = "公開値", seq_len: int = 4096) -> list:
        config = PRESETS[preset]
        n_kv = chosen_kv_heads(preset, kv)
        options = kv_divisors(config.n_heads)  # H … 1
        totals = [kv_cost(config, d, seq_len).total_bytes for d in options]
        offset = (slots - len(options)) / 2  # centre the bars that exist
        for i, (bar, tick) in enumerate(zip(bars, ticks, strict=True)):
            shown = i < len(options)
            for artist in (bar, tick):
                artist.set_visible(shown)
            if not shown:
                continue
            d, x = options[i], i + offset
            height = 0.15 + 0.85 * np.log2(d) / np.log2(options[0])  # 1 K/V head: 0.15
            bar.set_x(x - 0.35)
            bar.set_height(height)
            bar.set_facecolor(VERMILLION if d == n_kv else GREY)
            tick.set_position((x, -0.03))
            mark = "\n公開値" if d == config.n_kv_heads else ""
            size = format_bytes(totals[i]).replace(" ", "\n")  # number over unit: narrow
            tick.set_text(f"{d}\n{size}{mark}")
        heading.set_text(f"{preset}：{seq_len} トークンの KV キャッシュ")

        cost = kv_cost(config, n_kv, seq_len)
        kind = "MHA" if n_kv == config.n_heads else "MQA" if n_kv == 1 else "GQA"
        texts = [
            f"選択：「{kv}」→ Hkv = {n_kv}（{kind}）",
            f"層 {config.n_layers}、クエリヘッド H = {config.n_heads}、"
            f"Dh = {config.d_head}",
            f"1 つの K/V ヘッドを共有するクエリヘッド：{config.n_heads // n_kv} 個",
            f"W_K と W_V のパラメータ（全層）：{cost.kv_params:,}",
            f"KV キャッシュ / トークン：{format_bytes(cost.bytes_per_token)}",
            f"MHA に比べて：1/{config.n_heads // n_kv}",
        ]
        facts.set_text("\n".join(texts))
        total.set_text(f"KV キャッシュ合計（{seq_len} トークン）：{format_bytes(cost.total_bytes)}")
        return changing

    return fig, update


@register_widget("kv_cache")
def kv_cache_widget() -> InteractiveFigure:
    """Live figure: a preset, the number of K/V heads and the context length.

    Taught in chapter 04.
    """
    controls = {
        "preset": widgets.Dropdown(options=list(PRESETS), value="Llama 2 70B",
                                   description="モデル"),
        "kv": widgets.ToggleButtons(options=list(KV_CHOICES), value="公開値",
                                    description="K/V ヘッド", style={"button_width": "auto"}),
        "seq_len": widgets.ToggleButtons(options=list(CONTEXT_LENGTHS), value=4096,
                                         description="文脈長", style={"button_width": "auto"}),
    }
    return interactive_figure(kv_cache_plot, controls, title="K/V ヘッドと KV キャッシュ")
