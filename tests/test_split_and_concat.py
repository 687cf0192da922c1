"""Chapter 03's shape explorer: the numbers of every stage, for every state it offers."""

import itertools

import numpy as np
import pytest

from attnlab import MHAProjections, init_mha, merge_heads, split_heads
from attnlab.attention import scaled_dot_product_attention
from attnlab.costs import mha_cost
from attnlab.experiments.split_and_concat import (
    SHAPE_D_MODELS,
    SHAPE_N_HEADS,
    mha_stages,
)

STATES = list(itertools.product(SHAPE_D_MODELS, SHAPE_N_HEADS))


def test_every_offered_head_count_divides_every_offered_width():
    assert len(STATES) == 42
    assert all(d % h == 0 for d, h in STATES)


@pytest.mark.parametrize("d_model, n_heads", STATES)
def test_stage_flops_add_up_to_mha_cost_and_params_are_4_d_squared(d_model, n_heads):
    result = mha_stages(d_model, n_heads, seq_len=16)
    assert sum(s.flops for s in result.stages) == mha_cost(d_model, n_heads, 16).flops["total"]
    assert result.params == 4 * d_model**2
    assert result.d_head * n_heads == d_model
    assert result.n_scores == n_heads * 16**2 and result.n_softmax_rows == n_heads * 16


def test_total_flops_do_not_depend_on_the_number_of_heads():
    for d_model in SHAPE_D_MODELS:
        totals = {sum(s.flops for s in mha_stages(d_model, h).stages) for h in SHAPE_N_HEADS}
        assert len(totals) == 1


def test_stage_shapes_are_the_shapes_of_the_real_arrays():
    T, d_model, n_heads = 7, 24, 4
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, d_model))
    w: MHAProjections = init_mha(d_model, n_heads, rng=rng)
    q = x @ w.w_q
    heads_q = split_heads(q, n_heads)
    heads_k, heads_v = split_heads(x @ w.w_k, n_heads), split_heads(x @ w.w_v, n_heads)
    heads, weights = scaled_dot_product_attention(heads_q, heads_k, heads_v)
    concat = merge_heads(heads)
    arrays = [x, q, heads_q, weights, heads, concat, concat @ w.w_o]
    shapes = [s.shape for s in mha_stages(d_model, n_heads, seq_len=T).stages]
    assert shapes == [a.shape for a in arrays]


def test_head_counts_error_names_the_head_width_as_the_chapter_writes_it():
    # chapter 03 prints this message; the chapter calls one head's width d_k
    from attnlab.attention import head_counts

    with pytest.raises(ValueError, match=r"d_model=512 は n_heads=6 で割り切れません") as err:
        head_counts(512, 6)
    assert "d_k = d_model / n_heads" in str(err.value)
    assert "d_head" not in str(err.value)
