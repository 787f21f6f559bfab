"""Plots: figures from results, PNG files that decode and are not blank, ``pdsim plot``."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
import yaml
from matplotlib.figure import Figure
from typer.testing import CliRunner

import pdsim
from pdsim import plot_data, plots
from pdsim.cli import app
from pdsim.compare import Comparison
from pdsim.errors import InputFileError, PdsimError
from pdsim.results import Results
from pdsim.run_folder import finish_folder
from pdsim.timeseries import write_timeseries
from pdsim.writers import write_run

MTP3 = Path(__file__).resolve().parents[2] / "configs" / "mtp3.yaml"
SMALL = ["--set", "workload.num_requests=60"]


def assert_png(path: Path) -> None:
    """A PNG a person can open: present, decodable, of a useful size, not blank."""
    assert path.is_file() and path.stat().st_size > 5_000, path
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] >= 300 and img.shape[1] >= 600
    assert float(np.std(img[..., :3])) > 0.02, f"{path.name} looks blank"


def test_figures_from_results(mtp3_res: Results) -> None:
    for fn in (plots.latency_cdf_figure, plots.acceptance_figure, plots.kv_usage_figure,
               plots.queue_depth_figure, plots.throughput_figure):
        fig = fn(mtp3_res)
        assert isinstance(fig, Figure)
        assert any(ax.has_data() for ax in fig.axes), fn.__name__


def test_figures_from_comparison(mtp3_cmp: Comparison) -> None:
    fig = plots.acceptance_figure(mtp3_cmp)
    ax = fig.axes[0]
    n = len(mtp3_cmp.variants["pd_after_fix"].summary["per_position_acceptance_rates"])
    assert len(ax.patches) == n * len(mtp3_cmp.variants)  # one bar per position and run
    heights = [p.get_height() for p in ax.patches]
    after = mtp3_cmp.variants["pd_after_fix"].summary["per_position_acceptance_rates"]
    assert heights[n:2 * n] == pytest.approx([r * 100 for r in after])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("P/D before fix") and labels[1].startswith("P/D after fix")
    assert isinstance(plots.metrics_figure(mtp3_cmp), Figure)
    cdf = plots.latency_cdf_figure(mtp3_cmp)
    assert len(cdf.axes[0].get_lines()) == len(mtp3_cmp.variants)
    # a mapping of names to results overlays them too
    two = {"a": mtp3_cmp.variants["pd_before_fix"], "b": mtp3_cmp.variants["pd_after_fix"]}
    assert len(plots.kv_usage_figure(two).axes[0].patches) == 4  # 2 runs x 2 instances
    with pytest.raises(TypeError):
        plots.latency_cdf_figure(42)


def test_write_run_plots(mtp3_res: Results, tmp_path: Path) -> None:
    files = plots.write_run_plots(mtp3_res, tmp_path)
    assert [f.name for f in files] == list(plots.RUN_PLOTS)
    for f in files:
        assert_png(f)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_write_comparison_plots(mtp3_cmp: Comparison, tmp_path: Path) -> None:
    files = plots.write_comparison_plots(mtp3_cmp, tmp_path)
    assert [f.name for f in files] == list(plots.COMPARE_PLOTS)
    for f in files:
        assert_png(f)


def test_no_speculation_skips_acceptance_plot(tmp_path: Path) -> None:
    data = yaml.safe_load(MTP3.read_text())
    data["speculative"] = {"method": "none"}
    data["workload"]["num_requests"] = 30
    cfg = pdsim.load_config(data)
    res = pdsim.simulate(cfg)
    names = [f.name for f in plots.write_run_plots(res, tmp_path)]
    assert "acceptance_per_position.png" not in names and "latency_cdf.png" in names
    assert isinstance(plots.acceptance_figure(res), Figure)  # says so instead of failing


def test_read_run_dir_matches_memory(mtp3_res: Results, tmp_path: Path) -> None:
    write_run(mtp3_res, tmp_path)
    write_timeseries(mtp3_res, tmp_path / "timeseries.csv")
    disk, mem = plot_data.read_run_dir(tmp_path), plot_data.run_data(mtp3_res)
    assert disk.name == mem.name
    assert disk.requests is not None and mem.requests is not None
    for k in plot_data.REQUEST_COLUMNS:
        if k == "status":
            assert disk.requests[k].tolist() == mem.requests[k].tolist()
        else:
            np.testing.assert_array_equal(disk.requests[k], mem.requests[k])
    assert disk.series is not None and mem.series is not None
    assert list(disk.series.tracks) == list(mem.series.tracks)
    (tmp_path / "requests.csv").unlink()  # parquet is read when the CSV is gone
    if (tmp_path / "requests.parquet").is_file():
        back = plot_data.read_run_dir(tmp_path)
        assert back.requests is not None
        np.testing.assert_array_equal(back.requests["ttft_s"], mem.requests["ttft_s"])


def test_plot_result_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such result directory"):
        plots.plot_result_dir(tmp_path / "absent")
    with pytest.raises(PdsimError, match="not a pdsim result directory"):
        plots.plot_result_dir(tmp_path)
    (tmp_path / "summary.json").write_text('{"summary": {}}\n')
    (tmp_path / "requests.csv").write_text("request_id,status\n0,finished\n")
    with pytest.raises(InputFileError, match=r"no manifest\.json"):
        plots.plot_result_dir(tmp_path)  # not sealed by a finished run
    finish_folder(tmp_path, ["summary.json", "requests.csv"], {})  # sealed as they are
    with pytest.raises(InputFileError, match=r"requests.csv:1: missing column"):
        plots.plot_result_dir(tmp_path)
    (tmp_path / "summary.json").write_text('{"summary": \n')
    finish_folder(tmp_path, ["summary.json", "requests.csv"], {})
    with pytest.raises(InputFileError, match=r"summary.json:2:1: not valid JSON"):
        plots.plot_result_dir(tmp_path)
    (tmp_path / "summary.json").unlink()
    (tmp_path / "compare.json").write_text('{"table": []}')
    # the folder's manifest seals a run whose files are gone: a mixed folder, refused
    with pytest.raises(InputFileError, match=r"does not match manifest\.json"):
        plots.plot_result_dir(tmp_path)
    (tmp_path / "manifest.json").unlink()  # a hand-made compare folder: read as it is
    with pytest.raises(InputFileError, match="no 'summaries'"):
        plots.plot_result_dir(tmp_path)


# ------------------------------------------------------------------------------ CLI

runner = CliRunner()


def test_cli_run_then_plot(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", str(MTP3), *SMALL, "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["plot", str(out)])
    assert r.exit_code == 0, r.output
    for name in ("latency_cdf.png", "acceptance_per_position.png", "throughput.png"):
        assert_png(out / name)
        assert f"wrote {out / name}" in r.output
    if not (out / "timeseries.csv").is_file():  # until pdsim run writes it
        assert "no timeseries.csv" in r.output
        write_timeseries(pdsim.simulate(pdsim.load_config(
            MTP3, overrides=["workload.num_requests=60"])), out / "timeseries.csv")
    elsewhere = tmp_path / "png"
    r = runner.invoke(app, ["plot", str(out), "--out", str(elsewhere)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in elsewhere.glob("*.png")) == sorted(plots.RUN_PLOTS)
    for p in elsewhere.glob("*.png"):
        assert_png(p)


def test_cli_run_with_plots_and_timeline(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", str(MTP3), *SMALL, "--out", str(out), "--plots",
                            "--timeline"])
    assert r.exit_code == 0, r.output
    for name in plots.RUN_PLOTS:
        assert_png(out / name)
    doc = json.loads((out / "timeline.json").read_text())
    assert any(e["ph"] == "X" for e in doc["traceEvents"])


def test_cli_compare_then_plot(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    r = runner.invoke(app, ["compare", str(MTP3), *SMALL, "--out", str(out), "--plots"])
    assert r.exit_code == 0, r.output
    for name in plots.COMPARE_PLOTS:
        assert_png(out / name)
    again = tmp_path / "again"
    r = runner.invoke(app, ["plot", str(out), "--out", str(again)])
    assert r.exit_code == 0, r.output
    # compare.json holds summaries only: bars and the metrics chart
    assert sorted(p.name for p in again.glob("*.png")) == [
        "compare_acceptance_per_position.png", "compare_metrics.png"]
    for p in again.glob("*.png"):
        assert_png(p)


def test_cli_plot_missing_dir(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plot", str(tmp_path / "nope")])
    assert r.exit_code == 2
    assert "error:" in r.output and "no such result directory" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(app, ["plot", str(tmp_path)])
    assert r.exit_code == 2
    assert "error:" in r.output and "not a pdsim result directory" in r.output


def test_topology_links_plot_one_curve_per_node_and_direction() -> None:
    """With a transfer topology every NIC is a link track (20 on configs/hetero_pd.yaml);
    the throughput plot sums them per node and direction, so its legend stays readable
    and the curves still carry every byte."""
    cfg = pdsim.load_config(MTP3.parent / "hetero_pd.yaml", ["workload.num_requests=20"])
    res = pdsim.simulate(cfg)
    assert len(res.links) > 8
    fig = plots.throughput_figure(res)
    lax = fig.axes[-1]
    labels = [t.get_text() for t in lax.get_legend().get_texts()]
    groups = plot_data.link_groups(list(res.links))
    assert len(labels) == len(groups) <= 6
    assert sorted(n for names in groups.values() for n in names) == sorted(res.links)
    for label in labels:
        node, kind, direction = label.split(" ")[:3]
        assert node.startswith("node") and kind == "NICs" and direction in ("tx", "rx")
    # the summed curves hold what the per-NIC tracks hold, bin by bin
    series = plot_data.run_data(res).series
    assert series is not None
    per_nic = sum(np.nan_to_num(t.values["link_gb_per_s"]).sum()
                  for t in series.of_kind("link"))
    drawn = sum(np.nan_to_num(p.get_data().values).sum() for p in lax.patches)
    assert drawn == pytest.approx(per_nic)


def test_link_groups_keep_pair_links_and_sum_ports() -> None:
    assert plot_data.link_groups(["P0->D0", "P0->D1"]) == {"P0->D0": ["P0->D0"],
                                                         "P0->D1": ["P0->D1"]}
    assert plot_data.link_groups(
        ["node0/nic0/tx", "node0/nic1/tx", "node1/nic0/rx", "node0/gpu2/nvlink/tx"]) == {
        "node0 NICs tx": ["node0/nic0/tx", "node0/nic1/tx"],
        "node1 NICs rx": ["node1/nic0/rx"],
        "node0 NVLink tx": ["node0/gpu2/nvlink/tx"]}


def test_overlaid_runs_tell_their_link_curves_apart_by_line_style() -> None:
    """Several runs share a colour per run, so each link curve of a run gets its own line
    style; otherwise a topology's per-node curves are indistinguishable."""
    cfg = pdsim.load_config(MTP3.parent / "hetero_pd.yaml", ["workload.num_requests=20"])
    res = pdsim.simulate(cfg)
    fig = plots.throughput_figure({"a": res, "b": res})
    patches = fig.axes[-1].patches
    assert len(patches) == len(plot_data.link_groups(list(res.links))) == 3
    assert len({str(p.get_linestyle()) for p in patches}) == 3


def test_instance_curves_name_their_pool(tmp_path: Path) -> None:
    """KV usage of a pools run: the legend says which pool each instance is in, read back
    from a result folder as from memory."""
    res = pdsim.simulate(pdsim.load_config(MTP3.parent / "hetero_pd.yaml",
                                           ["workload.num_requests=20"]))
    want = ["P0 (p-h100-tp8)", "D0 (d-h200-tp4-fp8kv)", "D1 (d-h200-tp4-fp8kv)",
            "D2 (d-h100-tp4)"]
    fig = plots.kv_usage_figure(res)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == want
    write_run(res, tmp_path)
    fig = plots.kv_usage_figure(plot_data.read_run_dir(tmp_path))
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == want
