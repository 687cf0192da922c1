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
from scripts.book import NOTEBOOKS  # noqa: E402
from scripts.make_student import STUB, student_notebook  # noqa: E402

CORRECT = """\
def my_attention(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights
"""
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
    chapter = NOTEBOOKS / "01_attention_review.ipynb"
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.n):
            nb, _ = student_notebook(nbformat.read(chapter, as_version=4), chapter.name)
            answer = ANSWERS[i % len(ANSWERS)]
            if answer is not None:
                cell = next(c for c in nb.cells if c.cell_type == "code" and STUB in c.source)
                cell.source = answer + "\n\ncheck_attention(my_attention)"
            nbformat.write(nb, Path(folder) / f"student_{i:02d}.ipynb")
        start = time.perf_counter()
        outcomes = grade.grade_folder(Path(folder))
        seconds = time.perf_counter() - start
    counts = Counter(v for o in outcomes for v, _ in o.verdicts.values())
    print(f"{args.n} 件を {seconds:.1f} 秒で採点しました：{dict(counts)}")
    return 0 if seconds <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
