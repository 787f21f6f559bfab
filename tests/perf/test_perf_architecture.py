"""Derived quantities of the shipped model profiles against hand-computed values."""

from __future__ import annotations

import itertools

import pytest

from pdsim.perf import sizes as S
from pdsim.perf.profiles import load_model_architecture, with_dtypes


def test_llama_3_1_8b_by_hand() -> None:
    a = load_model_architecture("llama-3.1-8b")
    # per layer: q 4096x4096, k and v 4096x1024 each, o 4096x4096, SwiGLU 3 x 4096x14336
    layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336
    assert layer == 218_103_808
    embedding = 128256 * 4096  # untied: the LM head is as large again
    total = 32 * layer + 2 * embedding
    assert S.total_params(a) == total == 8_029_995_008  # 8.03B (norms not counted)
    assert S.weight_bytes(a) == 2 * total  # bf16
    # KV: 2 (K and V) x 8 KV heads x 128 x 2 bytes per layer, 32 layers
    assert S.kv_bytes_per_token_per_layer(a.blocks[0].mixer, "bf16") == 4096
    assert S.kv_bytes_per_token(a) == 32 * 4096 == 131_072
    # FLOPs of a first token: 2 x (layers + LM head) + attention to itself
    attn_pair = 4 * 32 * 128  # QK^T and PV, 2 FLOPs each, per head
    assert S.flops_per_token(a, 0) == 2 * (32 * layer + embedding) + 32 * attn_pair
    assert S.flops_per_token(a, 1023) == 2 * (32 * layer + embedding) + 1024 * 32 * attn_pair


def test_llama_tensor_parallel_shards() -> None:
    a = load_model_architecture("llama-3.1-8b")
    # 8 KV heads split evenly over 2 or 8 ranks: every weight is sliced exactly
    assert S.weight_bytes(a, 2) == S.weight_bytes(a) / 2
    assert S.kv_bytes_per_token(a, 8) == 32 * 2 * 1 * 128 * 2
    # over 16 ranks each keeps a whole KV head: k/v projections and KV are replicated
    assert S.kv_bytes_per_token(a, 16) == S.kv_bytes_per_token(a, 8)
    assert S.weight_bytes(a, 16) > S.weight_bytes(a) / 16


def test_deepseek_v3_by_hand() -> None:
    a = load_model_architecture("deepseek-v3")
    mla = (7168 * 1536            # q_a
           + 1536 * 128 * 192     # q_b: 128 heads x (128 nope + 64 rope)
           + 7168 * (512 + 64)    # kv_a: latent + rope key
           + 512 * 128 * 256      # kv_b: latent -> 128 heads x (128 k_nope + 128 v)
           + 128 * 128 * 7168)    # o
    assert mla == 187_105_280
    dense_ffn = 3 * 7168 * 18432
    expert = 3 * 7168 * 2048
    router = 7168 * 256
    moe_total = router + expert + 256 * expert  # one shared + 256 routed
    moe_active = router + expert + 8 * expert
    embedding = 129280 * 7168
    total = 61 * mla + 3 * dense_ffn + 58 * moe_total + 2 * embedding
    active = 61 * mla + 3 * dense_ffn + 58 * moe_active + 2 * embedding
    assert S.total_params(a) == total == 671_025_397_760
    assert S.active_params(a) == active == 37_551_276_032
    # FP8 linear layers, bf16 embedding and head
    assert S.weight_bytes(a) == (total - 2 * embedding) + 2 * 2 * embedding
    # MLA caches one latent of 512 + 64 elements per token per layer, bf16
    assert S.kv_bytes_per_token(a) == 61 * 576 * 2 == 70_272
    assert S.kv_bytes_per_token(with_dtypes(a, kv_cache_dtype="fp8")) == 61 * 576
    # the latent is shared by all heads, so every TP rank keeps all of it
    assert S.kv_bytes_per_token(a, 8) == S.kv_bytes_per_token(a)
    assert S.flops_per_token(a, 0) == pytest.approx(
        2 * (active - embedding) + 61 * 2 * 128 * (192 + 128))
    # the MTP module: one MLA layer with the MoE FFN and eh_proj (2 x 7168 -> 7168)
    assert S.drafter_module_params(a) == mla + moe_total + 2 * 7168 * 7168


def test_recurrent_state_bytes() -> None:
    nem = load_model_architecture("nemotron-h-8b")
    mamba = nem.blocks[0].mixer
    # Mamba-2: 128 heads x 64 x state 128, plus a conv window of 3 x (8192 + 2 x 8 x 128)
    assert S.state_bytes_per_layer(mamba, "bf16") == (128 * 64 * 128 + 3 * (8192 + 2048)) * 2
    assert S.state_bytes_per_request(nem) == 24 * 2_158_592
    assert S.kv_bytes_per_token(nem) == 4 * 4096  # only the 4 attention layers
    assert S.total_params(nem) == pytest.approx(8.1e9, rel=0.01)
    qn = load_model_architecture("qwen3-next-80b-a3b")
    gdn = qn.blocks[0].mixer
    # Gated DeltaNet: 32 value heads x 128 x 128, conv over q, k (16 x 128 each) and v
    assert S.state_bytes_per_layer(gdn, "bf16") == (32 * 128 * 128 + 3 * (2 * 2048 + 4096)) * 2
    assert S.kv_bytes_per_token(qn) == 12 * 2 * 2 * 256 * 2


def test_expected_experts_touched() -> None:
    assert S.expected_experts_touched(256, 8, 0) == 0
    assert S.expected_experts_touched(256, 8, 1) == pytest.approx(8)
    assert S.expected_experts_touched(256, 8, 2) == pytest.approx(256 * (1 - (248 / 256) ** 2))
    assert S.expected_experts_touched(256, 8, 10_000) == pytest.approx(256)
    values = [S.expected_experts_touched(256, 8, t) for t in range(1, 300)]
    assert all(b > a for a, b in itertools.pairwise(values))
    assert S.expected_experts_touched(4, 4, 3) == 4


@pytest.mark.parametrize("name", ["deepseek-v3", "inkling-small", "qwen3-next-80b-a3b",
                                  "llama-3.1-8b", "llama-3.1-70b", "nemotron-h-8b",
                                  "qwen3-32b", "qwen3-235b-a22b", "minimax-m2.5",
                                  "kimi-k2.5", "gpt-oss-120b"])
def test_published_parameter_counts(name: str) -> None:
    a = load_model_architecture(name)
    assert a.published_total_params_b is not None
    assert S.total_params(a) / 1e9 == pytest.approx(a.published_total_params_b, rel=0.02)
    if name in ("deepseek-v3", "inkling-small", "qwen3-235b-a22b", "kimi-k2.5"):
        assert a.published_active_params_b is not None
        assert S.active_params(a) / 1e9 == pytest.approx(a.published_active_params_b, rel=0.03)
