"""The machinery of the self-checks: run the student's function safely, print a verdict.

A check, made with :func:`checker`, takes the student's function, runs it on cases the
student does not see, compares with the reference in ``attnlab`` and prints one Japanese
line:

- 【正解】 when every case matches;
- 【未実装】 when the function raises ``NotImplementedError`` (the stub of the student
  edition);
- 【不正解】 with a diagnosis of the likely mistake otherwise.

The line is all a notebook shows: the check returns its :class:`CheckResult` (true when
正解), which displays nothing more, so no bare ``True`` / ``False`` follows the line. It
never shows a traceback: exceptions raised by the student's code (with the line of the
student's code where they happened), ``None``, wrong shapes and dtypes are explained in
one or two sentences. When the chapter imports the reference the student is asked to
write, the check runs the answer with :func:`call_refusing`, which refuses an answer that
is, or calls, the reference.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import linecache
import re
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, TracebackType
from typing import Any

import numpy as np

#: Attribute that :func:`checker` sets on a check (its name): ``tests/test_registries.py``
#: finds every check by it and names one that ``attnlab.checks`` does not list.
CHECK_ATTRIBUTE = "attnlab_check"


class Mistake(Exception):
    """The answer is wrong; the message is the Japanese diagnosis shown to the student.

    Not taught: machinery for writing a check (checks/README.md).
    """


class Unimplemented(Exception):
    """The student's function raised ``NotImplementedError``.

    Not taught: machinery for writing a check (checks/README.md).
    """


@dataclass(frozen=True)
class Raised:
    """The student's function raised ``error`` (any exception but NotImplementedError).

    ``where`` says where in the student's code, e.g. ``セル In[7] の 4 行目：scores = …``
    (:func:`student_line`); empty when no line of the traceback is the student's.

    Not taught: machinery for writing a check (checks/README.md).
    """

    error: Exception
    where: str = ""


def _describe_error(error: Exception, limit: int = 80) -> str:
    """``Type: first line of the message`` (shortened), never a traceback."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if len(message) > limit:
        message = message[: limit - 1] + "…"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


#: Code that is not the student's: Python's own library, installed packages (also
#: Debian's and Colab's ``dist-packages``) and attnlab itself.
_LIBRARY_FOLDERS = tuple({
    str(Path(folder).resolve())
    for folder in (*(sysconfig.get_paths()[key]
                     for key in ("stdlib", "platstdlib", "purelib", "platlib")),
                   Path(__file__).resolve().parent.parent)
})
_PACKAGE_FOLDERS = {"site-packages", "dist-packages"}
_COLAB_CELL = re.compile(r"^<ipython-input-(?P<number>\d+)-")  # IPython before 8


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):  # a cell, exec'd text; but <frozen importlib…> is Python's
        return filename.startswith("<frozen")
    path = Path(filename).resolve()
    return (bool(_PACKAGE_FOLDERS.intersection(path.parts))
            or any(path.is_relative_to(folder) for folder in _LIBRARY_FOLDERS))


def _cell_name(filename: str) -> str | None:
    """``In[7]`` when ``filename`` is a notebook cell's code (IPython's own label), else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    format_code_name = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if format_code_name is not None:
        named = format_code_name(filename)  # ("Cell", "In[7]") for a cell of this kernel
        if named is not None:
            return named[1]
    match = _COLAB_CELL.match(filename)
    return f"In[{match['number']}]" if match else None


def student_line(traceback: TracebackType | None, limit: int = 60) -> str:
    """Where an exception happened in the student's code: the last line of ``traceback``
    outside Python's library, the installed packages and attnlab; "" when there is none.

    A notebook cell is named as IPython names it in a traceback (``セル In[7] の 4 行目``), a
    file by its name (``mine.py の 12 行目``); the source line follows when Python knows it
    (shortened to ``limit`` characters). An error raised inside numpy is placed on the
    student's line that called numpy.

    Not taught: machinery for writing a check (checks/README.md).
    """
    last = None
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if not _is_library(code.co_filename):
            last = (code.co_filename, traceback.tb_lineno)
        traceback = traceback.tb_next
    if last is None:
        return ""
    filename, line = last
    cell = _cell_name(filename)
    if cell is not None:
        where = f"セル {cell} の {line} 行目"
    elif filename.startswith("<"):  # text run with exec: no file to name
        where = f"{line} 行目"
    else:
        where = f"{Path(filename).name} の {line} 行目"
    source = linecache.getline(filename, line).strip()
    if len(source) > limit:
        source = source[: limit - 1] + "…"
    return f"{where}：{source}" if source else where


def raised_message(raised: Raised, case: str) -> str:
    """Japanese sentence saying which exception the student's code raised, on which case,
    and where in the student's code (without a traceback).

    Not taught: machinery for writing a check (checks/README.md).
    """
    where = f"（{raised.where}）" if raised.where else ""
    return f"{case}で例外 {_describe_error(raised.error)} が発生しました{where}。"


def call_student(func: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call the student's ``func`` safely.

    Arrays are passed as copies (so the check's inputs stay intact), numpy and Python
    warnings are silenced (they would print into the notebook), ``NotImplementedError``
    becomes :class:`Unimplemented`, and any other exception is returned as
    :class:`Raised` (with the line of the student's code it came from) instead of
    propagating.

    Not taught: machinery for writing a check (checks/README.md).
    """
    args = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)
    kwargs = {
        key: np.array(a, copy=True) if isinstance(a, np.ndarray) else a
        for key, a in kwargs.items()
    }
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return func(*args, **kwargs)
        except NotImplementedError as err:
            raise Unimplemented(str(err)) from None
        except Exception as err:  # any error of the student's code is diagnosed
            # the first frame is this function's: the student's code starts below it
            return Raised(err, student_line(err.__traceback__.tb_next))


def _codes(reference: Callable | type) -> list[CodeType]:
    """The code objects that run when ``reference`` (a function or a class) is used."""
    if isinstance(reference, type):  # a class: every method, property and its __init__
        members = []
        for member in vars(reference).values():
            if isinstance(member, staticmethod | classmethod):
                member = member.__func__
            if isinstance(member, property):
                members.extend(f for f in (member.fget, member.fset) if f is not None)
            elif callable(member):
                members.append(member)
        return [code for member in members for code in _codes(member)]
    code = getattr(inspect.unwrap(reference), "__code__", None)
    return [code] if isinstance(code, CodeType) else []


def call_refusing(func: Callable,
                  references: Mapping[Callable | type, str] | Iterable[Callable | type],
                  *args: Any, **kwargs: Any) -> Any:
    """``call_student(func, …)``, refusing an answer that is, or calls, a reference.

    ``references`` are the functions (or classes) of attnlab that the chapter's setup
    cell imports and that compute what the exercise asks the student to write: a mapping
    to the message the student reads if the answer uses one, or just the references for
    the standard message (``attnlab の apply_rope を使っています。…``). A profile
    hook watches every Python call made while ``func`` runs, so the answer is refused
    however it reached the reference: the reference passed itself, a wrapper, a
    ``functools.partial``, an alias, ``attnlab.….name``, a helper of the student's that
    calls it, a method of a class of attnlab. If one of them ran, :class:`Mistake` is
    raised with the message of the first that ran; otherwise the result is returned as
    :func:`call_student` returns it.

    Not taught: machinery for writing a check (checks/README.md).
    """
    watched: dict[CodeType, str] = {}
    pairs = (references.items() if isinstance(references, Mapping)
             else ((reference, None) for reference in references))
    for reference, message in pairs:
        name = getattr(reference, "__name__", str(reference))
        for code in _codes(reference):
            watched.setdefault(code, message or (
                f"attnlab の {name} を使っています。この練習問題では {name} を使わずに、"
                "自分で計算してください（書いたあとの確かめには使えます）。"))
    ran: list[str] = []

    def watch(frame, event, arg):
        if event == "call" and not ran and (message := watched.get(frame.f_code)):
            ran.append(message)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        result = call_student(func, *args, **kwargs)
    finally:
        sys.setprofile(previous)
    if ran:
        raise Mistake(ran[0])
    return result


def shape_of(value: Any) -> tuple[int, ...] | None:
    """``np.shape`` of something the student returned; None for ragged nested lists.

    Not taught: machinery for writing a check (checks/README.md).
    """
    try:
        return np.shape(value)
    except Exception:  # ragged nested lists
        return None


def returned_pair(value: Any, out_shape: Sequence[int],
                  weights_shape: Sequence[int]) -> tuple[Any, Any]:
    """The two parts of an ``(out, weights)`` answer, or a :class:`Mistake` saying why not.

    Explains None, a single array (recognised as out or weights alone by its shape), a
    container of another length, and the two parts swapped. The parts are returned as
    given; check them with :func:`returned_array`.

    Not taught: machinery for writing a check (checks/README.md).
    """
    out_shape, weights_shape = tuple(out_shape), tuple(weights_shape)
    if value is None:
        raise Mistake("None が返されました。最後に return out, weights を書き忘れていませんか。")
    if not isinstance(value, tuple | list):
        shape = shape_of(value) if isinstance(value, np.ndarray) else None
        if shape == out_shape != weights_shape:
            raise Mistake("出力 out だけを返しています。return out, weights のように重みも返し、"
                          "(out, weights) の 2 つ組にしてください。")
        if shape == weights_shape != out_shape:
            raise Mistake("重み weights だけを返しています。return out, weights と出力も返し、"
                          "(out, weights) の 2 つ組にしてください。")
        raise Mistake(
            f"返り値が {type(value).__name__} です。(out, weights) の 2 つ組を返してください。"
        )
    if len(value) != 2:
        raise Mistake(
            f"返り値の要素が {len(value)} 個です。(out, weights) の 2 つを返してください。"
        )
    first, second = (shape_of(part) for part in value)
    if first == weights_shape and second == out_shape and out_shape != weights_shape:
        raise Mistake("out と weights の順番が逆です。return out, weights の順に返してください。")
    return value[0], value[1]


def _spaced(name: str) -> str:
    """``name`` ready for a Japanese particle: a space after a Latin name (``out の``),
    none after a Japanese one (``ケースの返り値の``), as the book's typography has it."""
    return f"{name} " if name[-1:].isascii() else name


def returned_array(value: Any, name: str, shape: Sequence[int]) -> np.ndarray:
    """``value`` as a floating array of ``shape``, or a :class:`Mistake` saying what is wrong.

    Not taught: machinery for writing a check (checks/README.md).
    """
    subject = _spaced(name)
    if value is None:
        raise Mistake(f"{subject}が None です。return を書き忘れていませんか。")
    try:
        array = np.asarray(value)
    except Exception:  # an object numpy cannot convert
        raise Mistake(f"{subject}を配列に変換できません（型 {type(value).__name__}）。") from None
    if array.dtype == object or not np.issubdtype(array.dtype, np.number):
        raise Mistake(f"{subject}が数値の配列ではありません（dtype={array.dtype}）。")
    if array.shape != tuple(shape):
        raise Mistake(f"{subject}の形が {array.shape} です。期待する形は {tuple(shape)} です。")
    if not np.issubdtype(array.dtype, np.floating):
        raise Mistake(
            f"{subject}の dtype が {array.dtype} です。この値は小数になるので、"
            "浮動小数点の配列を返してください（整数への丸めや astype(int) をしていませんか）。"
        )
    return array


#: How many times each diagnosis has been given in this kernel (:func:`fix_on_repeat`).
_ATTEMPTS: dict[str, int] = {}
#: What a first diagnosis that keeps its fix back ends with.
REPEAT_NOTE = "（同じ間違いのままもう一度確かめると、直し方も表示します。）"


def fix_on_repeat(key: str, what_went_wrong: str, fix: str) -> str:
    """A diagnosis that names the mistake first and hands over the fix only later.

    The first time ``key`` (e.g. ``"ex03-split-heads/strided"``) is diagnosed in this
    kernel the message is ``what_went_wrong`` and :data:`REPEAT_NOTE`; from the second
    time on it is ``what_went_wrong`` followed by ``fix`` (the code). A student who
    reads the first message can still find the fix alone; one who is stuck gets it.

    Not taught: machinery for writing a check (checks/README.md).
    """
    _ATTEMPTS[key] = _ATTEMPTS.get(key, 0) + 1
    return what_went_wrong + (REPEAT_NOTE if _ATTEMPTS[key] == 1 else fix)


def reset_attempts() -> None:
    """Forget every diagnosis given so far (:func:`fix_on_repeat` starts again).

    Not taught: machinery for writing a check (checks/README.md).
    """
    _ATTEMPTS.clear()


#: The three verdicts a check can give.
VERDICTS = ("正解", "不正解", "未実装")


@dataclass(frozen=True)
class CheckResult:
    """What a check found, as data: the verdict and the one line the student reads.

    ``verdict`` is one of :data:`VERDICTS`; ``message`` is the line without the verdict
    (the diagnosis when 不正解). ``str(result)`` is the printed line, ``bool(result)``
    whether the answer is right. The grader (``scripts/grade.py``) records these.

    In a notebook a result shows as its line, never as ``True`` / ``False`` or a repr: a
    check has printed the line already (``printed``), so the result it returns shows
    nothing more; ``check.evaluate(func)`` at the end of a cell shows its line.

    Not taught: machinery of the self-checks and the grader (checks/README.md).
    """

    verdict: str
    message: str
    printed: bool = dataclasses.field(default=False, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.verdict == "正解"

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return f"【{self.verdict}】{self.message}"

    def _ipython_display_(self) -> None:
        """IPython calls this, instead of showing a repr, for a cell's last value."""
        if not self.printed:
            print(self)


def checker(success: str) -> Callable[[Callable[[Callable], None]],
                                      Callable[[Callable], CheckResult]]:
    """Turn ``body(func)`` into a check that prints a verdict and returns its
    :class:`CheckResult` (true when 正解; it shows nothing more in a notebook).

    ``body`` raises :class:`Mistake` to fail; :class:`Unimplemented` from
    :func:`call_student` gives 【未実装】. Nothing else escapes: an unexpected error in
    the check itself is reported in one line, without a traceback. The check's
    ``evaluate(func)`` returns the same verdict as a :class:`CheckResult` without
    printing. List every check made with it in ``attnlab.checks`` (its import, ``CHECKS``
    and ``__all__``): ``tests/test_registries.py`` names one that is missing.

    Not taught: machinery for writing a check (checks/README.md).
    """

    def decorate(body: Callable[[Callable], None]) -> Callable[[Callable], CheckResult]:
        def evaluate(func: Callable) -> CheckResult:
            name = getattr(func, "__name__", "関数")
            if not callable(func):
                return CheckResult("不正解", "関数を渡してください"
                                   f"（渡されたのは {type(func).__name__}）。")
            try:
                body(func)
            except Unimplemented:
                return CheckResult("未実装", f"{name} はまだ実装されていません。"
                                   "NotImplementedError の行を消して、関数を書いてください。")
            except Mistake as mistake:
                return CheckResult("不正解", f"{name}: {mistake}")
            except Exception as err:  # a bug of the check must not show a traceback either
                return CheckResult("不正解", f"{name} を確かめる途中で問題が起きました"
                                   f"（{_describe_error(err)}）。返り値の形と型を確かめてください。")
            return CheckResult("正解", f"{name}: {success}")

        @functools.wraps(body)
        def check(func: Callable) -> CheckResult:
            result = evaluate(func)
            print(result)
            return dataclasses.replace(result, printed=True)

        check.evaluate = evaluate
        setattr(check, CHECK_ATTRIBUTE, check.__name__)
        return check

    return decorate
