"""Live figures: ipywidgets controls wired to a pure plot, a PNG where no kernel runs.

:mod:`attnlab.widgets.core` holds the machinery (:func:`interactive_figure`,
:func:`render`, ...); every other module holds the live figures of one chapter, named
after the chapter's notebook, each made by a factory marked with :func:`register_widget`.
This file imports every factory by name, so
``from attnlab.widgets import softmax_sharpness_widget`` leads an editor straight to its
definition; :data:`WIDGETS` lists them by registry name. A test
(``tests/test_registries.py``) names any factory that a chapter module marks and this
file does not list.
"""

from collections.abc import Callable

from attnlab.widgets.attention_review import softmax_sharpness_widget
from attnlab.widgets.context_extension import context_extension_widget
from attnlab.widgets.core import (
    LIVE_HINT,
    OUTPUT_MARKER,
    WIDGET_NAME_ATTRIBUTE,
    InteractiveFigure,
    Plot,
    control_values,
    interactive_figure,
    register_widget,
    render,
)
from attnlab.widgets.rope import rope_rotation_widget
from attnlab.widgets.sinusoidal_encoding import sinusoidal_explorer_widget
from attnlab.widgets.split_and_concat import shape_explorer_widget
from attnlab.widgets.what_heads_capture import head_picker_widget, kv_cache_widget

#: Every live figure of the book, in chapter order: registry name → factory. The tests
#: render each and ``benchmarks/widget_render.py`` times each.
WIDGETS: dict[str, Callable[[], InteractiveFigure]] = {
    getattr(factory, WIDGET_NAME_ATTRIBUTE): factory
    for factory in (
        softmax_sharpness_widget,  # 01
        shape_explorer_widget,  # 03
        kv_cache_widget,  # 04
        head_picker_widget,
        sinusoidal_explorer_widget,  # 06
        rope_rotation_widget,  # 08
        context_extension_widget,  # 09
    )
}

__all__ = [
    "LIVE_HINT",
    "OUTPUT_MARKER",
    "WIDGETS",
    "InteractiveFigure",
    "Plot",
    "context_extension_widget",
    "control_values",
    "head_picker_widget",
    "interactive_figure",
    "kv_cache_widget",
    "register_widget",
    "render",
    "rope_rotation_widget",
    "shape_explorer_widget",
    "sinusoidal_explorer_widget",
    "softmax_sharpness_widget",
]
