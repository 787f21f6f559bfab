"""Hostile configs of reliability round 2 (issue 17): KV pools, YAML size and nesting,
engine progress, bounds, capacity, fault intervals. Each must end in a clear error (exit
2, a located line, no traceback) or a correct run, never a hang or a crash.
``test_rel_hostile_io.py`` holds the inputs outside the config."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest
import yaml
from rel_support import assert_cli_error as assert_error
from rel_support import small

from pdsim.engine import instance as instance_mod
from pdsim.engine.kvcache import BlockPool
from pdsim.errors import ConfigError, SimulationStalled
from pdsim.loader import load_config
from pdsim.perf.simple import SimpleStepTime
from pdsim.simulation import simulate

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


# ------------------------------------------------------------------ YAML shape


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("command", ["run", "show-config"])
def test_alias_bomb_in_a_file_is_refused_quickly(tmp_path: Path, command: str) -> None:
    (tmp_path / "bomb.yaml").write_text(_bomb())
    t0 = time.perf_counter()
    assert_error([command, str(tmp_path / "bomb.yaml"), "--out", str(tmp_path / "o")]
                 if command == "run" else [command, str(tmp_path / "bomb.yaml")],
                 "bomb.yaml", "aliases are expanded")
    assert time.perf_counter() - t0 < 5


def test_alias_bomb_in_a_set_value_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("seed: 1\n")
    flow = "&a [x, x, x, x, x, x, x, x, x, x]"
    for name in "bcdefg":
        flow = f"&{name} [{flow}, " + ", ".join([f"*{chr(ord(name) - 1)}"] * 9) + "]"
    assert_error(["show-config", str(tmp_path / "c.yaml"), "--set", f"model.name={flow}"],
                 "error: model.name:", "aliases are expanded")


def test_shared_aliases_below_the_limit_still_load(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "cluster:\n"
        "  prefill: &g {kv_cache_gib: 4, scheduler: {max_num_seqs: 8, block_size: 16}}\n"
        "  decode: *g\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.cluster.decode.scheduler.max_num_seqs == 8


@pytest.mark.parametrize("depth", [150, 3000])
def test_deep_nesting_in_a_set_value_is_refused(tmp_path: Path, depth: int) -> None:
    (tmp_path / "c.yaml").write_text("seed: 1\n")
    assert_error(["show-config", str(tmp_path / "c.yaml"), "--set",
                  "model.name=" + "[" * depth + "]" * depth],
                 "error: model.name:", "nested more than 100 levels")


def test_deep_nesting_in_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("a: " + "[" * 150 + "]" * 150 + "\n")
    assert_error(["show-config", str(tmp_path / "c.yaml")], "c.yaml", "nested more than 100")


@pytest.mark.parametrize("digits", [25, 400, 5000])
def test_huge_integers_are_refused_with_their_place(tmp_path: Path, digits: int) -> None:
    (tmp_path / "c.yaml").write_text(f"workload:\n  num_requests: {'9' * digits}\n")
    assert_error(["show-config", str(tmp_path / "c.yaml")], "c.yaml:2:17", "too large")
    (tmp_path / "d.yaml").write_text("seed: 1\n")
    assert_error(["show-config", str(tmp_path / "d.yaml"), "--set",
                  f"workload.num_requests={'9' * digits}"],
                 "error: workload.num_requests:", "too large")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "{}\n"])
def test_an_empty_config_is_an_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "c.yaml").write_text(text)
    for command in ("run", "show-config"):
        assert_error([command, str(tmp_path / "c.yaml")], "c.yaml", "the file is empty")


# ------------------------------------------------------------------ engine progress

ZERO_STEP = {"kind": "simple", "overhead_s": 0, "weights_floor_s": 0, "per_token_s": 0,
             "per_context_token_s": 0, "per_attention_pair_s": 0, "drafter_floor_s": 0,
             "drafter_token_cost_ratio": 0}


def test_an_all_zero_step_time_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(small({"step_time": ZERO_STEP}))
    assert info.value.path == "step_time"
    assert "overhead_s + weights_floor_s is below 1e-09 s" in info.value.message
    tiny = {**ZERO_STEP, "overhead_s": 1e-300}  # steps too short to move the clock
    with pytest.raises(ConfigError, match="below 1e-09 s"):
        load_config(small({"step_time": tiny}))


@pytest.mark.parametrize("dt", [float("nan"), -1.0])
def test_a_nan_or_negative_step_time_stops_the_run_clearly(monkeypatch: pytest.MonkeyPatch,
                                                           dt: float) -> None:
    """For step-time models the schema cannot bound (a measured table)."""
    monkeypatch.setattr(SimpleStepTime, "step_time_s", lambda self, batch: dt)
    with pytest.raises(SimulationStalled, match="check step_time"):
        simulate(load_config(small()))


def test_an_engine_turning_at_one_instant_forever_stops_clearly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The livelock class: work freed and readmitted (or steps costing nothing) forever
    while the clock stands still. Forced here: the scheduler plans nothing and always
    claims to have unblocked a waiting request, so the engine loop would never yield."""
    from pdsim.engine.scheduler import Scheduler, StepPlan

    monkeypatch.setattr(instance_mod, "MAX_ZERO_TIME_STEPS", 50)
    monkeypatch.setattr(Scheduler, "schedule", lambda self, now_s, step: StepPlan([], 0, None))
    monkeypatch.setattr(Scheduler, "unblock_waiting", lambda self: bool(self.waiting))
    with pytest.raises(SimulationStalled, match="clock stood still"):
        simulate(load_config(small()))


# Found by a random search (issue 17's livelock): a P with two seats, 64-token chunks and
# 14 blocks under prefix caching, flooded at 1e6 requests/s; with 1 ns steps a request is
# preempted and readmitted forever (with 1 us steps the same config finishes).
LIVELOCK = {
    "step_time": {**ZERO_STEP, "overhead_s": 1e-9},
    "model": {"max_model_len": 200},
    "cluster": {"prefill": {"scheduler": {
        "max_num_seqs": 2, "max_num_batched_tokens": 64, "block_size": 16, "num_blocks": 14,
        "enable_prefix_caching": True, "enable_chunked_prefill": True}},
        "decode": {"scheduler": {"num_blocks": 40}}},
    "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1e6}},
}


def test_a_preemption_livelock_with_a_creeping_clock_stops_clearly() -> None:
    t0 = time.perf_counter()
    with pytest.raises(SimulationStalled, match="P0: 100,028 steps in a row") as info:
        simulate(load_config(small(LIVELOCK)))
    assert "ended no prefill and decoded no token" in str(info.value)
    assert time.perf_counter() - t0 < 30


def test_the_livelock_config_with_microsecond_steps_finishes() -> None:
    slower = {**LIVELOCK, "step_time": {**ZERO_STEP, "overhead_s": 1e-6}}
    assert len(simulate(load_config(small(slower))).records) == 30


def test_waits_of_real_steps_are_not_called_a_livelock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle streaks far past the step limit, of 1 ms steps (P waits for D to read the KV
    that fills its pool): a wait, not a livelock. With a limit of 3 steps, 1 ms steps
    finish and 1 ns steps stop."""
    monkeypatch.setattr(instance_mod, "MAX_IDLE_STEPS_CAP", 3)
    real = {**LIVELOCK, "step_time": {**ZERO_STEP, "overhead_s": 1e-3}}
    assert len(simulate(load_config(small(real))).records) == 30
    with pytest.raises(SimulationStalled, match="P0: 3 steps in a row"):
        simulate(load_config(small(LIVELOCK)))


def test_zero_cost_steps_without_a_livelock_still_finish(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard counts turns at one instant, not zero-cost steps: free steps that make
    progress run to the end."""
    monkeypatch.setattr(instance_mod, "MAX_ZERO_TIME_STEPS", 50)
    monkeypatch.setattr(SimpleStepTime, "step_time_s", lambda self, batch: 0.0)
    result = simulate(load_config(small()))
    assert len(result.records) == 30


# ------------------------------------------------------------------ bounds


@pytest.mark.parametrize(("override", "path", "phrase"), [
    ("cluster.decode.kv_cache_gib=1e300", "cluster.decode.kv_cache_gib", "at most 1,048,576"),
    ("workload.num_requests=1000000000", "workload.num_requests", "about 2 KB each"),
    ("workload.num_requests=" + "9" * 18, "workload.num_requests", "at most 5,000,000"),
    ("cluster.decode.count=1000000", "cluster.decode.count", "at most 1,024"),
    ("cluster.decode.scheduler.num_blocks=1000000000000000000",
     "cluster.decode.scheduler.num_blocks", "64-bit"),
    ("cluster.decode.scheduler.max_num_seqs=100000000", "cluster.decode.scheduler.max_num_seqs",
     "at most 65,536"),
    ("model.max_model_len=10000000000", "model.max_model_len", "at most 16,777,216"),
    ("workload.arrivals.rate_per_s=1e-310", "workload.arrivals.rate_per_s", "at least 1e-09"),
    ("workload.prompt_tokens={kind: fixed, tokens: 100000000000}",
     "workload.prompt_tokens.tokens", "at most 16,777,216"),
])
def test_counts_and_sizes_are_bounded_with_a_reason(tmp_path: Path, override: str, path: str,
                                                    phrase: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config("configs/mtp3.yaml", [override])
    assert (info.value.path, phrase in info.value.message) == (path, True), info.value.issues


def test_duration_times_rate_beyond_the_request_bound_is_refused() -> None:
    for rate in ("1e10", "1e308"):
        with pytest.raises(ConfigError) as info:
            load_config("configs/mtp3.yaml", [
                "workload.num_requests=null", "workload.duration_s=1e9",
                f"workload.arrivals={{kind: constant, rate_per_s: {rate}}}"])
        assert info.value.path == "workload" and "duration_s x" in info.value.message


@pytest.mark.parametrize(("name", "text"), [
    ("t.jsonl", '{"timestamp": 0, "input_length": 9223372036854775808, "output_length": 5}\n'),
    ("t.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": %s}\n' % ("9" * 5000)),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.6805900,374,9223372036854775808\n"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.6805900,%s,5\n" % ("9" * 5000)),
])
def test_trace_token_counts_beyond_the_bound_name_the_line(tmp_path: Path, name: str,
                                                           text: str) -> None:
    trace = tmp_path / name
    trace.write_text(text)
    kind = "mooncake" if name.endswith(".jsonl") else "azure"
    assert_error(["run", "configs/mtp3.yaml", "--out", str(tmp_path / "o"), "--set",
                  "workload.num_requests=null", "--set",
                  f"workload.trace={{kind: {kind}, path: {trace}}}"],
                 f"{trace}:", "too long" if "9999" in text and kind == "mooncake"
                 else "at most 16,777,216")


# ------------------------------------------------------------------ capacity


def test_the_capacity_check_counts_the_slots_d_reserves_for_drafts() -> None:
    """A pool that holds the longest request exactly but not its sampled token and three
    drafts: before, validation passed and every request was rejected at admission."""
    patch = {"workload": {"prompt_tokens": {"kind": "fixed", "tokens": 2040},
                          "output_tokens": {"kind": "fixed", "tokens": 8}},
             "cluster": {"decode": {"scheduler": {"num_blocks": 128}},
                         "prefill": {"scheduler": {"num_blocks": 256}}}}
    with pytest.raises(ConfigError) as info:
        load_config(small(patch))
    assert info.value.path == "cluster.decode.scheduler.num_blocks"
    assert "1 + num_speculative_tokens" in info.value.message
    # one block more and every request is served
    patch["cluster"]["decode"]["scheduler"]["num_blocks"] = 129  # type: ignore[index]
    result = simulate(load_config(small(patch)))
    assert all(r["status"] == "finished" for r in result.records)


# ------------------------------------------------------------------ faults


def test_overlapping_outages_of_one_instance_are_refused() -> None:
    faults = {"instance_outages": [{"instance": "D0", "start_s": 1.0, "end_s": 5.0},
                                   {"instance": "P0", "start_s": 2.0, "end_s": 3.0},
                                   {"instance": "D0", "start_s": 2.0, "end_s": 3.0}]}
    with pytest.raises(ConfigError) as info:
        load_config(small({"faults": faults}))
    assert info.value.issues == [("faults.instance_outages.2",
                                  "overlaps outage 0 of D0 (1..5 s); write one outage from 1 "
                                  "to 5 s instead")]
    faults["instance_outages"][2] = {"instance": "D0", "start_s": 6.0, "end_s": 7.0}
    assert load_config(small({"faults": faults})).faults.instance_outages[2].start_s == 6.0


@pytest.mark.parametrize(("first", "second"), [("P0->D0", "P0->D0"), (None, "P0->D0"),
                                               ("P0->D0", None)])
def test_overlapping_link_degradations_are_refused(first: str | None,
                                                   second: str | None) -> None:
    faults = {"link_degradations": [
        {"link": first, "start_s": 0.0, "end_s": 2.0, "bandwidth_factor": 0.5},
        {"link": second, "start_s": 2.0, "end_s": 4.0, "bandwidth_factor": 0.1}]}
    with pytest.raises(ConfigError) as info:
        load_config(small({"faults": faults}))
    assert info.value.path == "faults.link_degradations.1"
    assert "overlaps degradation 0" in info.value.message


def test_a_derived_pool_beyond_the_block_bound_is_refused() -> None:
    mamba = {"model": {"layer_groups": [{"kind": "mamba", "num_layers": 4,
                                         "state_bytes_per_layer": 4096}],
                       "num_mtp_modules": 0},
             "speculative": {"method": "none", "num_speculative_tokens": 0},
             "cluster": {"decode": {"kv_cache_gib": 2**20,
                                    "scheduler": {"num_blocks": None, "block_size": 1}}}}
    with pytest.raises(ConfigError) as info:
        load_config(small(mamba))
    assert [m for p, m in info.value.issues if p == "cluster.decode.kv_cache_gib"] == [
        "derives 1,125,899,906,842,624 KV blocks; at most 281,474,976,710,656 (block ids "
        "exact in 64-bit arithmetic): use a smaller pool or a larger block_size"]


def test_an_inline_hardware_memory_beyond_float_range_is_refused() -> None:
    from pdsim.perf.profiles import load_hardware

    spec = load_hardware("h200", "step_time.hardware").model_dump(mode="json")
    data = yaml.safe_load(Path("configs/mtp3.yaml").read_text())
    data["step_time"] = {"kind": "roofline", "model": "deepseek-v3",
                         "tensor_parallel_size": 8, "hardware": spec}
    data["cluster"]["decode"]["kv_cache_gib"] = None
    load_config(data)  # the shipped H200 spec, inline: loads
    spec["hbm_capacity_gib"] = 1e300
    with pytest.raises(ConfigError) as info:
        load_config(data)
    assert any(p == "step_time.hardware.hbm_capacity_gib" and "at most 1,048,576" in m
               for p, m in info.value.issues), info.value.issues
