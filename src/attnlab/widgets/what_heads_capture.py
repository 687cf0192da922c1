"""Chapter 04's live figures: pick a head of the trained model and see its map and scores;
choose how many K/V heads and see what the KV cache costs."""

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure

from attnlab.experiments.what_heads_capture import (
    CONFIG,
    EXAMPLE_PERIODS,
    PRESETS,
    SEEDS,
    format_bytes,
    head_map,
    kv_cost,
    kv_divisors,
    trained_model,
)
from attnlab.head_roles import induction_mask
from attnlab.plotting import (
    BLACK,
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
    dropdown,
    interactive_figure,
    register_widget,
    toggle,
)

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
        "layer": toggle(range(CONFIG.n_layers), 1, "層"),
        "head": toggle(range(CONFIG.n_heads), 0, "ヘッド"),
        "example": toggle([(f"周期 {p}", i) for i, p in enumerate(EXAMPLE_PERIODS)], 0, "例"),
    }
    return interactive_figure(head_picker_plot, controls, title="ヘッドを選ぶ")


#: The K/V-head choices, as a rule valid for every preset (every H is a multiple of 4).
KV_CHOICES = {
    "公開値": None,
    "MHA": 1,
    "h/2": 2,
    "h/4": 4,
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

    The bars' heights are on a log scale (each halving of h_kv is one step down); every
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
             for _ in range(slots)]  # h_kv, the cache size and the published mark
    ax_bar.set(xlim=(-0.6, slots - 0.4), ylim=(0, 1.1), xticks=[], yticks=[])
    ax_bar.set_xlabel("K/V ヘッド数 $h_{kv}$ とキャッシュ（左端 = MHA、右端 = MQA）", labelpad=52)
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
        if config.sliding_window is None:
            window = "窓なし：すべてのトークンのキーとバリューを保持"
        else:
            unwindowed = kv_cost(config, n_kv, seq_len, window=False).total_bytes
            window = (f"スライディングウィンドウ {config.sliding_window}：保持は最新 "
                      f"{min(seq_len, config.sliding_window)} トークン"
                      f"（窓なしなら {format_bytes(unwindowed)}）")
        texts = [
            f"選択：「{kv}」→ $h_{{kv}}$ = {n_kv}（{kind}）、1 つの K/V ヘッドを"
            f"{config.n_heads // n_kv} 個のクエリヘッドが共有",
            f"層 {config.n_layers}、クエリヘッド $h$ = {config.n_heads}、"
            f"$d_k$ = {config.d_head}",
            f"$W_K$ と $W_V$ のパラメータ（全層）：{cost.kv_params:,}",
            f"KV キャッシュ / トークン：{format_bytes(cost.bytes_per_token)}"
            f"（MHA の 1/{config.n_heads // n_kv}）",
            window,
        ]
        if config.context_len is not None and seq_len > config.context_len:
            texts.append(f"※ 学習時の文脈長 {config.context_len} を超える、仮定の長さです")
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
        "preset": dropdown(PRESETS, "Llama 2 70B", "モデル"),
        "kv": toggle(KV_CHOICES, "公開値", "K/V ヘッド"),
        "seq_len": toggle(CONTEXT_LENGTHS, 4096, "文脈長"),
    }
    return interactive_figure(kv_cache_plot, controls, title="K/V ヘッドと KV キャッシュ")
