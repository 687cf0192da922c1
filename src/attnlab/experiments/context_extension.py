"""What each way of stretching RoPE does to every frequency: angles and resolution.

A model trained on ``train_len`` positions has seen, for pair i, the angles of positions
``0 … train_len − 1``: a span of ``train_len·θ_i`` (counting the step after the last
position, so that interpolated positions up to ``train_len − 1/s`` count as inside). Run
at ``scale`` times the length, pair i spans ``scale·train_len·θ'_i`` with the method's
frequency θ'_i. A pair that turned a full
circle in training has seen every angle; a slower pair has not, and angles past its
trained maximum are new to the model. Neighbouring positions differ by θ'_i, against θ_i
in training: the resolution between neighbours.
"""

from typing import NamedTuple

import numpy as np

from attnlab._validate import choice
from attnlab.positional import rope_inv_freq, yarn_attention_factor

#: The methods of the chapter and its live figure: label → ``scaling`` of ``RoPE``
#: (None: plain RoPE at the longer length, i.e. extrapolation).
EXTENSION_METHODS = {"外挿": None, "PI": "pi", "NTK": "ntk", "YaRN": "yarn"}
#: Context scales s = L′ / L (target length over trained length) the live figure offers.
EXTENSION_SCALES = (1, 2, 4, 8)
#: The head the figure draws: width, base and trained length.
EXTENSION_D_HEAD = 64
EXTENSION_BASE = 10000.0
EXTENSION_TRAIN_LEN = 512


class AngleCoverage(NamedTuple):
    """Per pair i (each array (Dh/2,)), what a method does at ``scale`` times the length."""

    theta: np.ndarray  # θ_i, the trained angle per position
    theta_new: np.ndarray  # θ'_i, the method's angle per position
    trained_max: np.ndarray  # L·θ_i, the span of angles seen in training
    target_max: np.ndarray  # s·L·θ'_i, the span at the longer length
    full_turn: np.ndarray  # bool: training already turned pair i a full circle (≥ 2π)
    unseen: np.ndarray  # bool: the longer length reaches angles training never saw
    resolution: np.ndarray  # θ'_i / θ_i: 1 = neighbours as far apart as in training
    attention_factor: float  # YaRN's factor on q and k (1 for the other methods)


def angle_coverage(
    method: str,
    scale: float,
    *,
    d_head: int = EXTENSION_D_HEAD,
    base: float = EXTENSION_BASE,
    train_len: int = EXTENSION_TRAIN_LEN,
) -> AngleCoverage:
    """The angles of every RoPE pair at ``scale`` times the trained length, per method.

    Parameters
    ----------
    method : {"外挿", "PI", "NTK", "YaRN"}
        A key of :data:`EXTENSION_METHODS`.
    scale : float
        The context scale s ≥ 1.
    d_head, base, train_len
        The head and its trained length.

    Returns
    -------
    AngleCoverage

    Taught in chapter 09.
    """
    choice(method, "method", EXTENSION_METHODS)
    if not isinstance(scale, (int, float, np.integer, np.floating)) or not scale >= 1:
        raise ValueError(f"scale は 1 以上の数である必要があります: scale={scale!r}")
    scaling = EXTENSION_METHODS[method]
    theta = rope_inv_freq(d_head, base)  # (Dh/2,)
    if scaling is None:
        theta_new, factor = theta, 1.0
    else:
        theta_new = rope_inv_freq(d_head, base, float(scale), scaling, train_len)
        factor = yarn_attention_factor(float(scale)) if scaling == "yarn" else 1.0
    trained_max = train_len * theta  # (Dh/2,)
    target_max = scale * train_len * theta_new  # (Dh/2,)
    full_turn = trained_max >= 2 * np.pi
    unseen = ~full_turn & (target_max > trained_max * (1 + 1e-9))
    return AngleCoverage(theta, theta_new, trained_max, target_max, full_turn, unseen,
                         theta_new / theta, factor)
