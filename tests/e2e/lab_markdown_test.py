"""The student edition as JupyterLab renders it: no MyST left, citations read as citations.

Usage: python -m tests.e2e.lab_markdown_test [--full] [CHAPTER ...]   (default: every chapter)
       --full opens the full notebooks instead (their MyST must make the test fail)

Issue 47: outside the book, a notebook shows MyST roles and directives as raw text.
jupyterlab-myst does not close the gap for this book: it cannot resolve a ``{cite}`` key
against ``book/references.bib`` (its page state starts with no citation data; only DOI,
Wikipedia, GitHub and RRID links are looked up, and an unknown key renders as the error
"Citation Not Found"). So the student edition is written as plain Jupyter Markdown
(``scripts/plain_markdown.py``), and this test opens it where a student does: JupyterLab
from the reader's environment (``requirements.txt``; no MyST extension), with throwaway
settings, in headless Chromium (the machinery of ``tests/e2e/lab_widget_test.py``). Per
chapter:

- the student edition is written into a temporary folder (``make student``'s code);
- the notebook is opened and every markdown cell rendered (no cell is run);
- the rendered text of every markdown cell must contain none of ``{cite}``, ``{ref}``,
  ``{doc}``, ``{numref}``, ``{math}``, a ```` ```{ ```` or ``:::{`` fence, or a ``(label)=``
  line;
- a chapter that cites has links reading ``著者 ら（年）`` (or one or two names) that point
  at the published references page, and every exercise shows as a heading
  ``練習 N（label）``.

Colab renders Markdown with its own CommonMark renderer and no extension: the same plain
Markdown, which ``tests/test_student_markdown.py`` checks on the notebook files.
"""

import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from scripts.book import chapter_notebooks
from scripts.make_student import write_student_edition
from scripts.plain_markdown import REFERENCES_PAGE, book_index
from tests.e2e.browser_test import japanese_context, missing_chromium
from tests.e2e.lab_widget_test import OPEN_JS, SERVER_TIMEOUT, Lab, LabError

RAW_MYST = re.compile(r"\{(?:cite[\w:]*|ref|doc|numref|math|eq|term)\}|(?:`{3,}|:{3,})\{"
                      r"|^\([\w:.-]+\)=$", re.MULTILINE)
CITATION = re.compile(r"^\S.*（\d{4}）$")
EXERCISE = re.compile(r"^練習 \d+（ex\d\d-[\w-]+）$")

# The rendered markdown cells of the open notebook: their text, links and headings.
RENDERED_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = [...panel.node.querySelectorAll(".jp-MarkdownCell")];
  return cells.map(cell => {
    const view = cell.querySelector(".jp-RenderedMarkdown");
    return {
      rendered: view !== null && !cell.classList.contains("jp-mod-editMode"),
      text: view ? view.innerText : "",
      links: view ? [...view.querySelectorAll("a")].map(a => [a.innerText, a.href]) : [],
      headings: view ? [...view.querySelectorAll("h3")].map(h => h.innerText) : [],
    };
  });
}"""


def check_chapter(context, lab: Lab, path: Path, references_url: str) -> list[str]:
    tab = context.new_page()
    tab.goto(f"{lab.base}/lab/tree/{path.name}?reset&token={lab.token}", wait_until="load")
    tab.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    opened = tab.evaluate(OPEN_JS, [SERVER_TIMEOUT * 1000, path.name])
    tab.wait_for_timeout(1000)  # markdown renders asynchronously after the model loads
    cells = tab.evaluate(RENDERED_JS)
    tab.close()
    problems = []
    if not cells:
        problems.append("markdown のセルが 1 つも描かれていません")
    for number, cell in enumerate(cells):
        if not cell["rendered"]:
            problems.append(f"markdown セル {number} が描かれていません")
        for raw in RAW_MYST.finditer(cell["text"]):
            problems.append(f"markdown セル {number} に MyST が残っています：{raw.group()!r}")
    citations = [(text, href) for cell in cells for text, href in cell["links"]
                 if CITATION.match(text.strip())]
    wrong = [(text, href) for text, href in citations if href != references_url]
    problems += [f"引用 {text!r} のリンクが {href}" for text, href in wrong]
    if references_url in path.read_text(encoding="utf-8") and not citations:
        problems.append("引用（著者（年））のリンクが 1 つも描かれていません")
    headings = [h.strip() for cell in cells for h in cell["headings"] if h.startswith("練習")]
    problems += [f"練習問題の見出しが {h!r}" for h in headings if not EXERCISE.match(h)]
    if not headings:
        problems.append("練習問題の見出し（練習 N（ラベル））がありません")
    print(f"  {'OK' if not problems else '失敗'} {path.name}：markdown セル {len(cells)} 個、"
          f"引用 {len(citations)} 個、練習問題 {len(headings)} 個（セル {opened['cells']} 個）")
    return [f"{path.name}: {p}" for p in problems]


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    if problem := missing_chromium():
        print(f"問題: {problem}", file=sys.stderr)
        return 1
    index = book_index()
    references_url = index.url(REFERENCES_PAGE)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lab-markdown-test-") as temp:
        temp = Path(temp)
        full = "--full" in argv
        argv = [a for a in argv if a != "--full"]
        if full:  # the notebooks as they are: the test must see their MyST
            (temp / "student").mkdir()
            written = [Path(shutil.copy(p, temp / "student")) for p in chapter_notebooks()]
        else:
            written = [path for path, _ in write_student_edition(temp / "student")]
        if argv:
            written = [p for p in written if any(p.name.startswith(a) for a in argv)]
        (temp / "home").mkdir()
        lab = Lab(temp / "student", temp / "home")
        try:
            lab.wait()
            with sync_playwright() as playwright:
                browser, context = japanese_context(playwright, temp, height=1000)
                context.route("**/*", lambda r: r.continue_() if r.request.url.startswith(
                    (lab.base, "blob:", "data:")) else r.abort())
                for path in written:
                    try:
                        problems += check_chapter(context, lab, path, references_url)
                    except Exception as err:  # noqa: BLE001 - reported, then the next chapter
                        problems.append(f"{path.name}: 検査が止まりました：{err}")
                browser.close()
        except LabError as err:
            problems.append(str(err))
        finally:
            if problems:
                print(f"JupyterLab のログの末尾：\n{lab.log_tail()}", file=sys.stderr)
            lab.stop()
    for problem in problems:
        print("問題:", problem, file=sys.stderr)
    seconds = time.perf_counter() - start
    if problems:
        print(f"JupyterLab の学生版の Markdown：{len(problems)} 個の問題（{seconds:.0f} 秒）",
              file=sys.stderr)
        return 1
    print(f"JupyterLab の学生版の Markdown：{len(written)} 章 OK（{seconds:.0f} 秒）")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
