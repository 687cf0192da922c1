"""Time training steps of the toy transformer, and the training runs the chapters need.

Usage: python benchmarks/train_speed.py [--rounds R] [--repeats N] [--limit S] [--steps-only]
       python benchmarks/train_speed.py --compare OLD_SRC [--rounds R] [--repeats N] [--warm W]
       python benchmarks/train_speed.py --lines N [--path fast|readable] [--warm W]

First, one training step (a batch from the task, loss and gradients, Adam) of the
chapter-sized model (V=32, D=64, H=4, L=2, T=32, B=64, float32) for every positional
scheme, for GQA and in float64, by the readable model (``attnlab.model``) and by the
fast path ``train`` takes (``attnlab.fast_training``): the two take turns, ``--rounds``
rounds of ``--repeats`` steps, so that a busy machine slows both alike; prints the
median ms per step of each (wall clock and CPU time) and the ratio readable / fast. Then
every run listed in ``CHAPTER_RUNS`` is trained once, as the chapter will train it, and
timed; the script exits with 1 if one takes longer than ``--limit`` seconds (20 by
default: the notebook tests must stay quick).

``--lines N`` prints, for every configuration, the N source lines of attnlab that take
the most time in a training step of ``--path`` (their own time, without the functions
they call), measured with ``sys.settrace`` after ``--warm`` steps, and the step time
without the tracer: where to look when a path is to get faster.

``--compare OLD_SRC`` times the training step of another version of attnlab (its
``src`` folder, e.g. a ``git worktree`` of an older commit) side by side with this one's
fast path: two worker processes, one importing each version, take turns as above;
``--warm W`` trains W steps first, untimed, so that the heads are as sharp as in a
chapter's run. A version's step is what its ``train`` runs (``fast_training`` where it
exists, else ``model.loss_and_grads``). The environment variable ``NEW_SRC`` puts
another ``src`` folder on the new side (to compare two drafts).

Time with ``OPENBLAS_NUM_THREADS=1``; the model limits BLAS to one thread inside its
calls anyway.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from attnlab import model
from attnlab.model import ModelConfig, init_params
from attnlab.tasks import PreviousToken, RepeatedSequence, TwoPositions
from attnlab.training import Adam, train

try:  # the fast path, where this version of attnlab has one (see --compare)
    from attnlab import fast_training
except ImportError:
    fast_training = None
try:  # train() sets glibc's memory thresholds before its first step, for either step
    from attnlab.parallel import _keep_freed_memory
except ImportError:  # older versions: in the fast step's first call, or at import
    def _keep_freed_memory() -> bool:
        return False


def step_function(path: str):
    """``(params, batch, config) -> grads`` of the readable model or of the fast path."""
    if path == "fast" and fast_training is not None:
        return lambda params, batch, config: fast_training.loss_grads_accuracy(
            params, batch, config)[1]
    return lambda params, batch, config: model.loss_and_grads(params, batch, config)[1]

CHAPTER = dict(vocab_size=32, d_model=64, n_heads=4, n_layers=2, max_len=32)

# (chapter, what it shows, config, task, steps): the longest training each chapter plans.
CHAPTER_RUNS = [
    *[("02", f"2 か所を読むタスク, 1 層, h={h}",
       ModelConfig(**{**CHAPTER, "n_layers": 1, "n_heads": h}), TwoPositions(), 300)
      for h in (1, 2, 4)],
    ("04", "繰り返し系列, 2 層（誘導ヘッド）", ModelConfig(**CHAPTER), RepeatedSequence(), 300),
    ("07", "直前のトークン, 1 層, 位置の表 128 行",
     ModelConfig(**{**CHAPTER, "n_layers": 1, "max_len": 128}), PreviousToken(), 300),
    # chapter 10 trains at B=32, T=16 and fine-tunes at T=32: the task fixes the sizes
    *[("10", f"直前のトークン, 1 層 8 ヘッド, T=16, {positional}",
       ModelConfig(vocab_size=32, d_model=64, n_heads=8, n_layers=1, max_len=64,
                   positional=positional, dtype="float64"),
       lambda rng, _b, _t: PreviousToken()(rng, 32, 16), 400)
      for positional in ("none", "sinusoidal", "learned", "rope", "alibi")],
    ("10", "直前のトークン, ファインチューニング T=32, rope",
     ModelConfig(vocab_size=32, d_model=64, n_heads=8, n_layers=1, max_len=64, positional="rope",
                 dtype="float64"),
     lambda rng, _b, _t: PreviousToken()(rng, 32, 32), 40),
    # chapter 11 trains chapter 04's model five times (seeds 0-4) to measure sinks
    ("11", "繰り返し系列, 2 層（第 4 章のモデル、シンクを測る）", ModelConfig(**CHAPTER),
     RepeatedSequence(), 200),
]


def time_paths(config: ModelConfig, rounds: int, repeats: int) -> dict:
    """Wall and CPU seconds per training step of ``config`` on repeated sequences (B=64,
    T=32), by path: the readable and the fast path take turns, each on its own copy of
    the same parameters and batches."""
    rng = np.random.default_rng(0)
    params = init_params(config, rng)
    task = RepeatedSequence(config.vocab_size)
    batches = [task(rng, 64, 32) for _ in range(repeats + 1)]
    times = {path: ([], []) for path in PATHS}
    for round_ in range(rounds):
        for path in (PATHS if round_ % 2 == 0 else PATHS[::-1]):
            step, state = step_function(path), {k: v.copy() for k, v in params.items()}
            optimiser = Adam(state)
            for i, batch in enumerate(batches):
                start, start_cpu = time.perf_counter(), time.process_time()
                optimiser.step(state, step(state, batch, config))
                if i:  # the first step after a switch warms caches up
                    times[path][0].append(time.perf_counter() - start)
                    times[path][1].append(time.process_time() - start_cpu)
    return times


PATHS = ("readable", "fast")


SETTINGS = [dict(positional=p) for p in ("none", "sinusoidal", "learned", "rope", "alibi")]
SETTINGS += [dict(positional="learned", n_kv_heads=2), dict(positional="learned", n_kv_heads=1),
             dict(positional="learned", dtype="float64")]


def label(setting: dict) -> str:
    return ", ".join(f"{k}={v}" if k != "positional" else v for k, v in setting.items())


def line_times(config: ModelConfig, warm: int, steps: int, path: str) -> tuple[float, list]:
    """Milliseconds per step without a tracer, and (ms per step, calls per step, file,
    line, source) for every line of attnlab run in a step, its own time only."""
    import linecache

    rng = np.random.default_rng(0)
    params = init_params(config, rng)
    optimiser = Adam(params)
    task = RepeatedSequence(config.vocab_size)
    grads_of = step_function(path)

    def step():
        optimiser.step(params, grads_of(params, task(rng, 64, 32), config))

    for _ in range(warm):  # training changes the scores: sharp heads take other paths
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    plain = (time.perf_counter() - start) / steps * 1000
    own, calls = {}, {}
    stack = []  # per active frame: [file, line, start of the line, time spent in calls]

    def close(record, now):
        if record[1] is not None:
            key = (record[0], record[1])
            own[key] = own.get(key, 0.0) + now - record[2] - record[3]
            calls[key] = calls.get(key, 0) + 1

    def tracer(frame, event, arg):
        if "attnlab" not in frame.f_code.co_filename:
            return None
        now = time.perf_counter()
        stack.append([frame.f_code.co_filename, None, now, 0.0, now])

        def local(frame, event, arg):
            record = stack[-1]
            close(record, time.perf_counter())
            if event == "return":
                stack.pop()
                if stack:  # the caller's line does not count the call's time as its own
                    stack[-1][3] += time.perf_counter() - record[4]
            else:
                record[1], record[2], record[3] = frame.f_lineno, time.perf_counter(), 0.0
            return local
        return local

    sys.settrace(tracer)
    try:
        for _ in range(steps):
            step()
    finally:
        sys.settrace(None)
    rows = [(seconds / steps * 1000, calls[key] / steps, Path(key[0]).name, key[1],
             linecache.getline(key[0], key[1]).strip())
            for key, seconds in own.items()]
    return plain, sorted(rows, reverse=True)


def worker() -> int:
    """Serve ``--compare``: read "index steps" lines, answer each with the wall and CPU
    seconds of every step of SETTINGS[index], as one JSON line."""
    states = []
    for setting in SETTINGS:
        config = ModelConfig(**CHAPTER, **setting)
        rng = np.random.default_rng(0)
        params = init_params(config, rng)
        states.append((config, rng, params, Adam(params), RepeatedSequence(config.vocab_size)))
    grads_of = step_function("fast")
    for line in sys.stdin:
        index, steps = (int(word) for word in line.split())
        config, rng, params, optimiser, task = states[index]
        wall, cpu = [], []
        for _ in range(steps):
            start, start_cpu = time.perf_counter(), time.process_time()
            optimiser.step(params, grads_of(params, task(rng, 64, 32), config))
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        print(json.dumps([wall, cpu]), flush=True)
    return 0


def compare(old_src: str, rounds: int, repeats: int, warm: int = 0) -> int:
    """Time the old and the new engine in alternation; print medians and ratios."""
    here = Path(__file__).resolve()
    new_src = os.environ.get("NEW_SRC", str(here.parents[1] / "src"))
    workers = {}
    for name, src in (("old", old_src), ("new", new_src)):
        env = {**os.environ, "PYTHONPATH": src}
        workers[name] = subprocess.Popen(
            [sys.executable, str(here), "--worker"], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    times = {(name, i): ([], []) for name in workers for i in range(len(SETTINGS))}
    try:
        for i in range(len(SETTINGS)):  # --warm: train first, untimed (sharp heads later on)
            for process in (workers.values() if warm else ()):
                process.stdin.write(f"{i} {warm}\n")
                process.stdin.flush()
                process.stdout.readline()
        for round_ in range(rounds):
            for i in range(len(SETTINGS)):
                order = ("old", "new") if (round_ + i) % 2 == 0 else ("new", "old")
                for name in order:
                    process = workers[name]
                    process.stdin.write(f"{i} {repeats + 1}\n")
                    process.stdin.flush()
                    wall, cpu = json.loads(process.stdout.readline())
                    times[name, i][0].extend(wall[1:])  # the first step after a switch warms up
                    times[name, i][1].extend(cpu[1:])
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait()
    print(f"旧: {old_src}\n新: {new_src}")
    print(f"1 ステップ（バッチ生成・順伝播・逆伝播・Adam）の中央値, {rounds} 回交互 × "
          f"{repeats} ステップ（先に {warm} ステップ学習）: V=32, D=64, H=4, L=2, T=32, B=64")
    print(f"{'設定':<22} {'旧 ms':>8} {'新 ms':>8} {'旧/新':>6}   "
          f"{'旧 CPU ms':>9} {'新 CPU ms':>9} {'旧/新':>6}")
    for i, setting in enumerate(SETTINGS):
        old_wall, old_cpu = (statistics.median(t) * 1000 for t in times["old", i])
        new_wall, new_cpu = (statistics.median(t) * 1000 for t in times["new", i])
        print(f"{label(setting):<22} {old_wall:>8.2f} {new_wall:>8.2f} "
              f"{old_wall / new_wall:>6.2f}   "
              f"{old_cpu:>9.2f} {new_cpu:>9.2f} {old_cpu / new_cpu:>6.2f}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--limit", type=float, default=20.0, help="seconds per chapter run")
    parser.add_argument("--steps-only", action="store_true", help="skip the chapter runs")
    parser.add_argument("--compare", metavar="OLD_SRC",
                        help="time this engine against the attnlab in OLD_SRC, alternating")
    parser.add_argument("--rounds", type=int, default=10, help="alternations of the two sides")
    parser.add_argument("--path", choices=PATHS, default="fast", help="the step --lines traces")
    parser.add_argument("--lines", type=int, metavar="N",
                        help="print the N slowest source lines of each configuration's step")
    parser.add_argument("--warm", type=int, default=None,
                        help="steps trained before timing (--lines: 30, --compare: 0)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _keep_freed_memory()  # as train() does: both steps are timed under the setting
    if args.worker:
        return worker()
    if args.lines:
        args.warm = 30 if args.warm is None else args.warm
        for setting in SETTINGS:
            plain, rows = line_times(ModelConfig(**CHAPTER, **setting), args.warm, args.repeats,
                                     args.path)
            traced = sum(row[0] for row in rows)
            print(f"\n{label(setting)}: {plain:.2f} ms/ステップ（トレーサなし）, "
                  f"行の合計 {traced:.2f} ms（トレーサ込み）")
            for ms, per_step, name, line, source in rows[:args.lines]:
                print(f"{ms:7.3f} ms {per_step:4.0f}× {name}:{line:<5} {source[:70]}")
        return 0
    if args.compare:
        args.warm = args.warm or 0
        return compare(args.compare, args.rounds, args.repeats, args.warm)

    print("1 ステップ（損失と勾配・Adam）: V=32, D=64, H=4, L=2, T=32, B=64, "
          f"読める版と高速版を {args.rounds} 回交互 × {args.repeats} ステップ")
    print(f"{'設定':<22} {'読める版 ms':>10} {'高速版 ms':>9} {'比':>5}   "
          f"{'読める版 CPU':>11} {'高速版 CPU':>10} {'比':>5}")
    for setting in SETTINGS:
        times = time_paths(ModelConfig(**CHAPTER, **setting), args.rounds, args.repeats)
        (slow_wall, slow_cpu), (fast_wall, fast_cpu) = (
            [statistics.median(t) * 1000 for t in times[path]] for path in PATHS)
        print(f"{label(setting):<22} {slow_wall:>10.2f} {fast_wall:>9.2f} "
              f"{slow_wall / fast_wall:>5.2f}   {slow_cpu:>11.2f} {fast_cpu:>10.2f} "
              f"{slow_cpu / fast_cpu:>5.2f}")
    if args.steps_only:
        return 0

    print(f"\n章で使う学習（上限 {args.limit:.0f} 秒）")
    slow = []
    for chapter, what, config, task, steps in CHAPTER_RUNS:
        start = time.perf_counter()
        result = train(config, task, steps=steps, rng=np.random.default_rng(0))
        seconds = time.perf_counter() - start
        accuracy = result.accuracy[-20:].mean()
        print(f"第{chapter}章 {what:<26} {steps:>4} ステップ {seconds:>6.1f} 秒 "
              f"（最後の 20 ステップの正解率 {accuracy:.2f}）")
        if seconds > args.limit:
            slow.append(f"第{chapter}章 {what}")
    if slow:
        print(f"{args.limit:.0f} 秒を超えました: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
