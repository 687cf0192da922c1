"""The tests: ``pytest tests`` runs the unit tests (``test_*.py``); ``tests/e2e`` holds the
end-to-end harnesses that ``make`` runs on their own (``python -m tests.e2e.NAME``)."""
