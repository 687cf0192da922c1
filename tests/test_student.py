"""The student edition (scripts/make_student.py) on a fixture notebook with every case.

The fixture tests/fixtures/99_student_fixture.ipynb has: a solution code cell with indented
nbgrader markers, an unmarked solution code cell, solution-start/-end markdown with a
markdown cell between them, a one-cell ```{solution}``` block inside a cell that keeps other
text, a cell that is only a ``:::{solution}`` block, exercises, outputs and widget metadata.
"""

import copy
from pathlib import Path

import nbformat
import pytest

from scripts.book import chapter_notebooks
from scripts.make_student import (
    ANSWER_CELL,
    NOTE_MARK,
    STUB,
    STUB_COMMENT,
    leftovers,
    main,
    remove_solution_blocks,
    run_student_notebook,
    stub_solution_code,
    student_notebook,
)

FIXTURE = Path(__file__).parent / "fixtures" / "99_student_fixture.ipynb"


@pytest.fixture(scope="module")
def full():
    return nbformat.read(FIXTURE, as_version=4)


@pytest.fixture(scope="module")
def student(full):
    nb, stubbed = student_notebook(full, FIXTURE.name)
    return nb, stubbed


def _sources(nb) -> str:
    return "\n".join(cell.source for cell in nb.cells)


def test_marked_solution_becomes_a_stub_at_the_markers_indentation(student):
    nb, stubbed = student
    cell = next(c for c in nb.cells if "def double" in c.source)
    assert cell.source == (
        "def double(x):\n"
        '    """Return twice x."""\n'
        f"    {STUB_COMMENT}\n"
        f"    {STUB}\n"
        "\n"
        "\n"
        "check_double(double)"
    )
    assert "solution" not in cell.metadata.get("tags", [])
    assert stubbed == [cell.id]


def test_the_student_fixture_runs_and_its_check_says_not_implemented(student, tmp_path):
    nb, stubbed = student
    path = tmp_path / FIXTURE.name
    nbformat.write(nb, path)
    assert run_student_notebook(path, stubbed) == []
    assert leftovers(nbformat.read(path, as_version=4)) == []  # executed in memory only


def test_the_run_fails_when_a_stub_raises_at_the_top_level(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION\nprint(answer)")])
    nb.cells[0].metadata["tags"] = ["solution"]
    student, stubbed = student_notebook(nb)
    path = tmp_path / "top_level.ipynb"
    nbformat.write(student, path)
    problems = run_student_notebook(path, stubbed)
    assert len(problems) == 1 and "NotImplementedError" in problems[0]


def test_the_run_fails_when_a_check_does_not_say_not_implemented(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "def check_f(func):\n    print('正解です')\n\n\n"
        "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n\n\ncheck_f(f)")])
    nb.cells[0].metadata["tags"] = ["solution"]
    student, stubbed = student_notebook(nb)
    path = tmp_path / "silent_check.ipynb"
    nbformat.write(student, path)
    problems = run_student_notebook(path, stubbed)
    assert len(problems) == 1 and "未実装" in problems[0]


def test_the_run_fails_when_a_check_shows_a_bare_true_or_false(tmp_path):
    """A check shows its verdict's line only: a value printed under it (a bare True or
    False) is a leftover the learner cannot read, so it is a problem."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "def check_f(func):\n    print('【未実装】f はまだ実装されていません。')\n"
        "    return False\n\n\n"
        "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n\n\ncheck_f(f)")])
    nb.cells[0].metadata["tags"] = ["solution"]
    student, stubbed = student_notebook(nb)
    path = tmp_path / "bare_false.ipynb"
    nbformat.write(student, path)
    problems = run_student_notebook(path, stubbed)
    assert len(problems) == 1 and "返り値 'False'" in problems[0]


def test_unmarked_solution_cells_are_removed(student):
    nb, _ = student
    assert "assert double(3) == 6" not in _sources(nb)
    assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)


def test_markdown_from_solution_start_to_solution_end_is_removed(student):
    nb, _ = student
    text = _sources(nb)
    for gone in ("solution-start", "solution-end", "解説：", "解答の途中にある説明"):
        assert gone not in text


def test_the_stub_follows_its_exercise(student):
    nb, _ = student
    index = next(i for i, c in enumerate(nb.cells) if "### 練習問題 ex99-double" in c.source)
    assert "def double" in nb.cells[index + 1].source


def test_one_cell_solution_blocks_are_cut_and_the_rest_of_the_cell_stays(student):
    nb, _ = student
    text = _sources(nb)
    for gone in ("答えは秘密です", "秘密のコード", "コロンで囲んだ解答"):
        assert gone not in text
    cell = next(c for c in nb.cells if "### 練習問題 ex99-think" in c.source)
    assert cell.source.endswith("この段落は解答の外なので残ります。")
    assert "````" not in cell.source


def test_a_cell_that_was_only_a_solution_is_removed(full, student):
    nb, _ = student
    assert all(c.source.strip() for c in nb.cells)
    # the note and 2 answer cells (after the two think-exercises) are added; 2
    # solution-start..end markdown + the end, 1 unmarked code cell, and the colon-fence
    # solution cell are gone
    assert len(nb.cells) == len(full.cells) + 1 + 2 - 3 - 1 - 1


def test_exercises_and_prose_stay(full, student):
    nb, _ = student
    text = _sources(nb)
    for label in ("ex99-double", "ex99-think", "ex99-colon"):
        assert f"### 練習問題 {label}\n" in text
    assert "**（実装・約 15 分）** 関数 `double(x)` を書いてください。" in text
    assert "## まとめ" in text and "# 99 フィクスチャの章" in text


def test_exercise_fences_become_plain_headings(student):
    nb, _ = student
    text = _sources(nb)
    for fence in ("{exercise}", "{exercise-start}", "{exercise-end}", ":label:"):
        assert fence not in text
    assert "### 練習問題 ex99-double\n\n**（実装・約 15 分）**" in text


def test_each_think_exercise_is_followed_by_an_answer_cell(student):
    nb, _ = student
    after = [nb.cells[i + 1].source for i, c in enumerate(nb.cells[:-1])
             if "（考える" in c.source]
    assert len(after) == 2 and all(s == ANSWER_CELL for s in after)
    implement = next(i for i, c in enumerate(nb.cells) if "（実装" in c.source)
    assert nb.cells[implement + 1].source != ANSWER_CELL


def test_outputs_and_execution_counts_are_cleared(full, student):
    nb, _ = student
    assert any(c.get("outputs") for c in full.cells)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_metadata_keeps_the_kernelspec_and_chapter_and_drops_widget_state(full, student):
    nb, _ = student
    assert "widgets" in full.metadata
    assert nb.metadata.kernelspec == full.metadata.kernelspec
    assert set(nb.metadata) == {"kernelspec", "language_info", "attnlab"}
    assert nb.metadata.attnlab == {"chapter": "99"}  # which chapter, for scripts/grade.py


def test_a_japanese_note_is_on_top(student):
    nb, _ = student
    note = nb.cells[0]
    assert note.cell_type == "markdown"
    assert NOTE_MARK in note.source and "解答は含まれていません" in note.source
    assert "未実装" in note.source and "check_" in note.source


def test_the_full_edition_is_not_changed(full):
    before = copy.deepcopy(full)
    student_notebook(full)
    assert full == before


def test_leftovers_finds_every_trace_of_a_solution_in_the_full_edition(full):
    found = "\n".join(leftovers(full))
    for problem in ("注記がありません", "タグ solution", "BEGIN SOLUTION", "END SOLUTION",
                    "解答のブロック", "出力が残っています"):
        assert problem in found


def test_the_student_edition_has_no_leftovers(student):
    nb, _ = student
    assert leftovers(nb) == []


def test_code_without_markers_is_not_stubbed():
    assert stub_solution_code("x = 1\nprint(x)") is None


def test_several_blocks_and_top_level_markers():
    source = ("### BEGIN SOLUTION\na = 1\n### END SOLUTION\nb = 2\n"
              "  # BEGIN SOLUTION\n  c\n  # END SOLUTION")
    assert stub_solution_code(source) == (
        f"{STUB_COMMENT}\n{STUB}\nb = 2\n  {STUB_COMMENT}\n  {STUB}"
    )


@pytest.mark.parametrize("source, message", [
    ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", "対応する END SOLUTION がありません"),
    ("def f():\n    return 1\n    ### END SOLUTION\n", "BEGIN SOLUTION のない END SOLUTION"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "もう一度 BEGIN SOLUTION"),
])
def test_unbalanced_markers_are_a_japanese_value_error(source, message):
    with pytest.raises(ValueError, match=message):
        stub_solution_code(source, "セル 3：")


def test_an_unclosed_solution_start_is_a_japanese_value_error(full):
    broken = copy.deepcopy(full)
    broken.cells = [c for c in broken.cells if "solution-end" not in c.source]
    with pytest.raises(ValueError, match="solution-end がありません"):
        student_notebook(broken, "broken.ipynb")


def test_a_solution_block_keeps_text_before_and_after_it():
    text = "前の文。\n\n```{solution} ex\n:class: dropdown\n答え\n```\n\n後の文。"
    assert remove_solution_blocks(text) == "前の文。\n\n後の文。"


def test_a_nested_fence_does_not_close_the_solution_block():
    text = "````{solution} ex\n```python\nsecret()\n```\nまだ解答\n````\n残る"
    assert remove_solution_blocks(text) == "残る"


@pytest.mark.parametrize("path", chapter_notebooks(), ids=lambda p: p.stem)
def test_every_chapter_converts_without_leftovers(path):
    nb, _ = student_notebook(nbformat.read(path, as_version=4), path.name)
    assert leftovers(nb) == []
    assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)


def test_the_same_chapter_gives_the_same_student_file(full):
    """The cells the edition adds get fixed ids, so `make student` twice writes the same
    bytes (an instructor can diff two editions)."""
    first, _ = student_notebook(full, FIXTURE.name)
    second, _ = student_notebook(full, FIXTURE.name)
    assert nbformat.writes(first) == nbformat.writes(second)
    assert first.cells[0].id == "student-note"


@pytest.mark.parametrize("jobs", ["0", "two", ""])
def test_the_number_of_jobs_must_be_a_positive_integer_or_auto(jobs, tmp_path, capsys):
    args = ["--test", str(tmp_path / "student"), "--jobs"] + ([jobs] if jobs else [])
    assert main(args) == 2
    assert "--jobs" in capsys.readouterr().err
    assert not (tmp_path / "student").exists()  # refused before writing anything
