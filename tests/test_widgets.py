"""attnlab.widgets: every live figure draws in every state tried; the static fallback is stable.

States tried per figure: each control moved alone through its whole domain, starting from
the default state (as a reader does), and, for a figure of at most
``ALL_COMBINATIONS_UP_TO`` states, every combination of the controls' domains. A larger
figure (four controls of six values are 1296 states) is tried one control at a time: the
combinations grow as a product, the time to render them with it. Each state is drawn
once, live, at the book's resolution (``PNG_SCALE``), and compared with the book's picture of
that state: the pure render the build draws (``scripts/live_states.py``) into its cache of
drawn states (``attnlab.live_book.CACHE``), keyed by the code that draws it. ``make test``
draws every state there first, on every core, so this test draws no pure render and the
build draws none again; run alone, it draws the light pictures it needs into the same cache
(``attnlab.live_book.state_light_png``: the build draws a state's dark one with it later).
The live side is drawn every time: a cached picture never stands in for it.
"""

import base64
import io
import re
import warnings

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from PIL import Image  # noqa: E402

from attnlab import live_book  # noqa: E402
from attnlab.plotting import (  # noqa: E402
    FIGURE_WIDTH,
    MIN_FONT_SIZE,
    PNG_SCALE,
    figure_to_png,
    new_figure,
    smallest_font_size,
)
from attnlab.widgets import (  # noqa: E402
    LIVE_HINT,
    LIVE_NOTE,
    OUTPUT_MARKER,
    WIDGETS,
    control_values,
    interactive_figure,
    register_widget,
    render,
)
from scripts.book import ROOT  # noqa: E402

WIDGET_NAMES = sorted(WIDGETS)

#: Figures with at most this many states are tried in every combination of their controls.
ALL_COMBINATIONS_UP_TO = 60


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA")).astype(int)


def _differing_fraction(png_a: bytes, png_b: bytes) -> float:
    a, b = _pixels(png_a), _pixels(png_b)
    assert a.shape == b.shape
    return float((np.abs(a - b).max(axis=-1) > 0).mean())


@pytest.fixture(scope="module", params=WIDGET_NAMES)
def figure(request):
    return WIDGETS[request.param]()


def _key(state: dict) -> tuple:
    return tuple(sorted(state.items()))


class _Pass:
    """Checks each state a figure shows once: drawn live without a message or warning,
    the controls say that state, and the live picture matches the book's picture of it."""

    def __init__(self, figure):
        self.figure = figure
        self.numbers = {_key(state): number for number, state in enumerate(figure.states())}
        self.source = live_book._source_key()  # the code that draws the book's pictures
        self.pictures: dict[tuple, bytes] = {}

    def check_shown(self, state: dict) -> bytes:
        """The live picture of ``state``, which the figure now shows, checked once."""
        figure = self.figure
        assert figure.message == "", (state, figure.message)
        assert figure.state() == state
        key = _key(state)
        if key not in self.pictures:
            # the pure render at PNG_SCALE, as the book shows it: read from the build's
            # cache, or drawn into it when the build has not drawn it yet
            book = live_book.state_light_png(figure, state, live_book.state_key(
                figure.name, self.numbers[key], self.source))
            # redrawing only the changed artists differs from a full draw at most where a
            # redrawn artist now covers an axis spine
            differing = _differing_fraction(figure.image_png, book)
            assert differing < 0.01, (
                f"{figure.name} {state}: ライブの更新が本の画像と {differing:.1%} の画素で違います")
            self.pictures[key] = figure.image_png
        return self.pictures[key]


@pytest.mark.slow
@pytest.mark.parametrize("widget", WIDGET_NAMES)
def test_every_state_tried_draws_and_matches_the_books_picture(widget, monkeypatch):
    monkeypatch.chdir(ROOT)  # the build's cache is _build/.attnlab-live-cache of the book
    figure = WIDGETS[widget]()
    assert figure.set_scale(PNG_SCALE)  # the book's resolution: its pictures compare
    check = _Pass(figure)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. a glyph missing from the Japanese font
        for name, control in figure.controls.items():
            assert figure.set_state(**figure.default_state)
            pictures = set()
            for value in control_values(control):
                control.value = value  # what the reader does: the observer redraws
                pictures.add(check.check_shown({**figure.default_state, name: value}))
            assert len(pictures) == len(control_values(control)), name

        states = list(figure.states())
        assert len(states) > 1
        if len(states) <= ALL_COMBINATIONS_UP_TO:
            for state in states:
                if _key(state) not in check.pictures:
                    assert figure.set_state(**state), (state, figure.message)
                    check.check_shown(state)
            assert len(set(check.pictures.values())) == len(states), \
                "二つの状態が同じ図になっています"


def test_the_live_picture_at_its_own_resolution_comes_back_to_the_snapshot(figure):
    """What a reader's kernel shows (resolution 1): every control at its last value, then
    back at the default state, the picture is the snapshot's (up to the blitted spines)."""
    last = {name: control_values(control)[-1] for name, control in figure.controls.items()}
    assert figure.set_state(**last) and figure.image_png != figure.snapshot
    assert figure.set_state(**figure.default_state)
    assert _differing_fraction(figure.image_png, figure.snapshot) < 0.01


def test_set_scale_draws_the_live_picture_at_the_books_resolution(figure):
    live = WIDGETS[figure.name]()
    one = Image.open(io.BytesIO(live.image_png)).size
    assert live.set_scale(PNG_SCALE)
    assert Image.open(io.BytesIO(live.image_png)).size == (PNG_SCALE * one[0], PNG_SCALE * one[1])
    with pytest.raises(ValueError, match="scale は正の数"):
        live.set_scale(0)


def test_snapshot_is_the_default_state_and_deterministic(figure):
    first = figure_to_png(render(figure.plot, **figure.default_state))
    second = figure_to_png(render(figure.plot, **figure.default_state))
    assert first == second == figure.snapshot


def test_mime_bundle_has_snapshot_stable_text_and_live_view(figure):
    data, metadata = figure._repr_mimebundle_()
    assert base64.b64decode(data["image/png"]) == figure.snapshot
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == \
        figure.widget.model_id
    assert metadata == {OUTPUT_MARKER: True}
    text = data["text/plain"]
    assert text == repr(figure) and figure.title in text
    assert not re.search(r"0x[0-9a-f]+|[0-9a-f]{32}", text), "id がテキストに出ています"
    assert figure.widget.model_id not in text


def test_render_does_not_touch_pyplot(figure):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    render(figure.plot, **figure.default_state)
    assert plt.get_fignums() == before


def test_the_same_widget_made_twice_prints_the_same_text():
    for make in WIDGETS.values():
        assert make()._repr_mimebundle_()[0]["text/plain"] == \
            make()._repr_mimebundle_()[0]["text/plain"]


def test_register_widget_only_marks_the_factory():
    @register_widget("試験")
    def make():
        raise AssertionError("registration must not call the factory")

    assert "試験" not in WIDGETS and callable(make)


def test_live_hint_names_binder_and_colab():
    assert "Binder" in LIVE_HINT and "Colab" in LIVE_HINT
    assert "Binder" in LIVE_NOTE and "Colab" in LIVE_NOTE


JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


def test_every_live_figure_fits_the_books_column_with_readable_horizontal_text(figure):
    fig = render(figure.plot, **figure.default_state)
    assert fig.get_size_inches()[0] <= FIGURE_WIDTH, "本の列の幅に収める"
    assert smallest_font_size(fig) >= MIN_FONT_SIZE
    turned = [t.get_text() for t in fig.findobj(Text)
              if t.get_visible() and JAPANESE.search(t.get_text()) and t.get_rotation() != 0]
    assert turned == [], "日本語のラベルは横書きに（attnlab.plotting.set_ylabel_horizontal）"


def test_a_live_figure_looks_the_same_whatever_the_process_set(figure):
    with matplotlib.rc_context({"font.size": 20, "axes.titlesize": 30, "legend.fontsize": 5}):
        odd = figure_to_png(render(figure.plot, **figure.default_state))
    assert odd == figure_to_png(render(figure.plot, **figure.default_state))


def _plot_that_fails_for_negative():
    fig, ax = new_figure((3, 2))
    (line,) = ax.plot([0, 1], [0, 0])

    def update(x: int = 1):
        if x < 0:
            raise ValueError(f"x={x} は負です")
        line.set_ydata([0, x])

    return fig, update


def test_a_failing_update_shows_a_message_and_keeps_the_picture():
    figure = interactive_figure(
        _plot_that_fails_for_negative,
        {"x": widgets.SelectionSlider(options=[-1, 1, 2], value=1, description="x")},
        title="試験",
    )
    before = figure.image_png
    figure.controls["x"].value = -1  # must not raise
    assert "描けませんでした" in figure.message and "x=-1 は負です" in figure.message
    assert "Traceback" not in figure.message
    assert figure.image_png == before
    figure.controls["x"].value = 2
    assert figure.message == "" and figure.image_png != before


def test_a_control_without_an_update_argument_is_rejected():
    with pytest.raises(ValueError, match="'y' は update の引数にありません"):
        interactive_figure(
            _plot_that_fails_for_negative,
            {"y": widgets.Checkbox(value=True)},
            title="試験",
        )


def test_control_values_lists_each_discrete_domain():
    assert control_values(widgets.SelectionSlider(options=[4, 16, 64])) == (4, 16, 64)
    assert control_values(
        widgets.ToggleButtons(options=[("割らない", False), ("割る", True)])
    ) == (False, True)
    assert control_values(widgets.Checkbox(value=False)) == (False, True)
    assert control_values(widgets.IntSlider(min=0, max=10, step=5)) == (0, 5, 10)
    assert control_values(widgets.FloatSlider(min=0.0, max=1.0, step=0.25)) == (
        0.0, 0.25, 0.5, 0.75, 1.0)
    with pytest.raises(ValueError, match="離散の値域がありません"):
        control_values(widgets.Text(value="a"))


def test_the_control_helpers_build_the_three_kinds_the_book_renders():
    from attnlab.widgets.core import control_kind, control_labels, dropdown, slider, toggle

    buttons = toggle([("割らない", False), ("割る", True)], True, "スケーリング")
    assert control_kind(buttons) == "toggle" and buttons.style.button_width == "auto"
    assert control_values(buttons) == (False, True) and buttons.value is True
    assert control_labels(buttons) == ("割らない", "割る")
    stops = slider(range(0, 16, 4), 8, "位置")
    assert control_kind(stops) == "slider" and control_values(stops) == (0, 4, 8, 12)
    menu = dropdown({"Llama 2 7B": 1, "Mistral 7B": 2}, "Mistral 7B", "モデル")  # the keys
    assert control_kind(menu) == "dropdown" and menu.value == "Mistral 7B"
    assert [c.description for c in (buttons, stops, menu)] == ["スケーリング", "位置", "モデル"]
