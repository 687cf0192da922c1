"""Run every notebook with strict nbval at lower CPU levels than this machine's best.

Usage: python -m tests.e2e.portable [--levels avx2,avx,baseline] [NOTEBOOK_OR_DIR ...]
(default: notebooks/; ``make test-portable`` runs it)

numpy and OpenBLAS choose SIMD kernels by the CPU they run on, and different kernels
round differently in the last bits. A committed output is a test of the course only if
it is printed with the digits that are stable across machines, so this runner re-executes
the notebooks as a machine with fewer CPU features would: for each level it sets

- ``NPY_DISABLE_CPU_FEATURES`` to numpy's dispatch targets above the level (computed from
  numpy's own ``__cpu_dispatch__``; numpy's compiled baseline cannot be disabled), and
- ``OPENBLAS_CORETYPE`` to an OpenBLAS core of that level (numpy's wheels ship a
  DYNAMIC_ARCH OpenBLAS, which honours it; an unknown name is silently ignored).

Neither variable complains when it is ignored, so the setting is verified twice: a probe
in a subprocess with the level's environment before nbval (to skip or stop early with a
clear message), and the same probe inside each notebook's own kernel after its last cell,
through this module loaded as a pytest plugin (``-p tests.e2e.portable``). The runner fails
when any notebook's kernel did not run at the level it asked for.
"""

import argparse
import ast
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.book import ROOT

REPORT_ENV = "ATTNLAB_PORTABLE_REPORT"
NPY_ENV = "NPY_DISABLE_CPU_FEATURES"
BLAS_ENV = "OPENBLAS_CORETYPE"

# numpy's feature names of x86-64-v2 (Nehalem) and x86-64-v3 (Haswell), psABI levels.
X86_V2 = frozenset({"SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "POPCNT", "SSE42", "CX16",
                    "LAHF", "X86_V2"})
X86_V3 = X86_V2 | {"AVX", "F16C", "FMA3", "AVX2", "BMI", "BMI2", "LZCNT", "MOVBE", "X86_V3"}


@dataclass(frozen=True)
class Level:
    """A CPU level to run the notebooks at.

    ``features`` are numpy's feature names a CPU of this level has: every dispatch target
    outside them is disabled (an allow-list, so a target a later numpy adds above the
    level is disabled too). ``None`` disables every dispatch target: numpy's compiled
    baseline. ``requires`` are the features the machine needs to run the level's kernels.
    """

    name: str
    label: str
    openblas_core: str
    features: frozenset | None
    requires: tuple[str, ...]


LEVELS = (
    Level("avx2", "AVX2（AVX-512 なし、多くの CI ランナー）", "Haswell", X86_V3,
          ("AVX", "AVX2", "FMA3")),
    Level("avx", "AVX（AVX2 と FMA なし）", "Sandybridge", X86_V2 | {"AVX"}, ("AVX",)),
    Level("baseline", "numpy の wheel のベースライン（AVX なし）", "Nehalem", None, ()),
)


def probe() -> dict:
    """What numpy and OpenBLAS run with in this process; the source is sent to kernels.

    Self-contained (imports inside, stdlib and numpy only), because its source is
    executed as is in a notebook's kernel and in ``python -c``.
    """
    import ctypes
    import glob
    import os
    import platform

    import numpy as np

    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy < 2
        from numpy.core import _multiarray_umath as umath

    def libraries():
        """Paths of the loaded shared objects whose name says OpenBLAS."""
        found = []
        try:
            with open("/proc/self/maps") as maps:
                for line in maps:
                    path = line.split(maxsplit=5)[-1].strip()
                    if "openblas" in os.path.basename(path).lower() and path not in found:
                        found.append(path)
        except OSError:  # not Linux: the libraries numpy's wheel ships
            here = os.path.dirname(np.__file__)
            for pattern in ("../numpy.libs/*openblas*", ".dylibs/*openblas*"):
                found += sorted(glob.glob(os.path.join(here, pattern)))
        return found

    def openblas_call(name):
        for path in libraries():
            lib = ctypes.CDLL(path)
            for prefix in ("scipy_openblas_", "openblas_"):
                for suffix in ("64_", "_64", ""):
                    try:
                        function = getattr(lib, prefix + name + suffix)
                    except AttributeError:
                        continue
                    function.restype = ctypes.c_char_p
                    return path, function().decode().strip()
        return None, None

    library, corename = openblas_call("get_corename")
    _, config = openblas_call("get_config")
    return {
        "pid": os.getpid(),
        "machine": platform.machine(),
        "numpy": np.__version__,
        "env": {key: os.environ.get(key)
                for key in ("NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE")},
        "baseline": list(umath.__cpu_baseline__),
        "dispatch": list(umath.__cpu_dispatch__),
        "features": {key: bool(value) for key, value in umath.__cpu_features__.items()},
        "openblas": {"library": library, "corename": corename, "config": config},
    }


PROBE_SCRIPT = inspect.getsource(probe) + "\nimport json\nprint(json.dumps(probe()))\n"


def run_probe(env: dict) -> dict:
    """The probe in a fresh interpreter with ``env``; a failure raises RuntimeError."""
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"終了コード {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def native_env(environ=None) -> dict:
    """The environment without either CPU-level variable: the machine's best level."""
    env = dict(os.environ if environ is None else environ)
    env.pop(NPY_ENV, None)
    env.pop(BLAS_ENV, None)
    return env


def features_to_disable(native: dict, level: Level) -> list[str]:
    """numpy's dispatch targets that this machine has and the level has not.

    Only targets the machine supports are listed (the others are off anyway), and never
    one of numpy's baseline features, which numpy refuses to disable.
    """
    baseline = set(native["baseline"])
    return [target for target in native["dispatch"]
            if native["features"].get(target) and target not in baseline
            and (level.features is None or target not in level.features)]


def level_env(native: dict, level: Level, environ=None) -> dict:
    """The environment that selects ``level``."""
    env = native_env(environ)
    env[NPY_ENV] = " ".join(features_to_disable(native, level))
    env[BLAS_ENV] = level.openblas_core
    return env


def active_targets(report: dict) -> list[str]:
    """numpy's dispatch targets a probe reports as in use."""
    return [t for t in report["dispatch"] if report["features"].get(t)]


def skip_reason(native: dict, level: Level) -> str | None:
    """Why ``level`` cannot or need not run here (None: it runs)."""
    if native["machine"].lower() not in ("x86_64", "amd64"):
        return (f"{level.name} のレベルで実行できません: CPU が x86-64 ではありません"
                f"（{native['machine']}）")
    missing = [f for f in level.requires if not native["features"].get(f)]
    if missing:
        return (f"{level.name} のレベルで実行できません: この CPU には {', '.join(missing)} "
                "がありません（このマシンの最高のレベルがそれより下です）")
    corename = native["openblas"]["corename"] or ""
    if not features_to_disable(native, level) and corename.lower() == level.openblas_core.lower():
        return (f"{level.name} のレベルはこのマシンの最高のレベルと同じなので省きます"
                "（make nbval で実行済み）")
    return None


def check_probe(report: dict, native: dict, level: Level) -> list[str]:
    """Everything in which ``report`` differs from ``level``; [] when the level took effect."""
    problems = []
    disabled = features_to_disable(native, level)
    if (report["env"].get(NPY_ENV) or "") != " ".join(disabled):
        problems.append(f"{NPY_ENV}={report['env'].get(NPY_ENV)!r} です"
                        f"（{' '.join(disabled)!r} のはず）")
    for target in report["dispatch"]:
        expected = bool(native["features"].get(target)) and target not in disabled
        used = bool(report["features"].get(target))
        if used and not expected:
            problems.append(f"numpy が {target} のカーネルを使っています（無効にしたはず）")
        elif expected and not used:
            problems.append(f"numpy が {target} のカーネルを使っていません（使えるはず）")
    openblas = report["openblas"]
    if not openblas["corename"]:
        problems.append("OpenBLAS のコア名を読めません（numpy の BLAS が OpenBLAS でない？）")
    elif openblas["corename"].lower() != level.openblas_core.lower():
        note = ""
        if "DYNAMIC_ARCH" not in (openblas["config"] or ""):
            note = "。この OpenBLAS は DYNAMIC_ARCH でビルドされていないので選べません"
        problems.append(f"OpenBLAS のコアが {openblas['corename']} です"
                        f"（{BLAS_ENV}={level.openblas_core} のはず）{note}")
    return problems


def describe(report: dict) -> str:
    """One line: numpy's active dispatch targets and OpenBLAS's core."""
    targets = ", ".join(active_targets(report)) or "なし"
    return (f"numpy のディスパッチ先: {targets}（ベースライン {', '.join(report['baseline'])}）"
            f" / OpenBLAS のコア: {report['openblas']['corename']}")


def read_report(path: Path) -> tuple[list[str], dict[str, dict]]:
    """The plugin's record: the notebooks collected and each one's kernel probe."""
    collected, probes = [], {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "collected" in entry:
                collected += entry["collected"]
            else:
                probes[entry["notebook"]] = entry
    return collected, probes


def check_kernels(collected: list[str], probes: dict[str, dict], native: dict,
                  level: Level) -> list[str]:
    """Problems with the kernels' probes: a notebook without one fails too."""
    if not collected:
        return ["ノートブックの記録がありません（プラグイン tests.e2e.portable が動いていない？）"]
    problems = []
    for notebook in collected:
        entry = probes.get(notebook)
        if entry is None:
            problems.append(f"{notebook}: カーネルの CPU のレベルを確かめられませんでした")
        elif "error" in entry:
            problems.append(f"{notebook}: カーネルの調査に失敗しました: {entry['error']}")
        else:
            problems += [f"{notebook}: {p}" for p in check_probe(entry["probe"], native, level)]
    return problems


# --- the pytest plugin (loaded in nbval's pytest process with -p tests.e2e.portable) ---

def _record(entry: dict) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as report:
            report.write(json.dumps(entry, ensure_ascii=False) + "\n")


def probe_kernel(kernel, timeout: float = 60) -> dict:
    """Run :func:`probe` in an nbval kernel (after the notebook) and return its report."""
    msg_id = kernel.kc.execute(inspect.getsource(probe), silent=True, store_history=False,
                               user_expressions={"probe": "__import__('json').dumps(probe())"},
                               stop_on_error=False)
    while True:
        msg = kernel.get_message(stream="shell", timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id:
            break
    content = msg["content"]
    if content["status"] != "ok":
        raise RuntimeError(f"{content.get('ename')}: {content.get('evalue')}")
    result = content["user_expressions"]["probe"]
    if result["status"] != "ok":
        raise RuntimeError(f"{result.get('ename')}: {result.get('evalue')}")
    return json.loads(ast.literal_eval(result["data"]["text/plain"]))


def _is_notebook(node) -> bool:
    return node is not None and hasattr(node, "kernel") and node.path.suffix == ".ipynb"


def pytest_collection_finish(session):
    notebooks = sorted({str(item.parent.path) for item in session.items
                        if _is_notebook(item.parent)})
    _record({"collected": notebooks})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """After a notebook's last cell, before nbval stops its kernel: probe that kernel."""
    notebook = item.parent
    if not _is_notebook(notebook) or (nextitem is not None and nextitem.parent is notebook):
        return
    entry = {"notebook": str(notebook.path)}
    kernel = notebook.kernel
    try:
        if kernel is None or not kernel.is_alive():
            raise RuntimeError("カーネルが動いていません")
        entry["probe"] = probe_kernel(kernel)
    except Exception as exc:  # recorded; the runner fails the level
        entry["error"] = f"{type(exc).__name__}: {exc}"
    _record(entry)


# --- the runner ---

def run_level(native: dict, level: Level, paths: list[str]) -> tuple[bool, list[str]]:
    """nbval on ``paths`` at ``level``; (nbval passed, problems with the level)."""
    env = level_env(native, level)
    try:
        report = run_probe(env)
    except RuntimeError as exc:
        return False, [f"{level.name} のレベルで numpy を読み込めません: {exc}"]
    problems = check_probe(report, native, level)
    print(f"  事前の確認: {describe(report)}", flush=True)
    if problems:
        return False, problems
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "kernels.jsonl"
        env[REPORT_ENV] = str(record)
        command = [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env",
                   "-p", "tests.e2e.portable", "-p", "no:cacheprovider", *paths]
        passed = subprocess.run(command, cwd=ROOT, env=env).returncode == 0
        collected, probes = read_report(record)
    problems = check_kernels(collected, probes, native, level)
    for notebook in collected:
        if "probe" in probes.get(notebook, {}):
            name = Path(notebook).name
            print(f"  カーネル {name}: {describe(probes[notebook]['probe'])}", flush=True)
    return passed, problems


def select_levels(names: str) -> list[Level]:
    known = {level.name: level for level in LEVELS}
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown or not wanted:
        named = ", ".join(unknown) if unknown else repr(names)
        raise SystemExit(f"知らないレベルです: {named}（選べるのは {', '.join(known)}）")
    return [known[name] for name in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.portable",
        description="全ノートブックを、このマシンより低い CPU のレベルで nbval にかける")
    parser.add_argument("paths", nargs="*", default=["notebooks"],
                        help="ノートブックかフォルダー（既定: notebooks）")
    parser.add_argument("--levels", default=",".join(level.name for level in LEVELS),
                        help="実行するレベル（既定: %(default)s）")
    args = parser.parse_args(argv)
    levels = select_levels(args.levels)
    paths = [str(Path(p).resolve()) for p in args.paths]

    native = run_probe(native_env())
    print(f"このマシンの最高のレベル: {describe(native)}", flush=True)
    failed, differ, ran = [], [], 0
    for level in levels:
        print(f"\n== {level.name}: {level.label}", flush=True)
        reason = skip_reason(native, level)
        if reason:
            print(f"  {reason}", flush=True)
            continue
        print(f"  {NPY_ENV}={' '.join(features_to_disable(native, level))!r}"
              f" {BLAS_ENV}={level.openblas_core}", flush=True)
        start = time.perf_counter()
        passed, problems = run_level(native, level, paths)
        seconds = time.perf_counter() - start
        ran += 1
        for problem in problems:
            print(f"  {level.name} のレベルになっていません: {problem}", flush=True)
        if problems:
            failed.append(level.name)
        elif not passed:
            print(f"  {level.name} のレベルでノートブックの出力が一致しません"
                  "（上の nbval の差分を見てください）", flush=True)
            failed.append(level.name)
            differ.append(level.name)
        print(f"  {level.name}: {'失敗' if level.name in failed else '成功'}（{seconds:.0f} 秒）",
              flush=True)
    if failed:
        print(f"\n失敗したレベル: {', '.join(failed)}", flush=True)
        if differ:
            print("印刷する数値は、どのマシンでも同じになる桁だけにしてください（CONTRIBUTING.md"
                  " の「印刷する数値は、どのマシンでも同じ桁だけにする」）。", flush=True)
        return 1
    if not ran:
        print("\nこのマシンでは、より低いレベルを一つも実行できませんでした。", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
