"""Live figures: ipywidgets controls wired to a pure plot.

A live figure has two parts:

- a **plot**: a function ``plot() -> (fig, update)`` that builds a
  ``matplotlib.figure.Figure`` with its axes, labels and empty artists, and returns it
  with ``update(**state)``, which sets the artists' data for one state of the controls.
  ``update`` may return the artists it changes: if it does, and they are always the
  same, a live update redraws only them over a cached picture of everything else (the
  axes, ticks and labels must then not depend on the state); if it returns ``None``,
  every update redraws the whole figure.
  It uses no ``pyplot`` (nothing is shown or kept by accident) and no randomness except
  a fixed seed inside, so :func:`render` ``(plot, **state)`` is a pure function of the
  state, imported and tested without a kernel. Building the figure once and only
  updating data keeps every update fast (text layout is what costs in matplotlib);
- the **controls**: core ipywidgets (sliders, toggle buttons, dropdowns) whose names are
  the keyword arguments of ``update``.

``interactive_figure(plot, controls, title=…)`` wires them: every change of a control
calls ``update`` and redraws the one figure into an ``ipywidgets.Image``. Only core
ipywidgets are used (no front-end code), so the figure is live in JupyterLab,
Notebook 7, Binder and Colab (ipywidgets 7.6+ and 8). An exception in ``update`` never
reaches the reader: a Japanese message line says what failed and the last picture stays.

Where there is no kernel the figure degrades to a picture. The object's mime bundle
holds, next to the live widget view, an ``image/png`` snapshot of the default state and a
fixed ``text/plain`` line (no object ids, so strict nbval can compare it):

- ``scripts/run_notebooks.py`` drops the widget view (its model id is random) from the
  stored outputs, so a notebook opened without running shows the snapshot;
- ``_config.yml`` (``nb_mime_priority_overrides``) ranks widget views below PNG for the
  HTML book, so the book shows the snapshot even if a widget view were stored;
- the notebook cell is tagged ``widget`` and its metadata holds the figure caption
  (``mystnb: figure: caption``), ending with :data:`LIVE_HINT`, the line that says where to
  move the figure live. ``tests/test_notebooks.py`` enforces both.

A chapter's live figure takes a few lines::

    def rotation_plot():
        fig, ax = new_figure((6, 3))  # from attnlab.plotting
        arrow, = ax.plot([0, 1], [0, 0])
        ax.set(xlim=(-1, 1), ylim=(-1, 1), title="RoPE の回転")

        def update(pos=0, d_head=8):
            angle = pos * theta(d_head)[0]
            arrow.set_data([0, np.cos(angle)], [0, np.sin(angle)])
            return [arrow]  # optional: only the arrow changes

        return fig, update

    def rotation_widget():
        return interactive_figure(rotation_plot, {
            "pos": widgets.SelectionSlider(options=list(range(16)), value=0,
                                           description="位置"),
            "d_head": widgets.ToggleButtons(options=[4, 8, 16], value=8,
                                            description="d_head"),
        }, title="RoPE の回転")

Give every control a small discrete domain (``options``, a bool, or an int/float slider
with a step): the tests render every combination of the domains
(:meth:`InteractiveFigure.states`), and ``benchmarks/widget_render.py`` times them.
"""

from __future__ import annotations

import base64
import inspect
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from attnlab.experiments.softmax_sharpness import (
    SHARPNESS_D_K,
    SHARPNESS_N_KEYS,
    SHARPNESS_TRIALS,
    sharpness_samples,
)
from attnlab.plotting import (
    BLACK,
    BLUE,
    GREY,
    VERMILLION,
    canvas_to_png,
    figure_to_png,
    new_figure,
)

#: The line every widget caption ends with, in the book where no kernel runs.
LIVE_HINT = (
    "（この図は既定の状態の画像です。ページ上部のロケットのボタンから Binder か Colab で"
    "開いてセルを実行すると、操作して動かせます。）"
)

#: Key put in the output metadata of a live figure, so tests can find widget outputs.
OUTPUT_MARKER = "attnlab_widget"

#: ``plot() -> (fig, update)``: see the module docstring.
Plot = Callable[[], tuple[Figure, Callable[..., None]]]


def render(plot: Plot, **state: Any) -> Figure:
    """The figure of ``plot`` for one state: a pure function of the state.

    Parameters
    ----------
    plot : callable
        ``plot() -> (fig, update)``.
    **state
        Keyword arguments for ``update``.

    Returns
    -------
    Figure

    Taught in chapter 01 (アテンションの復習).
    """
    fig, update = plot()
    update(**state)
    return fig


def control_values(control: widgets.Widget) -> tuple:
    """Every value a control can take (its discrete domain).

    Selection widgets give their option values, a bool-valued control gives
    ``(False, True)``, an int or float slider gives ``min, min + step, …, max``.

    Raises
    ------
    ValueError
        For a control without a finite discrete domain.

    Taught in chapter 01 (アテンションの復習).
    """
    if hasattr(control, "options"):
        options = control.options
        if isinstance(options, Mapping):
            return tuple(options.values())
        return tuple(
            item[1] if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
            else item
            for item in options
        )
    if isinstance(getattr(control, "value", None), bool):
        return (False, True)
    if all(hasattr(control, name) for name in ("min", "max", "step")):
        low, high, step = control.min, control.max, control.step
        if step and step > 0:
            if isinstance(control.value, int):
                return tuple(range(low, high + 1, step))
            count = int(round((high - low) / step)) + 1
            return tuple(float(low + i * step) for i in range(count))
    raise ValueError(
        f"コントロール {type(control).__name__} には離散の値域がありません: "
        "options を持つウィジェットか、step のあるスライダーを使ってください"
    )


class _Blitter:
    """Redraw only the artists an update changes, over a cached background."""

    def __init__(self, fig: Figure, artists) -> None:
        self.fig = fig
        self.artists = sorted(artists, key=lambda artist: artist.get_zorder())
        self.ids = {id(artist) for artist in self.artists}
        for artist in self.artists:
            artist.set_animated(True)  # left out of a full draw
        fig.canvas.draw()
        self.background = fig.canvas.copy_from_bbox(fig.bbox)
        for artist in self.artists:
            artist.set_animated(False)  # the snapshot and render() draw everything

    def covers(self, changed) -> bool:
        return changed is not None and {id(artist) for artist in changed} <= self.ids

    def png(self) -> bytes:
        canvas = self.fig.canvas
        canvas.restore_region(self.background)
        for artist in self.artists:
            artist.set_animated(True)
            self.fig.draw_artist(artist)
            artist.set_animated(False)
        return canvas_to_png(canvas)


class InteractiveFigure:
    """Controls wired to a plot; see the module docstring.

    Attributes
    ----------
    plot : callable
        ``plot() -> (fig, update)``.
    controls : dict of str to ipywidgets.Widget
        The controls, by the name of the ``update`` argument they set.
    title : str
        Short Japanese name of the figure, used in the text representation.
    default_state : dict
        The controls' values when the figure was made.
    snapshot : bytes
        PNG of the default state: what the book shows.
    widget : ipywidgets.VBox
        The controls above the rendered image, and a message line.

    Taught in chapter 01 (アテンションの復習).
    """

    def __init__(
        self, plot: Plot, controls: Mapping[str, widgets.Widget], title: str
    ) -> None:
        self.plot = plot
        self.controls = dict(controls)
        self.title = title
        self._fig, self._update = plot()
        parameters = inspect.signature(self._update).parameters
        for name in self.controls:
            if name not in parameters:
                raise ValueError(
                    f"controls のキー {name!r} は update の引数にありません: "
                    f"update の引数は {list(parameters)} です"
                )
        self._silent = False
        for control in self.controls.values():
            if hasattr(control, "style") and hasattr(control.style, "description_width"):
                control.style.description_width = "initial"
            control.observe(self._on_change, names="value")
        self.default_state = self.state()
        changed = self._update(**self.default_state)
        self.snapshot = figure_to_png(self._fig)
        self._blit = _Blitter(self._fig, changed) if changed is not None else None
        self._image = widgets.Image(value=self.snapshot, format="png")
        self._message = widgets.HTML(value="")
        self.widget = widgets.VBox([
            widgets.HBox(list(self.controls.values()),
                         layout=widgets.Layout(flex_flow="row wrap")),
            self._image,
            self._message,
        ])

    def __repr__(self) -> str:
        return f"ライブ図「{self.title}」（操作: {', '.join(self.controls)}）"

    def state(self) -> dict[str, Any]:
        """The current value of every control, by name."""
        return {name: control.value for name, control in self.controls.items()}

    def states(self) -> Iterator[dict[str, Any]]:
        """Every combination of the controls' discrete domains."""
        names = list(self.controls)
        domains = [control_values(self.controls[name]) for name in names]
        for values in itertools.product(*domains):
            yield dict(zip(names, values, strict=True))

    def refresh(self) -> bool:
        """Draw the current state into the image; return whether it worked.

        A failure never propagates: the message line says, in Japanese, what went wrong
        and the previous picture stays.
        """
        try:
            changed = self._update(**self.state())
            if self._blit is not None and self._blit.covers(changed):
                png = self._blit.png()
            else:
                png = figure_to_png(self._fig)
        except Exception as err:  # a widget never shows a traceback
            self._message.value = (
                f"<span style='color:{VERMILLION}'>この組み合わせでは図を描けませんでした"
                f"（{type(err).__name__}: {err}）</span>"
            )
            return False
        self._image.value = png
        self._message.value = ""
        return True

    def set_state(self, **values: Any) -> bool:
        """Set several controls at once and redraw once; return whether it worked."""
        unknown = [name for name in values if name not in self.controls]
        if unknown:
            raise ValueError(f"コントロール {unknown} はありません: {list(self.controls)}")
        self._silent = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._silent = False
        return self.refresh()

    @property
    def image_png(self) -> bytes:
        """The PNG bytes currently shown."""
        return bytes(self._image.value)

    @property
    def message(self) -> str:
        """The message line currently shown (empty when the last update worked)."""
        return self._message.value

    def _on_change(self, change: dict) -> None:
        if not self._silent:
            self.refresh()

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = {
            "text/plain": repr(self),
            "image/png": base64.b64encode(self.snapshot).decode("ascii"),
            "application/vnd.jupyter.widget-view+json": {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget.model_id,
            },
        }
        return data, {OUTPUT_MARKER: True}


def interactive_figure(
    plot: Plot, controls: Mapping[str, widgets.Widget], *, title: str
) -> InteractiveFigure:
    """Wire ``controls`` to ``plot``; see the module docstring for the contract.

    Parameters
    ----------
    plot : callable
        ``plot() -> (fig, update)``; ``update`` takes one keyword argument per control.
    controls : mapping of str to ipywidgets.Widget
        Control per ``update`` argument; each must have a finite discrete domain.
    title : str
        Short Japanese name of the figure.

    Returns
    -------
    InteractiveFigure
        Displayed live in Jupyter, as a PNG of the default state elsewhere.

    Taught in chapter 01 (アテンションの復習).
    """
    return InteractiveFigure(plot, controls, title)


# --- chapter 01: how the softmax sharpens without 1/√d_k --------------------------------

_BINS = np.linspace(0.0, 1.0, 21)  # histogram bins of the largest weight


def softmax_sharpness_plot() -> tuple[Figure, Callable[..., None]]:
    """One query's weights (left) and the largest weight over many queries (right).

    Returns
    -------
    fig : Figure
    update : callable
        ``update(d_k=256, scaled=False, n_keys=16)`` draws that state.

    Taught in chapter 01 (アテンションの復習).
    """
    fig, (ax_one, ax_max) = new_figure(
        (9.0, 3.4), ncols=2, margins={"left": 0.07, "bottom": 0.16, "top": 0.8})
    heading = fig.suptitle("")
    stems = LineCollection([])
    ax_one.add_collection(stems)
    uniform_one = ax_one.axhline(0.0, color=GREY, linestyle=":", label="一様な重み")
    # ylim above 1 leaves headroom for the legend, so a weight of 1 never hides under it
    ax_one.set(xlim=(0, 1), ylim=(0, 1.22), xticks=[], yticks=[0, 0.5, 1],
               xlabel="キー（左から順に）", ylabel="重み", title="1 つのクエリの重み")
    legend_one = ax_one.legend(loc="upper left", fontsize=8)

    bars = ax_max.bar(_BINS[:-1], np.zeros(len(_BINS) - 1), width=np.diff(_BINS),
                      align="edge")
    mean_line = ax_max.axvline(0.0, color=BLACK, linestyle="--", label="平均")
    uniform_max = ax_max.axvline(0.0, color=GREY, linestyle=":", label="一様な重み")
    ax_max.set(xlim=(0, 1), ylim=(0, 1.22), xticks=[0, 0.5, 1], yticks=[0, 0.5, 1],
               xlabel="最大の重み", ylabel="クエリの割合",
               title=f"{SHARPNESS_TRIALS} 個のクエリの最大の重み")
    legend_max = ax_max.legend(loc="upper left", fontsize=8, ncols=2)
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


def softmax_sharpness_widget() -> InteractiveFigure:
    """Live figure of chapter 01: d_k, the scaling and the number of keys.

    Taught in chapter 01 (アテンションの復習).
    """
    controls = {
        "d_k": widgets.SelectionSlider(options=list(SHARPNESS_D_K), value=256,
                                       description="d_k"),
        "scaled": widgets.ToggleButtons(options=[("割らない", False), ("√d_k で割る", True)],
                                        value=False, description="スケーリング",
                                        style={"button_width": "auto"}),
        "n_keys": widgets.ToggleButtons(options=list(SHARPNESS_N_KEYS), value=16,
                                        description="キーの数",
                                        style={"button_width": "auto"}),
    }
    return interactive_figure(softmax_sharpness_plot, controls, title="softmax の鋭さ")


#: Every live figure of the book, by name: the tests render every state of each, and
#: ``benchmarks/widget_render.py`` times them. A chapter adds its widget here.
WIDGETS: dict[str, Callable[[], InteractiveFigure]] = {
    "softmax_sharpness": softmax_sharpness_widget,
}
