"""The generated parts of the 講師向け page, read from the notebooks at build time.

A local Sphinx extension (``_config.yml`` → ``sphinx.local_extensions``) that adds the
directive ``course-table``; ``book/instructor.md`` uses it four times::

    ```{course-table} exercises
    ```
    ```{course-table} time
    ```
    ```{course-table} launch
    ```
    ```{course-table} grading
    ```
    ```{course-table} citation
    ```

- ``exercises``: per chapter (title = the notebook's first ``# `` heading), every exercise
  with its label, kind, minutes and the first sentence of its task. The task text starts
  with a bold line ``**（実装・約 20 分）**`` (or, without minutes, ``**（実装）**``).
- ``time``: the rule of the time estimate and, per chapter, reading time + exercise minutes.
- ``launch``: the Binder and Colab URL patterns and each chapter's links, all derived from
  ``repository`` and ``launch_buttons`` in ``_config.yml``.
- ``grading``: the exercises ``make grade`` grades (``scripts/grade.py``): per chapter, each
  label with its self-check and the function it calls.
- ``citation``: how to cite the course and how to credit its prose and figures, from
  ``CITATION.cff`` (what GitHub's "Cite this repository" shows) and the licences.

Layout (issue 36): a number and its unit are joined by no-break spaces (``約 12 分`` never
breaks before 分); the grading table names a chapter by its number, once per chapter, so
its rows stay one line high; ``_static/attnlab-typography.css`` sets the column widths
(classes ``course-table-<part>``).

Every notebook, ``_config.yml`` and ``CITATION.cff`` are recorded as dependencies of the
page, so an incremental build regenerates it when one of them changes.

Usage: python -m book_ext.instructor_page   prints the generated Markdown.
"""

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import nbformat

from scripts.book import CONFIG, ROOT, TOC, chapter_notebooks, read_config
from scripts.exercises import Exercise, parse_exercises
from scripts.plain_notebooks import COLAB_FOLDER, PAGES_BRANCH

CHARS_PER_MINUTE = 400  # reading speed for Japanese technical prose (characters per minute)
MINUTES_PER_CODE_CELL = 1  # run a cell and read what it prints or draws
EXERCISES_HEADING = "## 練習問題"
HIDDEN_TAGS = {"remove-cell"}  # cells the book does not show (e.g. the Colab install cell)
NBSP = "\u00a0"  # a no-break space: a number stays on the line of its unit


def minutes(value: int, about: bool = True) -> str:
    """``約 12 分`` with no-break spaces: the number, its unit and 約 never part."""
    return f"{'約' + NBSP if about else ''}{value}{NBSP}分"


@dataclass(frozen=True)
class Chapter:
    page: str  # e.g. notebooks/01_attention_review
    title: str
    prose_chars: int  # non-space characters of the markdown before 練習問題
    code_cells: int  # code cells before 練習問題 that the book shows
    exercises: tuple[Exercise, ...]

    @property
    def reading_minutes(self) -> int:
        return math.ceil(self.prose_chars / CHARS_PER_MINUTE) + (
            MINUTES_PER_CODE_CELL * self.code_cells)

    @property
    def exercise_minutes(self) -> int | None:
        minutes = [e.minutes for e in self.exercises]
        return None if None in minutes else sum(minutes)

    @property
    def total_minutes(self) -> int | None:
        ex = self.exercise_minutes
        return None if ex is None else self.reading_minutes + ex


def read_chapter(path: Path, page: str | None = None) -> Chapter:
    nb = nbformat.read(path, as_version=4)
    title, prose, code_cells, reading = None, [], 0, True
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if title is None and (m := re.search(r"^# (.+)$", cell.source, re.MULTILINE)):
                title = m.group(1).strip()
            if reading:
                before, heading, _ = cell.source.partition(EXERCISES_HEADING)
                prose.append(before)
                reading = not heading
        elif cell.cell_type == "code" and reading and not HIDDEN_TAGS & set(
                cell.metadata.get("tags", [])):
            code_cells += 1
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return Chapter(
        page=page or f"notebooks/{path.stem}",
        title=title or path.stem,
        prose_chars=sum(len(re.sub(r"\s", "", text)) for text in prose),
        code_cells=code_cells,
        exercises=tuple(parse_exercises(markdown)),
    )


def read_chapters(root: Path = ROOT) -> list[Chapter]:
    """Every notebook chapter of ``_toc.yml``, in book order."""
    return [read_chapter(path, path.relative_to(root).with_suffix("").as_posix())
            for path in chapter_notebooks(root)]


def _doc(chapter: Chapter) -> str:
    return f"{{doc}}`{chapter.title} </{chapter.page}>`"


def exercises_markdown(chs: list[Chapter]) -> str:
    parts = []
    for ch in chs:
        rows = [f"**{_doc(ch)}**", ""]
        for ex in ch.exercises:
            time = minutes(ex.minutes) if ex.minutes is not None else "時間は未記入"
            kind = ex.kind or "種類は未記入"
            link = f"{{ref}}`{ex.label} <{ex.label}>`"
            rows.append(f"- {link}（{kind}・{time}）：{ex.first_sentence}")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


def time_markdown(chs: list[Chapter]) -> str:
    rule = (
        f"目安の計算方法：読む時間は、練習問題より前の本文（Markdown）の文字数（空白を除く）を"
        f" 1 分あたり {CHARS_PER_MINUTE} 文字で割って切り上げた分数に、本に表示される"
        f"コードセル 1 個につき {MINUTES_PER_CODE_CELL} 分（実行して出力や図を読む時間）を"
        "足したものです。"
        f"練習問題の時間は、各問題の見出しに書かれた分数の合計です。"
    )
    rows = ["| 章 | 本文の文字数 | コードセル | 読む時間 | 練習問題 | 合計 |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for ch in chs:
        ex = ch.exercise_minutes
        total = ch.total_minutes
        rows.append(
            f"| {_doc(ch)} | {ch.prose_chars:,} | {ch.code_cells} | {minutes(ch.reading_minutes)} "
            f"| {'未記入あり' if ex is None else minutes(ex)} "
            f"| {'—' if total is None else minutes(total)} |")
    known = [ch.total_minutes for ch in chs]
    if chs and None not in known:
        rows.append(f"| **全章** | | | | | **{minutes(sum(known))}** |")
    return rule + "\n\n" + "\n".join(rows)


@dataclass(frozen=True)
class Launch:
    owner: str
    repo: str
    branch: str
    path_to_book: str
    binderhub_url: str
    colab_url: str
    interface: str

    def binder(self, notebook: str) -> str:
        where = "lab/tree" if self.interface == "jupyterlab" else "tree"
        return (f"{self.binderhub_url.rstrip('/')}/v2/gh/{self.owner}/{self.repo}/{self.branch}"
                f"?urlpath={where}/{self._path(notebook)}")

    def colab(self, notebook: str) -> str:
        """The plain-Markdown copy ``make publish`` puts on gh-pages (Colab runs no MyST;
        ``scripts/plain_notebooks.py``), as the book's Colab button opens it."""
        return (f"{self.colab_url.rstrip('/')}/github/{self.owner}/{self.repo}/blob/"
                f"{PAGES_BRANCH}/{COLAB_FOLDER}/{notebook.lstrip('/')}")

    def _path(self, notebook: str) -> str:
        return f"{self.path_to_book.strip('/')}/{notebook}".lstrip("/")


def launch_config(root: Path = ROOT) -> Launch:
    """Repository and launch settings of ``_config.yml`` (the one repository URL)."""
    config = read_config(root)
    repository, buttons = config.get("repository", {}), config.get("launch_buttons", {})
    owner, repo = urlparse(repository["url"]).path.strip("/").removesuffix(".git").split("/")[:2]
    return Launch(
        owner=owner, repo=repo, branch=repository.get("branch", "main"),
        path_to_book=repository.get("path_to_book") or "",
        binderhub_url=buttons.get("binderhub_url", "https://mybinder.org"),
        colab_url=buttons.get("colab_url", "https://colab.research.google.com"),
        interface=buttons.get("notebook_interface", "classic"),
    )


def launch_markdown(chs: list[Chapter], launch: Launch) -> str:
    folder = str(Path(chs[0].page).parent) if chs else "notebooks"
    pattern = f"{folder}/<ノートブック>"
    rows = [
        "Binder：", "", "```text", launch.binder(pattern), "```", "",
        "Colab：", "", "```text", launch.colab(pattern), "```", "",
    ]
    if chs:
        rows += [f"`<ノートブック>` には `{Path(chs[0].page).name}.ipynb` のような"
                 "ファイル名が入ります。章ごとのリンクは次のとおりです。", ""]
    rows += ["| 章 | Binder | Colab |", "| --- | --- | --- |"]
    for ch in chs:
        path = f"{ch.page}.ipynb"
        rows.append(f"| {_doc(ch)} | [Binder で開く]({launch.binder(path)}) "
                    f"| [Colab で開く]({launch.colab(path)}) |")
    return "\n".join(rows)


def generate(part: str, root: Path = ROOT) -> str:
    chs = read_chapters(root)
    if part == "exercises":
        return exercises_markdown(chs)
    if part == "time":
        return time_markdown(chs)
    if part == "launch":
        return launch_markdown(chs, launch_config(root))
    if part == "grading":
        return grading_markdown(root)
    if part == "citation":
        return citation_markdown(root)
    raise ValueError(f"part={part!r} は exercises, time, launch, grading, citation のどれかです")


def grading_markdown(root: Path = ROOT) -> str:
    """The columns of the grader's table: per chapter, each graded exercise and its check."""
    from scripts.grade import read_chapters as grading_chapters

    rows = ["| 章 | 練習問題 | 自己チェック | 学生が書く関数 |", "| --- | --- | --- | --- |"]
    for ch in grading_chapters(root):
        for number, task in enumerate(ch.tasks):
            chapter = (f"{{doc}}`{ch.name[:2]} <../notebooks/{ch.name}>`" if number == 0
                       else "")  # the number, once: the title is in the tables above
            rows.append(f"| {chapter} | {task.label} | `{task.check}` | `{task.function}` |")
    return "\n".join(rows)


CITATION = "CITATION.cff"


def citation_markdown(root: Path = ROOT) -> str:
    """How to cite the course (from ``CITATION.cff``) and to credit what is reused."""
    import yaml

    from scripts.make_student import CODE_LICENCE_URL, CONTENT_LICENCE_URL

    cff = yaml.safe_load((root / CITATION).read_text(encoding="utf-8"))
    authors = "、".join(a.get("name") or f"{a['family-names']} {a['given-names']}"
                       for a in cff["authors"])
    year = str(cff["date-released"])[:4]
    title, version, url = cff["title"], cff["version"], cff["repository-code"]
    key = f"{urlparse(url).path.strip('/').split('/')[0]}{year}"
    # text blocks: copied as they are, the URLs whole (the theme shortens a link to
    # GitHub to OWNER/REPO), each line within the book's code block
    return "\n".join([
        "リポジトリの `CITATION.cff` から作った書き方です。GitHub のリポジトリのページの"
        "「Cite this repository」も同じファイルから、APA と BibTeX の形を示します。",
        "",
        "```text",
        f"{authors}（{year}）『{title}』",
        f"バージョン {version}。{url}",
        "```",
        "",
        "```bibtex",
        f"@misc{{{key},",
        f"  author = {{{{{authors}}}}},",
        f"  title  = {{{title}}},",
        f"  year   = {{{year}}},",
        f"  note   = {{バージョン {version}}},",
        f"  url    = {{{url}}},",
        "}",
        "```",
        "",
        f"文章と図は [CC BY 4.0]({CONTENT_LICENCE_URL}) なので、授業のスライドや自分の教材に"
        "使い、改変し、配布できます。そのときは、作者・題名・出典の URL・ライセンスと、"
        "改変したならその旨を、たとえば次のように添えてください。",
        "",
        "```text",
        f"出典：{authors}『{title}』",
        url,
        f"CC BY 4.0（{CONTENT_LICENCE_URL}）",
        "図を一部改変。",
        "```",
        "",
        f"コードは [MIT ライセンス]({CODE_LICENCE_URL})です。コードを自分のリポジトリに"
        "写すときは、リポジトリの `LICENSE`（著作権の表示と許諾の文）も一緒に含めてください。",
    ])


def setup(app):
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    class CourseTable(SphinxDirective):
        required_arguments = 1

        def run(self):
            part = self.arguments[0]
            for path in [*chapter_notebooks(), ROOT / CONFIG, ROOT / TOC, ROOT / CITATION]:
                self.env.note_dependency(str(path))
            try:
                text = generate(part)
            except ValueError as err:
                raise self.error(str(err)) from err
            container = nodes.container(classes=["course-table", f"course-table-{part}"])
            self.state.nested_parse(StringList(text.split("\n"), source=self.get_source_info()[0]),
                                    self.content_offset, container)
            return [container]

    app.add_directive("course-table", CourseTable)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    for name in ("exercises", "time", "launch", "grading", "citation"):
        print(f"<!-- {name} -->\n{generate(name)}\n")
    sys.exit(0)
