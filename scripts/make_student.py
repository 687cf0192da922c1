"""Write the student edition: every chapter in ``_toc.yml`` without its solutions.

Usage:
    python -m scripts.make_student [OUT]          write OUT/NN_slug.ipynb (default OUT: student/)
    python -m scripts.make_student --test [OUT]   write them, then prove them: no solution left,
                                                  and each runs top to bottom without an error
    python -m scripts.make_student --test --jobs N [OUT]   the same, N chapters at a time
                                                  (N or auto, the default: one per CPU)

What a student notebook keeps and loses (nbconvert preprocessors, applied in this order):

1. ``SolutionCodePreprocessor``: a code cell tagged ``solution`` whose code has nbgrader-style
   markers keeps everything outside ``### BEGIN SOLUTION`` / ``### END SOLUTION``; each marked
   block (markers included) becomes a ``raise NotImplementedError(...)`` stub at the marker's
   indentation, and the cell loses the tag. Cells tagged ``solution`` without markers keep
   the tag and are removed in step 3.
2. ``SolutionMarkdownPreprocessor``: markdown cells that open or close a solution
   (``{solution-start}`` / ``{solution-end}``) and every markdown cell between them are
   marked for removal; a one-cell ``{solution}`` block is cut out of its cell.
3. ``TagRemovePreprocessor`` removes the cells marked in steps 1-2.
4. ``ClearOutputPreprocessor`` clears outputs and execution counts.
5. ``ExercisePreprocessor`` writes each exercise fence as a heading with the book's name
   (``### 練習 6（ex03-split-heads）``) and adds an answer cell after a think-exercise;
   ``PlainMarkdownPreprocessor`` writes every other role and directive as plain Markdown
   (``scripts/plain_markdown.py``: Jupyter, Colab and JupyterLab show no MyST).
6. ``StudentNotePreprocessor`` keeps only the kernelspec and language of the notebook
   metadata, records the chapter number (``attnlab.chapter``, for ``scripts/grade.py``) and
   puts a short note at the top (what to do, and the licences in one line, as the book's
   footer says them).
"""

import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbclient.exceptions import CellExecutionError
from nbconvert.preprocessors import (
    ClearOutputPreprocessor,
    Preprocessor,
    TagRemovePreprocessor,
)

from scripts.book import ROOT, chapter_notebooks, execute_notebook
from scripts.exercises import directive_names, directives, exercise_name, parse_exercises
from scripts.plain_markdown import book_index, plain_markdown

SOLUTION_TAG = "solution"
REMOVE_TAG = "student-remove"
BEGIN = re.compile(r"^(?P<indent>[ \t]*)#+\s*BEGIN SOLUTION\s*$")
END = re.compile(r"^[ \t]*#+\s*END SOLUTION\s*$")
STUB_COMMENT = "# ここにあなたの実装を書きます"
STUB = 'raise NotImplementedError("ここを実装してください")'
#: The licences in one line, as the book's footer says them (_config.yml html.extra_footer).
CONTENT_LICENCE_URL = "https://creativecommons.org/licenses/by/4.0/deed.ja"
CODE_LICENCE_URL = "https://opensource.org/license/mit"
LICENCE_LINE = (f"文章と図は [CC BY 4.0]({CONTENT_LICENCE_URL})、コードは "
                f"[MIT ライセンス]({CODE_LICENCE_URL})で公開しています"
                "（リポジトリの LICENSE-CONTENT と LICENSE）。")
NOTE = (  # one paragraph per line: a line break between Japanese words would show as a space
    "> **学生版**：このノートブックには解答は含まれていません。"
    "実装する練習問題では、`raise NotImplementedError(\"ここを実装してください\")` の行を"
    "あなたのコードに置き換えてください。そのあとのセルの自己チェック（`check_…` で始まる関数）が、"
    "正しいかどうかの判定と、間違っていればよくある原因を表示します。"
    "実装する前に実行すると、自己チェックは「未実装」と表示します。これはエラーではありません。\n"
    ">\n"
    f"> {LICENCE_LINE}"
)
NOTE_MARK = "**学生版**"
CHAPTER_KEY = "attnlab"  # notebook metadata {"chapter": "01"}, read by scripts/grade.py


def stub_solution_code(source: str, where: str = "") -> str | None:
    """Replace each marked block of ``source`` by a stub; None if the code has no markers.

    ``where`` names the cell in the error raised for unbalanced markers.
    """
    lines = source.split("\n")
    if not any(BEGIN.match(line) or END.match(line) for line in lines):
        return None
    out, indent = [], None
    for number, line in enumerate(lines, start=1):
        begin = BEGIN.match(line)
        if begin:
            if indent is not None:
                raise ValueError(f"{where} {number} 行目：BEGIN SOLUTION が閉じる前に"
                                 "もう一度 BEGIN SOLUTION があります")
            indent = begin["indent"]
        elif END.match(line):
            if indent is None:
                raise ValueError(f"{where} {number} 行目：BEGIN SOLUTION のない END SOLUTION です")
            out += [indent + STUB_COMMENT, indent + STUB]
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise ValueError(f"{where}BEGIN SOLUTION に対応する END SOLUTION がありません")
    return "\n".join(out)


def strip_solution_markers(source: str) -> str:
    """``source`` without its ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines (the code
    between them stays): the solution as the book shows it."""
    lines = source.split("\n")
    return "\n".join(line for line in lines if not (BEGIN.match(line) or END.match(line)))


def remove_solution_blocks(source: str) -> str:
    """Cut every one-cell ``{solution}`` directive block out of a markdown source."""
    cut = {n for d in directives(source) if d.name == "solution" for n in d.lines}
    text = "\n".join(line for n, line in enumerate(source.split("\n")) if n not in cut)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


EXERCISE_NAMES = {"exercise", "exercise-start", "exercise-end"}
EXERCISE_HEADING = "### {name}"  # ### 練習 6（ex03-split-heads）: the book's number and label
ANSWER_CELL = "**あなたの答え**：このセルをダブルクリックして書いてください。"


def plain_exercise_fences(source: str, numbers: dict[str, int] | None = None) -> str:
    """Write exercise directives as a plain heading followed by the task text.

    ``{exercise-start}`` becomes the heading, ``{exercise-end}`` goes, and a one-cell
    ``{exercise}`` block becomes the heading and its body; options other than ``:label:``
    go. The heading names the exercise as the book does, with its label
    (``### 練習 6（ex03-split-heads）``; ``numbers``: the book's numbers, by default this
    book's). In the book these fences make a numbered exercise box; in Jupyter they would
    show as raw MyST.
    """
    if numbers is None:
        numbers = book_index().exercise_numbers
    lines = source.split("\n")
    out, done = [], 0
    for directive in directives(source):
        if directive.name not in EXERCISE_NAMES:
            continue
        out += lines[done:directive.lines.start]
        if "label" in directive.options:
            name = exercise_name(directive.options["label"], numbers)
            out += [EXERCISE_HEADING.format(name=name).rstrip(), ""]
        out += directive.body
        done = directive.lines.stop
    out += lines[done:]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


def _add_tag(cell, tag: str) -> None:
    tags = cell.metadata.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


class SolutionCodePreprocessor(Preprocessor):
    """Stub the marked part of ``solution`` code cells; leave unmarked ones to be removed."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and SOLUTION_TAG in cell.metadata.get("tags", []):
            where = f"{resources.get('name', 'ノートブック')} のセル {index}："
            stubbed = stub_solution_code(cell.source, where)
            if stubbed is not None:
                cell.source = stubbed
                cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != SOLUTION_TAG]
                if not cell.metadata["tags"]:
                    del cell.metadata["tags"]
                resources.setdefault("stubbed_cells", []).append(cell.id)
        return cell, resources


class SolutionMarkdownPreprocessor(Preprocessor):
    """Mark solution-start ... solution-end markdown for removal; cut one-cell solutions."""

    def preprocess(self, nb, resources):
        self._inside = False
        nb, resources = super().preprocess(nb, resources)
        if self._inside:
            raise ValueError(f"{resources.get('name', 'ノートブック')}：solution-start に"
                             "対応する solution-end がありません")
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "markdown":
            return cell, resources
        names = directive_names(cell.source)
        if self._inside or "solution-start" in names:
            _add_tag(cell, REMOVE_TAG)
            self._inside = "solution-end" not in names
        elif "solution" in names:
            cell.source = remove_solution_blocks(cell.source)
            if not cell.source.strip():
                _add_tag(cell, REMOVE_TAG)
        return cell, resources


class ExercisePreprocessor(Preprocessor):
    """Plain headings instead of exercise fences; an answer cell after each think-exercise."""

    def preprocess(self, nb, resources):
        cells, task = [], []
        for cell in nb.cells:
            names = directive_names(cell.source) if cell.cell_type == "markdown" else set()
            if names & {"exercise", "exercise-start"}:
                task = []
            if cell.cell_type == "markdown":
                task.append(cell.source)
                if names & EXERCISE_NAMES:
                    cell.source = plain_exercise_fences(cell.source)
            cells.append(cell)
            ends = names & {"exercise", "exercise-end"}
            exercises = parse_exercises("\n".join(task)) if ends else []
            if any(e.kind == "考える" for e in exercises):
                # a fixed id (not nbformat's random one): the same chapter, the same file
                cells.append(nbformat.v4.new_markdown_cell(
                    ANSWER_CELL, id=re.sub(r"[^\w-]", "-", f"answer-{exercises[-1].label}",
                                           flags=re.ASCII)))
        nb.cells = cells
        return nb, resources


class PlainMarkdownPreprocessor(Preprocessor):
    """Every markdown cell as plain Jupyter Markdown: no MyST role or directive is left
    (``scripts/plain_markdown.py``: citations, references, admonitions, math)."""

    def preprocess(self, nb, resources):
        page = f"notebooks/{Path(str(resources.get('name', 'notebook'))).stem}"
        index = book_index()
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = plain_markdown(cell.source, page, index)
        return nb, resources


class StudentNotePreprocessor(Preprocessor):
    """Keep only the kernelspec and language metadata; put the student note on top."""

    def preprocess(self, nb, resources):
        nb.metadata = nbformat.NotebookNode(
            {key: nb.metadata[key] for key in ("kernelspec", "language_info") if key in nb.metadata}
        )
        chapter = str(resources.get("name", ""))[:2]
        if chapter.isdigit():  # the grader (scripts/grade.py) reads which chapter this is
            nb.metadata[CHAPTER_KEY] = {"chapter": chapter}
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(NOTE, id="student-note"))
        return nb, resources


def student_notebook(nb, name: str = "ノートブック"):
    """The student edition of ``nb`` (a new notebook) and the ids of the stubbed cells."""
    nb = nbformat.from_dict(nb)  # a deep copy: the full edition stays untouched
    resources = {"name": name}
    steps = [
        SolutionCodePreprocessor(),
        SolutionMarkdownPreprocessor(),
        TagRemovePreprocessor(remove_cell_tags={SOLUTION_TAG, REMOVE_TAG}),
        ClearOutputPreprocessor(),
        ExercisePreprocessor(),
        PlainMarkdownPreprocessor(),
        StudentNotePreprocessor(),
    ]
    for step in steps:
        nb, resources = step.preprocess(nb, resources)
    nbformat.validate(nb)
    return nb, resources.get("stubbed_cells", [])


def leftovers(nb) -> list[str]:
    """What a student notebook must not contain: any trace of a solution, or any output."""
    found = []
    if not nb.cells or NOTE_MARK not in nb.cells[0].source:
        found.append("先頭に学生版の注記がありません")
    for index, cell in enumerate(nb.cells):
        where = f"セル {index}"
        if SOLUTION_TAG in cell.metadata.get("tags", []):
            found.append(f"{where}：タグ solution が残っています")
        for marker in ("BEGIN SOLUTION", "END SOLUTION"):
            if marker in cell.source:
                found.append(f"{where}：{marker} が残っています")
        if cell.cell_type == "markdown" and directive_names(cell.source) & {
            "solution", "solution-start", "solution-end"
        }:
            found.append(f"{where}：解答のブロックが残っています")
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            found.append(f"{where}：出力が残っています")
    return found


def write_student_edition(out_dir: Path) -> list[tuple[Path, list[str]]]:
    """Write the student edition of every chapter; return each path with its stubbed cells."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for source in chapter_notebooks():
        nb, stubbed = student_notebook(nbformat.read(source, as_version=4), source.name)
        target = out_dir / source.name
        nbformat.write(nb, target)
        written.append((target, stubbed))
    return written


def run_student_notebook(path: Path, stubbed: list[str]) -> list[str]:
    """Execute a student notebook in memory (the file stays clean); return the problems."""
    return run_student(nbformat.read(path, as_version=4), path.parent, stubbed)


def run_student(nb, folder: Path, stubbed: list[str]) -> list[str]:
    """Execute the student notebook ``nb`` (changed in place) top to bottom in a fresh
    kernel whose working directory is ``folder``; return the problems."""
    try:
        execute_notebook(nb, folder, for_book=False)  # as a student runs it: no dark versions
    except CellExecutionError as err:
        return [f"実行中にエラーが出ました：\n{err}"]
    return self_check_problems(nb.cells, stubbed)


def self_check_problems(cells, stubbed: list[str]) -> list[str]:
    """What is wrong in the outputs of executed student cells: each stubbed exercise's
    self-check must say 「未実装」 and show no return value."""
    problems = []
    for cell in cells:
        if cell.get("id") in stubbed and "check_" in cell.source:
            shown = "".join(out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
                            for out in cell.outputs)
            if "未実装" not in shown:
                problems.append(f"自己チェックが「未実装」と表示しません：{cell.source[:80]!r}")
            values = [out.data.get("text/plain", "") for out in cell.outputs
                      if out.output_type == "execute_result"]
            if values:  # e.g. a bare False under the verdict's line
                problems.append(f"自己チェックの行のあとに返り値 {values[0]!r} が表示されます："
                                f"{cell.source[:80]!r}")
    return problems


def _check_student_notebook(path: Path, stubbed: list[str]) -> tuple[list[str], float]:
    """The problems of one written student notebook, and the seconds it took to find them."""
    start = time.perf_counter()
    problems = leftovers(nbformat.read(path, as_version=4))
    problems += run_student_notebook(path, stubbed)
    return problems, time.perf_counter() - start


def main(argv: list[str]) -> int:
    """``[--test] [--jobs N] [FOLDER]``: write the student edition to FOLDER (``student/``);
    with ``--test`` also run every chapter, N at a time (``auto``, the default: one per
    CPU), each in its own process and kernel (the chapters are independent), and report
    them in book order."""
    test = "--test" in argv
    args = [a for a in argv if a != "--test"]
    jobs = os.cpu_count() or 1
    if "--jobs" in args:
        at = args.index("--jobs")
        value = args[at + 1] if at + 1 < len(args) else ""
        if value != "auto" and (not value.isdigit() or int(value) < 1):
            print(f"--jobs には 1 以上の整数か auto を書いてください: {value!r}", file=sys.stderr)
            return 2
        jobs = jobs if value == "auto" else int(value)
        del args[at:at + 2]
    out_dir = Path(args[0]) if args else ROOT / "student"
    written = write_student_edition(out_dir)
    print(f"学生版：{len(written)} 章を {out_dir} に書きました")
    if not test:
        return 0
    failed = False
    with ProcessPoolExecutor(max_workers=min(jobs, len(written))) as pool:
        futures = [pool.submit(_check_student_notebook, path, stubbed)
                   for path, stubbed in written]
        for (path, stubbed), future in zip(written, futures, strict=True):
            problems, seconds = future.result()
            for problem in problems:
                print(f"問題: {path.name}: {problem}", file=sys.stderr)
            failed = failed or bool(problems)
            status = "失敗" if problems else "OK"
            print(f"  {path.name}: {status}（スタブ {len(stubbed)} 個、実行 {seconds:.1f} 秒）",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
