"""tests/e2e/portable.py (make test-portable): the CPU levels, the probe and its checks."""

import json
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from scripts.book import execute_notebook
from tests.e2e.portable import (
    BLAS_ENV,
    LEVELS,
    NPY_ENV,
    PROBE_SCRIPT,
    check_kernels,
    check_probe,
    features_to_disable,
    level_env,
    main,
    native_env,
    probe,
    read_report,
    run_probe,
    select_levels,
    skip_reason,
)

LEVEL = {level.name: level for level in LEVELS}
AVX512 = ["AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL", "X86_V4", "AVX512_ICL"]


def fake_probe(*, dispatch=("X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"),
               baseline=("X86_V2",), on=("AVX", "AVX2", "FMA3", "X86_V3", *AVX512),
               corename="SkylakeX", env=None, machine="x86_64"):
    """A probe report shaped like numpy 2.4's on this kind of machine."""
    features = {name: True for name in ("SSE", "SSE2", "SSE3", "SSE42", *baseline)}
    features.update({name: False for name in dispatch})
    features.update({name: True for name in on})
    return {
        "pid": 1, "machine": machine, "numpy": "2.4.6",
        "env": {NPY_ENV: None, BLAS_ENV: None, **(env or {})},
        "baseline": list(baseline), "dispatch": list(dispatch), "features": features,
        "openblas": {"library": "libscipy_openblas64_.so", "corename": corename,
                     "config": "OpenBLAS 0.3.31  USE64BITINT DYNAMIC_ARCH NO_AFFINITY Haswell"},
    }


def at_level(native, level, **changes):
    """The report of a kernel in which ``level`` took effect."""
    disabled = features_to_disable(native, level)
    report = json.loads(json.dumps(native))
    report["env"] = {NPY_ENV: " ".join(disabled), BLAS_ENV: level.openblas_core}
    for target in disabled:
        report["features"][target] = False
    report["openblas"]["corename"] = level.openblas_core
    report.update(changes)
    return report


# --- which features each level disables ---

def test_avx2_level_disables_only_the_avx512_targets_the_machine_has():
    native = fake_probe()  # AVX512_SPR is dispatched but this CPU lacks it
    assert features_to_disable(native, LEVEL["avx2"]) == ["X86_V4", "AVX512_ICL"]


def test_baseline_level_disables_every_dispatch_target_the_machine_has():
    native = fake_probe()
    assert features_to_disable(native, LEVEL["baseline"]) == ["X86_V3", "X86_V4", "AVX512_ICL"]


def test_older_numpy_target_names_are_sorted_by_the_allow_list():
    dispatch = ("SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "FMA3", "AVX2",
                "AVX512F", "AVX512CD", "AVX512_SKX", "AVX512_CLX", "AVX512_ICL")
    native = fake_probe(dispatch=dispatch, baseline=("SSE", "SSE2", "SSE3"),
                        on=dispatch)
    assert features_to_disable(native, LEVEL["avx2"]) == [
        "AVX512F", "AVX512CD", "AVX512_SKX", "AVX512_CLX", "AVX512_ICL"]
    assert features_to_disable(native, LEVEL["avx"]) == [
        "F16C", "FMA3", "AVX2", "AVX512F", "AVX512CD", "AVX512_SKX", "AVX512_CLX", "AVX512_ICL"]
    assert features_to_disable(native, LEVEL["baseline"]) == list(dispatch)


def test_a_baseline_feature_is_never_disabled():
    # numpy refuses to start when asked to disable a feature of its compiled baseline
    native = fake_probe(dispatch=("X86_V2", "X86_V3"), on=("X86_V2", "X86_V3"))
    assert features_to_disable(native, LEVEL["baseline"]) == ["X86_V3"]


def test_level_env_sets_both_variables_and_drops_the_callers(monkeypatch):
    native = fake_probe()
    env = level_env(native, LEVEL["avx2"], {"PATH": "/bin", NPY_ENV: "X86_V3",
                                             BLAS_ENV: "Katmai"})
    assert env == {"PATH": "/bin", NPY_ENV: "X86_V4 AVX512_ICL", BLAS_ENV: "Haswell"}
    assert native_env({"PATH": "/bin", NPY_ENV: "X86_V3", BLAS_ENV: "Katmai"}) == {
        "PATH": "/bin"}


# --- when a level is skipped ---

def test_a_machine_without_avx2_skips_that_level_and_says_why():
    native = fake_probe(on=("AVX",), corename="Sandybridge")
    reason = skip_reason(native, LEVEL["avx2"])
    assert reason.startswith("avx2 のレベルで実行できません") and "AVX2, FMA3" in reason
    assert skip_reason(native, LEVEL["baseline"]) is None


def test_a_level_equal_to_the_machines_best_is_skipped():
    native = fake_probe(on=("AVX", "AVX2", "FMA3", "X86_V3"), corename="Haswell")
    assert "最高のレベルと同じ" in skip_reason(native, LEVEL["avx2"])
    assert skip_reason(native, LEVEL["avx"]) is None


def test_an_avx512_machine_runs_every_level():
    native = fake_probe()
    assert [skip_reason(native, level) for level in LEVELS] == [None] * len(LEVELS)


def test_a_cpu_that_is_not_x86_skips_with_a_message():
    assert "x86-64 ではありません" in skip_reason(fake_probe(machine="arm64"), LEVEL["baseline"])


# --- the refusal when a setting did not take effect ---

def test_a_kernel_at_the_level_passes():
    native = fake_probe()
    for level in LEVELS:
        assert check_probe(at_level(native, level), native, level) == []


def test_a_kernel_at_the_native_level_is_refused():
    native = fake_probe()
    problems = check_probe(native, native, LEVEL["avx2"])
    text = "\n".join(problems)
    assert f"{NPY_ENV}=None" in text
    assert "X86_V4 のカーネルを使っています" in text
    assert "AVX512_ICL のカーネルを使っています" in text
    assert "OpenBLAS のコアが SkylakeX です" in text


def test_an_ignored_openblas_coretype_is_refused():
    # OpenBLAS silently keeps its own choice for a name it does not know
    native = fake_probe()
    report = at_level(native, LEVEL["baseline"])
    report["openblas"]["corename"] = "SkylakeX"
    (problem,) = check_probe(report, native, LEVEL["baseline"])
    assert "OpenBLAS のコアが SkylakeX です" in problem and "Nehalem" in problem
    assert "DYNAMIC_ARCH" not in problem


def test_an_openblas_without_dynamic_arch_is_named():
    native = fake_probe()
    report = at_level(native, LEVEL["avx2"])
    report["openblas"].update(corename="Zen", config="OpenBLAS 0.3.26 NO_AFFINITY Zen")
    (problem,) = check_probe(report, native, LEVEL["avx2"])
    assert "DYNAMIC_ARCH でビルドされていない" in problem


def test_a_blas_that_is_not_openblas_is_refused():
    native = fake_probe()
    report = at_level(native, LEVEL["avx2"])
    report["openblas"].update(corename=None, library=None, config=None)
    (problem,) = check_probe(report, native, LEVEL["avx2"])
    assert "コア名を読めません" in problem


def test_a_numpy_target_left_on_is_refused():
    native = fake_probe()
    report = at_level(native, LEVEL["baseline"])
    report["features"]["X86_V3"] = True
    (problem,) = check_probe(report, native, LEVEL["baseline"])
    assert problem == "numpy が X86_V3 のカーネルを使っています（無効にしたはず）"


def test_every_collected_notebook_needs_its_kernels_probe(tmp_path):
    native = fake_probe()
    level = LEVEL["avx2"]
    record = tmp_path / "kernels.jsonl"
    entries = [{"collected": ["a.ipynb", "b.ipynb", "c.ipynb"]},
               {"notebook": "a.ipynb", "probe": at_level(native, level)},
               {"notebook": "c.ipynb", "error": "RuntimeError: カーネルが動いていません"}]
    record.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    collected, probes = read_report(record)
    assert collected == ["a.ipynb", "b.ipynb", "c.ipynb"]
    problems = check_kernels(collected, probes, native, level)
    assert len(problems) == 2
    assert problems[0].startswith("b.ipynb: カーネルの CPU のレベルを確かめられませんでした")
    assert problems[1].startswith("c.ipynb: カーネルの調査に失敗しました")


def test_no_record_at_all_is_refused(tmp_path):
    collected, probes = read_report(tmp_path / "missing.jsonl")
    (problem,) = check_kernels(collected, probes, fake_probe(), LEVEL["avx2"])
    assert "プラグイン tests.e2e.portable" in problem


def test_unknown_level_names_are_refused():
    assert [level.name for level in select_levels("baseline, avx2")] == ["baseline", "avx2"]
    with pytest.raises(SystemExit, match="知らないレベルです: avx512"):
        select_levels("avx2,avx512")


# --- the real numpy and OpenBLAS of this environment ---

def test_probe_reads_this_numpy_and_openblas():
    report = probe()
    assert report["dispatch"] and report["baseline"]
    assert set(report["dispatch"]) <= set(report["features"])
    assert report["openblas"]["corename"], "OpenBLAS のコア名を読めない"
    assert "DYNAMIC_ARCH" in report["openblas"]["config"]


def test_probe_script_prints_the_same_report():
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], capture_output=True,
                          text=True, check=True, env=native_env())
    assert json.loads(done.stdout)["dispatch"] == probe()["dispatch"]


@pytest.mark.slow
def test_every_level_that_runs_here_takes_effect():
    native = run_probe(native_env())
    ran = 0
    for level in LEVELS:
        if skip_reason(native, level) is None:
            ran += 1
            assert check_probe(run_probe(level_env(native, level)), native, level) == []
    if not ran:
        pytest.skip("この CPU ではより低いレベルがありません")


# --- the target fails on a number whose last bits depend on the CPU ---

DIGEST = "hashlib.sha256(c.tobytes()).hexdigest()[:16]"
SETUP = ("import hashlib\nimport numpy as np\nrng = np.random.default_rng(0)\n"
         "a = rng.standard_normal((128, 128), dtype=np.float32)\nc = a @ a  # (128, 128)")


@pytest.mark.slow
def test_target_fails_on_a_printed_float_that_depends_on_the_simd_level(tmp_path, capfd,
                                                                       monkeypatch):
    """A float32 matrix product differs in its last bits between OpenBLAS's kernels."""
    monkeypatch.delenv(NPY_ENV, raising=False)
    monkeypatch.delenv(BLAS_ENV, raising=False)
    native = run_probe(native_env())
    level = LEVEL["baseline"]
    if skip_reason(native, level):
        pytest.skip(skip_reason(native, level))
    script = f"{SETUP}\nprint({DIGEST})"
    digests = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True).stdout
               for env in (native_env(), level_env(native, level))]
    if digests[0] == digests[1]:
        pytest.skip("この CPU ではベースラインでも行列積の結果が同じです")

    nb = new_notebook(cells=[new_code_cell(SETUP), new_code_cell(f"print({DIGEST})"),
                             new_code_cell("print(f'{float(np.abs(c).mean()):.3g}')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    execute_notebook(nb, tmp_path, timeout=120)  # saved at the native level, as make notebooks
    path = tmp_path / "simd_digest.ipynb"
    nbformat.write(nb, path)
    capfd.readouterr()

    assert main([str(path), "--levels", "baseline"]) == 1
    out = capfd.readouterr().out
    assert "1 failed, 2 passed" in out  # the digest differs, the rounded mean holds
    assert "simd_digest.ipynb::Cell 1" in out
    assert "baseline のレベルでノートブックの出力が一致しません" in out
    assert f"OpenBLAS のコア: {level.openblas_core}" in out  # probed in the kernel itself
    assert "のレベルになっていません" not in out
