"""Find the registered figures and checks of a presentation package by themselves.

``attnlab.widgets`` and ``attnlab.checks`` each hold a ``core`` module (the machinery) and
one module per topic. A decorator of the core marks what a topic module defines (a
widget factory, a check) with an attribute whose value is its registry name; importing
the package collects the marked callables, so a chapter adds one by adding a file.
"""

import importlib
import pkgutil
from collections.abc import Callable, Collection, Iterable


def collect(
    package: str, path: Iterable[str], attribute: str, reserved: Collection[str]
) -> dict[str, Callable]:
    """Import every module of ``package`` but ``core``; return what each marks, by name.

    Parameters
    ----------
    package : str
        The package's dotted name (its ``__name__``).
    path : iterable of str
        The package's ``__path__``.
    attribute : str
        The marking attribute; its value is the registry name.
    reserved : collection of str
        Names the package has (pass its ``globals()``, which also gains each submodule
        as it is imported): a marked callable may not hide one of them.

    Returns
    -------
    dict
        Registry name → callable, modules in name order. A callable imported into a
        topic module from another one counts only where it is defined.

    Raises
    ------
    ValueError
        If two callables share a registry name or a function name, or a function name is
        reserved (the package exposes each callable under its function name).
    """
    found: dict[str, Callable] = {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda info: info.name):
        if info.name == "core":
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for value in vars(module).values():
            name = getattr(value, attribute, None)
            if name is None or getattr(value, "__module__", None) != module.__name__:
                continue
            names = {known.__name__ for known in found.values()}
            if name in found or value.__name__ in names or value.__name__ in reserved:
                raise ValueError(
                    f"{module.__name__}.{value.__name__}（登録名 {name!r}）: "
                    f"その名前は {package} ですでに使われています"
                )
            found[name] = value
    return found
