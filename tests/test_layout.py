"""The package's layout rules: numerics never load presentation; every public function
says, on the last line of its docstring, which chapter teaches it; each chapter's modules
and tests carry the chapter's notebook slug, and README.md's table of them is true.

The chapters are the notebooks of ``_toc.yml``, in book order (``scripts.book``).
"""

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
from scripts.book import chapter_notebooks

ROOT = Path(__file__).resolve().parent.parent
#: Chapter number → notebook, in the order of _toc.yml (the number is the file's prefix).
CHAPTERS = {int(path.name[:2]): path for path in chapter_notebooks(ROOT)}
PRESENTATION = ("attnlab.plotting", "attnlab.widgets", "attnlab.checks", "attnlab.live_book")
GUI_PACKAGES = ("matplotlib", "ipywidgets", "PIL", "IPython")
TAUGHT = re.compile(r"^Taught in chapter (\d\d)\.$")
NOT_TAUGHT = "Not taught:"
#: The packages whose modules are named after the chapters (besides their ``core``).
CHAPTER_PACKAGES = ("experiments", "checks", "widgets")


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


#: 「第 8 章」, 「第 6〜8 章」: a chapter, or a range of chapters, named in the prose.
CHAPTER_REFERENCE = re.compile(r"第\s*(\d+)\s*(?:[〜～~–-]\s*(\d+)\s*)?章")


def referred_chapters(text: str) -> set[int]:
    """The chapter numbers ``text`` names (ranges expanded)."""
    found = set()
    for match in CHAPTER_REFERENCE.finditer(text):
        first = int(match.group(1))
        last = int(match.group(2) or first)
        found.update(range(first, last + 1))
    return found


def names_in_code(text: str, name: str) -> bool:
    """Whether ``name`` stands in an inline code span of the Markdown ``text``."""
    return any(re.search(rf"\b{re.escape(name)}\b", code)
               for code in re.findall(r"`([^`\n]+)`", text))


class Chapter:
    """What a chapter notebook shows: the attnlab objects it imports and its prose."""

    def __init__(self, path: Path):
        nb = nbformat.read(path, as_version=4)
        self.imports = imported_from_attnlab(nb)
        self.prose = [cell.source for cell in nb.cells if cell.cell_type == "markdown"]

    def names(self, name: str) -> bool:
        """The prose names ``name`` in code (it explains it, or at least points at it)."""
        return any(names_in_code(text, name) for text in self.prose)

    def defers(self, name: str, chapter: int) -> bool:
        """A paragraph that names ``name`` in code also names chapter ``chapter``: this
        chapter uses ``name`` ahead and says where it is taught (「第 6〜8 章で分解します」)."""
        return any(names_in_code(text, name) and chapter in referred_chapters(text)
                   for text in self.prose)


def last_line(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    lines = [line.strip() for line in doc.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def is_result_tuple(obj) -> bool:
    """A NamedTuple that only bundles what a function returns: taught with that function."""
    return inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields")


OBJECTS = public_objects()
SHOWN = {number: Chapter(path) for number, path in CHAPTERS.items()}


def test_the_chapters_come_from_the_table_of_contents_in_book_order():
    assert list(CHAPTERS) == sorted(CHAPTERS) and len(CHAPTERS) >= 11
    assert all(path.exists() for path in CHAPTERS.values())


def test_there_are_public_objects_in_every_layer():
    modules = {module for module, _, _ in OBJECTS}
    assert {"attnlab.attention", "attnlab.model", "attnlab.training"} <= modules


def taught_problem(module: str, name: str, object_id: int, line: str) -> str | None:
    """Why ``line``, the last line of the docstring of the object ``object_id``, is not
    true, in Japanese; None if it is.

    ``Taught in chapter NN.`` holds when chapter NN (of _toc.yml) imports the object and
    every chapter before it that imports it uses it ahead and says so: a paragraph of its
    prose names the object in code and names chapter NN (chapter 05 shows the three ways
    of adding positions and says 「各方式の中身は第 6〜8 章で分解します」). A chapter that
    others defer to names the object in its own prose too. ``Not taught: …`` holds when
    no chapter imports the object.
    """
    users = [number for number, chapter in SHOWN.items() if object_id in chapter.imports]
    if line.startswith(NOT_TAUGHT):
        if users:
            return (f"{module}.{name} は第 {users[0]:02d} 章が使っています: 最後の行を "
                    f"'Taught in chapter NN.'（NN は {name} を教える章）にしてください")
        return None
    match = TAUGHT.match(line)
    if match is None:
        return (f"{module}.{name}: docstring の最後の行は 'Taught in chapter NN.' か "
                f"'Not taught: …' にしてください（いまは {line!r}）")
    taught = int(match.group(1))
    if taught not in SHOWN:
        return f"{module}.{name}: 第 {taught:02d} 章は _toc.yml にありません"
    if taught not in users:
        return f"{module}.{name}: 第 {taught:02d} 章は {name} を import していません"
    ahead = [number for number in users if number < taught]
    for number in ahead:
        if not SHOWN[number].defers(name, taught):
            return (f"{module}.{name} は第 {number:02d} 章が第 {taught:02d} 章より"
                    f"先に使っています: 第 {number:02d} 章で教えるなら docstring を "
                    f"'Taught in chapter {number:02d}.' に、先に使うだけなら第 {number:02d} 章の"
                    f"本文の `{name}` の段落に「第 {taught} 章」で教えると書いてください")
    if ahead and not SHOWN[taught].names(name):
        return (f"{module}.{name}: 第 {taught:02d} 章の本文が `{name}` に触れていません"
                f"（第 {ahead[0]:02d} 章はそこで教えると書いています）")
    return None


@pytest.mark.parametrize("module, name, obj", OBJECTS, ids=[f"{m}.{n}" for m, n, _ in OBJECTS])
def test_every_public_function_names_the_chapter_that_teaches_it(module, name, obj):
    line = last_line(obj)
    if not line.startswith(NOT_TAUGHT) and TAUGHT.match(line) is None and is_result_tuple(obj):
        return  # a NamedTuple of results is taught with the function that returns it
    problem = taught_problem(module, name, id(obj), line)
    assert problem is None, problem


def test_chapter_05_uses_the_three_encodings_ahead_and_says_where_they_are_taught():
    from attnlab.positional import RoPE, lookup_positions, sinusoidal_encoding

    assert SHOWN[5].defers("RoPE", 8) and not SHOWN[5].defers("RoPE", 9)
    assert SHOWN[5].defers("lookup_positions", 7)
    assert not SHOWN[6].defers("sinusoidal_encoding", 6)  # taught there, not deferred
    for obj, chapter in ((RoPE, 8), (sinusoidal_encoding, 6), (lookup_positions, 7)):
        assert last_line(obj) == f"Taught in chapter {chapter:02d}."


@pytest.mark.parametrize("line, message", [
    ("Taught in chapter 05.", None),  # chapter 05 is the first to use it: not caught
    ("Taught in chapter 08.", None),
    ("Taught in chapter 09.", "第 05 章が第 09 章より先に使っています"),
    ("Taught in chapter 10.", "第 10 章は RoPE を import していません"),
    ("Taught in chapter 13.", "第 13 章は _toc.yml にありません"),
    ("Not taught: machinery.", "第 05 章が使っています"),
    ("Returns the rotation.", "'Taught in chapter NN.' か 'Not taught: …'"),
])
def test_a_wrong_line_is_named_with_what_to_do(line, message):
    from attnlab.positional import RoPE

    problem = taught_problem("attnlab.positional", "RoPE", id(RoPE), line)
    assert problem == message or (message is not None and message in problem), problem


def test_the_chapter_references_of_the_prose_are_read_with_their_ranges():
    assert referred_chapters("各方式の中身は第 6〜8 章で分解します。第 11 章も") == {6, 7, 8, 11}
    assert referred_chapters("第2章と第 3 章") == {2, 3}
    assert names_in_code("表 `init_position_table` から", "init_position_table")
    assert not names_in_code("RoPE を使う", "RoPE")  # not in code
    assert not names_in_code("`RoPEs`", "RoPE")


SRC = ROOT / "src" / "attnlab"
TESTS = ROOT / "tests"
TABLE_HEADER = "| 章 | 名前 | `src/attnlab/` の中（それぞれ `名前.py`） | `tests/` |"


def slug(number: int) -> str:
    """The notebook's name without its number: ``01_attention_review`` → ``attention_review``."""
    return CHAPTERS[number].stem[3:]


def chapter_tests(name: str) -> list[str]:
    """``tests/test_NAME.py`` and ``tests/test_NAME_*.py`` (what of the chapter they test)."""
    return sorted(path.name for path in TESTS.glob(f"test_{name}*.py")
                  if path.stem == f"test_{name}" or path.stem.startswith(f"test_{name}_"))


def chapter_table() -> list[str]:
    """README.md's table: each chapter of _toc.yml, its modules and its tests."""
    rows = [TABLE_HEADER, "| --- | --- | --- | --- |"]
    for number in CHAPTERS:
        name = slug(number)
        modules = [f"`{package}/`" for package in CHAPTER_PACKAGES
                   if (SRC / package / f"{name}.py").exists()]
        tests = [f"`{test}`" for test in chapter_tests(name)]
        rows.append(f"| {number:02d} | `{name}` | {'・'.join(modules) or '—'} | "
                    f"{'・'.join(tests) or '—'} |")
    return rows


def test_the_readme_table_of_each_chapters_files_is_true():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    expected = chapter_table()
    assert TABLE_HEADER in lines, (
        "README.md に章とファイルの表がありません。表:\n" + "\n".join(expected))
    start = lines.index(TABLE_HEADER)
    shown = lines[start:start + len(expected) + 1]
    assert shown[:len(expected)] == expected and not shown[-1].startswith("|"), (
        "README.md の章とファイルの表を次のように直してください:\n" + "\n".join(expected))


@pytest.mark.parametrize("package", CHAPTER_PACKAGES)
def test_every_module_of_a_chapter_package_is_named_after_a_chapter(package):
    names = {slug(number) for number in CHAPTERS}
    for info in pkgutil.iter_modules([str(SRC / package)]):
        assert info.name == "core" or info.name in names, (
            f"attnlab.{package}.{info.name}: 章のモジュールの名前はその章のノートブックの名前"
            f"（番号を除く。{sorted(names)} のどれか）にし、共有の機構は core に置いてください")


def test_no_test_is_named_by_a_chapter_number():
    numbered = sorted(path.name for path in TESTS.glob("test_ch[0-9][0-9]*.py"))
    assert numbered == [], (
        f"{numbered}: 章のテストは章のノートブックの名前で tests/test_NAME.py か "
        f"tests/test_NAME_何を.py にしてください（例：test_rope_checks.py）")


def test_every_chapter_has_tests_named_after_it():
    for number in CHAPTERS:
        assert chapter_tests(slug(number)), (
            f"第 {number:02d} 章のテスト tests/test_{slug(number)}.py がありません")
