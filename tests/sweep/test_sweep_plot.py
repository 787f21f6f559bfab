"""Pictures and tables of a sweep: ``pdsim plot SWEEP_DIR`` draws each metric against the
swept parameter, one line per other swept value; the sweep table keeps headers whole and
shows a swept section as a labelled reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread
from sweep_support import MTP3, SMALL, small_config
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.sweep import expand_points, run_sweep
from pdsim.sweep_figures import choose_x, read_sweep_dir, sweep_series

RATES = [0.5, 0.8]
POINTS = [{"name": "pd_before_fix", "connector.prefill_backoff": "off"},
          {"name": "pd_after_fix", "connector.prefill_backoff": "auto"}]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("sweep")
    base = small_config("speculative.acceptance={kind: constant, rate: 0.7}")
    points = expand_points([("speculative.acceptance.rate", RATES), ("seed", [0, 1])],
                           POINTS)
    return out, run_sweep(base, points, out_dir=out, workers=1)


def test_plot_on_a_sweep_folder_draws_sweep_png(swept: tuple[Path, Any],
                                                tmp_path: Path) -> None:
    out, _ = swept
    res = CliRunner().invoke(app, ["plot", str(out), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    png = tmp_path / "sweep.png"
    assert png.is_file()
    pixels = imread(png)
    assert pixels.shape[0] > 300 and float(np.std(pixels[..., :3])) > 0.05


def test_series_are_the_table_values_against_the_swept_parameter(
        swept: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = swept
    table = read_sweep_dir(out)
    assert table.params == ["name", "connector.prefill_backoff",
                            "speculative.acceptance.rate", "seed"]
    x = choose_x(table)
    assert x == "speculative.acceptance.rate"
    series = sweep_series(table, "acceptance_rate", x)
    assert sorted(series) == ["pd_after_fix", "pd_before_fix"]
    for name, (xs, ys) in series.items():
        assert xs == RATES
        for rate, y in zip(xs, ys, strict=True):
            mine = [r["acceptance_rate"] for r in rows
                    if r["name"] == name and r["speculative.acceptance.rate"] == rate]
            assert len(mine) == 2  # two seeds, averaged
            assert y == pytest.approx(float(np.mean(mine)), rel=1e-12)


def test_plot_refuses_a_folder_that_is_no_result(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert res.exit_code == 2
    assert "sweep.csv" in res.stderr


def test_sweep_table_keeps_headers_and_labels_a_swept_section(tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        "points:\n"
        "  - {cluster.mode: colocated, cluster.colocated: {count: 1, kv_cache_gib: 40}}\n"
        "  - {cluster.mode: colocated, cluster.colocated: {count: 2, kv_cache_gib: 40}}\n"
        "grid:\n  workload.arrivals.rate_per_s: [2, 4]\n")
    args = ["sweep", str(MTP3), "--out", str(tmp_path / "out"), "--workers", "1",
            "--no-records", "--sweep-file", str(spec),
            *[a for s in SMALL for a in ("--set", s)]]
    res = CliRunner().invoke(app, args, terminal_width=80)
    assert res.exit_code == 0, res.output
    text = res.stdout
    for header in ("cluster.mode", "cluster.colocated", "workload.arrivals.rate_per_s",
                   "out tok/s", "TPOT ms"):
        assert header in text
    assert "…" not in text
    table_lines = [ln for ln in text.splitlines() if ln.startswith("│")]
    assert len(table_lines) == 4  # one line per point: no cell wraps
    assert sum("#1" in ln for ln in table_lines) == 2
    assert sum("#2" in ln for ln in table_lines) == 2
    assert 'cluster.colocated #1 = {"count": 1, "kv_cache_gib": 40}' in text
    assert 'cluster.colocated #2 = {"count": 2, "kv_cache_gib": 40}' in text
