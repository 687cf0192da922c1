"""Check the built HTML book: what `jupyter-book build -W` does not check by itself.

Usage: python -m tests.e2e.check_site [_build/html]

- every page declares ``<html lang="ja">``;
- every page listed in ``_toc.yml`` was built;
- every image a page refers to exists;
- every image has an alt text that is not empty and not a file name or path (myst-nb
  writes the image's own path when a figure cell has no ``mystnb.image.alt``);
- every figure image (a file Sphinx copied to ``_images/``: a notebook's plots, every state
  of a live figure) is inside a ``<figure>`` whose ``<figcaption>`` has a number
  (``図 3``) and a text. Images of the theme (``_static/``: the Binder and Colab logos of
  the launch buttons) are not figures; they only need their alt text. A live figure's
  hidden states are images of its one figure: they follow the same rules (each alt names
  the figure and its state, see ``attnlab.live_book``);
- every page is in the search index, and each chapter with many Japanese words (the
  index splits Japanese text into words, so a search for one word finds the chapter).
"""

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

from scripts.book import ROOT, toc_pages

JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
# An alt text that is a file's name or path, not a description.
PATH_LIKE = re.compile(r"_images/|_static/|^\.{0,2}/|\.(png|svg|jpe?g|gif|webp)$", re.IGNORECASE)
# Where Sphinx copies the images of the content (figures); the theme's own are in _static/.
FIGURE_DIR = "_images/"


class _Images(HTMLParser):
    """Every <img> of a page with its alt and the caption of the <figure> around it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.images: list[dict] = []  # src, alt, figure (index into figures or None)
        self.figures: list[dict] = []  # caption text, numbered
        self.open: list[int] = []  # the figures being read, innermost last
        self.in_caption = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.figures.append({"caption": "", "numbered": False})
            self.open.append(len(self.figures) - 1)
        elif tag == "figcaption" and self.open:
            self.in_caption += 1
        elif tag == "span" and self.in_caption and "caption-number" in (attrs.get("class") or ""):
            self.figures[self.open[-1]]["numbered"] = True
        elif tag == "img":
            self.images.append({"src": attrs.get("src") or "", "alt": attrs.get("alt"),
                                "figure": self.open[-1] if self.open else None})

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        if tag == "figure" and self.open:
            self.open.pop()
        elif tag == "figcaption" and self.in_caption:
            self.in_caption -= 1

    def handle_data(self, data):
        if self.in_caption and self.open:
            self.figures[self.open[-1]]["caption"] += data


def image_problems(html: str) -> list[str]:
    """Alt texts and captions of a page's images (see the module's docstring)."""
    parser = _Images()
    parser.feed(html)
    problems = []
    for image in parser.images:
        src, alt = image["src"], (image["alt"] or "").strip()
        name = src.rsplit("/", 1)[-1]
        if not alt:
            problems.append(f"画像 {name} の alt が空です")
        elif PATH_LIKE.search(alt) or alt == src or alt == name:
            problems.append(f"画像 {name} の alt がファイル名です（{alt[:60]}）。"
                            "セルのメタデータ mystnb.image.alt に図の説明を書いてください")
        if FIGURE_DIR not in src:
            continue
        if image["figure"] is None:
            problems.append(f"図 {name} にキャプションがありません（<figure> の外）。"
                            "セルのメタデータ mystnb.figure.caption と name を付けてください")
            continue
        figure = parser.figures[image["figure"]]
        caption = re.sub(r"\s+", " ", figure["caption"]).strip()
        caption = re.sub(r"^図\s*[\d.]+\s*", "", caption)  # the number, then the text
        if not figure["numbered"] or not JAPANESE.search(caption):
            problems.append(f"図 {name} のキャプションに番号か本文がありません（{caption[:40]!r}）")
    return problems


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
        problems += [f"{page}: {problem}" for problem in image_problems(html)]
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
        print(f"サイトの検査: {len(pages)} ページ OK"
              "（lang=ja、画像と alt・キャプション、日本語の検索索引）")
    return problems


if __name__ == "__main__":
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"
    found = main(site)
    for problem in found:
        print("問題:", problem, file=sys.stderr)
    sys.exit(1 if found else 0)
