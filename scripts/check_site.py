"""Check the built HTML book: what `jupyter-book build -W` does not check by itself.

Usage: python -m scripts.check_site [_build/html]

- every page declares ``<html lang="ja">``;
- every page listed in ``_toc.yml`` was built;
- every image a page refers to exists;
- every page is in the search index, and each chapter with many Japanese words (the
  index splits Japanese text into words, so a search for one word finds the chapter).
"""

import json
import re
import sys
from pathlib import Path

from scripts.book import ROOT, toc_pages

JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


def main(site: Path) -> list[str]:
    problems = []
    pages = toc_pages()
    for page in pages:
        html_path = site / f"{page}.html"
        if not html_path.exists():
            problems.append(f"{page}: ページが作られていません")
            continue
        html = html_path.read_text(encoding="utf-8")
        if '<html lang="ja"' not in html:
            problems.append(f"{page}: <html lang=\"ja\"> がありません")
        for src in re.findall(r'<img[^>]+src="([^"]+)"', html):
            if not src.startswith(("http:", "https:", "data:")) and not (
                html_path.parent / src
            ).resolve().exists():
                problems.append(f"{page}: 画像 {src} がありません")

    text = (site / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    docnames = index["docnames"]
    japanese_terms = {n: 0 for n in range(len(docnames))}
    for term, docs in index["terms"].items():
        if JAPANESE.search(term):
            for doc in docs if isinstance(docs, list) else [docs]:
                japanese_terms[doc] += 1
    for page in pages:
        if page not in docnames:
            problems.append(f"{page}: 検索索引にありません")
        elif page.startswith("notebooks/") and japanese_terms[docnames.index(page)] < 100:
            problems.append(f"{page}: 検索索引に日本語の語がほとんどありません")
    if not problems:
        print(f"サイトの検査: {len(pages)} ページ OK（lang=ja、画像、日本語の検索索引）")
    return problems


if __name__ == "__main__":
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"
    found = main(site)
    for problem in found:
        print("問題:", problem, file=sys.stderr)
    sys.exit(1 if found else 0)
