"""The phenomena the chapters show, proved on fixed seeds with the chapter-sized model.

Each test trains once (3–9 s on the 2-core CI machine) and checks the trained model on
a fresh batch from another seed. The thresholds and their reasons are in the docstrings;
each threshold was set below the values measured over four seeds, so that it holds on
every seed rather than just passing on one.
"""

import numpy as np
import pytest

from attnlab.head_roles import induction_score, previous_token_score
from attnlab.model import ModelConfig, forward
from attnlab.tasks import PreviousToken, RepeatedSequence, TwoPositions
from attnlab.training import evaluate, train

pytestmark = pytest.mark.slow  # every test trains a model (3–9 s)

CHAPTER = dict(vocab_size=32, d_model=64, n_heads=4, max_len=32)


def bag_of_tokens_ceiling(batch) -> float:
    """Best accuracy on previous-token copy from the token and the set of all tokens.

    Without positions and without a mask, attention is permutation-equivariant: the
    output at t depends only on the token at t and the multiset of tokens in the row.
    Given those, the previous token is one of the other tokens, each equally likely, so
    the best guess is the most frequent of them; this returns that guess's accuracy
    (ties split evenly).
    """
    tokens, targets, loss_mask = batch
    hits = []
    for row, target, mask in zip(tokens, targets, loss_mask, strict=True):
        counts = np.bincount(row, minlength=CHAPTER["vocab_size"])
        for t in np.flatnonzero(mask):
            others = counts.copy()
            others[row[t]] -= 1
            best = others == others.max()
            hits.append(best[target[t]] / best.sum())
    return float(np.mean(hits))


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_one_layer_with_positions_learns_previous_token_copy(positional):
    """Within 150 steps the accuracy on a fresh batch reaches 0.99 (measured: 1.000 for
    seeds 0–3 with both schemes; the training accuracy is 0.10–0.13 over the first 10
    steps and 1.00 over steps 100–109)."""
    config = ModelConfig(**CHAPTER, n_layers=1, positional=positional)
    task = PreviousToken(vocab_size=32)
    result = train(config, task, steps=150, rng=np.random.default_rng(0))
    _, accuracy = evaluate(result.params, task(np.random.default_rng(123), 128, 32), config)
    assert accuracy >= 0.99
    assert result.accuracy[:10].mean() < 0.4  # it had to learn it


def test_without_positions_or_mask_previous_token_copy_stays_near_the_bag_ceiling():
    """The same model with no positions and no causal mask cannot tell which token came
    before: it stays at the bag-of-tokens ceiling (0.107 on this batch; chance 1/32 =
    0.031), far from the 1.0 the same model reaches with positions. Measured 0.102–0.110
    over seeds 0–3."""
    config = ModelConfig(**CHAPTER, n_layers=1, positional="none", causal=False)
    task = PreviousToken(vocab_size=32)
    result = train(config, task, steps=150, rng=np.random.default_rng(0))
    batch = task(np.random.default_rng(123), 128, 32)
    _, accuracy = evaluate(result.params, batch, config)
    ceiling = bag_of_tokens_ceiling(batch)
    assert 0.09 < ceiling < 0.13
    assert accuracy <= ceiling + 0.02
    assert accuracy < 0.15


def test_two_layers_on_repeated_sequences_grow_previous_token_and_induction_heads():
    """After 200 steps: in-context accuracy ≥ 0.98 (measured 0.998–1.000, seeds 0–3; 0.03
    at initialisation); a layer-1 head with induction score ≥ 0.9 (best head measured
    0.97–0.99; every head 0.10–0.12 at initialisation); a layer-0 head that looks one
    place back with score ≥ 0.9 on the first 16 positions (best head 0.99–1.00; every
    head 0.11–0.18 at initialisation, where a uniform head scores 0.16).

    Only the first 16 positions: the period is at most 16, so an earlier copy of every
    token lies in them, and the induction head reads those keys. The trained model does
    the previous-token step only there (score near 1 for t < 16, near 0 after; about 0.5
    over all positions): it learns what the task needs, nothing more."""
    config = ModelConfig(**CHAPTER, n_layers=2, positional="learned")
    task = RepeatedSequence(vocab_size=32)
    batch = task(np.random.default_rng(123), 128, 32)

    def scores(params):
        attn = forward(params, batch.tokens, config).attn
        first = attn[0][:, :, :16, :16]  # queries and keys of the first 16 positions
        return previous_token_score(first), induction_score(attn[1], batch.tokens)

    result = train(config, task, steps=200, rng=np.random.default_rng(0))
    previous_before, induction_before = scores(result.initial)
    assert previous_before.max() < 0.3 and induction_before.max() < 0.3

    _, accuracy = evaluate(result.params, batch, config)
    previous_after, induction_after = scores(result.params)
    assert accuracy >= 0.98
    assert previous_after.max() >= 0.9
    assert induction_after.max() >= 0.9


@pytest.mark.parametrize("n_heads", [1, 4])
def test_reading_two_places_needs_more_than_one_head(n_heads):
    """TwoPositions: colour from t−1, shape from t−2, one layer, D=64 either way. After
    300 steps one head gets every colour right and the shape only at chance (accuracy
    0.246–0.261 over seeds 0–2, colour 1.000; chance for the shape is 1/4): its weights
    sum to 1, so it cannot take the whole of both places. Four heads of width 16 solve
    it (1.000 for seeds 0–2). Two heads solve it for some seeds only (1.000 for seed 2,
    0.81–0.84 for seeds 0–1 even after 600 steps), so no test here."""
    config = ModelConfig(**{**CHAPTER, "n_heads": n_heads}, n_layers=1)
    task = TwoPositions()
    result = train(config, task, steps=300, rng=np.random.default_rng(0))
    batch = task(np.random.default_rng(123), 128, 32)
    _, accuracy = evaluate(result.params, batch, config)
    predicted = forward(result.params, batch.tokens, config).logits.argmax(-1)[batch.loss_mask]
    wanted = batch.targets[batch.loss_mask]
    colour = np.mean(task.colour(predicted) == task.colour(wanted))
    if n_heads == 1:
        assert colour >= 0.99
        assert 0.2 < accuracy < 0.3
    else:
        assert accuracy >= 0.99
