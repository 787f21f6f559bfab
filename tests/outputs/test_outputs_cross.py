"""Every figure pdsim shows agrees with every other (issue 27): one run of each shipped
config (shrunk with ``--set workload.num_requests``) rendered through every output (the CLI
table, summary.json, bench_result.json, requests.csv, timeseries.csv, what the plots read,
the HTML report's summary), and each figure that appears in more than one compared."""

from __future__ import annotations

import csv
import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

import pdsim
from pdsim.errors import ConfigError
from pdsim.html_report import _fmt as html_fmt
from pdsim.html_report import instances_html, summary_html
from pdsim.plot_data import read_run_dir
from pdsim.report import summary_table
from pdsim.results import Results
from pdsim.summary import display
from pdsim.timeseries import read_timeseries
from pdsim.writers import write_run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
NUM_REQUESTS = 40
REL = 1e-9


def _load(path: Path) -> pdsim.SimConfig:
    try:
        return pdsim.load_config(path, [f"workload.num_requests={NUM_REQUESTS}"])
    except ConfigError:  # a trace replay: its length is the trace's
        return pdsim.load_config(path)


@pytest.fixture(scope="module", params=CONFIGS, ids=[p.stem for p in CONFIGS])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Results, Path, dict[str, Any]]:
    res = pdsim.simulate(_load(request.param))
    out = tmp_path_factory.mktemp(request.param.stem)
    write_run(res, out)
    summary = json.loads((out / "summary.json").read_text())["summary"]
    return res, out, summary


def _close(a: Any, b: Any, rel: float = REL) -> bool:
    if a is None or b is None:
        return (a is None and b is None) or any(
            isinstance(x, float) and math.isnan(x) for x in (a, b))
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-12)


def test_summary_json_is_the_summary(rendered: tuple[Results, Path, dict[str, Any]]) -> None:
    res, _, summary = rendered
    live = json.loads(pdsim.output.to_json(res.summary.as_dict()))
    assert summary == live


def test_cli_table_shows_the_summary_json_figures(
        rendered: tuple[Results, Path, dict[str, Any]]) -> None:
    _, _, s = rendered
    console = Console(width=200, record=True)
    console.print(summary_table(s))
    text = console.export_text()

    def row(label: str) -> str:
        (line,) = [ln for ln in text.splitlines() if ln.strip(" │").startswith(label)]
        return line

    for key, label in (("ttft_s", "TTFT (ms)"), ("tpot_s", "TPOT (ms)"), ("itl_s", "ITL (ms)"),
                       ("e2e_s", "E2E (s)")):
        scale = display(f"mean_{key}").scale
        shown = [c.strip() for c in row(label).strip(" │").split("│")[1:]]
        want = ["-" if s[f"{p}_{key}"] is None else f"{s[f'{p}_{key}'] * scale:.2f}"
                for p in ("mean", "p50", "p90", "p99")]
        assert shown == want, label
    assert row("duration (s)").split()[-1] == f"{s['duration_s']:.2f}"
    if s["completed"]:
        assert row("request throughput (req/s)").split()[-1] == \
            f"{s['request_throughput_req_s']:.3f}"
    if s["num_draft_tokens"]:
        assert row("acceptance length").split()[-1] == f"{s['acceptance_length']:.3f}"
        assert row("acceptance rate (%)").split()[-1] == f"{s['acceptance_rate'] * 100:.2f}"
    assert row("preemptions").split()[-1] == str(s["preemptions"])


def test_bench_result_and_requests_csv_agree_with_the_summary(
        rendered: tuple[Results, Path, dict[str, Any]]) -> None:
    _, out, s = rendered
    bench = json.loads((out / "bench_result.json").read_text())
    assert bench["completed"] == s["completed"]
    assert _close(bench["duration"], s["duration_s"])
    assert _close(bench["request_throughput"], s["request_throughput_req_s"])
    assert _close(bench["output_throughput"], s["output_throughput_tok_s"])
    assert bench["total_output_tokens"] == s["total_output_tokens"]
    for metric, key in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "itl_s"),
                        ("e2el", "e2e_s")):
        assert _close(bench[f"mean_{metric}_ms"], s[f"mean_{key}"] * 1e3), metric
        assert _close(bench[f"median_{metric}_ms"], s[f"p50_{key}"] * 1e3), metric
        assert _close(bench[f"p99_{metric}_ms"], s[f"p99_{key}"] * 1e3), metric
    if s["num_drafts"]:  # vLLM's result file gives the rate in percent
        assert _close(bench["spec_decode_acceptance_rate"], s["acceptance_rate"] * 100)
        assert _close(bench["spec_decode_acceptance_length"], s["acceptance_length"])
        assert bench["spec_decode_num_drafts"] == s["num_drafts"]
        assert bench["spec_decode_accepted_tokens"] == s["num_accepted_tokens"]
    with open(out / "requests.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == s["num_requests"]
    finished = [r for r in rows if r["status"] == "finished"]
    assert len(finished) == s["completed"]
    if finished:
        assert _close(np.mean([float(r["ttft_s"]) for r in finished]), s["mean_ttft_s"])


def test_timeseries_means_are_the_summary_means(
        rendered: tuple[Results, Path, dict[str, Any]]) -> None:
    """Each instance's running requests and KV usage, time-weighted over the run, are the
    same number in summary.json, timeseries.csv and what the plots read."""
    res, out, s = rendered
    ts = read_timeseries(out / "timeseries.csv")
    width = np.diff(ts.edges_s)
    horizon = max((float(f.step_end_s[-1]) for f in res.instances if len(f.step_end_s)),
                  default=0.0)
    plotted = read_run_dir(out).series
    assert plotted is not None
    for name, inst in s["instances"].items():
        track = ts.tracks[name].values
        for col, key in (("running", "mean_running"), ("kv_usage", "mean_kv_usage")):
            mean = float((track[col] * width).sum()) / horizon if horizon else 0.0
            assert _close(mean, inst[key], 1e-6), (name, col)
        assert plotted.tracks[name].values["running"].tolist() == track["running"].tolist()
        if inst["role"] == "prefill" and inst["busy_fraction"] > 0.05:
            assert inst["mean_running"] > 0, name  # P busy: requests hold its slots


def test_html_report_shows_the_summary_json_figures(
        rendered: tuple[Results, Path, dict[str, Any]]) -> None:
    _, out, s = rendered
    run = read_run_dir(out)
    page = html.unescape(summary_html({"run": run}))
    cells = dict(re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>", page))
    for key, value in s.items():
        if key == "name" or isinstance(value, dict | list):
            continue
        shown = display(key)
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        scaled = float(value) * shown.scale if numeric and shown.scale != 1.0 else value
        assert cells[shown.label] == html_fmt(scaled), key
    table = instances_html(s["instances"])
    assert table is not None
    for name, inst in s["instances"].items():
        assert f"<td>{round(float(inst['mean_running']), 2)}</td>" in table, name
