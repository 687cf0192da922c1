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

import dataclasses
from typing import NamedTuple

import numpy as np

from attnlab._validate import choice
from attnlab.model import ModelConfig, check_config
from attnlab.positional import RoPE, rope_inv_freq, yarn_attention_factor, yarn_turns_inv_freq

#: The methods of the chapter and its live figure: label → ``scaling`` of ``RoPE``
#: (None: plain RoPE at the longer length, i.e. extrapolation).
EXTENSION_METHODS = {"外挿": None, "PI": "pi", "NTK": "ntk", "YaRN": "yarn"}
#: Context scales s = L′ / L (target length over trained length) the live figure offers.
EXTENSION_SCALES = (1, 2, 4, 8)
#: The head the figure draws: width, base and trained length.
EXTENSION_D_HEAD = 64
EXTENSION_BASE = 10000.0
EXTENSION_TRAIN_LEN = 512
#: Scales at which the chapter counts the pairs that reach angles training never saw.
COVERAGE_SCALES = (2, 4)


#: The ramps a YaRN ablation can use: the reference code's and transformers' ramp over the
#: pair index (:func:`attnlab.positional.yarn_inv_freq`), or the paper's γ(r), linear in
#: the number of turns r (:func:`attnlab.positional.yarn_turns_inv_freq`).
YARN_RAMPS = ("reference", "turns")


@dataclasses.dataclass(frozen=True)
class YarnAblation(RoPE):
    """YaRN with one of its parts changed, to see which part does the work.

    A :class:`attnlab.positional.RoPE` with ``scaling="yarn"`` whose ramp is
    ``ramp`` (:data:`YARN_RAMPS`) and whose temperature is applied only if
    ``temperature``; everything that turns q and k (the model's forward and backward
    passes, either training step) asks the RoPE object for :meth:`inv_freq` and
    :attr:`attention_factor`, so the ablation changes nothing else. Not one of the
    model's scalings: the experiments of chapters 09 and 10 make it with
    :func:`yarn_ablation`.

    Not taught: the RoPE that :func:`yarn_ablation`'s config runs.
    """

    ramp: str = "reference"
    temperature: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.scaling != "yarn":
            raise ValueError(f"YarnAblation は scaling='yarn' の RoPE です: "
                             f"scaling={self.scaling!r}")
        choice(self.ramp, "ramp", YARN_RAMPS)
        if not isinstance(self.temperature, bool):
            raise ValueError(f"temperature は True か False です: "
                             f"temperature={self.temperature!r}")

    @property
    def attention_factor(self) -> float:
        """YaRN's √(1/t), or 1 without the temperature."""
        return super().attention_factor if self.temperature else 1.0

    def inv_freq(self, d_head: int) -> np.ndarray:
        """Angle per position of each pair with this ramp: (Dh/2,)."""
        if self.ramp == "turns":
            return yarn_turns_inv_freq(d_head, self.base, self.scale, self.original_max_len,
                                       beta_fast=self.beta_fast, beta_slow=self.beta_slow)
        return super().inv_freq(d_head)


@dataclasses.dataclass(frozen=True)
class YarnAblationConfig(ModelConfig):
    """A :class:`attnlab.model.ModelConfig` whose RoPE is a :class:`YarnAblation`
    (the fields ``yarn_*``); made by :func:`yarn_ablation`.

    Not taught: what :func:`yarn_ablation` returns.
    """

    yarn_ramp: str = "reference"
    yarn_temperature: bool = True
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0

    @property
    def rope(self) -> YarnAblation:
        """The ablated YaRN this model runs."""
        rope = super().rope
        return YarnAblation(base=rope.base, scale=rope.scale, scaling="yarn",
                            original_max_len=rope.original_max_len,
                            beta_fast=self.yarn_beta_fast, beta_slow=self.yarn_beta_slow,
                            ramp=self.yarn_ramp, temperature=self.yarn_temperature)


def yarn_ablation(config: ModelConfig, *, ramp: str = "reference", temperature: bool = True,
                  beta_fast: float = 32.0, beta_slow: float = 1.0) -> YarnAblationConfig:
    """A YaRN model's settings with one part of YaRN changed.

    Parameters
    ----------
    config : ModelConfig
        A RoPE model stretched with YaRN (``positional="rope"``, ``rope_scaling="yarn"``).
    ramp : {"reference", "turns"}
        The reference code's ramp over the pair index, or the paper's γ(r) in turns.
    temperature : bool
        False: q and k are not multiplied by YaRN's factor.
    beta_fast, beta_slow : float
        YaRN's band (β, α) in turns over the trained length (32 and 1 in the paper).

    Returns
    -------
    YarnAblationConfig
        The same model with the ablated YaRN; ``check_config`` accepts it.

    Taught in chapter 09.
    """
    config = check_config(config)
    if config.positional != "rope" or config.rope_scaling != "yarn":
        raise ValueError("yarn_ablation には YaRN で伸ばした RoPE のモデルを渡してください: "
                         f"positional={config.positional!r}, "
                         f"rope_scaling={config.rope_scaling!r}")
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(ModelConfig)}
    ablated = YarnAblationConfig(**fields, yarn_ramp=ramp, yarn_temperature=temperature,
                                 yarn_beta_fast=beta_fast, yarn_beta_slow=beta_slow)
    _ = ablated.rope  # the ramp, the temperature and the band validate here
    return ablated


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
