"""Metamorphic and differential tests: change the input in a way whose effect on the
output is known, and check exactly that effect (and nothing else) appears."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from rel_support import small

from pdsim.config import Role, SimConfig
from pdsim.invariants import run_checked
from pdsim.loader import load_config
from pdsim.output import to_json
from pdsim.perf.base import StepBatch
from pdsim.perf.build import build_step_time_model
from pdsim.results import Results
from pdsim.simulation import simulate

# Requests 2 s apart, each done in well under a second: no two requests ever share an
# instance, a link or a batch, so a change that only shifts one request's timeline
# cannot reach another's, and the acceptance stream is consumed in the same order.
ISOLATED: dict[str, Any] = {
    "workload": {"num_requests": 12, "arrivals": {"kind": "constant", "rate_per_s": 0.5},
                 "prompt_tokens": {"kind": "uniform", "mean_tokens": 200, "range_ratio": 0.8},
                 "output_tokens": {"kind": "uniform", "mean_tokens": 30, "range_ratio": 0.5}},
    # slow enough that the transfer is a visible part of each timeline (~0.1 s)
    "connector": {"link_bandwidth_gb_per_s": 0.005, "setup_latency_s": 0.004,
                  "handshake_s": 0.002},
}


def _infinitely_fast(data: dict[str, Any]) -> SimConfig:
    """``data`` with an infinitely fast link and no setup or handshake latency. The
    loader refuses inf (not a YAML/JSON config value); JSON's Infinity reaches pydantic."""
    fast = small(data, connector__link_bandwidth_gb_per_s=math.inf,
                 connector__setup_latency_s=0.0, connector__handshake_s=0.0)
    cfg = SimConfig.model_validate_json(json.dumps(fast))
    assert cfg.connector.link_bandwidth_gb_per_s == math.inf
    return cfg


def _by_id(res: Results) -> dict[int, dict[str, Any]]:
    return {r["request_id"]: r for r in res.records}


def _transfer_s(r: dict[str, Any]) -> float:
    return float(r["transfer_end_s"] - r["transfer_start_s"])


@pytest.mark.parametrize("transfer_mode", ["pull", "push"])
def test_infinitely_fast_link_removes_transfer_time_and_nothing_else(
        transfer_mode: str) -> None:
    data = small(ISOLATED, connector__transfer_mode=transfer_mode)
    slow = load_config(data)
    fast = _infinitely_fast(data)
    a, b = _by_id(run_checked(slow)), _by_id(run_checked(fast))
    assert a.keys() == b.keys()
    moved = 0
    for rid, ra in a.items():
        rb = b[rid]
        assert ra["status"] == rb["status"] == "finished"
        t = _transfer_s(ra)
        assert t > 0.01 and _transfer_s(rb) == 0.0
        moved += 1
        # P's side and the hand-over start are untouched ...
        for k in ("arrival_s", "p_queued_s", "p_start_s", "p_end_s", "d_queued_s",
                  "transfer_start_s"):
            assert rb[k] == pytest.approx(ra[k], abs=1e-12), (rid, k)
        # ... everything after the transfer moves earlier by exactly its duration ...
        for k in ("first_token_s", "finish_s", "ttft_s", "e2e_s"):
            assert rb[k] == pytest.approx(ra[k] - t, abs=1e-9), (rid, k)
        assert rb["tpot_s"] == pytest.approx(ra["tpot_s"], abs=1e-12)
        # ... and nothing else changes
        for k in ("output_tokens", "p_prompt_tokens", "kv_bytes_transferred",
                  "tokens_recomputed_on_d", "d_local_prefill_tokens", "num_chunks",
                  "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                  "accepted_per_pos", "num_preemptions", "prefill_instance",
                  "decode_instance"):
            assert rb[k] == ra[k], (rid, k)
    assert moved == 12


def test_infinitely_fast_link_under_load_only_zeroes_transfers() -> None:
    """With requests overlapping, timelines interact, but the transfers still vanish and
    the bytes moved do not change."""
    data = small({"workload": {"num_requests": 40}})
    slow = run_checked(load_config(data))
    fast = run_checked(_infinitely_fast(data))
    assert all(_transfer_s(r) == 0.0 for r in fast.records)
    assert fast.summary["kv_bytes_transferred"] == slow.summary["kv_bytes_transferred"]
    assert fast.summary["kv_transfer_time_s"] == 0.0 < slow.summary["kv_transfer_time_s"]


# ------------------------------------------------------------------ doubling

def _latencies(res: Results) -> dict[str, np.ndarray]:
    done = [r for r in res.records if r["status"] == "finished"]
    return {k: np.asarray([r[k] for r in done], dtype=np.float64)
            for k in ("ttft_s", "tpot_s", "e2e_s")}


def test_doubling_instances_and_rate_keeps_latency_distributions() -> None:
    """1P1D at 20 req/s against 2P2D at 40 req/s with the least-loaded router.

    Each instance sees the same load, so per-request latencies should be distributed
    alike. Two effects separate them, and set the tolerances:
    - sampling noise: 1000 and 2000 requests; over seeds 0-4 the medians of TTFT, TPOT
      and E2E moved by at most 1.1 %, the 90th percentiles by at most 4.2 %;
    - pooling: a router choosing the less loaded of two instances queues less than one
      instance alone (join-the-shorter-queue), so the doubled cluster's tail can only be
      better, here by ~4 % on TTFT p90 at P utilization ~0.3.
    Hence: medians within 3 %, 90th percentiles within -8 % / +3 %. A router that sent
    everything to one instance, or a cluster that ignored the second P or D, breaks both.
    """
    def run(n: int, rate: float, num: int) -> dict[str, np.ndarray]:
        cfg = load_config(small({
            "seed": 3, "router": {"policy": "least_loaded"},
            "cluster": {"prefill": {"count": n}, "decode": {"count": n}},
            "workload": {"num_requests": num,
                         "arrivals": {"kind": "poisson", "rate_per_s": rate}}}))
        res = simulate(cfg)
        assert res.summary["completed"] == num
        return _latencies(res)

    one, two = run(1, 20.0, 1000), run(2, 40.0, 2000)
    for k in one:
        med = np.median(two[k]) / np.median(one[k]) - 1
        p90 = np.percentile(two[k], 90) / np.percentile(one[k], 90) - 1
        assert abs(med) <= 0.03, (k, med)
        assert -0.08 <= p90 <= 0.03, (k, p90)


# ------------------------------------------------------------ backoff switch

@pytest.mark.parametrize("patch", [
    {"speculative": {"method": "none", "num_speculative_tokens": 0}},
    # lookahead 1 (EAGLE, single-module MTP): backoff max(0, 1 - 1) = 0 either way
    {"speculative": {"method": "eagle3", "num_speculative_tokens": 2,
                     "acceptance": {"kind": "constant", "rate": 0.7}}},
    {"model": {"num_mtp_modules": 1}},
    # Mamba: backoff 1 either way
    {"speculative": {"method": "none", "num_speculative_tokens": 0},
     "model": {"layer_groups": [
         {"kind": "attention", "num_layers": 2, "kv_bytes_per_token_per_layer": 256},
         {"kind": "mamba", "num_layers": 4, "state_bytes_per_layer": 8192}]}},
], ids=["no_spec", "eagle3", "single_module_mtp", "mamba_no_spec"])
def test_backoff_switch_changes_nothing_without_multi_module_mtp(
        patch: dict[str, Any]) -> None:
    runs = {}
    for backoff in ("auto", "off"):
        cfg = load_config(small(patch, connector__prefill_backoff=backoff))
        assert not cfg.use_multi_module_mtp
        res = run_checked(cfg)
        runs[backoff] = (to_json(res.summary), res.records)
    assert runs["auto"][0] == runs["off"][0]
    assert to_json(runs["auto"][1]) == to_json(runs["off"][1])


def test_backoff_switch_matters_with_multi_module_mtp() -> None:
    """The contrast that keeps the test above honest."""
    s = {b: run_checked(load_config(small(connector__prefill_backoff=b))).summary
         for b in ("auto", "off")}
    assert s["auto"]["tokens_recomputed_on_d"] > s["off"]["tokens_recomputed_on_d"]
    assert to_json(s["auto"]) != to_json(s["off"])


# ------------------------------------------------------------- acceptance 0

PROMPT, OUTPUT = 100, 24
STEP_TIME = {"kind": "simple", "overhead_s": 0.002, "weights_floor_s": 0.0,
             "per_token_s": 1e-4, "per_context_token_s": 1e-7,
             "per_attention_pair_s": 1e-10, "drafter_floor_s": 5e-4,
             "drafter_token_cost_ratio": 0.25}


def _zero_acceptance_cfg(n: int, modules: int) -> SimConfig:
    spec: dict[str, Any] = {"method": "none", "num_speculative_tokens": 0}
    if n:
        spec = {"method": "mtp", "num_speculative_tokens": n,
                "acceptance": {"kind": "constant", "rate": 0.0}}
    return load_config(small({
        "model": {"num_mtp_modules": modules},
        "speculative": spec, "step_time": STEP_TIME,
        "cluster": {"mode": "colocated"},
        "workload": {"num_requests": 4, "arrivals": {"kind": "constant", "rate_per_s": 1.0},
                     "prompt_tokens": {"kind": "fixed", "tokens": PROMPT},
                     "output_tokens": {"kind": "fixed", "tokens": OUTPUT}}}))


@pytest.mark.parametrize(("n", "modules"), [(1, 1), (3, 8), (8, 8)])
def test_zero_acceptance_costs_exactly_the_drafter_and_verifier_extra(
        n: int, modules: int) -> None:
    """Acceptance 0: both runs emit one token per step, so they take the same steps over
    the same contexts; MTP-N is slower by the step-time model's extra for the N verified
    drafts, the drafter passes and (multi-module) the repair re-prefill of N - 1
    rejected positions, and in the prefill step by the drafter modules' prefill."""
    base_cfg, spec_cfg = _zero_acceptance_cfg(0, modules), _zero_acceptance_cfg(n, modules)
    base_model = build_step_time_model(base_cfg, Role.COLOCATED)
    spec_model = build_step_time_model(spec_cfg, Role.COLOCATED)
    pairs = PROMPT * (PROMPT + 1) / 2
    prefill_extra = (spec_model.step_time_s(StepBatch(PROMPT, pairs, 0, 0, 0, 0))
                     - base_model.step_time_s(StepBatch(PROMPT, pairs, 0, 0, 0, 0)))
    repair = n - 1 if spec_cfg.use_multi_module_mtp else 0
    decode_extra = 0.0
    for j in range(OUTPUT - 1):  # the prefill step emits the first token
        ctx = PROMPT + j
        decode_extra += (
            spec_model.step_time_s(StepBatch(0, 0.0, 1, 1 + n, ctx, repair if j else 0))
            - base_model.step_time_s(StepBatch(0, 0.0, 1, 1, ctx, 0)))
    assert prefill_extra > 0 and decode_extra > 0

    base, spec = _by_id(run_checked(base_cfg)), _by_id(run_checked(spec_cfg))
    for rid, rb in base.items():
        rs = spec[rid]
        assert rs["num_accepted_tokens"] == 0 and rs["num_drafts"] == OUTPUT - 1
        assert rs["num_chunks"] == rb["num_chunks"] == OUTPUT
        assert rs["ttft_s"] - rb["ttft_s"] == pytest.approx(prefill_extra, rel=1e-9)
        decode_s = rs["finish_s"] - rs["first_token_s"]
        assert decode_s - (rb["finish_s"] - rb["first_token_s"]) == pytest.approx(
            decode_extra, rel=1e-9)
        assert rs["e2e_s"] > rb["e2e_s"]
