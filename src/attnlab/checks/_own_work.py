"""Which package functions an answer calls: a self-check refuses the reference itself.

An exercise whose reference is importable (``split_heads``, ``heads_output``, …) could
be answered by passing the reference, or a one-line wrapper around it. The checks of
chapters 02–04 call the student's function through :func:`call_watching`, which sees
every Python call made while it runs, however the answer reached the function (its
imported name, ``attnlab.…``, an alias, or the reference passed as the answer).

Not taught: machinery of the self-checks (CONTRIBUTING.md). Chapter 01's check does the
same in its own module; the two belong in ``attnlab.checks.core`` one day.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from attnlab.checks.core import call_student


def references(functions: Mapping[Callable, str]) -> dict[Any, str]:
    """``{function: message}`` as ``{code object: message}``, through any decorator."""
    return {inspect.unwrap(function).__code__: message
            for function, message in functions.items()}


def call_watching(func: Callable, watched: Mapping[Any, str], *args: Any,
                  **kwargs: Any) -> tuple[Any, list[str]]:
    """``call_student(func, …)``, and the messages of the watched functions it called.

    ``watched`` is made by :func:`references`. A profile hook records each watched code
    object that starts running while ``func`` runs; the result is returned as
    :func:`attnlab.checks.core.call_student` returns it.
    """
    called: list[str] = []

    def watch(frame, event, arg):
        if event == "call" and (message := watched.get(frame.f_code)) is not None:
            if message not in called:
                called.append(message)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        result = call_student(func, *args, **kwargs)
    finally:
        sys.setprofile(previous)
    return result, called
