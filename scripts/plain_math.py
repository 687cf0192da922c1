"""Math written as plain text in the book's Markdown: ``d_k``, ``√d_k``, ``h_kv``, ``θ_i``.

Usage: python -m scripts.plain_math [--fix] [FILE ...]
       (default: every notebook in _toc.yml and every page in book/, as make typography)

The book typesets its symbols with MathJax (``$d_k$``); a symbol typed with an underscore
outside math (「√d_k で割る」) shows the underscore beside a typeset dₖ in the same
paragraph (issue 48, M4). Figure captions (cell metadata ``mystnb.figure.caption``) are
Markdown too and are checked and fixed the same way. A plain-text symbol is one letter
(Latin or Greek) and an underscore with a subscript of letters or digits, optionally after
``√``; it is looked for in Markdown cells and pages outside code spans, code blocks,
roles, math, HTML tags and link targets. ``--fix`` writes each as inline math in the
book's notation (STYLE.md): ``$\\sqrt{d_k}$``, ``$d_\\text{model}$``, ``$h_{kv}$``;
``Var[q·k/√d_k]`` becomes one formula. The fix is idempotent (math is never looked into).

Symbols inside figures (plotting labels) and in ResultTable headers are not Markdown: the
browser test finds them on the rendered page (tests/e2e/browser_test.py, ``plain-math``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from pathlib import Path

#: One plain-text symbol: (√)(base letter)_(subscript).
_SYMBOL = r"(√)?([A-Za-zα-ωΑ-Ω])_(\{[^}\s]+\}|[A-Za-z0-9]+)(?![\w/])"
SYMBOL = re.compile(r"(?<![\w/.\-\\$])" + _SYMBOL)
#: A variance written in plain text around a symbol: Var[q·k/√d_k].
VARIANCE = re.compile(r"Var\[([^\]\n$`]*_[^\]\n$`]*)\]")
#: Subscripts that are words (STYLE.md writes them upright: d_\text{model}).
WORDS = {"model", "head", "max", "min", "ff", "base", "train", "eval"}
#: What is never looked into: code spans, roles, math, HTML tags, link targets, URLs.
PROTECT = re.compile(r"\{[\w:-]+\}`[^`]*`|(`+)(?:(?!\1).)+\1|\$\$.+?\$\$|\$[^$\n]+\$"
                     r"|<[^>\n]+>|\]\([^)\s]*\)|https?://\S+", re.S)
FENCE = re.compile(r"^\s*(```|~~~|\$\$)")


def _subscript(sub: str) -> str:
    inner = sub[1:-1] if sub.startswith("{") else sub
    if inner in WORDS:
        return rf"_\text{{{inner}}}"
    return f"_{inner}" if len(inner) == 1 else f"_{{{inner}}}"


def _tex(match: re.Match) -> str:
    root, base, sub = match.groups()
    if not base.isascii():  # θ → \theta, as the book's formulas write it
        name = unicodedata.name(base).split()[-1].lower()
        base = "\\" + {"lamda": "lambda"}.get(name, name)
    symbol = base + _subscript(sub)
    return rf"\sqrt{{{symbol}}}" if root else symbol


def _variance(match: re.Match) -> str:
    inside = re.sub(_SYMBOL, _tex, match[1]).replace("·", r" \cdot ")
    return rf"$\mathrm{{Var}}[{inside}]$"


def _outside_protected(line: str, function) -> str:
    """``function`` applied to the parts of ``line`` that :data:`PROTECT` does not cover."""
    out, last = [], 0
    for match in PROTECT.finditer(line):
        out += [function(line[last:match.start()]), match[0]]
        last = match.end()
    out.append(function(line[last:]))
    return "".join(out)


def _text_lines(text: str):
    """(index, line) of every line of ``text`` outside fenced code and display math."""
    fence = None
    for index, line in enumerate(text.split("\n")):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match[1]
            if fence == "$$" and line.strip().endswith("$$") and line.strip() != "$$":
                fence = None  # $$ … $$ on one line
            continue
        if fence is not None:
            if match and match[1] == fence:
                fence = None
            continue
        yield index, line


def find(text: str) -> list[tuple[int, str]]:
    """(line, symbol) of every plain-text symbol of the Markdown ``text``."""
    found: list[tuple[int, str]] = []
    for index, line in _text_lines(text):
        def collect(part: str, index=index) -> str:
            found.extend((index, m[0]) for m in SYMBOL.finditer(part))
            return part
        _outside_protected(line, collect)
    return found


def _fix_part(part: str) -> str:
    part = VARIANCE.sub(_variance, part)
    # a formula the line above made is protected now: look only outside it
    pieces = re.split(r"(\$[^$\n]+\$)", part)
    return "".join(p if p.startswith("$") else SYMBOL.sub(lambda m: f"${_tex(m)}$", p)
                   for p in pieces)


def fix(text: str) -> str:
    """``text`` with every plain-text symbol written as inline math."""
    lines = text.split("\n")
    for index, line in _text_lines(text):
        lines[index] = _outside_protected(line, _fix_part)
    return "\n".join(lines)


def fix_file(path: Path) -> bool:
    """Fix ``path`` (a notebook's Markdown cells and captions, or a page) in place; whether it
    changed."""
    from scripts.book import rewrite_markdown

    return rewrite_markdown(path, fix, captions=True)


def captions(path: Path) -> list[tuple[str, str]]:
    """(where, text) for every figure caption of a notebook's cells (Markdown as well)."""
    if path.suffix != ".ipynb":
        return []
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(f"セル {i} のキャプション", c["metadata"]["mystnb"]["figure"]["caption"])
            for i, c in enumerate(nb["cells"])
            if isinstance(c.get("metadata", {}).get("mystnb", {}).get("figure", {})
                          .get("caption"), str)]


def main(argv: list[str]) -> int:
    from scripts.ja_typography import default_files, markdown_sources

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)
    files = args.files or default_files()
    total = 0
    for path in files:
        if args.fix:
            fix_file(path)
        for where, text in markdown_sources(path) + captions(path):
            for line, symbol in find(text):
                total += 1
                print(f"{path} {where} 行 {line + 1}: {symbol}")
    print(f"{total} 件")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
