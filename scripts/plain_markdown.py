"""MyST written as plain Jupyter Markdown, for the notebooks a student opens outside the book.

The book (Sphinx, MyST) renders roles and directives; JupyterLab without an extension,
Colab and the student edition show them as raw text (``{cite}`vaswani2017attention```,
fenced ``{exercise-start}`` blocks). jupyterlab-myst does not close the gap: it cannot
resolve a ``{cite}`` key against ``book/references.bib`` (issue 47, see the report). So
``scripts/make_student.py`` writes every markdown cell through :func:`plain_markdown`:

- ``{cite}`a,b``` → ``[Vaswani ら（2017）](…/book/references.html)``, one link per key, to
  the published references page (``_config.yml``'s repository URL, as ``make publish``
  derives it);
- ``{ref}`text <label>``` → ``[text](page.html#label)``, and a reference to an exercise
  (「練習問題 {ref}`ex01-variance <ex01-variance>`」) → ``[練習 2（ex01-variance）](…)``;
  ``{numref}`fig-…``` → ``[図 N](…)`` with the number the book gives;
  ``{doc}`text <page>``` → ``[text](page.html)``;
- ``{math}`x``` → ``$x$``; ``{term}``, ``{abbr}`` and any other role → its text;
- a ``{math}`` directive → ``$$…$$``; an admonition (``{note}``, ``{tip}``, …) or any other
  directive → a blockquote with its title in bold; ``(label)=`` target lines and ``%``
  comment lines go.

Exercise fences become headings in ``make_student`` (``### 練習 6（ex03-split-heads）``,
:func:`scripts.exercises.exercise_name`), before this runs. :data:`MYST_LEFT` finds what a
student must not see; ``tests/test_student_markdown.py`` applies it to every chapter.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from scripts.book import ROOT, read_config, toc_pages
from scripts.exercises import directives, exercise_name, exercise_numbers

#: A role: {name}`content` (the name may have a colon: cite:p, cite:t).
ROLE = re.compile(r"(?P<prefix>練習問題\s*)?\{(?P<name>[a-zA-Z][\w:-]*)\}`(?P<content>[^`]*)`")
#: ``text <target>`` inside a role.
EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
TARGET_LINE = re.compile(r"^\([\w:.-]+\)=\s*$")
COMMENT_LINE = re.compile(r"^%")
#: What must not be left in a notebook a student receives: a role, a directive fence, a
#: target line, a comment line, a block break.
MYST_LEFT = re.compile(
    r"\{[a-zA-Z][\w:-]*\}`|^\s*(?:`{3,}|:{3,})\s*\{|^\([\w:.-]+\)=\s*$|^%|^\+\+\+\s*$",
    re.MULTILINE)
ADMONITIONS = {
    "note": "注", "tip": "ヒント", "hint": "ヒント", "important": "重要", "warning": "注意",
    "caution": "注意", "attention": "注意", "danger": "危険", "error": "エラー",
    "seealso": "参照", "admonition": "",
}
REFERENCES_PAGE = "book/references"
BIBLIOGRAPHY = "book/references.bib"


def _pages_url(repository_url: str) -> str:
    from scripts.publish import pages_url  # the URL make publish prints

    return pages_url(repository_url)


@dataclass
class BookIndex:
    """What the book knows about every page: where a label lives, the numbers it gives."""

    base_url: str  # the published book, ending in /
    label_pages: dict[str, str] = field(default_factory=dict)  # label → page (no suffix)
    figure_numbers: dict[str, int] = field(default_factory=dict)  # figure name → 図 N
    exercise_numbers: dict[str, int] = field(default_factory=dict)  # label → 練習 N
    titles: dict[str, str] = field(default_factory=dict)  # page → its first heading
    citations: dict[str, str] = field(default_factory=dict)  # bib key → 著者（年）

    def url(self, page: str, anchor: str = "") -> str:
        return f"{self.base_url}{page}.html" + (f"#{anchor}" if anchor else "")


def _page_cells(root: Path, page: str) -> list[dict]:
    """The page's cells as the book reads them (a Markdown page is one markdown cell)."""
    notebook = root / f"{page}.ipynb"
    if notebook.exists():
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        return [{**cell, "source": "".join(cell["source"])
                 if isinstance(cell["source"], list) else cell["source"]} for cell in cells]
    markdown = root / f"{page}.md"
    text = markdown.read_text(encoding="utf-8") if markdown.exists() else ""
    return [{"cell_type": "markdown", "source": text, "metadata": {}}]


def _names(author_field: str) -> list[str]:
    """The last names of a BibTeX author list, LaTeX accents and braces removed."""
    from pybtex.database import Person
    from pybtex.richtext import Text

    names = []
    for person in re.split(r"\s+and\s+", author_field.strip()):
        if person.strip() == "others":
            names.append("others")
            continue
        last = " ".join(Person(person).last_names)
        names.append(Text.from_latex(last).render_as("text"))
    return names


def author_year(author_field: str, year: str) -> str:
    """``Vaswani ら（2017）``, ``Jain と Wallace（2019）``, ``Shazeer（2019）``."""
    names = _names(author_field)
    if len(names) == 1:
        who = names[0]
    elif len(names) == 2 and names[1] != "others":
        who = f"{names[0]} と {names[1]}"
    else:
        who = f"{names[0]} ら"
    return f"{who}（{year}）"


def _citations(root: Path) -> dict[str, str]:
    from pybtex.database import parse_file

    bibliography = parse_file(str(root / BIBLIOGRAPHY), bib_format="bibtex")
    found = {}
    for key, entry in bibliography.entries.items():
        persons = entry.persons.get("author") or entry.persons.get("editor") or []
        authors = " and ".join(str(p) for p in persons) or entry.fields.get("title", key)
        found[key] = author_year(authors, entry.fields.get("year", "n.d."))
    return found


@lru_cache(maxsize=4)
def book_index(root: Path = ROOT) -> BookIndex:
    """The index of the book at ``root``: every page of ``_toc.yml``, in book order.

    Figures and exercises are numbered as Sphinx numbers them without a numbered toctree:
    one count through the whole book, in ``_toc.yml``'s order (a figure is a
    ``{figure}`` directive or a code cell with ``mystnb.figure`` metadata).
    """
    index = BookIndex(base_url=_pages_url(read_config(root)["repository"]["url"]))
    pages = toc_pages(root)
    figures = 0
    for page in pages:
        for cell in _page_cells(root, page):
            source = cell["source"]
            if cell["cell_type"] == "markdown":
                for line in source.split("\n"):
                    if TARGET_LINE.match(line):
                        index.label_pages.setdefault(line.strip()[1:-2], page)
                    heading = re.match(r"^#\s+(.+)$", line)
                    if heading and page not in index.titles:
                        index.titles[page] = heading.group(1).strip()
                for directive in directives(source):
                    label = directive.options.get("label") or directive.options.get("name")
                    if label:
                        index.label_pages.setdefault(label, page)
                    if directive.name == "figure":
                        figures += 1
                        if label:
                            index.figure_numbers[label] = figures
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
            if cell["cell_type"] == "code" and figure:
                figures += 1
                if figure.get("name"):
                    index.figure_numbers[figure["name"]] = figures
                    index.label_pages.setdefault(figure["name"], page)
    index.exercise_numbers = exercise_numbers(
        "\n".join(c["source"] for c in _page_cells(root, page) if c["cell_type"] == "markdown")
        for page in pages)
    index.citations = _citations(root)
    return index


def _split_target(content: str) -> tuple[str, str]:
    """(text, target) of a role's content: ``text <target>`` or just ``target``."""
    explicit = EXPLICIT.match(content.strip())
    if explicit:
        return explicit["text"].strip(), explicit["target"].strip()
    return "", content.strip()


def _role(match: re.Match, page: str, index: BookIndex) -> str:
    """The plain Markdown of one role; 「練習問題 」 before a reference to an exercise is
    taken into the exercise's name (``[練習 2（ex01-variance）](…)``)."""
    name, content, prefix = match["name"], match["content"], match["prefix"] or ""
    text, target = _split_target(content)
    if name == "ref" and target in index.exercise_numbers and text in ("", target):
        where = index.label_pages.get(target, page)
        return f"[{exercise_name(target, index.exercise_numbers)}]({index.url(where, target)})"
    return prefix + _plain_role(name, content, page, index)


def _plain_role(name: str, content: str, page: str, index: BookIndex) -> str:
    if name.startswith("cite"):
        keys = [key.strip() for key in content.split(",") if key.strip()]
        return "、".join(
            f"[{index.citations.get(key, key)}]({index.url(REFERENCES_PAGE)})" for key in keys)
    if name == "math":
        return f"${content}$"
    text, target = _split_target(content)
    if name in ("ref", "numref", "eq"):
        where = index.label_pages.get(target, page)
        if not text and name == "numref" and target in index.figure_numbers:
            text = f"図 {index.figure_numbers[target]}"
        elif "%s" in text and target in index.figure_numbers:
            text = text.replace("%s", str(index.figure_numbers[target]))
        return f"[{text or target}]({index.url(where, target)})"
    if name == "doc":
        linked = posixpath.normpath(posixpath.join(posixpath.dirname(page), target))
        return f"[{text or index.titles.get(linked, target)}]({index.url(linked)})"
    return text or target  # term, abbr, any other role: its text


def _directive_block(directive, page: str, index: BookIndex) -> list[str]:
    body = [plain_markdown(line, page, index) for line in directive.body]
    if directive.name == "math":
        return ["$$", *directive.body, "$$"]
    title = directive.argument.strip()
    if directive.name in ADMONITIONS:
        title = title or ADMONITIONS[directive.name]
    head = [f"> **{plain_markdown(title, page, index)}**", ">"] if title else []
    return head + [f"> {line}".rstrip() for line in body]


def plain_markdown(source: str, page: str, index: BookIndex) -> str:
    """``source`` (a markdown cell of ``page``, e.g. ``notebooks/03_split_and_concat``) with
    every MyST role and directive written as plain Markdown (see the module docstring)."""
    lines = source.split("\n")
    out, done = [], 0
    for directive in directives(source):
        out += lines[done:directive.lines.start]
        out += _directive_block(directive, page, index)
        done = directive.lines.stop
    out += lines[done:]
    out = [line for line in out if not (TARGET_LINE.match(line) or COMMENT_LINE.match(line))]
    return ROLE.sub(lambda m: _role(m, page, index), "\n".join(out))
