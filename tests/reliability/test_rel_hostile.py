"""Hostile inputs of reliability round 2 (issue 17): each must end in a clear error (exit
2, a located line, no traceback) or a correct run, never a hang or a crash."""

from __future__ import annotations

import re
import resource
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from rel_support import small
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.engine import instance as instance_mod
from pdsim.engine.kvcache import BlockPool
from pdsim.errors import ConfigError, SimulationStalled
from pdsim.loader import load_config
from pdsim.perf.simple import SimpleStepTime
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
    from pdsim.engine.scheduler import Scheduler

    monkeypatch.setattr(instance_mod, "MAX_ZERO_TIME_STEPS", 50)
    monkeypatch.setattr(Scheduler, "schedule", lambda self: None)
    monkeypatch.setattr(Scheduler, "unblock_waiting", lambda self: bool(self.waiting))
    with pytest.raises(SimulationStalled, match="clock stood still"):
        simulate(load_config(small()))


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


# ------------------------------------------------------------------ output folders


def test_out_that_is_a_file_under_a_file_or_uncreatable_is_refused_before_the_run(
        tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    cases = [(tmp_path / "afile", "exists and is not a folder"),
             (tmp_path / "afile" / "x", "is a file, so nothing can be written under it"),
             (Path("/proc/pdsim-cannot-be-here"), "cannot create the folder")]
    for out, phrase in cases:
        t0 = time.perf_counter()
        assert_error(["run", "configs/mtp3.yaml", "--out", str(out)], f"error: {out}:", phrase)
        assert time.perf_counter() - t0 < 3  # refused before simulating 300 requests


def _write_small_run(out: Path) -> None:
    from pdsim.writers import write_run

    write_run(simulate(load_config(small())), out)


def test_a_finished_folder_carries_a_manifest_readers_check(tmp_path: Path) -> None:
    from pdsim.run_folder import check_folder

    _write_small_run(tmp_path / "o")
    manifest = check_folder(tmp_path / "o")
    assert manifest["partial"] is False and manifest["seed"] == 7
    assert {"summary.json", "requests.csv", "config.resolved.yaml"} <= set(manifest["files"])
    (tmp_path / "o" / "requests.csv").write_text("id\n")  # another run's file
    assert_error(["plot", str(tmp_path / "o")], "requests.csv", "does not match manifest.json")


def test_an_interrupted_rerun_leaves_a_folder_readers_refuse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pdsim.writers as writers

    _write_small_run(tmp_path / "o")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(writers, "write_timeseries", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _write_small_run(tmp_path / "o")
    assert (tmp_path / "o" / "summary.json").is_file()  # the old run's, next to new files
    assert_error(["plot", str(tmp_path / "o")], "no manifest.json", "did not finish")


def test_sigterm_keeps_the_results_like_ctrl_c(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM arrives (from this process, deterministically) once 5 requests are done."""
    import json
    import os
    import signal

    from pdsim.simulation import Simulation

    original = Simulation.run

    def run_then_terminated(self: Simulation, progress: Any = None) -> Any:
        def tick(done: int, total: int) -> None:
            if done >= 5:
                os.kill(os.getpid(), signal.SIGTERM)

        return original(self, progress=tick)

    monkeypatch.setattr(Simulation, "run", run_then_terminated)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(small()))
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 128 + signal.SIGTERM, (res.exit_code, res.output)
    assert "PARTIAL" in res.stdout
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert summary["partial"] is True and manifest["partial"] is True
    assert signal.getsignal(signal.SIGTERM) is not None  # the old handler is back


# ------------------------------------------------------------------ CLI options, inputs


@pytest.mark.parametrize(("args", "option"), [
    (["--tp", "0"], "--tp"), (["--ep", "-1"], "--ep"), (["--block-size", "0"], "--block-size"),
    (["--spec", "-1"], "--spec"), (["--gpu-memory-utilization", "2"],
                                   "--gpu-memory-utilization"),
    (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization"),
])
def test_profile_options_out_of_range_are_named(args: list[str], option: str) -> None:
    assert_error(["profile", "deepseek-v3", "h200", *args], f"error: {option}: must be")


EXAMPLE_BENCH = Path("examples/real/bench_result.json")


@pytest.mark.parametrize(("field", "value", "phrase"), [
    ("input_lens", 0, "entry 0 is 0; token counts must be in 1..16,777,216"),
    ("input_lens", -5, "entry 0 is -5"),
    ("input_lens", 1e30, "entry 0 is 1e+30"),
    ("output_lens", -1, "entry 0 is -1; token counts must be in 0.."),
    ("max_concurrency", 0, "must be in 1..5,000,000 (got 0)"),
    ("max_concurrency", -3, "(got -3)"),
])
def test_validate_refuses_bench_files_with_impossible_values(
        tmp_path: Path, field: str, value: float, phrase: str) -> None:
    import json

    doc = json.loads(EXAMPLE_BENCH.read_text())
    if field == "max_concurrency":
        doc[field] = value
    else:
        doc[field] = [value, *doc[field][1:]]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(doc))
    assert_error(["validate", "configs/mtp3.yaml", "--against", str(bench)],
                 str(bench), f"field '{field}'", phrase)


def _specs(arrival: list[float], prompt: list[int] | None = None,
           output: list[int] | None = None) -> Any:
    import numpy as np

    from pdsim.workload import RequestSpecs

    n = len(arrival)
    return RequestSpecs(np.asarray(arrival, dtype=np.float64),
                        np.asarray(prompt or [100] * n, dtype=np.int64),
                        np.asarray(output or [10] * n, dtype=np.int64))


@pytest.mark.parametrize(("arrival", "prompt", "output", "phrase"), [
    ([0.0, float("nan"), 2.0], None, None, "request 1: arrival_s is nan"),
    ([0.0, -1.0, 2.0], None, None, "request 1: arrival_s is -1.0"),
    ([0.0, float("inf")], None, None, "arrival_s is inf"),
    ([0.0, 2.0, 1.0], None, None, "request 2 arrives at 1.0 s, before request 1"),
    ([0.0, 1.0], [100, 0], None, "request 1: prompt_tokens is 0"),
    ([0.0, 1.0], None, [-4, 10], "request 0: output_tokens is -4"),
])
def test_request_specs_are_checked_wherever_they_come_from(
        arrival: list[float], prompt: list[int] | None, output: list[int] | None,
        phrase: str) -> None:
    from pdsim.errors import RequestSpecsError

    with pytest.raises(RequestSpecsError, match=re.escape(phrase)):
        simulate(load_config(small()), _specs(arrival, prompt, output))


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


# ------------------------------------------------------------------ import-metrics


def _scrape(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]) -> str:
    lines = []
    for name, value in (("num_drafts", drafts), ("num_draft_tokens", draft_tokens),
                        ("num_accepted_tokens", accepted)):
        lines += [f"# TYPE vllm:spec_decode_{name} counter",
                  f'vllm:spec_decode_{name}_total{{engine="0"}} {value}.0']
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}}'
              f" {c}.0" for i, c in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("counts", "phrase"), [
    ((100, 300, 350, [100, 100, 100]), "num_accepted_tokens (350) exceeds"),
    ((100, 300, 150, [120, 20, 10]), "position 0 (120) exceeds vllm:spec_decode_num_drafts"),
    ((100, 300, 150, [50, 60, 40]), "position 1 (60) exceeds position 0"),
    ((100, 300, 150, [80, 50]), "2 positions in"),
])
def test_import_metrics_refuses_counters_no_run_produces(tmp_path: Path,
                                                         counts: tuple[Any, ...],
                                                         phrase: str) -> None:
    scrape = tmp_path / "m.txt"
    scrape.write_text(_scrape(*counts))
    text = assert_error(["import-metrics", str(scrape)], phrase)
    assert "speculative:" not in text  # no snippet printed


def test_import_metrics_snippets_load_in_pdsim(tmp_path: Path) -> None:
    scrape = tmp_path / "m.txt"
    scrape.write_text(_scrape(100, 300, 150, [80, 50, 20]))
    res = CliRunner().invoke(app, ["import-metrics", str(scrape)])
    assert res.exit_code == 0, res.output
    snippet = yaml.safe_load(res.stdout[res.stdout.index("# measured"):])
    data = small({"speculative": snippet["speculative"]})
    assert load_config(data).speculative.acceptance.rates == (0.8, 0.5, 0.2)  # type: ignore[union-attr]


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
