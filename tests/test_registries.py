"""attnlab.checks and attnlab.widgets list, by name, exactly what their chapter modules mark.

Each package's ``__init__.py`` imports every check (every live figure's factory)
explicitly and lists it in ``__all__`` and in ``CHECKS`` (``WIDGETS``). These tests walk
the package's modules, find every callable that :func:`attnlab.checks.core.checker`
(:func:`attnlab.widgets.core.register_widget`) marked, and name any that is not listed, so
a chapter that adds a check or a figure learns which lines to add.
"""

import importlib
import pkgutil
import sys
from types import ModuleType

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import attnlab.checks  # noqa: E402
import attnlab.widgets  # noqa: E402
from attnlab.checks.core import CHECK_ATTRIBUTE  # noqa: E402
from attnlab.widgets.core import WIDGET_NAME_ATTRIBUTE  # noqa: E402

PACKAGES = {
    "checks": (attnlab.checks, "CHECKS", CHECK_ATTRIBUTE),
    "widgets": (attnlab.widgets, "WIDGETS", WIDGET_NAME_ATTRIBUTE),
}


def topic_modules(package: ModuleType) -> list[ModuleType]:
    """Every module of ``package`` but ``core``, imported, in name order."""
    return [importlib.import_module(f"{package.__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name)
            if info.name != "core"]


def marked(module: ModuleType, attribute: str) -> list:
    """The callables ``module`` defines (not imports) that carry ``attribute``."""
    return [value for value in vars(module).values()
            if getattr(value, attribute, None) is not None
            and getattr(value, "__module__", None) == module.__name__]


def registry_problems(package: ModuleType, registry_name: str, attribute: str) -> list[str]:
    """What ``package/__init__.py`` lacks or lists wrongly, one Japanese line each."""
    registry = getattr(package, registry_name)
    init = f"{package.__name__.replace('.', '/')}/__init__.py"
    problems, found = [], {}
    for module in topic_modules(package):
        values = marked(module, attribute)
        if not values:
            problems.append(f"{module.__name__} は何も登録していません")
        for value in values:
            name = f"{module.__name__}.{value.__name__}"
            key = getattr(value, attribute)
            if key in found:
                problems.append(f"{name}: 登録名 {key!r} は {found[key]} と重なっています")
            found[key] = name
            if registry.get(key) is not value or getattr(package, value.__name__, None) \
                    is not value or value.__name__ not in package.__all__:
                problems.append(f"{name} が {init} にありません: import し、{registry_name} と "
                                f"__all__ に {value.__name__} を加えてください")
    for key, value in registry.items():
        if getattr(value, attribute, None) != key:
            problems.append(f"{registry_name}[{key!r}] は登録されたものではありません")
    for name in package.__all__:
        if not hasattr(package, name):
            problems.append(f"{init} の __all__ の {name} がありません")
    return problems


@pytest.mark.parametrize("package, registry_name, attribute", PACKAGES.values(),
                         ids=PACKAGES.keys())
def test_the_package_lists_exactly_what_its_chapter_modules_mark(package, registry_name,
                                                                 attribute):
    assert registry_problems(package, registry_name, attribute) == []


def test_chapter_01_is_listed():
    from attnlab.checks import check_attention
    from attnlab.widgets import softmax_sharpness_widget

    assert attnlab.widgets.WIDGETS["softmax_sharpness"] is softmax_sharpness_widget
    assert attnlab.checks.CHECKS["check_attention"] is check_attention


# --- the test above can fail: a small fake package in tmp_path ---


def _package(tmp_path, name: str, modules: dict[str, str], init: str) -> ModuleType:
    root = tmp_path / name
    root.mkdir()
    (root / "core.py").write_text("def mark(name):\n"
                                  "    def do(f):\n"
                                  "        f.mark = name\n"
                                  "        return f\n"
                                  "    return do\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(f"from {name}.core import mark\n\n{source}")
    (root / "__init__.py").write_text(init)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def _marked(key: str, function: str) -> str:
    return f"@mark({key!r})\ndef {function}():\n    pass\n"


def _init(name: str, listed: dict[str, str]) -> str:
    imports = "".join(f"from {name}.{module} import {function}\n"
                      for function, module in listed.items())
    names = ", ".join(listed)
    return (f"{imports}REGISTRY = {{f.mark: f for f in ({names},)}}\n"
            f"__all__ = ['REGISTRY', {', '.join(repr(n) for n in listed)}]\n")


def test_a_marked_function_the_init_does_not_list_is_named(tmp_path):
    modules = {"a_topic": _marked("one", "make_one"),
               "b_topic": _marked("two", "make_two") + "\n" + _marked("three", "make_three")}
    package = _package(tmp_path, "fake_missing", modules,
                       _init("fake_missing", {"make_one": "a_topic", "make_two": "b_topic"}))
    problems = registry_problems(package, "REGISTRY", "mark")
    assert len(problems) == 1 and "fake_missing.b_topic.make_three" in problems[0]
    assert "REGISTRY" in problems[0] and "__all__" in problems[0]


def test_a_registry_name_used_twice_is_named(tmp_path):
    modules = {"a_topic": _marked("same", "make_a"), "b_topic": _marked("same", "make_b")}
    package = _package(tmp_path, "fake_twice", modules,
                       _init("fake_twice", {"make_a": "a_topic", "make_b": "b_topic"}))
    problems = registry_problems(package, "REGISTRY", "mark")
    assert any("'same'" in p and "重なっています" in p for p in problems)


def test_a_module_that_marks_nothing_is_named(tmp_path):
    modules = {"a_topic": _marked("one", "make_one"), "b_topic": "X = 1\n"}
    package = _package(tmp_path, "fake_empty", modules,
                       _init("fake_empty", {"make_one": "a_topic"}))
    assert registry_problems(package, "REGISTRY", "mark") == [
        "fake_empty.b_topic は何も登録していません"]
