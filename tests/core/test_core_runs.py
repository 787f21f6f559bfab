"""Whole runs: every shipped config validates and runs; every request ends finished or
with a stated reason; every KV block is back in its pool at the end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from core_support import CONFIGS, make_config, terminal_problems

from pdsim import SimConfig, Simulation, load_config
from pdsim.engine.connector import prefill_backoff
from pdsim.engine.run_plan import MIN_RUN_STEPS, RUN_PLAN_ENTRIES, run_window_steps
from pdsim.loader import read_yaml

SMALL = 24


def small_overrides(path: Path) -> list[str]:
    """Overrides that make a shipped config a quick run, whatever its workload kind."""
    wl = read_yaml(path).get("workload") or {}
    if wl.get("trace") is not None:
        return [f"workload.trace.max_requests={SMALL}"]
    return [f"workload.num_requests={SMALL}"]


def assert_clean_end(sim: Simulation, res: Any) -> None:
    assert not terminal_problems(res.records)
    s = res.summary
    assert s["in_flight"] == 0
    assert s["completed"] + s["failed"] + s["rejected"] == s["num_requests"] == len(sim.requests)
    assert sum(s["failure_reasons"].values()) == s["failed"] + s["rejected"]
    for inst in sim.instances:
        inst.pool.check()
        assert inst.pool.num_used == 0, f"{inst.name} holds {inst.pool.num_used} blocks"
        assert not inst.running and not inst.waiting and not inst.receiving
        assert not inst.pinned


def test_there_are_shipped_configs() -> None:
    assert len(CONFIGS) >= 5


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_config_validates_and_runs(path: Path) -> None:
    full = load_config(path)  # validated as shipped
    assert full.name
    cfg = load_config(path, overrides=small_overrides(path))
    sim = Simulation(cfg)
    res = sim.run()
    assert_clean_end(sim, res)
    assert res.summary["completed"] >= 1
    if cfg.cluster.mode == "disaggregated":
        b = prefill_backoff(cfg)
        for r in res.records:
            if r["status"] == "finished":
                L = r["prompt_tokens"]
                assert r["p_prompt_tokens"] == (L - b if b < L else L)
                # D recomputes the backoff, or everything when it could load nothing
                assert r["tokens_recomputed_on_d"] in (b, L)
    if cfg.speculative.enabled:
        assert res.summary["num_drafts"] > 0
        assert 1.0 <= res.summary["acceptance_length"] \
            <= 1 + cfg.speculative.num_speculative_tokens


# ------------------------------------------------- terminal states and stated reasons

STRESS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "colocated": ("cluster.mode=colocated",),
    "too long for the model": ("model.max_model_len=330",
                               "workload.prompt_tokens={kind: uniform, mean_tokens: 300, "
                               "range_ratio: 0.5}"),
    # unbounded lengths: the config cannot know the longest request, so the engine
    # rejects the ones that do not fit at admission (bounded ones are a config error)
    "too big for the KV pool": ("cluster.decode.scheduler.num_blocks=22",
                                "workload.prompt_tokens={kind: lognormal, mean_tokens: 300, "
                                "cv: 0.5}"),
    "lease expires, fail": ("connector.kv_lease_s=0.001", "connector.setup_latency_s=0.01",
                            "connector.kv_load_failure_policy=fail"),
    "lease expires, recompute": ("connector.kv_lease_s=0.001",
                                 "connector.setup_latency_s=0.01",
                                 "connector.kv_load_failure_policy=recompute"),
    "slow link, push": ("connector.transfer_mode=push", "connector.link_bandwidth_gb_per_s=0.05"),
    "decode preemption": ("cluster.decode.scheduler.num_blocks=60",
                          "workload.arrivals.rate_per_s=1000",
                          "workload.output_tokens.tokens=150"),
    "closed loop": ("workload.arrivals={kind: closed_loop, concurrency: 3}",),
    "one output token": ("workload.output_tokens.tokens=1",),
    "one-token prompts, N=8": ("workload.prompt_tokens.tokens=1",
                               "speculative.num_speculative_tokens=8"),
    "one sequence per instance": ("cluster.decode.scheduler.max_num_seqs=1",
                                  "cluster.prefill.scheduler.max_num_seqs=1"),
    "tiny blocks, 2P3D push": ("cluster.prefill.count=2", "cluster.decode.count=3",
                               "cluster.prefill.scheduler.block_size=1",
                               "cluster.decode.scheduler.block_size=1",
                               "connector.transfer_mode=push", "router.policy=least_loaded"),
    "mamba N=8": ("speculative.num_speculative_tokens=8", "model.layer_groups=["
                  "{kind: attention, num_layers: 8, kv_bytes_per_token_per_layer: 1024}, "
                  "{kind: mamba, num_layers: 4, state_bytes_per_layer: 100000}]"),
}


@pytest.mark.parametrize("case", sorted(STRESS))
def test_every_request_ends_with_a_stated_reason(
        checked_run: Callable[[Simulation], Any], case: str) -> None:
    cfg: SimConfig = make_config("workload.num_requests=16", *STRESS[case])
    sim = Simulation(cfg)
    res = checked_run(sim)
    assert_clean_end(sim, res)
    reasons = res.summary["failure_reasons"]
    if case == "too long for the model":
        assert reasons.get("exceeds_max_model_len", 0) > 0
    if case == "too big for the KV pool":
        assert reasons.get("exceeds_kv_capacity", 0) > 0
    if case == "lease expires, fail":
        # one transfer-failure reason for all of them (its name is the engine's)
        assert res.summary["failed"] == 16 and len(reasons) == 1
    if case == "lease expires, recompute":
        assert res.summary["completed"] == 16
        assert all(r["d_local_prefill_tokens"] == r["prompt_tokens"] for r in res.records)
    if case in ("one output token", "one-token prompts, N=8", "tiny blocks, 2P3D push"):
        assert res.summary["completed"] == 16
    if case == "decode preemption":
        assert res.summary["preemptions"] > 0 and res.summary["completed"] == 16


def test_run_window_steps_bounds_a_plans_entries() -> None:
    """A run of few rows plans the cap; of many, at most RUN_PLAN_ENTRIES (steps x rows),
    never under MIN_RUN_STEPS nor over the cap."""
    cap = 512
    assert run_window_steps(1, cap) == cap
    assert run_window_steps(RUN_PLAN_ENTRIES // cap, cap) == cap
    for rows in range(1, 300):
        steps = run_window_steps(rows, cap)
        assert MIN_RUN_STEPS <= steps <= cap
        assert steps * rows <= RUN_PLAN_ENTRIES or steps == MIN_RUN_STEPS
        assert steps >= run_window_steps(rows + 1, cap)  # more rows, never more steps
    assert run_window_steps(1000, cap) == MIN_RUN_STEPS
    assert run_window_steps(1, 64) == 64  # a cap under MIN_RUN_STEPS is kept
