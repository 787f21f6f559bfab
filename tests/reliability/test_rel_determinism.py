"""Determinism: the same config and seed give byte-identical output files (in one process
and across processes with different hash seeds), and the named random streams keep the
workload fixed when only the routing policy changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rel_support import small, small_cfg, write_yaml

from pdsim.loader import load_config
from pdsim.simulation import Simulation, simulate
from pdsim.writers import write_run

REPO = Path(__file__).resolve().parents[2]
FILES = ("summary.json", "requests.csv", "config.resolved.yaml", "timeseries.csv")


def assert_same_outputs(a: Path, b: Path) -> None:
    for f in FILES:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    # bench_result.json carries the wall-clock date of the run, as vLLM's does
    ra, rb = (json.loads((d / "bench_result.json").read_text()) for d in (a, b))
    ra.pop("date", None)
    rb.pop("date", None)
    assert ra == rb

CONFIGS: dict[str, dict[str, Any]] = {
    "pd_mtp3": {},
    "colocated_closed_loop": {"cluster": {"mode": "colocated"},
                              "workload": {"arrivals": {"kind": "closed_loop",
                                                        "concurrency": 5}}},
    "2p2d_random_router": {"cluster": {"prefill": {"count": 2}, "decode": {"count": 2}},
                           "router": {"policy": "random"}},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_same_config_and_seed_give_identical_files(tmp_path: Path, name: str) -> None:
    cfg = small_cfg(CONFIGS[name])
    for run in ("a", "b"):
        write_run(simulate(cfg), tmp_path / run)
    assert_same_outputs(tmp_path / "a", tmp_path / "b")


def test_a_different_seed_gives_a_different_run(tmp_path: Path) -> None:
    a = simulate(small_cfg(seed=1)).summary
    b = simulate(small_cfg(seed=2)).summary
    assert a["mean_ttft_s"] != b["mean_ttft_s"]


def test_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    """Two CLI processes with different PYTHONHASHSEED: no set or dict-of-str ordering
    (or anything else process-specific) reaches the results."""
    cfg = write_yaml(tmp_path / "cfg.yaml", small(CONFIGS["2p2d_random_router"]))
    for run, hash_seed in (("a", "1"), ("b", "4242")):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-m", "pdsim", "run", str(cfg), "--out",
                        str(tmp_path / run)], check=True, env=env, cwd=REPO,
                       capture_output=True)
    assert_same_outputs(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("patch", [
    {},
    {"workload": {"arrivals": {"kind": "gamma", "rate_per_s": 10.0, "cv": 2.0}}},
    {"workload": {"arrivals": {"kind": "closed_loop", "concurrency": 4}}},
    {"workload": {"num_requests": None,
                  "trace": {"kind": "mooncake", "path": "pkg:traces/mooncake_sample.jsonl",
                            "max_requests": 50}}},
], ids=["poisson", "gamma", "closed_loop", "mooncake_trace"])
def test_routing_policy_leaves_arrivals_and_lengths_unchanged(patch: dict[str, Any]) -> None:
    specs = {}
    for policy in ("round_robin", "least_loaded", "random"):
        cfg = load_config(small(patch, router__policy=policy,
                                cluster__prefill__count=2, cluster__decode__count=3))
        specs[policy] = Simulation(cfg).specs
    ref = specs["round_robin"]
    assert len(ref) > 0
    for policy, s in specs.items():
        for field in ("arrival_s", "prompt_tokens", "output_tokens"):
            assert np.array_equal(getattr(s, field), getattr(ref, field), equal_nan=True), (
                policy, field)
        assert s.hash_ids == ref.hash_ids
        assert s.closed_loop_concurrency == ref.closed_loop_concurrency


def test_routing_policy_leaves_the_served_workload_unchanged() -> None:
    """Not only the generated specs: the requests the run reports carry the same arrival
    times and lengths whatever the router did with them."""
    out = {}
    for policy in ("round_robin", "random"):
        res = simulate(small_cfg(router__policy=policy, cluster__decode__count=2))
        out[policy] = [(r["arrival_s"], r["prompt_tokens"], r["target_output_tokens"])
                       for r in res.records]
    assert out["round_robin"] == out["random"]
