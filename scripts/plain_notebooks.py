"""The full chapters as plain Jupyter Markdown, for Binder and Colab (issue 47).

Usage:
    python -m scripts.plain_notebooks --in-place        convert notebooks/ where it is (Binder's
                                                        ``postBuild`` runs this)
    python -m scripts.plain_notebooks --out DIR         write DIR/notebooks/NN_slug.ipynb, the
                                                        repository untouched (``make publish``
                                                        writes the Colab copies so, into the
                                                        site's ``colab/``)

Binder and Colab open the full chapters, solutions included, where no MyST extension runs:
the roles and directives would show as raw text. :func:`full_plain_notebook` writes a chapter
as the book shows it, in plain Markdown:

- code cells lose the ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines (the book strips
  them too: ``book_ext/book_fixes.py``); outputs, tags and metadata stay;
- an exercise fence becomes a heading with the book's name (``### 練習 6（ex03-split-heads）``,
  as in the student edition), a solution fence a heading ``#### 練習 6（ex03-split-heads）の解答``
  (``{solution-end}`` goes);
- every other role and directive as ``scripts/plain_markdown.py`` writes it.

The conversion needs no network (the links are derived from ``_config.yml``) and is
idempotent: a converted chapter has no MyST left, so converting it again changes nothing.

The Colab launch button of the book (``book_ext/book_fixes.py``) and the Colab links of the
instructor page open the copy ``make publish`` puts on the ``gh-pages`` branch:
:func:`colab_url` is the one place that URL is made.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import nbformat

from scripts.book import ROOT, chapter_notebooks, read_config
from scripts.exercises import directives, exercise_name
from scripts.make_student import plain_exercise_fences, strip_solution_markers
from scripts.plain_markdown import BookIndex, book_index, plain_markdown

#: The folder of the published site that holds the Colab copies (``colab/notebooks/…``).
COLAB_FOLDER = "colab"
#: The branch ``make publish`` pushes the site to (``scripts/publish.py`` BRANCH).
PAGES_BRANCH = "gh-pages"
SOLUTION_NAMES = {"solution", "solution-start", "solution-end"}
SOLUTION_HEADING = "#### {name}の解答"


def colab_path(page: str) -> str:
    """Where the site holds the Colab copy of ``page`` (``notebooks/03_x`` or its ``.ipynb``):
    ``colab/notebooks/03_x.ipynb``."""
    page = page.removesuffix(".ipynb").strip("/")
    return f"{COLAB_FOLDER}/{page}.ipynb"


def colab_url(page: str, root: Path = ROOT) -> str:
    """The Colab URL of ``page``'s plain copy on the ``gh-pages`` branch of the repository of
    ``_config.yml`` (``repository.url``, ``launch_buttons.colab_url``)."""
    config = read_config(root)
    owner, repo = (urlparse(config["repository"]["url"]).path.strip("/")
                   .removesuffix(".git").split("/")[:2])
    base = config.get("launch_buttons", {}).get("colab_url", "https://colab.research.google.com")
    return f"{base.rstrip('/')}/github/{owner}/{repo}/blob/{PAGES_BRANCH}/{colab_path(page)}"


def plain_solution_fences(source: str, numbers: dict[str, int]) -> str:
    """Write solution directives as a heading naming the exercise (``#### 練習 6
    （ex03-split-heads）の解答``) followed by the body; ``{solution-end}`` goes."""
    lines = source.split("\n")
    out, done = [], 0
    for directive in directives(source):
        if directive.name not in SOLUTION_NAMES:
            continue
        out += lines[done:directive.lines.start]
        if directive.name != "solution-end":
            label = directive.argument.strip()
            name = exercise_name(label, numbers) if label else "練習"
            out += [SOLUTION_HEADING.format(name=name), ""]
            out += directive.body
        done = directive.lines.stop
    out += lines[done:]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


def full_plain_notebook(nb, page: str, index: BookIndex):
    """The full edition of ``nb`` (the chapter ``page``, e.g. ``notebooks/03_x``) in plain
    Jupyter Markdown, as a new notebook (see the module docstring). Cells a conversion
    leaves empty (a lone ``{solution-end}``) go."""
    nb = nbformat.from_dict(nb)  # a deep copy
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = strip_solution_markers(cell.source)
        elif cell.cell_type == "markdown":
            source = plain_solution_fences(cell.source, index.exercise_numbers)
            source = plain_exercise_fences(source, index.exercise_numbers)
            cell.source = plain_markdown(source, page, index)
            if not cell.source.strip():
                continue
        cells.append(cell)
    nb.cells = cells
    nbformat.validate(nb)
    return nb


def convert(out_dir: Path | None = None, root: Path = ROOT) -> list[Path]:
    """Convert every chapter of ``root`` (``_toc.yml``): into ``out_dir`` under the same
    paths (``out_dir/notebooks/NN_slug.ipynb``), or in place when ``out_dir`` is None.
    Every chapter is converted before any is written (the index of the book is read from
    the unconverted chapters). Returns the written paths."""
    index = book_index(root)
    sources = chapter_notebooks(root)
    converted = [
        full_plain_notebook(nbformat.read(path, as_version=4),
                            path.relative_to(root).with_suffix("").as_posix(), index)
        for path in sources
    ]
    written = []
    for path, nb in zip(sources, converted, strict=True):
        target = path if out_dir is None else out_dir / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.plain_notebooks",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--in-place", action="store_true", help="notebooks/ をその場で書き換える")
    where.add_argument("--out", type=Path, help="変換した章を書くフォルダー")
    parser.add_argument("--root", type=Path, default=ROOT, help="リポジトリ（既定: この本）")
    args = parser.parse_args(argv)
    written = convert(None if args.in_place else args.out, args.root.resolve())
    print(f"{len(written)} 章を MyST のない Markdown に変換しました"
          f"（{'その場で' if args.in_place else args.out}）")
    return 0


if __name__ == "__main__":
    sys.exit(main())
