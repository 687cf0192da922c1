"""attnlab.experiments: the numbers behind the figures, and numerics only."""

import importlib
import pkgutil
import subprocess
import sys

import numpy as np
import pytest

import attnlab.experiments
from attnlab.experiments.attention_review import (
    SHARPNESS_D_K,
    SHARPNESS_N_KEYS,
    sharpness_samples,
)

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


def test_without_scaling_the_largest_weight_grows_with_d_k_and_with_scaling_it_does_not():
    for n_keys in SHARPNESS_N_KEYS:
        raw = [sharpness_samples(d, False, n_keys)[1].mean() for d in SHARPNESS_D_K]
        scaled = [sharpness_samples(d, True, n_keys)[1].mean() for d in SHARPNESS_D_K]
        assert np.all(np.diff(raw) > 0), n_keys
        assert raw[-1] > 0.85, n_keys
        assert np.ptp(scaled) < 0.05, n_keys


def test_sharpness_weights_are_softmax_rows():
    one, largest = sharpness_samples(64, True, 16)
    assert one.shape == (16,) and np.isclose(one.sum(), 1.0)
    assert np.all((largest >= 1 / 16 - 1e-12) & (largest <= 1.0))


@pytest.mark.parametrize("bad", [{"d_k": 5}, {"n_keys": 3}])
def test_sharpness_rejects_values_outside_the_domain(bad):
    args = {"d_k": 64, "scaled": True, "n_keys": 16, **bad}
    with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
        sharpness_samples(**args)
