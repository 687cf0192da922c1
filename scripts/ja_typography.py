"""Japanese typography of the book's Markdown: no stray spaces, one rule for spacing.

Usage: python -m scripts.ja_typography [--fix] [FILE ...]   (make typography)
       (default: every notebook in _toc.yml and every page in book/)

A reader sees the Markdown of the chapters in the book, in JupyterLab, in Colab and in the
student edition. Browsers draw a line break inside a paragraph as a space, also between two
Japanese characters (「その 直後の」), so a Japanese paragraph is one source line. The rules,
checked outside code spans, math, URLs and HTML (markup such as ``**`` and ``[`` is
transparent: the characters on either side of it are what the reader sees side by side):

- ``break``:  no line break inside a paragraph next to a Japanese character;
- ``ja-ja``:  no space between two Japanese characters (letters or punctuation);
- ``punct``:  no space next to Japanese punctuation (、。「」（）：…);
- ``latin``:  one space between a Japanese letter (kana, kanji) and a Latin letter, a digit,
  inline code or inline math (「3 つ」「`x` の」「$d_k$ で」).

``--fix`` rewrites the files, changing whitespace only, and keeps a paragraph as it was when
a change would alter how Markdown parses it (e.g. ``**`` next to 「 stops being bold).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin

MARKDOWN = (MarkdownIt("commonmark").enable("table").use(dollarmath_plugin)
            .use(colon_fence_plugin))

_LETTER = "\u3040-\u309f\u30a0-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff々〆〇"
_PUNCT = "\u3000-\u303f\u30fb\uff00-\uffef"
JA = f"[{_LETTER}{_PUNCT}]"
JA_LETTER = f"[{_LETTER}]"
JA_PUNCT = f"[{_PUNCT}]"
#: Inline markup the reader does not see: emphasis runs, link brackets and the link target.
MARKUP = r"(?:\*{1,3}|_{1,3}|\[|\]\([^)\s]*\)|\])"
#: Placeholders for atoms that read as Latin: code spans, roles, inline math.
ATOM = "\ue000"
#: Spans whose inside is never touched: code, roles, math, autolinks, HTML tags.
_PROTECT = re.compile(r"\{[\w:-]+\}`[^`]*`|(`+)(?:(?!\1).)+\1|\$\$.+?\$\$|\$[^$\n]+\$|<[^>\n]+>",
                      re.S)

#: Directive fences whose body is Markdown (parsed again); others (code, math) are left alone.
_TEXT_DIRECTIVES = {"exercise", "exercise-start", "solution", "solution-start", "note",
                    "tip", "important", "warning", "admonition", "caution", "hint",
                    "attention", "seealso", "margin", "sidebar", "dropdown", "topic", "div"}
_OPTION = re.compile(r"^\s*:[\w-]+:")


@dataclass(frozen=True)
class Problem:
    rule: str
    line: int  # 0-based line in the Markdown text
    context: str


def _paragraph_ranges(text: str, offset: int = 0) -> list[tuple[int, int]]:
    """(first, last + 1) line numbers of every paragraph, directive bodies included.

    A table's rows come as one-line ranges with a negative start (``-1 - line``).
    """
    ranges = []
    lines = text.splitlines()
    for token in MARKDOWN.parse(text):
        if token.type == "paragraph_open" and token.map:
            # a MyST comment line (``% …``) ends a paragraph: split around it
            start = token.map[0]
            for line in range(token.map[0], token.map[1] + 1):
                if line == token.map[1] or lines[line].startswith("%"):
                    if line > start:
                        ranges.append((start + offset, line + offset))
                    start = line + 1
        elif token.type == "table_open" and token.map:
            ranges += [(-1 - line - offset, -line - offset)
                       for line in range(token.map[0], token.map[1]) if line != token.map[0] + 1]
        elif token.type in ("fence", "colon_fence") and token.map:
            name = token.info.strip()
            if name.startswith("{") and name[1:].split("}")[0] in _TEXT_DIRECTIVES:
                body = token.content.splitlines()
                skip = 0
                while skip < len(body) and _OPTION.match(body[skip]):
                    skip += 1
                inner = "\n".join(body[skip:])
                ranges += _paragraph_ranges(inner, offset + token.map[0] + 1 + skip)
    return ranges


#: Roles whose text the reader sees is Japanese at one end or both (issue 48, m1: 「参考文献
#: にまとめた」 had a space because every role counted as Latin): the role's placeholder
#: says which end is Japanese. ``{doc}`参考文献 <references>``` and ``{doc}`references```
#: (the page's title) read as Japanese; ``{numref}`fig-01-shapes``` reads 「図 1」,
#: Japanese then a digit.
ROLE_JJ, ROLE_JL, ROLE_LJ = "\ue010", "\ue011", "\ue012"
_PLACEHOLDERS = f"\ue000\ue001{ROLE_JJ}{ROLE_JL}{ROLE_LJ}"
_ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
_EXPLICIT = re.compile(r"^(.*?)\s*<[^<>]+>$", re.S)
_JA_CHAR = re.compile(JA)


@functools.cache
def _page_titles() -> dict[str, str]:
    """The first heading of every page and notebook, by file name without its suffix."""
    from scripts.book import ROOT

    titles = {}
    for path in [*ROOT.glob("book/*.md"), *ROOT.glob("notebooks/*.ipynb")]:
        texts = [text for _, text in markdown_sources(path)]
        heading = next((line[2:].strip() for text in texts for line in text.splitlines()
                        if line.startswith("# ")), "")
        titles[path.stem] = heading
    return titles


def role_text(source: str) -> str:
    """What a reader sees of a MyST role (approximately: its ends are what matter)."""
    match = _ROLE.fullmatch(source)
    if not match:
        return "x"
    name, content = match.groups()
    explicit = _EXPLICIT.match(content)
    if explicit and explicit[1]:
        return explicit[1]
    if name == "numref":
        return "図 1" if "fig" in content else ("表 1" if "tab" in content else "x")
    if name == "doc":
        return _page_titles().get(content.strip().split("/")[-1], "") or "x"
    return "x"


def _atom(source: str) -> str:
    if source.startswith("<"):
        return "\ue001"  # HTML: neither
    if not source.startswith("{"):
        return ATOM
    text = role_text(source).strip() or "x"
    first, last = bool(_JA_CHAR.match(text[0])), bool(_JA_CHAR.match(text[-1]))
    return {(True, True): ROLE_JJ, (True, False): ROLE_JL, (False, True): ROLE_LJ}.get(
        (first, last), ATOM)


def _protect(text: str) -> tuple[str, list[str]]:
    kept: list[str] = []

    def keep(match: re.Match) -> str:
        kept.append(match.group(0))
        return _atom(match.group(0))

    return _PROTECT.sub(keep, text), kept


def _restore(text: str, kept: list[str]) -> str:
    parts = iter(kept)
    return re.sub(f"[{_PLACEHOLDERS}]", lambda m: next(parts), text)


#: What a reader sees just before a space (the end of a role) and just after it (its start).
JA_BEFORE = f"(?:{JA}|[{ROLE_JJ}{ROLE_LJ}])"
JA_AFTER = f"(?:{JA}|[{ROLE_JJ}{ROLE_JL}])"
JA_LETTER_BEFORE = f"(?:{JA_LETTER}|[{ROLE_JJ}{ROLE_LJ}])"
JA_LETTER_AFTER = f"(?:{JA_LETTER}|[{ROLE_JJ}{ROLE_JL}])"
_LATIN = f"(?:[A-Za-z0-9]|{ATOM})"
_LATIN_BEFORE = f"(?:[A-Za-z0-9]|[{ATOM}{ROLE_JL}])"
_LATIN_AFTER = f"(?:[A-Za-z0-9]|[{ATOM}{ROLE_LJ}])"
_ROLE_JA_END = f"[{ROLE_JJ}{ROLE_LJ}]"
_ROLE_JA_START = f"[{ROLE_JJ}{ROLE_JL}]"
#: A space that was a line break inside the paragraph (the joiner writes it, the rules read it).
BREAK = "\ue002"
_WS = f"[ \t{BREAK}]+"
_RULES = {
    # pattern on the protected text → replacement; whitespace only
    "ja-markup-ja": (re.compile(f"({JA_BEFORE}{MARKUP}+){_WS}({MARKUP}*{JA_AFTER})"
                                f"|({JA_BEFORE}{MARKUP}*){_WS}({MARKUP}+{JA_AFTER})"),
                     r"\1\2\3\4"),
    "ja-break-ja": (re.compile(f"({JA_BEFORE}{MARKUP}*){BREAK}({MARKUP}*{JA_AFTER})"),
                    r"\1\2"),
    # a role that reads Japanese next to a Japanese character: 「参考文献にまとめた」
    "ja-role-ja": (re.compile(f"({_ROLE_JA_END}{MARKUP}*){_WS}({MARKUP}*{JA_AFTER})"
                              f"|({JA_BEFORE}{MARKUP}*){_WS}({MARKUP}*{_ROLE_JA_START})"),
                   r"\1\2\3\4"),
    "punct-after": (re.compile(f"({JA_PUNCT}{MARKUP}*){_WS}"), r"\1"),
    "punct-before": (re.compile(f"(?<=[^ \t{BREAK}]){_WS}({MARKUP}*{JA_PUNCT})"), r"\1"),
    "latin-after": (re.compile(f"({JA_LETTER_BEFORE}{MARKUP}*)({MARKUP}*{_LATIN_AFTER})"),
                    r"\1 \2"),
    "latin-before": (re.compile(f"({_LATIN_BEFORE}{MARKUP}*)({MARKUP}*{JA_LETTER_AFTER})"),
                     r"\1 \2"),
}


def _apply_rules(paragraph: str) -> str:
    """``paragraph`` (one line) with every spacing rule applied where Markdown allows it."""
    protected, kept = _protect(paragraph)
    base = _structure(paragraph)
    for pattern, replacement in _RULES.values():
        for _ in range(3):  # overlapping matches (a one-character word between two spaces)
            changed = False
            for m in reversed(list(pattern.finditer(protected))):
                candidate = protected[:m.start()] + m.expand(replacement) + protected[m.end():]
                if _structure(_restore(candidate, kept)) == base:
                    protected, changed = candidate, True
            if not changed:
                break
    return _restore(protected, kept).replace(BREAK, " ")


def _structure(text: str) -> list[tuple[str, str]]:
    """What Markdown makes of ``text``, whitespace aside (a fix must not change it)."""
    out: list[tuple[str, str]] = []
    for token in MARKDOWN.parseInline(text.replace(BREAK, " ")):
        for child in token.children or []:
            if child.type in ("softbreak", "hardbreak"):
                continue
            content = re.sub(r"\s+", "", child.content) if child.type == "text" else child.content
            if out and child.type == "text" == out[-1][0]:
                out[-1] = ("text", out[-1][1] + content)
            else:
                out.append((child.type, content))
    return out


_PREFIX = re.compile(r"^\s*(?:>\s?)*(?:[-*+]\s+|\d+[.)]\s+)?")
_CONTINUATION = re.compile(r"^\s*(?:>\s?)*")


def _word_spaced(line: str) -> bool:
    """A line that spaces Japanese words on purpose (「昨日 駅で 会った」): leave its spaces."""
    protected, _ = _protect(line)
    return len(re.findall(f"{JA_LETTER} {JA_LETTER}", protected)) >= 2


def _fix_paragraph(block: list[str]) -> list[str]:
    """The lines of one paragraph: joined into one line (hard breaks kept), rules applied."""
    prefix = _PREFIX.match(block[0]).group(0)
    body = [block[0][len(prefix):]] + [_CONTINUATION.sub("", b) for b in block[1:]]
    lines = [body[0]]
    for nxt in body[1:]:
        if lines[-1].endswith(("  ", "\\")):  # a hard line break stays
            lines.append(nxt)
        else:
            lines[-1] = lines[-1].rstrip() + BREAK + nxt.strip()
    fixed = [_apply_rules(line) if not _word_spaced(line) else line.replace(BREAK, " ")
             for line in lines]
    indent = " " * len(prefix) if not prefix.lstrip().startswith(">") else prefix
    return [prefix + fixed[0]] + [indent + line for line in fixed[1:]]


def fix_markdown(text: str) -> str:
    """``text`` with every paragraph on one line and the spacing rules applied."""
    lines = text.split("\n")
    for start, end in sorted(_paragraph_ranges(text), key=lambda r: -abs(r[0] + 0.5)):
        if start < 0:
            lines[-1 - start] = _fix_row(lines[-1 - start])
        else:
            lines[start:end] = _fix_paragraph(lines[start:end])
    return "\n".join(lines)


def _fix_row(line: str) -> str:
    """A table row with the spacing rules applied cell by cell."""
    protected, kept = _protect(line)
    cells = protected.split("|")
    out = []
    for cell in cells:
        inner = cell.strip()
        lead, trail = cell[: len(cell) - len(cell.lstrip())], cell[len(cell.rstrip()):]
        n = sum(inner.count(c) for c in _PLACEHOLDERS)
        mine, kept = kept[:n], kept[n:]
        out.append(lead + _apply_rules(_restore(inner, mine)) + trail if inner else cell)
    return "|".join(out)


def problems(text: str) -> list[Problem]:
    """Every paragraph of ``text`` that :func:`fix_markdown` would change."""
    found = []
    lines = text.split("\n")
    for start, end in _paragraph_ranges(text):
        if start < 0:
            row = lines[-1 - start]
            if _fix_row(row) != row:
                found.append(Problem("space", -1 - start, row[:30]))
            continue
        block = lines[start:end]
        fixed = _fix_paragraph(block)
        if fixed == block:
            continue
        if len(fixed) < len(block):
            n = next(i for i in range(len(block) - 1) if not block[i].endswith(("  ", "\\")))
            context = block[n][-12:] + "⏎" + block[n + 1].strip()[:12]
            found.append(Problem("break", start + n, context))
            continue
        for n, (old, new) in enumerate(zip(block, fixed, strict=True)):
            if old != new:
                i = next(k for k in range(min(len(old), len(new))) if old[k] != new[k])
                found.append(Problem("space", start + n, old[max(0, i - 10): i + 10]))
                break
    return found


def markdown_sources(path: Path) -> list[tuple[str, str]]:
    """(where, text) for every Markdown text of a notebook or page."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return [(f"セル {i}", "".join(c["source"])) for i, c in enumerate(nb["cells"])
                if c["cell_type"] == "markdown"]
    return [("", path.read_text(encoding="utf-8"))]


def fix_file(path: Path) -> bool:
    """Fix the spaces of ``path`` (a notebook's Markdown cells, or a page) in place; whether
    it changed."""
    from scripts.book import rewrite_markdown

    return rewrite_markdown(path, fix_markdown)


def default_files(root: Path | None = None) -> list[Path]:
    """Every page of ``_toc.yml`` (notebooks and Markdown pages) and every page in ``book/``."""
    from scripts.book import ROOT, toc_pages

    root = root or ROOT
    pages = []
    for page in toc_pages(root):
        for suffix in (".ipynb", ".md"):
            if (root / f"{page}{suffix}").exists():
                pages.append(root / f"{page}{suffix}")
    pages += [path for path in sorted((root / "book").glob("*.md")) if path not in pages]
    return pages


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)
    files = args.files or default_files()
    total = 0
    for path in files:
        if args.fix:
            fix_file(path)
        for where, text in markdown_sources(path):
            for p in problems(text):
                total += 1
                print(f"{path} {where} 行 {p.line + 1} [{p.rule}] {p.context}")
    print(f"{total} 件")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
