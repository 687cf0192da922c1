"""Time the grader on a class of 30 chapter-01 submissions (the 講師向け page's promise).

Usage: .venv/bin/python benchmarks/grade_speed.py [--n 30] [--limit 60]

The submissions are the student edition with the exercise answered in turn: right, each
diagnosed mistake, the stub, a crash. Prints the verdict counts and the wall time; exits 1
when the time is over ``--limit`` seconds.
"""

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import grade  # noqa: E402
from tests.test_grade import CHECK, CORRECT, submission  # noqa: E402

ANSWERS = [
    CORRECT,
    CORRECT.replace(" / np.sqrt(q.shape[-1])", ""),
    CORRECT.replace("axis=-1", "axis=0"),
    CORRECT.replace("np.where(mask,", "np.where(~mask,"),
    None,  # the stub
    "raise RuntimeError('boom')\n" + CORRECT,
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--limit", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.n):
            answer = ANSWERS[i % len(ANSWERS)]
            nb = submission(None if answer is None else answer + CHECK)
            nbformat.write(nb, Path(folder) / f"student_{i:02d}.ipynb")
        start = time.perf_counter()
        outcomes = grade.grade_folder(Path(folder))
        seconds = time.perf_counter() - start
    counts = Counter(v for o in outcomes for v, _ in o.verdicts.values())
    print(f"{args.n} 件を {seconds:.1f} 秒で採点しました：{dict(counts)}")
    return 0 if seconds <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
