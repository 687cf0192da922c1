"""Start the slowest test files first, so that no worker is left alone with one at the end.

Not taught: test machinery (a pytest plugin: ``-p tests.slow_first``, with pytest-xdist's
``--dist loadfile --no-loadscope-reorder``, as ``make unit`` and ``make nbval`` run).

pytest-xdist hands the files out to its workers one at a time in the order of the
collection (by default it first sorts them by their number of tests, which says little
about their time). A file of a few minutes handed out last keeps one worker busy while
the other has nothing left. Longest first (the files of :data:`SLOW_FIRST`, measured with
``--durations`` on a 2-core machine), then the others in their usual order.
"""

#: The slowest files, slowest first: notebooks (``make nbval``: Run All on this machine)
#: and test modules (``make unit``: setup and calls, summed).
SLOW_FIRST = (
    "04_what_heads_capture.ipynb",  # ~29 s, trains on two cores
    "10_length_generalization.ipynb",  # ~29 s, trains on two cores
    "02_why_heads.ipynb",  # ~27 s, trains on two cores
    "01_attention_review.ipynb",
    "12_summary.ipynb",
    "test_widgets.py",  # every state of every live figure: ~170 s
    "test_grade.py",  # ~20 kernels: ~70 s
    "test_a11y.py",
    "test_portable.py",
    "test_nbval_student.py",
    "test_live_book.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: place for place, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable
