"""attnlab.experiments: the numbers behind the figures, and numerics only."""

import importlib
import pkgutil
import subprocess
import sys

import attnlab.experiments

PRESENTATION = ("matplotlib", "ipywidgets", "PIL", "attnlab.plotting", "attnlab.widgets",
                "attnlab.checks")


def test_experiments_import_no_presentation():
    modules = [f"attnlab.experiments.{info.name}"
               for info in pkgutil.iter_modules(attnlab.experiments.__path__)]
    assert modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules for p in {PRESENTATION!r}\n"
        "             if m == p or m.startswith(p + '.')))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]", f"実験のモジュールが表示の層を import しています: {loaded}"
    for name in modules:
        importlib.import_module(name)

