"""Binder and Colab open the full chapters in plain Markdown (issue 47): the conversion
(scripts/plain_notebooks.py), the Colab button and links that open the copy ``make publish``
writes (book_ext/book_fixes.py, book_ext/instructor_page.py), and Binder's ``postBuild``.
``make publish`` writing the copies is tested in tests/test_publish.py."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from sphinx_book_theme.header_buttons.launch import add_launch_buttons

from book_ext.book_fixes import _colab_button
from book_ext.instructor_page import generate, launch_config
from scripts.book import ROOT, chapter_notebooks
from scripts.plain_markdown import MYST_LEFT, book_index
from scripts.plain_notebooks import (
    colab_path,
    colab_url,
    full_plain_notebook,
    plain_solution_fences,
)

PAGE = "notebooks/03_split_and_concat"
COLAB = ("https://colab.research.google.com/github/attnlab/mha-positional-encoding-course/"
         "blob/gh-pages/colab/notebooks/03_split_and_concat.ipynb")
BUILT = ROOT / "_build" / "html"
MARKERS = ("BEGIN SOLUTION", "END SOLUTION")


def page_of(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).with_suffix("").as_posix()


def myst_left(nbs: dict) -> list[str]:
    """Every piece of MyST (the student edition's detector) and every grading marker."""
    found = []
    for name, nb in nbs.items():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                found += [f"{name} セル {i}: {m.group()!r}"
                          for m in MYST_LEFT.finditer(cell.source)]
            found += [f"{name} セル {i}: {k}" for k in MARKERS if k in cell.source]
    return found


@pytest.fixture(scope="module")
def sources():
    return {page_of(path): nbformat.read(path, as_version=4) for path in chapter_notebooks()}


@pytest.fixture(scope="module")
def converted(sources):
    index = book_index()
    return {page: full_plain_notebook(nb, page, index) for page, nb in sources.items()}


# --- the conversion ----------------------------------------------------------------------------

def test_the_full_edition_has_no_myst_and_no_marker(sources, converted):
    assert len(converted) == len(chapter_notebooks()) >= 11
    assert myst_left(sources)  # the detector has something to find in the sources
    assert not myst_left(converted), myst_left(converted)


def test_the_full_edition_keeps_every_code_cell_its_outputs_and_the_solutions(sources, converted):
    for page, nb in sources.items():
        code = [c for c in nb.cells if c.cell_type == "code"]
        plain = [c for c in converted[page].cells if c.cell_type == "code"]
        assert [c.id for c in plain] == [c.id for c in code], page
        assert [c.outputs for c in plain] == [c.outputs for c in code], page
        assert [c.metadata for c in plain] == [c.metadata for c in code], page
        for before, after in zip(code, plain, strict=True):
            kept = [line for line in before.source.split("\n")
                    if not any(k in line for k in MARKERS)]
            assert after.source.split("\n") == kept, (page, before.id)
    solved = [c for c in sources[PAGE].cells if "solution" in c.metadata.get("tags", [])]
    assert solved and all(c.source.strip() for c in solved)


def test_exercises_and_solutions_are_headings_naming_the_exercise(converted):
    text = "\n".join(c.source for c in converted[PAGE].cells if c.cell_type == "markdown")
    numbers = book_index().exercise_numbers
    for label in ("ex03-split-heads", "ex03-mha"):
        name = f"練習 {numbers[label]}（{label}）"
        assert f"### {name}\n" in text
        assert f"#### {name}の解答\n" in text


def test_a_solution_fence_becomes_a_heading_and_its_end_goes():
    numbers = {"ex03-mha": 7}
    start = "```{solution-start} ex03-mha\n:class: dropdown\n```\n4 段をそのまま書きます。"
    assert plain_solution_fences(start, numbers) == (
        "#### 練習 7（ex03-mha）の解答\n\n4 段をそのまま書きます。")
    assert plain_solution_fences("```{solution-end}\n```", numbers) == ""
    one = "前\n\n```{solution} ex03-mha\n:label: sol\n本文\n```\n\n後"
    assert plain_solution_fences(one, numbers) == (
        "前\n\n#### 練習 7（ex03-mha）の解答\n\n本文\n\n後")


def test_the_conversion_is_idempotent(converted):
    index = book_index()
    again = {page: full_plain_notebook(nb, page, index) for page, nb in converted.items()}
    assert again == converted


# --- Colab: the button and the links open the converted copy -----------------------------------

def test_the_colab_url_is_the_copy_on_gh_pages():
    assert colab_path(PAGE) == colab_path(f"{PAGE}.ipynb") == f"colab/{PAGE}.ipynb"
    assert colab_url(PAGE) == COLAB


def test_the_colab_url_follows_a_fork(tmp_path):
    (tmp_path / "_config.yml").write_text(
        "repository:\n  url: https://github.com/someone/fork-course\n  branch: dev\n"
        "launch_buttons:\n  colab_url: https://colab.example.org/\n", encoding="utf-8")
    assert colab_url("notebooks/01_x", tmp_path) == (
        "https://colab.example.org/github/someone/fork-course/blob/gh-pages/"
        "colab/notebooks/01_x.ipynb")


def launch_buttons(pagename: str) -> list[dict]:
    """The launch buttons of ``pagename`` as sphinx-book-theme makes them, then as the book's
    html-page-context handler (priority 600, after the theme's 501) leaves them."""
    config = read_config_for_theme()
    app = SimpleNamespace(
        config={"html_theme_options": config},
        env=SimpleNamespace(doc2path=lambda name: str(ROOT / f"{name}.ipynb"),
                            metadata={pagename: {"kernelspec": {"name": "python3"}}}),
        srcdir=str(ROOT),
    )
    context = {"pagename": pagename, "sourcename": f"{pagename}.ipynb.txt", "header_buttons": [],
               "github_url": "https://github.com",
               "github_user": "attnlab", "github_repo": "mha-positional-encoding-course"}
    add_launch_buttons(app, pagename, "page.html", context, None)
    _colab_button(app, pagename, "page.html", context, None)
    (group,) = [g for g in context["header_buttons"] if g.get("label") == "launch-buttons"]
    return group["buttons"]


def read_config_for_theme() -> dict:
    from scripts.book import read_config

    config = read_config()
    return {"launch_buttons": config["launch_buttons"],
            "repository_branch": config["repository"]["branch"]}


def test_the_colab_button_opens_the_converted_copy_and_binder_the_repository():
    buttons = {b["text"]: b["url"] for b in launch_buttons(PAGE)}
    assert buttons["Colab"] == COLAB
    assert buttons["Binder"] == (
        "https://mybinder.org/v2/gh/attnlab/mha-positional-encoding-course/main"
        f"?urlpath=lab/tree/{PAGE}.ipynb")


def test_a_page_without_a_copy_keeps_the_themes_button():
    buttons = {b["text"]: b["url"] for b in launch_buttons("book/not-a-chapter")}
    assert "/blob/main/book/not-a-chapter.ipynb" in buttons["Colab"]


def test_the_instructor_pages_colab_links_open_the_converted_copies():
    launch = launch_config()
    assert launch.colab(f"{PAGE}.ipynb") == COLAB
    text = generate("launch")
    for path in chapter_notebooks():
        assert f"({colab_url(page_of(path))})" in text
    assert "/blob/main/notebooks/" not in text


@pytest.mark.skipif(not (BUILT / f"{PAGE}.html").exists(),
                    reason="本がまだビルドされていません（make build のあとで実行されます）")
def test_the_built_book_opens_each_chapters_copy_in_colab():
    for path in chapter_notebooks():
        html = (BUILT / f"{page_of(path)}.html").read_text(encoding="utf-8")
        links = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html)
        assert links == [colab_url(page_of(path))], (path.name, links)


# --- Binder: postBuild converts the chapters in place ------------------------------------------

NO_NETWORK = """\
import socket

def _refuse(*args, **kwargs):
    raise OSError("postBuild のテスト: ネットワークは使えません")

socket.socket.connect = _refuse
socket.create_connection = _refuse
"""


def run_post_build(copy: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    guard = tmp_path / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(NO_NETWORK, encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(guard)}
    return subprocess.run(["./postBuild"], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=600)


def test_post_build_leaves_no_myst_in_the_chapters_and_is_idempotent(tmp_path, converted):
    assert os.access(ROOT / "postBuild", os.X_OK)
    assert not (ROOT / "binder").exists()  # it would hide requirements.txt and runtime.txt
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
    for name in ("book", "notebooks", "scripts"):
        shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    for name in ("_config.yml", "_toc.yml", "postBuild"):
        shutil.copy2(ROOT / name, copy / name)
    first = run_post_build(copy, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    chapters = {page_of(path, copy): nbformat.read(path, as_version=4)
                for path in chapter_notebooks(copy)}
    assert chapters == converted  # the same conversion as the Colab copies
    assert not myst_left(chapters)
    after_first = {path: path.read_bytes() for path in chapter_notebooks(copy)}
    second = run_post_build(copy, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert {path: path.read_bytes() for path in chapter_notebooks(copy)} == after_first
