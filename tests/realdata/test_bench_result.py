"""``vllm bench serve`` results: vLLM's field names and metric definitions, round trips,
replay of the recorded requests, and located errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pdsim.errors import InputFileError
from pdsim.realdata import (
    AcceptanceStats,
    bench_result_from_dict,
    bench_result_to_requests,
    make_bench_result,
    read_bench_result,
    summary_metrics,
)
from pdsim.realdata.bench_result import percentile_key

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "real" / "bench_result.json"
NAN = math.nan

# Every top-level key `vllm bench serve --save-result --save-detailed` writes for a
# generation run (vllm/benchmarks/serve.py: main_async's result_json and benchmark()'s
# result dict, spec-decode and percentile keys included); --metadata adds free keys.
VLLM_FIXED_FIELDS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
    "generated_texts", "errors", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
    "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
    "spec_decode_per_position_acceptance_rates",
}


def vllm_stat_fields(percentiles: tuple[float, ...]) -> set[str]:
    return {f"{s}_{m}_ms" for s in ("mean", "median", "std")
            for m in ("ttft", "tpot", "itl", "e2el")} | {
        percentile_key(p, m) for p in percentiles for m in ("ttft", "tpot", "itl", "e2el")}


def rec(i: int, status: str, arrival: float, prompt: int, out: int, ttft: float, e2e: float,
        itls: list[float]) -> dict[str, Any]:
    ok = status == "finished"
    return {"request_id": i, "status": status, "arrival_s": arrival,
            "first_token_s": arrival + ttft if ok else NAN,
            "finish_s": arrival + e2e if ok else NAN, "prompt_tokens": prompt,
            "output_tokens": out, "ttft_s": ttft if ok else NAN,
            "tpot_s": (e2e - ttft) / (out - 1) if ok and out > 1 else NAN,
            "e2e_s": e2e if ok else NAN, "itls_s": itls}


# Hand-checked: r1 has one output token (no TPOT), r2 failed.
RECORDS = [
    rec(3, "finished", 1.5, 50, 3, 0.05, 0.35, [0.3]),
    rec(0, "finished", 0.0, 100, 5, 0.1, 0.5, [0.1, 0.15, 0.15]),
    rec(1, "finished", 0.5, 200, 1, 0.2, 0.2, []),
    rec(2, "failed", 1.0, 300, 0, NAN, NAN, []),
]
SUMMARY = {"duration_s": 2.0, "num_requests": 4, "completed": 3}
META = {"date": "20250101-000000", "model_id": "m", "request_rate": 2.0, "burstiness": 1.0,
        "max_concurrency": None, "run": "unit-test"}


def hand_result(**kw: Any) -> dict[str, Any]:
    return make_bench_result(RECORDS, SUMMARY, meta={**META, **kw.pop("meta", {})}, **kw)


def test_field_names_follow_vllm() -> None:
    spec = AcceptanceStats(10, 30, 12, (6, 4, 2))
    d = hand_result(percentiles=(50, 90, 99, 99.9), spec_decode=spec)
    assert set(d) - {"run"} == VLLM_FIXED_FIELDS | vllm_stat_fields((50, 90, 99, 99.9))
    assert "p99.9_itl_ms" in d and "p50_ttft_ms" in d
    assert d["run"] == "unit-test"  # --metadata-style key
    assert list(d)[:7] == ["date", "endpoint_type", "backend", "label", "model_id",
                           "tokenizer_id", "num_prompts"]
    assert d["spec_decode_acceptance_rate"] == pytest.approx(40.0)  # vLLM stores percent
    assert d["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.6, 0.4, 0.2])
    json.dumps(d, allow_nan=False)  # strict JSON: no NaN anywhere


def test_metric_definitions_match_vllm() -> None:
    d = hand_result()
    assert d["completed"] == 3 and d["failed"] == 1 and d["num_prompts"] == 4
    assert d["input_lens"] == [100, 200, 300, 50]  # request_id order
    assert d["output_lens"] == [5, 1, 0, 3]  # a failed request generated 0
    assert d["errors"][2] and not any(d["errors"][i] for i in (0, 1, 3))
    assert d["total_input_tokens"] == 350  # successful requests only
    assert d["total_output_tokens"] == 9
    assert d["request_throughput"] == pytest.approx(1.5)
    assert d["output_throughput"] == pytest.approx(4.5)
    assert d["total_token_throughput"] == pytest.approx(179.5)
    # TPOT = (e2e - ttft) / (out - 1), only out > 1: r0 0.4/4, r3 0.3/2
    assert d["mean_tpot_ms"] == pytest.approx(125.0)
    # ITL pools every chunk gap of the successful requests
    assert d["mean_itl_ms"] == pytest.approx(175.0)
    assert d["median_itl_ms"] == pytest.approx(150.0)
    assert d["mean_ttft_ms"] == pytest.approx(1000 * 0.35 / 3)
    assert d["mean_e2el_ms"] == pytest.approx(350.0)
    assert d["p99_ttft_ms"] == pytest.approx(1000 * np.percentile([0.1, 0.2, 0.05], 99))
    assert d["request_rate"] == 2.0 and d["request_goodput"] is None
    assert d["max_concurrent_requests"] == 1


def test_empty_statistic_is_zero_and_rate_inf_is_a_string() -> None:
    only_one_token = [rec(0, "finished", 0.0, 10, 1, 0.1, 0.1, [])]
    d = make_bench_result(only_one_token, {"duration_s": 1.0, "num_requests": 1,
                                           "completed": 1}, meta={"request_rate": "inf"})
    assert d["mean_tpot_ms"] == 0.0 and d["p99_itl_ms"] == 0.0
    assert d["request_rate"] == "inf" and d["backend"] == "pdsim"
    assert bench_result_from_dict(d).request_rate == math.inf


def test_goodput() -> None:
    d = hand_result(goodput_slo_ms={"ttft": 150.0})  # r0 (100 ms) and r3 (50 ms)
    assert d["request_goodput"] == pytest.approx(2 / 2.0)
    d = hand_result(goodput_slo_ms={"tpot": 110.0})  # r0 100 ms, r1 counts as 0
    assert d["request_goodput"] == pytest.approx(2 / 2.0)


def test_round_trip_through_json(tmp_path: Path) -> None:
    spec = AcceptanceStats(100, 300, 150, (70, 50, 30))
    d = hand_result(percentiles=(50, 90, 99), spec_decode=spec)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    r = read_bench_result(path)
    assert r.source == str(path) and r.model_id == "m" and r.date == "20250101-000000"
    assert r.duration_s == 2.0 and r.completed == 3 and r.failed == 1
    assert r.total_input_tokens == 350 and r.total_output_tokens == 9
    assert r.input_lens is not None and r.input_lens.tolist() == [100, 200, 300, 50]
    assert r.succeeded is not None and r.succeeded.tolist() == [True, True, False, True]
    assert r.spec_decode is not None
    assert r.spec_decode.accepted_per_pos == (70, 50, 30)
    assert r.spec_decode.acceptance_length == pytest.approx(2.5)
    m = summary_metrics(r)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p90", "p99"):
            key = f"{stat}_{metric}_ms"
            assert m[key] == pytest.approx(d[key]), key
            assert m[key] == pytest.approx(r.latency_stats_ms[key]), key
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert m[key] == pytest.approx(d[key])


def test_summary_metrics_falls_back_to_stored_fields() -> None:
    d = hand_result(percentiles=(99,))
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
                "start_times"):
        del d[key]  # as saved without --save-detailed
    r = bench_result_from_dict(d)
    assert r.num_requests is None
    m = summary_metrics(r)
    assert m["p99_tpot_ms"] == pytest.approx(d["p99_tpot_ms"])
    assert math.isnan(m["p90_tpot_ms"])  # never saved
    assert m["output_throughput"] == pytest.approx(4.5)


def test_e2e_from_itls_when_latencies_are_absent() -> None:
    d = hand_result()
    del d["latencies"]  # older vLLM versions
    m = summary_metrics(bench_result_from_dict(d))
    assert m["mean_e2el_ms"] == pytest.approx(350.0)


def test_replay_keeps_lengths_order_and_recorded_arrivals() -> None:
    r = bench_result_from_dict(hand_result())
    specs = bench_result_to_requests(r, mode="rate")
    assert specs.prompt_tokens.tolist() == [100, 200, 50]  # the failed request is dropped
    assert specs.output_tokens.tolist() == [5, 1, 3]
    assert specs.arrival_s.tolist() == pytest.approx([0.0, 0.5, 1.5])
    assert specs.origin.arrivals == "recorded" and specs.origin.dropped_failed == 1
    assert specs.closed_loop_concurrency is None


def test_replay_shipped_example() -> None:
    r = read_bench_result(EXAMPLE)
    assert "SYNTHETIC" in str(r.raw["synthetic"])
    specs = bench_result_to_requests(r)
    assert r.input_lens is not None and r.output_lens is not None and r.succeeded is not None
    assert len(specs) == int(r.succeeded.sum()) == r.completed
    assert specs.prompt_tokens.tolist() == r.input_lens[r.succeeded].tolist()
    assert specs.output_tokens.tolist() == r.output_lens[r.succeeded].tolist()
    assert np.all(np.diff(specs.arrival_s) >= 0)


def without_times(**meta: Any) -> dict[str, Any]:
    n = 4000
    recs = [rec(i, "finished", 0.0, 10 + i, 2 + i % 7, 0.1, 0.3, [0.2]) for i in range(n)]
    d = make_bench_result(recs, {"duration_s": 100.0, "num_requests": n, "completed": n},
                          meta=meta)
    del d["start_times"], d["queue_times"]
    return d


def test_replay_poisson_rate() -> None:
    r = bench_result_from_dict(without_times(request_rate=40.0, burstiness=1.0))
    specs = bench_result_to_requests(r, mode="rate", rng=np.random.default_rng(1))
    assert specs.origin.arrivals == "poisson"
    assert specs.prompt_tokens.tolist() == list(range(10, 4010))
    # vLLM rescales the offsets so the last request goes out at n / rate.
    assert specs.arrival_s[-1] == pytest.approx(4000 / 40.0)
    gaps = np.diff(specs.arrival_s)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.06)
    again = bench_result_to_requests(r, mode="rate", rng=np.random.default_rng(1))
    assert np.array_equal(again.arrival_s, specs.arrival_s)


def test_replay_gamma_rate() -> None:
    r = bench_result_from_dict(without_times(request_rate=40.0, burstiness=4.0))
    specs = bench_result_to_requests(r, mode="rate", rng=np.random.default_rng(2))
    assert specs.origin.arrivals == "gamma"
    gaps = np.diff(specs.arrival_s)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(0.5, abs=0.04)  # 1/sqrt(burstiness)


def test_replay_infinite_rate_and_missing_rng() -> None:
    specs = bench_result_to_requests(bench_result_from_dict(without_times()), mode="rate")
    assert np.all(specs.arrival_s == 0.0) and specs.origin.arrivals == "all at once"
    with pytest.raises(ValueError, match="needs rng"):
        bench_result_to_requests(bench_result_from_dict(without_times(request_rate=5.0)),
                                 mode="rate")


def test_replay_concurrency() -> None:
    d = hand_result(meta={"max_concurrency": 8, "request_rate": "inf"})
    r = bench_result_from_dict(d)
    specs = bench_result_to_requests(r)  # auto -> concurrency
    assert specs.closed_loop_concurrency == 8 and np.all(np.isnan(specs.arrival_s))
    assert specs.output_tokens.tolist() == [5, 1, 3]
    # vLLM's client queue time under a concurrency limit with everything sent at 0
    assert d["queue_times"] == d["start_times"]
    with pytest.raises(InputFileError, match="max_concurrency"):
        bench_result_to_requests(bench_result_from_dict(hand_result()), mode="concurrency")


def test_replay_needs_per_request_data() -> None:
    d = hand_result()
    del d["input_lens"], d["output_lens"]
    with pytest.raises(InputFileError, match="--save-detailed"):
        bench_result_to_requests(bench_result_from_dict(d, "x.json"))


def test_append_result_file_holds_several_results(tmp_path: Path) -> None:
    first, second = hand_result(), hand_result(meta={"model_id": "second"})
    path = tmp_path / "appended.json"
    path.write_text(json.dumps(first) + "\n" + json.dumps(second))
    assert read_bench_result(path).model_id == "second"
    assert read_bench_result(path, index=0).model_id == "m"
    with pytest.raises(InputFileError, match="holds 2 results"):
        read_bench_result(path, index=5)


@pytest.mark.parametrize("mutate,pattern", [
    (lambda d: d.pop("duration"), "missing field 'duration'"),
    (lambda d: d.pop("output_lens"), "missing field 'output_lens'"),
    (lambda d: d.update(completed="many"), "field 'completed': expected a number"),
    (lambda d: d.update(completed=2.5), "field 'completed': expected a whole number"),
    (lambda d: d.update(ttfts=[0.1, 0.2]), "field 'ttfts': has 2 entries; input_lens has 4"),
    (lambda d: d.update(input_lens=[1, "x", 3, 4]), "field 'input_lens': entry 1"),
    (lambda d: d.update(itls=[[0.1], 3, [], []]), "field 'itls': entry 1"),
    (lambda d: d.update(duration=0), "field 'duration': must be > 0"),
    (lambda d: d.update(burstiness=-1), "field 'burstiness'"),
])
def test_bad_fields_are_named(tmp_path: Path, mutate: Any, pattern: str) -> None:
    d = hand_result()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InputFileError, match=pattern) as info:
        read_bench_result(path)
    assert info.value.file == str(path)


def test_invalid_json_is_located(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "duration": 1.0,\n  "completed": ,\n}')
    with pytest.raises(InputFileError, match="not valid JSON") as info:
        read_bench_result(path)
    assert info.value.line == 3
    path.write_text("[1, 2]")
    with pytest.raises(InputFileError, match="expected a JSON object"):
        read_bench_result(path)
    with pytest.raises(InputFileError, match="no such file"):
        read_bench_result(tmp_path / "missing.json")
