"""The MyST directive blocks of a chapter (exercises, solutions), read with markdown-it.

One reader for the scripts that need them: the 講師向け page lists the exercises
(``instructor_page.py``), the student edition rewrites them (``make_student.py``) and
``tests/test_notebooks.py`` checks their form. The fences come from markdown-it with the
colon-fence plugin, as MyST parses them for the book: backtick ``fence`` and ``:::``
``colon_fence`` tokens, whose ``info`` is ``{name} argument`` and whose ``map`` is the
block's lines (fences included). A fence inside a longer fence is part of its content.

A task starts with a bold head line ``**（実装・約 20 分）**`` or ``**（考える・約 10 分）**``:
its kind and minutes.
"""

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin

# CommonMark with MyST's ::: fences (_config.yml enables colon_fence for the book).
MARKDOWN = MarkdownIt("commonmark").use(colon_fence_plugin)
FENCE_TOKENS = ("fence", "colon_fence")
INFO = re.compile(r"\{(?P<name>[\w-]+)\}\s*(?P<argument>.*)")
OPTION = re.compile(r":(?P<key>[\w-]+):(?P<value>.*)")
HEAD = re.compile(r"^\*\*（(?P<kind>[^・）]+)(?:・約\s*(?P<minutes>\d+)\s*分)?）\*\*\s*")
SENTENCE = re.compile(r"^.*?[。？！]")
KINDS = ("実装", "考える")


@dataclass(frozen=True)
class Directive:
    """A fenced directive: ```{name} argument (any fence of backticks or colons)."""

    name: str  # e.g. "exercise-start"
    argument: str  # the rest of the opening line, e.g. a solution's exercise label
    options: dict[str, str]  # the leading ":key: value" lines of the content
    body: tuple[str, ...]  # the lines of the content after the options
    lines: range  # the block's line numbers in the source, its fences included


def _directive(token) -> Directive | None:
    info = INFO.fullmatch(token.info.strip()) if token.type in FENCE_TOKENS else None
    if info is None:
        return None
    content = token.content.split("\n")
    if content[-1] == "":  # the newline that ends the last line
        content.pop()
    options = {}
    while len(options) < len(content) and (option := OPTION.match(content[len(options)])):
        options[option["key"]] = option["value"].strip()
    return Directive(name=info["name"], argument=info["argument"], options=options,
                     body=tuple(content[len(options):]), lines=range(*token.map))


def directives(markdown: str) -> list[Directive]:
    """Every fenced directive of ``markdown``, in order (a nested fence is content)."""
    return [d for token in MARKDOWN.parse(markdown) if (d := _directive(token))]


def directive_names(markdown: str) -> set[str]:
    """Names of the directives in ``markdown`` (e.g. {"exercise-start"})."""
    return {d.name for d in directives(markdown)}


@dataclass(frozen=True)
class Exercise:
    label: str
    kind: str | None  # 実装 / 考える; None if the task has no bold head line
    minutes: int | None  # None if the head line gives none
    first_sentence: str


def _first_paragraph(tokens) -> str:
    """The first paragraph before any fence; lines joined without a space (Japanese)."""
    for index, token in enumerate(tokens):
        if token.type in FENCE_TOKENS:
            break
        if token.type == "paragraph_open":
            return "".join(line.strip() for line in tokens[index + 1].content.split("\n"))
    return ""


def parse_exercises(markdown: str) -> list[Exercise]:
    """Every exercise (one-cell ``{exercise}`` or ``{exercise-start}`` form) in ``markdown``.

    The task is the first paragraph of the one-cell block's body, or the first paragraph
    after ``{exercise-start}``'s fence.
    """
    tokens = MARKDOWN.parse(markdown)
    exercises = []
    for index, token in enumerate(tokens):
        directive = _directive(token)
        if directive is None or directive.name not in ("exercise", "exercise-start"):
            continue
        if directive.name == "exercise":
            paragraph = _first_paragraph(MARKDOWN.parse("\n".join(directive.body)))
        else:
            paragraph = _first_paragraph(tokens[index + 1:])
        head = HEAD.match(paragraph)
        task = paragraph[head.end():] if head else paragraph
        sentence = SENTENCE.match(task)
        exercises.append(Exercise(
            label=directive.options.get("label") or "（ラベルなし）",
            kind=head["kind"] if head else None,
            minutes=int(head["minutes"]) if head and head["minutes"] else None,
            first_sentence=sentence.group(0) if sentence else task,
        ))
    return exercises


#: How an exercise is named outside the book's box: its number in the book and its label.
EXERCISE_NAME = "練習 {number}（{label}）"


def exercise_numbers(pages) -> dict[str, int]:
    """The book's number of every labelled exercise: ``{"ex03-split-heads": 6, …}``.

    ``pages`` are the markdown of the book's pages in ``_toc.yml``'s order (a notebook's
    markdown cells joined). sphinx-exercise numbers with Sphinx's numfig, which counts
    through the whole book when the table of contents is not numbered; an exercise with
    ``:nonumber:`` gets no number and does not count.
    """
    numbers, count = {}, 0
    for markdown in pages:
        for directive in directives(markdown):
            if directive.name not in ("exercise", "exercise-start"):
                continue
            if "nonumber" in directive.options:
                continue
            count += 1
            if directive.options.get("label"):
                numbers[directive.options["label"]] = count
    return numbers


def exercise_name(label: str, numbers: dict[str, int]) -> str:
    """``練習 6（ex03-split-heads）``: the number the book shows and the label;
    ``練習問題 ex99-x`` for an exercise the book does not number (a page outside the book)."""
    if label not in numbers:
        return f"練習問題 {label}"
    return EXERCISE_NAME.format(number=numbers[label], label=label)
