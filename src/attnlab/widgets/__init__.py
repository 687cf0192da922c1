"""Live figures: ipywidgets controls wired to a pure plot, a PNG where no kernel runs.

:mod:`attnlab.widgets.core` holds the machinery (:func:`interactive_figure`,
:func:`render`, ...); every other module holds the live figures of one topic, each made
by a factory marked with :func:`register_widget`. Importing this package imports every
module, collects the marked factories in :data:`WIDGETS` and exposes each under its
function name, e.g. ``from attnlab.widgets import softmax_sharpness_widget``.
"""

from collections.abc import Callable

from attnlab._registry import collect
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

__all__ = [
    "LIVE_HINT",
    "LIVE_NOTE",
    "OUTPUT_MARKER",
    "WIDGETS",
    "InteractiveFigure",
    "Plot",
    "control_values",
    "interactive_figure",
    "register_widget",
    "render",
]  # and every registered factory, added below

#: Every live figure of the book: registry name → factory. The tests render each and
#: ``benchmarks/widget_render.py`` times each.
WIDGETS: dict[str, Callable[[], InteractiveFigure]] = collect(
    __name__, __path__, WIDGET_NAME_ATTRIBUTE, reserved=globals())
globals().update({factory.__name__: factory for factory in WIDGETS.values()})
__all__ += [factory.__name__ for factory in WIDGETS.values()]
