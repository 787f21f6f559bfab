"""The examples in docs/sweeps.md are valid: the sweep file resolves, the grid expands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sweep_support import MTP3, REPO

from pdsim.loader import load_config
from pdsim.sweep import Sweep, apply_base_overrides, load_sweep_file

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

DOC = REPO / "docs" / "sweeps.md"


def test_sweep_file_example_resolves(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S)
                 if "base_overrides" in b)
    f = tmp_path / "fix_vs_alpha.yaml"
    f.write_text(block)
    spec = load_sweep_file(f)
    base = apply_base_overrides(load_config(MTP3), spec.base_overrides)
    sweep = Sweep(base, spec.expand())  # validates all points, runs nothing
    assert len(sweep.points) == 42  # as the doc says: 3 x 7 x 2
    assert sweep.points[0].params == {"name": "pd_before_fix",
                                      "connector.prefill_backoff": "off",
                                      "speculative.acceptance.rate": 0.3, "seed": 0}
    assert sweep.points[-1].config.cluster.mode == "colocated"


def test_cli_example_is_sixteen_points() -> None:
    from pdsim.sweep import expand_points, parse_grid

    pts = expand_points([parse_grid("workload.arrivals.rate_per_s=1:8:1"),
                         parse_grid("connector.prefill_backoff=off,auto")])
    assert len(pts) == 16 and pts[:2] == [
        {"workload.arrivals.rate_per_s": 1, "connector.prefill_backoff": "off"},
        {"workload.arrivals.rate_per_s": 1, "connector.prefill_backoff": "auto"}]


def test_shipped_sweep_file_resolves() -> None:
    spec = load_sweep_file(REPO / "examples" / "sweeps" / "fix_vs_alpha.yaml")
    base = apply_base_overrides(load_config(MTP3), spec.base_overrides)
    sweep = Sweep(base, spec.expand())
    assert len(sweep.points) == 15  # 3 variants x 5 acceptance rates
    assert {p.params["name"] for p in sweep.points} == {"pd_before_fix", "pd_after_fix",
                                                        "colocated"}
