"""``engine.decode_runs``: the switch loads from YAML, rejects other values by name, and
turning runs off really takes every decode step as its own event."""

from __future__ import annotations

from pathlib import Path

import pytest

import pdsim
from pdsim.errors import ConfigError
from pdsim.simulation import Simulation


def test_decode_runs_loads_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("engine:\n  decode_runs: off\n")
    assert pdsim.load_config(path).engine.decode_runs == "off"
    assert pdsim.load_config(path, ["engine.decode_runs=auto"]).engine.decode_runs == "auto"


def test_a_bad_value_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("engine:\n  decode_runs: sometimes\n")
    with pytest.raises(ConfigError, match=r"engine\.decode_runs"):
        pdsim.load_config(path)


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_runs_are_planned_only_when_on(mode: str) -> None:
    cfg = pdsim.load_config("configs/mtp3.yaml", ["workload.num_requests=40",
                                                  f"engine.decode_runs={mode}"])
    sim = Simulation(cfg)
    planned: list[object] = []
    sim.hooks.run_planned.append(lambda inst, run: planned.append(run))
    res = sim.run()
    assert res.summary["completed"] == 40
    assert (len(planned) > 0) == (mode == "auto")
