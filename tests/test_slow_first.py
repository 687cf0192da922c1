"""tests/slow_first.py: the slowest files start first, each file's items keep their order."""

from pathlib import Path
from types import SimpleNamespace

from tests.slow_first import SLOW_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_file_exists():
    for name in SLOW_FIRST:
        assert (ROOT / "tests" / name).exists() or (ROOT / "notebooks" / name).exists(), name


def test_listed_files_go_first_in_the_lists_order_and_the_rest_keep_theirs():
    def item(name, n):
        return SimpleNamespace(path=Path("x") / name, n=n)

    items = [item("test_a.py", 0), item("test_grade.py", 0), item("test_b.py", 0),
             item("test_widgets.py", 0), item("test_grade.py", 1), item("test_a.py", 1)]
    pytest_collection_modifyitems(items)
    assert [(i.path.name, i.n) for i in items] == [
        ("test_widgets.py", 0), ("test_grade.py", 0), ("test_grade.py", 1),
        ("test_a.py", 0), ("test_b.py", 0), ("test_a.py", 1)]
