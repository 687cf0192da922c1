"""tests/nbval_student.py: the student edition checked inside nbval's run of a notebook.

One pytest run (a subprocess, as ``make nbval`` runs it) over small notebooks, one per
case; each case's outcome is read from its items' results. The cases that must fail are
the ones a shared run could hide: a later cell that calls the stub, and a later cell that
uses a name only the reference solution defines (it exists in nbval's kernel until the
namespace is put back).
"""

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.nbval_student import plan_for

ROOT = Path(__file__).resolve().parents[1]

CHECK = ("def check_double(func):\n"
         "    try:\n"
         "        ok = func(3) == 6\n"
         "    except NotImplementedError:\n"
         "        print('【未実装】double はまだ実装されていません。')\n"
         "        return\n"
         "    print('【正解】' if ok else '【不正解】')\n\n\n"
         "def check_quietly(func):  # a check that never says 未実装\n"
         "    print('【正解】')")
SOLUTION = ("def double(x):\n"
            "    ### BEGIN SOLUTION\n"
            "    return 2 * x\n"
            "    ### END SOLUTION\n\n\n"
            "check_double(double)")
HELPER_SOLUTION = ("def double(x):\n"
                   "    ### BEGIN SOLUTION\n"
                   "    global FACTOR\n"
                   "    FACTOR = 2\n"
                   "    return FACTOR * x\n"
                   "    ### END SOLUTION\n\n\n"
                   "check_double(double)")

# notebook name -> (the solution cell, the cell after it, whether its student edition passes)
CASES = {
    "fine.ipynb": (SOLUTION, "print('おわり')", True),
    "calls_the_stub.ipynb": (SOLUTION, "print(double(2))", False),
    "uses_a_solution_name.ipynb": (HELPER_SOLUTION, "print(FACTOR)", False),
    "check_says_correct.ipynb": (SOLUTION.replace("check_double(double)", "check_quietly(double)"),
                                 "print('おわり')", False),
}


def notebook(solution: str, after: str) -> nbformat.NotebookNode:
    """Shared cells, the exercise's solution cell, one cell after it (no stored outputs:
    nbval runs them without comparing)."""
    cells = [nbformat.v4.new_code_cell("import math\nrng_calls = []"),
             nbformat.v4.new_code_cell(CHECK),
             nbformat.v4.new_code_cell(solution),
             nbformat.v4.new_code_cell(after)]
    cells[2].metadata["tags"] = ["solution"]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nbval_student")
    for name, (solution, after, _) in CASES.items():
        nbformat.write(notebook(solution, after), folder / name)
    report = folder / "report.json"
    plugin = folder / "record.py"  # writes each item's outcome (and why) as JSON
    plugin.write_text(
        "import json\n"
        "OUT = {}\n"
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'call' or report.outcome == 'failed':\n"
        "        OUT[report.nodeid.split('/')[-1]] = [report.outcome, report.longreprtext]\n"
        "def pytest_sessionfinish(session):\n"
        f"    open({str(report)!r}, 'w').write(json.dumps(OUT))\n", encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env",
         "-p", "tests.nbval_student", "--student-edition", "-p", "record",
         "-p", "no:cacheprovider", "-q", "--rootdir", str(folder), str(folder)],
        cwd=ROOT, env={**_env(), "PYTHONPATH": f"{ROOT}:{folder}"},
        capture_output=True, text=True, timeout=300)
    return json.loads(report.read_text(encoding="utf-8"))


def _env() -> dict:
    import os

    return dict(os.environ)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.slow
def test_each_case_passes_or_fails_as_its_student_edition_would(results, name):
    *_, passes = CASES[name]
    outcome, why = results[f"{name}::student-edition"]
    assert outcome == ("passed" if passes else "failed"), why
    assert results[f"{name}::student-edition-snapshot"][0] == "passed"
    # nbval's own run of the full notebook passes in every case
    assert all(results[f"{name}::Cell {n}"][0] == "passed" for n in range(4))


def test_the_failures_name_what_the_student_would_see(results):
    assert "NotImplementedError" in results["calls_the_stub.ipynb::student-edition"][1]
    assert "NameError: name 'FACTOR' is not defined" in \
        results["uses_a_solution_name.ipynb::student-edition"][1]
    assert "「未実装」と表示しません" in results["check_says_correct.ipynb::student-edition"][1]


def test_the_plan_shares_the_cells_before_the_first_stub(tmp_path):
    path = tmp_path / "fine.ipynb"
    nbformat.write(notebook(SOLUTION, "print('おわり')"), path)
    plan = plan_for(path)
    assert (plan.shared, plan.alone, len(plan.stubbed)) == (2, "", 1)


def test_a_skipped_shared_cell_makes_the_student_edition_run_alone(tmp_path):
    nb = notebook(SOLUTION, "print('おわり')")
    nb.cells[0].metadata["tags"] = ["nbval-skip"]
    path = tmp_path / "skipped.ipynb"
    nbformat.write(nb, path)
    assert "nbval が飛ばすセル" in plan_for(path).alone


def test_a_notebook_without_exercises_has_no_plan(tmp_path):
    path = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), path)
    assert plan_for(path) is None


def test_every_chapter_shares_its_cells_up_to_its_first_exercise():
    """The chapters' exercises come last: each shares all cells before its first stub."""
    from scripts.book import chapter_notebooks

    for path in chapter_notebooks():
        plan = plan_for(path)
        assert plan is not None and plan.alone == "", path.name
        assert plan.shared >= 10, path.name
