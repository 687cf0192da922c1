"""Self-checks for the implementation exercises: 【正解】, 【未実装】 or 【不正解】 and why.

:mod:`attnlab.checks.core` holds the machinery (:func:`checker`, :func:`call_student`,
:class:`Mistake`, ...); every other module holds the checks of one topic, each made with
:func:`checker`. Importing this package imports every module, collects the checks in
:data:`CHECKS` and exposes each under its name, e.g.
``from attnlab.checks import check_attention``.
"""

from collections.abc import Callable

from attnlab._registry import collect
from attnlab.checks.core import (
    CHECK_ATTRIBUTE,
    CheckResult,
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
    "CheckResult",
    "Mistake",
    "Raised",
    "Unimplemented",
    "call_student",
    "checker",
    "raised_message",
    "returned_array",
]  # and every check, added below

#: Every self-check of the book: function name → check.
CHECKS: dict[str, Callable[[Callable], bool]] = collect(
    __name__, __path__, CHECK_ATTRIBUTE, reserved=globals())
globals().update(CHECKS)
__all__ += list(CHECKS)
