"""The numpy code against the libraries practitioners run: PyTorch and transformers.

``make test-parity`` installs them (``requirements-parity.txt``: PyTorch CPU and
transformers, pinned) into ``.venv-parity`` and runs this file; the course's own
environment has neither, so ``make unit`` skips it.

- MHA / GQA / MQA against ``torch.nn.functional.scaled_dot_product_attention``;
- DeepSeek-V2's multi-head latent attention (``attnlab.inference.mla_attention`` and the
  absorbed scores) against transformers' ``DeepseekV2Attention``, built from a small
  random config in the test (no download);
- chapter 09's RoPE scalings: the numpy port of transformers' functions that
  ``tests/test_context_extension_parity.py`` tests attnlab against, against the real
  functions of ``modeling_rope_utils``.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnlab import causal_mask, init_mha, multi_head_attention  # noqa: E402
from attnlab.inference import MLAProjections, mla_absorbed_scores, mla_attention  # noqa: E402
from attnlab.positional import RoPE  # noqa: E402
from tests import test_context_extension_parity as port  # noqa: E402

torch.manual_seed(0)


@pytest.mark.parametrize("n_kv_heads", [8, 2, 1])
def test_mha_gqa_mqa_equal_torch_sdpa(n_kv_heads):
    rng = np.random.default_rng(0)
    B, T, D, H = 2, 7, 32, 8
    Dh = D // H
    x = rng.standard_normal((B, T, D))
    proj = init_mha(D, H, n_kv_heads, rng=rng)
    ours, _ = multi_head_attention(x, proj, H, n_kv_heads=n_kv_heads, mask=causal_mask(T))

    t = {name: torch.from_numpy(np.asarray(w)) for name, w in zip("qkvo", proj, strict=True)}
    xt = torch.from_numpy(x)
    q = (xt @ t["q"]).view(B, T, H, Dh).transpose(1, 2)
    k = (xt @ t["k"]).view(B, T, n_kv_heads, Dh).transpose(1, 2)
    v = (xt @ t["v"]).view(B, T, n_kv_heads, Dh).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           enable_gqa=True)
    theirs = (out.transpose(1, 2).reshape(B, T, D) @ t["o"]).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


def deepseek_attention():
    from transformers.models.deepseek_v2.configuration_deepseek_v2 import DeepseekV2Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
        DeepseekV2Attention,
        DeepseekV2RotaryEmbedding,
    )
    config = DeepseekV2Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                              q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8,
                              qk_rope_head_dim=4, v_head_dim=8, head_dim=4,
                              num_hidden_layers=1, vocab_size=16, max_position_embeddings=64)
    config._attn_implementation = "eager"
    attention = DeepseekV2Attention(config, layer_idx=0).eval()
    with torch.no_grad():  # the norms' scales away from 1 would need them in numpy too
        for p in attention.parameters():
            if p.ndim == 2:
                p.normal_(0, 0.3)
    return config, attention, DeepseekV2RotaryEmbedding(config)


def numpy_projections(attention, H=4, nope=8, rope_dim=4, v_dim=8, d_c=12):
    def w(linear):
        return linear.weight.detach().double().numpy().T  # torch stores (out, in)
    q_b = w(attention.q_b_proj).reshape(-1, H, nope + rope_dim)
    kv_a = w(attention.kv_a_proj_with_mqa)
    kv_b = w(attention.kv_b_proj).reshape(d_c, H, nope + v_dim)
    return MLAProjections(
        w_dq=w(attention.q_a_proj),
        w_uq=q_b[..., :nope].reshape(-1, H * nope),
        w_qr=q_b[..., nope:].reshape(-1, H * rope_dim),
        w_dkv=kv_a[:, :d_c], w_uk=kv_b[..., :nope].reshape(d_c, H * nope),
        w_uv=kv_b[..., nope:].reshape(d_c, H * v_dim), w_kr=kv_a[:, d_c:],
        w_o=w(attention.o_proj))


def test_mla_equals_transformers_deepseek_v2_attention():
    config, attention, rotary = deepseek_attention()
    B, T = 2, 9
    x = torch.randn(B, T, 32)
    positions = torch.arange(T)[None].expand(B, T)
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]  # (1, 1, T, T) additive
    with torch.no_grad():
        theirs, _ = attention(x, attention_mask=mask,
                              position_embeddings=rotary(x, positions))
    proj = numpy_projections(attention)
    rope = RoPE(base=config.rope_parameters["rope_theta"])  # interleaved pairs, as theirs
    ours, _ = mla_attention(x.double().numpy(), proj, 4, rope=rope,
                            norm_eps=config.rms_norm_eps)
    # transformers rotates in float32 (xq.float()): agreement to float32 rounding
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=0, atol=2e-5)


def test_absorbed_mla_scores_equal_transformers_scores():
    config, attention, rotary = deepseek_attention()
    B, T = 1, 6
    x = torch.randn(B, T, 32)
    captured = {}

    def keep_scores(module, query, key, value, attention_mask, scaling, **kwargs):
        captured["scores"] = (query @ key.transpose(-1, -2)) * scaling
        weights = torch.softmax(captured["scores"] + attention_mask, dim=-1)
        return (weights @ value).transpose(1, 2), weights

    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as modeling
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
    original = modeling.eager_attention_forward
    modeling.eager_attention_forward = keep_scores
    try:
        with torch.no_grad():
            attention(x, attention_mask=mask,
                      position_embeddings=rotary(x, torch.arange(T)[None]))
    finally:
        modeling.eager_attention_forward = original
    proj = numpy_projections(attention)
    rope = RoPE(base=config.rope_parameters["rope_theta"])
    xn = x.double().numpy()
    _, cache = mla_attention(xn, proj, 4, rope=rope, norm_eps=config.rms_norm_eps)
    ours = mla_absorbed_scores(xn, cache, proj, 4, rope=rope, positions=np.arange(T),
                               norm_eps=config.rms_norm_eps)
    np.testing.assert_allclose(ours, captured["scores"].double().numpy(), atol=2e-5)


ROPE_GRID = [(10000.0, 64, 4.0, 2048), (500000.0, 128, 8.0, 8192), (10000.0, 16, 4.0, 16)]


def rope_config(base, dim, rope_type, **params):
    from transformers import LlamaConfig
    parameters = {"rope_type": rope_type, "rope_theta": base, **params}
    return LlamaConfig(hidden_size=dim, num_attention_heads=1, head_dim=dim,
                       rope_parameters=parameters,
                       max_position_embeddings=params.get("original_max_position_embeddings",
                                                          2048) * 4)


@pytest.mark.parametrize("base, dim, factor, original", ROPE_GRID)
def test_the_port_equals_transformers_rope_functions(base, dim, factor, original):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cases = {
        "linear": ({"factor": factor}, port.hf_linear(base, dim, factor)),
        "yarn": ({"factor": factor, "original_max_position_embeddings": original},
                 port.hf_yarn(base, dim, factor, original)),
        "llama3": ({"factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": original},
                   port.hf_llama3(base, dim, factor, 1.0, 4.0, original)),
    }
    for rope_type, (params, (want_inv_freq, want_factor)) in cases.items():
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](
            rope_config(base, dim, rope_type, **params), "cpu")
        np.testing.assert_allclose(inv_freq.numpy(), want_inv_freq, rtol=1e-6,
                                   err_msg=rope_type)
        assert attention_factor == pytest.approx(want_factor), rope_type
