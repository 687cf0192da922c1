"""Independent runs shared among the CPU cores: a chapter's seeds trained side by side.

A chapter that trains several models with independent random streams (one per seed or
per kind of model) can train them at once on a machine of two or more cores; the results
are the same, bit for bit, as training them one after the other. :func:`on_cores` does it
with fresh processes ("spawn"), which works the same in Jupyter, Binder, Colab and the
tests; with one core it simply runs the calls in order. Training is many small numpy
steps, which hold Python's lock: it needs processes. Evaluating a trained model on long
batches is a few large numpy operations, which let other threads run meanwhile:
:func:`on_threads` shares such calls among threads, with nothing to start or import.

Also the process-wide settings a training step runs under: one BLAS thread inside the
model's calls (:func:`_one_blas_thread`) and glibc keeping freed memory
(:func:`_keep_freed_memory`).

Not taught: it makes the chapters faster on a reader's two cores, nothing more.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import resource_tracker
from pathlib import Path

from threadpoolctl import ThreadpoolController, threadpool_limits

#: At most this many processes (:func:`on_cores`) or threads (:func:`on_threads`) share
#: the calls.
MAX_WORKERS = 4

#: A container's CPU quota (cgroup v2: "quota period" or "max period"), as a Binder or
#: Colab session has it: the cores it may use can be fewer than the cores it sees.
CPU_QUOTA_FILE = Path("/sys/fs/cgroup/cpu.max")


def _available_cores() -> int:
    """The CPU cores this process may use: its affinity, and fewer if the container's
    CPU quota (:data:`CPU_QUOTA_FILE`) allows fewer."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    try:
        quota, period = CPU_QUOTA_FILE.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):  # no cgroup v2 here, or a form not known
        pass
    return cores


def _main_can_be_started_again() -> bool:
    """Whether a spawned process can import this one's main module: not when it is a
    script read from standard input (``python - < script.py``: its "file" is ``<stdin>``),
    which the new process would look for on disk and die."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return path is None or os.path.exists(path)


def on_cores(func, calls: list, *, workers: int | None = None, cost=None) -> list:
    """``[func(*args) for args in calls]``, the calls shared among the CPU cores.

    The calls must be independent (each with its own generator): then the results are
    the same, bit for bit, as one call after the other. The processes are started
    fresh ("spawn", as on macOS and Windows; a running Jupyter kernel is never forked),
    at most :data:`MAX_WORKERS` and no more than the cores, for this call only; with one
    core or one call (or a main script read from standard input, which a new process
    could not import), everything runs here. ``func`` must be importable (a function of
    ``attnlab``), and every setting it needs must be in ``calls``: a fresh process
    imports the modules anew and does not see a module's constants changed in this one.

    ``cost``, a function of a call's arguments (a tuple) that grows with its time, starts
    the costliest calls first, so that short ones fill the cores at the end; the results
    still come in the order of ``calls``.

    Not taught: it makes a chapter faster on a machine of two or more cores.
    """
    calls = [tuple(args) for args in calls]
    if workers is None:
        workers = min(len(calls), _available_cores(), MAX_WORKERS)
    if workers <= 1 or not _main_can_be_started_again():
        return [func(*args) for args in calls]
    order = list(range(len(calls)))
    if cost is not None:
        order.sort(key=lambda i: -cost(calls[i]))  # stable: equal costs keep their order
    context = multiprocessing.get_context("spawn")
    _pool_starts()
    results: list = [None] * len(calls)
    # the processes end with the call: none is left waiting in the kernel, and an
    # interrupted cell (Kernel → Interrupt) leaves nothing behind for the next one
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            done = pool.map(func, *zip(*[calls[i] for i in order], strict=True))
            for i, result in zip(order, done, strict=True):
                results[i] = result
    finally:
        _pool_ends()
    return results


def on_threads(func, calls: list, *, workers: int | None = None) -> list:
    """``[func(*args) for args in calls]``, the calls shared among threads of this process.

    For calls whose time goes to large numpy operations (forward passes over long
    batches), during which numpy lets the other threads run: no process to start, nothing
    to import or to pickle, so it pays even for calls of a tenth of a second, where
    :func:`on_cores` spends more on starting its processes than it saves. The calls must
    be independent: then the results are the same, bit for bit, as one call after the
    other. The BLAS library runs on one thread during the call (the products are small,
    and two threads each asking for every core would wait for each other); with one core
    or one call, everything runs here, in order. Each call runs in a copy of the caller's
    context, so numpy's error settings (``np.errstate``) hold in the threads as here.
    ``workers`` as for :func:`on_cores`.

    Not taught: it makes a chapter faster on a machine of two or more cores.
    """
    calls = [tuple(args) for args in calls]
    if workers is None:
        workers = min(len(calls), _available_cores(), MAX_WORKERS)
    if workers <= 1:
        return [func(*args) for args in calls]
    context = contextvars.copy_context()  # np.errstate lives in a context variable
    # one limit around every call: the limits the calls set and undo themselves
    # (attnlab.model.forward) then find and leave one thread, whatever their order
    with threadpool_limits(limits=1, user_api="blas"):
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda args: context.copy().run(func, *args), calls))


# multiprocessing's resource tracker: a process that watches the pools' semaphores, started
# by the first pool and then left running. It ignores SIGTERM, and ipykernel waits for the
# kernel's children when it shuts down: each shutdown or restart of a kernel that had run a
# pool took 2.3 s longer here. The last pool to end stops the tracker if the first one
# started it; a tracker that ran before (it may watch a reader's own resources) is left.
_tracker_lock = threading.Lock()
_pools_running = 0
_tracker_is_ours = False


def _tracker():
    return getattr(resource_tracker, "_resource_tracker", None)


def _pool_starts() -> None:
    global _pools_running, _tracker_is_ours
    with _tracker_lock:
        if _pools_running == 0:
            _tracker_is_ours = getattr(_tracker(), "_fd", None) is None  # not running yet
        _pools_running += 1


def _pool_ends() -> None:
    global _pools_running
    with _tracker_lock:
        _pools_running -= 1
        if _pools_running > 0 or not _tracker_is_ours:
            return
        stop = getattr(_tracker(), "_stop", None)  # private to CPython: else it stays
        if stop is not None:
            try:
                stop()
            except Exception:  # a tracker that cannot stop only costs time
                pass


# --- one BLAS thread inside the model's calls ---------------------------------------------

_BLAS: ThreadpoolController | None = None


def _one_blas_thread(func):
    """``func`` with the BLAS library on one thread during the call, as before afterwards.

    The model's matrix products are small (64 wide): a second BLAS thread spends more on
    waking and waiting than it saves, and on a shared machine (Binder, Colab, a busy
    laptop) the threads wait for each other. The limit holds only inside the call
    (threadpoolctl), so the rest of a notebook keeps the reader's setting. The setting is
    the process's: two threads inside such calls at once can put back each other's limit,
    so :func:`on_threads` holds one limit around all of its calls.
    """
    @functools.wraps(func)
    def limited(*args, **kwargs):
        global _BLAS
        if _BLAS is None:
            _BLAS = ThreadpoolController()  # finds the loaded BLAS once (a few ms)
        with _BLAS.limit(limits=1, user_api="blas"):
            return func(*args, **kwargs)
    return limited


# --- glibc keeps the memory a training step frees ----------------------------------------

_ALLOCATOR_SET = False


def _keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for the next arrays instead of returning it.

    A training step makes and frees a few dozen arrays of 0.1–1 MB. glibc hands memory
    back to the operating system once more than a threshold of it lies free at the top
    of the heap (the threshold grows with the largest array freed so far, from 128 kB),
    so every step asks for it again, and each fresh 4 kB page costs a page fault and
    zeroing. Measured on chapter 10's runs: 1,000 page faults a step and 1.5× the time
    of a step without them (RoPE); the chapter's Run All took 1.6× the CPU time.

    The thresholds are set to the largest values glibc's own adjustment reaches (32 MB
    for arrays taken from the operating system one by one, 64 MB of free memory kept),
    so the process ends where a long numpy session can end by itself, except that glibc
    no longer adjusts them. :func:`attnlab.training.train` does it before its first step,
    whichever ``step`` it takes (the readable step makes and frees more arrays than the
    fast one and gains more), once per process; it cannot be undone (glibc has no call
    that restores the adjustment). Does nothing where the C library is not glibc (macOS,
    Windows, musl).
    """
    global _ALLOCATOR_SET
    if _ALLOCATOR_SET or not sys.platform.startswith("linux"):
        return False
    _ALLOCATOR_SET = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt's parameter numbers
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)
                    and libc.mallopt(m_trim_threshold, 64 << 20))
    except (OSError, AttributeError):
        return False
