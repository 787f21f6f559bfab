"""scipy is an optional dependency used only by ``calibrate``: the core install leaves it
out, and without it ``pdsim calibrate`` says which extra to install."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdsim.cli import app

ROOT = Path(__file__).resolve().parents[2]


def test_scipy_is_an_extra_not_a_core_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("scipy") for d in project["dependencies"])
    assert any(d.startswith("scipy") for d in project["optional-dependencies"]["calibrate"])
    notebook = project["optional-dependencies"]["notebook"]
    assert any(d.startswith("jupyter") for d in notebook)
    assert any(d.startswith("nbconvert") for d in notebook)


def test_calibrate_without_scipy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    res = CliRunner().invoke(app, [
        "calibrate", str(ROOT / "configs" / "calibration_example.yaml"),
        "--against", str(ROOT / "examples" / "real" / "bench_result.json"),
        "--max-evals", "2"])
    assert res.exit_code == 2, res.output
    assert "pdsim[calibrate]" in res.stderr
    assert "Traceback" not in res.output
