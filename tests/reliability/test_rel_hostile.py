"""Hostile inputs of reliability round 2 (issue 17): each must end in a clear error (exit
2, a located line, no traceback) or a correct run, never a hang or a crash."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest
from rel_support import small
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.engine.kvcache import BlockPool
from pdsim.loader import load_config
from pdsim.simulation import simulate


def run_cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, " ".join((res.stdout + res.stderr).split())


def assert_error(args: list[str], *phrases: str) -> str:
    code, text = run_cli(*args)
    assert code == 2, (code, text)
    assert "Traceback" not in text
    for phrase in phrases:
        assert phrase in text, (phrase, text)
    return text


# ------------------------------------------------------------------ KV block pools


def test_a_huge_block_pool_costs_no_memory_per_block() -> None:
    t0 = time.perf_counter()
    pool = BlockPool(10**15)
    assert pool.allocate(1, 3) and pool.tables[1] == [2, 1, 0]
    assert pool.num_free == 10**15 - 3
    pool.free(1)
    assert pool.allocate(2, 5) and pool.tables[2] == [4, 3, 0, 1, 2]
    pool.check()
    assert time.perf_counter() - t0 < 1.0


def test_mamba_only_model_with_a_large_pool_runs() -> None:
    """0 KV bytes per token: the pool holds billions of blocks, the run stays small."""
    cfg = load_config(small({
        "model": {"layer_groups": [{"kind": "mamba", "num_layers": 4,
                                    "state_bytes_per_layer": 4096}],
                  "num_mtp_modules": 0},
        "speculative": {"method": "none", "num_speculative_tokens": 0},
        "cluster": {"prefill": {"kv_cache_gib": 40, "scheduler": {"num_blocks": None,
                                                                  "block_size": 1}},
                    "decode": {"kv_cache_gib": 40, "scheduler": {"num_blocks": None,
                                                                 "block_size": 1}}},
        "workload": {"num_requests": 5}}))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = simulate(cfg)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert len(result.records) == 5
    assert grown_kib < 500_000
