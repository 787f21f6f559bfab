"""KV blocks from memory: capacity minus weights and reserve, per GPU, with parallelism."""

from __future__ import annotations

import pytest

from pdsim.config import Role
from pdsim.errors import ConfigError
from pdsim.loader import config_from_dict
from pdsim.perf import sizes as S
from pdsim.perf.memory import (
    kv_blocks_per_instance,
    kv_cache_bytes_per_gpu,
    kv_cache_bytes_per_instance,
    kv_cache_gib_equivalent,
    num_kv_blocks,
    smallest_fitting_tensor_parallel_size,
)
from pdsim.perf.profiles import load_hardware, load_model_architecture, model_config_fields

H100 = load_hardware("h100-sxm")


def test_llama_8b_on_one_h100_by_hand() -> None:
    a = load_model_architecture("llama-3.1-8b")
    budget = 80 * 2**30 * 0.9 - 2 * 2**30
    weights = 2 * 8_029_995_008
    assert kv_cache_bytes_per_gpu(a, H100, 1, 0.9) == int(budget - weights)
    blocks = kv_blocks_per_instance(a, H100, 1, 0.9, 64)
    assert blocks == (int(budget) - weights) // (64 * 131_072) == 7045
    assert num_kv_blocks(59_101_937_664, 64, 131_072) == 7045


def test_parallelism_is_taken_into_account() -> None:
    a = load_model_architecture("llama-3.1-70b")
    b4 = kv_blocks_per_instance(a, H100, 4, 0.9, 16)
    b8 = kv_blocks_per_instance(a, H100, 8, 0.9, 16)
    assert b8 > 2 * b4  # KV heads split twice as far and the weight shard shrinks
    assert kv_cache_bytes_per_instance(a, H100, 8, 0.9) == 8 * kv_cache_bytes_per_gpu(
        a, H100, 8, 0.9)
    # MLA keeps its latent on every rank, so TP does not shrink the bytes per token
    ds = load_model_architecture("deepseek-v3")
    h200 = load_hardware("h200")
    per_gpu = kv_cache_bytes_per_gpu(ds, h200, 8, 0.9, drafter_modules=1)
    assert kv_blocks_per_instance(ds, h200, 8, 0.9, 64, drafter_modules=1) == \
        per_gpu // (64 * (61 + 1) * 1152)


def test_mamba_states_are_reserved() -> None:
    a = load_model_architecture("nemotron-h-8b")
    free = kv_blocks_per_instance(a, H100, 1, 0.9, 64)
    reserved = kv_blocks_per_instance(a, H100, 1, 0.9, 64, max_num_seqs=256)
    states = 256 * S.state_bytes_per_request(a)
    assert free - reserved == pytest.approx(states / (64 * 16_384), abs=1)


def test_weights_that_do_not_fit_are_a_config_error() -> None:
    a = load_model_architecture("llama-3.1-70b")
    with pytest.raises(ConfigError) as err:
        kv_cache_bytes_per_gpu(a, H100, 1, 0.9, path="cluster.decode")
    assert err.value.path == "cluster.decode"
    msg = err.value.message
    assert "does not fit on h100-sxm" in msg and "131.4 GiB" in msg
    assert "tensor_parallel_size >= 2 would fit" in msg
    assert smallest_fitting_tensor_parallel_size(a, H100) == 2
    ds = load_model_architecture("deepseek-v3")
    assert smallest_fitting_tensor_parallel_size(ds, H100) == 16
    with pytest.raises(ConfigError, match="not enough for one KV block"):
        kv_blocks_per_instance(load_model_architecture("llama-3.1-8b"), H100, 1, 0.212, 64)


def test_gib_equivalent_round_trips_through_the_root_config() -> None:
    a = load_model_architecture("deepseek-v3")
    h200 = load_hardware("h200")
    blocks = kv_blocks_per_instance(a, h200, 8, 0.9, 64, drafter_modules=1)
    fields = model_config_fields("deepseek-v3")
    gib = kv_cache_gib_equivalent(blocks, 64, 61 * 1152 + 1152)
    cfg = config_from_dict({
        "model": fields,
        "speculative": {"method": "mtp", "num_speculative_tokens": 1},
        "cluster": {"decode": {"kv_cache_gib": gib}},
    })
    assert cfg.kv_bytes_per_token == 62 * 1152
    assert cfg.num_blocks(Role.DECODE) == blocks
