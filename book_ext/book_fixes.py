"""Small fixes of the built HTML: errors a reader's console shows, and the book's typography.

A local Sphinx extension (``_config.yml`` → ``sphinx.local_extensions``). The first two
were found by ``make test-browser`` (tests/e2e/browser_test.py), which fails on any console
error; the other two are the book's design (issue 36).

1. sphinx-thebe 0.3.1 adds its inline configuration script (``const THEBE_JS_URL = …``)
   in ``env-before-read-docs``, after the HTML builder has copied the registered scripts,
   so every page includes it twice (once with filename None, once with "", which Sphinx
   does not see as equal) and the second copy throws "Identifier 'THEBE_JS_URL'
   has already been declared". Drop repeated scripts from each page's context.
2. pydata-sphinx-theme writes ``data-mode=""`` when ``html_context`` has no
   ``default_mode`` and then logs "Got invalid theme mode" on a reader's first visit.
   Set ``default_mode`` to ``auto``, the mode the theme falls back to anyway.
3. Live figures say how to run them once per page, not in every caption: the
   post-transform of ``attnlab.live_book`` removes ``attnlab.widgets.LIVE_HINT`` from
   their captions (the page's first live figure carries the note).
4. A caption's number stands apart from its text: Sphinx writes ``図 2 5 個の…`` (the
   number, a space, the caption), which reads as one number. The number becomes
   ``図 2`` followed by ``：`` (``span.caption-sep``); ``_static/attnlab-typography.css``
   sets it upright and bold. A name in full-width brackets right after the number (an
   exercise's label, 5.) needs no separator: ``練習 6（ex03-split-heads）``.
5. An exercise's box names it as the student edition and the notebooks' headings do: the
   number and the label, ``練習 6（ex03-split-heads）`` (issue 47). A post-transform after
   sphinx-exercise's titles adds ``（label）`` to the title of a numbered exercise that has
   no title of its own.
6. The solutions show the code a student writes without the nbgrader markers: the lines
   ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of a code cell are dropped from its
   literal block when a page is read (``scripts.make_student.strip_solution_markers``).
7. The Colab launch button opens the chapter in plain Markdown (issue 47): Colab runs no
   MyST, so sphinx-book-theme's button (the chapter as committed, on ``main``) is pointed
   at the converted copy ``make publish`` puts on ``gh-pages``
   (``scripts.plain_notebooks.colab_url``: ``…/blob/gh-pages/colab/notebooks/NN_x.ipynb``).
"""

import re
from pathlib import Path

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

from attnlab.live_book import live_figure_captions_transform
from scripts.book import chapter_notebooks
from scripts.make_student import strip_solution_markers
from scripts.plain_notebooks import colab_url

# Sphinx's HTML writer: <span class="caption-number">図 2 </span><span class="caption-text">
CAPTION_NUMBER = re.compile(
    r'<span class="caption-number">([^<]*?)\s*</span>(?!<span class="caption-sep">|（)')
CAPTION_SEPARATOR = "："
#: A caption number followed by a name in full-width brackets (an exercise's label).
NUMBER_BEFORE_NAME = re.compile(r'<span class="caption-number">([^<]*?)\s+</span>(?=（)')


def separate_caption_numbers(body: str) -> str:
    """``図 2 `` in a caption number becomes ``図 2`` and a separator ``：``; before a
    name in full-width brackets (``練習 6（ex03-split-heads）``) just ``練習 6``."""
    body = NUMBER_BEFORE_NAME.sub(r'<span class="caption-number">\1</span>', body)
    return CAPTION_NUMBER.sub(
        rf'<span class="caption-number">\1</span><span class="caption-sep">{CAPTION_SEPARATOR}'
        "</span>", body)


class ExerciseLabelInTitle(SphinxPostTransform):
    """``練習 6`` → ``練習 6（ex03-split-heads）``: the label after the number of a numbered
    exercise without a title of its own (after sphinx-exercise resolves titles, priority
    20)."""

    default_priority = 25

    def run(self, **kwargs) -> None:
        from sphinx_exercise.nodes import exercise_enumerable_node

        for node in self.document.findall(exercise_enumerable_node):
            label = node.get("label", "")
            title = node.children[0] if node.children else None
            if (not isinstance(title, nodes.title) or title.astext().strip()
                    or not label or "-exercise-" in label):
                continue  # a titled exercise, or sphinx-exercise's generated label
            title += nodes.Text(f"（{label}）")


def strip_markers_from_code(doctree: nodes.Node) -> int:
    """Drop the ``### BEGIN/END SOLUTION`` lines from every literal block of ``doctree``;
    return how many blocks changed. The text and the raw source stay equal, so Sphinx
    still highlights the block."""
    changed = 0
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        stripped = strip_solution_markers(text)
        if stripped != text:
            block.rawsource = stripped
            block.children = []
            block += nodes.Text(stripped)
            changed += 1
    return changed


def _strip_markers(app, doctree) -> None:
    strip_markers_from_code(doctree)


def _drop_repeated_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        # the registry's copy says filename None, the builder's copy "": the same script
        key = (getattr(script, "filename", script) or "", getattr(script, "priority", 500),
               tuple(sorted((getattr(script, "attributes", None) or {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    if "script_files" in context:
        context["script_files"][:] = unique


def _caption_numbers(app, pagename, templatename, context, doctree):
    if "body" in context:
        context["body"] = separate_caption_numbers(context["body"])


def colab_to_plain_copy(context: dict, url: str) -> bool:
    """Point the Colab button of the page's launch group at ``url``; True when there was one."""
    found = False
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if button.get("text") == "Colab":
                button["url"] = url
                found = True
    return found


def _colab_button(app, pagename, templatename, context, doctree):
    root = Path(app.srcdir)
    if pagename in {path.relative_to(root).with_suffix("").as_posix()
                    for path in chapter_notebooks(root)}:
        colab_to_plain_copy(context, colab_url(pagename, root))


def _default_mode(app, config):
    config.html_context.setdefault("default_mode", "auto")


def setup(app):
    app.connect("config-inited", _default_mode)
    app.connect("html-page-context", _drop_repeated_scripts, priority=900)
    app.connect("html-page-context", _caption_numbers)
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _colab_button, priority=600)
    app.add_post_transform(live_figure_captions_transform())
    app.add_post_transform(ExerciseLabelInTitle)
    app.connect("doctree-read", _strip_markers)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
