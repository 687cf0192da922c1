"""The live figures' control labels: written as the code names symbols (``d_k``), shown
typeset (issue 48, second read): HTML in a control's description (ipywidgets 8,
``description_allow_html``), Unicode subscripts in a button's or a menu's value where
Unicode has every letter, and the plain label kept for the book's build."""

from __future__ import annotations

import pytest

from attnlab.widgets import WIDGETS
from attnlab.widgets.core import (
    SUBSCRIPT,
    control_label,
    control_labels,
    dropdown,
    slider,
    symbols_html,
    symbols_unicode,
    toggle,
)


@pytest.mark.parametrize(("text", "shown"), [
    ("√d_k で割る", "√dₖ で割る"),
    ("h_kv", "hₖᵥ"),
    ("θ_i と W_O", "θ_i と W_O"),  # θ is no Latin letter; Unicode has no subscript O
    ("d_model", "d_model"),  # no subscript d in Unicode: the code's name stays
    ("キーの位置 n", "キーの位置 n"),
])
def test_plain_text_gets_unicode_subscripts_only_where_every_letter_has_one(text, shown):
    assert symbols_unicode(text) == shown


def test_a_control_shows_its_symbols_typeset_and_keeps_the_plain_labels():
    buttons = toggle([("割らない", False), ("√d_k で割る", True)], False, "d_k")
    assert buttons.description == "<i>d</i><sub>k</sub>"
    assert buttons.description_allow_html
    assert buttons._options_labels == ("割らない", "√dₖ で割る")
    assert control_label(buttons) == "d_k"
    assert control_labels(buttons) == ("割らない", "√d_k で割る")
    assert buttons.value is False
    buttons.value = True
    assert buttons.index == 1
    stops = slider([4, 16, 64], 16, "d_model")
    assert stops.description == "<i>d</i><sub>model</sub>" and stops.description_allow_html
    assert control_labels(stops) == ("4", "16", "64")
    menu = dropdown(["a_b", "c"], "c", "キー")  # values, not (label, value): left as they are
    assert control_label(menu) == "キー" and control_labels(menu) == ("a_b", "c")


def test_a_description_is_escaped_html():
    menu = dropdown([1, 2], 1, "a<b と d_k")
    assert menu.description == "a&lt;b と <i>d</i><sub>k</sub>"
    assert control_label(menu) == "a<b と d_k"


@pytest.fixture(scope="module")
def figures():
    return {name: make() for name, make in sorted(WIDGETS.items())}


def test_every_live_figure_shows_no_plain_subscript_in_its_descriptions(figures):
    for name, figure in figures.items():
        for key, control in figure.controls.items():
            label = control_label(control)
            assert control.description == symbols_html(label), (name, key)
            assert SUBSCRIPT.search(control.description) is None, (name, key)
            if SUBSCRIPT.search(label):
                assert control.description_allow_html, (name, key)


def test_the_books_json_keeps_the_plain_labels(figures):
    for name, figure in figures.items():
        described = figure.describe()
        assert described is not None, name
        for control, (key, widget) in zip(described["controls"], figure.controls.items(),
                                          strict=True):
            assert control["label"] == control_label(widget), (name, key)
            assert "<" not in control["label"], (name, key)
            assert control["labels"] == list(control_labels(widget)), (name, key)


def test_chapter_01s_scaling_buttons_show_a_typeset_root(figures):
    controls = figures["softmax_sharpness"].controls
    assert controls["d_k"].description == "<i>d</i><sub>k</sub>"
    assert controls["scaled"]._options_labels == ("割らない", "√dₖ で割る")
    assert control_labels(controls["scaled"]) == ("割らない", "√d_k で割る")


def test_the_books_controls_show_text_only_values_in_unicode_subscripts():
    from attnlab.live_book import controls_html

    description = {"figure": "f", "title": "図", "controls": [
        {"name": "a", "label": "d_k", "kind": "dropdown", "labels": ["h_kv", "d_model"],
         "default": 0},
        {"name": "b", "label": "スケーリング", "kind": "slider",
         "labels": ["割らない", "√d_k で割る"], "default": 1},
    ]}
    page = controls_html(description, "p")
    assert '<label for="p-c0"><i>d</i><sub>k</sub></label>' in page
    assert ">hₖᵥ</option>" in page and ">d_model</option>" in page  # no subscript d
    assert 'aria-valuetext="√dₖ で割る"' in page
    assert "&quot;√dₖ で割る&quot;" in page  # the values the script writes once moved
    assert "√<i>d</i><sub>k</sub> で割る</output>" in page
