"""The hand-written parts of the 講師向け page (book/instructor.md): learning objectives
for every chapter and key points for every 考える exercise.

The tables of the page are generated from the notebooks (book_ext/instructor_page.py); these
two sections are prose, so these tests keep them in step with the chapters: a chapter or a
考える exercise without its entry fails with its name, and so does an entry for a label
that no chapter has any more (an exercise renamed or rewritten as 実装).
"""

import re
from pathlib import Path

import pytest

from book_ext.instructor_page import read_chapters

PAGE = Path(__file__).resolve().parent.parent / "book" / "instructor.md"
CHAPTERS = read_chapters()


def _section(title: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"book/instructor.md に「## {title}」の節がありません"
    return match.group(1)


def _entries(section: str, head: str) -> dict[str, list[str]]:
    """Each bold head line (matched by ``head``) and the bullets below it."""
    entries, current = {}, None
    for line in section.splitlines():
        if found := re.match(head, line):
            current = found.group(1)
            assert current not in entries, f"{current} が 2 回あります"
            entries[current] = []
        elif current and line.startswith("- "):
            entries[current].append(line[2:])
    return entries


def _objectives() -> dict[str, list[str]]:
    return _entries(_section("学習目標"),
                    r"^\*\*第 \d+ 章\*\* \{doc\}`\.\./(notebooks/\d\d_\w+)`$")


def _key_points() -> dict[str, list[str]]:
    return _entries(_section("考える問題の採点の要点"), r"^\*\*`(ex\d\d-[\w-]+)`\*\*")


def test_every_chapter_has_learning_objectives_and_no_other_page_does():
    objectives = _objectives()
    pages = [chapter.page for chapter in CHAPTERS]
    missing = [page for page in pages if page not in objectives]
    stale = [page for page in objectives if page not in pages]
    assert not missing, f"学習目標のない章: {missing}"
    assert not stale, f"目次にない章の学習目標: {stale}"
    assert list(objectives) == pages, "学習目標は本の章の順に並べてください"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.page)
def test_learning_objectives_say_what_a_student_can_do(chapter):
    objectives = _objectives()[chapter.page]
    assert len(objectives) >= 2
    assert all(re.search(r"(できる|られる|書ける|追える|示せる|述べられる)。$", o)
               for o in objectives), objectives


def test_every_thinking_exercise_has_key_points_and_no_other_label_does():
    thinking = [e.label for c in CHAPTERS for e in c.exercises if e.kind == "考える"]
    points = _key_points()
    missing = [label for label in thinking if label not in points]
    stale = [label for label in points if label not in thinking]
    assert thinking
    assert not missing, f"採点の要点のない考える問題: {missing}"
    assert not stale, f"考える問題にないラベルの採点の要点（改名・削除・実装に変更？）: {stale}"
    assert list(points) == thinking, "採点の要点は本の問題の順に並べてください"


def test_each_entry_of_key_points_has_at_least_three_points():
    for label, bullets in _key_points().items():
        assert len(bullets) >= 3, f"{label}: 要点が {len(bullets)} つしかありません"
