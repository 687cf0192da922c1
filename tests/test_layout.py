"""The package's layout rules: numerics never load presentation, and every public
function says, on the last line of its docstring, which chapter teaches it."""

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import attnlab

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PRESENTATION = ("attnlab.plotting", "attnlab.widgets", "attnlab.checks", "attnlab.live_book")
GUI_PACKAGES = ("matplotlib", "ipywidgets", "PIL", "IPython")
CHAPTERS = range(1, 12)  # the eleven chapters of the course plan
TAUGHT = re.compile(r"^Taught in chapter (\d\d)\.$")
NOT_TAUGHT = "Not taught:"


def module_names() -> list[str]:
    """Every module of attnlab, found by walking the package (no list to keep up to date)."""
    found = ["attnlab"]
    for info in pkgutil.walk_packages(attnlab.__path__, prefix="attnlab."):
        found.append(info.name)
    return sorted(found)


def is_presentation(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PRESENTATION)


NUMERICS = [name for name in module_names() if not is_presentation(name)]


def test_the_numerics_modules_are_found():
    for name in ("attnlab", "attnlab.attention", "attnlab.positional", "attnlab.model",
                 "attnlab.training", "attnlab.tasks", "attnlab.costs", "attnlab.head_roles"):
        assert name in NUMERICS


@pytest.mark.parametrize("module", NUMERICS)
def test_importing_a_numerics_module_loads_no_plotting_or_widget_library(module):
    probe = (f"import sys, {module}; "
             f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(GUI_PACKAGES)!r}))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]", f"{module} が {result.stdout.strip()} を読み込みます"


def public_objects():
    """(module name, name, object) for every public function and class defined in attnlab."""
    found = []
    for module_name in module_names():
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if any(part.startswith("_") for part in module_name.split(".")):  # private modules
                continue
            if obj.__module__ == module_name:
                found.append((module_name, name, obj))
    return found


def imported_from_attnlab(nb) -> set[int]:
    """The ids of the attnlab objects a notebook imports (``from attnlab… import …``)."""
    ids = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # a cell with IPython syntax imports nothing we look for
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "attnlab":
                module = importlib.import_module(node.module)
                ids.update(id(getattr(module, alias.name)) for alias in node.names
                           if hasattr(module, alias.name))
    return ids


def first_chapters() -> dict[int, int]:
    """Object id → number of the first chapter (in book order) that imports it."""
    first = {}
    for path in NOTEBOOKS:
        number = int(path.name[:2])
        for object_id in imported_from_attnlab(nbformat.read(path, as_version=4)):
            first.setdefault(object_id, number)
    return first


def last_line(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    lines = [line.strip() for line in doc.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def is_result_tuple(obj) -> bool:
    """A NamedTuple that only bundles what a function returns: taught with that function."""
    return inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields")


OBJECTS = public_objects()


def test_there_are_public_objects_in_every_layer():
    modules = {module for module, _, _ in OBJECTS}
    assert {"attnlab.attention", "attnlab.model", "attnlab.training"} <= modules


@pytest.mark.parametrize("module, name, obj", OBJECTS, ids=[f"{m}.{n}" for m, n, _ in OBJECTS])
def test_every_public_function_names_the_first_chapter_that_uses_it(module, name, obj):
    line = last_line(obj)
    first = FIRST.get(id(obj))
    existing = {int(path.name[:2]) for path in NOTEBOOKS}
    if line.startswith(NOT_TAUGHT):
        assert first is None, (
            f"{module}.{name} は第 {first:02d} 章が使っています: 最後の行を "
            f"'Taught in chapter {first:02d}.' にしてください")
        return
    match = TAUGHT.match(line)
    if match is None:
        assert is_result_tuple(obj), (
            f"{module}.{name}: docstring の最後の行は 'Taught in chapter NN.' か "
            f"'Not taught: …' にしてください（いまは {line!r}）")
        return
    chapter = int(match.group(1))
    assert chapter in CHAPTERS, f"{module}.{name}: 第 {chapter} 章はありません"
    if first is not None:
        assert chapter == first, (
            f"{module}.{name} を最初に使う章は第 {first:02d} 章ですが、"
            f"docstring は第 {chapter:02d} 章と書いています")
    else:
        assert chapter not in existing, (
            f"{module}.{name}: 第 {chapter:02d} 章はあるのに、{name} を import していません")


FIRST = first_chapters()
