"""The MyST exercise and solution blocks of a chapter, read as text.

One reader for the scripts that need them: the 講師向け page lists the exercises
(``instructor_page.py``), the student edition rewrites them (``make_student.py``) and
``tests/test_notebooks.py`` checks their form. A task starts with a bold head line
``**（実装・約 20 分）**`` or ``**（考える・約 10 分）**``: its kind and minutes.
"""

import re
from dataclasses import dataclass

# An opening fence of a directive: ```{name} or :::{name} (any length of 3 or more).
FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|:{3,})\{(?P<name>[\w-]+)\}")
FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|:{3,})\s*")
HEAD = re.compile(r"^\*\*（(?P<kind>[^・）]+)(?:・約\s*(?P<minutes>\d+)\s*分)?）\*\*\s*")
SENTENCE = re.compile(r"^.*?[。？！]")
KINDS = ("実装", "考える")


def fence_closes(line: str, fence: str) -> bool:
    """CommonMark: a closing fence is the same character, at least as long, and nothing else."""
    stripped = line.strip()
    return (
        len(line) - len(line.lstrip(" ")) <= 3
        and len(stripped) >= len(fence)
        and set(stripped) == {fence[0]}
    )


def directive_names(source: str) -> set[str]:
    """Names of the directives whose fences open in ``source`` (e.g. {"exercise-start"})."""
    return {m["name"] for line in source.split("\n") if (m := FENCE_OPEN.match(line))}


@dataclass(frozen=True)
class Exercise:
    label: str
    kind: str | None  # 実装 / 考える; None if the task has no bold head line
    minutes: int | None  # None if the head line gives none
    first_sentence: str


def parse_exercises(markdown: str) -> list[Exercise]:
    """Every exercise directive (one-cell or start/end form) in a chapter's markdown."""
    lines = markdown.split("\n")
    exercises = []
    for i, line in enumerate(lines):
        opening = FENCE_OPEN.match(line)
        if not opening or opening["name"] not in ("exercise", "exercise-start"):
            continue
        label, j = None, i + 1
        while j < len(lines) and re.match(r"^:[\w-]+:", lines[j]):  # directive options
            label = lines[j].split(":", 2)[2].strip() if lines[j].startswith(":label:") else label
            j += 1
        if j < len(lines) and FENCE_CLOSE.fullmatch(lines[j]):
            j += 1  # the fence that closes exercise-start's own options
        body = []
        while (j < len(lines) and lines[j].strip() and not FENCE_OPEN.match(lines[j])
               and not FENCE_CLOSE.fullmatch(lines[j])):
            body.append(lines[j].strip())
            j += 1
        paragraph = "".join(body)  # Japanese: a line break inside a paragraph is no space
        head = HEAD.match(paragraph)
        task = paragraph[head.end():] if head else paragraph
        sentence = SENTENCE.match(task)
        exercises.append(Exercise(
            label=label or "（ラベルなし）",
            kind=head["kind"] if head else None,
            minutes=int(head["minutes"]) if head and head["minutes"] else None,
            first_sentence=sentence.group(0) if sentence else task,
        ))
    return exercises
