"""Time training steps of the toy transformer, and the training runs the chapters need.

Usage: python benchmarks/train_speed.py [--repeats N] [--limit S] [--steps-only]

First, one training step (a batch from the task, forward, backward, Adam) of the
chapter-sized model (V=32, D=64, H=4, L=2, T=32, B=64, float32) for every positional
scheme, for GQA and in float64; prints the median and best ms per step and steps per
second. Then every run listed in ``CHAPTER_RUNS`` is trained once, as the chapter will
train it, and timed; the script exits with 1 if one takes longer than ``--limit``
seconds (20 by default: the notebook tests must stay quick).
"""

import argparse
import statistics
import sys
import time

import numpy as np

from attnlab.model import ModelConfig, init_params, loss_and_grads
from attnlab.tasks import PreviousToken, RepeatedSequence, TwoPositions
from attnlab.training import Adam, train

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
]


def time_steps(config: ModelConfig, repeats: int) -> list[float]:
    """Seconds per training step of ``config`` on repeated sequences, B=64, T=32."""
    rng = np.random.default_rng(0)
    params = init_params(config, rng)
    optimiser = Adam(params)
    task = RepeatedSequence(config.vocab_size)
    times = []
    for _ in range(repeats + 3):  # the first steps warm caches and BLAS threads
        start = time.perf_counter()
        _, grads = loss_and_grads(params, task(rng, 64, 32), config)
        optimiser.step(params, grads)
        times.append(time.perf_counter() - start)
    return times[3:]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--limit", type=float, default=20.0, help="seconds per chapter run")
    parser.add_argument("--steps-only", action="store_true", help="skip the chapter runs")
    args = parser.parse_args(argv)

    print("1 ステップ（バッチ生成・順伝播・逆伝播・Adam）: V=32, D=64, H=4, L=2, T=32, B=64")
    print(f"{'設定':<22} {'中央値 ms':>10} {'最速 ms':>8} {'ステップ/秒':>11}")
    settings = [dict(positional=p) for p in ("none", "sinusoidal", "learned", "rope", "alibi")]
    settings += [dict(positional="learned", n_kv_heads=2), dict(positional="learned", n_kv_heads=1),
                 dict(positional="learned", dtype="float64")]
    for setting in settings:
        config = ModelConfig(**CHAPTER, **setting)
        times_ms = np.array(time_steps(config, args.repeats)) * 1000
        median = statistics.median(times_ms)
        label = ", ".join(f"{k}={v}" if k != "positional" else v for k, v in setting.items())
        print(f"{label:<22} {median:>10.1f} {times_ms.min():>8.1f} {1000 / median:>11.1f}")
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
