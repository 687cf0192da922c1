"""Write the Colab install cell at the top of every chapter notebook, from _config.yml.

Usage: python -m scripts.sync_colab_cell [NOTEBOOK ...]   (default: every notebooks/*.ipynb;
``make colab-cell`` runs it so)

The first code cell of every chapter installs the course package ``attnlab`` with pip
from the repository, and only when the notebook runs in Google Colab (everywhere else
``attnlab`` is already installed from requirements.txt and the cell does nothing). The
URL and branch come from ``repository.url`` and ``repository.branch`` in
``_config.yml``, the one place a fork changes them; run this script after changing them.
The cell is tagged ``colab-install`` and ``remove-cell`` (the book does not show it).
"""

import sys
from pathlib import Path

import nbformat

from scripts.book import all_notebooks, read_config

TAGS = ["colab-install", "remove-cell"]
CELL_ID = "colab-install"


def repository() -> tuple[str, str]:
    """``(url, branch)`` of the repository, from ``_config.yml``."""
    repo = read_config()["repository"]
    return repo["url"], repo.get("branch", "main")


def colab_source(url: str, branch: str) -> str:
    """Source of the install cell for the repository ``url`` at ``branch``."""
    return (
        "# In Google Colab only: install the course package attnlab from the repository.\n"
        "import importlib\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    subprocess.run(\n"
        '        [sys.executable, "-m", "pip", "install", "--quiet",\n'
        f'         "git+{url}@{branch}"],\n'
        "        check=True,\n"
        "    )\n"
        "    importlib.invalidate_caches()"
    )


def sync(path: Path) -> str | None:
    """Make the first code cell of ``path`` the install cell; return what was done:
    ``"inserted"`` (a new cell: the execution counts move, so re-execute the notebook),
    ``"rewritten"`` (the cell has no outputs: nothing to re-execute) or None (unchanged)."""
    nb = nbformat.read(path, as_version=4)
    source = colab_source(*repository())
    index, first = next(
        (i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"
    )
    done = "rewritten"
    if "colab-install" not in first.metadata.get("tags", []):
        first = nbformat.v4.new_code_cell(id=CELL_ID)
        nb.cells.insert(index, first)
        done = "inserted"
    elif first.source == source and first.metadata.get("tags") == TAGS:
        return None
    first.source = source
    first.metadata["tags"] = list(TAGS)
    first.outputs = []
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return done


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or all_notebooks()
    for path in paths:
        done = sync(path)
        if done == "inserted":
            print(f"セルを足しました: {path.name}（セルの番号がずれたので、"
                  "make notebooks で出力を保存し直してください）")
        elif done == "rewritten":
            print(f"書き換えました: {path.name}（出力のないセルなので、"
                  "make notebooks は要りません）")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
