"""Check the time budgets: each chapter's Run All and the phases of ``make test``.

Usage: python -m benchmarks.budgets [--chapters] [--test] [NOTEBOOK ...]

``--chapters`` (the default when nothing is asked) executes every notebook of
``notebooks/`` (or those named) top to bottom in a fresh kernel, as Run All in a reader's
Jupyter does (each figure drawn once, without the dark version that ``make notebooks``
adds for the book: :data:`attnlab.plotting.BOOK_OUTPUTS_ENV`), without writing anything,
and prints the wall-clock seconds of each against the budget (30 s on a 2-core machine).
``--test`` runs the phases of ``make test`` one after the other (the prerequisites of
``test:`` in the Makefile: ``make lint``, ``unit``, ``nbval``, ``build``) and prints the
seconds of each and their sum against its budget (10 minutes). The load average
(``os.getloadavg``) is printed before and after: on a shared machine a slow moment is
not a regression. This is a report, not a test: nothing fails on a missed budget.

Time with ``OPENBLAS_NUM_THREADS=1`` (the kernels inherit the environment).
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from scripts.book import ROOT, all_notebooks, execute_notebook

CHAPTER_BUDGET = 30.0  # seconds, Run All of one chapter
TEST_BUDGET = 600.0  # seconds, make test after install


def test_phases_of_the_makefile() -> list[str]:
    """The phases of ``make test``: the prerequisites of its rule in the Makefile."""
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        if line.startswith("test:"):
            return line.removeprefix("test:").split()
    raise SystemExit("Makefile に test: の規則がありません")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"負荷（load average）: {one:.2f} {five:.2f} {fifteen:.2f}、CPU {os.cpu_count()} 個"


def time_chapter(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    execute_notebook(nb, path.parent, for_book=False)  # as a reader's Run All
    return time.perf_counter() - start


def chapters(paths: list[Path]) -> None:
    print(load(), flush=True)
    for path in paths:
        seconds = time_chapter(path.resolve())
        mark = "" if seconds <= CHAPTER_BUDGET else f"  ← 予算 {CHAPTER_BUDGET:.0f} 秒を超過"
        print(f"{path.name:40s} {seconds:6.1f} 秒{mark}", flush=True)
    print(load(), flush=True)


def test_phases() -> None:
    print(load(), flush=True)
    total = 0.0
    for phase in test_phases_of_the_makefile():
        start = time.perf_counter()
        done = subprocess.run(
            ["make", "--no-print-directory", phase],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - start
        total += seconds
        status = "" if done.returncode == 0 else f"  （失敗: 終了コード {done.returncode}）"
        print(f"make {phase:14s} {seconds:6.1f} 秒{status}", flush=True)
    mark = "" if total <= TEST_BUDGET else f"  ← 予算 {TEST_BUDGET:.0f} 秒を超過"
    print(f"{'合計':18s} {total:6.1f} 秒{mark}", flush=True)
    print(load(), flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", action="store_true", help="各章の Run All を計る")
    parser.add_argument("--test", action="store_true", help="make test の各段階を計る")
    parser.add_argument("notebooks", nargs="*", type=Path, help="計るノートブック（既定: 全部）")
    args = parser.parse_args(argv)
    if args.chapters or args.notebooks or not args.test:
        chapters(args.notebooks or all_notebooks())
    if args.test:
        test_phases()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
