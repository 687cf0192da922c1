"""Move every live figure in JupyterLab with a kernel, in headless Chromium.

Usage: python -m tests.e2e.lab_widget_test [NOTEBOOK ...]
       (default: every notebooks/*.ipynb with a cell tagged ``widget``)

The static book shows only a snapshot of each live figure; this test proves that the
figure moves where a kernel runs. It starts JupyterLab from this interpreter's
environment (``<venv>/bin/jupyter lab``) on 127.0.0.1, a free port and a random token,
without a browser, with temporary Jupyter, JupyterLab and IPython config, data, runtime,
settings and workspace folders (the user's settings do not interfere), serving a
temporary copy of ``notebooks/`` with the stored outputs cleared (the committed notebooks
are never touched). Then, per notebook, Playwright drives Debian's Chromium
(``/usr/bin/chromium`` or ``$CHROMIUM``, headless, IPAexGothic from matplotlib-fontja for
the screenshots):

- open the notebook, wait for its kernel, run every cell (``notebook:run-all-cells``);
- in each cell tagged ``widget``, wait for the widget view with its ``.widget-image``
  and record the image (a hash of the PNG bytes behind its ``blob:`` src);
- find the controls in the DOM (sliders ``.widget-slider``, ``.widget-toggle-buttons``,
  single ``.widget-toggle-button``, ``.widget-dropdown``, ``.widget-checkbox``,
  ``.widget-radio-box``; any other input in the widget fails the test) and move each one
  once (a slider by ArrowRight on its handle, ArrowLeft at its end; a group by clicking an
  option that is not selected; a dropdown by choosing another option);
- after each move, the image must change within ``UPDATE_TIMEOUT`` seconds, and the
  widget's message lines (``.widget-html``) and output area must stay free of error text;
- no cell output is an error or stderr, and the kernel sends no error or stderr message
  during the whole run (widget callbacks included, whose output would not land in a cell);
- in ``screenshots/lab/``: the widget cell before and after every move, the widget's DOM
  (``.html``, to see what the controls look like) and the whole JupyterLab window at the end.

JupyterLab and its kernels are shut down at the end, also on failure. Requests that
leave 127.0.0.1 are answered with an error and listed.
"""

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
from playwright.sync_api import sync_playwright

from scripts.book import NOTEBOOKS, ROOT, all_notebooks
from tests.e2e.browser_test import WIDGET_TAG, japanese_context, missing_chromium

SCREENSHOTS = ROOT / "screenshots" / "lab"
SERVER_TIMEOUT = 90  # seconds for JupyterLab to answer
RUN_TIMEOUT = 300  # seconds for the kernel to run a whole notebook
UPDATE_TIMEOUT = 20  # seconds for one move of a control to reach the image
ERROR_TEXT = re.compile(r"Traceback|\b\w*(Error|Exception)\b|描けません")

# JupyterLab settings for the test: every cell stays in the DOM (no windowing), no news.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": '{"windowingMode": "none"}',
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        '{"fetchNews": "false", "checkForUpdates": false}',
}

# Resolves once the notebook is open and its kernel is idle (or throws after ``ms``);
# from then on records the kernel's error and stderr messages.
OPEN_JS = """async ([ms, path]) => {
  const deadline = Date.now() + ms;
  const within = (promise, what) => Promise.race([promise, new Promise((_, fail) =>
      setTimeout(() => fail(new Error(what)), Math.max(0, deadline - Date.now())))]);
  const app = window.jupyterapp;
  await within(app.restored, "JupyterLab did not start");
  // the panel of this notebook (a restored workspace may show another one first)
  let panel = app.shell.currentWidget;
  while (!(panel && panel.sessionContext && panel.content && panel.content.model &&
           panel.context && panel.context.path === path)) {
    if (Date.now() > deadline) throw new Error(`no notebook panel for ${path}`);
    await new Promise(done => setTimeout(done, 100));
    panel = app.shell.currentWidget;
  }
  await within(panel.context.ready, "notebook not loaded");
  await within(panel.sessionContext.ready, "no kernel session");
  window.__labErrors = [];
  panel.sessionContext.iopubMessage.connect((_, msg) => {
    const type = msg.header.msg_type;
    if (type === "error") {
      window.__labErrors.push(`${msg.content.ename}: ${msg.content.evalue}`);
    } else if (type === "stream" && msg.content.name === "stderr") {
      window.__labErrors.push(msg.content.text);
    }
  });
  while (!panel.sessionContext.session || !panel.sessionContext.session.kernel ||
         panel.sessionContext.session.kernel.status !== "idle") {
    if (Date.now() > deadline) throw new Error("kernel not idle");
    await new Promise(done => setTimeout(done, 100));
  }
  return {kernel: panel.sessionContext.kernelDisplayName,
          cells: panel.content.model.cells.length};
}"""

# Runs every cell and waits until the kernel is idle again (or throws after ``ms``).
RUN_ALL_JS = """async ms => {
  const deadline = Date.now() + ms;
  const app = window.jupyterapp;
  const ok = await Promise.race([app.commands.execute("notebook:run-all-cells"),
      new Promise((_, fail) => setTimeout(() => fail(new Error("run all: timeout")), ms))]);
  const panel = app.shell.currentWidget;
  while (panel.sessionContext.session.kernel.status !== "idle") {
    if (Date.now() > deadline) throw new Error("kernel busy after run all");
    await new Promise(done => setTimeout(done, 100));
  }
  return ok;
}"""

# Error and stderr outputs of every code cell of the open notebook, and the kernel's error
# and stderr messages so far.
ERRORS_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const outputs = [];
  const cells = panel.content.model.cells;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== "code") continue;
    for (const out of cell.outputs.toJSON()) {
      if (out.output_type === "error") outputs.push(`セル ${i}：${out.ename}: ${out.evalue}`);
      if (out.output_type === "stream" && out.name === "stderr") {
        outputs.push(`セル ${i} の stderr：${String(out.text).slice(0, 200)}`);
      }
    }
  }
  return {outputs, kernel: window.__labErrors};
}"""

# What ipykernel logs when the widget manager of a freshly opened notebook asks for the
# ``jupyter.widget.control`` comm before any cell has imported ipywidgets: harmless, the
# manager falls back (ipywidgets issue #3525). The refused comm's later messages give
# "No such comm: <its id>". Their order on iopub is not fixed, nor is the moment relative to
# the start of the run, so they are matched by content (see ``kernel_problems``).
CONTROL_REFUSED = re.compile(r"^No such comm target registered: jupyter\.widget\.control$")
NO_SUCH_COMM = re.compile(r"^No such comm: ([0-9a-f-]+)$")


def kernel_problems(messages: list[str]) -> tuple[list[str], list[str]]:
    """Split the kernel's error/stderr messages into problems and known harmless ones.

    Known: the refused ``jupyter.widget.control`` comm, and "No such comm" for one single id
    (the refused comm's), only if the refusal is among the messages. Anything else fails.
    """
    lines = [line.strip() for text in messages for line in text.splitlines() if line.strip()]
    refused = any(CONTROL_REFUSED.match(line) for line in lines)
    ids = {m[1] for m in map(NO_SUCH_COMM.match, lines) if m}

    def harmless(line: str) -> bool:
        return refused and bool(CONTROL_REFUSED.match(line)
                                or (NO_SUCH_COMM.match(line) and len(ids) == 1))

    known, problems = [], []
    for text in messages:
        own = [line.strip() for line in text.splitlines() if line.strip()]
        if own and all(map(harmless, own)):
            known += own
        elif own:
            problems.append(f"カーネルのエラー出力：{text.strip()[:300]}")
    return problems, known


# The PNG behind an ipywidgets Image (its src is a fresh blob: URL on every update).
IMAGE_JS = """async img => {
  if (!img.complete) await new Promise(done => img.addEventListener("load", done, {once: true}));
  const bytes = await (await fetch(img.src)).arrayBuffer();
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  const hash = [...new Uint8Array(digest)].map(b => b.toString(16).padStart(2, "0")).join("");
  return {src: img.src, hash, size: bytes.byteLength, width: img.naturalWidth};
}"""

# Everything a reader can operate inside the widget, to check that each belongs to a
# control this test knows how to move.
INPUTS_JS = """root => [...root.querySelectorAll(
    "input, select, textarea, button, [role=slider], [contenteditable=true]")]
  .filter(el => !el.closest(".widget-slider, .widget-toggle-buttons, .widget-toggle-button, "
                            + ".widget-dropdown, .widget-checkbox, .widget-radio-box"))
  .map(el => el.outerHTML.slice(0, 120))"""


class LabError(Exception):
    """A failure of the test, with a Japanese message."""


def widget_notebooks(paths: list[Path]) -> dict[Path, list[int]]:
    """The notebooks to test, each with the indices of its cells tagged ``widget``."""
    found = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        cells = [i for i, cell in enumerate(nb.cells)
                 if cell.cell_type == "code" and WIDGET_TAG in cell.metadata.get("tags", [])]
        if cells:
            found[path] = cells
    return found


def copy_notebooks(target: Path) -> None:
    """A copy of notebooks/ with every stored output cleared (fresh outputs only)."""
    shutil.copytree(NOTEBOOKS, target, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for path in target.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        nbformat.write(nb, path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lab:
    """JupyterLab on 127.0.0.1 with throwaway settings, serving ``root``."""

    def __init__(self, root: Path, home: Path):
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        for name in ("config", "data", "runtime", "ipython", "workspaces"):
            (home / name).mkdir()
        settings = home / "settings"
        for name, text in LAB_SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(text, encoding="utf-8")
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_DATA_DIR": str(home / "data"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
            "IPYTHONDIR": str(home / "ipython"),
        }
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_CONFIG_PATH", None)
        jupyter = Path(sys.prefix) / "bin" / "jupyter"
        self.log_path = home / "lab.log"
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             "--port-retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
             "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
             *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI runs as root
            cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own process group: the kernels go down with it

    def wait(self) -> None:
        deadline = time.monotonic() + SERVER_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LabError(f"JupyterLab が終了しました（終了コード {self.process.returncode}）")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}",
                                            timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise LabError(f"JupyterLab が {SERVER_TIMEOUT} 秒たっても応答しません")

    def log_tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM (JupyterLab shuts its kernels down), then SIGKILL to the group."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # leftover kernels of this group
        except ProcessLookupError:
            pass
        self.process.wait()
        self.log.close()


def widget_text(root) -> str:
    """What the widget's message lines say (empty when every update worked)."""
    return "\n".join(t.strip() for t in root.locator(".widget-html").all_inner_texts()).strip()


def wait_for_change(tab, image, before: str, root, output) -> tuple[dict, str]:
    """Wait until the image's PNG differs from ``before`` or an error text shows."""
    deadline = time.monotonic() + UPDATE_TIMEOUT
    while True:
        now = image.evaluate(IMAGE_JS)
        message = widget_text(root)
        text = output.inner_text()
        if message or ERROR_TEXT.search(text):
            return now, message or text
        if now["hash"] != before or time.monotonic() > deadline:
            return now, ""
        tab.wait_for_timeout(100)


def controls_of(root) -> list[tuple[str, str, object]]:
    """(kind, label, locator) of every control of a widget, in DOM order."""
    found = []
    selector = (".widget-slider, .widget-toggle-buttons, .widget-toggle-button, "
                ".widget-dropdown, .widget-checkbox, .widget-radio-box")
    for element in root.locator(selector).all():
        classes = element.get_attribute("class") or ""
        kind = next(k for k in ("widget-slider", "widget-toggle-buttons", "widget-dropdown",
                                "widget-checkbox", "widget-radio-box", "widget-toggle-button")
                    if k in classes.split())
        if kind == "widget-toggle-button" and element.locator(
                "xpath=ancestor::*[contains(@class, 'widget-toggle-buttons')]").count():
            continue  # an option of a ToggleButtons group, moved with the group
        label = element.locator(".widget-label").first
        name = label.inner_text().strip() if label.count() else ""
        found.append((kind, name or element.inner_text().strip()[:20], element))
    return found


def move(tab, kind: str, control) -> str:
    """Move one control to another value; return what was done, in Japanese."""
    if kind == "widget-slider":
        handle = control.locator(".noUi-handle").first
        now = float(handle.get_attribute("aria-valuenow"))
        top = float(handle.get_attribute("aria-valuemax"))
        key = "ArrowLeft" if now >= top else "ArrowRight"
        handle.focus()
        tab.keyboard.press(key)
        readout = control.locator(".widget-readout")
        return f"{key} で {readout.inner_text().strip() if readout.count() else '?'} に"
    if kind == "widget-toggle-buttons":
        option = control.locator("button.widget-toggle-button:not(.mod-active)").first
        text = option.inner_text().strip()
        option.click()
        return f"「{text}」を押す"
    if kind == "widget-toggle-button":
        control.click()
        return "押す"
    if kind == "widget-dropdown":
        select = control.locator("select")
        values = select.locator("option").evaluate_all("os => os.map(o => o.value)")
        current = select.input_value()
        other = next(v for v in values if v != current)
        select.select_option(other)
        return f"「{other}」を選ぶ"
    if kind == "widget-checkbox":
        control.locator("input[type=checkbox]").click()
        return "チェックを切り替える"
    if kind == "widget-radio-box":
        control.locator("input[type=radio]:not(:checked)").first.click()
        return "別の選択肢を選ぶ"
    raise LabError(f"未対応のコントロール {kind}")


def check_widget(tab, notebook: str, index: int, cell) -> tuple[list[str], int]:
    """Move every control of the widget in cell ``index``; return problems and moves."""
    stem = f"{notebook}__cell{index:02d}"
    output = cell.locator(".jp-Cell-outputArea")
    image = output.locator(".widget-image").first
    try:
        image.wait_for(state="visible", timeout=UPDATE_TIMEOUT * 1000)
    except Exception:  # noqa: BLE001 - a timeout is reported as a problem
        cell.screenshot(path=str(SCREENSHOTS / f"{stem}__0_no_widget.png"))
        return [f"セル {index}：ウィジェットの図（.widget-image）が表示されません"
                f"（出力：{output.inner_text()[:200]!r}）"], 0
    # the outermost widget element holding the image (document order: ancestors first)
    root = output.locator(".jupyter-widgets").filter(has=tab.locator(".widget-image")).first
    (SCREENSHOTS / f"{stem}.html").write_text(root.evaluate("el => el.outerHTML"),
                                              encoding="utf-8")
    problems = []
    shown = image.evaluate(IMAGE_JS)
    if shown["width"] == 0:
        problems.append(f"セル {index}：ウィジェットの画像が読み込めません")
    cell.scroll_into_view_if_needed()
    cell.screenshot(path=str(SCREENSHOTS / f"{stem}__0_before.png"))
    strays = root.evaluate(INPUTS_JS)
    problems += [f"セル {index}：このテストが動かせない入力があります：{html}" for html in strays]
    controls = controls_of(root)
    if not controls:
        problems.append(f"セル {index}：ウィジェットにコントロールが見つかりません")
    print(f"    セル {index}：コントロール {len(controls)} 個、画像 {shown['size']} バイト")
    for number, (kind, label, control) in enumerate(controls, start=1):
        action = move(tab, kind, control)
        start = time.perf_counter()
        now, error = wait_for_change(tab, image, shown["hash"], root, output)
        seconds = time.perf_counter() - start
        cell.screenshot(path=str(SCREENSHOTS / f"{stem}__{number}_{kind.split('-')[1]}.png"))
        if error:
            problems.append(f"セル {index}：「{label}」を動かすとエラーが出ました：{error[:300]}")
        elif now["hash"] == shown["hash"]:
            problems.append(f"セル {index}：「{label}」を動かしても（{action}）"
                            f"図が {UPDATE_TIMEOUT} 秒たっても変わりません")
        else:
            print(f"      OK「{label}」{action}：図が変わった（{seconds:.2f} 秒、"
                  f"{now['size']} バイト）")
        shown = now
    return problems, len(controls)


def check_notebook(context, lab: Lab, path: Path, cells: list[int]) -> list[str]:
    tab = context.new_page()
    page_errors: list[str] = []
    tab.on("pageerror", lambda e: page_errors.append(f"JavaScript の例外：{e}"))
    tab.on("console", lambda m: page_errors.append(f"コンソールのエラー：{m.text[:300]}")
           if m.type == "error" else None)
    start = time.perf_counter()
    # ?reset: a fresh workspace, so the notebooks opened before this one stay closed
    tab.goto(f"{lab.base}/lab/tree/{path.name}?reset&token={lab.token}", wait_until="load")
    tab.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    opened = tab.evaluate(OPEN_JS, [SERVER_TIMEOUT * 1000, path.name])
    print(f"  {path.name}：カーネル {opened['kernel']}、セル {opened['cells']} 個"
          f"（{time.perf_counter() - start:.1f} 秒）")
    problems: list[str] = []
    nb = nbformat.read(path, as_version=4)
    if opened["cells"] != len(nb.cells):
        problems.append(f"JupyterLab のセルが {opened['cells']} 個です"
                        f"（ノートブック：{len(nb.cells)}）")
    start = time.perf_counter()
    if not tab.evaluate(RUN_ALL_JS, RUN_TIMEOUT * 1000):
        problems.append("全セルの実行が失敗しました")
    print(f"    全セルの実行：{time.perf_counter() - start:.1f} 秒")
    dom_cells = tab.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")
    if dom_cells.count() != len(nb.cells):
        problems.append(f"画面のセルが {dom_cells.count()} 個です（ノートブック：{len(nb.cells)}）")
    moves = 0
    for index in cells:
        found, count = check_widget(tab, path.stem, index, dom_cells.nth(index))
        problems += found
        moves += count
    errors = tab.evaluate(ERRORS_JS)
    problems += errors["outputs"]
    found, known = kernel_problems(errors["kernel"])
    problems += found
    for line in known:
        print(f"    ウィジェットの制御用 comm についてのカーネルの既知の出力（数えない）：{line}")
    problems += page_errors
    tab.screenshot(path=str(SCREENSHOTS / f"{path.stem}.png"))
    tab.close()
    print(f"  {'OK' if not problems else '失敗'} {path.name}：ウィジェット {len(cells)} 個、"
          f"操作 {moves} 回")
    return [f"{path.name}: {p}" for p in problems]


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    paths = [Path(p).resolve() for p in argv] or all_notebooks()
    notebooks = widget_notebooks(paths)
    if not notebooks:
        print(f"問題: タグ {WIDGET_TAG} のセルを持つノートブックがありません", file=sys.stderr)
        return 1
    if problem := missing_chromium():
        print(f"問題: {problem}", file=sys.stderr)
        return 1
    if not (Path(sys.prefix) / "bin" / "jupyter").exists():
        print(f"問題: {sys.prefix}/bin/jupyter がありません（make warm で .venv を作る）",
              file=sys.stderr)
        return 1
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    blocked: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="lab-widget-test-") as temp:
        temp = Path(temp)
        copy_notebooks(temp / "notebooks")
        (temp / "home").mkdir()
        lab = Lab(temp / "notebooks", temp / "home")
        try:
            lab.wait()
            print(f"JupyterLab：{lab.base}（{time.perf_counter() - start:.1f} 秒で起動）")
            with sync_playwright() as playwright:
                browser, context = japanese_context(playwright, temp, height=1000)

                def route(request_route):
                    url = request_route.request.url
                    if url.startswith(lab.base) or url.startswith(("blob:", "data:")):
                        request_route.continue_()
                    else:
                        blocked.add(url)
                        request_route.abort()

                context.route("**/*", route)
                for path, cells in notebooks.items():
                    copy = temp / "notebooks" / path.name
                    try:
                        problems += check_notebook(context, lab, copy, cells)
                    except Exception as err:  # noqa: BLE001 - reported, then the next notebook
                        problems.append(f"{path.name}: 検査が止まりました：{err}")
                browser.close()
        except LabError as err:
            problems.append(str(err))
        finally:
            if problems:
                print(f"JupyterLab のログの末尾：\n{lab.log_tail()}", file=sys.stderr)
            lab.stop()
    for url in sorted(blocked):
        print(f"  外部への要求（オフラインのため止めた）：{url}")
    seconds = time.perf_counter() - start
    for problem in problems:
        print("問題:", problem, file=sys.stderr)
    if problems:
        print(f"JupyterLab のライブ図の検査：{len(problems)} 個の問題（{seconds:.0f} 秒）",
              file=sys.stderr)
        return 1
    print(f"JupyterLab のライブ図の検査：{len(notebooks)} 冊のノートブック OK（{seconds:.0f} 秒、"
          f"スクリーンショットは {SCREENSHOTS.relative_to(ROOT)}/）")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
