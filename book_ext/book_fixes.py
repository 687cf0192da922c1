"""Small fixes of the built HTML: errors a reader's console shows, and the book's typography.

A local Sphinx extension (``_config.yml`` → ``sphinx.local_extensions``). The first two
were found by ``make test-browser`` (tests/e2e/browser_test.py), which fails on any console
error; the rest are the book's design (issues 36, 47 and 48).

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
5. An exercise's box is titled in Japanese and still shows the label the self-check and
   the student edition use (issue 47; designer's third read, N3): a post-transform after
   sphinx-exercise's titles moves the task's own bold head line (``**（実装・約 20 分）**``,
   the first words of its first paragraph) into the title of a numbered exercise that has
   no title of its own, and sets the label after it, small, in the code font
   (``span.attnlab-exercise-label``): 「練習 6（実装・約 20 分） ex03-split-heads」. A
   solution's title names the exercise the same way, as plain text (「練習 6 の解答
   ex03-split-heads」): sphinx-exercise's link to the exercise sat inside the fold's
   button (issue 48, m3).
6. The solutions show the code a student writes without the nbgrader markers: the lines
   ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of a code cell are dropped from its
   literal block when a page is read (``scripts.make_student.strip_solution_markers``).
7. A figure keeps its aspect ratio at every width (issue 48, B1): Sphinx writes a sized
   image as ``style="width: 691px; height: 212px;"``; the theme's ``max-width: 100%``
   narrows it on a phone while the fixed height stays, squashing it. The height becomes
   ``aspect-ratio: 691 / 212`` (:func:`figure_boxes`), which still reserves the box of
   a picture on its way (lazy images, the live figures' states).
8. A figure opens at full size when tapped (issue 48, M6): every notebook figure drawn in
   the book's style is wrapped in a link to its own PNG (twice the pixels shown), with
   the class of its page colour so that only the shown one is a tab stop; on a phone the
   link also shows its words 「図を原寸で開く」 under the figure, as the live figures'
   link does. The live figures' states are not (their pictures are controls' output).
9. Numbers stay with their counters (issue 48, M3): in the text of a page (not code, not
   math), the space typed between a digit and a Japanese character (「3 つ」「第 4 章」
   「図 1」「約 5%」) becomes a no-break space (:func:`keep_numbers`), and a section number
   that starts a heading (「2. 5 種類」) is set apart (``span.attnlab-section-number``).
10. The Colab launch button opens the chapter in plain Markdown (issue 47): Colab runs no
   MyST, so sphinx-book-theme's button (the chapter as committed, on ``main``) is pointed
   at the converted copy ``make publish`` puts on ``gh-pages``
   (``scripts.plain_notebooks.colab_url``: ``…/blob/gh-pages/colab/notebooks/NN_x.ipynb``).
"""

import html
import re
from pathlib import Path

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

from attnlab.live_book import live_figure_captions_transform
from scripts.book import chapter_notebooks
from scripts.exercises import HEAD
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


#: The class of an exercise's label in a title: small, in the code font
#: (attnlab-typography.css).
EXERCISE_LABEL_CLASS = "attnlab-exercise-label"


def _label_node(label: str) -> nodes.inline:
    return nodes.inline("", label, classes=[EXERCISE_LABEL_CLASS])


def _take_head_line(exercise: nodes.Element) -> str:
    """Remove the task's bold head line (``**（実装・約 20 分）**``) from the start of the
    exercise's first paragraph, with the space after it; return its text ("" if none)."""
    paragraph = next(iter(exercise.findall(nodes.paragraph)), None)
    if paragraph is None:
        return ""
    # MyST starts the paragraph with an empty text node before the bold head line
    while (paragraph.children and isinstance(paragraph.children[0], nodes.Text)
           and not paragraph.children[0].astext().strip()):
        paragraph.remove(paragraph.children[0])
    head = paragraph.children[0] if paragraph.children else None
    # the head line as scripts/exercises.py reads it in the Markdown: **（…）**
    if not isinstance(head, nodes.strong) or not HEAD.fullmatch(f"**{head.astext()}**"):
        return ""
    paragraph.remove(head)
    rest = paragraph.children[0] if paragraph.children else None
    if isinstance(rest, nodes.Text) and rest.astext()[:1].isspace():
        paragraph.replace(rest, nodes.Text(rest.astext().lstrip()))
    return head.astext()


class ExerciseLabelInTitle(SphinxPostTransform):
    """``練習 6`` → 「練習 6（実装・約 20 分）」 and the label, small: the title of
    a numbered exercise without a title of its own takes the task's head line
    (:func:`_take_head_line`) and its label (after sphinx-exercise resolves titles,
    priority 20)."""

    default_priority = 25

    def run(self, **kwargs) -> None:
        from sphinx_exercise.nodes import exercise_enumerable_node

        for node in self.document.findall(exercise_enumerable_node):
            label = node.get("label", "")
            title = node.children[0] if node.children else None
            if (not isinstance(title, nodes.title) or title.astext().strip()
                    or not label or "-exercise-" in label):
                continue  # a titled exercise, or sphinx-exercise's generated label
            title += nodes.Text(_take_head_line(node))
            title += _label_node(label)


class SolutionTitleWithoutLink(SphinxPostTransform):
    """``解答 練習 6`` (a link inside the fold's button: a tap on it jumped to the exercise
    instead of opening the answer) → 「練習 6 の解答」 and the label, small, as
    the exercise's own box shows it (:class:`ExerciseLabelInTitle`), once sphinx-exercise
    has resolved the solutions' titles (priority 21)."""

    default_priority = 26

    def run(self, **kwargs) -> None:
        from sphinx_exercise.nodes import solution_node

        for node in self.document.findall(solution_node):
            title = node.children[0] if node.children else None
            links = list(title.findall(nodes.reference)) if isinstance(title, nodes.title) else []
            if len(links) != 1:
                continue
            name = links[0].astext().strip()
            label = node.get("target_label", "")
            del title[:]
            title += nodes.Text(f"{name} の解答")
            if label and "-exercise-" not in label and label not in name:
                title += _label_node(label)


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


#: ``<img … style="width: 691.5px; height: 212.5px;" …>`` as Sphinx writes a sized image.
IMG_TAG = re.compile(r"<img\b[^>]*>")
FIXED_SIZE = re.compile(r'style="width: ([0-9.]+)px; height: ([0-9.]+)px;"')
FIGURE_LINK_CLASS = "attnlab-figure-open"
#: The link's visible words under the figure, shown on a phone only (the CSS; issue 48,
#: minor 2): a touch screen has no zoom-in cursor to say that the figure opens.
FIGURE_CUE = '<span class="attnlab-figure-cue">図を原寸で開く</span>'


def _box(tag: str) -> str:
    return FIXED_SIZE.sub(lambda m: f'style="width: {m[1]}px; aspect-ratio: {m[1]} / {m[2]};"',
                          tag)


def figure_boxes(body: str) -> str:
    """Every sized image keeps its aspect ratio instead of a fixed height, and every
    notebook figure (``img.attnlab-figure`` that is not a live figure's state, not already
    in a link) becomes a link to its own file (see the module docstring, 7 and 8)."""
    out, last = [], 0
    for match in IMG_TAG.finditer(body):
        tag = _box(match[0])
        classes = re.search(r'class="([^"]*)"', tag)
        names = classes[1].split() if classes else []
        inside_link = body.rfind("<a ", 0, match.start()) > body.rfind("</a>", 0, match.start())
        if "attnlab-figure" in names and "attnlab-live-state" not in names and not inside_link:
            src = re.search(r'src="([^"]*)"', tag)
            theme = " ".join(n for n in names if n in ("attnlab-light", "attnlab-dark"))
            if src:
                alt = re.search(r'alt="([^"]*)"', tag)
                title = "図を原寸で開く" + (f"：{html.unescape(alt[1])[:60]}" if alt else "")
                link = f"{FIGURE_LINK_CLASS} {theme}".strip()
                tag = (f'<a class="{link}" href="{src[1]}" '
                       f'title="{html.escape(title)}">{tag}{FIGURE_CUE}</a>')
        out += [body[last:match.start()], tag]
        last = match.end()
    out.append(body[last:])
    return "".join(out)


#: Japanese letters and punctuation (kana, kanji, 々, full-width forms).
_JA = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006\u3007\uff01-\uff5e"
#: A digit, a space, a Japanese character: 「3 つ」「4 章」; a word that counts, a space, a
#: digit: 「第 4」「約 5%」「図 1」; a digit, a space and a Latin unit: 「64 GiB」「12 ms」;
#: a number and its tolerance: 「1 ± 0.15」.
NUMBER_SPACE = re.compile(
    f"(?<=[0-9%％])[ ](?=[{_JA}])"
    f"|(?<=[第約全各図表式練習節章])[ ](?=[0-9])"
    r"|(?<=[0-9])[ ](?=(?:ms|MiB|GiB|KiB|MB|GB|KB|px)\b)"
    r"|(?<=[0-9])[ ](?=±)|(?<=±)[ ](?=[0-9])")
NBSP = "\u00a0"
SECTION_NUMBER = re.compile(r"^(\d+(?:\.\d+)*\.)\s+")
#: Elements whose text is never touched.
_LITERAL = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.raw,
            nodes.comment, nodes.doctest_block)


def keep_numbers(text: str) -> str:
    """``text`` with the spaces of :data:`NUMBER_SPACE` made no-break spaces."""
    return NUMBER_SPACE.sub(NBSP, text)


def _in_literal(node) -> bool:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, _LITERAL):
            return True
        parent = parent.parent
    return False


class KeepNumbers(SphinxPostTransform):
    """Issue 48, M3: see :func:`keep_numbers`; section numbers of headings set apart."""

    default_priority = 900
    formats = ("html",)

    def run(self, **kwargs) -> None:
        for title in list(self.document.findall(nodes.title)):
            first = title.children[0] if title.children else None
            if isinstance(first, nodes.Text) and (m := SECTION_NUMBER.match(str(first))):
                rest = str(first)[m.end():]
                number = nodes.inline(m[1], m[1], classes=["attnlab-section-number"])
                title.replace(first, [number, nodes.Text(rest)])
        for text in list(self.document.findall(nodes.Text)):
            if text.parent is None or _in_literal(text):
                continue
            fixed = keep_numbers(str(text))
            if fixed != str(text):
                text.parent.replace(text, nodes.Text(fixed))


class LiveNoteAfterCaption(SphinxPostTransform):
    """Issue 48, m2: the note on Binder and Colab under a page's first live figure stood
    between the figure and its caption; it goes after the figure (caption included)."""

    default_priority = 900
    formats = ("html",)

    def run(self, **kwargs) -> None:
        for note in list(self.document.findall(nodes.paragraph)):
            if "attnlab-live-note" not in note.get("classes", []):
                continue
            figure = note.parent
            while figure is not None and not isinstance(figure, nodes.figure):
                figure = figure.parent
            if figure is None or figure.parent is None:
                continue
            note.parent.remove(note)
            figure.parent.insert(figure.parent.index(figure) + 1, note)


def _figure_boxes(app, pagename, templatename, context, doctree):
    if "body" in context:
        context["body"] = figure_boxes(context["body"])


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
    app.connect("html-page-context", _figure_boxes)
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _colab_button, priority=600)
    app.add_post_transform(live_figure_captions_transform())
    app.add_post_transform(ExerciseLabelInTitle)
    app.add_post_transform(SolutionTitleWithoutLink)
    app.connect("doctree-read", _strip_markers)
    app.add_post_transform(KeepNumbers)
    app.add_post_transform(LiveNoteAfterCaption)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
