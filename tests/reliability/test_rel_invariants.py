"""Engine invariants (``pdsim.invariants``) checked after every SimPy event.

Three kinds of tests: the invariants hold on a set of small configs that reach every
engine path (P/D pull and push, colocated, Mamba, MTP-8 with the backoff off and on, KV
pools small enough to preempt, several P and D instances, lease expiry, closed loops);
they hold on random small configs (hypothesis); and the checker catches each kind of
violation when the engine is deliberately broken (so a passing run means something).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_support import examples, small, small_cfg

from pdsim.cluster.kv_transfers import KVTransfers
from pdsim.cluster.proxy import Proxy
from pdsim.config import Role
from pdsim.engine.instance import Instance
from pdsim.engine.kvcache import BlockPool
from pdsim.invariants import InvariantViolation, check_invariants, run_checked
from pdsim.loader import load_config
from pdsim.simulation import Simulation
from pdsim.spec_decode.acceptance import AcceptanceSampler

MTP8_RATES = [0.7568, 0.6011, 0.4976, 0.4113, 0.3538, 0.2980, 0.2608, 0.2229]
MAMBA_MODEL = {
    "layer_groups": [
        {"kind": "attention", "num_layers": 2, "kv_bytes_per_token_per_layer": 256},
        {"kind": "mamba", "num_layers": 6, "state_bytes_per_layer": 65536},
    ],
    "num_mtp_modules": 0,
}
SLIDING_MODEL = {
    "layer_groups": [
        {"kind": "attention", "num_layers": 2, "kv_bytes_per_token_per_layer": 256},
        {"kind": "sliding_window", "num_layers": 4, "kv_bytes_per_token_per_layer": 256,
         "window_tokens": 64},
    ],
}

CASES: dict[str, dict[str, Any]] = {
    "pd_pull_mtp3": {},
    "pd_push_mtp3": {"connector": {"transfer_mode": "push"}},
    "colocated_mtp3": {"cluster": {"mode": "colocated"}},
    # Mamba state costs 48 blocks a request here: D gets room for all 16
    "mamba_hybrid_pd": {"model": MAMBA_MODEL, "speculative": {"method": "none",
                                                             "num_speculative_tokens": 0},
                        "cluster": {"decode": {"scheduler": {"num_blocks": 2048}}}},
    "mamba_hybrid_colocated": {"model": MAMBA_MODEL, "cluster": {"mode": "colocated"},
                               "speculative": {"method": "none", "num_speculative_tokens": 0}},
    "sliding_window_mtp3": {"model": SLIDING_MODEL},
    "mtp8_backoff_off": {"speculative": {"num_speculative_tokens": 8,
                                         "acceptance": {"kind": "per_position",
                                                        "rates": MTP8_RATES}},
                         "connector": {"prefill_backoff": "off"}},
    "mtp8_backoff_auto": {"speculative": {"num_speculative_tokens": 8,
                                          "acceptance": {"kind": "per_position",
                                                         "rates": MTP8_RATES}},
                          "connector": {"prefill_backoff": "auto"}},
    "eagle3_pd": {"speculative": {"method": "eagle3", "num_speculative_tokens": 2,
                                  "acceptance": {"kind": "constant", "rate": 0.7}}},
    "single_module_mtp_n3": {"model": {"num_mtp_modules": 1}},
    "no_spec_pd": {"speculative": {"method": "none", "num_speculative_tokens": 0}},
    "small_p_pool_preempts": {"cluster": {"prefill": {"scheduler": {
                                  "num_blocks": 20, "max_num_batched_tokens": 64}}},
                              "workload": {"arrivals": {"kind": "poisson",
                                                        "rate_per_s": 200.0}}},
    "small_colocated_pool_preempts": {
        "cluster": {"mode": "colocated", "colocated": {"scheduler": {"num_blocks": 40}}}},
    "2p3d_least_loaded": {"cluster": {"prefill": {"count": 2}, "decode": {"count": 3}},
                          "router": {"policy": "least_loaded"},
                          "workload": {"num_requests": 40}},
    "3p2d_random_push": {"cluster": {"prefill": {"count": 3}, "decode": {"count": 2}},
                         "router": {"policy": "random"},
                         "connector": {"transfer_mode": "push"}},
    "closed_loop_pd": {"workload": {"arrivals": {"kind": "closed_loop", "concurrency": 4}}},
    "closed_loop_colocated": {"cluster": {"mode": "colocated"},
                              "workload": {"arrivals": {"kind": "closed_loop",
                                                        "concurrency": 6}}},
    "lease_expires_recompute": {"connector": {"kv_lease_s": 0.0005, "setup_latency_s": 0.002,
                                              "kv_load_failure_policy": "recompute"}},
    "lease_expires_fail": {"connector": {"kv_lease_s": 0.0005, "setup_latency_s": 0.002,
                                         "kv_load_failure_policy": "fail"}},
    "slow_link_shared": {"connector": {"link_bandwidth_gb_per_s": 0.05},
                         "cluster": {"prefill": {"count": 2}}},
    "no_chunked_prefill": {"cluster": {"prefill": {"scheduler": {
        "enable_chunked_prefill": False, "max_num_batched_tokens": 2048}}}},
    "long_prefill_threshold": {"cluster": {"prefill": {"scheduler": {
        "long_prefill_token_threshold": 48}}}},
    "prefix_caching_flag": {"cluster": {"decode": {"scheduler": {
        "enable_prefix_caching": True}}}},
    "short_outputs": {"workload": {"output_tokens": {"kind": "fixed", "tokens": 1}}},
    "rejections": {"model": {"max_model_len": 160}},
    "prefix_caching_mooncake_trace": {
        "model": {"max_model_len": 200000},
        "workload": {"num_requests": None,
                     "trace": {"kind": "mooncake", "path": "pkg:traces/mooncake_sample.jsonl",
                               "max_requests": 25}},
        "cluster": {"prefill": {"scheduler": {"enable_prefix_caching": True,
                                              "num_blocks": 4096,
                                              "max_num_batched_tokens": 2048}},
                    "decode": {"scheduler": {"num_blocks": 8192}}}},
    # faults (pdsim.faults)
    "faults_transfer_failures_recompute": {
        "faults": {"kv_transfer_failure_probability": 0.3},
        "connector": {"kv_load_failure_policy": "recompute"}},
    "faults_transfer_failures_fail": {
        "faults": {"kv_transfer_failure_probability": 0.3},
        "connector": {"kv_load_failure_policy": "fail"}},
    "faults_transfer_failures_at_times": {"faults": {"kv_transfer_failures_at_s": [0.1, 0.3]}},
    "faults_transfer_timeouts": {"faults": {"kv_transfer_timeout_s": 0.01},
                                 "connector": {"link_bandwidth_gb_per_s": 0.01}},
    "faults_d_outage_retry": {
        "cluster": {"decode": {"count": 2}},
        "faults": {"instance_outages": [{"instance": "D0", "start_s": 0.3, "end_s": 0.6}]}},
    "faults_only_d_down_retry": {
        "faults": {"instance_outages": [{"instance": "D0", "start_s": 0.2, "end_s": 0.5}]}},
    "faults_p_outage_fail": {
        "cluster": {"prefill": {"count": 2}},
        "faults": {"outage_policy": "fail",
                   "instance_outages": [{"instance": "P0", "start_s": 0.2, "end_s": 0.5}]}},
    "faults_colocated_outage": {
        "cluster": {"mode": "colocated", "colocated": {"count": 2}},
        "faults": {"instance_outages": [{"instance": "C0", "start_s": 0.2, "end_s": 0.5}]}},
    "faults_link_degradation": {
        "faults": {"link_degradations": [{"start_s": 0.1, "end_s": 0.8,
                                          "bandwidth_factor": 0.01}]}},
    "faults_everything": {
        "cluster": {"prefill": {"count": 2}, "decode": {"count": 2}},
        "faults": {"kv_transfer_failure_probability": 0.2, "kv_transfer_timeout_s": 0.05,
                   "instance_outages": [{"instance": "D1", "start_s": 0.2, "end_s": 0.4},
                                        {"instance": "P0", "start_s": 0.5, "end_s": 0.7}],
                   "link_degradations": [{"link": "P1->D0", "start_s": 0.0, "end_s": 1.0,
                                          "bandwidth_factor": 0.05}]}},
    "gamma_bursty_long_prompts": {
        "workload": {"arrivals": {"kind": "gamma", "rate_per_s": 30.0, "cv": 3.0},
                     "prompt_tokens": {"kind": "lognormal", "mean_tokens": 300, "cv": 1.0,
                                       "max_tokens": 1500}}},
}

# A request preempted on D after its remote KV landed must recompute locally (P freed
# its blocks long ago), as vLLM's NIXL connector does once it clears do_remote_prefill
# after allocating; a second transfer of freed blocks would break timestamps and fail it.
D_PREEMPTION_CASES: dict[str, dict[str, Any]] = {
    "small_d_pool_preempts_recompute": {
        "cluster": {"decode": {"scheduler": {"num_blocks": 40}}},
        "connector": {"kv_load_failure_policy": "recompute"},
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 50.0}}},
    "small_d_pool_preempts_fail": {
        "cluster": {"decode": {"scheduler": {"num_blocks": 40}}},
        "connector": {"kv_load_failure_policy": "fail"},
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 50.0}}},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_invariants_hold_after_every_event(name: str) -> None:
    cfg = small_cfg(CASES[name])
    res = run_checked(cfg)
    s = res.summary
    assert s["completed"] + s["failed"] + s["rejected"] == s["num_requests"]


@pytest.mark.parametrize("name", sorted(D_PREEMPTION_CASES))
def test_invariants_hold_when_d_preempts(name: str) -> None:
    run_checked(small_cfg(D_PREEMPTION_CASES[name]))


# D once livelocked here: requests whose KV had landed held most of its pool while they
# waited for a batch slot, so the running request could not grow, preempted itself,
# re-prefilled and preempted itself again (tens of thousands of times).
def test_d_never_livelocks_on_landed_requests_holding_its_pool() -> None:
    # found by test_invariants_hold_on_random_small_configs with small D pools
    run_checked(load_config(small({
        "seed": 46752, "model": {"num_mtp_modules": 1}, "router": {"policy": "random"},
        "speculative": {"num_speculative_tokens": 1,
                        "acceptance": {"kind": "constant", "rate": 0.0}},
        "cluster": {
            "prefill": {"scheduler": {"block_size": 8, "max_num_batched_tokens": 116,
                                      "max_num_seqs": 1, "num_blocks": 79}},
            "decode": {"scheduler": {"block_size": 8, "max_num_batched_tokens": 116,
                                     "max_num_seqs": 1, "num_blocks": 43}}},
        "connector": {"transfer_mode": "push"},
        "workload": {"num_requests": 7,
                     "arrivals": {"kind": "gamma", "rate_per_s": 40.0, "cv": 4.0},
                     "prompt_tokens": {"kind": "uniform", "mean_tokens": 116,
                                       "range_ratio": 0.9},
                     "output_tokens": {"kind": "uniform", "mean_tokens": 47,
                                       "range_ratio": 0.9}}})), max_events=50_000)


# An instance that runs several decode steps ahead must stop before a scheduled outage:
# this seed once put an outage inside such a run.
def test_invariants_hold_when_an_outage_cuts_a_decode_run() -> None:
    run_checked(load_config(small({
        "seed": 2656,
        "model": {"num_mtp_modules": 1},
        "speculative": {"num_speculative_tokens": 2,
                        "acceptance": {"kind": "constant", "rate": 0.875}},
        "cluster": {"mode": "colocated", "colocated": {"scheduler": {
            "max_num_seqs": 2, "max_num_batched_tokens": 16, "block_size": 8,
            "num_blocks": 12}}},
        "workload": {"num_requests": 2, "arrivals": {"kind": "constant", "rate_per_s": 5.0},
                     "prompt_tokens": {"kind": "uniform", "mean_tokens": 1,
                                       "range_ratio": 0.9},
                     "output_tokens": {"kind": "uniform", "mean_tokens": 40,
                                       "range_ratio": 0.9}},
        "faults": {"max_retries": 0, "instance_outages": [
            {"instance": "C0", "start_s": 0.40625, "end_s": 1.40625}]}})))


def test_the_cases_reach_the_paths_they_are_named_for() -> None:
    """Guards against a case silently testing nothing (e.g. a pool that never preempts)."""
    def run(name: str) -> dict[str, Any]:
        return run_checked(small_cfg(CASES[name]), every_event=False).summary

    assert run("small_p_pool_preempts")["preemptions"] > 0
    assert run("small_colocated_pool_preempts")["preemptions"] > 0
    s = run("lease_expires_recompute")
    assert s["kv_lease_expired"] > 0 and s["failed"] == 0
    s = run("lease_expires_fail")
    assert s["failed"] > 0 and len(s["failure_reasons"]) == 1  # the KV load failed
    assert run("rejections")["rejected"] > 0
    assert run("prefix_caching_mooncake_trace")["prefix_cache_hit_rate"] > 0
    assert run("faults_only_d_down_retry")["faults"]["retries"] > 0
    s = run("faults_transfer_failures_fail")
    assert s["faults"]["kv_transfer_failures"] > 0 and s["failed"] > 0
    assert run("faults_transfer_timeouts")["faults"]["kv_transfer_timeouts"] > 0
    assert run("faults_everything")["faults"]["instance_outages"] == 2
    assert run("mtp8_backoff_auto")["tokens_recomputed_on_d"] > run(
        "mtp8_backoff_off")["tokens_recomputed_on_d"]


# ------------------------------------------------------------- random small configs


@st.composite
def random_configs(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(["disaggregated", "colocated"]))
    method = draw(st.sampled_from(["none", "mtp", "mtp", "eagle"]))
    n = 0 if method == "none" else draw(st.integers(1, 6))
    block = draw(st.sampled_from([8, 16, 32]))
    seqs = draw(st.integers(1, 8))
    prompt = draw(st.integers(1, 200))
    output = draw(st.integers(1, 60))
    longest = 2 * (prompt + output) + 2 + n  # the uniform ranges' tops, room to decode
    fit = -(-longest // block) + 1
    num_requests = draw(st.integers(1, 25))
    # Pools range from one longest request (preemption at every turn) to all requests at
    # once (D also allocates for requests still receiving KV, beyond max_num_seqs).
    d_blocks = draw(st.integers(fit, num_requests * fit + 64))
    small_blocks = draw(st.integers(fit, 4 * fit))
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": n}
    if n:
        spec["acceptance"] = {"kind": "constant", "rate": draw(st.floats(0.0, 1.0))}
    sched = {"max_num_seqs": seqs, "block_size": block,
             "max_num_batched_tokens": max(seqs * (1 + n), draw(st.integers(16, 512)))}
    patch: dict[str, Any] = {
        "seed": draw(st.integers(0, 2**16)),
        "model": {"num_mtp_modules": draw(st.sampled_from([1, 8])),
                  "max_model_len": 4096},
        "speculative": spec,
        "cluster": {
            "mode": mode,
            "prefill": {"count": draw(st.integers(1, 2)),
                        "scheduler": {**sched, "num_blocks": small_blocks}},
            "decode": {"count": draw(st.integers(1, 2)),
                       "scheduler": {**sched, "num_blocks": d_blocks}},
            "colocated": {"count": draw(st.integers(1, 2)),
                          "scheduler": {**sched, "num_blocks": small_blocks}},
        },
        "connector": {"transfer_mode": draw(st.sampled_from(["pull", "push"])),
                      "prefill_backoff": draw(st.sampled_from(["auto", "off"])),
                      "link_bandwidth_gb_per_s": draw(st.sampled_from([0.05, 7.0, 1e4]))},
        "router": {"policy": draw(st.sampled_from(["round_robin", "least_loaded",
                                                    "random"]))},
        "workload": {
            "num_requests": num_requests,
            "arrivals": draw(st.sampled_from([
                {"kind": "poisson", "rate_per_s": 50.0},
                {"kind": "constant", "rate_per_s": 5.0},
                {"kind": "gamma", "rate_per_s": 40.0, "cv": 4.0},
                {"kind": "closed_loop", "concurrency": 3}])),
            "prompt_tokens": {"kind": "uniform", "mean_tokens": prompt, "range_ratio": 0.9},
            "output_tokens": {"kind": "uniform", "mean_tokens": output, "range_ratio": 0.9},
        },
    }
    if draw(st.booleans()):
        names = ([f"C{i}" for i in range(patch["cluster"]["colocated"]["count"])]
                 if mode == "colocated" else
                 [f"P{i}" for i in range(patch["cluster"]["prefill"]["count"])]
                 + [f"D{i}" for i in range(patch["cluster"]["decode"]["count"])])
        start = draw(st.floats(0.0, 1.0))
        patch["faults"] = {
            "kv_transfer_failure_probability": draw(st.sampled_from([0.0, 0.2, 1.0])),
            "kv_transfer_timeout_s": draw(st.sampled_from([None, 0.005, 0.05])),
            "outage_policy": draw(st.sampled_from(["retry", "fail"])),
            "max_retries": draw(st.integers(0, 2)),
            # one outage per instance at most: overlapping ones are refused
            "instance_outages": [{"instance": name, "start_s": start,
                                  "end_s": start + draw(st.floats(0.01, 1.0))}
                                 for name in draw(st.lists(st.sampled_from(names),
                                                           max_size=2, unique=True))],
            "link_degradations": draw(st.sampled_from([
                [], [{"start_s": 0.0, "end_s": 0.5, "bandwidth_factor": 0.01}]])),
        }
        patch["connector"]["kv_load_failure_policy"] = draw(st.sampled_from(["fail",
                                                                            "recompute"]))
    return small(patch)


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_configs())
def test_invariants_hold_on_random_small_configs(data: dict[str, Any]) -> None:
    cfg = load_config(data)
    # a few thousand events suffice for 25 tiny requests: far more means a livelock
    res = run_checked(cfg, max_events=200_000)
    assert res.summary["in_flight"] == 0


# ------------------------------------------- the checker catches broken engines

def _broken(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, fn: Any) -> None:
    monkeypatch.setattr(target, name, fn)


def test_catches_a_leaked_p_block(monkeypatch: pytest.MonkeyPatch) -> None:
    def release_without_free(self: Instance, req: Any) -> int:
        self.pinned.pop(req.id, None)  # forgets to free the blocks
        return 0

    _broken(monkeypatch, Instance, "release_pinned", release_without_free)
    with pytest.raises(InvariantViolation, match="neither queued nor pinned"):
        run_checked(small_cfg())


def test_catches_a_p_free_that_never_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Instance, "release_pinned", lambda self, req: 0)
    with pytest.raises(InvariantViolation):
        run_checked(small_cfg({"connector": {"kv_lease_s": 1e6}}))


def test_catches_a_double_free_of_p_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Instance.release_pinned

    def release_twice(self: Instance, req: Any) -> int:
        blocks = list(self.pool.tables.get(req.id, ()))
        n = original(self, req)
        if n and self.role is Role.PREFILL:
            self.pool.tables[req.id] = blocks  # the stale table is freed again
            self.pool.free(req.id)
        return n

    monkeypatch.setattr(Instance, "release_pinned", release_twice)
    with pytest.raises(InvariantViolation, match=r"freed request .* 2 times"):
        run_checked(small_cfg())


def test_catches_d_computing_before_the_kv_landed(monkeypatch: pytest.MonkeyPatch) -> None:
    original = KVTransfers.start

    def land_at_once(self: KVTransfers, req: Any, d: Instance) -> None:
        original(self, req, d)
        d.kv_landed(req)  # D starts computing while the blocks are still in flight

    monkeypatch.setattr(KVTransfers, "start", land_at_once)
    with pytest.raises(InvariantViolation, match=r"landed|in flight"):
        run_checked(small_cfg())


def test_catches_disordered_timestamps(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Proxy.on_prefill_done

    def early_d_queue(self: Proxy, req: Any, p: Instance) -> None:
        original(self, req, p)
        req.d_queued_s = req.p_start_s - 1e-3

    monkeypatch.setattr(Proxy, "on_prefill_done", early_d_queue)
    with pytest.raises(InvariantViolation, match=r"d_queued_s=.* before p_end_s"):
        run_checked(small_cfg())


def test_catches_more_accepted_than_drafted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = AcceptanceSampler._accepted

    def overdraw(self: AcceptanceSampler, u: np.ndarray, survival: Any) -> np.ndarray:
        return np.asarray(original(self, u, survival)) + 1

    monkeypatch.setattr(AcceptanceSampler, "_accepted", overdraw)
    with pytest.raises(InvariantViolation, match="accepted"):
        run_checked(small_cfg())


def test_catches_a_lost_request(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Proxy.dispatch

    def drop_some(self: Proxy, req: Any) -> None:
        if req.id != 5:
            original(self, req)

    monkeypatch.setattr(Proxy, "dispatch", drop_some)
    with pytest.raises(InvariantViolation, match=r"never dispatched|deadlock"):
        run_checked(small_cfg())


def test_catches_a_block_lost_from_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    original = BlockPool.allocate

    def leaky_allocate(self: BlockPool, owner: int, n: int) -> bool:
        ok = original(self, owner, n)
        if ok and n > 0 and owner == 3:  # a block vanishes (a freed one, else a fresh one)
            if self._free:
                self._free.pop()
            else:
                self._fresh += 1
        return ok

    monkeypatch.setattr(BlockPool, "allocate", leaky_allocate)
    with pytest.raises(InvariantViolation, match=r"KV pool|used"):
        run_checked(small_cfg())


def test_catches_a_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Instance, "notify", lambda self: None)  # idle engines never wake
    with pytest.raises(InvariantViolation, match="deadlock"):
        run_checked(small_cfg())


def test_check_invariants_is_quiet_on_a_fresh_and_a_finished_simulation() -> None:
    sim = Simulation(small_cfg())
    check_invariants(sim)
    sim.run()
    check_invariants(sim)
    assert all(not math.isnan(r.finish_s) for r in sim.requests)


def test_catches_a_hand_over_record_that_miscounts_the_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    original = Instance.kv_landed

    def landed_with_one_byte_more(self: Instance, req: Any) -> None:
        req.handover.kv_nbytes += 1  # the record says more moved than P's layout gives
        original(self, req)

    monkeypatch.setattr(Instance, "kv_landed", landed_with_one_byte_more)
    with pytest.raises(InvariantViolation, match=r"hand-over record: \d+ bytes landed"):
        run_checked(small_cfg())


def test_catches_d_admitting_on_a_record_naming_another_d(
        monkeypatch: pytest.MonkeyPatch) -> None:
    original = Instance.kv_landed

    def landed_elsewhere(self: Instance, req: Any) -> None:
        req.handover.d_name = "elsewhere"
        original(self, req)

    monkeypatch.setattr(Instance, "kv_landed", landed_elsewhere)
    with pytest.raises(InvariantViolation, match="hand-over record"):
        run_checked(small_cfg())
