"""Chapter 04's live figure: how many K/V heads, and what the KV cache costs."""

from collections.abc import Callable

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from attnlab.experiments.head_roles import PRESETS, format_bytes, kv_cost, kv_divisors
from attnlab.plotting import BLACK, GREY, VERMILLION, new_figure
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


def kv_cache_plot() -> tuple[Figure, Callable[..., None]]:
    """KV cache for every divisor of H (left) and the chosen configuration's numbers (right).

    Returns
    -------
    fig : Figure
    update : callable
        ``update(preset="Llama 2 70B", kv="公開値", seq_len=4096)`` draws that state.

    Not taught: the picture of :func:`kv_cache_widget`.
    """
    fig, (ax_bar, ax_text) = new_figure(
        (9.0, 3.6), ncols=2, margins={"left": 0.09, "right": 0.99, "bottom": 0.24, "top": 0.88,
                                      "wspace": 0.12})

    def update(preset: str = "Llama 2 70B", kv: str = "公開値", seq_len: int = 4096) -> None:
        config = PRESETS[preset]
        n_kv = chosen_kv_heads(preset, kv)
        options = kv_divisors(config.n_heads)  # H … 1
        totals = np.array([kv_cost(config, d, seq_len).total_bytes for d in options])
        cost = kv_cost(config, n_kv, seq_len)
        ax_bar.clear()
        colours = [VERMILLION if d == n_kv else GREY for d in options]
        x = np.arange(len(options))
        ax_bar.bar(x, totals / 2**30, color=colours)
        for xi, total in zip(x, totals, strict=True):
            ax_bar.text(xi, total / 2**30 * 1.15, format_bytes(total), ha="center",
                        va="bottom", fontsize=8, rotation=90 if len(options) > 4 else 0)
        ax_bar.set_yscale("log")
        ax_bar.set_ylim(totals.min() / 2**30 / 1.5, totals.max() / 2**30 * 12)
        ax_bar.set_yticks([])
        ax_bar.minorticks_off()
        labels = [f"{d}\n公開値" if d == config.n_kv_heads else str(d) for d in options]
        ax_bar.set_xticks(x, labels)
        ax_bar.set(xlabel="K/V ヘッド数 $H_{kv}$（左端 = MHA、右端 = MQA）",
                   ylabel="KV キャッシュ（対数目盛）",
                   title=f"{preset}：{seq_len} トークンの KV キャッシュ")

        ax_text.clear()
        ax_text.axis("off")
        kind = "MHA" if n_kv == config.n_heads else "MQA" if n_kv == 1 else "GQA"
        lines = [
            f"選択：「{kv}」→ $H_{{kv}}$ = {n_kv}（{kind}）",
            f"層 {config.n_layers}、クエリヘッド H = {config.n_heads}、"
            f"$d_{{head}}$ = {config.d_head}",
            f"1 つの K/V ヘッドを共有するクエリヘッド：{config.n_heads // n_kv} 個",
            f"$W_K, W_V$ のパラメータ（全層）：{cost.kv_params:,}",
            f"KV キャッシュ / トークン：{format_bytes(cost.bytes_per_token)}",
            f"KV キャッシュ合計（{seq_len} トークン）：{format_bytes(cost.total_bytes)}",
            f"MHA に比べて：1/{config.n_heads // n_kv}",
        ]
        for row, line in enumerate(lines):
            ax_text.text(0.0, 0.95 - 0.14 * row, line, transform=ax_text.transAxes,
                         fontsize=10, va="top", color=VERMILLION if row == 5 else BLACK)
        ax_text.set_title("fp16（2 バイト）、バッチ 1", fontsize=10)

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
