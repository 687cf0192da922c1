"""The student edition, checked inside ``make nbval``: a chapter's cells up to its first
exercise run once for both editions.

Not taught: test machinery (a pytest plugin: ``pytest --nbval -p tests.nbval_student
--student-edition notebooks``).

``make student-test`` (``scripts/make_student.py --test``) runs each chapter's student
edition from the top in a kernel of its own. Every cell before a chapter's first exercise
is the same code in both editions (the exercises close each chapter), so that run repeats
what nbval has just run and checked in the full notebook. With ``--student-edition`` this
plugin adds two items to each notebook nbval collects, in nbval's kernel:

1. ``student-edition-snapshot``, right after the last cell the editions share: a shallow
   copy of the kernel's namespace (every name and the object it is bound to).
2. ``student-edition``, after the notebook's last cell: the namespace is put back to that
   copy (what the reference solutions and the cells after them defined or rebound is gone),
   then the student edition's cells from its first exercise on run one by one, with
   ``make student-test``'s checks: no cell raises, and each stubbed exercise's self-check
   says 「未実装」 and shows no return value (``scripts.make_student.self_check_problems``),
   and nothing of a solution is left in the student notebook (``leftovers``).

What the full notebook's later cells changed inside an object of the shared cells (an item
added to a dict, a generator advanced) is not undone: the student's cells see it. Where the
editions differ before the first stub, or nbval skips a shared cell (``nbval-skip``), the
shared run would not be the student's, and the item runs the whole student edition in a
kernel of its own instead, as ``make student-test`` does.
"""

from __future__ import annotations

from pathlib import Path
from queue import Empty
from typing import NamedTuple

import nbformat
import pytest

#: The name the shared namespace is kept under in the kernel until the student's cells run.
SNAPSHOT_NAME = "_attnlab_student_edition_snapshot"
# Nothing goes through the display hook (which would set _): statements, prints, None.
SNAPSHOT_CODE = f"globals()[{SNAPSHOT_NAME!r}] = dict(globals())"
RESTORE_CODE = (f"(lambda ns, kept: ns.clear() or ns.update(kept))"  # names local to the call
                f"(globals(), globals().pop({SNAPSHOT_NAME!r}))")
HAS_SNAPSHOT_CODE = f"print({SNAPSHOT_NAME!r} in globals())"


def pytest_addoption(parser):
    parser.addoption("--student-edition", action="store_true", default=False,
                     help="nbval の各ノートブックのあとに、その学生版の練習問題からあとを同じ"
                          "カーネルで実行して確かめる（tests/nbval_student.py）")


class Plan(NamedTuple):
    """How a notebook's student edition is checked."""

    student: nbformat.NotebookNode  # the student edition (no outputs)
    stubbed: list[str]  # ids of its stubbed cells
    shared: int  # how many code cells, from the top, both editions run alike
    alone: str  # why the whole student edition runs alone ("" when it need not)


def plan_for(path: Path) -> Plan | None:
    """The plan for the notebook ``path``; None when it has no exercise to stub."""
    from nbval.plugin import find_comment_markers, find_metadata_tags

    from scripts.make_student import student_notebook

    full = nbformat.read(path, as_version=4)
    student, stubbed = student_notebook(full, path.name)
    if not stubbed:
        return None
    full_code = [cell for cell in full.cells if cell.cell_type == "code"]
    student_code = [cell for cell in student.cells if cell.cell_type == "code"]
    shared = 0
    for mine, theirs in zip(student_code, full_code, strict=False):
        if mine.id in stubbed or mine.source != theirs.source:
            break
        shared += 1
    alone = ""
    if shared == 0:
        alone = "最初のコードセルから 2 つの版が違います"
    for index, cell in enumerate(full_code[:shared]):
        options = dict(find_metadata_tags(cell.metadata) or ())
        options.update(find_comment_markers(cell.source))
        if options.get("skip"):
            alone = f"nbval が飛ばすセル（コードセル {index}）が、練習問題より前にあります"
    return Plan(student, stubbed, shared, alone)


class StudentEditionError(Exception):
    """A problem of the student edition, said in Japanese."""


class _KernelItem(pytest.Item):
    """An item that runs code in its notebook's nbval kernel (``self.parent.kernel``)."""

    def __init__(self, *, plan: Plan, **kwargs):
        super().__init__(**kwargs)
        self.plan = plan

    def reportinfo(self):
        return self.path, None, self.name

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, StudentEditionError):
            return f"学生版（{self.path.name}）：{excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def _kernel(self):
        kernel = getattr(self.parent, "kernel", None)
        if kernel is None or not kernel.is_alive():
            raise StudentEditionError("nbval のカーネルが動いていません（前のセルで止まりました）")
        return kernel

    def run(self, code: str) -> list:
        """Run ``code`` in the kernel as nbval runs a cell; return its outputs (nbformat)."""
        kernel = self._kernel()
        timeout = self.config.option.nbval_cell_timeout
        msg_id = kernel.execute_cell_input(code, allow_stdin=False)
        try:
            kernel.await_reply(msg_id, timeout=timeout)
        except Empty:
            kernel.interrupt()
            raise StudentEditionError(f"{timeout} 秒で終わりませんでした：{code[:80]!r}") from None
        outputs = []
        while True:
            try:
                msg = kernel.get_message(stream="iopub", timeout=timeout)
            except Empty:
                raise StudentEditionError(f"出力を待つうちに {timeout} 秒たちました") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "status" and msg["content"]["execution_state"] == "idle":
                return outputs
            if kind in ("stream", "display_data", "execute_result", "error"):
                outputs.append(nbformat.v4.output_from_msg(msg))

    def printed(self, code: str) -> str:
        """What ``code`` prints in the kernel (an error is a failure)."""
        outputs = self.run(code)
        errors = [out for out in outputs if out.output_type == "error"]
        if errors:
            raise StudentEditionError(f"{code!r} が {errors[0].ename} を出しました")
        return "".join(out.text for out in outputs if out.output_type == "stream").strip()


class SnapshotItem(_KernelItem):
    """Keeps the namespace of the cells both editions share (see the module)."""

    def runtest(self):
        self.run(SNAPSHOT_CODE)
        if self.printed(HAS_SNAPSHOT_CODE) != "True":
            raise StudentEditionError("共通のセルのあとの状態を保存できませんでした")


class StudentEditionItem(_KernelItem):
    """Runs the student edition's cells from its first exercise on (see the module)."""

    def runtest(self):
        from scripts.make_student import leftovers, run_student, self_check_problems

        plan = self.plan
        problems = leftovers(plan.student)
        if plan.alone:
            problems += run_student(nbformat.from_dict(plan.student), self.path.parent,
                                    plan.stubbed)
        else:
            if self.printed(HAS_SNAPSHOT_CODE) != "True":
                raise StudentEditionError(
                    "共通のセルのあとの状態がありません（student-edition-snapshot が"
                    "実行されていません）")
            self.printed(RESTORE_CODE)
            cells = [cell for cell in plan.student.cells if cell.cell_type == "code"]
            rest = [nbformat.from_dict(cell) for cell in cells[plan.shared:]]
            for cell in rest:
                cell.outputs = self.run(cell.source)
                errors = [out for out in cell.outputs if out.output_type == "error"]
                if errors:
                    problems.append(f"実行中にエラーが出ました：{errors[0].ename}: "
                                    f"{errors[0].evalue}（セル {cell.source[:80]!r}）")
                    break
            problems += self_check_problems(rest, plan.stubbed)
        if problems:
            raise StudentEditionError("\n".join(problems))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """After each notebook's cells: the snapshot after its shared cells and the student
    edition's check (only with ``--student-edition``)."""
    if not config.getoption("student_edition"):
        return
    from nbval.plugin import IPyNbCell

    by_file: dict = {}
    for item in items:
        if isinstance(item, IPyNbCell):
            by_file.setdefault(item.parent, []).append(item)
    after: dict = {}  # nbval's item -> the items that follow it
    for notebook, cells in by_file.items():
        plan = plan_for(Path(notebook.path))
        if plan is None:
            continue
        last_shared = next((c for c in cells if c.cell_num == plan.shared - 1), None)
        if last_shared is None and not plan.alone:
            continue  # a selection (-k) without the shared cells: nothing to start from
        if not plan.alone:
            after.setdefault(last_shared, []).append(SnapshotItem.from_parent(
                notebook, name="student-edition-snapshot", plan=plan))
        after.setdefault(cells[-1], []).append(StudentEditionItem.from_parent(
            notebook, name="student-edition", plan=plan))
    items[:] = [new for item in items for new in [item, *after.get(item, [])]]
