"""Accessibility rules: every figure described, numbered and named, so that a reader of
the book through a screen reader meets each figure and can find it again.

- each chapter's figure cells carry a Japanese alt text, a caption and a name in their
  metadata (``mystnb.image.alt``, ``mystnb.figure.caption``, ``mystnb.figure.name``);
- ``tests/e2e/check_site.py`` finds, in the built HTML, an image whose alt text is empty or a
  file name, and a figure image without a numbered caption;
- the HTML controls of a live figure in the book (``attnlab.live_book``) have names.
"""

import re

import nbformat
import pytest

from attnlab.live_book import controls_html
from attnlab.widgets import LIVE_HINT
from scripts.book import all_notebooks
from tests.e2e.check_site import image_problems

NOTEBOOKS = all_notebooks()
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
# An alt text says what the figure shows and what to see in it: at least this long, with
# at least MIN_ALT_JAPANESE kana or kanji (symbols such as d_k do not count).
MIN_ALT_CHARS = 20
MIN_ALT_JAPANESE = 10
TRIVIAL_ALTS = {"図", "グラフ", "画像", "プロット", "ヒートマップ", "折れ線グラフ", "棒グラフ",
                "figure", "image", "plot"}
PATH_LIKE = re.compile(r"_images/|\.(png|svg|jpe?g|gif|webp)$", re.IGNORECASE)


def _figure_cells(nb):
    """(number, cell) of every code cell whose committed outputs hold an image."""
    for number, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if any(key.startswith("image/") for out in cell.get("outputs", [])
               for key in out.get("data", {})):
            yield number, cell


def _names(path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [cell.metadata.get("mystnb", {}).get("figure", {}).get("name", "")
            for _, cell in _figure_cells(nb)]


def figure_metadata_problems(path) -> list[str]:
    """Every figure cell of one chapter without a proper alt text, caption and name."""
    nb = nbformat.read(path, as_version=4)
    chapter = path.stem[:2]
    others = {name for other in NOTEBOOKS if other != path for name in _names(other)}
    seen: set[str] = set()
    problems = []
    for number, cell in _figure_cells(nb):
        where = f"{path.name} のセル {number}（id {cell.get('id', '?')}）"
        mystnb = cell.metadata.get("mystnb", {})
        caption = str(mystnb.get("figure", {}).get("caption", "")).strip()
        name = str(mystnb.get("figure", {}).get("name", ""))
        alt = str(mystnb.get("image", {}).get("alt", "")).strip()
        if not caption or not JAPANESE.search(caption):
            problems.append(f"{where}: mystnb.figure.caption（日本語で、図のどこを見るか）が"
                            "ありません")
        if not re.fullmatch(rf"fig-{chapter}-[a-z0-9]+(-[a-z0-9]+)*", name):
            problems.append(f"{where}: mystnb.figure.name {name!r} は fig-{chapter}-… の形に"
                            "してください（本文から {numref} で参照する名前）")
        elif name in seen or name in others:
            problems.append(f"{where}: 図の名前 {name!r} が本の中で重複しています")
        seen.add(name)
        if not alt:
            problems.append(f"{where}: mystnb.image.alt（日本語で、図が何を示し何がわかるか）が"
                            "ありません")
        elif (alt in TRIVIAL_ALTS or PATH_LIKE.search(alt) or alt == caption
              or len(alt) < MIN_ALT_CHARS or len(JAPANESE.findall(alt)) < MIN_ALT_JAPANESE):
            problems.append(
                f"{where}: mystnb.image.alt {alt!r} は短すぎるか、キャプションやファイル名と"
                f"同じです（{MIN_ALT_CHARS} 字以上、かなと漢字が {MIN_ALT_JAPANESE} 字以上で、"
                "図が示すことと読み取れることを書く）")
        if "widget" in cell.metadata.get("tags", []) and not caption.endswith(LIVE_HINT):
            problems.append(f"{where}: ライブ図のキャプションは attnlab.widgets.LIVE_HINT で"
                            "終えてください")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_a_japanese_alt_a_caption_and_a_name(path):
    problems = figure_metadata_problems(path)
    assert not problems, "\n".join(problems)


def _notebook(tmp_path, cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    path = tmp_path / "42_fixture.ipynb"
    nbformat.write(nb, path)
    return path


def _figure_cell(metadata, tags=()):
    cell = nbformat.v4.new_code_cell("plt.show()", metadata={**metadata, "tags": list(tags)})
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"})]
    return cell


GOOD = {"mystnb": {"figure": {"caption": "損失の曲線。朱の線が先に下がる。",
                              "name": "fig-42-loss"},
                   "image": {"alt": "2 本の損失の曲線。朱の線は 100 ステップで 0.1 まで"
                                    "下がり、青の線は 1 付近に留まる。"}}}


def test_a_described_figure_passes(tmp_path):
    assert figure_metadata_problems(_notebook(tmp_path, [_figure_cell(GOOD)])) == []


@pytest.mark.parametrize("change, words", [
    ({"image": {"alt": "グラフ"}}, "mystnb.image.alt 'グラフ'"),
    ({"image": {"alt": "../_images/0a1b2c.png"}}, "ファイル名"),
    ({"image": {}}, "mystnb.image.alt（"),
    ({"figure": {"name": "fig-42-loss"}}, "mystnb.figure.caption"),
    ({"figure": {"caption": "損失の曲線。", "name": "loss"}}, "fig-42-…"),
    ({"figure": {"caption": "損失の曲線。", "name": "fig-01-loss"}}, "fig-42-…"),
])
def test_a_figure_without_a_proper_alt_caption_or_name_is_named_with_its_cell(
        tmp_path, change, words):
    metadata = {"mystnb": {**GOOD["mystnb"], **change}}
    markdown = nbformat.v4.new_markdown_cell("# 章")
    problems = figure_metadata_problems(
        _notebook(tmp_path, [markdown, _figure_cell(metadata)]))
    assert len(problems) == 1, problems
    assert problems[0].startswith("42_fixture.ipynb のセル 1（id ")
    assert words in problems[0]


def test_two_figures_with_one_name_and_a_live_figure_without_the_hint_fail(tmp_path):
    problems = figure_metadata_problems(_notebook(tmp_path, [
        _figure_cell(GOOD), _figure_cell(GOOD, tags=["widget"])]))
    assert len(problems) == 2, problems
    assert "重複" in problems[0] and "LIVE_HINT" in problems[1]


def test_a_cell_without_an_image_needs_no_figure_metadata(tmp_path):
    cell = nbformat.v4.new_code_cell("print(1)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    assert figure_metadata_problems(_notebook(tmp_path, [cell])) == []


# --- the site check on small pages of built HTML --------------------------------------

FIGURE = """<figure class="align-default" id="fig-42-loss">
<img alt="{alt}" src="../_images/0a1b2c.png" />
<figcaption><p><span class="caption-number">図 3 </span><span class="caption-text">{caption}</span>
</p></figcaption></figure>"""
LOGO = '<img alt="Binder logo" src="../_static/images/logo_binder.svg">'
LIVE = """<figure class="align-default" id="fig-42-live"><div class="attnlab-live">
<img alt="softmax の鋭さ（d_k 4）" class="attnlab-live-state attnlab-live-hidden" loading="lazy"
 src="../_images/aa.png" />
<img alt="softmax の鋭さ（d_k 16）" class="attnlab-live-state" src="../_images/bb.png" />
</div><figcaption><p><span class="caption-number">図 4 </span>
<span class="caption-text">鋭さを変える</span></p></figcaption></figure>"""


def test_the_site_check_passes_a_described_figure_a_live_figure_and_the_theme_logos():
    page = FIGURE.format(alt="損失の曲線。朱の線が先に下がる。", caption="損失") + LOGO + LIVE
    assert image_problems(page) == []


@pytest.mark.parametrize("alt", ["", "   ", "../_images/0a1b2c.png", "0a1b2c.png", "plot.svg"])
def test_the_site_check_fails_an_empty_alt_or_a_file_name(alt):
    problems = image_problems(FIGURE.format(alt=alt, caption="損失"))
    assert len(problems) == 1 and "0a1b2c.png の alt" in problems[0], problems


def test_the_site_check_fails_a_logo_without_alt():
    assert image_problems('<img src="../_static/images/logo_colab.png">') == [
        "画像 logo_colab.png の alt が空です"]


def test_the_site_check_fails_a_figure_image_outside_a_figure_or_without_its_number():
    bare = '<div class="cell_output"><img alt="損失の曲線" src="../_images/0a1b2c.png" /></div>'
    assert "キャプションがありません" in image_problems(bare)[0]
    unnumbered = FIGURE.format(alt="損失の曲線", caption="損失").replace(
        '<span class="caption-number">図 3 </span>', "")
    assert "番号か本文" in image_problems(unnumbered)[0]
    empty = FIGURE.format(alt="損失の曲線", caption="")
    assert "番号か本文" in image_problems(empty)[0]


# --- the live figures' HTML controls ---------------------------------------------------

DESCRIPTION = {"figure": "demo", "title": "デモ", "controls": [
    {"name": "d_k", "label": "d_k", "kind": "slider", "labels": ["4", "16"], "default": 1},
    {"name": "scale", "label": "スケーリング", "kind": "toggle", "labels": ["割らない", "割る"],
     "default": 0},
    {"name": "keys", "label": "キーの数", "kind": "dropdown", "labels": ["4", "16"],
     "default": 0},
    {"name": "mask", "label": "マスク", "kind": "checkbox", "labels": ["なし", "あり"],
     "default": 0},
]}


def test_every_control_of_a_live_figure_has_an_accessible_name():
    html = controls_html(DESCRIPTION, "p")
    for number in (0, 2, 3):  # slider, select, checkbox: a <label for=…>
        assert f'<label for="p-c{number}">' in html and f'id="p-c{number}"' in html
    # toggle buttons: each has its text, the group is named by the control's label
    assert 'role="group" aria-labelledby="p-c1"' in html and 'id="p-c1">スケーリング<' in html
    assert re.search(r'<button type="button"[^>]*>割らない</button>', html)
    assert 'aria-label="デモ の操作"' in html


def test_a_live_figure_gives_its_default_state_the_cells_alt_and_the_others_their_state(
        small, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from attnlab import live_book
    from attnlab.live_book import HIDDEN_CLASS, LiveFigureRenderer
    from attnlab.widgets.core import LIVE_MIME

    monkeypatch.setattr(live_book, "CACHE", tmp_path / "cache")  # not the book's cache
    description = small().describe()  # a stand-in of 6 states (tests/conftest.py)

    class Renderer:
        document = {"source": "test"}

        def write_file(self, path, content, overwrite=False, exists_ok=False):
            return f"_images/{path[0]}"

    alt = "既定の状態の図。左の棒が右より高く、重みが 1 つのキーに集まる。"
    data = SimpleNamespace(mime_type=LIVE_MIME, content=description, cell_index=1,
                           output_index=0, cell_metadata={"mystnb": {"image": {"alt": alt}}})
    (container,) = LiveFigureRenderer.handle_mime(Renderer(), data, False)
    images = container.children[1].children
    shown = [img for img in images if HIDDEN_CLASS not in img["classes"]]
    assert [img["alt"] for img in shown] == [alt]
    hidden = [img["alt"] for img in images if img not in shown]
    assert hidden and all(a.startswith(f"{description['title']}（") for a in hidden)
    assert len(set(hidden)) == len(hidden)  # each state its own alt text


def test_the_browser_test_gets_axe_core_pinned_from_the_lockfile_and_excuses_nothing_silently():
    import json

    from scripts.book import ROOT
    from tests.e2e import browser_test

    package = json.loads((ROOT / "tests/browser/package.json").read_text(encoding="utf-8"))
    lock = json.loads((ROOT / "tests/browser/package-lock.json").read_text(encoding="utf-8"))
    version = package["dependencies"]["axe-core"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)  # pinned: the same rules on every run
    assert lock["packages"]["node_modules/axe-core"]["version"] == version
    assert browser_test.AXE_LOCAL.parts[-3:] == ("node_modules", "axe-core", "axe.min.js")
    assert browser_test.AXE_FAILING == ("critical", "serious")
    for rule, fragment, reason in browser_test.AXE_EXCEPTIONS:
        assert rule and fragment and len(reason) > 20, (rule, fragment)
    assert browser_test.axe_exception("color-contrast", "#no-such-node") is None
