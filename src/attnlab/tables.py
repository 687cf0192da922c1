"""Tables of results: a real table in the book, JupyterLab and Colab, aligned text elsewhere.

A chapter that prints a table with ``print`` lines pads its columns with spaces; in a
proportional Japanese font (the book, Colab) the columns drift apart, and a Japanese
header can never line up with the numbers under it. :class:`ResultTable` is shown instead:

- as HTML (``_repr_html_``): a title, a ``<table>`` with column headers, the first
  column as row headers when it holds names, numbers right-aligned in tabular figures
  (``_static/attnlab-typography.css``), and a note under it; the symbols the chapter
  writes as plain text (``d_k``, ``√d_model``, ``QK^T``, ``θ_i``) are set as math in
  HTML (:func:`math_html`: ``<i>d</i><sub><i>k</i></sub>``), which the book, JupyterLab
  and Colab show alike without MathJax;
- as text (``__str__`` and ``text/plain``, what a terminal, ``print`` and the tests see):
  the same rows with the columns padded by their width on screen (a Japanese character is
  two columns wide in a fixed-width font).

The chapter formats every number itself (``f"{x:.2f}"``): a cell is a ``str`` or an
``int``, never a ``float``, so a table shows only the digits the chapter chose.

>>> table = ResultTable(["方法", "2L"], [["RoPE", "1.00"], ["ALiBi", "0.90"]])
>>> print(table)
方法     2L
RoPE   1.00
ALiBi  0.90

Not taught: how a result is displayed, not what it shows.
"""

from __future__ import annotations

import html
import numbers
import re
import unicodedata
from collections.abc import Sequence

__all__ = ["ROOT_HTML", "ResultTable", "math_html", "text_width"]

#: A cell that reads as a number (right-aligned): it starts with a digit, a sign, or a
#: mark that stands for a missing number (× — –).
_NUMBER = re.compile(r"^[\s]*[-−+]?[\d.×—–]")


def text_width(text: str) -> int:
    """Columns ``text`` takes in a fixed-width font: 2 for a wide (Japanese) character,
    0 for a combining mark (the tilde of ``γ̃``).

    Not taught: how a result is displayed.
    """
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


#: A symbol written as plain text: (√)(a capital it multiplies: the X of XW_Q)(a letter,
#: maybe with a combining mark)_(subscript), as scripts/plain_math.py finds them in
#: Markdown; not inside a name (``raw_scores``).
_SYMBOL = re.compile(r"(?<![\w/.\-])(√)?([A-Z](?=[A-Za-zα-ωΑ-Ω]_))?"
                     r"([A-Za-zα-ωΑ-Ω][\u0300-\u036f]?)_"
                     r"(\{[^}\s]+\}|[A-Za-z0-9]+)(?![\w/])")
#: A transpose written as plain text: QK^T, K^T.
_TRANSPOSE = re.compile(r"(?<![\w/.\-])([A-Z]+)\^T(?!\w)")
#: A one-letter vector in a product written as plain text: the q and k of Var[q·k].
_PRODUCT_LETTER = re.compile(r"(?<=[\[·])([a-z])(?=[·/\]])")
#: A one-letter variable of a derivative written as plain text: the p and q of ∂p/∂q.
_PARTIAL_LETTER = re.compile(r"(?<=∂)([A-Za-zα-ω])(?![\w])")
#: A column header that is one letter: a variable (h, L).
_LETTER = re.compile(r"[A-Za-z]")
#: Subscripts that are words, set upright (STYLE.md: d_\text{model}).
_WORDS = {"model", "head", "max", "min", "ff", "base", "train", "eval"}
#: A one-letter variable next to a relation or an operator: the m and n of 「m − n = 2」, the
#: P and L of 「P > L」, the i of 「i >= L」; not a letter of a word, a number (1e-3, 2L) or
#: a label (「(a)」).
_LONE = r"(?<![\w.'/\-])[A-Za-z](?![\w'(])"
_OPERAND = re.compile(rf"{_LONE}(?=\s?[=<>≤≥≠−+×])|(?:(?<=[=<>≤≥≠−+×] )|(?<=[=<>≤≥≠−+×])){_LONE}")
#: The radical sign as HTML: upright, from a Latin or math font (issue 48, N6). In a
#: Japanese font (IPAexGothic, Hiragino) √ is drawn as a narrow slanted tick, which read as
#: a synthetic italic next to the italic d of d_k; inline style, so that JupyterLab and
#: Colab, which do not have the book's CSS, set it alike.
ROOT_HTML = ('<span class="attnlab-root" style="font-style: normal; font-family: '
             "'DejaVu Sans', 'Helvetica Neue', Helvetica, Arial, 'Segoe UI Symbol', "
             'sans-serif">√</span>')


def _letters_html(letters: str) -> str:
    """A base letter or a subscript: italic, as math sets a variable; a word or a number
    upright."""
    if letters in _WORDS or letters.isdigit():
        return letters
    return f"<i>{letters}</i>"


def math_html(text: str) -> str:
    """``text`` as HTML, its plain-text symbols set as math (issue 48, M4).

    ``d_k`` → ``<i>d</i><sub><i>k</i></sub>``, ``XW_Q`` → ``<i>XW</i><sub><i>Q</i></sub>``,
    ``d_model`` → ``<i>d</i><sub>model</sub>``
    (a word upright), ``√d_k`` → ``√<i>d</i><sub><i>k</i></sub>``, ``γ̃_0`` →
    ``<i>γ̃</i><sub>0</sub>``, ``QK^T`` → ``<i>QK</i><sup>⊤</sup>``, the vectors of
    ``Var[q·k]``, the variables of ``‖∂p/∂q‖`` and a one-letter operand (``m − n = 2``,
    ``P > L``) in italic, ``√`` upright in a Latin font (:data:`ROOT_HTML`); everything
    else is escaped as it is. A name is left alone: an underscore inside a word
    (``raw_scores``) or a subscript of 3 letters or more that is not a word of notation
    (``n_heads``), unless braces say it is math (``q_{m+c}``).

    Parameters
    ----------
    text : str
        A title, a header or a cell as the chapter writes it (the text repr keeps it so).

    Returns
    -------
    str
        HTML, safe to put between tags.

    Not taught: how a result is displayed.
    """
    if not isinstance(text, str):
        raise ValueError(f"text は文字列にしてください: {text!r}（{type(text).__name__}）")
    def letters(part: str) -> str:
        part = _PRODUCT_LETTER.sub(r"<i>\1</i>", html.escape(part))
        return _PARTIAL_LETTER.sub(r"<i>\1</i>", part)

    def plain(part: str) -> str:  # a one-letter operand in italic, the rest by letters()
        pieces, last = [], 0
        for match in _OPERAND.finditer(part):
            pieces += [letters(part[last:match.start()]), f"<i>{match[0]}</i>"]
            last = match.end()
        return "".join([*pieces, letters(part[last:])])

    out, last = [], 0
    spans = sorted([*_SYMBOL.finditer(text), *_TRANSPOSE.finditer(text)],
                   key=lambda m: m.start())
    for match in spans:
        if match.start() < last:  # overlaps the symbol before it
            continue
        out.append(plain(text[last:match.start()]))
        if match.re is _TRANSPOSE:
            out.append(f"<i>{html.escape(match[1])}</i><sup>⊤</sup>")
        else:
            root, factor, base, sub = match.groups()
            if sub.startswith("{"):  # braces say it is math: q_{m+c}, each letter italic
                shown = re.sub(r"[A-Za-z]+", lambda m: _letters_html(m[0]),
                               html.escape(sub[1:-1]))
            elif len(sub) <= 2 or sub.isdigit() or sub in _WORDS:
                shown = _letters_html(html.escape(sub))
            else:  # a name: n_heads
                out.append(plain(match[0]))
                last = match.end()
                continue
            out.append(f"{root or ''}<i>{factor or ''}{html.escape(base)}</i>"
                       f"<sub>{shown}</sub>")
        last = match.end()
    out.append(plain(text[last:]))
    return "".join(out).replace("√", ROOT_HTML)  # no tag holds a √: only text does


def _pad(text: str, width: int, right: bool) -> str:
    gap = " " * (width - text_width(text))
    return gap + text if right else text + gap


def _lines_html(text: str) -> str:
    """A title or a note of several lines (``\\n``) as HTML."""
    return "<br>".join(math_html(line) for line in text.split("\n"))


def _cell_text(value, where: str) -> str:
    # an integer of numpy's is an integer too; a float (of any kind) is refused
    if isinstance(value, bool) or not isinstance(value, str | numbers.Integral):
        raise TypeError(
            f"表のセル {where} は文字列か整数にしてください（桁を決めて f\"{{x:.2f}}\" のように"
            f"書く）: {value!r}（{type(value).__name__}）")
    return str(value) if isinstance(value, str) else str(int(value))


class ResultTable:
    """A table of results with its column headers, shown as HTML or as aligned text.

    ``columns``: the headers; ``rows``: one sequence of cells per row, each as long as
    ``columns``, each cell a ``str`` or an ``int``. ``title`` goes above the table (the
    HTML caption), ``note`` below it (e.g. what ``×`` means); either may have several
    lines (``"\\n"``), e.g. a legend of what the columns' letters stand for.
    ``align``: one ``"l"`` or ``"r"`` per column; by default a column whose cells all
    read as numbers is right-aligned, any other left-aligned. ``row_headers``: whether
    the first column's cells head their rows (HTML ``<th scope="row">``); by default, when
    the first column is left-aligned (names).

    Chapter 01 introduces it with its first table; every chapter shows its tables of
    results with it.

    Taught in chapter 01.
    """

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[str | int]], *,
                 title: str = "", note: str = "", align: str | None = None,
                 row_headers: bool | None = None):
        if isinstance(columns, str) or not columns:
            raise ValueError(f"columns は見出しの並び（1 つ以上）にしてください: {columns!r}")
        self.columns = [_cell_text(c, f"columns[{j}]") for j, c in enumerate(columns)]
        self.rows: list[list[str]] = []
        for i, row in enumerate(rows):
            if isinstance(row, str) or len(row) != len(self.columns):
                raise ValueError(
                    f"rows[{i}] のセルの数が見出しの数 {len(self.columns)} と違います: {row!r}")
            self.rows.append([_cell_text(v, f"rows[{i}][{j}]") for j, v in enumerate(row)])
        if align is None:
            align = "".join(
                "r" if self.rows and all(_NUMBER.match(row[j]) for row in self.rows) else "l"
                for j in range(len(self.columns)))
        if len(align) != len(self.columns) or set(align) - {"l", "r"}:
            raise ValueError(
                f"align は列ごとに l か r を 1 文字ずつ（{len(self.columns)} 文字）: {align!r}")
        self.align = align
        self.row_headers = align[0] == "l" if row_headers is None else bool(row_headers)
        self.title = str(title)
        self.note = str(note)

    def lines(self) -> list[str]:
        """The table as lines of text, columns padded to their on-screen width."""
        table = [self.columns, *self.rows]
        widths = [max(text_width(row[j]) for row in table) for j in range(len(self.columns))]
        lines = [self.title] if self.title else []
        for row in table:
            cells = [_pad(text, width, side == "r")
                     for text, width, side in zip(row, widths, self.align, strict=True)]
            lines.append("  ".join(cells).rstrip())
        if self.note:
            lines.append(self.note)
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's text/plain
        printer.text(str(self))

    def _repr_html_(self) -> str:
        def cell(tag: str, text: str, j: int, scope: str = "") -> str:
            # the alignment inline too: JupyterLab and Colab do not have the book's CSS
            if self.align[j] == "r":
                style = (' class="attnlab-number" style="text-align: right;'
                         ' font-variant-numeric: tabular-nums; white-space: nowrap"')
            else:
                style = ' style="text-align: left"'
            # a header that is one letter is a variable (h, L): italic, as in the prose
            shown = f"<i>{text}</i>" if scope == "col" and _LETTER.fullmatch(text) \
                else math_html(text)
            scope = f' scope="{scope}"' if scope else ""
            return f"<{tag}{scope}{style}>{shown}</{tag}>"

        # the title above the table, as wide as the column (a caption would be only as
        # wide as the table: a narrow table folded its title onto many lines)
        parts = ['<div class="attnlab-result-table">']
        if self.title:
            parts.append(f'<p class="attnlab-table-title">{_lines_html(self.title)}</p>')
        # a table wider than the page scrolls: focusable, so a keyboard can scroll it too
        parts.append('<div class="attnlab-table-scroll" tabindex="0"><table>')
        parts.append("<thead><tr>" + "".join(
            cell("th", text, j, "col") for j, text in enumerate(self.columns)) + "</tr></thead>")
        parts.append("<tbody>")
        for row in self.rows:
            parts.append("<tr>" + "".join(
                cell("th", text, j, "row") if j == 0 and self.row_headers
                else cell("td", text, j)
                for j, text in enumerate(row)) + "</tr>")
        parts.append("</tbody></table></div>")
        if self.note:
            parts.append(f'<p class="attnlab-table-note">{_lines_html(self.note)}</p>')
        parts.append("</div>")
        return "".join(parts)
