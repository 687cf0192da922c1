"""The grader (scripts/grade.py) on submissions made from chapter 01's student edition.

Each submission is the student notebook with the stub of ``my_attention`` replaced (or the
file broken in one of the ways students break files); the table is asserted cell by cell.
"""

import csv
import json

import nbformat
import pytest

from scripts import grade
from scripts.book import NOTEBOOKS
from scripts.make_student import STUB, student_notebook

CHAPTER = NOTEBOOKS / "01_attention_review.ipynb"
LABEL = "ex01-implement"

CORRECT = """\
def my_attention(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights
"""
CHECK = "\n\ncheck_attention(my_attention)"


def wrong(old: str, new: str) -> str:
    assert old in CORRECT
    return CORRECT.replace(old, new) + CHECK


# file name -> (the exercise cell's new source, or a callable editing the notebook) and the
# expected (verdict, a phrase of the diagnosis)
SUBMISSIONS = {
    "correct.ipynb": (CORRECT + CHECK, ("正解", "一致しました")),
    "no_scale.ipynb": (wrong("/ np.sqrt(q.shape[-1])", ""), ("不正解", "√d_k で割るのを忘れて")),
    "divide_by_d.ipynb": (wrong("np.sqrt(q.shape[-1])", "q.shape[-1]"), ("不正解", "d_k で割って")),
    "axis0.ipynb": (CORRECT.replace("axis=-1", "axis=0") + CHECK,
                    ("不正解", "softmax を取る軸が違います")),
    "mask_ignored.ipynb": (wrong("np.where(mask, scores, -np.inf)", "scores"),
                           ("不正解", "mask を無視しています")),
    "mask_zero.ipynb": (wrong("-np.inf)", "0.0)"), ("不正解", "0 にしています")),
    "mask_inverted.ipynb": (wrong("np.where(mask,", "np.where(~mask,"),
                            ("不正解", "mask の向きが逆です")),
    "stub.ipynb": (None, ("未実装", "まだ実装されていません")),
    "renamed.ipynb": (CORRECT.replace("my_attention", "attention")
                      + "\n\ncheck_attention(attention)", ("正解", "一致しました")),
    "check_call_edited.ipynb": (wrong("/ np.sqrt(q.shape[-1])", "") + "\nprint('【正解】')",
                                ("不正解", "√d_k で割るのを忘れて")),
    "endless_definition.ipynb": ("while True:\n    pass\n\n" + CORRECT + CHECK,
                                 ("時間切れ", "定義するセル")),
    "endless_function.ipynb": (CORRECT.replace("    return", "    while True:\n        pass\n"
                                               "    return") + "\nmy_attention",
                               ("時間切れ", "自己チェック")),
    "crash.ipynb": ("raise RuntimeError('boom')\n" + CORRECT + CHECK,
                    ("実行時エラー", "RuntimeError: boom")),
    "prints_megabytes.ipynb": ("print('x' * 5_000_000)\n" + CORRECT + CHECK,
                               ("正解", "一致しました")),
}


def _student() -> nbformat.NotebookNode:
    nb, _ = student_notebook(nbformat.read(CHAPTER, as_version=4), CHAPTER.name)
    return nb


def _exercise_cell(nb) -> int:
    return next(i for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and "def my_attention" in c.source and STUB in c.source)


NAME_ERROR = CORRECT.replace("np.sqrt(q.shape[-1])", "np.sqrt(Dh)") + CHECK


def submission(source: str | None) -> nbformat.NotebookNode:
    """Chapter 01's student edition with the exercise cell's code replaced by ``source``
    (None: the stub left as it is). benchmarks/grade_speed.py makes its class with it."""
    nb = _student()
    if source is not None:
        nb.cells[_exercise_cell(nb)].source = source
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    for name, (source, _) in SUBMISSIONS.items():
        nbformat.write(submission(source), folder / name)
    # a cell that raises before the exercise, in the chapter's narrative
    nb = submission(CORRECT + CHECK)
    nb.cells.insert(3, nbformat.v4.new_code_cell("1 / 0"))
    nbformat.write(nb, folder / "raises_early.ipynb")
    # the exercise's cells deleted
    nb = _student()
    del nb.cells[_exercise_cell(nb)]
    nbformat.write(nb, folder / "cells_deleted.ipynb")
    # the chapter metadata lost: recognised by the exercise labels
    nb = submission(CORRECT + CHECK)
    nb.metadata.pop("attnlab")
    (folder / "sub").mkdir()
    nbformat.write(nb, folder / "sub" / "no_metadata.ipynb")
    # an exception in the student's function: named by its cell in the submission
    nbformat.write(submission(NAME_ERROR), folder / "name_error.ipynb")
    (folder / "broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    (folder / "not_a_notebook.ipynb").write_text("hello", encoding="utf-8")
    before = {p: p.read_bytes() for p in folder.rglob("*.ipynb")}
    chapters = grade.read_chapters()
    # 20 s: the endless loops end soon enough, and the setup cell (numpy, matplotlib,
    # attnlab) fits on a loaded machine: at 4 s it timed out under a load of 8 on 2 cores,
    # and at 10 s once in four runs of make test on 2 cores (unit's two workers and the two
    # grading kernels at once: the setup cell cut short, check_attention never imported)
    outcomes = grade.grade_folder(folder, chapters, jobs=2, cell_timeout=20)
    after = {p: p.read_bytes() for p in folder.rglob("*.ipynb")}
    return folder, chapters, outcomes, before == after


def _by_file(outcomes):
    return {o.file: o for o in outcomes}


@pytest.mark.slow
def test_chapter01_has_one_graded_exercise():
    chapters = {c.number: c for c in grade.read_chapters()}
    assert chapters["01"].tasks == (grade.Task(LABEL, "check_attention", "my_attention"),)


@pytest.mark.parametrize("name", sorted(SUBMISSIONS))
@pytest.mark.slow
def test_each_submission_gets_its_verdict(graded, name):
    _, _, outcomes, _ = graded
    outcome = _by_file(outcomes)[name]
    verdict, phrase = SUBMISSIONS[name][1]
    assert outcome.chapter == "01" and outcome.status == ""
    got, why = outcome.verdicts[LABEL]
    assert (got, phrase in why) == (verdict, True), (got, why)


def test_files_broken_in_other_ways(graded):
    _, _, outcomes, _ = graded
    by_file = _by_file(outcomes)
    assert by_file["raises_early.ipynb"].verdicts[LABEL][0] == "正解"
    assert by_file["cells_deleted.ipynb"].verdicts[LABEL][0] == "未実装"
    assert "見つかりません" in by_file["cells_deleted.ipynb"].verdicts[LABEL][1]
    assert by_file["sub/no_metadata.ipynb"].chapter == "01"
    no_metadata = by_file["sub/no_metadata.ipynb"].verdicts[LABEL]
    assert no_metadata[0] == "正解", no_metadata  # the message says why if not
    for name in ("broken.ipynb", "not_a_notebook.ipynb"):
        assert by_file[name].status.startswith(grade.UNREADABLE)
        assert by_file[name].verdicts == {}


def test_an_exception_is_placed_in_the_submissions_cell_not_the_graders(graded):
    """The grader's kernel runs only some cells, so its In[n] is not the student's: the
    diagnosis names the cell by its place in the submission (its number from the top)."""
    _, _, outcomes, _ = graded
    verdict, why = _by_file(outcomes)["name_error.ipynb"].verdicts[LABEL]
    place = _exercise_cell(_student()) + 1
    assert verdict == "不正解" and "NameError: name 'Dh' is not defined" in why
    assert f"（上から {place} 番目のセルの 2 行目：scores = q @ k.T / np.sqrt(Dh)）" in why, why
    assert "In[" not in why


def test_submissions_are_only_read(graded):
    *_, unchanged = graded
    assert unchanged


def test_csv_and_html_tables(graded, tmp_path):
    _, chapters, outcomes, _ = graded
    grade.write_csv(tmp_path / "grades.csv", chapters, outcomes)
    grade.write_html(tmp_path / "grades.html", chapters, outcomes)
    with (tmp_path / "grades.csv").open(encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(outcomes)
    by_file = {row["ファイル"]: row for row in rows}
    for name, (_, (verdict, _phrase)) in SUBMISSIONS.items():
        row = by_file[name]
        assert (row["章"], row[LABEL]) == ("01", verdict)
        assert (row[f"{LABEL} 診断"] == "") == (verdict == "正解")
        assert row["正解数"] == str(int(verdict == "正解")) and row["課題数"] == "1"
    assert by_file["broken.ipynb"]["状態"].startswith(grade.UNREADABLE)
    assert by_file["broken.ipynb"][LABEL] == ""
    page = (tmp_path / "grades.html").read_text(encoding="utf-8")
    assert page.count("<tr>") == len(outcomes) + 2  # header, rows, totals
    assert "lang='ja'" in page and "mask の向きが逆です" in page
    text = grade.summary(chapters, outcomes)
    assert f"{LABEL}（check_attention）：正解 " in text and "broken.ipynb：読めません" in text


def test_cli_refuses_to_write_into_the_submissions(tmp_path, capsys):
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "grades")]) == 2
    assert "提出フォルダーの中" in capsys.readouterr().err
    assert grade.main([str(tmp_path / "missing")]) == 2


def test_the_grader_records_verdicts_and_diagnoses_not_true_or_false(graded):
    """What `make grade` records is the check's structured result: a verdict of
    grade.VERDICTS and a diagnosis, never the True/False a notebook showed before."""
    _, _, outcomes, _ = graded
    recorded = [v for o in outcomes for v in o.verdicts.values()]
    assert recorded and all(verdict in grade.VERDICTS for verdict, _ in recorded)
    assert all(isinstance(why, str) and why not in ("True", "False") for _, why in recorded)


def test_grade_in_kernel_prints_one_json_record(capsys):
    def my_attention(q, k, v, mask=None):
        return None

    grade.grade_in_kernel("check_attention", ["missing", "my_attention"], LABEL, grade.MARKER,
                          {"my_attention": my_attention})
    grade.grade_in_kernel("check_attention", ["missing"], LABEL, grade.MARKER, {})
    found, missing = capsys.readouterr().out.splitlines()
    assert found.startswith(grade.MARKER) and missing.startswith(grade.MARKER)
    record = json.loads(found[len(grade.MARKER):])
    assert record == {"label": LABEL, "check": "check_attention", "found": True,
                      "function": "my_attention", "verdict": "不正解",
                      "message": record["message"]}
    assert record["message"].startswith("my_attention: ") and "None" in record["message"]
    assert json.loads(missing[len(grade.MARKER):])["found"] is False


def test_the_grade_cell_runs_in_its_own_namespace(capsys):
    """The cell the grader adds reads the student's globals and leaves nothing in them;
    a student's own print or json does not change what it records."""
    def my_attention(q, k, v, mask=None):
        raise NotImplementedError

    namespace = {"my_attention": my_attention, "print": None, "json": None}
    exec(grade._grade_cell(grade.Task(LABEL, "check_attention", "my_attention"),
                           ["my_attention"]), namespace)
    assert set(namespace) == {"my_attention", "print", "json", "__builtins__"}
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line[len(grade.MARKER):])["verdict"] == "未実装"


def test_check_results_are_data():
    from attnlab.checks import CHECKS

    result = CHECKS["check_attention"].evaluate(lambda q, k, v, mask=None: None)
    assert result.verdict == "不正解" and not result and "None" in result.message
    assert str(result).startswith("【不正解】")
    record = json.dumps({"verdict": result.verdict}, ensure_ascii=False)
    assert "不正解" in record


@pytest.mark.slow
def test_cli_writes_the_tables(tmp_path, capsys):
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    (submissions / "broken.ipynb").write_text("{", encoding="utf-8")
    assert grade.main([str(submissions), "--out", str(tmp_path / "grades")]) == 0
    assert "broken.ipynb：読めません" in capsys.readouterr().out
    assert (tmp_path / "grades" / "grades.csv").read_text(encoding="utf-8-sig").startswith(
        "ファイル,章,状態")
    assert (tmp_path / "grades" / "grades.html").exists()
