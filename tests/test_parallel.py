"""on_cores: independent calls shared among the CPU cores, in order, and the cores a
container's CPU quota allows."""

import os
import subprocess
import sys

import pytest

from attnlab import parallel
from attnlab.parallel import on_cores, on_threads


def test_on_cores_keeps_the_order_of_the_calls():
    assert on_cores(divmod, [(7, 2), (9, 4)], workers=1) == [(3, 1), (2, 1)]
    assert on_cores(divmod, [(7, 2), (9, 4), (5, 5)], workers=2) == [(3, 1), (2, 1), (1, 0)]


@pytest.mark.parametrize(("text", "cap"), [("max 100000", None), ("100000 100000", 1),
                                           ("250000 100000", 2), ("garbage", None)])
def test_a_containers_cpu_quota_limits_the_cores(tmp_path, monkeypatch, text, cap):
    quota = tmp_path / "cpu.max"
    quota.write_text(text + "\n")
    monkeypatch.setattr(parallel, "CPU_QUOTA_FILE", tmp_path / "absent")
    affinity = parallel._available_cores()
    monkeypatch.setattr(parallel, "CPU_QUOTA_FILE", quota)
    assert parallel._available_cores() == (affinity if cap is None else min(affinity, cap))


def test_a_script_read_from_standard_input_runs_its_calls_in_order(tmp_path):
    """A spawned process would look for the main script "<stdin>" on disk and die
    (BrokenProcessPool): such a script gets its results here, in order."""
    script = "from attnlab.parallel import on_cores\nprint(on_cores(abs, [(-1,), (-2,), (3,)]))\n"
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "[1, 2, 3]\n"), done.stderr


def test_a_cost_starts_the_costliest_calls_first_and_keeps_the_order_of_the_results():
    calls = [(7, 2), (9, 4), (5, 5), (8, 3)]
    expected = [divmod(*call) for call in calls]
    assert on_cores(divmod, calls, workers=2, cost=lambda call: call[0]) == expected
    assert on_cores(divmod, calls, workers=1, cost=lambda call: call[0]) == expected


def test_the_calls_are_handed_to_the_pool_costliest_first(monkeypatch):
    handed = []

    class Pool:  # records what on_cores hands out, runs it here
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, func, *columns):
            handed.extend(zip(*columns, strict=True))
            return [func(*args) for args in zip(*columns, strict=True)]

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", Pool)
    calls = [(7, 2), (9, 4), (5, 5), (9, 3)]
    assert on_cores(divmod, calls, workers=2, cost=lambda call: call[0]) == \
        [divmod(*call) for call in calls]
    assert handed == [(9, 4), (9, 3), (7, 2), (5, 5)]  # equal costs keep their order


CHILDREN = """
import os, sys
from multiprocessing import resource_tracker
from attnlab.parallel import on_cores

def children():  # processes whose parent is this one
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = open(f"/proc/{pid}/status").read()
        except OSError:  # ended meanwhile
            continue
        if f"\\nPPid:\\t{os.getpid()}\\n" in status:
            found.append(pid)
    return found

if __name__ == "__main__":
    if sys.argv[1] == "running":
        resource_tracker.ensure_running()
    if sys.argv[1] == "threads":  # two calls at once: the tracker stops after the last
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(2) as threads:
            done = list(threads.map(lambda n: on_cores(abs, [(-n,), (-2 * n,)], workers=2),
                                    [1, 2]))
        assert done == [[1, 2], [2, 4]], done
    print(on_cores(abs, [(-1,), (-2,)], workers=2), len(children()))
    print(on_cores(abs, [(-3,), (-4,)], workers=2), len(children()))  # a new tracker
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="/proc のない OS")
@pytest.mark.parametrize(("before", "left"), [("none", 0), ("running", 1), ("threads", 0)])
def test_no_process_outlives_the_call_but_a_tracker_that_was_running(tmp_path, before, left):
    """multiprocessing's resource tracker, started for the pool, ignores SIGTERM: left as a
    child of a Jupyter kernel it made each kernel restart wait 2.3 s. A tracker running
    before the call may watch the reader's own resources and stays; with two calls at once
    (threads) it stops after the last, and the next call starts a new one."""
    script = tmp_path / "children.py"
    script.write_text(CHILDREN)
    done = subprocess.run([sys.executable, str(script), before], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"[1, 2] {left}\n[3, 4] {left}\n"
    assert "leaked" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_on_threads_keeps_the_order_and_the_readers_blas_threads():
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    from attnlab.model import ModelConfig, forward, init_params

    config = ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1, max_len=8)
    params = init_params(config, np.random.default_rng(0))
    tokens = [np.random.default_rng(seed).integers(8, size=(4, 8)) for seed in range(6)]
    alone = [forward(params, t, config).logits for t in tokens]

    def blas_threads():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    with threadpool_limits(limits=2, user_api="blas"):  # the reader's setting
        before = blas_threads()
        shared = on_threads(forward, [(params, t, config) for t in tokens], workers=2)
        during = on_threads(blas_threads, [(), ()], workers=2)
        assert blas_threads() == before  # put back after the call
    # one BLAS thread around every call, so that the limits forward sets and undoes
    # itself cannot leave the reader's setting changed, whatever their order
    assert during == [[1] * len(before)] * 2 and 2 in before
    for mine, theirs in zip(alone, shared, strict=True):
        np.testing.assert_array_equal(theirs.logits, mine)  # in order, bit for bit
    assert on_threads(divmod, [(7, 2), (9, 4)], workers=1) == [(3, 1), (2, 1)]
    with pytest.raises(ZeroDivisionError):  # a failing call fails the whole
        on_threads(divmod, [(7, 2), (1, 0)], workers=2)


def test_on_threads_keeps_the_callers_numpy_error_settings():
    import numpy as np

    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        on_threads(np.divide, [(1.0, 1.0), (1.0, 0.0)], workers=2)  # as in this thread
