"""Live figures: ipywidgets controls wired to a pure plot, a PNG where no kernel runs.

:mod:`attnlab.widgets.core` holds the machinery (:func:`interactive_figure`,
:func:`render`, ...); every other module holds the live figures of one topic, each made
by a factory marked with :func:`register_widget`. Importing this package imports every
module, collects the marked factories in :data:`WIDGETS` and exposes each under its
function name, e.g. ``from attnlab.widgets import softmax_sharpness_widget``.
"""

import importlib
import pkgutil
from collections.abc import Callable

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

__all__ = [
    "LIVE_HINT",
    "OUTPUT_MARKER",
    "WIDGETS",
    "InteractiveFigure",
    "Plot",
    "control_values",
    "interactive_figure",
    "register_widget",
    "render",
]  # and every registered factory, added below


def _collect() -> dict[str, Callable[[], InteractiveFigure]]:
    """The factories marked by ``register_widget`` in the topic modules, by name."""
    found: dict[str, Callable[[], InteractiveFigure]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name == "core":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            name = getattr(value, WIDGET_NAME_ATTRIBUTE, None)
            if name is None or value.__module__ != module.__name__:
                continue  # not a factory, or one imported from another module
            if name in found:
                raise ValueError(
                    f"ライブ図の名前 {name!r} が {found[name].__module__} と "
                    f"{module.__name__} の両方で登録されています"
                )
            taken = {*globals(), *(factory.__name__ for factory in found.values())}
            if value.__name__ in taken:  # it would hide a name of the package
                raise ValueError(
                    f"{module.__name__}.{value.__name__}: この関数名はすでに使われています"
                )
            found[name] = value
    return found


#: Every live figure of the book: registry name → factory. The tests render each and
#: ``benchmarks/widget_render.py`` times each.
WIDGETS: dict[str, Callable[[], InteractiveFigure]] = _collect()
globals().update({factory.__name__: factory for factory in WIDGETS.values()})
__all__ += [factory.__name__ for factory in WIDGETS.values()]
