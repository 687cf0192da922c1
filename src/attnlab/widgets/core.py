"""The machinery of live figures: ipywidgets controls wired to a pure plot.

A live figure has two parts:

- a **plot**: a function ``plot() -> (fig, update)`` that builds a
  ``matplotlib.figure.Figure`` with its axes, labels and empty artists, and returns it
  with ``update(**state)``, which sets the artists' data for one state of the controls.
  ``update`` may return the artists it changes: if it does, and they are always the
  same, a live update redraws only them over a cached picture of everything else (the
  axes, ticks and labels must then not depend on the state); if it returns ``None``,
  every update redraws the whole figure. It uses no ``pyplot`` and no randomness except
  a fixed seed inside, so :func:`render` ``(plot, **state)`` is a pure function of the
  state, tested without a kernel;
- the **controls**: core ipywidgets (sliders, toggle buttons, dropdowns), each with a
  small discrete domain, whose names are the keyword arguments of ``update``.

:func:`interactive_figure` wires them: every change of a control calls ``update`` and
redraws the one figure into an ``ipywidgets.Image``. Only core ipywidgets are used, so
the figure is live in JupyterLab, Notebook 7, Binder and Colab (ipywidgets 7.6+ and 8).
An exception in ``update`` never reaches the reader: a Japanese message line says what
failed and the last picture stays. Where there is no kernel (the book, a notebook opened
without running) the figure is its ``image/png`` snapshot of the default state.
"""

from __future__ import annotations

import base64
import functools
import html
import inspect
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import ipywidgets as widgets
from matplotlib.figure import Figure

from attnlab.plotting import VERMILLION, book_style, canvas_to_png, figure_to_png

#: The note on live figures, said once per page: the book shows it above the page's first
#: live figure (``attnlab.live_book``). In the book a figure switches between pictures
#: drawn when the book was built; with a kernel it is drawn live.
LIVE_NOTE = (
    "ボタンやスライダーのある図は、ページの上でも切り替えられます。その場で描き直すには、"
    "ページ上部のロケットのボタンから Binder か Colab で開いてセルを実行します。"
)
#: The same note in parentheses, as captions of live figures used to end. The book removes
#: it from captions (it says :data:`LIVE_NOTE` once per page); a caption need not end
#: with it.
LIVE_HINT = (
    "（図の上のボタンやスライダーで、ページの上でも図を切り替えられます。その場で描き直すには、"
    "ページ上部のロケットのボタンから Binder か Colab で開いてセルを実行します。）"
)

#: Mime type of the small JSON a live figure adds to its display: its registry name,
#: controls and default state. The book's build (``attnlab.live_book``) renders every
#: state from it; everything else ignores it and shows the PNG snapshot.
LIVE_MIME = "application/vnd.attnlab.live-figure+json"

#: Key put in the output metadata of a live figure, so tests can find widget outputs.
OUTPUT_MARKER = "attnlab_widget"

#: ``plot() -> (fig, update)``: see the module docstring.
Plot = Callable[[], tuple[Figure, Callable[..., Any]]]

#: Attribute that :func:`register_widget` sets on a factory: the figure's registry name.
WIDGET_NAME_ATTRIBUTE = "attnlab_widget_name"

_Factory = TypeVar("_Factory", bound=Callable[[], "InteractiveFigure"])


def register_widget(name: str) -> Callable[[_Factory], _Factory]:
    """Mark a live figure's factory with its registry name.

    ``attnlab/widgets/__init__.py`` imports each marked factory by name and lists it in
    :data:`attnlab.widgets.WIDGETS` (``tests/test_registries.py`` names one left out):
    the tests render each, ``benchmarks/widget_render.py`` times each, and the book's
    build draws every state of each.

    Parameters
    ----------
    name : str
        Short registry name, unique across the package, e.g. ``"softmax_sharpness"``.

    Not taught: machinery for writing a live figure (widgets/README.md).
    """

    def mark(factory: _Factory) -> _Factory:
        @functools.wraps(factory)
        def make(*args, **kwargs):
            figure = factory(*args, **kwargs)
            if not args and not kwargs:  # the registry can make it again, state by state
                figure.name = name
            return figure

        setattr(make, WIDGET_NAME_ATTRIBUTE, name)
        return make  # type: ignore[return-value]

    return mark


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
        Built in the book's figure style (``attnlab.plotting.book_style``).

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    with book_style():
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

    Not taught: machinery for writing a live figure (widgets/README.md).
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


def control_kind(control: widgets.Widget) -> str:
    """The HTML control the book shows for ``control``: slider, toggle, dropdown or checkbox.

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    if isinstance(control, widgets.ToggleButtons | widgets.RadioButtons):
        return "toggle"
    if isinstance(control, widgets.Dropdown | widgets.Select):
        return "dropdown"
    if isinstance(getattr(control, "value", None), bool):
        return "checkbox"
    return "slider"


def control_label(control: widgets.Widget) -> str:
    """A control's label as written (``d_k``), not as typeset for the reader.

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    return getattr(control, "attnlab_label", None) or getattr(control, "description", "")


def control_labels(control: widgets.Widget) -> tuple[str, ...]:
    """The text shown for each value of ``control``, in the order of :func:`control_values`.

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    labels = getattr(control, "attnlab_labels", None)  # plain, as written (toggle, …)
    if labels is None:
        labels = getattr(control, "_options_labels", None)
    if labels is not None:
        return tuple(str(label) for label in labels)
    values = control_values(control)
    if isinstance(getattr(control, "value", None), bool):
        return tuple("オン" if value else "オフ" for value in values)
    return tuple(f"{value:g}" if isinstance(value, float) else str(value) for value in values)


class _Blitter:
    """Redraw only the artists an update changes, over a cached background."""

    def __init__(self, fig: Figure, artists) -> None:
        self.fig = fig
        self.artists = sorted(artists, key=lambda artist: artist.get_zorder())
        self.ids = {id(artist) for artist in self.artists}
        for artist in self.artists:
            artist.set_animated(True)  # left out of a full draw
        with book_style():
            fig.canvas.draw()
        self.background = fig.canvas.copy_from_bbox(fig.bbox)
        for artist in self.artists:
            artist.set_animated(False)  # the snapshot and render() draw everything

    def covers(self, changed) -> bool:
        return changed is not None and {id(artist) for artist in changed} <= self.ids

    def png(self) -> bytes:
        canvas = self.fig.canvas
        canvas.restore_region(self.background)
        with book_style():
            for artist in self.artists:
                artist.set_animated(True)
                self.fig.draw_artist(artist)
                artist.set_animated(False)
        return canvas_to_png(canvas)


class InteractiveFigure:
    """Controls wired to a plot, shown live in Jupyter and as a PNG elsewhere.

    Its mime bundle holds the live widget view, an ``image/png`` snapshot of the default
    state and a fixed ``text/plain`` line (no object ids, so nbval can compare it).

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

    Not taught: machinery for writing a live figure (widgets/README.md).
    """

    def __init__(
        self, plot: Plot, controls: Mapping[str, widgets.Widget], title: str
    ) -> None:
        self.plot = plot
        self.controls = dict(controls)
        self.title = title
        self.name: str | None = None  # the registry name, set by a registered factory
        with book_style():  # every artist in the book's style, whatever the kernel set
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
        with book_style():
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
            with book_style():
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

    def set_scale(self, scale: float) -> bool:
        """Draw the live picture at ``scale`` times the figure's resolution from now on,
        and redraw the current state; return whether it worked.

        The book's pictures of the states are drawn at ``attnlab.plotting.PNG_SCALE``; at
        that scale a live update can be compared with the book's picture of the same state
        (``tests/test_widgets.py`` does, reading the pictures the build drew).
        """
        if not scale > 0:
            raise ValueError(f"scale は正の数にしてください: {scale!r}")
        self._fig.set_dpi(self._fig.dpi * scale)
        if self._blit is not None:  # the cached background, again at the new resolution
            self._blit = _Blitter(self._fig, self._blit.artists)
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

    def describe(self) -> dict[str, Any] | None:
        """The figure as the book's build needs it (the JSON of :data:`LIVE_MIME`).

        Its registry ``figure`` name and ``title``; per control, in order, its ``name``,
        ``label`` (the description), ``kind`` (slider, toggle, dropdown or checkbox), the
        ``labels`` of its values and the index of its current value. None for a figure made
        other than by its registered factory without arguments (the build could not make
        it again).
        """
        if self.name is None:
            return None
        return {
            "figure": self.name,
            "title": self.title,
            "controls": [
                {"name": name, "label": control_label(control) or name,
                 "kind": control_kind(control), "labels": list(control_labels(control)),
                 "default": control_values(control).index(control.value)}
                for name, control in self.controls.items()
            ],
        }

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
        description = self.describe()
        if description is not None:
            data[LIVE_MIME] = description
        return data, {OUTPUT_MARKER: True}


def interactive_figure(
    plot: Plot, controls: Mapping[str, widgets.Widget], *, title: str
) -> InteractiveFigure:
    """Wire ``controls`` to ``plot``: a live figure.

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

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    return InteractiveFigure(plot, controls, title)


# --- the controls, built one way for every figure ---------------------------------------
# The three kinds the book renders (control_kind), each over a small discrete domain:
# ``options`` are values, or (label, value) pairs where the label should differ.
#
# A label names its symbols as the code does (「d_k」「√d_k で割る」「d_model」): that plain
# label is what the book's build reads (describe) and what alt texts and the prose quote.
# What a reader sees is typeset: the description as HTML (<i>d</i><sub>k</sub>: ipywidgets 8
# with description_allow_html, JupyterLab, Notebook 7, Colab), the book's controls through
# the same symbols_html (attnlab.live_book); a button's or a menu's value is plain text in
# ipywidgets, so there the subscript is a Unicode one where every letter has one
# (「√dₖ で割る」) and the code's name otherwise.

#: A symbol with a subscript in a control's label or value: d_k, d_model, W_O, √d_k.
SUBSCRIPT = re.compile(r"\b([A-Za-z])_(\{[^}]+\}|[A-Za-z0-9]+)")

#: The subscript letters and digits Unicode has (no b, c, d, f, g, q, w, y, z).
_UNICODE_SUBSCRIPTS = dict(zip("0123456789aehijklmnoprstuvx",
                               "₀₁₂₃₄₅₆₇₈₉ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ", strict=True))


def symbols_html(text: str) -> str:
    """``text`` escaped for HTML, its symbols with subscripts written as the book writes
    them: ``d_k`` becomes an italic *d* with a subscript k (``<i>d</i><sub>k</sub>``).

    Not taught: machinery of the book's build and of the live figures' labels.
    """
    out, end = [], 0
    for match in SUBSCRIPT.finditer(text):
        out.append(html.escape(text[end:match.start()]))
        letter, sub = match.group(1), match.group(2).strip("{}")
        out.append(f"<i>{html.escape(letter)}</i><sub>{html.escape(sub)}</sub>")
        end = match.end()
    out.append(html.escape(text[end:]))
    return "".join(out)


def symbols_unicode(text: str) -> str:
    """``text`` for a place that shows plain text only (a button or a menu of ipywidgets):
    a symbol's subscript in Unicode subscripts where every letter has one (``√d_k`` →
    ``√dₖ``), the code's name otherwise (``d_model``: Unicode has no subscript d).

    Not taught: machinery of the live figures' labels.
    """
    def sub(match: re.Match) -> str:
        letters = match.group(2).strip("{}")
        if all(c in _UNICODE_SUBSCRIPTS for c in letters):
            return match.group(1) + "".join(_UNICODE_SUBSCRIPTS[c] for c in letters)
        return match.group(0)

    return SUBSCRIPT.sub(sub, text)


def _is_pair(option: Any) -> bool:
    return isinstance(option, tuple) and len(option) == 2 and isinstance(option[0], str)


def _typeset(make, options, value: Any, description: str, **kwargs) -> widgets.Widget:
    """``make(options=…, value=…, description=…)`` with its symbols typeset (the comment
    above); the plain labels stay on the control for :func:`control_labels` and
    :meth:`InteractiveFigure.describe`."""
    options = list(options)
    shown = [(symbols_unicode(o[0]), o[1]) if _is_pair(o) else o for o in options]
    control = make(options=shown, value=value, description=symbols_html(description),
                   description_allow_html=True, **kwargs)
    control.attnlab_label = description
    control.attnlab_labels = tuple(
        o[0] if _is_pair(o) else str(label)
        for o, label in zip(options, control._options_labels, strict=True))
    return control


def toggle(options, value: Any, description: str) -> widgets.ToggleButtons:
    """Toggle buttons over ``options``, each as wide as its label.

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    return _typeset(widgets.ToggleButtons, options, value, description,
                    style={"button_width": "auto"})


def slider(options, value: Any, description: str) -> widgets.SelectionSlider:
    """A slider that stops at each of ``options`` (moved with the arrow keys in the book).

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    return _typeset(widgets.SelectionSlider, options, value, description)


def dropdown(options, value: Any, description: str) -> widgets.Dropdown:
    """A drop-down menu of ``options``, for names too long for buttons.

    Not taught: machinery for writing a live figure (widgets/README.md).
    """
    return _typeset(widgets.Dropdown, options, value, description)
