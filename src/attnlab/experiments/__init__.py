"""Numeric experiments behind the chapters' figures and claims, one module per chapter,
named after the chapter's notebook (``notebooks/01_attention_review.ipynb`` →
:mod:`attnlab.experiments.attention_review`).

Each module imports only numpy and the numerics of ``attnlab`` (never ``plotting``,
``widgets`` or ``checks``), so an experiment runs and is tested without matplotlib;
the live figures of :mod:`attnlab.widgets` draw what these functions compute. Import
from the chapter's module, e.g.
``from attnlab.experiments.attention_review import sharpness_samples``.
"""
