"""MyST directive fences read with markdown-it (scripts/exercises.py) and what the student
edition (scripts/make_student.py) does with them, on the cases a line-by-line reader gets
wrong: longer fences around shorter ones, ``:::`` fences, closing fences longer than the
opening one, option lines, indentation and unclosed fences.
"""

import pytest

from scripts.exercises import Directive, Exercise, directive_names, directives, parse_exercises
from scripts.make_student import plain_exercise_fences, remove_solution_blocks


def test_a_directive_has_its_name_argument_options_body_and_lines():
    text = ("前の文。\n\n```{solution} ex-a\n:class: dropdown\n:label: sol-a\n答え。\n\n続き。\n```"
            "\n後の文。")
    assert directives(text) == [Directive(
        name="solution", argument="ex-a", options={"class": "dropdown", "label": "sol-a"},
        body=("答え。", "", "続き。"), lines=range(2, 9))]


def test_a_colon_fence_is_a_directive():
    (directive,) = directives(":::{solution} ex-b\n:class: dropdown\nコロンの解答。\n:::\n後")
    assert (directive.name, directive.argument) == ("solution", "ex-b")
    assert directive.options == {"class": "dropdown"}
    assert directive.body == ("コロンの解答。",)
    assert directive.lines == range(0, 4)


@pytest.mark.parametrize("fence", ["````", "`````", "::::"])
def test_a_fence_inside_a_longer_fence_is_content_not_a_directive(fence):
    text = f"{fence}{{solution}} ex\n```{{exercise}}\n:label: inner\n```\n:::{{note}}\n:::\n{fence}"
    assert directive_names(text) == {"solution"}
    assert parse_exercises(text) == []
    assert remove_solution_blocks(text + "\n残る") == "残る"


def test_a_code_example_of_an_exercise_is_not_an_exercise():
    text = "````markdown\n```{exercise}\n:label: fake\n**（実装・約 5 分）** 例。\n```\n````"
    assert directives(text) == []
    assert parse_exercises(text) == []


@pytest.mark.parametrize("closing", ["`````", "```   ", ":::::"])
def test_a_longer_closing_fence_closes(closing):
    opening = ":::" if closing.startswith(":") else "```"
    text = (f"{opening}{{exercise}}\n:label: ex-long\n"
            f"**（考える・約 5 分）** 長い閉じ。\n{closing}\n外の文。")
    (directive,) = directives(text)
    assert directive.lines == range(0, 4)
    assert directive.body == ("**（考える・約 5 分）** 長い閉じ。",)
    assert parse_exercises(text) == [Exercise("ex-long", "考える", 5, "長い閉じ。")]
    assert plain_exercise_fences(text) == (
        "### 練習問題 ex-long\n\n**（考える・約 5 分）** 長い閉じ。\n外の文。")


@pytest.mark.parametrize("inside", ["```", "``` 説明", ":::"])
def test_a_shorter_other_or_annotated_fence_does_not_close(inside):
    text = f"````{{solution}} ex\n{inside}\nまだ解答\n````\n残る"
    assert remove_solution_blocks(text) == "残る"


def test_an_unclosed_fence_runs_to_the_end():
    text = "前\n\n```{solution} ex\n閉じていない解答\n\n次の段落も解答の中"
    (directive,) = directives(text)
    assert directive.lines == range(2, 6)
    assert remove_solution_blocks(text) == "前"


def test_up_to_three_spaces_of_indentation_open_a_fence_and_four_make_a_code_block():
    assert directive_names("   ```{solution} ex\n   答え\n   ```") == {"solution"}
    assert directive_names("    ```{solution} ex\n    答え\n    ```") == set()


def test_options_are_only_the_leading_colon_lines():
    text = ("```{exercise}\n:label: ex-o\n:class: tip\n"
            "**（実装）** 本文。\n:not-an-option: 本文の行\n```")
    (directive,) = directives(text)
    assert directive.options == {"label": "ex-o", "class": "tip"}
    assert directive.body == ("**（実装）** 本文。", ":not-an-option: 本文の行")
    assert parse_exercises(text) == [Exercise("ex-o", "実装", None, "本文。")]


def test_the_label_option_becomes_the_heading_and_other_options_go():
    text = ("前\n\n```{exercise}\n:class: tip\n:label: ex-h\n"
            "**（考える・約 3 分）** 問い。\n```\n\n後")
    assert plain_exercise_fences(text) == (
        "前\n\n### 練習問題 ex-h\n\n**（考える・約 3 分）** 問い。\n\n後")


def test_the_start_end_form_reads_the_paragraph_after_the_start_fence():
    text = ("```{exercise-start}\n:label: ex-s\n``````\n"
            "**（実装・約 7 分）** 一行目\nの続き。二文目。\n```{exercise-end}\n```")
    assert parse_exercises(text) == [Exercise("ex-s", "実装", 7, "一行目の続き。")]
    assert plain_exercise_fences(text) == (
        "### 練習問題 ex-s\n\n**（実装・約 7 分）** 一行目\nの続き。二文目。")


def test_a_start_fence_followed_by_another_fence_has_an_empty_task():
    text = "```{exercise-start}\n:label: ex-e\n```\n```{exercise-end}\n```\n本文の外"
    assert parse_exercises(text) == [Exercise("ex-e", None, None, "")]


def test_a_directive_without_a_label_gets_no_heading():
    assert plain_exercise_fences(":::{exercise}\n本文だけ。\n:::") == "本文だけ。"
    assert parse_exercises(":::{exercise}\n本文だけ。\n:::")[0].label == "（ラベルなし）"


def test_a_fence_without_braces_is_not_a_directive():
    assert directives("```python\nx = 1\n```\n\n:::\nnote\n:::") == []
