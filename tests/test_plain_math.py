"""Math in the book's Markdown is typeset, not typed with underscores (issue 48, M4):
``scripts/plain_math.py`` finds 「√d_k で割る」 outside code and math and writes
``$\\sqrt{d_k}$``. The rendered pages (ResultTable headers, captions) are checked by the
browser test."""

import pytest

from scripts.book import ROOT
from scripts.ja_typography import default_files, markdown_sources
from scripts.plain_math import captions, find, fix

FILES = default_files()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_plain_text_math_in_the_markdown(path):
    found = [f"{where} 行 {line + 1}: {symbol}"
             for where, text in markdown_sources(path) + captions(path)
             for line, symbol in find(text)]
    assert not found, (f"{path.relative_to(ROOT)}: 下線つきの記号が数式になっていません "
                       f"{len(found)} 件（python -m scripts.plain_math --fix）:\n"
                       + "\n".join(found))


@pytest.mark.parametrize(("text", "fixed"), [
    ("「√d_k で割る」で比べます", "「$\\sqrt{d_k}$ で割る」で比べます"),
    ("「d_k」を大きく", "「$d_k$」を大きく"),
    ("√d_model、バッチ", "$\\sqrt{d_\\text{model}}$、バッチ"),
    ("h_kv = 4 は", "$h_{kv}$ = 4 は"),
    ("θ_i と λ_i", "$\\theta_i$ と $\\lambda_i$"),
    ("分散 Var[q·k/√d_k] は", "分散 $\\mathrm{Var}[q \\cdot k/\\sqrt{d_k}]$ は"),
    # code, math, roles, link targets, URLs, file names and code blocks are left alone
    ("`d_k` と $d_k$ と {doc}`a_b` と [x](a_b.md) と https://x.org/a_b と 01_attention",
     "`d_k` と $d_k$ と {doc}`a_b` と [x](a_b.md) と https://x.org/a_b と 01_attention"),
    ("```python\nd_k = 4\n```", "```python\nd_k = 4\n```"),
    ("$$\nd_k\n$$", "$$\nd_k\n$$"),
    ("my_function と w_q_proj", "my_function と w_q_proj"),
])
def test_the_fix(text, fixed):
    assert fix(text) == fixed
    assert find(fixed) == []
    assert fix(fixed) == fixed  # idempotent
