"""End-to-end harnesses, each run by a make target (``python -m tests.e2e.NAME``), never
collected by ``pytest tests`` (``python_files = test_*.py``); their browser-free parts are
unit-tested in ``tests/test_NAME.py``.

- ``check_site``: the built HTML (make build);
- ``portable``: nbval at lower CPU levels, and nbval's pytest plugin (make test-portable);
- ``browser_test``: every page in headless Chromium (make test-browser);
- ``lab_widget_test``: the live figures in JupyterLab (make test-lab).
"""
