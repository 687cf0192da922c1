"""The parts of tests/e2e/lab_widget_test.py that run without a browser (make test-lab runs it)."""

import nbformat

from scripts.book import NOTEBOOKS, all_notebooks
from tests.e2e.lab_widget_test import copy_notebooks, kernel_problems, widget_notebooks

REFUSED = "No such comm target registered: jupyter.widget.control\n"


def test_refused_control_comm_is_known():
    messages = ["No such comm: 2b85746c-d9e2\n", REFUSED, "No such comm: 2b85746c-d9e2"]
    problems, known = kernel_problems(messages)
    assert problems == []
    assert len(known) == 3


def test_unknown_comm_without_refusal_fails():
    problems, _ = kernel_problems(["No such comm: 2b85746c-d9e2\n"])
    assert len(problems) == 1


def test_two_missing_comms_fail_even_with_refusal():
    problems, known = kernel_problems([REFUSED, "No such comm: aaaa\n", "No such comm: bbbb\n"])
    assert len(problems) == 2
    assert known == [REFUSED.strip()]


def test_traceback_is_one_problem():
    text = "Traceback (most recent call last):\n  File \"x\"\nValueError: boom\n"
    problems, known = kernel_problems([REFUSED, text])
    assert len(problems) == 1 and "ValueError: boom" in problems[0]
    assert known == [REFUSED.strip()]


def test_widget_cells_are_found_by_tag():
    found = widget_notebooks(all_notebooks())
    assert found, "no notebook has a cell tagged widget"
    for path, cells in found.items():
        nb = nbformat.read(path, as_version=4)
        assert cells == [i for i, cell in enumerate(nb.cells)
                         if "widget" in cell.metadata.get("tags", [])]


def test_copy_clears_outputs_and_leaves_the_originals(tmp_path):
    before = {p.name: p.read_bytes() for p in NOTEBOOKS.glob("*.ipynb")}
    copy_notebooks(tmp_path / "notebooks")
    for name, data in before.items():
        assert (NOTEBOOKS / name).read_bytes() == data
        nb = nbformat.read(tmp_path / "notebooks" / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None
