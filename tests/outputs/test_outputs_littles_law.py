"""``timeseries.csv`` counts every request in the system under P/D: Little's law holds on
its ``in_system`` column (read back from the file) against the request records, P's
batch shows the requests it prefills, and the plots say their values are bin means."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsim.compare import Comparison
from pdsim.plot_data import run_data
from pdsim.plots import queue_depth_figure, throughput_figure
from pdsim.results import Results
from pdsim.timeseries import read_timeseries, write_timeseries


def _mean(values: np.ndarray, edges: np.ndarray) -> float:
    return float((values * np.diff(edges)).sum() / (edges[-1] - edges[0]))


@pytest.mark.parametrize("fixture", ["mtp3_res", "res_2p2d"])
def test_littles_law_holds_on_timeseries_csv(fixture: str, request: pytest.FixtureRequest,
                                             tmp_path: Path) -> None:
    res: Results = request.getfixturevalue(fixture)
    ts = read_timeseries(write_timeseries(res, tmp_path / "timeseries.csv"))
    horizon = float(ts.edges_s[-1])
    finished = [r for r in res.records if r["status"] == "finished"]
    assert len(finished) == len(res.records)
    rate = len(finished) / horizon
    mean_time_in_system = float(np.mean([r["finish_s"] - r["arrival_s"] for r in finished]))
    in_system = _mean(ts.tracks["cluster"].values["in_system"], ts.edges_s)
    assert in_system == pytest.approx(rate * mean_time_in_system, rel=0.01)


def test_prefill_batch_is_not_flat_zero(res_2p2d: Results, tmp_path: Path) -> None:
    ts = read_timeseries(write_timeseries(res_2p2d, tmp_path / "timeseries.csv"))
    horizon = float(ts.edges_s[-1])
    for track in ts.of_kind("prefill"):
        mine = [r for r in res_2p2d.records if r["prefill_instance"] == track.name]
        busy = sum(r["p_end_s"] - r["p_start_s"] for r in mine)
        assert busy > 0
        assert _mean(track.values["prefilling"], ts.edges_s) == pytest.approx(
            busy / horizon, rel=1e-6)
    for track in ts.of_kind("decode"):
        assert "prefilling" not in track.values


def test_plots_label_bin_means_and_merge_identical_curves(mtp3_res: Results) -> None:
    fig = queue_depth_figure(mtp3_res)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert "mean per" in labels[0] and "in the system" in labels[0]
    assert "mean per" in (fig.get_suptitle() or "")
    run = run_data(mtp3_res)
    fig = throughput_figure({"pd_before_fix": run, "pd_after_fix": run})
    legend = fig.axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[0] == "P/D before fix = P/D after fix"
    assert len(fig.axes[0].patches) == 1  # one stairs curve, not two on top of each other
    assert "mean per" in fig.axes[-1].get_ylabel() and "GB/s" in fig.axes[-1].get_ylabel()


def test_comparison_throughput_shows_tokens_after_minus_before(mtp3_cmp: Comparison) -> None:
    fig = throughput_figure(mtp3_cmp)
    assert len(fig.axes) == 3
    ahead = fig.axes[1]
    assert "after - before" in ahead.get_ylabel()
    values = ahead.patches[0].get_data().values
    before, after = (mtp3_cmp.variants[v].summary for v in ("pd_before_fix", "pd_after_fix"))
    assert values[-1] == pytest.approx(after.total_output_tokens - before.total_output_tokens,
                                       abs=1e-6)
    assert float(np.abs(values).max()) > 0  # the curves above overlap; this panel does not
