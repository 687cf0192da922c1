"""attnlab.widgets: every state of every live figure draws; the static fallback is stable."""

import base64
import io
import re
import warnings

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from attnlab.plotting import figure_to_png, new_figure  # noqa: E402
from attnlab.widgets import (  # noqa: E402
    LIVE_HINT,
    OUTPUT_MARKER,
    WIDGETS,
    control_values,
    interactive_figure,
    render,
    softmax_sharpness_plot,
)

WIDGET_NAMES = sorted(WIDGETS)


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA")).astype(int)


@pytest.fixture(scope="module", params=WIDGET_NAMES)
def figure(request):
    return WIDGETS[request.param]()


def test_every_state_of_every_widget_updates_without_error_or_warning(figure):
    states = list(figure.states())
    assert len(states) > 1
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. a glyph missing from the Japanese font
        for state in states:
            assert figure.set_state(**state), (state, figure.message)
            assert figure.message == ""
            assert figure.state() == state
            seen.add(figure.image_png)
    assert len(seen) == len(states), "二つの状態が同じ図になっています"


def _differing_fraction(png_a: bytes, png_b: bytes) -> float:
    a, b = _pixels(png_a), _pixels(png_b)
    assert a.shape == b.shape
    return float((np.abs(a - b).max(axis=-1) > 0).mean())


def test_moving_one_control_redraws_that_state(figure):
    for name, control in figure.controls.items():
        figure.set_state(**figure.default_state)
        pictures = set()
        for value in control_values(control):
            control.value = value  # what the reader does: the observer redraws
            expected = {**figure.default_state, name: value}
            assert figure.message == "" and figure.state() == expected
            pure = figure_to_png(render(figure.plot, **expected))
            assert _differing_fraction(figure.image_png, pure) < 0.01, expected
            pictures.add(figure.image_png)
        assert len(pictures) == len(control_values(control)), name
    figure.set_state(**figure.default_state)


def test_live_update_matches_the_pure_render(figure):
    for state in figure.states():
        figure.set_state(**state)
        pure = figure_to_png(render(figure.plot, **state))
        # redrawing only the changed artists differs from a full draw at most where a
        # redrawn artist now covers an axis spine
        assert _differing_fraction(figure.image_png, pure) < 0.01, state


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


def test_the_same_widget_made_twice_prints_the_same_text():
    for make in WIDGETS.values():
        assert make()._repr_mimebundle_()[0]["text/plain"] == \
            make()._repr_mimebundle_()[0]["text/plain"]


def test_live_hint_names_binder_and_colab():
    assert "Binder" in LIVE_HINT and "Colab" in LIVE_HINT


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


def test_render_does_not_touch_pyplot():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    render(softmax_sharpness_plot, d_k=4, scaled=True, n_keys=4)
    assert plt.get_fignums() == before
