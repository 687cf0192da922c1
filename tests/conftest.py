"""Test settings shared by every test module."""

from hypothesis import settings

# No per-example deadline: CI machines are shared and a slow moment is not a bug.
# Derandomized: the same examples on every run, so a failure in CI reproduces locally.
settings.register_profile("attnlab", deadline=None, derandomize=True)
settings.load_profile("attnlab")
