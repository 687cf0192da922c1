"""The stages of multi-head attention for one (d_model, h): shapes, parameters, FLOPs.

The numbers behind chapter 03's shape explorer. Shapes follow the article's four stages
(project and split, attend in every head, concatenate, multiply by W_O); the parameter
and FLOP counts come from :func:`attnlab.costs.mha_cost`.
"""

from typing import NamedTuple

from attnlab.attention import head_counts
from attnlab.costs import mha_cost

#: Model widths the shape explorer offers.
SHAPE_D_MODELS = (64, 128, 256, 512, 768, 1024)
#: Numbers of heads the shape explorer offers (each divides every width above).
SHAPE_N_HEADS = (1, 2, 4, 8, 16, 32, 64)
#: Sequence length T behind the explorer's FLOP counts.
SHAPE_SEQ_LEN = 128


class Stage(NamedTuple):
    """One stage of multi-head attention."""

    name: str  # short Japanese name of what the stage computes
    shape: tuple[int, ...]  # shape of the array the stage produces
    flops: int  # FLOPs of its matrix products (2 per multiply-add), 0 if it moves data


class MHAStages(NamedTuple):
    """What :func:`mha_stages` returns."""

    d_head: int  # Dh = D / H
    stages: list[Stage]  # in the order of the forward pass
    params: int  # parameters of W_Q, W_K, W_V, W_O together
    n_scores: int  # H·T²: the scores the softmax normalises
    n_softmax_rows: int  # H·T: the rows it normalises


def mha_stages(d_model: int, n_heads: int, seq_len: int = SHAPE_SEQ_LEN) -> MHAStages:
    """Shapes, FLOPs and parameter count of every stage of one self-attention layer.

    Parameters
    ----------
    d_model, n_heads : int
        D and H; D must be divisible by H.
    seq_len : int
        T.

    Returns
    -------
    MHAStages
        ``d_head``; ``stages``: x (T, D), Q = x·W_Q (T, D), split (H, T, Dh), scores
        (H, T, T), heads (H, T, Dh), concat (T, D), output (T, D) with their FLOPs
        (K and V are projected and split like Q; their FLOPs are in the Q row, so the
        rows sum to ``mha_cost(...).flops["total"]``); ``params`` = 4·D²;
        ``n_scores`` = H·T² and ``n_softmax_rows`` = H·T.

    Taught in chapter 03.
    """
    H, _, d_head = head_counts(d_model, n_heads)
    cost = mha_cost(d_model, H, seq_len)
    f = cost.flops
    T = seq_len
    stages = [
        Stage("入力 X", (T, d_model), 0),
        Stage("射影 XW_Q, XW_K, XW_V", (T, d_model), f["q_proj"] + f["k_proj"] + f["v_proj"]),
        Stage("ヘッドに分割", (H, T, d_head), 0),
        Stage("スコア QK^T/√d_k", (H, T, T), f["scores"]),
        Stage("各ヘッドの出力", (H, T, d_head), f["weighted_sum"]),
        Stage("結合 Concat", (T, d_model), 0),
        Stage("出力 Concat·W_O", (T, d_model), f["out_proj"]),
    ]
    return MHAStages(d_head, stages, cost.params["total"], H * T * T, H * T)
