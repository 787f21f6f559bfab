"""``report.html``: one self-contained page per result folder, with plotly inlined once
(no network), every chart present, and the resolved config verbatim; ``pdsim report`` and
``--report``; a clear error without plotly. The browser test is in
``test_outputs_html_browser.py``."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdsim.cli import app

pytest.importorskip("plotly")

MTP3 = Path(__file__).resolve().parents[2] / "configs" / "mtp3.yaml"
SMALL = ["--set", "workload.num_requests=60"]
runner = CliRunner()


def _charts(page: str) -> list[str]:
    return re.findall(r'<div id="(chart-\d+)" class="plotly-graph-div"', page)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "run"
    r = runner.invoke(app, ["run", str(MTP3), *SMALL, "--out", str(out), "--report"])
    assert r.exit_code == 0, r.output
    return out


def test_run_report_is_self_contained_with_every_chart(run_dir: Path) -> None:
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    # plotly's bundle inlined exactly once, no script fetched from anywhere
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()[:200]) == 1
    assert re.findall(r"<script[^>]*\bsrc=", page) == []
    # latency CDFs, per-position acceptance, time series
    assert _charts(page) == ["chart-1", "chart-2", "chart-3"]
    for title in ("Latency CDFs", "Per-position acceptance", "Time series: ",
                  "output_throughput (tok/s)"):
        assert title in page
    config = (run_dir / "config.resolved.yaml").read_text(encoding="utf-8")
    shown = re.search(r"<pre>(.*?)</pre>", page, re.S)
    assert shown is not None and html.unescape(shown.group(1)) == config


def test_run_report_lists_instances_with_their_pools(tmp_path: Path) -> None:
    """A pools config's report says which instance is in which pool, as `pdsim run`'s
    pool table does; the page had no per-instance or per-pool figure at all."""
    out = tmp_path / "hetero"
    r = runner.invoke(app, ["run", str(MTP3.parent / "hetero_pd.yaml"), *SMALL,
                            "--out", str(out), "--report"])
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<h2>Instances and pools</h2>" in page
    rows = re.findall(r"<tr><td>([PD]\d)</td><td>([^<]*)</td><td>(\w+)</td>", page)
    assert rows == [("P0", "p-h100-tp8", "prefill"), ("D0", "d-h200-tp4-fp8kv", "decode"),
                    ("D1", "d-h200-tp4-fp8kv", "decode"), ("D2", "d-h100-tp4", "decode")]


def test_report_command_rewrites_the_same_page(run_dir: Path) -> None:
    before = (run_dir / "report.html").read_text(encoding="utf-8")
    r = runner.invoke(app, ["report", str(run_dir)])
    assert r.exit_code == 0, r.output
    assert f"wrote {run_dir / 'report.html'}" in r.output
    assert (run_dir / "report.html").read_text(encoding="utf-8") == before


def test_compare_report_has_the_before_after_chart(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    r = runner.invoke(app, ["compare", str(MTP3), *SMALL, "--out", str(out), "--report"])
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text(encoding="utf-8")
    # before/after, latency CDFs, acceptance, one time series per variant (from memory)
    assert len(_charts(page)) == 5
    assert "after the fix vs before (green: better)" in page and "pd_after_fix" in page
    # from the folder alone: compare.json holds summaries only, so no CDFs or series
    r = runner.invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text(encoding="utf-8")
    assert len(_charts(page)) == 2
    assert "compare.json holds summaries only" in page


def test_sweep_report_draws_the_sweep_curves(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["sweep", str(MTP3), "--out", str(out), "--workers", "1",
                            "--no-records", "--set", "workload.num_requests=30",
                            "--grid", "speculative.num_speculative_tokens=1,2", "--report"])
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text(encoding="utf-8")
    assert len(_charts(page)) == 1
    assert "speculative.num_speculative_tokens" in page and "Sweep curves" in page
    assert "name: mtp3-1p1d" in page  # the base config, shown in place of a resolved one


def test_report_needs_out_and_a_result_folder(tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", str(MTP3), *SMALL, "--report"])
    assert r.exit_code == 2 and "--report needs --out" in r.output
    r = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no such result directory" in r.output
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "not a pdsim result directory" in r.output


def test_report_without_plotly_names_the_extra(run_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly raises ImportError
    r = runner.invoke(app, ["report", str(run_dir)])
    assert r.exit_code == 2
    assert "pdsim[report]" in r.output and "Traceback" not in r.output


def test_report_summary_shows_units_and_the_cli_change_in_points() -> None:
    """The report's summary table labels every value with its unit and scales it as the
    CLI does (ms, %), and an acceptance-rate change reads in points, as the CLI says it."""
    from rich.console import Console

    import pdsim
    from pdsim.compare import compare
    from pdsim.html_report import summary_html
    from pdsim.plot_data import as_runs
    from pdsim.report import comparison_table
    from pdsim.summary import format_change

    cmp = compare(pdsim.load_config(Path(__file__).resolve().parents[2] / "configs" / "mtp3.yaml",
                                    ["workload.num_requests=60"]))
    page = summary_html(as_runs(cmp))
    before = cmp.variants["pd_before_fix"].summary
    after = cmp.variants["pd_after_fix"].summary
    change = format_change("acceptance_rate", before["acceptance_rate"],
                           after["acceptance_rate"])
    assert change.endswith(" pt")
    assert f"<td>acceptance_rate (%)</td><td>{before['acceptance_rate'] * 100:.6g}</td>" in page
    assert f"<td>{change}</td>" in page
    assert f"<td>mean_ttft (ms)</td><td>{before['mean_ttft_s'] * 1e3:.6g}</td>" in page
    assert "mean_ttft_s" not in page
    console = Console(width=200, record=True)
    console.print(comparison_table(cmp))
    (line,) = [ln for ln in console.export_text().splitlines() if "acceptance rate (%)" in ln]
    assert line.rstrip(" │").endswith(change)
