"""Ways to tell attention where a token is: sinusoidal, learned, RoPE, ALiBi.

Pure numpy. Absolute encodings (sinusoidal, learned) return vectors that are added to
the token embeddings; RoPE rotates queries and keys inside attention (in either layout of
its pairs, or only a part of each head: partial rotary); ALiBi adds a bias to the scores.
RoPE is stretched to a longer context by position interpolation, the NTK-aware base or
YaRN (``ROPE_SCALINGS``, :func:`rope_inv_freq`, what the model runs); the paper's own
ramp of YaRN (:func:`yarn_turns_inv_freq`), the dynamic NTK base and Llama 3.1's rule are
here to be compared with them (chapters 09 and 10 take YaRN apart with
:mod:`attnlab.experiments.context_extension`'s ``YarnAblation``).
Shapes use the vocabulary of the package docstring.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from attnlab._validate import (
    as_float_array,
    at_least_2d,
    choice,
    even_int,
    finite,
    generator,
    int_positions,
    positive_float,
    positive_int,
    rope_head,
)

ROPE_CONVENTIONS = ("interleaved", "half")
#: How RoPE is stretched to a longer context: position interpolation, NTK-aware base and
#: YaRN (its ramp over the pair index, as the reference code and transformers; it needs
#: the trained length, since its band is counted in turns over it).
ROPE_SCALINGS = ("pi", "ntk", "yarn")
SINUSOIDAL_LAYOUTS = ("interleaved", "concat")


# --- sinusoidal --------------------------------------------------------------------------

def sinusoidal_encoding(
    seq_len: int,
    d_model: int,
    base: float = 10000.0,
    layout: str = "interleaved",
    dtype=np.float64,
) -> np.ndarray:
    """The fixed sinusoidal encoding of Vaswani et al. (2017).

    ``PE[pos, 2i] = sin(pos / base^(2i/D))`` and ``PE[pos, 2i+1] = cos(pos / base^(2i/D))``
    for ``i = 0 … D/2 − 1``: sine at even, cosine at odd dimensions, exactly as in the
    paper. ``layout="concat"`` returns the same numbers as ``[sin … | cos …]`` (all sines
    first), a layout found in many implementations; the two differ only by a fixed
    permutation of the dimensions.

    Parameters
    ----------
    seq_len : int
        Number of positions, T; rows are positions ``0 … T−1``.
    d_model : int
        Width D; must be even.
    base : float
        The wavelength base (10000 in the paper).
    layout : {"interleaved", "concat"}
    dtype : numpy dtype
        Floating dtype of the result.

    Returns
    -------
    np.ndarray
        Shape (T, D).

    Taught in chapter 06.
    """
    seq_len = positive_int(seq_len, "seq_len")
    d_model = even_int(d_model, "d_model")
    base = positive_float(base, "base")
    choice(layout, "layout", SINUSOIDAL_LAYOUTS)
    pos = np.arange(seq_len, dtype=np.float64)[:, None]  # (T, 1)
    i = np.arange(d_model // 2, dtype=np.float64)  # (D/2,)
    angle = pos / base ** (2 * i / d_model)  # (T, D/2)
    pe = np.empty((seq_len, d_model))  # (T, D)
    if layout == "interleaved":
        pe[:, 0::2] = np.sin(angle)
        pe[:, 1::2] = np.cos(angle)
    else:
        pe[:, : d_model // 2] = np.sin(angle)
        pe[:, d_model // 2 :] = np.cos(angle)
    return pe.astype(dtype, copy=False)


# --- learned table -------------------------------------------------------------------------

def init_position_table(
    max_len: int, d_model: int, *, rng: np.random.Generator, std: float = 0.02, dtype=np.float64
) -> np.ndarray:
    """A learned absolute position table before training (BERT, GPT-2 style).

    Parameters
    ----------
    max_len : int
        Number of rows: positions ``0 … max_len−1`` exist, no others.
    d_model : int
        Width D of each row.
    rng : np.random.Generator
        Source of the initial values, normal with standard deviation ``std``.

    Returns
    -------
    np.ndarray
        Shape (max_len, D).

    Taught in chapter 07.
    """
    max_len = positive_int(max_len, "max_len")
    d_model = positive_int(d_model, "d_model")
    std = positive_float(std, "std")
    return (std * generator(rng).standard_normal((max_len, d_model))).astype(dtype, copy=False)


def lookup_positions(table: np.ndarray, positions) -> np.ndarray:
    """The rows of a learned position table for integer ``positions``.

    Parameters
    ----------
    table : np.ndarray
        Shape (max_len, D).
    positions : array of int
        Any shape (..., T); every value in ``0 … max_len−1``.

    Returns
    -------
    np.ndarray
        Shape (..., T, D). A position outside the table raises ``IndexError``: a table
        has no row for a position it was never given, and it does not make one up. That
        includes negative positions, which plain numpy indexing would silently count
        from the end of the table.

    Taught in chapter 07.
    """
    table = as_float_array(table, "table")
    if table.ndim != 2:
        raise ValueError(f"table は (max_len, D) の 2 次元配列である必要があります: "
                         f"table.shape={table.shape}")
    given = np.asarray(positions)
    max_len = table.shape[0]
    if given.dtype.kind == "c":
        raise ValueError(f"positions は整数の配列である必要があります: dtype={given.dtype}")
    if given.dtype.kind == "f" and not np.all(np.isfinite(given) & (given == np.round(given))):
        int_positions(given)  # raises: a position is a whole number
    if given.dtype.kind in "iuf":  # before the int64 cast, which a huge float would overflow
        outside = (given < 0) | (given >= max_len)
        if outside.any():
            bad = int(given[outside].flat[0])
            hint = ("。負の位置を NumPy の添字のように表の末尾から数えることはしません"
                    if bad < 0 else "")
            raise IndexError(
                f"positions の位置 {bad} は位置の表の範囲外です: 表には位置 0 〜 "
                f"{max_len - 1} の {max_len} 行しかありません (table.shape={table.shape}){hint}"
            )
    p = int_positions(given)
    return table[p]  # (..., T, D)


# --- RoPE ------------------------------------------------------------------------------------

def _rope_theta(d_head: int, base: float) -> np.ndarray:
    """θ_i = base^(−2i/Dh) for i = 0 … Dh/2 − 1: the angle per position of pair i."""
    return base ** (-2.0 * np.arange(d_head // 2) / d_head)  # (Dh/2,)


def rope_angles(positions, d_head: int, base: float = 10000.0, scale: float = 1.0) -> np.ndarray:
    """Rotation angles of RoPE: ``(pos / scale) · θ_i`` with ``θ_i = base^(−2i/Dh)``.

    Parameters
    ----------
    positions : array of float
        Shape (..., T); fractional positions are allowed (interpolation).
    d_head : int
        Head width Dh; must be even (dimensions are rotated in pairs).
    base : float
        10000 in RoFormer; larger in long-context models (500000 in Llama 3).
    scale : float
        Position interpolation: ``scale = s`` divides every position by ``s``.

    Returns
    -------
    np.ndarray
        Shape (..., T, Dh/2), float64; column ``i`` is the angle of pair ``i``.

    Taught in chapter 08.
    """
    d_head = even_int(d_head, "d_head")
    base = positive_float(base, "base")
    scale = positive_float(scale, "scale")
    pos = finite(np.asarray(as_float_array(positions, "positions"), dtype=np.float64),
                 "positions")
    return (pos / scale)[..., None] * _rope_theta(d_head, base)  # (..., T, Dh/2)


def apply_rope(
    x: np.ndarray,
    positions,
    base: float = 10000.0,
    convention: str = "interleaved",
    scale: float = 1.0,
) -> np.ndarray:
    """Rotate each pair of dimensions of ``x`` by the angle of its position (RoPE).

    ``convention="interleaved"`` pairs dimensions (2i, 2i+1), as in RoFormer, GPT-J and
    Meta's LLaMA code; ``convention="half"`` pairs i with i + Dh/2, the ``rotate_half``
    layout of GPT-NeoX and Hugging Face. Pair ``i`` turns by ``(pos/scale)·θ_i``.

    Parameters
    ----------
    x : np.ndarray
        Queries or keys, shape (..., T, Dh), Dh even.
    positions : array of float
        Shape (T,) or broadcastable to ``x.shape[:-1]``.
    base, scale : float
        See :func:`rope_angles`.
    convention : {"interleaved", "half"}

    Returns
    -------
    np.ndarray
        The dtype of ``x`` and the shape of ``x`` broadcast with the positions' leading
        axes: ``x.shape`` when ``positions`` is (T,); with positions (B, T) and x
        (T, Dh), (B, T, Dh). Every pair keeps its length.

    Taught in chapter 08.
    """
    x = at_least_2d(as_float_array(x, "x"), "x", "(..., T, Dh)")
    choice(convention, "convention", ROPE_CONVENTIONS)
    d_head = rope_head(x.shape[-1], f"x.shape={x.shape}")
    angles = rope_angles(positions, d_head, base, scale)  # (..., T, Dh/2)
    return _rotate_pairs(x, angles, positions, convention)


def _rotate_pairs(x: np.ndarray, angles: np.ndarray, positions, convention: str) -> np.ndarray:
    """Turn pair i of ``x`` (..., T, Dh) by ``angles[..., i]`` (..., T, Dh/2)."""
    try:
        np.broadcast_shapes(angles.shape[:-1], x.shape[:-1])
    except ValueError:
        raise ValueError(
            f"positions の形 {np.shape(positions)} が x の位置の軸 (..., T)={x.shape[:-1]} と"
            "合いません: 位置は系列の長さ T と同じ数だけ必要です"
        ) from None
    cos = np.cos(angles).astype(x.dtype, copy=False)  # (..., T, Dh/2)
    sin = np.sin(angles).astype(x.dtype, copy=False)
    return _turn_pairs(x, cos, sin, convention)


def _turn_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, convention: str) -> np.ndarray:
    """Turn pair i of ``x`` (..., T, Dh) by the angle whose cosine and sine are
    ``cos[..., i]`` and ``sin[..., i]`` (..., T, Dh/2)."""
    d_head = x.shape[-1]
    shape = np.broadcast_shapes(x.shape, cos.shape[:-1] + (d_head,))
    out = np.empty(shape, dtype=x.dtype)  # (..., T, Dh)
    if convention == "interleaved":
        pairs = slice(0, None, 2), slice(1, None, 2)  # dims (2i, 2i+1)
    else:
        pairs = slice(0, d_head // 2), slice(d_head // 2, None)  # dims (i, i + Dh/2)
    x1, x2 = x[..., pairs[0]], x[..., pairs[1]]  # (..., T, Dh/2) each
    r1, r2 = out[..., pairs[0]], out[..., pairs[1]]  # views: written in place
    np.multiply(x1, cos, out=r1)  # r1 = x1·cos − x2·sin
    r1 -= x2 * sin
    np.multiply(x1, sin, out=r2)  # r2 = x1·sin + x2·cos
    r2 += x2 * cos
    return out


@dataclass(frozen=True)
class RoPE:
    """Settings of rotary position embedding, passed as ``rope=`` to attention.

    Attributes
    ----------
    base : float
        Wavelength base (10000 in RoFormer).
    convention : {"interleaved", "half"}
        Which dimensions form a pair; see :func:`apply_rope`.
    scale : float
        The context scale s = L′ / L, the target length over the trained length (1 = plain
        RoPE, whatever ``scaling``).
    scaling : {"pi", "ntk", "yarn"}
        How the context is stretched by ``scale``: ``"pi"`` divides every position by s
        (position interpolation, the behaviour of ``scale`` alone); ``"ntk"`` keeps the
        positions and enlarges the base (:func:`ntk_scaled_base`); ``"yarn"`` uses
        :func:`yarn_inv_freq` and multiplies the rotated q and k by
        :func:`yarn_attention_factor`, so the scores get YaRN's temperature.
    original_max_len : int, optional
        The trained length L; required by ``"yarn"``.
    beta_fast, beta_slow : float
        YaRN's band limits in rotations over ``original_max_len`` (32 and 1 for LLaMA).

    Taught in chapter 08.
    """

    base: float = 10000.0
    convention: str = "interleaved"
    scale: float = 1.0
    scaling: str = "pi"
    original_max_len: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0

    def __post_init__(self):
        positive_float(self.base, "base")
        positive_float(self.scale, "scale")
        choice(self.convention, "convention", ROPE_CONVENTIONS)
        choice(self.scaling, "scaling", ROPE_SCALINGS)
        if self.original_max_len is not None:
            positive_int(self.original_max_len, "original_max_len")
        if self.scaling == "yarn":
            if self.original_max_len is None:
                raise ValueError(
                    f"scaling={self.scaling!r} には訓練時の長さ original_max_len が必要です: "
                    "original_max_len=None"
                )
            _check_yarn(self.base, self.beta_fast, self.beta_slow)

    @property
    def attention_factor(self) -> float:
        """What q and k are multiplied by after the rotation: 1, or YaRN's √(1/t)."""
        return yarn_attention_factor(self.scale) if self.scaling == "yarn" else 1.0

    def inv_freq(self, d_head: int) -> np.ndarray:
        """Angle per position of each pair with these settings: (Dh/2,)."""
        return rope_inv_freq(d_head, self.base, self.scale, self.scaling,
                             self.original_max_len, beta_fast=self.beta_fast,
                             beta_slow=self.beta_slow)

    def angles(self, positions, d_head: int) -> np.ndarray:
        """Rotation angles with these settings: positions (..., T) → (..., T, Dh/2)."""
        if self.scaling == "pi":
            return rope_angles(positions, d_head, self.base, self.scale)
        pos = finite(np.asarray(as_float_array(positions, "positions"), dtype=np.float64),
                     "positions")
        return pos[..., None] * self.inv_freq(d_head)  # (..., T, Dh/2)

    def tables(self, T: int, d_head: int, dtype) -> "RoPETables":
        """The cosine and sine of the angles of positions 0 … T−1, made once for a whole
        pass of a model (:class:`RoPETables`): each (T, Dh/2), in ``dtype``."""
        angles = self.angles(np.arange(T), d_head)  # (T, Dh/2), float64
        return RoPETables(self, np.cos(angles).astype(dtype), np.sin(angles).astype(dtype))

    def apply(self, x: np.ndarray, positions) -> np.ndarray:
        """:func:`apply_rope` with these settings; x (..., T, Dh) → same shape.

        With ``scaling="pi"`` exactly :func:`apply_rope`; otherwise the pairs turn by
        :meth:`angles` and the result is multiplied by :attr:`attention_factor`.
        """
        if self.scaling == "pi":
            return apply_rope(x, positions, self.base, self.convention, self.scale)
        x = at_least_2d(as_float_array(x, "x"), "x", "(..., T, Dh)")
        d_head = rope_head(x.shape[-1], f"x.shape={x.shape}")
        out = _rotate_pairs(x, self.angles(positions, d_head), positions, self.convention)
        factor = self.attention_factor
        if factor != 1.0:
            out *= np.asarray(factor, dtype=out.dtype)
        return out


class RoPETables(NamedTuple):
    """RoPE at positions 0 … T−1 with its cosines and sines computed once
    (:meth:`RoPE.tables`), so that every block of a forward and backward pass turns q
    and k without computing the angles again. ``apply`` gives what
    ``rope.apply(x, np.arange(T))`` gives, to the bit.

    Not taught: how the model keeps RoPE for one pass (book page 「model.py を読む」).
    """

    rope: RoPE  # the settings: convention and YaRN's attention factor
    cos: np.ndarray  # (T, Dh/2): cos of the angle of position t, pair i
    sin: np.ndarray  # (T, Dh/2)

    def apply(self, x: np.ndarray, positions=None) -> np.ndarray:
        """x (..., T, Dh) turned by the angles of positions 0 … T−1; same shape."""
        T = len(self.cos)
        if positions is not None and not np.array_equal(positions, np.arange(T)):
            raise ValueError(
                f"RoPETables は位置 0 … {T - 1} の表です: 別の positions には RoPE.apply を"
                f"使ってください（positions={positions!r}）"
            )
        return self._scaled(_turn_pairs(x, self.cos, self.sin, self.rope.convention))

    def apply_back(self, x: np.ndarray) -> np.ndarray:
        """x (..., T, Dh) turned by the opposite angles: the transpose of :meth:`apply`
        (a gradient passes back through a rotation this way)."""
        return self._scaled(_turn_pairs(x, self.cos, -self.sin, self.rope.convention))

    def _scaled(self, out: np.ndarray) -> np.ndarray:
        factor = self.rope.attention_factor  # YaRN's temperature √(1/t), or 1
        if factor != 1.0:
            out *= np.asarray(factor, dtype=out.dtype)
        return out


def ntk_scaled_base(base: float, scale: float, d_head: int) -> float:
    """The RoPE base of NTK-aware scaling for a context ``scale`` times longer.

    ``base · scale^(Dh/(Dh−2))``: the fastest pair (θ_0 = 1) keeps its angles, and the
    slowest pair turns exactly ``scale`` times slower, like position interpolation.

    Parameters
    ----------
    base : float
        The trained base.
    scale : float
        Context extension factor s = L′ / L, ≥ 1 in practice.
    d_head : int
        Head width Dh, even and at least 4.

    Returns
    -------
    float
        The enlarged base.

    Taught in chapter 09.
    """
    base = positive_float(base, "base")
    scale = positive_float(scale, "scale")
    d_head = even_int(d_head, "d_head")
    if d_head < 4:
        raise ValueError(f"NTK スケーリングには d_head が 4 以上必要です: d_head={d_head}")
    return base * scale ** (d_head / (d_head - 2))


def _check_yarn(base: float, beta_fast: float, beta_slow: float) -> None:
    """YaRN needs base > 1 (its band limits divide by ln base) and β_fast > β_slow > 0."""
    if base <= 1.0:
        raise ValueError(
            f"YaRN には 1 より大きい base が必要です（ln(base) で割るため）: base={base}")
    positive_float(beta_slow, "beta_slow")
    positive_float(beta_fast, "beta_fast")
    if beta_fast <= beta_slow:
        raise ValueError(
            f"beta_fast は beta_slow より大きい必要があります: beta_fast={beta_fast}, "
            f"beta_slow={beta_slow}"
        )


def yarn_correction_range(
    d_head: int, base: float, original_max_len: int, *, beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> tuple[int, int]:
    """YaRN's band edges: the pair indices where the linear ramp starts and ends.

    Pair i of dimension index 2i turns ``L / λ_i`` times over the trained length L
    (λ_i = 2π·base^(2i/Dh) its wavelength). The index where it turns r times is
    ``Dh · ln(L / (2π r)) / (2 ln base)`` (the reference implementation's
    ``find_correction_dim``); ``low`` is that index for ``beta_fast`` rotations rounded
    down, ``high`` for ``beta_slow`` rounded up, both clamped to ``[0, Dh − 1]`` (the
    reference clamps ``low`` only from below and ``high`` only from above; the two agree
    whenever the band lies inside the head, as for every trained length in practice).

    Returns
    -------
    (low, high) : tuple of int
        Pairs up to ``low`` keep their frequency, pairs from ``high`` on are interpolated.

    Taught in chapter 09.
    """
    d_head = even_int(d_head, "d_head")
    base = positive_float(base, "base")
    original_max_len = positive_int(original_max_len, "original_max_len")
    _check_yarn(base, beta_fast, beta_slow)

    def dim(rotations: float) -> float:
        return d_head * math.log(original_max_len / (rotations * 2 * math.pi)) / (
            2 * math.log(base))

    low = min(max(math.floor(dim(beta_fast)), 0), d_head - 1)
    high = min(max(math.ceil(dim(beta_slow)), 0), d_head - 1)
    return low, high


def yarn_ramp(
    d_head: int, base: float, original_max_len: int, *, beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> np.ndarray:
    """YaRN's linear ramp over the pairs: 0 = keep the frequency, 1 = interpolate.

    ``clip((i − low) / (high − low), 0, 1)`` for pair i with the band edges of
    :func:`yarn_correction_range` (``high`` is nudged by 0.001 if it equals ``low``, as
    in the reference implementation).

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), from 0 (fast pairs) up to 1 (slow pairs).

    Taught in chapter 09.
    """
    low, high = yarn_correction_range(d_head, base, original_max_len,
                                      beta_fast=beta_fast, beta_slow=beta_slow)
    if low == high:
        high += 0.001  # as the reference: no division by zero
    i = np.arange(d_head // 2, dtype=np.float64)  # (Dh/2,)
    return np.clip((i - low) / (high - low), 0.0, 1.0)


def yarn_inv_freq(
    d_head: int, base: float, scale: float, original_max_len: int, *,
    beta_fast: float = 32.0, beta_slow: float = 1.0,
) -> np.ndarray:
    """The per-pair RoPE frequencies of YaRN (Peng et al., 2023, §3).

    ``θ'_i = (1 − γ̃_i)·θ_i/s + γ̃_i·θ_i`` with ``θ_i = base^(−2i/Dh)`` and
    ``1 − γ̃_i`` the ramp of :func:`yarn_ramp` (γ̃ = 1 keeps a pair, as Peng et al.'s γ;
    the book writes γ̃ because this ramp is linear in the pair index, not in the number of
    turns r): fast pairs (many turns within the trained length) keep their frequency, slow
    pairs are divided by the scale s as in position interpolation, and the pairs in
    between are blended linearly.

    Parameters
    ----------
    d_head : int
        Head width Dh, even.
    base : float
        The trained base, > 1.
    scale : float
        Context scale s = L′ / L.
    original_max_len : int
        The trained length L.
    beta_fast, beta_slow : float
        Band limits β and α in rotations over L (β = 32 and α = 1 in the paper for LLaMA).

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), float64.

    Taught in chapter 09.
    """
    scale = positive_float(scale, "scale")
    ramp = yarn_ramp(d_head, base, original_max_len, beta_fast=beta_fast,
                     beta_slow=beta_slow)  # (Dh/2,)
    theta = _rope_theta(d_head, float(base))  # (Dh/2,)
    keep = 1.0 - ramp  # γ̃_i: 1 keeps the frequency (the reference's extrapolation mask)
    return (theta / scale) * (1.0 - keep) + theta * keep


def yarn_attention_factor(scale: float) -> float:
    """YaRN's factor √(1/t) on q and k: 1 for s ≤ 1, else ``0.1 · ln(s) + 1``.

    Multiplying both q and k by it multiplies the scores by ``1/t = (0.1 ln s + 1)²``:
    a lower softmax temperature that keeps attention as sharp as at the trained length.

    Taught in chapter 09.
    """
    scale = positive_float(scale, "scale")
    return 1.0 if scale <= 1.0 else 0.1 * math.log(scale) + 1.0


def rope_inv_freq(
    d_head: int, base: float = 10000.0, scale: float = 1.0, scaling: str = "pi",
    original_max_len: int | None = None, *, beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> np.ndarray:
    """Angle per position of each RoPE pair after stretching the context ``scale`` times.

    ``"pi"``: θ_i / s; ``"ntk"``: θ_i of :func:`ntk_scaled_base`; ``"yarn"``:
    :func:`yarn_inv_freq` (it needs ``original_max_len``). With
    ``scale = 1`` every method gives the plain θ_i = base^(−2i/Dh).

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), float64.

    Taught in chapter 09.
    """
    d_head = even_int(d_head, "d_head")
    base = positive_float(base, "base")
    scale = positive_float(scale, "scale")
    choice(scaling, "scaling", ROPE_SCALINGS)
    if scaling == "pi":
        return _rope_theta(d_head, base) / scale
    if scaling == "ntk":
        return _rope_theta(d_head, ntk_scaled_base(base, scale, d_head))
    if original_max_len is None:
        raise ValueError(f"scaling={scaling!r} には訓練時の長さ original_max_len が必要です: "
                         "original_max_len=None")
    return yarn_inv_freq(d_head, base, scale, original_max_len, beta_fast=beta_fast,
                         beta_slow=beta_slow)


# --- ALiBi -------------------------------------------------------------------------------------

def alibi_slopes(n_heads: int) -> np.ndarray:
    """The fixed per-head slopes a of ALiBi (Press et al., 2022).

    For a power of two h: ``a_ℓ = 2^(−8(ℓ+1)/h)`` for head ℓ = 0 … h − 1 (the paper
    numbers heads from 1; 8 heads: 1/2, 1/4, …, 1/256). Otherwise the paper's rule: the
    slopes of the nearest lower power of two, then every other slope of twice that many.

    Returns
    -------
    np.ndarray
        Shape (H,), float64, decreasing.

    Taught in chapter 10.
    """
    n_heads = positive_int(n_heads, "n_heads")

    def power_of_two(n: int) -> np.ndarray:
        return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)

    lower = 2 ** int(np.floor(np.log2(n_heads)))
    if lower == n_heads:
        return power_of_two(n_heads)
    extra = power_of_two(2 * lower)[0::2][: n_heads - lower]
    return np.concatenate([power_of_two(lower), extra])


def alibi_bias(n_heads: int, seq_len: int, dtype=np.float64) -> np.ndarray:
    """The ALiBi score bias ``−a_ℓ · |i − j|`` for query i and key j in head ℓ.

    Added to the scores before the softmax, it makes far keys cost more, more steeply in
    heads with a large slope. With a causal mask only ``j ≤ i`` is used.

    Returns
    -------
    np.ndarray
        Shape (H, T, T).

    Taught in chapter 10.
    """
    slopes = alibi_slopes(n_heads)  # (H,)
    seq_len = positive_int(seq_len, "seq_len")
    pos = np.arange(seq_len)
    distance = np.abs(pos[:, None] - pos[None, :])  # (T, T)
    return (-slopes[:, None, None] * distance).astype(dtype, copy=False)  # (H, T, T)



def t5_buckets(seq_len: int, n_buckets: int, max_distance: int, *,
               bidirectional: bool = False) -> np.ndarray:
    """The T5 relative-position bucket of every (query i, key j): Raffel et al. (2020).

    As T5 computes it (``_relative_position_bucket`` of the T5 code): with
    ``bidirectional`` the buckets are split in two halves, one for keys before the query
    and one for keys after it; causal (``bidirectional=False``), every bucket is for
    keys at or before the query, and a later key (hidden by the mask anyway) shares the
    bucket of distance 0. Of the n buckets of one direction, the first half holds the
    distances 0, 1, …, n/2 − 1 one each; the second half is spaced logarithmically up to
    ``max_distance``, and every farther distance falls into the last bucket.

    Parameters
    ----------
    seq_len : int
        T.
    n_buckets : int
        The number of buckets (T5: 32), even.
    max_distance : int
        Where the log-spaced buckets end (T5: 128).
    bidirectional : bool
        True for an encoder (keys on both sides), False for a causal decoder.

    Returns
    -------
    np.ndarray
        Shape (T, T), int, in ``0 … n_buckets − 1``.

    Taught in chapter 10.
    """
    seq_len = positive_int(seq_len, "seq_len")
    n_buckets = even_int(n_buckets, "n_buckets")
    max_distance = positive_int(max_distance, "max_distance")
    pos = np.arange(seq_len)
    relative = pos[None, :] - pos[:, None]  # (T, T): j − i
    buckets = np.zeros((seq_len, seq_len), dtype=np.int64)
    if bidirectional:
        n_buckets //= 2
        buckets += (relative > 0) * n_buckets  # keys after the query: the second half
        distance = np.abs(relative)
    else:
        distance = np.maximum(-relative, 0)  # i − j, 0 for later keys
    exact = n_buckets // 2
    if max_distance <= exact:
        raise ValueError(f"max_distance={max_distance} は正確なバケットの数 {exact} より"
                         "大きい必要があります")
    with np.errstate(divide="ignore"):
        far = exact + (np.log(np.maximum(distance, 1) / exact)
                       / math.log(max_distance / exact) * (n_buckets - exact)).astype(np.int64)
    far = np.minimum(far, n_buckets - 1)
    return buckets + np.where(distance < exact, distance, far)  # (T, T)


def t5_bias(table: np.ndarray, seq_len: int, max_distance: int, *,
            bidirectional: bool = False) -> np.ndarray:
    """The T5 score bias: each head's learned number for the bucket of (i, j).

    Parameters
    ----------
    table : np.ndarray
        Shape (H, n_buckets): one learned scalar per bucket and head.
    seq_len, max_distance, bidirectional
        As for :func:`t5_buckets`.

    Returns
    -------
    np.ndarray
        Shape (H, T, T), added to the scaled scores as ALiBi's bias is.

    Not taught: the bias of the model's ``positional="t5"`` (chapter 10's study).
    """
    table = np.asarray(table)
    if table.ndim != 2:
        raise ValueError(f"table は (H, バケット数) の配列にしてください: shape={table.shape}")
    buckets = t5_buckets(seq_len, table.shape[1], max_distance,
                         bidirectional=bidirectional)  # (T, T)
    return table[:, buckets]  # (H, T, T)


# --- context extension as Peng et al. write it, and as released models configure it ----------
# transformers' names: rope_theta = base, rope_scaling["factor"] = scale,
# original_max_position_embeddings = original_max_len, beta_fast / beta_slow = β / α,
# attention_factor = yarn_attention_factor(scale), partial_rotary_factor = fraction.

def rope_turns(d_head: int, base: float, train_len: int) -> np.ndarray:
    """How many turns each RoPE pair makes over the trained length: ``r_i = L·θ_i / 2π``.

    Peng et al. write it ``r = L / λ`` with the wavelength ``λ_i = 2π / θ_i``: pair i
    has seen every angle during training when ``r_i ≥ 1``.

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), float64, decreasing from ``L / 2π`` (pair 0).

    Taught in chapter 09.
    """
    d_head = even_int(d_head, "d_head")
    base = positive_float(base, "base")
    train_len = positive_int(train_len, "train_len")
    return train_len * _rope_theta(d_head, base) / (2 * math.pi)  # (Dh/2,)


def yarn_gamma(d_head: int, base: float, original_max_len: int, *, beta_fast: float = 32.0,
               beta_slow: float = 1.0) -> np.ndarray:
    """Peng et al.'s ramp γ(r) (YaRN, Eq. 18): 1 keeps a pair's frequency, 0 interpolates it.

    ``γ = 0`` where the pair turns fewer than α = ``beta_slow`` times over the trained
    length, ``γ = 1`` where it turns more than β = ``beta_fast`` times, and
    ``γ = (r − α) / (β − α)`` in between: linear in the number of turns r. The reference
    code and transformers ramp linearly over the pair index instead (:func:`yarn_ramp`),
    which is linear in ``ln r``.

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), from 1 (fast pairs) down to 0 (slow pairs).

    Taught in chapter 09.
    """
    turns = rope_turns(d_head, base, original_max_len)  # (Dh/2,)
    _check_yarn(float(base), beta_fast, beta_slow)
    return np.clip((turns - beta_slow) / (beta_fast - beta_slow), 0.0, 1.0)


def by_parts_inv_freq(d_head: int, base: float, scale: float, gamma) -> np.ndarray:
    """Frequencies that keep some pairs and interpolate others (Peng et al., Eq. 20).

    ``θ'_i = (1 − γ_i)·θ_i/s + γ_i·θ_i``: ``γ_i = 1`` keeps pair i's frequency
    (extrapolation), ``γ_i = 0`` divides it by s (position interpolation). YaRN, its
    reference code and Llama 3.1's scaling differ only in how they choose γ.

    Parameters
    ----------
    d_head : int
        Head width Dh, even.
    base, scale : float
        The trained base and the context scale s.
    gamma : array of float
        Shape (Dh/2,), each in [0, 1].

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), float64.

    Taught in chapter 09.
    """
    d_head = even_int(d_head, "d_head")
    theta = _rope_theta(d_head, positive_float(base, "base"))  # (Dh/2,)
    scale = positive_float(scale, "scale")
    gamma = np.asarray(as_float_array(gamma, "gamma"), dtype=np.float64)
    if gamma.shape != theta.shape:
        raise ValueError(f"gamma の形は (Dh/2,) = {theta.shape} である必要があります: "
                         f"gamma.shape={gamma.shape}")
    if not np.all((gamma >= 0) & (gamma <= 1)):
        raise ValueError(f"gamma の値は 0 以上 1 以下である必要があります: gamma={gamma}")
    return (1.0 - gamma) * theta / scale + gamma * theta  # (Dh/2,)


def yarn_turns_inv_freq(
    d_head: int, base: float, scale: float, original_max_len: int, *,
    beta_fast: float = 32.0, beta_slow: float = 1.0,
) -> np.ndarray:
    """YaRN's frequencies with the ramp of the paper, linear in the number of turns r.

    :func:`by_parts_inv_freq` with γ of :func:`yarn_gamma`. It differs from
    :func:`yarn_inv_freq` (the reference code) where the band [α, β] is not inside the
    head: when the trained length is below 2π·β (even pair 0 turns fewer than β times,
    whatever the head width) γ(r) interpolates pair 0 too, while the reference's index
    ramp, its ``low`` clamped at 0, keeps pair 0 in every configuration.

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), float64.

    Taught in chapter 09.
    """
    gamma = yarn_gamma(d_head, base, original_max_len, beta_fast=beta_fast,
                       beta_slow=beta_slow)  # (Dh/2,)
    return by_parts_inv_freq(d_head, base, scale, gamma)


def llama3_inv_freq(
    d_head: int, base: float, scale: float, original_max_len: int, *,
    low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
) -> np.ndarray:
    """Llama 3.1's RoPE scaling (``rope_type="llama3"`` in transformers).

    Meta's ``apply_scaling``: pairs whose wavelength is shorter than
    ``original_max_len / high_freq_factor`` keep their frequency, pairs longer than
    ``original_max_len / low_freq_factor`` are divided by s, and a ``smooth`` factor
    linear in ``original_max_len / λ`` blends the two. That is :func:`by_parts_inv_freq`
    with γ linear in the number of turns between α = ``low_freq_factor`` and
    β = ``high_freq_factor`` (Llama 3.1: s = 8, L = 8192, α = 1, β = 4), and no
    temperature.

    Returns
    -------
    np.ndarray
        Shape (Dh/2,), float64.

    Taught in chapter 09.
    """
    low = positive_float(low_freq_factor, "low_freq_factor")
    high = positive_float(high_freq_factor, "high_freq_factor")
    if high <= low:
        raise ValueError(f"high_freq_factor は low_freq_factor より大きい必要があります: "
                         f"high_freq_factor={high}, low_freq_factor={low}")
    turns = rope_turns(d_head, base, original_max_len)  # (Dh/2,): L / λ_i
    gamma = np.clip((turns - low) / (high - low), 0.0, 1.0)  # (Dh/2,)
    return by_parts_inv_freq(d_head, base, scale, gamma)


def dynamic_ntk_base(base: float, scale: float, d_head: int, original_max_len: int,
                     seq_len: int) -> float:
    """The base of dynamic NTK scaling for the current length (``rope_type="dynamic"``).

    The base is recomputed from the length ``l`` of the sequence being run, with no
    fine-tuning: ``base · (s·l/L − (s − 1))^(Dh/(Dh−2))`` with ``l = max(seq_len, L)``, as
    transformers computes it. Up to the trained length L the base is unchanged; with
    s = 1 it is the NTK-aware base of ``l / L`` (Peng et al.'s dynamic scaling,
    ``s = max(1, l/L)``, §3.3).

    Returns
    -------
    float

    Taught in chapter 09.
    """
    base = positive_float(base, "base")
    scale = positive_float(scale, "scale")
    d_head = even_int(d_head, "d_head")
    if d_head < 4:
        raise ValueError(f"NTK スケーリングには d_head が 4 以上必要です: d_head={d_head}")
    original_max_len = positive_int(original_max_len, "original_max_len")
    length = max(positive_int(seq_len, "seq_len"), original_max_len)
    stretch = scale * length / original_max_len - (scale - 1.0)
    return base * stretch ** (d_head / (d_head - 2))


def partial_rotary_dims(d_head: int, fraction: float) -> int:
    """How many dimensions of a head partial rotary embedding turns: ``int(Dh · fraction)``.

    GPT-NeoX rotates a fraction of each head (``rotary_pct``, ``partial_rotary_factor``
    in transformers: 0.25 by default for GPT-NeoX) and leaves the rest unrotated.

    Taught in chapter 09.
    """
    d_head = even_int(d_head, "d_head")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.integer,
                                                               np.floating)):
        raise ValueError(f"fraction は 0 より大きく 1 以下の数である必要があります: "
                         f"fraction={fraction!r}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction は 0 より大きく 1 以下の数である必要があります: "
                         f"fraction={fraction!r}")
    dims = int(d_head * fraction)
    if dims < 2 or dims % 2:
        raise ValueError(f"回す次元 int(d_head·fraction) = {dims} が 2 以上の偶数になりません: "
                         f"d_head={d_head}, fraction={fraction}")
    return dims


def apply_partial_rope(x: np.ndarray, positions, fraction: float, base: float = 10000.0,
                       convention: str = "half") -> np.ndarray:
    """RoPE on the first ``partial_rotary_dims(Dh, fraction)`` dimensions of each row only.

    As GPT-NeoX: the rotated part is a RoPE of its own width R (θ_i = base^(−2i/R),
    pairs in the ``rotate_half`` layout by default), the other Dh − R dimensions pass
    unchanged and carry no position.

    Parameters
    ----------
    x : np.ndarray
        Shape (..., T, Dh).
    positions : array of float
        Shape (T,).
    fraction : float
        Share of each head that is rotated, in (0, 1].

    Returns
    -------
    np.ndarray
        Shape of ``x``.

    Taught in chapter 09.
    """
    x = at_least_2d(as_float_array(x, "x"), "x", "(..., T, Dh)")
    rotated = partial_rotary_dims(x.shape[-1], fraction)
    out = x.copy()  # (..., T, Dh): the unrotated part stays as it is
    out[..., :rotated] = apply_rope(x[..., :rotated], positions, base, convention)
    return out
