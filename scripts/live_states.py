"""Draw every state of the book's live figures before the build, on every core.

Usage: python -m scripts.live_states [--jobs N]   (N or auto, the default: one per CPU)

``make book`` and ``make build`` run this before ``jupyter-book build``: it finds each
live figure in the committed outputs of the notebooks of ``_toc.yml`` (the JSON of
``attnlab.widgets.core.LIVE_MIME``) and draws the light and dark picture of each of its
states into the cache of drawn states (``attnlab.live_book.CACHE``), keyed as the build
keys them (``attnlab.live_book.state_key``), N processes at once. The build, which reads
the pages one at a time, then only reads the pictures. States already drawn are skipped;
a figure the build cannot show is left to the build, which names its page.
"""

import os
import sys
import time

from attnlab.live_book import draw_live_states
from scripts.book import ROOT, chapter_notebooks


def main(argv: list[str]) -> int:
    jobs = os.cpu_count() or 1
    if argv[:1] == ["--jobs"]:
        value = argv[1] if len(argv) > 1 else ""
        if value != "auto" and (not value.isdigit() or int(value) < 1):
            print(f"--jobs には 1 以上の整数か auto を書いてください: {value!r}", file=sys.stderr)
            return 2
        jobs = jobs if value == "auto" else int(value)
        argv = argv[2:]
    if argv:
        print(f"使い方: python -m scripts.live_states [--jobs N]（不明な引数 {argv}）",
              file=sys.stderr)
        return 2
    os.chdir(ROOT)  # the cache is _build/.attnlab-live-cache of the book's folder
    start = time.perf_counter()
    drawn, total = draw_live_states(chapter_notebooks(), jobs=jobs)
    print(f"ライブ図：{total} 状態のうち {drawn} 状態を描きました"
          f"（{jobs} プロセス、{time.perf_counter() - start:.1f} 秒）")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
