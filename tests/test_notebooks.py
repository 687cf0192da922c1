"""Static checks of the committed chapter notebooks (nothing here executes a cell).

nbval re-executes every notebook and compares outputs; these tests guard what it does
not: the book's table of contents, the shape every chapter shares, and outputs that are
clean (no warnings, no font-cache messages, executed top to bottom in one run).
"""

import re

import nbformat
import pytest

from attnlab.plotting import DARK_PNG_KEY
from attnlab.widgets import LIVE_HINT, OUTPUT_MARKER
from scripts.book import ROOT, all_notebooks, toc_pages
from scripts.exercises import KINDS, directive_names, directives, parse_exercises
from scripts.sync_colab_cell import TAGS as COLAB_TAGS
from scripts.sync_colab_cell import colab_source, repository

NOTEBOOKS = all_notebooks()
# The first line of every exercise: its kind and an honest time estimate.
WIDGET_SOURCE = re.compile(r"\b(?:\w+_widget|interactive_figure)\(")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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
    blocks = directives(text)
    exercises = [d.options.get("label") for d in blocks if d.name in ("exercise", "exercise-start")]
    solutions = [d for d in blocks if d.name in ("solution", "solution-start")]
    assert len(exercises) >= 2
    assert [d.argument for d in solutions] == exercises, "各練習問題に解答が一つずつ必要です"
    assert all(d.options.get("class") == "dropdown" for d in solutions), "解答は折りたたむ"
    assert all(label.startswith(f"ex{path.stem[:2]}-") for label in exercises)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_inside_a_solution_and_only_those_are_tagged_solution(path):
    nb = nbformat.read(path, as_version=4)
    inside = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            names = directive_names(cell.source)
            inside = (inside or "solution-start" in names) and "solution-end" not in names
            continue
        tagged = "solution" in cell.metadata.get("tags", [])
        assert tagged == inside, cell.source[:80]


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_installs_attnlab_in_colab_from_the_config_url(path):
    nb = nbformat.read(path, as_version=4)
    first = _code_cells(nb)[0]
    url, branch = repository()
    fix = "make colab-cell を実行してから make notebooks を実行してください"
    assert f"git+{url}@{branch}" in first.source, f"_config.yml の URL と違います: {fix}"
    assert first.source == colab_source(url, branch), fix
    assert first.metadata.get("tags") == COLAB_TAGS, fix
    assert first.outputs == [], "Colab の外では何も出力しないはずです"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_after_the_colab_cell_sets_up_from_attnlab(path):
    nb = nbformat.read(path, as_version=4)
    setup = _code_cells(nb)[1]
    assert "from attnlab" in setup.source and "default_rng(" in setup.source
    # the book folds the long import cell (one click opens it); Jupyter shows it as is
    assert "hide-input" in setup.metadata.get("tags", []), (
        "準備のセル（Colab のセルの次）にタグ hide-input を付けてください（本で折りたたむ）")


def _is_widget_output(output) -> bool:
    return bool(output.get("metadata", {}).get(OUTPUT_MARKER))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_cells_that_show_a_live_figure_and_only_those_are_tagged_widget(path):
    nb = nbformat.read(path, as_version=4)
    for cell in _code_cells(nb):
        tagged = "widget" in cell.metadata.get("tags", [])
        shows = any(_is_widget_output(o) for o in cell.outputs)
        creates = bool(WIDGET_SOURCE.search(cell.source))
        assert tagged == shows == creates, cell.source[:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_live_figure_is_stored_as_its_snapshot_with_a_caption_naming_binder_and_colab(path):
    nb = nbformat.read(path, as_version=4)
    for cell in _code_cells(nb):
        for output in cell.outputs:
            assert WIDGET_VIEW not in output.get("data", {}), (
                "ウィジェットのビューが保存されています: make notebooks で実行し直してください")
        if "widget" not in cell.metadata.get("tags", []):
            continue
        assert any("image/png" in o.get("data", {}) for o in cell.outputs if _is_widget_output(o))
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption", "")
        assert caption.endswith(LIVE_HINT), "キャプションは LIVE_HINT で終えてください"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_stored_figure_carries_its_dark_version(path):
    """make notebooks stores each pyplot figure with its dark version, which the book shows
    on a dark page; a reader's kernel draws none, so outputs saved from Jupyter lack it."""
    nb = nbformat.read(path, as_version=4)
    for cell in _code_cells(nb):
        for output in cell.outputs:
            if "image/png" not in output.get("data", {}) or _is_widget_output(output):
                continue  # a live figure's snapshot: the book draws its states itself
            assert DARK_PNG_KEY in output.get("metadata", {}).get("image/png", {}), (
                f"{path.stem}: 図に暗い版がありません（{cell.source[:40]!r}）: "
                "make notebooks で実行し直してください")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_starts_with_its_kind_and_minutes(path):
    exercises = parse_exercises(_markdown(nbformat.read(path, as_version=4)))
    assert exercises
    for exercise in exercises:
        assert exercise.kind in KINDS and exercise.minutes is not None, (
            f"{path.stem} の {exercise.label}：問題文を **（実装・約 20 分）** または "
            "**（考える・約 10 分）** で始めてください（講師向けページの表はここから作られます）")
        assert 1 <= exercise.minutes <= 120, (
            f"{path.stem} の {exercise.label}：{exercise.minutes} 分")


def _exercises_with_solution_code(nb) -> list[tuple[str, str, list[str]]]:
    """(exercise text, kind, code of its solution cells) for each exercise, in order."""
    found, current, inside = [], None, False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            names = directive_names(cell.source)
            if "exercise-start" in names:
                (exercise,) = parse_exercises(cell.source)
                current = (cell.source, exercise.kind, [])
                found.append(current)
            inside = (inside or "solution-start" in names) and "solution-end" not in names
        elif inside and current is not None:
            current[2].append(cell.source)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_implementation_solutions_are_marked_and_run_through_their_check(path):
    nb = nbformat.read(path, as_version=4)
    exercises = _exercises_with_solution_code(nb)
    assert any(kind == "実装" for _, kind, _ in exercises), "実装の練習問題が必要です"
    for text, kind, codes in exercises:
        marked = [c for c in codes if "### BEGIN SOLUTION" in c]
        if kind != "実装":
            assert not marked, "考える問題の解答にマーカーは要りません"
            continue
        assert len(marked) == 1, "実装の解答はマーカー付きのセル 1 つにしてください"
        begin, end = marked[0].index("### BEGIN SOLUTION"), marked[0].index("### END SOLUTION")
        assert begin < end
        check = re.search(r"^(check_\w+)\(", marked[0][end:], flags=re.MULTILINE)
        assert check, "### END SOLUTION の後で check_… を呼んでください"
        assert f"`{check.group(1)}(" in text, "問題文で、どのチェックを実行するかを伝えてください"
