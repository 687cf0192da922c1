"""Static checks of the committed chapter notebooks (nothing here executes a cell).

nbval re-executes every notebook and compares outputs; these tests guard what it does
not: the book's table of contents, the shape every chapter shares, and outputs that are
clean (no warnings, no font-cache messages, executed top to bottom in one run).
"""

import re
from pathlib import Path

import nbformat
import pytest

from scripts.check_site import toc_pages

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXERCISE = re.compile(r"```\{exercise(?:-start)?\}[^\n]*\n:label: (\S+)")
SOLUTION = re.compile(r"```\{solution(?:-start)?\} (\S+)\n((?::\w+:[^\n]*\n)*)")


def _markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_there_is_at_least_one_chapter():
    assert NOTEBOOKS


def test_every_chapter_is_in_the_toc_and_every_toc_page_exists():
    listed = toc_pages()
    for entry in listed:
        assert (ROOT / f"{entry}.md").exists() or (ROOT / f"{entry}.ipynb").exists(), entry
    for path in NOTEBOOKS:
        assert f"notebooks/{path.stem}" in listed, f"{path.name} が _toc.yml にありません"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_name_is_numbered(path):
    assert re.fullmatch(r"\d\d_[a-z0-9_]+", path.stem)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_come_from_one_clean_top_to_bottom_run(path):
    nb = nbformat.read(path, as_version=4)
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), "make notebooks で実行し直してください"
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.outputs:
            assert out.output_type != "error", cell.source[:80]
            assert not (out.output_type == "stream" and out.name == "stderr"), out.text[:200]
            text = out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
            for bad in ("Glyph", "missing from font", "font cache", "Warning"):
                assert bad not in text, f"{bad!r} in output of: {cell.source[:80]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_ends_with_exercises_and_a_summary(path):
    nb = nbformat.read(path, as_version=4)
    text = _markdown(nb)
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings[-2:] == ["練習問題", "まとめ"]
    exercises = EXERCISE.findall(text)
    solutions = SOLUTION.findall(text)
    assert len(exercises) >= 2
    assert [label for label, _ in solutions] == exercises, "各練習問題に解答が一つずつ必要です"
    assert all(":class: dropdown" in options for _, options in solutions), "解答は折りたたむ"
    assert all(label.startswith(f"ex{path.stem[:2]}-") for label in exercises)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_inside_a_solution_and_only_those_are_tagged_solution(path):
    nb = nbformat.read(path, as_version=4)
    inside = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            inside = (inside or "{solution-start}" in cell.source) and (
                "{solution-end}" not in cell.source)
            continue
        tagged = "solution" in cell.metadata.get("tags", [])
        assert tagged == inside, cell.source[:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_sets_up_from_attnlab(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c.source for c in nb.cells if c.cell_type == "code")
    assert "from attnlab" in first and "default_rng(" in first
