"""attnlab.widgets and attnlab.checks find what their topic modules register."""

import importlib
import pkgutil
import sys

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import attnlab.checks  # noqa: E402
import attnlab.widgets  # noqa: E402
from attnlab._registry import collect  # noqa: E402

PACKAGES = {
    "widgets": (attnlab.widgets, attnlab.widgets.WIDGETS),
    "checks": (attnlab.checks, attnlab.checks.CHECKS),
}


@pytest.mark.parametrize("package, registry", PACKAGES.values(), ids=PACKAGES.keys())
def test_every_topic_module_registers_something_and_the_package_exposes_it(package,
                                                                            registry):
    topics = [info.name for info in pkgutil.iter_modules(package.__path__)
              if info.name != "core"]
    assert topics
    for topic in topics:
        module = importlib.import_module(f"{package.__name__}.{topic}")
        defined = [value for value in registry.values() if value.__module__ == module.__name__]
        assert defined, f"{module.__name__} は何も登録していません"
        for value in defined:
            assert getattr(module, value.__name__) is value
            assert getattr(package, value.__name__) is value
            assert value.__name__ in package.__all__


def test_chapter_01_is_registered():
    from attnlab.checks import check_attention
    from attnlab.widgets import softmax_sharpness_widget

    assert attnlab.widgets.WIDGETS["softmax_sharpness"] is softmax_sharpness_widget
    assert attnlab.checks.CHECKS["check_attention"] is check_attention


def _package(tmp_path, name, modules):
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "core.py").write_text("def mark(name):\n"
                                  "    def do(f):\n"
                                  "        f.mark = name\n"
                                  "        return f\n"
                                  "    return do\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(f"from {name}.core import mark\n\n{source}")
    sys.path.insert(0, str(tmp_path))
    try:
        package = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    return package


def _marked(name, function):
    return f"@mark({name!r})\ndef {function}():\n    pass\n"


def test_collect_finds_marked_callables_where_they_are_defined(tmp_path):
    package = _package(tmp_path, "fake_ok", {
        "a_topic": _marked("one", "make_one"),
        "b_topic": "from fake_ok.a_topic import make_one\n\n" + _marked("two", "make_two"),
    })
    found = collect(package.__name__, package.__path__, "mark", reserved=vars(package))
    assert {name: value.__name__ for name, value in found.items()} == {
        "one": "make_one", "two": "make_two"}


TWICE = {
    "registry name": {"a_topic": _marked("same", "make_a"), "b_topic": _marked("same", "make_b")},
    "function name": {"a_topic": _marked("one", "make"), "b_topic": _marked("two", "make")},
    "module name": {"a_topic": _marked("one", "a_topic")},  # would hide the module a_topic
}


@pytest.mark.parametrize("case", TWICE)
def test_collect_rejects_a_name_used_twice(tmp_path, case):
    name = f"fake_{case.replace(' ', '_')}"
    package = _package(tmp_path, name, TWICE[case])
    with pytest.raises(ValueError, match="すでに使われています"):
        collect(package.__name__, package.__path__, "mark", reserved=vars(package))
