"""The machinery of the self-checks: run the student's function safely, print a verdict.

A check, made with :func:`checker`, takes the student's function, runs it on cases the
student does not see, compares with the reference in ``attnlab`` and prints one Japanese
line:

- 【正解】 and ``True`` when every case matches;
- 【未実装】 and ``False`` when the function raises ``NotImplementedError`` (the stub of
  the student edition);
- 【不正解】 and ``False`` with a diagnosis of the likely mistake otherwise.

It never shows a traceback: exceptions raised by the student's code, ``None``, wrong
shapes and dtypes are explained in one or two sentences.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Attribute that :func:`checker` sets on a check (its name), so ``attnlab.checks`` can
#: collect it.
CHECK_ATTRIBUTE = "attnlab_check"


class Mistake(Exception):
    """The answer is wrong; the message is the Japanese diagnosis shown to the student.

    Not taught: machinery for writing a check (CONTRIBUTING.md).
    """


class Unimplemented(Exception):
    """The student's function raised ``NotImplementedError``.

    Not taught: machinery for writing a check (CONTRIBUTING.md).
    """


@dataclass(frozen=True)
class Raised:
    """The student's function raised ``error`` (any exception but NotImplementedError).

    Not taught: machinery for writing a check (CONTRIBUTING.md).
    """

    error: Exception


def _describe_error(error: Exception, limit: int = 80) -> str:
    """``Type: first line of the message`` (shortened), never a traceback."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if len(message) > limit:
        message = message[: limit - 1] + "…"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def raised_message(raised: Raised, case: str) -> str:
    """Japanese sentence saying which exception the student's code raised, on which case.

    Not taught: machinery for writing a check (CONTRIBUTING.md).
    """
    return f"{case}で例外 {_describe_error(raised.error)} が発生しました。"


def call_student(func: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call the student's ``func`` safely.

    Arrays are passed as copies (so the check's inputs stay intact), numpy and Python
    warnings are silenced (they would print into the notebook), ``NotImplementedError``
    becomes :class:`Unimplemented`, and any other exception is returned as
    :class:`Raised` instead of propagating.

    Not taught: machinery for writing a check (CONTRIBUTING.md).
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
            return Raised(err)


def shape_of(value: Any) -> tuple[int, ...] | None:
    """``np.shape`` of something the student returned; None for ragged nested lists.

    Not taught: machinery for writing a check (CONTRIBUTING.md).
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

    Not taught: machinery for writing a check (CONTRIBUTING.md).
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


def returned_array(value: Any, name: str, shape: Sequence[int]) -> np.ndarray:
    """``value`` as a floating array of ``shape``, or a :class:`Mistake` saying what is wrong.

    Not taught: machinery for writing a check (CONTRIBUTING.md).
    """
    if value is None:
        raise Mistake(f"{name} が None です。return を書き忘れていませんか。")
    try:
        array = np.asarray(value)
    except Exception:  # an object numpy cannot convert
        raise Mistake(f"{name} を配列に変換できません（型 {type(value).__name__}）。") from None
    if array.dtype == object or not np.issubdtype(array.dtype, np.number):
        raise Mistake(f"{name} が数値の配列ではありません（dtype={array.dtype}）。")
    if array.shape != tuple(shape):
        raise Mistake(f"{name} の形が {array.shape} です。期待する形は {tuple(shape)} です。")
    if not np.issubdtype(array.dtype, np.floating):
        raise Mistake(
            f"{name} の dtype が {array.dtype} です。重みや平均は小数になるので、"
            "浮動小数点の配列を返してください（整数への丸めや astype(int) をしていませんか）。"
        )
    return array


#: The three verdicts a check can give.
VERDICTS = ("正解", "不正解", "未実装")


@dataclass(frozen=True)
class CheckResult:
    """What a check found, as data: the verdict and the one line the student reads.

    ``verdict`` is one of :data:`VERDICTS`; ``message`` is the line without the verdict
    (the diagnosis when 不正解). ``str(result)`` is the printed line, ``bool(result)``
    whether the answer is right. The grader (``scripts/grade.py``) records these.

    Not taught: machinery of the self-checks and the grader (CONTRIBUTING.md).
    """

    verdict: str
    message: str

    @property
    def passed(self) -> bool:
        return self.verdict == "正解"

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return f"【{self.verdict}】{self.message}"


def checker(success: str) -> Callable[[Callable[[Callable], None]], Callable[[Callable], bool]]:
    """Turn ``body(func)`` into a check that prints a verdict and returns True/False.

    ``body`` raises :class:`Mistake` to fail; :class:`Unimplemented` from
    :func:`call_student` gives 【未実装】. Nothing else escapes: an unexpected error in
    the check itself is reported in one line, without a traceback. The check's
    ``evaluate(func)`` returns the same verdict as a :class:`CheckResult` without
    printing. ``attnlab.checks`` collects every check made with it in a topic module.

    Not taught: machinery for writing a check (CONTRIBUTING.md).
    """

    def decorate(body: Callable[[Callable], None]) -> Callable[[Callable], bool]:
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
        def check(func: Callable) -> bool:
            result = evaluate(func)
            print(result)
            return result.passed

        check.evaluate = evaluate
        setattr(check, CHECK_ATTRIBUTE, check.__name__)
        return check

    return decorate


#: The line :func:`grade_in_namespace` prints before its JSON (the grader looks for it).
GRADE_MARKER = "@@attnlab-grade@@"


def grade_in_namespace(check_name: str, function_names: Sequence[str],
                       namespace: dict, label: str = "") -> CheckResult | None:
    """Run the self-check ``check_name`` on the first of ``function_names`` defined in
    ``namespace`` (a notebook's globals) and print the result as one JSON line after
    :data:`GRADE_MARKER`; None (and ``"found": false``) when no such function exists.

    The grader runs this in the student's kernel after the student's cells. Nothing is
    trusted from the namespace but the function: the check comes from ``attnlab``.

    Not taught: machinery of the grader (scripts/grade.py).
    """
    import json

    from attnlab import checks

    check = checks.CHECKS[check_name]
    found = next((n for n in function_names if n in namespace), None)
    result = None if found is None else check.evaluate(namespace[found])
    record = {"label": label, "check": check_name, "found": found is not None,
              "function": found, "verdict": None if result is None else result.verdict,
              "message": None if result is None else result.message}
    print(GRADE_MARKER + json.dumps(record, ensure_ascii=False), flush=True)
    return result
