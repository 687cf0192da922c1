"""Two small fixes of the built HTML, each for an error a reader's browser console shows.

A local Sphinx extension (``_config.yml`` → ``sphinx.local_extensions``); found by
``make test-browser`` (tests/e2e/browser_test.py), which fails on any console error.

1. sphinx-thebe 0.3.1 adds its inline configuration script (``const THEBE_JS_URL = …``)
   in ``env-before-read-docs``, after the HTML builder has copied the registered scripts,
   so every page includes it twice (once with filename None, once with "", which Sphinx
   does not see as equal) and the second copy throws "Identifier 'THEBE_JS_URL'
   has already been declared". Drop repeated scripts from each page's context.
2. pydata-sphinx-theme writes ``data-mode=""`` when ``html_context`` has no
   ``default_mode`` and then logs "Got invalid theme mode" on a reader's first visit.
   Set ``default_mode`` to ``auto``, the mode the theme falls back to anyway.
"""


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


def _default_mode(app, config):
    config.html_context.setdefault("default_mode", "auto")


def setup(app):
    app.connect("config-inited", _default_mode)
    app.connect("html-page-context", _drop_repeated_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
