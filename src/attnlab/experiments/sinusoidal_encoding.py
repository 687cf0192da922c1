"""Chapter 06's numerics: the sinusoidal explorer and a model run on given embeddings."""

import numpy as np

from attnlab._validate import choice
from attnlab.model import ModelConfig, check_config, run_layers
from attnlab.positional import sinusoidal_encoding

#: Widths the sinusoidal explorer offers.
EXPLORER_D_MODEL = (16, 32, 64, 128)
#: Positions the explorer's slider offers (48 × 4 widths = 192 states).
EXPLORER_POSITIONS = tuple(range(48))
#: Number of positions whose dot product with the chosen one the explorer shows.
EXPLORER_SEQ_LEN = 64


def explorer_state(pos: int, d_model: int) -> tuple[np.ndarray, np.ndarray]:
    """The encoding of one position and its dot product with every shown position.

    Parameters
    ----------
    pos : int
        One of ``EXPLORER_POSITIONS``.
    d_model : int
        One of ``EXPLORER_D_MODEL``.

    Returns
    -------
    vector : np.ndarray
        Shape (D,): ``PE(pos)``.
    dots : np.ndarray
        Shape (EXPLORER_SEQ_LEN,): ``PE(n) · PE(pos)`` for ``n = 0 … EXPLORER_SEQ_LEN−1``.
        Its largest value is ``D/2``, at ``n = pos``.

    Raises
    ------
    ValueError
        If ``pos`` or ``d_model`` is not one of the offered values.

    Taught in chapter 06.
    """
    if pos not in EXPLORER_POSITIONS:
        raise ValueError(f"pos={pos!r} は 0 〜 {EXPLORER_POSITIONS[-1]} の整数にしてください")
    choice(d_model, "d_model", EXPLORER_D_MODEL)
    pe = sinusoidal_encoding(EXPLORER_SEQ_LEN, d_model)  # (T, D)
    return pe[pos], pe @ pe[pos]  # (D,), (T,)


def logits_from_embeddings(params: dict, x: np.ndarray, config: ModelConfig) -> np.ndarray:
    """Run the blocks and the unembedding of a model on inputs ``x`` built elsewhere.

    ``x`` replaces what :func:`attnlab.model.forward` builds from the tokens (the token
    embedding plus the positions), so a chapter can feed a model embeddings with the
    positions added in another (e.g. a wrong) way. With ``x = embed[tokens] + PE`` the
    logits equal ``forward(params, tokens, config).logits``.

    Parameters
    ----------
    params : dict of str to np.ndarray
        As made by :func:`attnlab.model.init_params`.
    x : np.ndarray
        Shape (B, T, D): the input of the first block.
    config : ModelConfig
        Its ``positional`` must add positions to the embeddings ("sinusoidal",
        "learned") or use none ("none").

    Returns
    -------
    np.ndarray
        Shape (B, T, V).

    Taught in chapter 06.
    """
    config = check_config(config)
    if config.positional not in ("none", "sinusoidal", "learned"):
        raise ValueError(
            f"positional={config.positional!r} のモデルは位置をアテンションの中で使うので、"
            "埋め込みからは計算できません（none・sinusoidal・learned のどれか）")
    return run_layers(params, x, config)  # (B, T, V)
