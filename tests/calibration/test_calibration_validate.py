"""``validate``: pdsim replayed against a result, on vLLM's metric definitions.

Against a result pdsim itself wrote, the replay is exact: the recorded send times are the
original arrivals (shifted so the first is 0), the lengths are the same, and the same seed
gives the same acceptance draws, so every metric agrees to float rounding. Residuals
appear only when something differs: drawn instead of recorded arrivals, another seed
(the acceptance stream), or a trimmed workload.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from calibration_support import EXAMPLE_CONFIG, EXAMPLE_RESULT, result_of, small_config

from pdsim import load_config, simulate
from pdsim.errors import InputFileError
from pdsim.realdata import (
    bench_result_from_dict,
    read_bench_result,
    real_metrics,
    simulated_metrics,
    summary_metrics,
    trim_result,
)
from pdsim.realdata.bench_synthesis import run_bench_result
from pdsim.realdata.validate import (
    LATENCY_METRICS,
    MetricRow,
    metric_label,
    relative_error,
    validate,
)
from pdsim.writers import write_run

EXACT = 1e-9


def test_self_validation_is_exact() -> None:
    cfg = small_config()
    rep = validate(cfg, result_of(cfg))
    assert rep.replay == "recorded" and rep.mode == "rate" and rep.num_requests == 100
    assert rep.notes == ()
    keys = [r.key for r in rep.rows]
    assert keys[:16] == list(LATENCY_METRICS)
    assert {"output_throughput", "request_throughput", "completed", "acceptance_length",
            "acceptance_rate", "acceptance_rate_pos0", "acceptance_rate_pos2"} <= set(keys)
    for row in rep.rows:
        assert math.isfinite(row.rel_error), row
    assert rep.max_abs_error() < EXACT
    assert rep.failures(EXACT) == []


def test_self_validation_through_the_written_file(tmp_path: Path) -> None:
    cfg = small_config()
    write_run(simulate(cfg), tmp_path)
    rep = validate(cfg, read_bench_result(tmp_path / "bench_result.json"))
    assert rep.replay == "recorded"
    assert rep.max_abs_error() < EXACT


def test_closed_loop_self_validation() -> None:
    cfg = small_config("workload.arrivals={kind: closed_loop, concurrency: 8}")
    doc = run_bench_result(simulate(cfg))
    # a closed-loop pdsim run is recorded as vllm bench serve --max-concurrency records it
    assert doc["max_concurrency"] == 8 and doc["request_rate"] == "inf"
    result = bench_result_from_dict(doc, "closed")
    rep = validate(cfg, result)
    assert (rep.mode, rep.replay) == ("concurrency", "closed loop")
    assert rep.max_abs_error() < EXACT
    assert abs(rep.row("output_throughput").rel_error) < 0.01


def test_another_seed_leaves_only_sampling_noise() -> None:
    cfg = small_config()
    rep = validate(cfg, result_of(cfg), seed=cfg.seed + 1)
    assert rep.max_abs_error() > EXACT  # other acceptance draws
    assert abs(rep.row("acceptance_length").rel_error) < 0.05
    assert abs(rep.row("mean_ttft_ms").rel_error) < 0.05
    assert abs(rep.row("output_throughput").rel_error) < 0.05


def test_without_start_times_arrivals_are_drawn_and_said_so() -> None:
    cfg = small_config()
    doc = run_bench_result(simulate(cfg))
    for key in ("start_times", "queue_times"):
        del doc[key]
    doc["request_rate"] = 6.0
    rep = validate(cfg, bench_result_from_dict(doc, "no-start-times"))
    assert rep.replay == "poisson"
    assert any("arrivals drawn" in n for n in rep.notes)
    assert rep.row("completed").rel_error == 0.0
    again = validate(cfg, bench_result_from_dict(doc, "no-start-times"))
    assert [r.simulated for r in again.rows] == [r.simulated for r in rep.rows]


def test_simulated_metrics_use_the_real_definitions() -> None:
    cfg = small_config()
    res = simulate(cfg)
    sim = simulated_metrics(res)
    real = real_metrics(bench_result_from_dict(run_bench_result(res)))
    assert sim == pytest.approx(real, rel=1e-12)
    s = res.summary
    assert sim["mean_ttft_ms"] == pytest.approx(s["mean_ttft_s"] * 1e3)
    assert sim["mean_tpot_ms"] == pytest.approx(s["mean_tpot_s"] * 1e3)
    assert sim["mean_itl_ms"] == pytest.approx(s["mean_itl_s"] * 1e3)
    assert sim["acceptance_rate"] == pytest.approx(s["acceptance_rate"] * 100)
    assert sim["output_throughput"] == pytest.approx(s["output_throughput_tok_s"])


def test_the_shipped_example() -> None:
    cfg = load_config(EXAMPLE_CONFIG)
    rep = validate(cfg, read_bench_result(EXAMPLE_RESULT))
    assert rep.num_requests == 63 and rep.replay == "recorded"
    assert rep.notes == ("1 failed request(s) of the result are not replayed",)
    assert rep.row("completed").rel_error == 0.0
    assert rep.row("mean_ttft_ms").real == pytest.approx(
        summary_metrics(read_bench_result(EXAMPLE_RESULT))["mean_ttft_ms"])
    assert rep.row("acceptance_rate_pos2").label == "per-position rate 2 (%)"
    # the example config is uncalibrated: its decode steps are far too fast
    assert rep.row("mean_itl_ms").rel_error < -0.2
    assert rep.to_dict()["rows"][0]["metric"] == "mean_ttft_ms"


def test_acceptance_mismatches_are_noted() -> None:
    cfg = small_config()
    result = result_of(cfg)
    plain = small_config("speculative={method: none, num_speculative_tokens: 0}")
    rep = validate(plain, result)
    assert any("drafts nothing" in n for n in rep.notes)
    assert math.isnan(rep.row("acceptance_length").rel_error)
    assert rep.failures(0.0, ["acceptance_length"]) == []
    rep = validate(cfg, replace(result, spec_decode=None))
    assert any("acceptance not compared" in n for n in rep.notes)
    assert "acceptance_length" not in {r.key for r in rep.rows}


def test_relative_error_and_labels() -> None:
    assert relative_error(11.0, 10.0) == pytest.approx(0.1)
    assert relative_error(9.0, -10.0) == pytest.approx(1.9)
    assert math.isnan(relative_error(1.0, 0.0))
    assert math.isnan(relative_error(math.nan, 1.0))
    assert metric_label("median_ttft_ms") == "TTFT p50 (ms)"
    assert metric_label("p99_e2el_ms") == "E2E p99 (ms)"
    row = MetricRow("mean_tpot_ms", 10.0, 12.0)
    assert row.label == "TPOT mean (ms)" and row.rel_error == pytest.approx(0.2)


def test_trim_result_keeps_the_first_requests() -> None:
    full = read_bench_result(EXAMPLE_RESULT)
    part = trim_result(full, 40)
    assert part.num_requests == 40 and part.source.endswith("[:40]")
    assert part.completed == 39 and part.failed == 1  # request 37 failed
    assert part.input_lens is not None and full.input_lens is not None
    assert np.array_equal(part.input_lens, full.input_lens[:40])
    assert full.start_times_s is not None and full.latencies_s is not None
    ok = np.array([not e for e in (full.errors or ())][:40])
    ends = full.start_times_s[:40][ok] + full.latencies_s[:40][ok]
    assert part.duration_s == pytest.approx(ends.max() - full.start_times_s[:40].min())
    assert trim_result(full, 1000) is full
    cfg = load_config(EXAMPLE_CONFIG)
    assert validate(cfg, part).num_requests == 39
    with pytest.raises(ValueError):
        trim_result(full, 0)


def test_results_that_cannot_be_replayed() -> None:
    full = read_bench_result(EXAMPLE_RESULT)
    bare = replace(full, input_lens=None, output_lens=None)
    with pytest.raises(InputFileError, match="save-detailed"):
        validate(load_config(EXAMPLE_CONFIG), bare)
    with pytest.raises(InputFileError, match="start_times or latencies"):
        trim_result(replace(full, start_times_s=None), 10)
