"""Per-role instance groups (pools): each with its own step time, memory and KV layout.

Expected figures are computed here from the profiles through the perf model's own
functions for each pool's hardware, parallelism and dtypes, never copied from a run.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
import pytest
from core_support import base_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import load_config
from pdsim.config import Role
from pdsim.errors import ConfigError
from pdsim.perf.base import StepBatch
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.perf.memory import kv_blocks_per_instance
from pdsim.perf.profiles import load_hardware, load_model_architecture, with_dtypes
from pdsim.perf.roofline import RooflineStepTime
from pdsim.perf.sizes import kv_bytes_per_token
from pdsim.realdata.calibration_params import check_root_step_time
from pdsim.simulation import Simulation

MODEL = "llama-3.1-70b"
P_STEP = {"kind": "roofline", "hardware": "h100-sxm", "tensor_parallel_size": 8}
D_STEP = {"kind": "roofline", "hardware": "h200", "tensor_parallel_size": 4,
          "kv_cache_dtype": "fp8"}
BLOCK = 16


def hetero_dict(num_requests: int = 12) -> dict[str, Any]:
    """Llama-3.1-70B + EAGLE-3: P on H100 TP8 (bf16 KV), D on H200 TP4 (fp8 KV)."""
    sched = {"max_num_seqs": 16, "max_num_batched_tokens": 4096, "block_size": BLOCK}
    return {
        "name": "hetero", "seed": 3,
        "model": {"profile": MODEL},
        "speculative": {"method": "eagle3", "num_speculative_tokens": 3,
                        "acceptance": {"kind": "constant", "rate": 0.6}},
        "step_time": {"kind": "roofline", "hardware": "a100-sxm", "tensor_parallel_size": 8},
        "cluster": {"mode": "disaggregated",
                    "prefill": {"name": "p", "scheduler": dict(sched), "step_time": P_STEP},
                    "decode": {"name": "d", "scheduler": dict(sched), "step_time": D_STEP}},
        "workload": {"num_requests": num_requests,
                     "arrivals": {"kind": "poisson", "rate_per_s": 4.0},
                     "prompt_tokens": {"kind": "uniform", "mean_tokens": 1500,
                                       "range_ratio": 0.5},
                     "output_tokens": {"kind": "fixed", "tokens": 24}},
    }


def _independent_model(step: dict[str, Any]) -> RooflineStepTime:
    """The step-time model of a pool, built from its settings alone (EAGLE-3: 3 sequential
    drafter passes, 1 drafter module)."""
    return RooflineStepTime(RooflineStepTimeConfig.model_validate({**step, "model": MODEL}),
                            3, 1)


def test_p_and_d_on_different_hardware_have_their_profiles_step_times_and_memory() -> None:
    cfg = load_config(hetero_dict())
    sim = Simulation(cfg)
    p, d = sim.by_name["P0"], sim.by_name["D0"]
    prefill = StepBatch(4096, 4096 * (4096 + 1) / 2, 0, 0, 0)
    decode = StepBatch(0, 0.0, 16, 64, 16 * 3000)
    for inst, step in ((p, P_STEP), (d, D_STEP)):
        own = _independent_model(step)
        for batch in (prefill, decode):
            assert inst.step_model.step_time_s(batch) == own.step_time_s(batch)
    # the root step time (A100) is not what either pool runs on
    root = _independent_model({"kind": "roofline", "hardware": "a100-sxm",
                               "tensor_parallel_size": 8})
    assert p.step_model.step_time_s(prefill) != root.step_time_s(prefill)
    assert p.step_model.step_time_s(prefill) != d.step_model.step_time_s(prefill)
    assert p.step_model.step_time_s(decode) != d.step_model.step_time_s(decode)

    # KV pools: each from its own GPU memory, TP and KV dtype
    arch = load_model_architecture(MODEL)
    fp8 = with_dtypes(arch, kv_cache_dtype="fp8")
    want_p = kv_blocks_per_instance(arch, load_hardware("h100-sxm"), 8, 0.9, BLOCK,
                                    drafter_modules=1)
    want_d = kv_blocks_per_instance(fp8, load_hardware("h200"), 4, 0.9, BLOCK,
                                    drafter_modules=1)
    assert (p.pool.num_blocks, d.pool.num_blocks) == (want_p, want_d)
    assert want_p != want_d
    # bytes per token: the whole model's KV at each pool's dtype (target + the EAGLE head)
    assert cfg.kv_bytes_per_token_of(cfg.cluster.prefill) == kv_bytes_per_token(arch, 1, 1)
    assert cfg.kv_bytes_per_token_of(cfg.cluster.decode) == kv_bytes_per_token(fp8, 1, 1)
    assert p.layout.block_bytes == 2 * d.layout.block_bytes


def test_transfer_moves_p_layout_bytes_into_d_layout_blocks() -> None:
    sim = Simulation(load_config(hetero_dict()))
    res = sim.run()
    p, d = sim.by_name["P0"], sim.by_name["D0"]
    finished = [r for r in res.records if r["status"] == "finished"]
    assert len(finished) == res.summary["num_requests"]
    backoff = sim.config.prefill_backoff_tokens
    for r in finished:
        loaded = r["prompt_tokens"] - backoff
        assert r["kv_bytes_transferred"] == p.layout.transfer_bytes(loaded)
        assert r["kv_bytes_transferred"] != d.layout.transfer_bytes(loaded)


def test_a_pool_with_a_different_block_size_converts_blocks_by_tokens() -> None:
    data = hetero_dict()
    data["cluster"]["decode"]["scheduler"]["block_size"] = 64
    sim = Simulation(load_config(data))
    res = sim.run()
    p, d = sim.by_name["P0"], sim.by_name["D0"]
    assert (p.layout.block_size, d.layout.block_size) == (BLOCK, 64)
    assert res.summary["completed"] == res.summary["num_requests"]
    for r in res.records:
        loaded = r["prompt_tokens"] - sim.config.prefill_backoff_tokens
        assert r["kv_bytes_transferred"] == p.layout.blocks_for(loaded) * p.layout.block_bytes


def _two_d_pools(policy: str) -> dict[str, Any]:
    data = base_dict()
    d = data["cluster"]["decode"]
    data["cluster"]["decode"] = [{**d, "count": 2, "name": "fast"},
                                 {**copy.deepcopy(d), "count": 1}]
    data["cluster"]["decode"][1]["step_time"] = {"kind": "simple", "weights_floor_s": 0.03}
    data["router"] = {"policy": policy}
    data["workload"]["num_requests"] = 30
    return data


@pytest.mark.parametrize("policy", ["round_robin", "least_loaded", "random"])
def test_two_d_pools_route_and_both_serve(policy: str) -> None:
    cfg = load_config(_two_d_pools(policy))
    sim = Simulation(cfg)
    assert [(i.name, i.pool_name) for i in sim.decodes] == [
        ("D0", "fast"), ("D1", "fast"), ("D2", "decode.1")]
    res = sim.run()
    served = {r["decode_instance"] for r in res.records if r["status"] == "finished"}
    assert served == {"D0", "D1", "D2"}
    # each record names its D instance's pool
    assert {(r["decode_instance"], r["decode_pool"]) for r in res.records
            if r["status"] == "finished"} == {("D0", "fast"), ("D1", "fast"),
                                              ("D2", "decode.1")}
    assert res.summary["instances"]["D2"]["pool"] == "decode.1"
    assert "pool" not in res.summary["instances"]["P0"]  # a role's one unnamed group
    # the second pool runs on its own (slower) step time
    batch = StepBatch(0, 0.0, 4, 16, 4000)
    slow, fast = sim.by_name["D2"].step_model, sim.by_name["D0"].step_model
    assert slow.step_time_s(batch) > fast.step_time_s(batch)


def test_a_one_pool_list_runs_exactly_like_the_single_group() -> None:
    single = base_dict()
    listed = copy.deepcopy(single)
    listed["cluster"]["decode"] = [listed["cluster"]["decode"]]
    listed["cluster"]["prefill"] = [listed["cluster"]["prefill"]]
    a, b = Simulation(load_config(single)).run(), Simulation(load_config(listed)).run()
    # only the pool labels differ: '' for a role's one group, 'decode.0' for a list's first
    assert set(a.records.column("decode_pool")) == {""}
    assert set(b.records.column("decode_pool")) == {"decode.0"}
    for key in a.records.columns:
        if key.endswith("_pool"):
            continue
        col_a, col_b = a.records.columns[key], b.records.columns[key]
        if isinstance(col_a, np.ndarray):
            np.testing.assert_array_equal(col_a, col_b)
        else:
            assert col_a == col_b
    assert a.summary["instances"]["D0"] == {k: v for k, v in
                                            b.summary["instances"]["D0"].items()
                                            if k != "pool"}


def _issues(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        load_config(data)
    return err.value.issues


def test_list_form_errors_name_the_pool() -> None:
    data = _two_d_pools("round_robin")
    data["cluster"]["decode"][1]["count"] = -1
    assert [p for p, _ in _issues(data)] == ["cluster.decode.1.count"]
    data = _two_d_pools("round_robin")
    data["cluster"]["decode"][0]["colour"] = "red"
    assert [p for p, _ in _issues(data)] == ["cluster.decode.0.colour"]
    data = _two_d_pools("round_robin")
    data["cluster"]["decode"][1]["step_time"]["per_token_s"] = -1
    assert [p for p, _ in _issues(data)] == ["cluster.decode.1.step_time.per_token_s"]
    data = hetero_dict()
    data["cluster"]["decode"] = [data["cluster"]["decode"]]
    data["cluster"]["decode"][0]["step_time"] = {**D_STEP, "kv_cache_dtype": "fp7"}
    assert [p for p, _ in _issues(data)] == ["cluster.decode.0.step_time.kv_cache_dtype"]
    data = _two_d_pools("round_robin")
    data["cluster"]["decode"][1]["scheduler"]["num_blocks"] = 2  # too small for a request
    assert [p for p, _ in _issues(data)] == ["cluster.decode.1.scheduler.num_blocks"]
    data = _two_d_pools("round_robin")
    data["cluster"]["decode"][1]["name"] = "fast"
    issues = _issues(data)
    assert len(issues) == 1 and "fast" in issues[0][1] and "cluster.decode.1" in issues[0][1]
    data = _two_d_pools("round_robin")
    for g in data["cluster"]["decode"]:
        g["count"] = 0
    assert [p for p, _ in _issues(data)] == ["cluster.decode"]
    data = _two_d_pools("round_robin")
    data["cluster"]["decode"] = []
    assert [p for p, _ in _issues(data)] == ["cluster.decode"]


def test_pool_capacity_checks_use_the_pools_own_memory() -> None:
    data = hetero_dict()
    data["cluster"]["decode"] = [data["cluster"]["decode"],
                                 {**data["cluster"]["decode"], "name": "tiny",
                                  "kv_cache_gib": 0.01}]
    issues = _issues(data)
    assert [p for p, _ in issues] == ["cluster.decode.1.kv_cache_gib"]
    data = hetero_dict()
    data["cluster"]["decode"]["step_time"] = {**D_STEP, "tensor_parallel_size": 1}
    issues = _issues(data)
    assert [p for p, _ in issues] == ["cluster.decode.step_time"]
    assert "does not fit on h200" in issues[0][1]


def test_a_pool_serves_the_configs_model() -> None:
    data = hetero_dict()
    data["cluster"]["decode"]["step_time"] = {**D_STEP, "model": "llama-3.1-8b"}
    assert [p for p, _ in _issues(data)] == ["cluster.decode.step_time.model"]


def test_fault_names_count_instances_across_pools() -> None:
    data = _two_d_pools("round_robin")
    data["faults"] = {"instance_outages": [{"instance": "D3", "start_s": 0.1,
                                            "end_s": 0.2}]}
    issues = _issues(data)
    assert issues[0][0] == "faults.instance_outages.0.instance"
    assert "this cluster has P0; D0, D1 (pool fast); D2 (pool decode.1)" in issues[0][1]


def test_borrowed_kernel_fits_are_reported_per_pool() -> None:
    cfg = load_config(hetero_dict())
    warnings = cfg.foreign_fit_warnings
    assert any(w.startswith("cluster.decode.step_time: h200") for w in warnings)
    assert not any(w.startswith("cluster.prefill") for w in warnings)
    data = hetero_dict()
    data["step_time"]["hardware"] = "h200"  # borrowed, but every pool has its own
    assert not any(w.startswith("step_time") for w in load_config(data).foreign_fit_warnings)
    del data["cluster"]["prefill"]["step_time"]  # now P runs on it
    assert any(w.startswith("step_time: h200") for w in load_config(data).foreign_fit_warnings)


def test_calibration_refuses_per_pool_step_times() -> None:
    with pytest.raises(ConfigError) as err:
        check_root_step_time(load_config(hetero_dict()))
    assert err.value.issues[0][0] == "cluster.prefill.step_time"
    check_root_step_time(load_config(base_dict()))  # no pool of its own: fine


def test_derived_values_are_per_pool() -> None:
    from pdsim.loader import derived_values

    cfg = load_config(_two_d_pools("round_robin"))
    out = derived_values(cfg)
    assert out["decode.0.num_blocks"] == cfg.num_blocks(cfg.cluster.pools(Role.DECODE)[0].group)
    assert "decode.1.step_time_parameters" in out
    assert "prefill.num_blocks" in out


def test_pools_of_different_capacity_route_each_request_to_one_that_holds_it() -> None:
    data = _two_d_pools("round_robin")
    data["cluster"]["decode"][1]["scheduler"]["num_blocks"] = 30  # 480 tokens
    # unbounded lengths: the config cannot check capacity, the router and admission do
    data["workload"]["prompt_tokens"] = {"kind": "lognormal", "mean_tokens": 400, "cv": 0.5}
    data["workload"]["num_requests"] = 60
    sim = Simulation(load_config(data))
    small = sim.by_name["D2"].max_fit_tokens
    res = sim.run()
    long_ = [r for r in res.records if r["prompt_tokens"] + r["output_tokens"] > small]
    assert long_ and all(r["status"] == "finished" for r in long_)
    assert {r["decode_instance"] for r in long_} <= {"D0", "D1"}
    assert "D2" in {r["decode_instance"] for r in res.records}


def test_pools_with_different_expert_parallelism_get_their_own_memory() -> None:
    """DeepSeek-V3 on H200: P at TP8, D at TP8 with experts over 16 GPUs (two DP ranks)."""
    sched = {"max_num_seqs": 32, "max_num_batched_tokens": 4096, "block_size": 64}
    p_step = {"kind": "roofline", "hardware": "h200", "tensor_parallel_size": 8}
    d_step = {**p_step, "expert_parallel_size": 16}
    cfg = load_config({
        "model": {"profile": "deepseek-v3"},
        "step_time": p_step,
        "cluster": {"prefill": {"scheduler": sched, "step_time": p_step},
                    "decode": {"scheduler": sched, "step_time": d_step}},
        "workload": {"num_requests": 4}})
    arch, h200 = load_model_architecture("deepseek-v3"), load_hardware("h200")
    want = [kv_blocks_per_instance(arch, h200, 8, 0.9, 64, expert_parallel_size=ep)
            for ep in (1, 16)]
    got = [cfg.num_blocks(g) for g in (cfg.cluster.prefill, cfg.cluster.decode)]
    assert got == want and want[1] > want[0]  # half the experts per GPU: more KV room
    batch = StepBatch(0, 0.0, 32, 32, 32 * 2000)
    sim = Simulation(cfg)
    own = RooflineStepTime(RooflineStepTimeConfig.model_validate(
        {**d_step, "model": "deepseek-v3"}), 0, 0)
    assert sim.by_name["D0"].step_model.step_time_s(batch) == own.step_time_s(batch)
    assert sim.by_name["P0"].step_model.step_time_s(batch) != own.step_time_s(batch)


def test_search_takes_each_roles_gpus_and_needs_one_group_per_role() -> None:
    from pdsim.search import default_gpus_per_instance, split_config

    cfg = load_config(hetero_dict())
    assert (default_gpus_per_instance(cfg, Role.PREFILL),
            default_gpus_per_instance(cfg, Role.DECODE), default_gpus_per_instance(cfg)) \
        == (8, 4, 8)
    split = split_config(cfg, 2, 3)
    assert (split.cluster.count(Role.PREFILL), split.cluster.count(Role.DECODE)) == (2, 3)
    assert split.cluster.decode.step_time == cfg.cluster.decode.step_time
    with pytest.raises(ConfigError) as err:
        split_config(load_config(_two_d_pools("round_robin")), 1, 1)
    assert err.value.issues[0][0] == "cluster.decode"


@st.composite
def _splits(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Instance counts of P and D pools (1-3 instances per role, split into pools)."""
    out = []
    for _ in range(2):
        total = draw(st.integers(1, 3))
        cuts = sorted(draw(st.sets(st.integers(1, total - 1), max_size=total - 1))
                      if total > 1 else set())
        bounds = [0, *cuts, total]
        out.append([b - a for a, b in itertools.pairwise(bounds)])
    return out[0], out[1]


@settings(max_examples=8, deadline=None)
@given(_splits(), st.sampled_from(["round_robin", "least_loaded", "random"]))
def test_splitting_a_group_into_identical_pools_changes_nothing(
        split: tuple[list[int], list[int]], policy: str) -> None:
    whole = base_dict()
    whole["router"] = {"policy": policy}
    whole["workload"]["num_requests"] = 16
    pooled = copy.deepcopy(whole)
    for role, counts in zip(("prefill", "decode"), split, strict=True):
        whole["cluster"][role]["count"] = sum(counts)
        pooled["cluster"][role] = [{**whole["cluster"][role], "count": n} for n in counts]
    a, b = Simulation(load_config(whole)).run(), Simulation(load_config(pooled)).run()
    for key, col in a.records.columns.items():
        if key.endswith("_pool"):  # the labels: '' for one group, 'decode.0'... for pools
            continue
        if isinstance(col, np.ndarray):
            np.testing.assert_array_equal(col, b.records.columns[key])
        else:
            assert col == b.records.columns[key]
    for fa, fb in zip(a.instances, b.instances, strict=True):
        assert fa.name == fb.name
        np.testing.assert_array_equal(fa.step_log, fb.step_log)
