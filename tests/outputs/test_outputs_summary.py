"""The typed summary: its JSON keys (the contract every consumer of summary.json reads), the
typed fields behind them, and what is written to disk."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import pdsim
from pdsim.results import Results
from pdsim.summary import PERCENTILES, LatencyStats, RunSummary
from pdsim.writers import write_run

# summary.json's keys, in order (the SLO keys sit between preemptions and instances)
HEAD_KEYS = [
    "num_requests", "completed", "failed", "rejected", "in_flight", "failure_reasons",
    "duration_s", "total_input_tokens", "total_output_tokens", "request_throughput_req_s",
    "output_throughput_tok_s", "total_token_throughput_tok_s",
    *(f"{stat}_{metric}" for metric in ("ttft_s", "tpot_s", "e2e_s", "itl_s")
      for stat in ("mean", "std", "p50", "p90", "p99")),
    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos",
    "acceptance_rate", "acceptance_length", "per_position_acceptance_rates",
    "kv_bytes_transferred", "kv_transfer_time_s", "mean_kv_transfer_s",
    "tokens_recomputed_on_d", "d_local_prefill_tokens", "preemptions",
]
SLO_KEYS = ["slo_attainment", "goodput_req_s", "slo_ttft_percentile_s",
            "slo_tpot_percentile_s", "slo_met"]
TAIL_KEYS = ["instances", "kv_lease_expired", "faults", "prefix_cache_hit_rate"]
INSTANCE_KEYS = ["role", "steps", "busy_fraction", "mean_kv_usage", "mean_running",
                 "preemptions"]


def same(a: object, b: object) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
            and math.isnan(b)) or a == b


def test_keys_and_order_without_slo(mtp3_res: Results) -> None:
    s = mtp3_res.summary
    assert isinstance(s, RunSummary)
    assert mtp3_res.config.slo.ttft_s is None and mtp3_res.config.slo.tpot_s is None
    assert s.slo is None
    assert list(s.as_dict()) == HEAD_KEYS + TAIL_KEYS
    for inst in s.as_dict()["instances"].values():
        assert list(inst) == INSTANCE_KEYS


def test_keys_and_order_with_slo() -> None:
    cfg = pdsim.load_config(Path(__file__).resolve().parents[2] / "configs" / "mtp3.yaml",
                            overrides=["workload.num_requests=40", "slo.ttft_s=0.5"])
    s = pdsim.simulate(cfg).summary
    assert s.slo is not None
    assert list(s.as_dict()) == HEAD_KEYS + SLO_KEYS + TAIL_KEYS
    assert s["slo_met"] is s.slo.met
    assert 0.0 <= s.slo.attainment <= 1.0


def test_mapping_view_is_the_typed_fields(mtp3_res: Results) -> None:
    s = mtp3_res.summary
    d = s.as_dict()
    assert len(s) == len(d) and list(s) == list(d)
    assert all(same(s[k], v) for k, v in d.items())
    assert dict(s.items()).keys() == d.keys()
    for metric, stats in (("ttft_s", s.ttft), ("tpot_s", s.tpot), ("e2e_s", s.e2e),
                          ("itl_s", s.itl)):
        assert s[f"mean_{metric}"] == stats.mean_s
        for p in PERCENTILES:
            assert s[f"p{p}_{metric}"] == getattr(stats, f"p{p}_s")
    sd = s.spec_decode
    assert sd.num_drafts > 0
    assert s["acceptance_length"] == sd.acceptance_length == 1 + (
        sd.num_accepted_tokens / sd.num_drafts)
    assert s["num_accepted_tokens_per_pos"] == list(sd.num_accepted_tokens_per_pos)
    assert sum(sd.num_accepted_tokens_per_pos) == sd.num_accepted_tokens
    assert s["completed"] == sum(r["status"] == "finished" for r in mtp3_res.records)


def test_latency_stats_follow_the_records(mtp3_res: Results) -> None:
    ttft = np.asarray([r["ttft_s"] for r in mtp3_res.records if r["status"] == "finished"])
    assert mtp3_res.summary.ttft == LatencyStats(
        float(ttft.mean()), float(ttft.std()),
        *(float(np.percentile(ttft, p)) for p in PERCENTILES))


def test_summary_json_holds_the_json_form(mtp3_res: Results, tmp_path: Path) -> None:
    write_run(mtp3_res, tmp_path)
    doc = json.loads((tmp_path / "summary.json").read_text())
    on_disk = doc["summary"]
    live = mtp3_res.summary.as_dict()
    assert list(on_disk) == list(live)
    for k, v in live.items():
        assert on_disk[k] == v or (v != v and on_disk[k] is None), k


def _printed(summary: dict[str, object]) -> str:
    from rich.console import Console

    from pdsim.report import summary_table

    console = Console(width=200, record=True)
    console.print(summary_table(summary))
    return console.export_text()


def test_printed_summary_shows_the_prefix_hit_rate_when_prefixes_are_cached(
        mtp3_res: Results) -> None:
    """`pdsim run` prints the prefix cache hit rate, the figure prefix-aware routing and
    prefix caching are judged by, when the run cached prefixes; not otherwise."""
    summary = dict(mtp3_res.summary.as_dict())
    assert math.isnan(summary["prefix_cache_hit_rate"])
    assert "prefix cache hit rate" not in _printed(summary)
    summary["prefix_cache_hit_rate"] = 0.4321
    line = next(ln for ln in _printed(summary).splitlines() if "prefix cache hit rate" in ln)
    assert line.split()[-1] == "43.2"
