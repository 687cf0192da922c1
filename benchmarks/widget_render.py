"""Time the update path of every live figure over all combinations of its controls.

Usage: python benchmarks/widget_render.py [--repeats N] [--limit MS]

For each widget in ``attnlab.widgets.WIDGETS``, every state of its controls' discrete
domains is set ``--repeats`` times, in order, as a reader moving the controls would; each
update (set the controls, redraw, encode the PNG the page shows) is timed. Prints the
median and 90th percentile per widget, and exits with 1 if a median exceeds ``--limit``.
"""

import argparse
import statistics
import sys
import time

import numpy as np

from attnlab.widgets import WIDGETS


def time_updates(make_widget, repeats: int) -> list[float]:
    """Seconds per update, over ``repeats`` passes through every state."""
    figure = make_widget()
    states = list(figure.states())
    times = []
    for _ in range(repeats):
        for state in states:
            start = time.perf_counter()
            ok = figure.set_state(**state)
            times.append(time.perf_counter() - start)
            if not ok:
                raise RuntimeError(f"{state}: {figure.message}")
    return times


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--limit", type=float, default=100.0, help="ms, median per widget")
    args = parser.parse_args(argv)
    slow = []
    print(f"{'ウィジェット':<20} {'状態数':>6} {'更新回数':>8} {'中央値 ms':>10} {'p90 ms':>8}")
    for name, make_widget in WIDGETS.items():
        times_ms = np.array(time_updates(make_widget, args.repeats)) * 1000
        median = statistics.median(times_ms)
        p90 = float(np.percentile(times_ms, 90))
        n_states = len(times_ms) // args.repeats
        print(f"{name:<20} {n_states:>6} {len(times_ms):>8} {median:>10.1f} {p90:>8.1f}")
        if median > args.limit:
            slow.append(name)
    if slow:
        print(f"中央値が {args.limit:.0f} ms を超えました: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
