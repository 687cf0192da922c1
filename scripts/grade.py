"""Grade a folder of student notebooks with the self-checks: one table, a row per file.

Usage:
    python -m scripts.grade SUBMISSIONS [--out OUT] [--jobs N] [--cell-timeout S]
                                        [--timeout S] [--all-cells]

Every ``*.ipynb`` under ``SUBMISSIONS`` (any name, chapters mixed) is graded in a fresh
kernel, in a temporary folder, from a copy: the submission is only read.

1. **Which chapter.** The student edition records it in the notebook's metadata
   (``attnlab.chapter``); a notebook that lost it is recognised by its exercise labels
   (``ex01-…``), then by its title.
2. **What is graded.** The implementation exercises of that chapter that call a self-check
   (``check_…(my_function)`` in the full edition's solution cells): one column each. The
   list comes from the chapters of ``_toc.yml``, so a new chapter's checks join the table
   with no change here.
3. **What runs.** The chapter's setup cells (the code before the first ``##`` section) and
   every code cell of the student's ``## 練習問題`` section, in order, each cell with a time
   limit (an endless loop is interrupted and the next cell runs), errors allowed. The
   narrative of the chapter is not run: the student does not write it, and skipping it keeps
   a class's folder fast. ``--all-cells`` runs every cell instead. Then, for each exercise,
   one cell the grader adds runs :func:`grade_in_kernel` there: the same ``check_…`` the
   student ran (its ``evaluate``, which prints nothing), on the student's function, and one
   line of JSON with the structured result (verdict and diagnosis) for the grader to read.
4. **Verdicts.** 正解 / 不正解 (the check's diagnosis; where the student's code raised an
   exception, the cell is named by its place in the submission, e.g. 上から 12 番目のセル,
   since the kernel's own numbers count only the cells the grader ran) / 未実装 (the stub,
   or no function
   of that name) / 実行時エラー (the cell that defines the function failed, or the kernel
   died) / 時間切れ (the definition or the check ran past the limit). A file that is not a
   notebook gets 読めません and no verdicts.

Results: ``OUT/grades.csv`` (UTF-8 with BOM, so spreadsheet programs read the Japanese),
``OUT/grades.html`` and a summary on the terminal. It is not a sandbox: the student's code
runs with your user's rights (the 講師向け page says what that means).
"""

from __future__ import annotations

import argparse
import ast
import csv
import html
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from scripts.book import KERNEL, ROOT, chapter_notebooks
from scripts.exercises import directives, parse_exercises
from scripts.make_student import CHAPTER_KEY

METADATA_KEY = CHAPTER_KEY  # notebook metadata the student edition writes: {"chapter": "01"}
SECTION = re.compile(r"^##\s+(?P<title>.+?)\s*$", re.MULTILINE)
EXERCISES_HEADING = "練習問題"
LABEL = re.compile(r"\bex(?P<chapter>\d\d)-[\w-]+")
CHECK_CALL = re.compile(r"\b(?P<check>check_\w+)\(\s*(?P<function>[A-Za-z_]\w*)\s*\)")
TIMEOUT_ENAME = "Timeout"
TIMED_OUT = "attnlab_timed_out"  # set on a cell the time limit interrupted
MARKER = "@@attnlab-grade@@"  # starts the line of JSON that grade_in_kernel prints
KERNEL_CELL = re.compile(r"セル In\[(?P<count>\d+)\] の")  # attnlab.checks.core.student_line

VERDICTS = ("正解", "不正解", "未実装", "実行時エラー", "時間切れ")
UNREADABLE = "読めません"


# ---------------------------------------------------------------------------------------
# What each chapter grades, read from the full edition.

@dataclass(frozen=True)
class Task:
    """One graded exercise: its label, the check, and the function the student writes."""

    label: str
    check: str
    function: str


@dataclass(frozen=True)
class Chapter:
    number: str  # "01"
    name: str  # the notebook's stem, e.g. "01_attention_review"
    title: str  # its first heading
    tasks: tuple[Task, ...]


def _sections(cells) -> list[str | None]:
    """For each cell, the ``##`` section it is in (None before the first one)."""
    current, out = None, []
    for cell in cells:
        if cell.cell_type == "markdown":
            titles = SECTION.findall(cell.source)
            if titles:
                current = titles[-1]
        out.append(current)
    return out


def _defined_functions(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]


def chapter_tasks(nb) -> tuple[Task, ...]:
    """The implementation exercises of a full-edition chapter that a self-check grades."""
    kinds, label, tasks = {}, None, []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for exercise in parse_exercises(cell.source):
                kinds[exercise.label] = exercise.kind
            for directive in directives(cell.source):
                if directive.name in ("exercise", "exercise-start"):
                    label = directive.options.get("label", label)
            continue
        if label is None or kinds.get(label) != "実装":
            continue
        defined = _defined_functions(cell.source)
        for call in CHECK_CALL.finditer(cell.source):
            if call["function"] in defined or any(t.function == call["function"] for t in tasks):
                task = Task(label, call["check"], call["function"])
                if task not in tasks:
                    tasks.append(task)
    return tuple(tasks)


def read_chapters(root: Path = ROOT) -> list[Chapter]:
    """Every chapter of ``_toc.yml`` with the exercises the grader grades."""
    chapters = []
    for path in chapter_notebooks(root):
        nb = nbformat.read(path, as_version=4)
        title = next((line.lstrip("# ").strip() for cell in nb.cells
                      if cell.cell_type == "markdown"
                      for line in cell.source.splitlines() if line.startswith("# ")), path.stem)
        chapters.append(Chapter(path.stem[:2], path.stem, title, chapter_tasks(nb)))
    return chapters


def identify_chapter(nb, chapters: list[Chapter]) -> Chapter | None:
    """The chapter of a submission: its metadata, else its exercise labels, else its title."""
    by_number = {c.number: c for c in chapters}
    recorded = str(nb.metadata.get(METADATA_KEY, {}).get("chapter", ""))
    if recorded in by_number:
        return by_number[recorded]
    text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    labels = [m["chapter"] for m in LABEL.finditer(text) if m["chapter"] in by_number]
    if labels:
        return by_number[max(set(labels), key=labels.count)]
    return next((c for c in chapters if c.title and c.title in text), None)


# ---------------------------------------------------------------------------------------
# Running one submission.

@dataclass
class Outcome:
    """One row of the table."""

    file: str
    chapter: str  # "01", or "" when unknown
    status: str  # "" when graded, else why not (読めません, 章が分かりません)
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (verdict, why)
    seconds: float = 0.0


def _cells_to_run(nb, all_cells: bool) -> tuple[list, list[int]]:
    """The cells the grader runs, and for each the index of its cell in ``nb``."""
    code = [(index, cell, section) for index, (cell, section)
            in enumerate(zip(nb.cells, _sections(nb.cells), strict=True))
            if cell.cell_type == "code"]
    keep, origin = [], []
    for index, cell, section in code:
        if "colab-install" in cell.metadata.get("tags", []):
            continue  # installs the course package in Colab; never needed here
        if all_cells or section is None or EXERCISES_HEADING in section:
            keep.append(nbformat.v4.new_code_cell(cell.source))
            origin.append(index)
    return keep, origin


def grade_in_kernel(check_name: str, function_names: list[str], label: str, marker: str,
                    namespace: dict) -> None:
    """Run in the student's kernel, after the student's cells: the self-check ``check_name``
    on the first of ``function_names`` that ``namespace`` (the notebook's globals) defines,
    printed as one line of JSON after ``marker`` (``"found": false`` when none is defined).

    Nothing is taken from the namespace but the function: the check comes from
    ``attnlab.checks``, and the cell runs this code in a namespace of its own
    (:func:`_grade_cell`), so a student's ``print`` or ``json`` cannot stand in for ours.
    """
    import json
    import sys

    from attnlab.checks import CHECKS

    found = next((name for name in function_names if name in namespace), None)
    result = None if found is None else CHECKS[check_name].evaluate(namespace[found])
    record = {"label": label, "check": check_name, "found": found is not None,
              "function": found, "verdict": None if result is None else result.verdict,
              "message": None if result is None else result.message}
    sys.stdout.write(marker + json.dumps(record, ensure_ascii=False) + "\n")
    sys.stdout.flush()


GRADE_SOURCE = inspect.getsource(grade_in_kernel)


def _grade_cell(task: Task, names: list[str]) -> str:
    """The cell that grades ``task`` in the student's kernel (it leaves no name behind)."""
    code = (f"{GRADE_SOURCE}\ngrade_in_kernel({task.check!r}, {names!r}, {task.label!r}, "
            f"{MARKER!r}, student_namespace)\n")
    return f"exec({code!r}, {{'student_namespace': globals()}})"


def _error_of(cell) -> tuple[str, str] | None:
    if cell.metadata.get(TIMED_OUT):
        return TIMEOUT_ENAME, ""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return output.get("ename", ""), output.get("evalue", "")
    return None


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def grade_notebook(path: Path, chapters: list[Chapter], cell_timeout: int = 30,
                   all_cells: bool = False, label: str | None = None) -> Outcome:
    """Grade one submission (a path that is only read); never raises for a bad file."""
    start = time.perf_counter()
    name = label or path.name
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # not JSON, not a notebook, unreadable: a verdict, not a crash
        return Outcome(name, "", f"{UNREADABLE}（{_short(type(err).__name__, 40)}）",
                       seconds=time.perf_counter() - start)
    chapter = identify_chapter(nb, chapters)
    if chapter is None:
        return Outcome(name, "", "章が分かりません", seconds=time.perf_counter() - start)
    outcome = Outcome(name, chapter.number, "")
    if not chapter.tasks:
        outcome.seconds = time.perf_counter() - start
        return outcome

    cells, origin = _cells_to_run(nb, all_cells)
    student_code = "\n".join(cell.source for cell in cells)
    first_grade = len(cells)
    for task in chapter.tasks:
        # the function the exercise asks for, then any function the student checks instead
        names = [task.function] + [m["function"] for m in CHECK_CALL.finditer(student_code)
                                   if m["check"] == task.check and m["function"] != task.function]
        cells.append(nbformat.v4.new_code_cell(_grade_cell(task, names)))
    run = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": KERNEL, "display_name": "Python 3", "language": "python"}})

    def after_cell(cell, cell_index, execute_reply):
        content = (execute_reply or {}).get("content", {})
        if content.get("ename") == TIMEOUT_ENAME:  # interrupted by nbclient: not an error
            cell.metadata[TIMED_OUT] = True
        if cell_index < first_grade:  # a student may print megabytes: keep only the error
            cell.outputs = [o for o in cell.outputs if o.get("output_type") == "error"]

    with tempfile.TemporaryDirectory(prefix="attnlab-grade-") as folder:
        client = NotebookClient(
            run, timeout=cell_timeout, kernel_name=KERNEL, allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": TIMEOUT_ENAME, "evalue": f"{cell_timeout} 秒を超えました"},
            resources={"metadata": {"path": folder}}, store_widget_state=False,
            record_timing=False, on_cell_executed=after_cell,
            # students' output never reaches the grader's terminal or memory in bulk
            iopub_timeout=10,
        )
        died = None
        try:
            # the kernel's own warnings (e.g. about TCP) would flood the grader's terminal
            client.execute(stderr=subprocess.DEVNULL)
        except Exception as err:  # the kernel died (os._exit, a crash): grade what ran
            died = _short(f"{type(err).__name__}: {err}", 80)

    student_cells = run.cells[:first_grade]
    # the kernel numbers the cells it ran (In[n]); the instructor sees the submission's cells
    places = {cell.execution_count: origin[i] + 1 for i, cell in enumerate(student_cells)
              if cell.get("execution_count") is not None}
    outcome.verdicts = {task.label: _verdict(task, run.cells[first_grade + i], student_cells, died,
                                             places)
                        for i, task in enumerate(chapter.tasks)}
    outcome.seconds = time.perf_counter() - start
    return outcome


def _in_submission(message: str, places: dict[int, int]) -> str:
    """``セル In[n]`` of the grader's kernel as the cell's place in the submission."""
    def place(match: re.Match) -> str:
        number = places.get(int(match["count"]))
        return match[0] if number is None else f"上から {number} 番目のセルの"

    return KERNEL_CELL.sub(place, message)


def _verdict(task: Task, grade_cell, student_cells, died: str | None,
             places: dict[int, int] | None = None) -> tuple[str, str]:
    record = None
    for output in grade_cell.get("outputs", []):
        for line in str(output.get("text", "")).splitlines():
            if line.startswith(MARKER):
                record = json.loads(line[len(MARKER):])
    defining = [c for c in student_cells if task.function in _defined_functions(c.source)]
    if record is not None and record["found"]:
        return record["verdict"], _short(_in_submission(record["message"], places or {}), 240)
    error = _error_of(grade_cell)
    if error and error[0] == TIMEOUT_ENAME:
        return "時間切れ", f"自己チェックが {task.check} の実行中に時間の上限を超えました"
    if error:
        return "実行時エラー", _short(f"自己チェックの実行中に {error[0]}: {error[1]}")
    for cell in defining:  # the function is missing: did its own cell fail?
        error = _error_of(cell)
        if error and error[0] == TIMEOUT_ENAME:
            return "時間切れ", f"{task.function} を定義するセルが時間の上限を超えました"
        if error:
            where = f"{task.function} を定義するセルで"
            return "実行時エラー", _short(f"{where} {error[0]}: {error[1]}")
    if died:
        return "実行時エラー", f"カーネルが止まりました（{died}）"
    return "未実装", (f"関数 {task.function} が見つかりません"
                      "（名前を変えたか、セルを消していませんか）")


def _grade_job(args) -> Outcome:
    path, chapters, cell_timeout, all_cells, label = args
    return grade_notebook(path, chapters, cell_timeout, all_cells, label)


def grade_folder(folder: Path, chapters: list[Chapter] | None = None, jobs: int | None = None,
                 cell_timeout: int = 30, all_cells: bool = False) -> list[Outcome]:
    """Grade every ``*.ipynb`` under ``folder`` (recursively, by path), in parallel."""
    chapters = read_chapters() if chapters is None else chapters
    paths = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    jobs = jobs or os.cpu_count() or 1
    work = [(p, chapters, cell_timeout, all_cells, str(p.relative_to(folder))) for p in paths]
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(work) or 1))) as pool:
        return list(pool.map(_grade_job, work))


# ---------------------------------------------------------------------------------------
# The table.

def columns(chapters: list[Chapter], outcomes: list[Outcome]) -> list[Task]:
    """One column per graded exercise of the chapters present, in book order."""
    present = {o.chapter for o in outcomes}
    return [t for c in chapters if c.number in present for t in c.tasks]


def write_csv(path: Path, chapters: list[Chapter], outcomes: list[Outcome]) -> None:
    tasks = columns(chapters, outcomes)
    header = ["ファイル", "章", "状態", "正解数", "課題数"]
    for task in tasks:
        header += [task.label, f"{task.label} 診断"]
    with path.open("w", encoding="utf-8-sig", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        for o in outcomes:
            row = [o.file, o.chapter, o.status or "採点済み",
                   sum(v == "正解" for v, _ in o.verdicts.values()), len(o.verdicts)]
            for task in tasks:
                verdict, why = o.verdicts.get(task.label, ("", ""))
                row += [verdict, "" if verdict == "正解" else why]
            writer.writerow(row)


STYLE = """
body { font-family: sans-serif; margin: 2em; color: #1a1a1a; }
table { border-collapse: collapse; } th, td { border: 1px solid #999; padding: .3em .6em; }
th { background: #eee; } td small { display: block; color: #444; max-width: 28em; }
.正解 { background: #d9f2e3; } .不正解 { background: #fde2d4; } .未実装 { background: #eee; }
.実行時エラー, .時間切れ, .読めません { background: #fbe7a1; }
"""


def write_html(path: Path, chapters: list[Chapter], outcomes: list[Outcome]) -> None:
    tasks = columns(chapters, outcomes)
    esc = html.escape
    head = "".join(f"<th scope='col'>{esc(t.label)}<br><small>{esc(t.check)}</small></th>"
                   for t in tasks)
    rows = []
    for o in outcomes:
        cells = []
        for task in tasks:
            if task.label not in o.verdicts:
                cells.append("<td>—</td>")
                continue
            verdict, why = o.verdicts[task.label]
            note = "" if verdict == "正解" else f"<small>{esc(why)}</small>"
            cells.append(f"<td class='{esc(verdict)}'>{esc(verdict)}{note}</td>")
        status = f"<td class='読めません'>{esc(o.status)}</td>" if o.status else "<td>採点済み</td>"
        rows.append(f"<tr><th scope='row'>{esc(o.file)}</th><td>{esc(o.chapter or '?')}</td>"
                    f"{status}{''.join(cells)}</tr>")
    totals = "".join(
        f"<td>{sum(o.verdicts.get(t.label, ('',))[0] == '正解' for o in outcomes)}"
        f" / {sum(t.label in o.verdicts for o in outcomes)}</td>" for t in tasks)
    page = (f"<!DOCTYPE html><html lang='ja'><head><meta charset='utf-8'>"
            f"<title>採点結果</title><style>{STYLE}</style></head><body>"
            f"<h1>採点結果（{len(outcomes)} 件）</h1><table><thead><tr><th scope='col'>ファイル"
            f"</th><th scope='col'>章</th><th scope='col'>状態</th>{head}</tr></thead><tbody>"
            f"{''.join(rows)}</tbody><tfoot><tr><th scope='row'>正解の数</th><td></td><td></td>"
            f"{totals}</tr></tfoot></table></body></html>")
    path.write_text(page, encoding="utf-8")


def summary(chapters: list[Chapter], outcomes: list[Outcome]) -> str:
    """The table for the terminal: a line per file, then every diagnosis."""
    tasks = columns(chapters, outcomes)
    lines = [f"採点：{len(outcomes)} 件"]
    for task in tasks:
        graded = [o.verdicts[task.label][0] for o in outcomes if task.label in o.verdicts]
        counts = "、".join(f"{v} {graded.count(v)}" for v in VERDICTS if graded.count(v))
        lines.append(f"  {task.label}（{task.check}）：{counts or 'なし'}")
    lines.append("")
    for o in outcomes:
        if o.status:
            lines.append(f"{o.file}：{o.status}")
            continue
        verdicts = "  ".join(f"{label} {v}" for label, (v, _) in o.verdicts.items())
        lines.append(f"{o.file}（第 {o.chapter} 章）：{verdicts or '採点する課題なし'}")
        for label, (verdict, why) in o.verdicts.items():
            if verdict != "正解":
                lines.append(f"    {label}：{why}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.grade",
                                     description="学生のノートブックのフォルダーを採点して表にする")
    parser.add_argument("submissions", type=Path, help="提出されたノートブックのフォルダー")
    parser.add_argument("--out", type=Path, default=ROOT / "grades",
                        help="grades.csv と grades.html を書くフォルダー（既定: grades/）")
    parser.add_argument("--jobs", type=int, default=None, help="同時に動かすカーネルの数")
    parser.add_argument("--cell-timeout", type=int, default=30, help="1 セルの時間の上限（秒）")
    parser.add_argument("--all-cells", action="store_true",
                        help="練習問題の節だけでなく、すべてのセルを実行する")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        print(f"エラー：SUBMISSIONS={args.submissions} はフォルダーではありません", file=sys.stderr)
        return 2
    if args.out.resolve().is_relative_to(args.submissions.resolve()):
        print(f"エラー：--out={args.out} が提出フォルダーの中です。提出物は書き換えません",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    chapters = read_chapters()
    outcomes = grade_folder(args.submissions, chapters, args.jobs, args.cell_timeout,
                            args.all_cells)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "grades.csv", chapters, outcomes)
    write_html(args.out / "grades.html", chapters, outcomes)
    print(summary(chapters, outcomes))
    print(f"\n表：{args.out / 'grades.csv'}、{args.out / 'grades.html'}"
          f"（{time.perf_counter() - start:.0f} 秒）")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
