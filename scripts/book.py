"""The book as the scripts see it: its paths, its table of contents, and running a notebook.

One home for what every script needs (``python -m scripts.NAME`` imports it as
``from scripts.book import …``): the repository root and its folders, the pages of
``_toc.yml`` in book order, the chapter notebooks among them, the settings of
``_config.yml``, and one way to execute a notebook with nbclient.
"""

import json
import os
import tempfile
import unicodedata
from fractions import Fraction
from pathlib import Path

import yaml
from nbclient import NotebookClient
from nbconvert.preprocessors import CoalesceStreamsPreprocessor
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CONFIG = "_config.yml"
TOC = "_toc.yml"
KERNEL = "python3"
TIMEOUT = 600  # seconds for one cell


#: Columns a code block of the book holds at the browser test's 1280 px viewport, with
#: one column of margin: 77 fit in the page's body, 69 inside a folded solution (the
#: browser test measures the real blocks).
BODY_COLUMNS = 76
SOLUTION_COLUMNS = 68
#: A Japanese (East-Asian Wide/Full) character is 5/3 as wide as an ASCII one in the
#: book's code font (14 px vs 8.43 px with IPAexGothic).
WIDE = Fraction(5, 3)


def display_width(line: str) -> Fraction:
    """Columns of ``line`` in the book's code font: East-Asian W/F characters count 5/3."""
    return sum((WIDE if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line),
               Fraction(0))


def all_notebooks() -> list[Path]:
    """Every ``notebooks/*.ipynb`` by name, listed in ``_toc.yml`` or not (yet)."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def read_config(root: Path = ROOT) -> dict:
    """The settings of ``_config.yml`` (the repository URL, launch buttons, …)."""
    return yaml.safe_load((root / CONFIG).read_text(encoding="utf-8"))


def toc_pages(root: Path = ROOT) -> list[str]:
    """Every page ``_toc.yml`` lists, root first, at any depth (parts, chapters, sections)."""
    toc = yaml.safe_load((root / TOC).read_text(encoding="utf-8"))
    return [toc["root"], *_files(toc.get("parts", []))]


def _files(node) -> list[str]:
    if isinstance(node, list):
        return [f for item in node for f in _files(item)]
    if isinstance(node, dict):
        own = [node["file"]] if "file" in node else []
        return own + [f for key, value in node.items() if key != "file" for f in _files(value)]
    return []


def chapter_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks of ``_toc.yml`` (its pages that are ``.ipynb`` files), in book order."""
    paths = [root / f"{page}.ipynb" for page in toc_pages(root)]
    return [path for path in paths if path.exists()]


def execute_notebook(nb, folder: Path, timeout: int = TIMEOUT, *, for_book: bool = True):
    """Run ``nb`` top to bottom in a fresh ``python3`` kernel whose working directory is
    ``folder``; the outputs are stored in ``nb``, which is also returned.

    ``for_book`` (the default) runs it as ``make notebooks`` stores it: the kernel has
    ``ATTNLAB_BOOK_OUTPUTS=1`` (:data:`attnlab.plotting.BOOK_OUTPUTS_ENV`), so each figure
    also carries its dark version. ``for_book=False`` runs it as a reader's Run All does
    (the budgets' benchmark).

    No timing metadata and no widget state are recorded, so two runs of unchanged code
    give identical notebooks. A failing cell raises nbclient's ``CellExecutionError``.
    Consecutive prints of a cell to the same stream are stored as one output
    (:func:`join_streams`), however the kernel happened to flush them.

    The kernel is reached over local (IPC) sockets in a temporary folder of its own where
    the system has them (not Windows): nothing leaves the machine, two kernels started at
    once cannot pick the same socket, and the kernel does not print "Kernel is running
    over TCP without encryption" into every log. Elsewhere, TCP on localhost as Jupyter.
    """
    with tempfile.TemporaryDirectory(prefix="attnlab-kernel-") as sockets:
        if os.name == "posix":
            # the sockets are sockets/kernel-1, -2, …: an absolute path, as the kernel
            # runs in ``folder``
            settings = Config({"KernelManager": {"transport": "ipc",
                                                 "ip": os.path.join(sockets, "kernel")}})
        else:
            settings = Config()
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=KERNEL,
            resources={"metadata": {"path": str(folder)}},
            store_widget_state=False,
            record_timing=False,
            config=settings,
        )
        from attnlab.plotting import BOOK_OUTPUTS_ENV  # here: matplotlib takes a second

        env = {key: value for key, value in os.environ.items() if key != BOOK_OUTPUTS_ENV}
        if for_book:
            env[BOOK_OUTPUTS_ENV] = "1"
        client.execute(env=env)
    return join_streams(nb)


def join_streams(nb):
    """``nb`` with each cell's consecutive outputs to the same stream joined into one
    (nbconvert's ``CoalesceStreamsPreprocessor``, which also applies carriage returns).

    A loaded kernel flushes a long print in several messages, which the book would show
    as a table split over two or three boxes; the text is the same.
    """
    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    return nb


def rewrite_markdown(path: Path, fix, *, captions: bool = False) -> bool:
    """Apply ``fix`` (str -> str) to the Markdown of ``path`` in place; whether it changed.

    A notebook's Markdown cells (and, with ``captions``, its figures' captions, which are
    Markdown too) are rewritten and the notebook saved as the book's scripts save it; any
    other file is rewritten whole.
    """
    if path.suffix != ".ipynb":
        old = path.read_text(encoding="utf-8")
        new = fix(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
        return new != old
    nb = json.loads(path.read_text(encoding="utf-8"))
    changed = False
    for cell in nb["cells"]:
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
        if captions and isinstance(figure.get("caption"), str):
            caption = fix(figure["caption"])
            changed |= caption != figure["caption"]
            figure["caption"] = caption
        if cell["cell_type"] != "markdown":
            continue
        old = "".join(cell["source"])
        new = fix(old)
        if new != old:
            changed = True
            cell["source"] = new.splitlines(keepends=True)
    if changed:
        path.write_text(json.dumps(nb, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
                        encoding="utf-8")
    return changed
