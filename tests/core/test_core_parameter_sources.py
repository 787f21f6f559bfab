"""Where the parameters in force come from (issue 15, item 3): derived values say it, and
``show-config`` warns when a model runs on values fitted to another model or GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdsim import load_config
from pdsim.cli import app
from pdsim.config_sections import STALE_KV_FIT
from pdsim.loader import derived_values

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_stale_kv_values_say_what_they_were_fitted_to() -> None:
    ink = load_config(CONFIGS / "inkling_small_pd_mtp8.yaml")
    assert STALE_KV_FIT.model_profile in ink.stale_kv_provenance
    assert "1.089" in derived_values(ink)["stale_kv_parameters"]
    assert not any("stale_kv" in w for w in ink.foreign_fit_warnings)
    mtp3 = load_config(CONFIGS / "mtp3.yaml")
    (warning,) = [w for w in mtp3.foreign_fit_warnings if "stale_kv" in w]
    assert "inkling-small" in warning and "mla-moe-mtp3" in warning
    own = load_config(CONFIGS / "mtp3.yaml",
                      ["speculative.stale_kv.sensitivity_per_slot=2.0"])
    assert own.stale_kv_provenance.startswith("set in the config")
    assert not own.foreign_fit_warnings


def test_no_stale_kv_provenance_without_multi_module_mtp() -> None:
    cfg = load_config(CONFIGS / "no_spec.yaml")
    assert cfg.stale_kv_provenance == ""
    assert "stale_kv_parameters" not in derived_values(cfg)


@pytest.mark.parametrize(("hardware", "fitted"), [("h100-sxm", True), ("b200", False)])
def test_step_time_values_say_what_they_were_fitted_to(hardware: str, fitted: bool) -> None:
    sets = ["step_time={kind: roofline, model: llama-3.1-8b, hardware: " + hardware + "}",
            "speculative.method=none", "speculative.num_speculative_tokens=0",
            "model.num_mtp_modules=0"]
    cfg = load_config(CONFIGS / "no_spec.yaml", sets)
    src = derived_values(cfg)["step_time_parameters"]
    assert "validation suite's fit rows" in src
    if fitted:
        assert "fitted to Vidur" in src and not cfg.foreign_fit_warnings
    else:
        assert "borrowed" in src
        assert any("borrows kernel constants from another" in w for w in cfg.foreign_fit_warnings)
    tuned = load_config(CONFIGS / "no_spec.yaml",
                        [*sets, "step_time.compute_efficiency=0.5", "step_time.overhead_s=0.01"])
    src = tuned.step_time.parameter_provenance
    assert "kernel constants set in the config" in src and "CPU costs set in the config" in src


def test_simple_step_time_says_it_is_not_fitted() -> None:
    cfg = load_config(CONFIGS / "mtp3.yaml")
    assert "not fitted" in derived_values(cfg)["step_time_parameters"]


def test_show_config_prints_the_warning_on_stderr() -> None:
    res = CliRunner().invoke(app, ["show-config", str(CONFIGS / "mtp3.yaml")])
    assert res.exit_code == 0
    assert "# stale_kv_parameters: shipped default" in res.stdout
    assert "warning: speculative.stale_kv" in res.stderr
    assert "warning" not in res.stdout


def test_show_config_warns_that_a_colocated_cluster_ignores_the_topology() -> None:
    pd = load_config("configs/inkling_small_pd_mtp8.yaml")
    assert pd.connector.topology is not None
    assert not any("topology" in w for w in pd.warnings)
    co = load_config("configs/inkling_small_pd_mtp8.yaml", ["cluster.mode=colocated"])
    assert any(w.startswith("connector.topology:") for w in co.warnings)


def test_the_foreign_fit_warning_is_a_finished_sentence() -> None:
    (warning,) = [w for w in load_config(CONFIGS / "mtp3.yaml").foreign_fit_warnings
                  if "stale_kv" in w]
    assert not warning.rstrip().endswith(("or set them", "or", "and", ","))
    assert warning.rstrip().endswith("values")


@pytest.mark.parametrize("command", [
    ["run"], ["compare"], ["search", "--min-requests", "10", "--set", "slo.ttft_s=5"],
    ["sweep", "--grid", "workload.arrivals.rate_per_s=2,3", "--workers", "1"]])
def test_every_command_that_runs_shows_the_foreign_fit_warning(
        command: list[str], tmp_path: Path) -> None:
    """The warning show-config gives appears wherever a run starts, once."""
    args = [*command, str(CONFIGS / "mtp3.yaml"), "--set", "workload.num_requests=10"]
    if command[0] == "sweep":
        args += ["--out", str(tmp_path / "sweep"), "--no-records"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (line,) = [ln for ln in res.stderr.splitlines() if "warning: speculative.stale_kv" in ln]
    shown = CliRunner().invoke(app, ["show-config", str(CONFIGS / "mtp3.yaml")])
    assert line in shown.stderr.splitlines()
