"""Live figures: ipywidgets controls wired to a pure plot, a PNG where no kernel runs.

How a figure is wired is :mod:`attnlab.widgets.core`; the figures of a chapter live in
the module named after its notebook, each made by a factory that
:func:`register_widget` marks. The factories are imported here one by one and
:data:`WIDGETS` maps each registry name to its factory (the tests render every one, the
book's build draws every state); ``tests/test_registries.py`` fails on a factory left out.
"""

from collections.abc import Callable

from attnlab.widgets.attention_review import softmax_sharpness_widget
from attnlab.widgets.context_extension import context_extension_widget
from attnlab.widgets.core import (
    LIVE_HINT,
    LIVE_NOTE,
    OUTPUT_MARKER,
    WIDGET_NAME_ATTRIBUTE,
    InteractiveFigure,
    Plot,
    control_values,
    interactive_figure,
    register_widget,
    render,
)
from attnlab.widgets.inference_time import kv_cache_slots_widget
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
        kv_cache_slots_widget,  # 11
    )
}

__all__ = [
    "LIVE_HINT",
    "LIVE_NOTE",
    "OUTPUT_MARKER",
    "WIDGETS",
    "InteractiveFigure",
    "Plot",
    "context_extension_widget",
    "control_values",
    "head_picker_widget",
    "interactive_figure",
    "kv_cache_slots_widget",
    "kv_cache_widget",
    "register_widget",
    "render",
    "rope_rotation_widget",
    "shape_explorer_widget",
    "sinusoidal_explorer_widget",
    "softmax_sharpness_widget",
]
