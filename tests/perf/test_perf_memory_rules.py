"""The engines' KV-memory rules (``memory_rule``): vLLM, SGLang and TensorRT-LLM."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.config import Role
from pdsim.errors import ConfigError
from pdsim.loader import config_from_dict
from pdsim.perf import sizes as S
from pdsim.perf.memory import (
    GIB,
    NON_TORCH_GIB,
    activation_peak_bytes,
    kv_blocks_per_instance,
    kv_cache_bytes_per_gpu,
    memory_plan,
    sglang_mem_fraction_static,
)
from pdsim.perf.profiles import load_hardware, load_model_architecture

H100 = load_hardware("h100-sxm")
B200 = load_hardware("b200")
LLAMA_8B = load_model_architecture("llama-3.1-8b")
LLAMA_70B = load_model_architecture("llama-3.1-70b")
DS = load_model_architecture("deepseek-v3")


def test_sglang_fraction_follows_its_capacity_tiers_by_hand() -> None:
    # an 80 GiB GPU (81,920 MiB) at TP1: 512 + 1.5 x 8,192 + 2 x 256 + 1/8 GiB = 13,440 MiB
    assert sglang_mem_fraction_static(H100, 1) == round((81920 - 13440) / 81920, 3)
    # B200 (180 GiB): chunked prefill 16,384, graph batch 512, TP8 adds 1 GiB
    reserved = 512 + 1.5 * 16384 + 2 * 512 + 8 / 8 * 1024
    assert sglang_mem_fraction_static(B200, 8) == round((184320 - reserved) / 184320, 3)
    # attention-DP adds 3 MiB + 1.5 MiB per graph batch size and rank (max bs 512 > 300)
    dp = sglang_mem_fraction_static(B200, 1, attention_dp_size=8)
    reserved_dp = 512 + 1.5 * 16384 + 2 * 512 + 1 / 8 * 1024 + 4.5 * 512 * 8
    assert dp == round((184320 - reserved_dp) / 184320, 3)


def test_sglang_reserve_is_at_least_ten_gib_on_large_gpus() -> None:
    small = H100.model_copy(update={"hbm_capacity_gib": 64.0})
    # 512 + 12,288 + 512 + 128 MiB = 13,440 MiB > 10 GiB; at a 4,096-token tier it would be less
    tiny = H100.model_copy(update={"hbm_capacity_gib": 50.0})
    assert sglang_mem_fraction_static(tiny, 1) == round(
        (50 * 1024 - (512 + 1.5 * 4096 + 2 * 32 + 128)) / (50 * 1024), 3)
    assert sglang_mem_fraction_static(small, 1) == round((65536 - 13440) / 65536, 3)


def test_trtllm_takes_a_fraction_of_what_is_free_after_weights_and_activations() -> None:
    p = memory_plan(LLAMA_8B, H100, 1, rule="trtllm", free_gpu_memory_fraction=0.8,
                    max_num_batched_tokens=8192, max_num_seqs=256)
    act = activation_peak_bytes(LLAMA_8B, 1, 1, 8192, 256)
    free = H100.hbm_capacity_bytes - S.weight_bytes(LLAMA_8B) - act - NON_TORCH_GIB * GIB
    assert p.kv == pytest.approx(0.8 * free)
    assert p.activation == act


def test_activation_peak_by_hand() -> None:
    # Llama-8B: gate+up 2 x 14,336, plus 4 x 4,096 hidden, bf16; logits of 256 seqs in fp32
    act = activation_peak_bytes(LLAMA_8B, 1, 1, 8192, 256)
    assert act == 8192 * (2 * 14336 + 4 * 4096) * 2 + 256 * 128256 * 4
    # tensor parallelism slices the FFN and the vocabulary
    assert activation_peak_bytes(LLAMA_8B, 2, 1, 8192, 256) == \
        8192 * (14336 + 4 * 4096) * 2 + 256 * 128256 / 2 * 4


def test_vllm_subtracts_the_profile_run_peak() -> None:
    base = kv_cache_bytes_per_gpu(LLAMA_8B, H100, 1, 0.9, rule="vllm")
    big = kv_cache_bytes_per_gpu(LLAMA_8B, H100, 1, 0.9, rule="vllm",
                                 max_num_batched_tokens=16384)
    assert base - big == pytest.approx(activation_peak_bytes(LLAMA_8B, 1, 1, 16384, 0), abs=1)


@settings(max_examples=60, deadline=None)
@given(rule=st.sampled_from(["pdsim", "vllm", "sglang", "trtllm"]),
       tp=st.sampled_from([1, 2, 4, 8]), tokens=st.integers(0, 65536),
       seqs=st.integers(0, 2048), util=st.floats(0.5, 1.0), frac=st.floats(0.1, 1.0))
def test_every_byte_is_accounted_for(rule: str, tp: int, tokens: int, seqs: int,
                                     util: float, frac: float) -> None:
    """Weights + activations + other + KV is the memory the rule may use: util x HBM
    (pdsim, vllm) or all of it (sglang, trtllm)."""
    p = memory_plan(LLAMA_70B, B200, tp, rule=rule, gpu_memory_utilization=util,
                    mem_fraction_static=frac, free_gpu_memory_fraction=frac,
                    max_num_batched_tokens=tokens, max_num_seqs=seqs)
    total = p.weights + p.activation + p.other + p.kv
    usable = B200.hbm_capacity_bytes * (util if rule in ("pdsim", "vllm") else 1.0)
    if rule == "trtllm" and p.kv < 0:
        return  # nothing free: the fraction applies to nothing
    assert total == pytest.approx(usable, rel=1e-9)
    assert p.kv <= usable - p.weights


def test_deepseek_fp8_at_tp4_on_b200_does_not_fit_sglangs_default_fraction() -> None:
    # 157 GiB of weights per GPU; SGLang's derived fraction leaves 0.856 x 180 GiB
    with pytest.raises(ConfigError) as err:
        kv_cache_bytes_per_gpu(DS, B200, 4, rule="sglang")
    assert "mem_fraction_static 0.856" in err.value.message
    assert "memory_rule sglang" in err.value.message
    assert "tensor_parallel_size >= 8 would fit" in err.value.message  # under its rule
    # ... while TensorRT-LLM's rule leaves it a KV cache
    assert kv_blocks_per_instance(DS, B200, 4, 0.9, 32, rule="trtllm",
                                  free_gpu_memory_fraction=0.8,
                                  max_num_batched_tokens=9728) > 0


def _cfg(rule: str, **extra: object) -> dict[str, object]:
    return {"model": {"profile": "llama-3.1-8b"},
            "step_time": {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "h100-sxm",
                          "memory_rule": rule, **extra},
            "cluster": {"mode": "colocated",
                        "colocated": {"scheduler": {"max_num_batched_tokens": 8192,
                                                    "max_num_seqs": 256}}},
            "workload": {"num_requests": 4}}


def test_the_config_names_the_rule_and_the_pool_follows_it() -> None:
    per_token = S.kv_bytes_per_token(LLAMA_8B)
    for rule, extra in (("pdsim", {}), ("vllm", {}), ("sglang", {"mem_fraction_static": 0.8}),
                        ("trtllm", {"free_gpu_memory_fraction": 0.5})):
        cfg = config_from_dict(_cfg(rule, **extra))
        plan = memory_plan(LLAMA_8B, H100, 1, rule=rule, mem_fraction_static=0.8,
                           free_gpu_memory_fraction=0.5, max_num_batched_tokens=8192,
                           max_num_seqs=256)
        assert cfg.num_blocks(Role.COLOCATED) == int(plan.kv) // (64 * int(per_token)), rule
    assert config_from_dict(_cfg("trtllm", free_gpu_memory_fraction=0.5)).num_blocks(
        Role.COLOCATED) < config_from_dict(_cfg("vllm")).num_blocks(Role.COLOCATED)


def test_an_unknown_rule_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict(_cfg("lmdeploy"))
    assert "memory_rule" in str(err.value)
