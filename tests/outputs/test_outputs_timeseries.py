"""Time-weighted series: hand-computed examples, agreement with the summary, CSV round trip."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pdsim.config import SimConfig
from pdsim.errors import InputFileError
from pdsim.facts import InstanceFacts, StepColumns
from pdsim.results import Results
from pdsim.timeseries import (
    TIMESERIES_FIELDS,
    StepSeries,
    bin_edges,
    horizon_s,
    instance_series,
    link_series,
    nice_bin_s,
    output_tokens_integral,
    read_timeseries,
    throughput_bins,
    time_weighted_means,
    timeseries,
    write_timeseries,
)

# start, end, prefill_tokens, decode_requests, kv_used_blocks, running, waiting, receiving
STEPS = np.array([
    [0.1, 0.3, 100, 0, 10, 2, 1, 0],
    [0.3, 0.4, 0, 2, 20, 3, 0, 1],
    # idle from 0.4 to 0.6
    [0.6, 1.0, 0, 1, 5, 1, 0, 0],
], dtype=np.float64)
EDGES = np.array([0.0, 0.5, 1.0])


def facts(name: str = "D0", role: str = "decode", log: np.ndarray = STEPS) -> InstanceFacts:
    return InstanceFacts(name=name, role=role, num_blocks=100,
                         steps=StepColumns.from_matrix(log),
                         busy_s=float((log[:, 1] - log[:, 0]).sum()), preemptions=0)


def test_step_series_integral_by_hand() -> None:
    s = StepSeries(np.array([1.0, 2.0, 2.0, 4.0]), np.array([3.0, 99.0, 5.0, 0.0]))
    # 0 before 1 s; 3 on [1, 2); the 99 holds for no time; 5 on [2, 4); 0 after
    assert s.integral(np.array([0.5, 1.5, 2.0, 3.0, 10.0])).tolist() == pytest.approx(
        [0.0, 1.5, 3.0, 8.0, 13.0])
    assert s.bin_means(np.array([0.0, 2.0, 4.0])).tolist() == pytest.approx([1.5, 5.0])
    assert s.mean(1.0, 4.0) == pytest.approx(13.0 / 3.0)
    assert s.mean(2.0, 2.0) == 0.0


def test_instance_series_idle_zero_by_hand() -> None:
    s = instance_series(facts())
    # bin [0, 0.5): 10 blocks for 0.2 s + 20 for 0.1 s = 4 block-seconds / 0.5 s
    assert s["kv_used_blocks"].bin_means(EDGES).tolist() == pytest.approx([8.0, 4.0])
    assert s["kv_usage"].bin_means(EDGES).tolist() == pytest.approx([0.08, 0.04])
    assert s["running"].bin_means(EDGES).tolist() == pytest.approx([1.4, 0.8])
    assert s["waiting"].bin_means(EDGES).tolist() == pytest.approx([0.4, 0.0])
    assert s["receiving"].bin_means(EDGES).tolist() == pytest.approx([0.2, 0.0])
    assert s["batch_prefill_tokens"].bin_means(EDGES).tolist() == pytest.approx([40.0, 0.0])
    assert s["batch_decode_requests"].bin_means(EDGES).tolist() == pytest.approx([0.4, 0.8])
    assert s["busy"].bin_means(EDGES).tolist() == pytest.approx([0.6, 0.8])


def test_instance_series_idle_hold_by_hand() -> None:
    s = instance_series(facts(), idle="hold")
    # the count after step 2 (20 blocks) holds through the gap to 0.6 s
    assert s["kv_used_blocks"].bin_means(EDGES).tolist() == pytest.approx([12.0, 8.0])
    assert s["running"].bin_means(EDGES).tolist() == pytest.approx([2.0, 1.4])
    # batch composition and busy are 0 between steps either way
    assert s["busy"].bin_means(EDGES).tolist() == pytest.approx([0.6, 0.8])
    with pytest.raises(ValueError, match="idle"):
        instance_series(facts(), idle="guess")


def test_empty_instance_is_zero() -> None:
    s = instance_series(facts(log=np.empty((0, 8))))
    assert s["kv_usage"].bin_means(EDGES).tolist() == [0.0, 0.0]


def test_link_series_by_hand() -> None:
    # busy at 7 GB/s on [0.2, 0.3) and [0.3, 0.45): two transfers back to back
    samples = [(0.2, 7e9), (0.3, 0.0), (0.3, 7e9), (0.45, 0.0)]
    s = link_series(samples)
    assert s["link_gb_per_s"].bin_means(EDGES).tolist() == pytest.approx([3.5, 0.0])
    assert s["link_busy"].bin_means(EDGES).tolist() == pytest.approx([0.5, 0.0])
    assert link_series([])["link_busy"].bin_means(EDGES).tolist() == [0.0, 0.0]


def test_output_tokens_by_hand() -> None:
    first = np.array([0.1, 0.2, 0.7, 0.8, np.nan])
    finish = np.array([0.5, np.nan, 0.7, 0.8, np.nan])
    out = np.array([5, 3, 1, 3, 0])
    # request 0: 1 token at 0.1, 4 spread over [0.1, 0.5]; request 1: still decoding, its
    # first token only; request 2: one token at 0.7; request 3: all 3 at 0.8; 4: nothing
    total = output_tokens_integral(first, finish, out, np.array([0.1, 0.3, 0.5, 1.0]))
    assert total.tolist() == pytest.approx([1.0, 4.0, 6.0, 10.0])
    assert throughput_bins(first, finish, out, EDGES).tolist() == pytest.approx([12.0, 8.0])


def test_token_at_run_end_counts() -> None:
    tok = throughput_bins(np.array([0.2]), np.array([1.0]), np.array([1]), EDGES)
    assert tok.tolist() == [2.0, 0.0]
    tok = throughput_bins(np.array([1.0]), np.array([1.0]), np.array([2]), EDGES)
    assert tok.tolist() == [0.0, 4.0]


def test_bins() -> None:
    assert nice_bin_s(92.9, 500) == pytest.approx(0.2)
    assert nice_bin_s(3600, 500) == pytest.approx(10.0)
    assert nice_bin_s(1.0, 100) == pytest.approx(0.01)
    e = bin_edges(1.05, 0.5)
    assert e.tolist() == pytest.approx([0.0, 0.5, 1.0, 1.05])
    assert bin_edges(1.0, 0.5).tolist() == pytest.approx([0.0, 0.5, 1.0])
    with pytest.raises(ValueError):
        bin_edges(1.0, 0.0)


def small_results(cfg: SimConfig) -> Results:
    recs = [{"first_token_s": 0.1, "finish_s": 0.5, "output_tokens": 5, "arrival_s": 0.0,
             "status": "finished", "prefill_instance": "P0", "p_start_s": 0.0,
             "p_end_s": 0.25},
            {"first_token_s": 0.7, "finish_s": None, "output_tokens": 1, "arrival_s": 0.6,
             "status": "in_flight", "prefill_instance": "P0", "p_start_s": 0.6,
             "p_end_s": 0.7},
            {"first_token_s": None, "finish_s": None, "output_tokens": 0, "arrival_s": 0.1,
             "status": "failed", "prefill_instance": None, "p_start_s": None,
             "p_end_s": None}]
    return Results(cfg, recs, [facts("P0", "prefill", STEPS[:1]), facts()], {},
                   {"P0->D0": [(0.2, 7e9), (0.45, 0.0)]})


def test_timeseries_table_by_hand(mtp3_cfg: SimConfig, tmp_path: Path) -> None:
    res = small_results(mtp3_cfg)
    assert horizon_s(res) == 1.0
    ts = timeseries(res, bin_s=0.5)
    assert ts.edges_s.tolist() == [0.0, 0.5, 1.0]
    assert list(ts.tracks) == ["P0", "D0", "P0->D0", "cluster"]
    assert [t.kind for t in ts.tracks.values()] == ["prefill", "decode", "link", "cluster"]
    assert ts.tracks["P0"].values["kv_used_blocks"].tolist() == pytest.approx([4.0, 0.0])
    assert ts.tracks["D0"].values["kv_used_blocks"].tolist() == pytest.approx([8.0, 4.0])
    assert ts.tracks["P0->D0"].values["link_gb_per_s"].tolist() == pytest.approx([3.5, 0.0])
    assert ts.tracks["cluster"].values["output_tok_s"].tolist() == pytest.approx([10.0, 2.0])
    # in the system: [0, 0.5) finished, [0.6, 1.0) in flight to the end; failed: left out
    assert ts.tracks["cluster"].values["in_system"].tolist() == pytest.approx([1.0, 0.8])
    assert ts.tracks["P0"].values["prefilling"].tolist() == pytest.approx([0.5, 0.2])
    assert "prefilling" not in ts.tracks["D0"].values
    rows = ts.rows()
    assert len(rows) == 8 and set(rows[0]) == set(TIMESERIES_FIELDS)
    assert rows[0]["link_gb_per_s"] is None and rows[4]["kv_usage"] is None

    path = write_timeseries(res, tmp_path / "timeseries.csv", bin_s=0.5)
    header = path.read_text().splitlines()[0]
    assert header == ",".join(TIMESERIES_FIELDS)
    back = read_timeseries(path)
    assert back.edges_s.tolist() == ts.edges_s.tolist()
    for name, track in ts.tracks.items():
        assert back.tracks[name].kind == track.kind
        assert set(back.tracks[name].values) == set(track.values)
        for k, v in track.values.items():
            assert back.tracks[name].values[k].tolist() == v.tolist()  # repr round-trips


def test_means_agree_with_summary(mtp3_res: Results) -> None:
    means = time_weighted_means(mtp3_res)
    for name, inst in mtp3_res.summary["instances"].items():
        assert means[name]["kv_usage"] == pytest.approx(inst["mean_kv_usage"], rel=1e-9)
        assert means[name]["running"] == pytest.approx(inst["mean_running"], rel=1e-9,
                                                       abs=1e-12)
        assert means[name]["busy"] == pytest.approx(inst["busy_fraction"], rel=1e-9)


def test_binned_series_conserve_totals(mtp3_res: Results) -> None:
    ts = timeseries(mtp3_res)
    width = np.diff(ts.edges_s)
    assert len(width) <= 500 and ts.edges_s[-1] == pytest.approx(horizon_s(mtp3_res))
    tokens = (ts.tracks["cluster"].values["output_tok_s"] * width).sum()
    assert tokens == pytest.approx(mtp3_res.summary["total_output_tokens"])
    means = time_weighted_means(mtp3_res)
    h = horizon_s(mtp3_res)
    for name, track in ts.tracks.items():
        if track.kind == "cluster":
            continue
        for k, v in track.values.items():
            if k == "prefilling":  # from the records, not the step log
                continue
            assert (v * width).sum() / h == pytest.approx(means[name][k], rel=1e-9, abs=1e-12)
    usage = np.concatenate([t.values["kv_usage"] for t in ts.of_kind("prefill", "decode")])
    assert usage.min() >= 0 and usage.max() <= 1
    # the link moved every transferred byte at its bandwidth
    link = ts.tracks["P0->D0"].values["link_gb_per_s"]
    moved_gb = (link * width).sum()
    assert moved_gb == pytest.approx(mtp3_res.summary["kv_bytes_transferred"] / 1e9, rel=1e-6)


def test_pandas_view(mtp3_res: Results) -> None:
    pd = pytest.importorskip("pandas")
    df = timeseries(mtp3_res).to_pandas()
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == list(TIMESERIES_FIELDS)
    assert set(df.track) == {"P0", "D0", "P0->D0", "cluster"}
    assert math.isnan(df[df.track == "cluster"].kv_usage.iloc[0])


def test_read_timeseries_errors(tmp_path: Path) -> None:
    p = tmp_path / "timeseries.csv"
    p.write_text("time_s,track\n0,D0\n")
    with pytest.raises(InputFileError, match=r"timeseries.csv:1: missing column"):
        read_timeseries(p)
    p.write_text("time_s,end_s,track,kind,kv_usage\n0,x,D0,decode,1\n")
    with pytest.raises(InputFileError, match=r"timeseries.csv:2: not a number"):
        read_timeseries(p)
    with pytest.raises(InputFileError, match="cannot read"):
        read_timeseries(tmp_path / "absent.csv")


def test_running_on_p_is_the_requests_holding_a_prefill_slot(mtp3_res: Results) -> None:
    """P's "running" is one figure everywhere: requests holding a prefill slot
    (``[p_start_s, p_end_s)``), not the step log's batch at step ends (0 while P is busy)."""
    from pdsim.metrics import prefill_slot_intervals

    p = mtp3_res.summary["instances"]["P0"]
    assert p["busy_fraction"] > 0.1
    start, end = prefill_slot_intervals(mtp3_res.to_records(), "P0")
    horizon = max(float(f.step_end_s[-1]) for f in mtp3_res.instances)
    assert p["mean_running"] == pytest.approx(float((end - start).sum()) / horizon)
    assert p["mean_running"] > 0.1
    ts = timeseries(mtp3_res)
    track = ts.tracks["P0"].values
    assert track["running"].tolist() == track["prefilling"].tolist()
    width = np.diff(ts.edges_s)
    assert float((track["running"] * width).sum()) / horizon == pytest.approx(
        p["mean_running"], rel=1e-9)
