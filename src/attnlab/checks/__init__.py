"""Self-checks for the implementation exercises: 【正解】, 【未実装】 or 【不正解】 and why.

:mod:`attnlab.checks.core` holds the machinery (:func:`checker`, :func:`call_student`,
:class:`Mistake`, ...); every other module holds the checks of one topic, each made with
:func:`checker`. Importing this package imports every module, collects the checks in
:data:`CHECKS` and exposes each under its name, e.g.
``from attnlab.checks import check_attention``.
"""

import importlib
import pkgutil
from collections.abc import Callable

from attnlab.checks.core import (
    CHECK_ATTRIBUTE,
    Mistake,
    Raised,
    Unimplemented,
    call_student,
    checker,
    raised_message,
    returned_array,
)

__all__ = [
    "CHECKS",
    "Mistake",
    "Raised",
    "Unimplemented",
    "call_student",
    "checker",
    "raised_message",
    "returned_array",
]  # and every check, added below


def _collect() -> dict[str, Callable[[Callable], bool]]:
    """The checks made with ``checker`` in the topic modules, by function name."""
    found: dict[str, Callable[[Callable], bool]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name == "core":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, value in vars(module).items():
            if not getattr(value, CHECK_ATTRIBUTE, False) or value.__module__ != module.__name__:
                continue  # not a check, or one imported from another module
            if name in found or name in globals():  # it would hide a name of the package
                raise ValueError(
                    f"{module.__name__}.{name}: この名前の自己チェックはすでにあります"
                )
            found[name] = value
    return found


#: Every self-check of the book: function name → check.
CHECKS: dict[str, Callable[[Callable], bool]] = _collect()
globals().update(CHECKS)
__all__ += list(CHECKS)
