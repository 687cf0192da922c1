"""Japanese typography of every page a reader sees (a stray space shows in the book,
JupyterLab and Colab alike): no line break inside a Japanese paragraph (browsers draw it
as a space: 「その 直後の」), no space between two Japanese characters or next to Japanese
punctuation, one space between Japanese letters and Latin letters, digits, inline code
or math. ``make typography`` fixes the sources."""

import re

import pytest

from scripts.book import ROOT
from scripts.ja_typography import default_files, fix_markdown, markdown_sources, problems

FILES = default_files()


def test_every_page_of_the_book_is_checked():
    names = {path.relative_to(ROOT).as_posix() for path in FILES}
    assert "notebooks/01_attention_review.ipynb" in names and "book/instructor.md" in names
    assert len([n for n in names if n.endswith(".ipynb")]) == 12, sorted(names)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_stray_space_in_japanese_text(path):
    found = [f"{where} 行 {p.line + 1} [{p.rule}] …{p.context}…"
             for where, text in markdown_sources(path) for p in problems(text)]
    assert not found, (f"{path.relative_to(ROOT)}: 日本語の組版の問題 {len(found)} 件"
                       "（make typography で直せます）:\n" + "\n".join(found))


@pytest.mark.parametrize(("text", "fixed"), [
    # a paragraph wrapped between two Japanese characters becomes one line
    ("その\n直後のセルで", "その直後のセルで"),
    # no space between Japanese characters or next to Japanese punctuation
    ("と、 アテンションに", "と、アテンションに"),
    ("毎回\n再計算して", "毎回再計算して"),
    # one space between a Japanese letter and a digit, Latin, code or math
    ("3つのヘッド", "3 つのヘッド"),
    ("`x`の形", "`x` の形"),
    ("$d_k$で割る", "$d_k$ で割る"),
    ("RoPEは回転", "RoPE は回転"),
    # markup is transparent: **重み** next to Japanese keeps no space
    ("この **重み** は", "この**重み**は"),
    # a role the reader sees as Japanese takes no space next to Japanese (issue 48, m1);
    # a role that reads Latin (a citation, an exercise's label) keeps it
    ("本文に示し、{doc}`参考文献 <references>` にまとめた",
     "本文に示し、{doc}`参考文献 <references>`にまとめた"),
    ("形の流れを {numref}`fig-01-shapes` にまとめます",
     "形の流れを{numref}`fig-01-shapes` にまとめます"),  # 「図 1」: Japanese, then a digit
    ("論文{cite:t}`vaswani2017`です", "論文 {cite:t}`vaswani2017` です"),
    ("練習問題{ref}`ex01-variance <ex01-variance>`で",
     "練習問題 {ref}`ex01-variance <ex01-variance>` で"),
    # a line break a writer meant (two trailing spaces) stays
    ("一行目  \n二行目", "一行目  \n二行目"),
    # code fences and display math are left alone
    ("```python\nx = 1  # 日本語 の コメント\n```", "```python\nx = 1  # 日本語 の コメント\n```"),
    ("$$\n\\text{重み} \\; = 1\n$$", "$$\n\\text{重み} \\; = 1\n$$"),
])
def test_the_rules(text, fixed):
    assert fix_markdown(text) == fixed
    assert problems(fixed) == []
    assert fix_markdown(fixed) == fixed  # idempotent


def test_a_fix_changes_whitespace_only_and_never_the_markdown_structure():
    # ** next to 「 would stop being bold without its space: the space stays
    text = "次の **「ヘッド」** を見ます。\n続けて `W_O` を\n掛けます。"
    fixed = fix_markdown(text)
    assert re.sub(r"\s", "", fixed) == re.sub(r"\s", "", text)
    assert "\n" not in fixed


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fixing_a_page_changes_only_whitespace(path):
    for where, text in markdown_sources(path):
        assert re.sub(r"\s", "", fix_markdown(text)) == re.sub(r"\s", "", text), where


_FENCE = re.compile(r"^ *(`{3,}|~{3,})[^\n]*\n.*?^ *\1[`~]*[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)


def unpaired_dollars(text: str) -> list[str]:
    """The paragraphs of a Markdown text with an odd number of ``$`` outside code: a math
    span that never closes (``図でも $ とともに``) shows a stray "$" or swallows the text up
    to the next one. ``\\$`` is a literal dollar and does not count."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return [p.strip() for p in re.split(r"\n\s*\n", text)
            if len(re.findall(r"(?<!\\)\$", p)) % 2]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_math_span_is_closed(path):
    found = [f"{where}: …{p[:80]}…" for where, text in markdown_sources(path)
             for p in unpaired_dollars(text)]
    assert not found, (f"{path.relative_to(ROOT)}: 閉じていない $ のある段落 {len(found)} 件:\n"
                       + "\n".join(found))


@pytest.mark.parametrize(("text", "n_bad"), [
    ("図でも $h$ とともに伸びます。", 0),
    ("図でも $ とともに伸びます。", 1),
    ("$$\nx = 1\n$$\n\n$a$ と `$b`、\\$5", 0),  # display math, code, an escaped dollar
    ("```python\nprint('$')\n```\n\n本文", 0),
    ("一段落目 $a$\n\n二段落目 $b と $c$", 1),
])
def test_unpaired_dollars_finds_an_unclosed_math_span(text, n_bad):
    assert len(unpaired_dollars(text)) == n_bad
