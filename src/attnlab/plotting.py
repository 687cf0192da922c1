"""Figures of the course: Japanese fonts and attention heatmaps.

Plotting functions take an optional ``ax``, return the axes they drew on, and never call
``plt.show()``.
"""

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

#: Sequential colour map used for every attention weight map (perceptually uniform and
#: readable with colour-vision deficiencies).
WEIGHT_CMAP = "viridis"


def use_japanese_font() -> str:
    """Configure matplotlib to draw Japanese text; the one place that does so.

    Registers the IPAexGothic font shipped with ``matplotlib-fontja`` and makes it the
    default family, so titles and labels in Japanese render without missing-glyph
    warnings. Calling it again is harmless.

    Returns
    -------
    str
        The font family now in use.

    Taught in chapter 01 (アテンションの復習).
    """
    import matplotlib_fontja  # noqa: F401  (importing registers IPAexGothic)

    matplotlib_fontja.japanize()
    mpl.rcParams["figure.dpi"] = 100
    mpl.rcParams["savefig.dpi"] = 100
    mpl.rcParams["figure.figsize"] = (6.4, 4.0)
    return mpl.rcParams["font.family"][0]


def plot_attention(
    weights: np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: plt.Axes | None = None,
    title: str = "アテンションの重み",
    annotate: bool = True,
    mask: np.ndarray | None = None,
) -> plt.Axes:
    """Heatmap of attention weights: one row per query, one column per key.

    Parameters
    ----------
    weights : np.ndarray
        Shape (Tq, Tk), rows summing to 1.
    query_labels, key_labels : sequence of str, optional
        Tick labels for the rows (queries) and columns (keys); default ``0, 1, …``.
    ax : matplotlib Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str
        Axes title.
    annotate : bool
        Write each weight in its cell (rounded to two decimals).
    mask : np.ndarray of bool, optional
        Shape (Tq, Tk); cells that are False (hidden keys) are hatched grey.

    Returns
    -------
    matplotlib Axes

    Taught in chapter 01 (アテンションの復習).
    """
    weights = np.asarray(weights)
    if weights.ndim != 2:
        raise ValueError(
            f"weights は (Tq, Tk) の2次元配列である必要があります: weights.shape={weights.shape}"
        )
    n_q, n_k = weights.shape
    query_labels = _labels(query_labels, n_q, "query_labels")
    key_labels = _labels(key_labels, n_k, "key_labels")
    if ax is None:
        size = (max(3.0, 0.55 * n_k + 1.6), max(2.6, 0.5 * n_q + 1.0))
        _, ax = plt.subplots(figsize=size, layout="constrained")
    image = ax.imshow(weights, cmap=WEIGHT_CMAP, vmin=0.0, vmax=1.0)
    if mask is not None:
        hidden = ~np.asarray(mask, dtype=bool)
        shade = np.ma.masked_where(~hidden, np.ones_like(weights))
        ax.imshow(shade, cmap="Greys", vmin=0.0, vmax=2.0, alpha=0.9)
    if annotate:
        for i in range(n_q):
            for j in range(n_k):
                if mask is not None and not mask[i][j]:
                    continue
                value = weights[i, j]
                colour = "black" if value > 0.6 else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center",
                        color=colour, fontsize=8)
    ax.set_xticks(range(n_k), key_labels)
    ax.set_yticks(range(n_q), query_labels)
    ax.set_xlabel("キー（参照される側）")
    ax.set_ylabel("クエリ（参照する側）")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label="重み")
    return ax


def _labels(labels: Sequence[str] | None, n: int, name: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} の長さ {len(labels)} が重みの軸の長さ {n} と一致しません")
    return labels
