"""Every line of code and text output fits the book's code blocks without sideways scrolling.

The book shows code cells and their text outputs as ``<pre>`` blocks that do not wrap. In
headless Chromium at the browser test's 1280 px viewport (``tests/e2e/browser_test.py``,
IPAexGothic for Japanese) the code font draws an ASCII character 8.43 px wide and a
Japanese (East-Asian Wide/Full) one 14 px wide, 5/3 as wide. A block in the page's body has
652 px for text (77 ASCII columns); a block inside a folded solution (a dropdown
admonition) has 585 px (69 columns). The limits below leave one column of margin.
The browser test measures the real blocks (``scrollWidth > clientWidth``).
"""

import re
from fractions import Fraction
from pathlib import Path

import nbformat
import pytest

from scripts.book import BODY_COLUMNS, ROOT, SOLUTION_COLUMNS, display_width

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def shown_lines(cell) -> list[tuple[str, str]]:
    """(kind, line) of a code cell as the book shows it: its source, its text outputs."""
    lines = [("コード", line) for line in cell.source.splitlines()]
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            text = output.text
        elif "text/plain" in output.get("data", {}) and not any(
                kind.startswith("image/") or kind == "text/html" for kind in output.data):
            text = output.data["text/plain"]
        else:
            continue
        lines += [("出力", line) for line in text.splitlines()]
    return lines


def too_wide(path: Path) -> list[str]:
    """One Japanese message per line of ``path`` wider than its block allows."""
    nb = nbformat.read(path, as_version=4)
    problems, folded = [], False
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for match in re.finditer(r"^```\{solution-(start|end)\}", cell.source, re.M):
                folded = match.group(1) == "start"
            continue
        if cell.cell_type != "code" or "remove-cell" in cell.metadata.get("tags", []):
            continue
        limit = SOLUTION_COLUMNS if folded else BODY_COLUMNS
        for kind, line in shown_lines(cell):
            width = display_width(line)
            if width > limit:
                problems.append(f"{path.name} セル {index} の{kind}が {float(width):.1f} 桁"
                                f"（上限 {limit}）：{line}")
    return problems


def test_display_width():
    assert display_width("abc") == 3
    assert display_width("外挿") == Fraction(10, 3)
    assert display_width("【正解】") == Fraction(20, 3)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_lines_fit_the_book(path):
    problems = too_wide(path)
    assert not problems, (f"{len(problems)} 行が本のコード枠からはみ出します：\n"
                          + "\n".join(problems))
