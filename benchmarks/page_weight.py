"""Page weight of the built book: per page, the HTML and the images it loads.

Usage: .venv/bin/python benchmarks/page_weight.py [_build/html]

Live figures put one image per state into their page (attnlab.live_book); this shows what
that costs a reader: every image, and what opening the page fetches (the states' images are
``loading="lazy"`` and hidden, so a browser fetches one only when it is shown). Scripts and
stylesheets shared by every page are not counted.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.book import toc_pages  # noqa: E402

IMG = re.compile(r'<img[^>]*\ssrc="([^"]+)"[^>]*>')
LAZY = re.compile(r'<img[^>]*\sloading="lazy"[^>]*>')


def main(site: Path) -> int:
    print(f"{'ページ':<40} {'HTML':>8} {'画像':>5} {'うちライブ図':>10} {'画像の合計':>10}"
          f" {'開いたとき':>10}")
    for page in toc_pages():
        path = site / f"{page}.html"
        text = path.read_text(encoding="utf-8")
        tags = IMG.findall(text)
        live = len(re.findall(r'<img[^>]*class="[^"]*attnlab-live-state', text))
        images = sum((path.parent / src).resolve().stat().st_size for src in set(tags))
        lazy = {IMG.search(tag).group(1) for tag in LAZY.findall(text)}
        first = sum((path.parent / src).resolve().stat().st_size for src in set(tags) - lazy)
        print(f"{page:<40} {path.stat().st_size / 1024:>6.0f}KB {len(tags):>5} {live:>10}"
              f" {images / 1024:>8.0f}KB {first / 1024:>8.0f}KB")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("_build/html")))
