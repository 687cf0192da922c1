"""Toy tasks for the attention-only model: the batches it trains and is measured on.

A task is a small frozen dataclass: its fields are the task's settings, ``vocab_size``
is the number of token ids it uses, and calling it with ``(rng, batch_size, seq_len)``
returns a :class:`Batch` of three (B, T) arrays. The same generator state gives the same
batch. ``targets[b, t]`` is what the model should predict at position t (from tokens
``0 … t`` if the model is causal); ``loss_mask`` marks the positions where that is
possible at all, and only those are scored.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from attnlab._validate import generator, positive_int


class Batch(NamedTuple):
    """One batch of a task: what :func:`attnlab.model.loss_and_grads` and
    :func:`attnlab.training.evaluate` take."""

    tokens: np.ndarray  # (B, T) int64
    targets: np.ndarray  # (B, T) int64; 0 where loss_mask is False
    loss_mask: np.ndarray  # (B, T) bool


def _check_periods(min_period: int, max_period: int | None) -> None:
    """The period range of a repeating task: 2 ≤ min_period ≤ max_period."""
    positive_int(min_period, "min_period")
    if min_period < 2:
        raise ValueError(f"min_period は 2 以上である必要があります: min_period={min_period}")
    if max_period is not None:
        positive_int(max_period, "max_period")
        if max_period < min_period:
            raise ValueError(f"max_period={max_period} が min_period={min_period} より小さいです")


def _next_token_batch(tokens: np.ndarray, loss_mask: np.ndarray) -> Batch:
    """A batch whose target at t is the token at t+1, scored where ``loss_mask`` is True."""
    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]  # the next token
    targets[~loss_mask] = 0
    return Batch(tokens, targets, loss_mask)


def _sizes(rng, batch_size, seq_len, shortest: int) -> tuple[np.random.Generator, int, int]:
    rng = generator(rng)
    batch_size = positive_int(batch_size, "batch_size")
    seq_len = positive_int(seq_len, "seq_len")
    if seq_len < shortest:
        raise ValueError(
            f"このタスクには seq_len が {shortest} 以上必要です: "
            f"seq_len={seq_len}"
        )
    return rng, batch_size, seq_len


@dataclass(frozen=True)
class PreviousToken:
    """Copy the token ``offset`` places back: ``targets[t] = tokens[t − offset]``.

    The answer is fixed by a relative position alone; no content needs to be compared.
    Positions ``t < offset`` have nothing to copy and are not scored.

    Taught in chapter 05.
    """

    vocab_size: int = 32
    offset: int = 1

    def __post_init__(self):
        positive_int(self.vocab_size, "vocab_size")
        positive_int(self.offset, "offset")

    def __call__(self, rng, batch_size: int, seq_len: int) -> Batch:
        rng, batch_size, seq_len = _sizes(rng, batch_size, seq_len, self.offset + 1)
        tokens = rng.integers(0, self.vocab_size, size=(batch_size, seq_len))  # (B, T)
        targets = np.zeros_like(tokens)
        targets[:, self.offset:] = tokens[:, : -self.offset]
        loss_mask = np.zeros(tokens.shape, dtype=bool)
        loss_mask[:, self.offset:] = True
        return Batch(tokens, targets, loss_mask)


@dataclass(frozen=True)
class TwoPositions:
    """Read one feature at t−1 and another at t−2: a task one softmax cannot do alone.

    Every token is a pair (colour, shape), id ``colour · n_shapes + shape``. The target
    at t is the token with the colour of ``tokens[t−1]`` and the shape of
    ``tokens[t−2]``. A head whose weights sum to 1 must split them between the two
    places, and then both colours and both shapes arrive mixed; two heads can each
    take one place. Positions t < 2 are not scored.

    Taught in chapter 02.
    """

    n_colours: int = 8
    n_shapes: int = 4

    def __post_init__(self):
        positive_int(self.n_colours, "n_colours")
        positive_int(self.n_shapes, "n_shapes")

    @property
    def vocab_size(self) -> int:
        return self.n_colours * self.n_shapes

    def colour(self, tokens: np.ndarray) -> np.ndarray:
        """The colour of each token id."""
        return np.asarray(tokens) // self.n_shapes

    def shape(self, tokens: np.ndarray) -> np.ndarray:
        """The shape of each token id."""
        return np.asarray(tokens) % self.n_shapes

    def __call__(self, rng, batch_size: int, seq_len: int) -> Batch:
        rng, batch_size, seq_len = _sizes(rng, batch_size, seq_len, 3)
        tokens = rng.integers(0, self.vocab_size, size=(batch_size, seq_len))  # (B, T)
        targets = np.zeros_like(tokens)
        targets[:, 2:] = self.colour(tokens[:, 1:-1]) * self.n_shapes + self.shape(tokens[:, :-2])
        loss_mask = np.zeros(tokens.shape, dtype=bool)
        loss_mask[:, 2:] = True
        return Batch(tokens, targets, loss_mask)


@dataclass(frozen=True)
class RepeatedSequence:
    """A random segment repeated until the sequence is full; predict the next token.

    Each row draws its own period P from ``min_period … max_period`` (``None``: up to
    ``seq_len // 2``) and P distinct tokens, then repeats them. From the second copy on
    (t ≥ P) the next token is the one that followed the current token last time: an
    induction head finds it by content, whatever P is. Since P changes from row to row,
    no fixed offset solves the task.

    With a fixed period range, longer sequences hold more copies of the same kind of
    segment: the task for training short and testing long.

    Taught in chapter 04.
    """

    vocab_size: int = 32
    min_period: int = 4
    max_period: int | None = None

    def __post_init__(self):
        positive_int(self.vocab_size, "vocab_size")
        _check_periods(self.min_period, self.max_period)
        if self.max_period is not None and self.max_period > self.vocab_size:
            raise ValueError(
                f"max_period={self.max_period} が vocab_size={self.vocab_size} を超えています: "
                "区間のトークンはすべて異なるので、周期は語彙の大きさまでです"
            )

    def periods(self, rng, batch_size: int, seq_len: int) -> np.ndarray:
        """Draw the period of each row: (B,) ints."""
        longest = seq_len // 2 if self.max_period is None else self.max_period
        longest = min(longest, self.vocab_size)
        if longest < self.min_period or seq_len <= self.min_period:
            raise ValueError(
                f"seq_len={seq_len} では周期 {self.min_period} 以上の区間を 2 回以上並べられません"
                f"（vocab_size={self.vocab_size}, max_period={self.max_period}）"
            )
        return rng.integers(self.min_period, longest + 1, size=batch_size)

    def __call__(self, rng, batch_size: int, seq_len: int) -> Batch:
        rng, batch_size, seq_len = _sizes(rng, batch_size, seq_len, 2)
        periods = self.periods(rng, batch_size, seq_len)  # (B,)
        # each row's P distinct tokens are the first P of a permutation, drawn row by row
        orders = np.stack([rng.permutation(self.vocab_size) for _ in periods])  # (B, V)
        t = np.arange(seq_len)
        # position t repeats segment[t mod P]; indexing all rows at once is the same
        # batch as a loop over rows, without a dozen small numpy calls per row
        tokens = np.take_along_axis(orders, t % periods[:, None], axis=1)  # (B, T)
        # scored from the second copy on (t ≥ P), but not the last position
        loss_mask = (t >= periods[:, None]) & (t < seq_len - 1)  # (B, T)
        return _next_token_batch(tokens, loss_mask)


@dataclass(frozen=True)
class RepeatInNoise:
    """A segment and its immediate repeat, at a random place among random tokens.

    Each row: noise, then P distinct tokens, then the same P tokens again, then noise;
    P is drawn from ``min_period … max_period`` and the start of the segment uniformly
    from every place where both copies fit. The noise uses only tokens outside the
    segment, so in the second copy the current token occurred exactly once before, and
    the next token is the one that followed it there. Only the second copy is scored
    (its last token's successor is noise, so it is left out).

    Unlike :class:`RepeatedSequence`, the first copy can lie anywhere: a model that
    finds "the token before" only at the positions it was trained on fails on longer
    sequences, where the segment lies further out. The task for training short and
    testing long.

    Chapter 10 considered it and chose PreviousToken: a two-layer model does not learn it
    within that chapter's training budget.

    Not taught: a candidate task for chapter 10, set aside.
    """

    vocab_size: int = 32
    min_period: int = 4
    max_period: int = 8

    def __post_init__(self):
        positive_int(self.vocab_size, "vocab_size")
        positive_int(self.max_period, "max_period")  # required here: no None
        _check_periods(self.min_period, self.max_period)
        if self.max_period >= self.vocab_size:
            raise ValueError(
                f"max_period={self.max_period} は vocab_size={self.vocab_size} より小さい必要が"
                "あります: 区間にないトークンで雑音を作るためです"
            )

    def __call__(self, rng, batch_size: int, seq_len: int) -> Batch:
        rng, batch_size, seq_len = _sizes(rng, batch_size, seq_len, 2 * self.max_period)
        periods = rng.integers(self.min_period, self.max_period + 1, size=batch_size)  # (B,)
        tokens = np.empty((batch_size, seq_len), dtype=np.int64)
        loss_mask = np.zeros((batch_size, seq_len), dtype=bool)
        for row, period in enumerate(periods):
            order = rng.permutation(self.vocab_size)
            segment, others = order[:period], order[period:]  # P distinct tokens, the rest
            tokens[row] = rng.choice(others, size=seq_len)  # noise
            start = rng.integers(0, seq_len - 2 * period + 1)
            tokens[row, start:start + period] = segment
            tokens[row, start + period:start + 2 * period] = segment
            loss_mask[row, start + period:start + 2 * period - 1] = True
        return _next_token_batch(tokens, loss_mask)
