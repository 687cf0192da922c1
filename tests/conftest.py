"""Test settings shared by every test module."""

import pytest
from hypothesis import settings

# No per-example deadline: CI machines are shared and a slow moment is not a bug.
# Derandomized: the same examples on every run, so a failure in CI reproduces locally.
settings.register_profile("attnlab", deadline=None, derandomize=True)
settings.load_profile("attnlab")


@pytest.fixture
def small(monkeypatch):
    """A registered live figure of 6 states that draws in milliseconds, in WIDGETS for the
    test (the book's figures take about a second a state; tests/test_widgets.py and the
    strict build draw every one of their states). A process pool forked from the test
    process sees it too."""
    from attnlab.plotting import new_figure
    from attnlab.widgets import WIDGETS, interactive_figure, register_widget
    from attnlab.widgets.core import slider, toggle

    def plot():
        fig, ax = new_figure((2.0, 1.5))
        (line,) = ax.plot([0, 1], [0, 0])
        ax.set_ylim(-1, 4)

        def update(slope, width):
            line.set_data([0, 1], [0, slope])
            line.set_linewidth(width)

        return fig, update

    @register_widget("small_test_figure")
    def small_test_figure():
        return interactive_figure(
            plot, {"slope": slider([1, 2, 3], 2, "傾き"), "width": toggle([1, 3], 1, "太さ")},
            title="小さな図")

    monkeypatch.setitem(WIDGETS, "small_test_figure", small_test_figure)
    return small_test_figure
