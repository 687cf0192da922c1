"""The notebooks outside the book read right (issue 47): no MyST in any notebook a student
receives, one name per exercise in the book and the student edition, no grading markers in
the book's solutions."""

import re
from pathlib import Path

import nbformat
import pytest
from docutils import nodes
from docutils.utils import new_document

from book_ext.book_fixes import separate_caption_numbers, strip_markers_from_code
from scripts.book import ROOT, chapter_notebooks, toc_pages
from scripts.exercises import exercise_name, exercise_numbers, parse_exercises
from scripts.make_student import strip_solution_markers, student_notebook
from scripts.plain_markdown import MYST_LEFT, author_year, book_index, plain_markdown

PAGE = "notebooks/03_split_and_concat"
BUILT = ROOT / "_build" / "html"


@pytest.fixture(scope="module")
def index():
    return book_index()


@pytest.fixture(scope="module")
def student_editions():
    return {path.stem: student_notebook(nbformat.read(path, as_version=4), path.name)[0]
            for path in chapter_notebooks()}


def test_no_myst_is_left_in_any_chapter_a_student_receives(student_editions):
    assert len(student_editions) == len(chapter_notebooks()) >= 11
    left = [f"{name} セル {i}: {m.group()!r}"
            for name, nb in student_editions.items()
            for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
            for m in MYST_LEFT.finditer(cell.source)]
    assert not left, left


def test_the_detector_finds_every_form_of_myst():
    for raw in ("{cite}`vaswani2017attention`", "{cite:p}`a`", "{ref}`x <x>`", "{doc}`y`",
                "```{exercise-start}", ":::{note}", "````{solution-start} ex", "(fig-x)=",
                "% a comment", "+++"):
        assert MYST_LEFT.search(f"前\n{raw}\n後"), raw
    for plain in ("`{'a': 1}`", "$\\{a\\}$", "```python", "[図 1](https://x/#fig)"):
        assert not MYST_LEFT.search(plain), plain


def test_the_full_notebooks_do_have_myst(student_editions):
    # the check above is not vacuous: the sources it starts from are full of it
    sources = [cell.source for path in chapter_notebooks()
               for cell in nbformat.read(path, as_version=4).cells
               if cell.cell_type == "markdown"]
    assert sum(len(MYST_LEFT.findall(s)) for s in sources) > 100


# --- citations, references, directives ---------------------------------------------------------

def test_a_citation_is_author_and_year_linked_to_the_references_page(index):
    text = plain_markdown("4 段でできています {cite}`vaswani2017attention`。", PAGE, index)
    url = index.url("book/references")
    assert url == ("https://attnlab.github.io/mha-positional-encoding-course/"
                   "book/references.html")
    assert text == f"4 段でできています [Vaswani ら（2017）]({url})。"
    two = plain_markdown("{cite:p}`vaswani2017attention,jain2019attention`", PAGE, index)
    assert two == f"[Vaswani ら（2017）]({url})、[Jain と Wallace（2019）]({url})"


def test_every_key_cited_by_a_chapter_has_its_authors(index):
    keys = {key.strip() for path in chapter_notebooks()
            for cell in nbformat.read(path, as_version=4).cells
            for m in re.finditer(r"\{cite[\w:]*\}`([^`]*)`", cell.source)
            for key in m.group(1).split(",")}
    assert keys and keys <= set(index.citations), keys - set(index.citations)


@pytest.mark.parametrize("authors, year, expected", [
    ("Shazeer, Noam", "2019", "Shazeer（2019）"),
    ("Jain, Sarthak and Wallace, Byron C.", "2019", "Jain と Wallace（2019）"),
    ("Vaswani, Ashish and Kaiser, {\\L}ukasz and Polosukhin, Illia", "2017", "Vaswani ら（2017）"),
    ("Olsson, Catherine and others", "2022", "Olsson ら（2022）"),
    ("Ko{\\v{c}}isk{\\'y}, Tom{\\'a}{\\v{s}}", "2018", "Kočiský（2018）"),
])
def test_author_year(authors, year, expected):
    assert author_year(authors, year) == expected


def test_references_become_links_to_the_published_pages(index):
    base = index.base_url
    ref = plain_markdown("（練習問題 {ref}`ex01-variance <ex01-variance>`）",
                         "notebooks/01_attention_review", index)
    assert ref == (f"（[練習 2（ex01-variance）]({base}notebooks/01_attention_review.html"
                   "#ex01-variance)）")
    numref = plain_markdown("（{numref}`fig-01-shapes`）", "notebooks/01_attention_review", index)
    assert numref == f"（[図 1]({base}notebooks/01_attention_review.html#fig-01-shapes)）"
    doc = plain_markdown("{doc}`第 9 章 <09_context_extension>` と {doc}`../book/references`",
                         "notebooks/07_learned_positions", index)
    assert doc == (f"[第 9 章]({base}notebooks/09_context_extension.html) と "
                   f"[参考文献]({base}book/references.html)")


def test_other_roles_and_directives_become_plain_markdown(index):
    text = plain_markdown(
        "(sec-x)=\n% 注釈\n## 節\n\n{math}`a^2` と {term}`スコア`。\n\n"
        "```{note}\n本文 {cite}`vaswani2017attention`。\n```\n\n"
        ":::{admonition} 題\n中身\n:::\n\n```{math}\nx = 1\n```", PAGE, index)
    assert not MYST_LEFT.search(text), text
    assert "## 節\n\n$a^2$ と スコア。" in text
    assert "> **注**\n>\n> 本文 [Vaswani ら（2017）]" in text
    assert "> **題**\n>\n> 中身" in text
    assert "$$\nx = 1\n$$" in text


# --- one name per exercise ------------------------------------------------------------------------

def _book_markdown(page: str) -> str:
    path = ROOT / f"{page}.ipynb"
    if path.exists():
        nb = nbformat.read(path, as_version=4)
        return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    md = ROOT / f"{page}.md"
    return md.read_text(encoding="utf-8") if md.exists() else ""


def test_exercises_are_numbered_through_the_book_in_toc_order():
    numbers = exercise_numbers(_book_markdown(page) for page in toc_pages())
    labels = [e.label for page in toc_pages() for e in parse_exercises(_book_markdown(page))]
    assert list(numbers) == labels and list(numbers.values()) == list(range(1, len(labels) + 1))
    assert numbers["ex03-split-heads"] == 6  # the walkthrough saw 「練習 6」 in the book
    assert exercise_name("ex03-split-heads", numbers) == "練習 6（ex03-split-heads）"
    nonumber = "```{exercise-start}\n:label: a\n:nonumber:\n```\n```{exercise-end}\n```"
    assert exercise_numbers([nonumber, "```{exercise}\n:label: b\n```"]) == {"b": 1}


def test_every_student_heading_names_the_exercise_as_the_book_does(student_editions, index):
    for name, nb in student_editions.items():
        full = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        labels = [e.label for c in full.cells if c.cell_type == "markdown"
                  for e in parse_exercises(c.source)]
        headings = [m.group(1) for c in nb.cells if c.cell_type == "markdown"
                    for m in re.finditer(r"^### (練習.*)$", c.source, re.MULTILINE)]
        assert labels and headings == [
            f"練習 {index.exercise_numbers[label]}（{label}）" for label in labels], name


# --- the book: labels in the boxes, no grading markers -------------------------------------

def test_the_markers_are_stripped_from_the_books_code():
    code = ("def f(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n\n\n"
            "check_f(f)")
    assert strip_solution_markers(code) == "def f(x):\n    return 2 * x\n\n\ncheck_f(f)"
    document = new_document("test")
    document += nodes.literal_block(code, code)
    document += nodes.literal_block("print(1)", "print(1)")
    assert strip_markers_from_code(document) == 1
    block = next(iter(document.findall(nodes.literal_block)))
    assert "SOLUTION" not in block.astext()
    assert block.rawsource == block.astext()  # Sphinx highlights only when they agree


def test_a_label_after_the_number_gets_no_separator():
    assert separate_caption_numbers(
        '<span class="caption-number">練習 6 </span>（ex03-split-heads）') == (
        '<span class="caption-number">練習 6</span>（ex03-split-heads）')
    assert separate_caption_numbers('<span class="caption-number">図 2 </span>本文') == (
        '<span class="caption-number">図 2</span><span class="caption-sep">：</span>本文')


@pytest.mark.skipif(not (BUILT / "notebooks").is_dir(), reason="the book is not built")
def test_the_built_book_names_each_exercise_and_shows_no_marker(index):
    """On a build (make build, or jupyter-book build .): run after building."""
    for page in toc_pages():
        html_path = BUILT / f"{page}.html"
        if not html_path.exists():
            continue
        html = html_path.read_text(encoding="utf-8")
        assert "BEGIN SOLUTION" not in html and "END SOLUTION" not in html, page
        for label in (e.label for e in parse_exercises(_book_markdown(page))):
            number = index.exercise_numbers[label]
            # the task's head line as the title, the label small after it (third read, N3)
            assert re.search(rf"練習 {number}</span>（[^<（）]+）"
                             rf'<span class="attnlab-exercise-label">{re.escape(label)}</span>',
                             html), (page, label)
        for figure, number in index.figure_numbers.items():
            if index.label_pages.get(figure) == page and f'id="{figure}"' in html:
                shown = re.search(rf'id="{figure}".*?caption-number">図 (\d+)', html, re.DOTALL)
                assert shown and int(shown.group(1)) == number, (figure, number)


def test_student_edition_file_names_are_the_books():
    assert {p.stem for p in chapter_notebooks()} == {
        Path(page).name for page in toc_pages() if page.startswith("notebooks/")}
