"""Time multi_head_attention against the bare matrix products it must do.

B=8, T=256, D=512, H=8, float32 (the issue's reference size). The bound is the six
products as plain ``np.matmul`` on ready-made arrays: the q, k, v and output
projections and the two batched attention products. Everything else a real
implementation does (the softmax, reshapes, checks) is the overhead measured here.

A second reference adds to the bound the one thing attention cannot skip: a numerically
stable softmax of the (B, H, T, T) scores, in place (row maximum, subtract, exp, row
sum, scale: five passes over 4.2 million numbers, each on one core in numpy). On the
2-core machine of this project those passes alone cost about 0.4-0.5 of the bound, so
``multi_head_attention`` is measured against both lines: the gap to the second one is
what the implementation itself adds.

Run: ``.venv/bin/python benchmarks/mha_speed.py`` (``--quick`` for fewer repeats).
"""

import argparse
import math
import time

import numpy as np

from attnlab.attention import (
    causal_mask,
    init_mha,
    multi_head_attention,
    multi_head_attention_loop,
)
from attnlab.positional import RoPE


def time_in_turns(cases: dict, rounds: int, calls: int = 5) -> dict[str, list[float]]:
    """Seconds per call of every case: ``rounds`` turns of ``calls`` calls in a row.

    Cases take turns, so a busy moment of the machine hits all of them alike. Within a
    turn the first call is dropped: it pays for switching cases (the memory allocator
    hands out pages the previous case gave back), which a loop that repeats one call
    does not.
    """
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            fn()
            for _ in range(calls - 1):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds instead of 8")
    args = parser.parse_args()
    rounds = 2 if args.quick else 8

    B, T, D, H = 8, 256, 512, 8
    d_head = D // H
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, D), dtype=np.float32)  # (B, T, D)
    weights = init_mha(D, H, rng=rng, dtype=np.float32)
    w_q, w_k, w_v, w_o = weights
    q = rng.standard_normal((B, H, T, d_head), dtype=np.float32)  # (B, H, T, Dh)
    k_t = rng.standard_normal((B, H, d_head, T), dtype=np.float32)  # (B, H, Dh, T)
    a = rng.random((B, H, T, T), dtype=np.float32)  # (B, H, T, T)
    v = rng.standard_normal((B, H, T, d_head), dtype=np.float32)  # (B, H, T, Dh)
    concat = rng.standard_normal((B, T, D), dtype=np.float32)  # (B, T, D)

    rows, concat_rows = x.reshape(B * T, D), concat.reshape(B * T, D)  # (B·T, D)

    def bare_products():
        # Each product in its fastest plain form: projections as one (B·T, D) product
        # (faster than B products of (T, D)), attention products batched over (B, H).
        np.matmul(rows, w_q)  # (B·T, D)
        np.matmul(rows, w_k)
        np.matmul(rows, w_v)
        np.matmul(q, k_t)  # (B, H, T, T)
        np.matmul(a, v)  # (B, H, T, Dh)
        np.matmul(concat_rows, w_o)  # (B·T, D)

    def bare_products_and_softmax():
        # The bound plus the one thing attention cannot skip: a stable softmax of the
        # (B, H, T, T) scores (row maximum, subtract, exp, row sum, scale), in place.
        np.matmul(rows, w_q)
        np.matmul(rows, w_k)
        np.matmul(rows, w_v)
        scores = np.matmul(q, k_t)  # (B, H, T, T)
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores *= 1.0 / scores.sum(axis=-1, keepdims=True)
        np.matmul(scores, v)
        np.matmul(concat_rows, w_o)

    mask = causal_mask(T)
    rope = RoPE()
    cases = {
        "素の行列積 6 回（下限）": bare_products,
        "行列積 + softmax だけ": bare_products_and_softmax,
        "multi_head_attention": lambda: multi_head_attention(x, weights, H),
        "  + 因果マスク": lambda: multi_head_attention(x, weights, H, mask=mask),
        "  + RoPE": lambda: multi_head_attention(x, weights, H, rope=rope),
        "multi_head_attention_loop": lambda: multi_head_attention_loop(x, weights, H),
    }
    out, attn = multi_head_attention(x, weights, H)
    assert out.dtype == attn.dtype == np.float32

    gflop = 2 * (4 * B * T * D * D + 2 * B * H * T * T * d_head) / 1e9
    print(f"B={B}, T={T}, D={D}, H={H}, float32, 行列積 {gflop:.2f} GFLOP, "
          f"{rounds} 巡 × 4 回の計測")
    times = time_in_turns(cases, rounds)
    bound_best = min(times["素の行列積 6 回（下限）"])
    print(f"{'':28s} {'最速 ms':>8s} {'中央値 ms':>9s} {'下限との比':>8s}")
    for name, ts in times.items():
        best, median = min(ts), float(np.median(ts))
        print(f"{name:28s} {1e3 * best:8.1f} {1e3 * median:9.1f} {best / bound_best:8.2f}x")
    print(f"下限の実効速度: {gflop / bound_best:.1f} GFLOP/s"
          f"（{math.ceil(1e3 * bound_best)} ms で {gflop:.2f} GFLOP）")


if __name__ == "__main__":
    main()
