"""The book's design checks and fixes (a designer's read of the built pages) that run
without a browser: caption numbers, the text size a figure's PNG records, the list of
known findings, the 講師向け tables' units."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from attnlab.plotting import FIGURE_DPI, MIN_TEXT_PX, PNG_SCALE, figure_to_png, new_figure  # noqa: E402
from book_ext.book_fixes import separate_caption_numbers  # noqa: E402
from book_ext.instructor_page import NBSP, grading_markdown, minutes  # noqa: E402
from tests.e2e.browser_test import KNOWN_UNTIL_PASS_2, DesignFindings, figure_text_px  # noqa: E402


def test_a_caption_number_is_followed_by_a_separator_not_a_space():
    body = ('<figcaption><p><span class="caption-number">図 2 </span>'
            '<span class="caption-text">5 個のキー</span></p></figcaption>')
    out = separate_caption_numbers(body)
    assert '<span class="caption-number">図 2</span><span class="caption-sep">：</span>' in out
    assert out.endswith('<span class="caption-text">5 個のキー</span></p></figcaption>')
    assert separate_caption_numbers(out) == out  # once only


@pytest.mark.parametrize(("scale", "shown", "expected"), [
    (1, 340, 9 / 72 * FIGURE_DPI),  # drawn at 100 dpi, shown at its size
    (PNG_SCALE, 340, 9 / 72 * FIGURE_DPI),  # drawn at 200 dpi, shown at half its pixels
    (1, 170, 9 / 72 * FIGURE_DPI / 2),  # squeezed into half the width
])
def test_the_text_size_a_reader_sees_comes_from_the_pngs_record(tmp_path, scale, shown,
                                                                expected):
    fig, ax = new_figure((3.4, 2.0))
    ax.set_title("題", fontsize=11)
    ax.tick_params(labelsize=9)
    png = tmp_path / "f.png"
    png.write_bytes(figure_to_png(fig, scale=scale))
    assert figure_text_px(png, shown, 340 * scale) == pytest.approx(expected)


def test_a_png_without_the_record_has_no_text_size(tmp_path):
    from PIL import Image

    png = tmp_path / "old.png"
    Image.new("RGB", (10, 10)).save(png)
    assert figure_text_px(png, 10, 10) is None


def test_known_findings_are_listed_and_stale_ones_are_problems():
    design = DesignFindings((("p", "text-size", "fig-1", "今日 9 px"),
                             ("p", "text-size", "fig-2", "今日 8 px")))
    problems = []
    design.add(problems, "p", "text-size", "fig-1", "図 fig-1 の字が小さい")
    design.add(problems, "p", "text-size", "fig-3", "図 fig-3 の字が小さい")
    assert problems == ["図 fig-3 の字が小さい"]
    assert design.listed == ["p: 図 fig-1 の字が小さい（今日 9 px）"]
    (stale,) = design.stale()
    assert "fig-2" in stale and "消して" in stale


def test_the_known_list_names_pages_checks_and_figures():
    checks = {"old-style-figure", "text-size", "math-backslash", "wide-equation", "unit-wrap",
              "plain-math", "clipped-equation"}
    keys = [(page, check, key) for page, check, key, _ in KNOWN_UNTIL_PASS_2]
    assert len(keys) == len(set(keys))
    for page, check, key, note in KNOWN_UNTIL_PASS_2:
        assert page.startswith(("notebooks/", "book/")) and check in checks and key and note
    assert MIN_TEXT_PX == 11


def test_minutes_never_break_from_their_unit_and_grading_names_chapters_by_number():
    assert minutes(12) == f"約{NBSP}12{NBSP}分" and minutes(3, about=False) == f"3{NBSP}分"
    rows = grading_markdown().splitlines()[2:]
    chapters = [row.split("|")[1].strip() for row in rows]
    named = [c for c in chapters if c]
    assert named and all(c.startswith("{doc}`") and c[6:8].isdigit() for c in named)
    assert len(named) == len({c[6:8] for c in named})  # each chapter once


# --- issue 48: the book on a phone ------------------------------------------------------

def test_a_sized_image_keeps_its_aspect_ratio_instead_of_a_fixed_height():
    from book_ext.book_fixes import figure_boxes

    body = ('<img alt="図" class="attnlab-figure attnlab-light" src="../_images/a.png" '
            'style="width: 691.5px; height: 212.5px;" />'
            '<img alt="状態" class="attnlab-live-state attnlab-figure attnlab-dark" '
            'loading="lazy" src="b.png" style="width: 340px; height: 200px;" />')
    out = figure_boxes(body)
    assert "height:" not in out
    assert 'style="width: 691.5px; aspect-ratio: 691.5 / 212.5;"' in out
    assert 'style="width: 340px; aspect-ratio: 340 / 200;"' in out
    # a notebook figure opens at full size (its own file); a live figure's state does not
    assert out.startswith('<a class="attnlab-figure-open attnlab-light" href="../_images/a.png"')
    assert out.count("<a ") == 1 and out.count("</a>") == 1
    # its words under the figure (shown on a phone only), inside the one link
    assert '<span class="attnlab-figure-cue">図を原寸で開く</span></a>' in out
    assert figure_boxes(out) == out  # once only


@pytest.mark.parametrize(("text", "kept"), [
    ("3 つのシード", "3\u00a0つのシード"),
    ("第 4 章で調べます", "第\u00a04\u00a0章で調べます"),
    ("図 1 にまとめます", "図\u00a01\u00a0にまとめます"),
    ("約 5% の差", "約\u00a05%\u00a0の差"),
    ("64 GiB と 12 ms", "64\u00a0GiB と 12\u00a0ms"),
    ("RoPE の回転", "RoPE の回転"),  # a Latin word keeps its ordinary space
    ("d = 64 で", "d = 64\u00a0で"),
    ("比は 1 ± 0.15 に", "比は 1\u00a0±\u00a00.15\u00a0に"),  # a number with its tolerance
])
def test_a_number_keeps_its_counter(text, kept):
    from book_ext.book_fixes import keep_numbers

    assert keep_numbers(text) == kept
    assert keep_numbers(kept) == kept


def test_the_build_keeps_numbers_in_text_but_not_in_code_or_math_and_sets_section_numbers_apart():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    from book_ext.book_fixes import KeepNumbers

    document = new_document("test", get_default_settings(Parser))
    section = nodes.section()
    section += nodes.title("", "2. 5 種類のモデルを 3 つのシードで")
    paragraph = nodes.paragraph("", "", nodes.Text("第 4 章 "), nodes.literal("", "x = 3 つ"),
                                nodes.math("", "3 つ"))
    section += paragraph
    document += section
    transform = KeepNumbers(document)
    transform.run()
    title = section[0]
    assert title[0].astext() == "2." and "attnlab-section-number" in title[0]["classes"]
    assert title[1].astext() == "5\u00a0種類のモデルを 3\u00a0つのシードで"
    assert paragraph[0].astext() == "第\u00a04\u00a0章 "
    assert paragraph[1].astext() == "x = 3 つ" and paragraph[2].astext() == "3 つ"


def test_a_solutions_title_names_its_exercise_in_plain_text():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document
    from sphinx_exercise.nodes import solution_node

    from book_ext.book_fixes import SolutionTitleWithoutLink

    document = new_document("test", get_default_settings(Parser))
    solution = solution_node(target_label="ex03-split-heads")
    link = nodes.reference("", "", nodes.Text(" 練習 6"), refid="ex03-split-heads")
    solution += nodes.title("", "", nodes.Text("解答"), link)
    solution += nodes.paragraph("", "答え")
    document += solution
    SolutionTitleWithoutLink(document).run()
    title = solution[0]
    assert title.astext() == "練習 6 の解答ex03-split-heads"
    assert not list(title.findall(nodes.reference))  # no link inside the fold's button
    # the label small and muted after the Japanese title (designer's third read, N3)
    (label,) = title.findall(nodes.inline)
    assert label["classes"] == ["attnlab-exercise-label"]
    assert label.astext() == "ex03-split-heads"
    SolutionTitleWithoutLink(document).run()
    assert solution[0].astext() == "練習 6 の解答ex03-split-heads"  # once only


def test_an_exercises_title_is_its_head_line_and_its_label_stays_muted():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document
    from sphinx_exercise.nodes import exercise_enumerable_node

    from book_ext.book_fixes import ExerciseLabelInTitle

    document = new_document("test", get_default_settings(Parser))
    exercise = exercise_enumerable_node(label="ex01-implement")
    exercise += nodes.title("", "")
    exercise += nodes.paragraph("", "", nodes.Text(""),  # as MyST starts it
                                nodes.strong("", "（実装・約 20 分）"),
                                nodes.Text(" NumPy だけで書いてください。"))
    untitled = exercise_enumerable_node(label="ex01-think")  # no head line: the label only
    untitled += nodes.title("", "")
    untitled += nodes.paragraph("", "考えてください。")
    document += [exercise, untitled]
    ExerciseLabelInTitle(document).run()
    title, paragraph = exercise[0], exercise[1]
    assert title.astext() == "（実装・約 20 分）ex01-implement"
    (label,) = title.findall(nodes.inline)
    assert label["classes"] == ["attnlab-exercise-label"]
    assert paragraph.astext() == "NumPy だけで書いてください。"  # not said twice
    assert untitled[0].astext() == "ex01-think"
    assert untitled[1].astext() == "考えてください。"
