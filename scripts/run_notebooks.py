"""Re-execute notebooks in place with nbclient and store their outputs.

Usage: python -m scripts.run_notebooks [NOTEBOOK ...]   (default: every notebooks/*.ipynb)

Each notebook runs top to bottom in a fresh kernel whose working directory is the
notebook's folder; no timing metadata is recorded, so two runs of unchanged code write
identical files. Live widgets are not stored (their model ids are random and a stored
widget cannot move without a kernel): each live figure of ``attnlab.widgets`` keeps its
PNG snapshot, which the book and a notebook opened without running show instead.
"""

import sys
from pathlib import Path

import nbformat

from scripts.book import ROOT, all_notebooks, execute_notebook

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def run(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    execute_notebook(nb, path.parent)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
    nbformat.validate(nb)
    nbformat.write(nb, path)


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or all_notebooks()
    for path in paths:
        print(f"実行中: {path.relative_to(ROOT) if path.is_absolute() else path}", flush=True)
        run(path.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
