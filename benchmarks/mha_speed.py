"""Time multi_head_attention against the bare matrix products it must do.

B=8, T=256, D=512, H=8, float32 (the issue's reference size). The bound is the six
products as plain ``np.matmul`` on ready-made arrays: the q, k, v and output
projections and the two batched attention products. Everything else a real
implementation does (the softmax, reshapes, checks) is the overhead measured here.

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


def time_round_robin(cases: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of ``repeats`` calls of every case, the cases taking turns.

    Taking turns means a busy moment of the machine hits all cases alike; the fastest
    call of each case is the least disturbed one.
    """
    for fn in cases.values():
        fn()  # warm-up: first-call allocations, thread start-up
    times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repeats instead of 30")
    args = parser.parse_args()
    repeats = 5 if args.quick else 30

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

    def bare_products():
        np.matmul(x, w_q)  # (B, T, D)
        np.matmul(x, w_k)
        np.matmul(x, w_v)
        np.matmul(q, k_t)  # (B, H, T, T)
        np.matmul(a, v)  # (B, H, T, Dh)
        np.matmul(concat, w_o)  # (B, T, D)

    mask = causal_mask(T)
    rope = RoPE()
    cases = {
        "素の行列積 6 回（下限）": bare_products,
        "multi_head_attention": lambda: multi_head_attention(x, weights, H),
        "  + 因果マスク": lambda: multi_head_attention(x, weights, H, mask=mask),
        "  + RoPE": lambda: multi_head_attention(x, weights, H, rope=rope),
        "multi_head_attention_loop": lambda: multi_head_attention_loop(x, weights, H),
    }
    out, attn = multi_head_attention(x, weights, H)
    assert out.dtype == attn.dtype == np.float32

    gflop = 2 * (4 * B * T * D * D + 2 * B * H * T * T * d_head) / 1e9
    print(f"B={B}, T={T}, D={D}, H={H}, float32, 行列積 {gflop:.2f} GFLOP, 繰り返し {repeats} 回")
    times = time_round_robin(cases, repeats)
    bound_best = min(times["素の行列積 6 回（下限）"])
    print(f"{'':28s} {'最速 ms':>8s} {'中央値 ms':>9s} {'下限との比':>8s}")
    for name, ts in times.items():
        best, median = min(ts), float(np.median(ts))
        print(f"{name:28s} {1e3 * best:8.1f} {1e3 * median:9.1f} {best / bound_best:8.2f}x")
    print(f"下限の実効速度: {gflop / bound_best:.1f} GFLOP/s"
          f"（{math.ceil(1e3 * bound_best)} ms で {gflop:.2f} GFLOP）")


if __name__ == "__main__":
    main()
