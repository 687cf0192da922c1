"""Scores that name what an attention head does, from its weights alone.

Each score reads one layer's attention weights (B, H, T, T) and returns one number per
head, so a chapter finds a head's role by a measurement rather than by looking at a
picture: a previous-token head scores near 1 on :func:`previous_token_score`, an
induction head (Olsson et al., 2022) near 1 on :func:`induction_score`.
"""

import numpy as np

from attnlab._validate import as_float_array, token_ids


def _check_attn(attn) -> np.ndarray:
    attn = as_float_array(attn, "attn")
    if attn.ndim != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(
            "attn は (B, H, T, T) の形である必要があります: "
            f"attn.shape={attn.shape}"
        )
    return attn


def previous_token_score(attn: np.ndarray) -> np.ndarray:
    """How much each head attends from every token to the one just before it.

    The mean of ``attn[b, h, t, t−1]`` over the batch and t = 1 … T−1: 1 for a head that
    always looks exactly one place back, about 1/t for a head that spreads evenly.

    Parameters
    ----------
    attn : np.ndarray
        One layer's weights, shape (B, H, T, T).

    Returns
    -------
    np.ndarray
        Shape (H,).

    Taught in chapter 04.
    """
    attn = _check_attn(attn)
    back_one = np.diagonal(attn, offset=-1, axis1=-2, axis2=-1)  # (B, H, T−1)
    return back_one.mean(axis=(0, 2))


def induction_mask(tokens: np.ndarray) -> np.ndarray:
    """Where an induction head should look: keys right after an earlier copy of the query's token.

    Returns (B, T, T) bool: ``[b, i, j]`` is True when ``1 ≤ j ≤ i`` and
    ``tokens[b, j−1] == tokens[b, i]``, i.e. key j followed an earlier occurrence of the
    token at i. A row with no True has nothing to copy yet.

    Taught in chapter 04.
    """
    tokens = token_ids(tokens, "tokens")
    T = tokens.shape[1]
    mask = np.zeros((*tokens.shape, T), dtype=bool)  # (B, T, T)
    # key j (≥ 1) follows token j−1; it is a target for query i if that token equals i's
    mask[:, :, 1:] = tokens[:, :, None] == tokens[:, None, :-1]
    return mask & np.tri(T, dtype=bool)  # only keys j ≤ i


def induction_score(attn: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """How much each head attends to what followed the current token earlier on.

    For every position whose token occurred before, the total weight on the keys that
    came right after an earlier copy of it (:func:`induction_mask`), averaged over those
    positions (Olsson et al., 2022): 1 for a perfect induction head, near 0 for a head
    that looks elsewhere.

    Parameters
    ----------
    attn : np.ndarray
        One layer's weights, shape (B, H, T, T).
    tokens : np.ndarray of int
        The batch the weights were computed on, shape (B, T).

    Returns
    -------
    np.ndarray
        Shape (H,).

    Taught in chapter 04.
    """
    attn = _check_attn(attn)
    mask = induction_mask(tokens)  # (B, T, T)
    if mask.shape[:2] != (attn.shape[0], attn.shape[2]):
        raise ValueError(
            f"tokens の形 {mask.shape[:2]} が attn の (B, T)={(attn.shape[0], attn.shape[2])} と"
            "一致しません"
        )
    seen = mask.any(axis=-1)  # (B, T): the token occurred before
    if not seen.any():
        raise ValueError("tokens に 2 回目に現れるトークンがありません: 誘導指標を測れません")
    on_target = (attn * mask[:, None]).sum(axis=-1)  # (B, H, T)
    return on_target.transpose(1, 0, 2)[:, seen].mean(axis=-1)  # (H,)
