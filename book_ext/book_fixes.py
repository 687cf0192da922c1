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
   sets it upright and bold.
"""

import re

from attnlab.live_book import live_figure_captions_transform

# Sphinx's HTML writer: <span class="caption-number">図 2 </span><span class="caption-text">
CAPTION_NUMBER = re.compile(
    r'<span class="caption-number">([^<]*?)\s*</span>(?!<span class="caption-sep">)')
CAPTION_SEPARATOR = "："


def separate_caption_numbers(body: str) -> str:
    """``図 2 `` in a caption number becomes ``図 2`` and a separator ``：``."""
    return CAPTION_NUMBER.sub(
        rf'<span class="caption-number">\1</span><span class="caption-sep">{CAPTION_SEPARATOR}'
        "</span>", body)


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


def _default_mode(app, config):
    config.html_context.setdefault("default_mode", "auto")


def setup(app):
    app.connect("config-inited", _default_mode)
    app.connect("html-page-context", _drop_repeated_scripts, priority=900)
    app.connect("html-page-context", _caption_numbers)
    app.add_post_transform(live_figure_captions_transform())
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
