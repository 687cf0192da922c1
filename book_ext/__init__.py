"""The book's own Sphinx extensions, loaded by ``_config.yml`` (``sphinx.local_extensions``).

- :mod:`book_ext.instructor_page`: the generated tables of the 講師向け page;
- :mod:`book_ext.book_fixes`: two fixes for errors a reader's browser console showed.

The third piece of the build, the myst-nb plugin that draws every state of a live figure,
is ``attnlab.live_book``: myst-nb finds mime renderers only through an entry point of an
installed distribution (``pyproject.toml``), and ``attnlab`` is the one this repository
installs.
"""
