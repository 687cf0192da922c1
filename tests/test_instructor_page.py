"""The generated tables of the 講師向け page (book_ext/instructor_page.py).

The parser runs on the fixture notebook (tests/fixtures/99_student_fixture.ipynb: exercises
in the start/end and one-cell forms, with and without minutes) and on every real chapter.
"""

import re
from pathlib import Path

import nbformat
import pytest

from book_ext.instructor_page import (
    CHARS_PER_MINUTE,
    MINUTES_PER_CODE_CELL,
    Chapter,
    generate,
    launch_config,
    read_chapter,
    read_chapters,
    time_markdown,
)
from scripts.exercises import Exercise, parse_exercises

FIXTURE = Path(__file__).parent / "fixtures" / "99_student_fixture.ipynb"
CHAPTERS = read_chapters()


def test_exercises_of_the_fixture_with_kind_minutes_and_first_sentence():
    chapter = read_chapter(FIXTURE)
    assert chapter.exercises == (
        Exercise("ex99-double", "実装", 15, "関数 `double(x)` を書いてください。"),
        Exercise("ex99-think", "考える", None, "なぜ 2 倍にするのでしょうか。"),
        Exercise("ex99-colon", "考える", 5, "コロンのフェンスの解答を考えてください。"),
    )


def test_title_is_the_first_heading_and_only_text_before_the_exercises_is_counted():
    chapter = read_chapter(FIXTURE)
    nb = nbformat.read(FIXTURE, as_version=4)
    assert chapter.title == "99 フィクスチャの章"
    assert chapter.page == "notebooks/99_student_fixture"
    assert chapter.code_cells == 1  # the cell before 練習問題; solutions and later cells not
    assert chapter.prose_chars == len(re.sub(r"\s", "", nb.cells[0].source))


def test_code_cells_the_book_removes_take_no_reading_time(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 98 タイトル"),
        nbformat.v4.new_code_cell("install()", metadata={"tags": ["remove-cell"]}),
        nbformat.v4.new_code_cell("x = 1"),
    ])
    path = tmp_path / "98_hidden.ipynb"
    nbformat.write(nb, path)
    assert read_chapter(path).code_cells == 1


def test_a_line_break_inside_the_task_joins_without_a_space():
    text = ("```{exercise}\n:label: ex-x\n"
            "**（実装・約 3 分）** 一行目の途中\nから続く文です。次の文。\n```")
    assert parse_exercises(text)[0].first_sentence == "一行目の途中から続く文です。"


def test_a_task_without_head_line_has_no_kind_and_no_minutes():
    text = ("```{exercise-start}\n:label: ex-y\n```\n"
            "何も付いていない問題です。\n```{exercise-end}\n```")
    assert parse_exercises(text) == [Exercise("ex-y", None, None, "何も付いていない問題です。")]


def test_reading_time_rule():
    chapter = Chapter("p", "t", prose_chars=CHARS_PER_MINUTE + 1, code_cells=3, exercises=(
        Exercise("a", "実装", 20, "."), Exercise("b", "考える", 10, ".")))
    assert chapter.reading_minutes == 2 + 3 * MINUTES_PER_CODE_CELL
    assert chapter.exercise_minutes == 30
    assert chapter.total_minutes == chapter.reading_minutes + 30


def test_a_missing_minute_makes_the_total_unknown_and_the_table_says_so():
    chapter = Chapter("p", "t", 10, 1, (Exercise("a", "実装", None, "."),))
    assert chapter.exercise_minutes is None and chapter.total_minutes is None
    table = time_markdown([chapter])
    assert "未記入あり" in table and "全章" not in table
    assert f"{CHARS_PER_MINUTE} 文字" in table and f"{MINUTES_PER_CODE_CELL} 分" in table


def test_launch_links_come_from_the_repository_url(tmp_path):
    (tmp_path / "_config.yml").write_text(
        "repository:\n  url: https://github.com/someone/fork-course.git/\n  branch: dev\n"
        "launch_buttons:\n  notebook_interface: jupyterlab\n"
        "  binderhub_url: https://mybinder.org\n  colab_url: https://colab.research.google.com\n",
        encoding="utf-8")
    launch = launch_config(tmp_path)
    assert launch.binder("notebooks/01_x.ipynb") == (
        "https://mybinder.org/v2/gh/someone/fork-course/dev?urlpath=lab/tree/notebooks/01_x.ipynb")
    assert launch.colab("notebooks/01_x.ipynb") == (
        "https://colab.research.google.com/github/someone/fork-course/blob/gh-pages/"
        "colab/notebooks/01_x.ipynb")


def test_the_launch_table_links_every_chapter():
    text = generate("launch")
    launch = launch_config()
    for chapter in CHAPTERS:
        assert launch.binder(f"{chapter.page}.ipynb") in text
        assert launch.colab(f"{chapter.page}.ipynb") in text


def test_an_unknown_part_is_a_japanese_value_error():
    with pytest.raises(ValueError, match="part='typo'"):
        generate("typo")


def test_every_chapter_and_exercise_is_in_the_exercise_table():
    text = generate("exercises")
    for chapter in CHAPTERS:
        assert chapter.title in text
        for exercise in chapter.exercises:
            assert f"{{ref}}`{exercise.label} <{exercise.label}>`" in text


def test_the_time_table_writes_thousands_with_a_separator():
    """m6 of issue 48: 「12441」 sat beside tables that write 1,342,177,280."""
    table = time_markdown([Chapter("p", "t", 12441, 1, (Exercise("a", "実装", 10, "."),))])
    assert "| 12,441 |" in table and "12441" not in table
