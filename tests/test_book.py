"""The book's layout for the scripts (scripts/book.py): the table of contents, the chapter
notebooks in book order, and the one way a notebook is executed."""

import nbformat

from scripts.book import ROOT, all_notebooks, chapter_notebooks, execute_notebook, toc_pages

TOC = """format: jb-book
root: book/intro
parts:
  - caption: 第I部
    chapters:
      - file: notebooks/02_second
        sections:
          - file: book/inside
      - file: notebooks/01_first
  - caption: 付録
    chapters:
      - file: book/references
"""


def _book(root):
    (root / "_toc.yml").write_text(TOC, encoding="utf-8")
    (root / "notebooks").mkdir()
    for stem in ("01_first", "02_second", "03_not_in_toc"):
        nbformat.write(nbformat.v4.new_notebook(), root / "notebooks" / f"{stem}.ipynb")


def test_toc_pages_are_every_file_at_any_depth_root_first(tmp_path):
    _book(tmp_path)
    assert toc_pages(tmp_path) == [
        "book/intro", "notebooks/02_second", "book/inside", "notebooks/01_first",
        "book/references"]


def test_chapter_notebooks_are_the_toc_notebooks_in_book_order(tmp_path):
    _book(tmp_path)
    assert chapter_notebooks(tmp_path) == [
        tmp_path / "notebooks" / "02_second.ipynb", tmp_path / "notebooks" / "01_first.ipynb"]


def test_the_book_chapters_are_notebooks_of_notebooks_folder():
    chapters = chapter_notebooks()
    assert chapters and set(chapters) <= set(all_notebooks())
    assert all(path.parent == ROOT / "notebooks" for path in chapters)


ENV_PROBE = ("import os\nprint(os.getcwd())\n"
             "print(os.environ.get('ATTNLAB_BOOK_OUTPUTS'), os.environ.get('ATTNLAB_PROBE'))")


def test_execute_runs_in_the_notebooks_folder_and_records_no_timing(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_PROBE", "kept")  # the kernel gets this process's environment
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(ENV_PROBE)])
    executed = execute_notebook(nb, tmp_path)
    assert executed is nb
    cell = nb.cells[0]
    assert cell.execution_count == 1
    # stored for the book (make notebooks): the figures carry their dark version
    assert cell.outputs[0].text.split("\n")[:2] == [str(tmp_path), "1 kept"]
    assert "execution" not in cell.metadata
    assert "widgets" not in nb.metadata


def test_execute_as_a_reader_runs_without_the_book_outputs(tmp_path, monkeypatch):
    from attnlab.plotting import BOOK_OUTPUTS_ENV

    assert BOOK_OUTPUTS_ENV == "ATTNLAB_BOOK_OUTPUTS"
    monkeypatch.setenv(BOOK_OUTPUTS_ENV, "1")  # even when this process has it
    monkeypatch.setenv("ATTNLAB_PROBE", "kept")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(ENV_PROBE)])
    execute_notebook(nb, tmp_path, for_book=False)  # as benchmarks.budgets times a chapter
    assert nb.cells[0].outputs[0].text.split("\n")[1] == "None kept"


def test_execute_talks_to_the_kernel_without_the_tcp_warning(tmp_path, capfd):
    """The kernel inherits this process's stderr: over TCP it warns "Kernel is running over
    TCP without encryption" there, into every log of make test, where it hides the
    messages that matter."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    execute_notebook(nb, tmp_path)
    assert nb.cells[0].outputs[0].text.strip() == "42"
    err = capfd.readouterr().err
    assert "without encryption" not in err, err
    assert not list(tmp_path.iterdir())  # no socket files left in the notebook's folder


def test_two_notebooks_execute_at_once(tmp_path):
    """Two kernels started together (make student-test runs chapters side by side) each
    get their own sockets."""
    from concurrent.futures import ThreadPoolExecutor

    books = [nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"print({n})")])
             for n in (1, 2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda nb: execute_notebook(nb, tmp_path), books))
    assert [nb.cells[0].outputs[0].text.strip() for nb in books] == ["1", "2"]


def test_consecutive_prints_to_a_stream_are_one_output():
    import nbformat

    from scripts.book import join_streams

    cell = nbformat.v4.new_code_cell("print(1)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="b\n"),
                    nbformat.v4.new_output("stream", name="stderr", text="c\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="d\n")]
    nb = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("x")])
    out = join_streams(nb).cells[0].outputs
    assert [(o.name, o.text) for o in out] == [("stdout", "a\nb\n"), ("stderr", "c\n"),
                                                ("stdout", "d\n")]
