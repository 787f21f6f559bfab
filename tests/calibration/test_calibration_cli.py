"""``pdsim validate`` and ``pdsim calibrate``: tables, exit codes, the calibrated file."""

from __future__ import annotations

from pathlib import Path

from calibration_support import EXAMPLE_CONFIG, EXAMPLE_RESULT, MTP3, SMALL
from typer.testing import CliRunner

from pdsim import load_config
from pdsim.cli import app
from pdsim.perf.config import SimpleStepTimeConfig

runner = CliRunner()


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def test_validate_a_pdsim_run_exits_0(tmp_path: Path) -> None:
    run = runner.invoke(app, ["run", str(MTP3), *_sets(SMALL), "--out", str(tmp_path)])
    assert run.exit_code == 0, run.output
    res = runner.invoke(app, ["validate", str(MTP3), *_sets(SMALL), "--against",
                              str(tmp_path / "bench_result.json"), "--tolerance", "0.001"])
    assert res.exit_code == 0, res.output
    assert "TTFT mean (ms)" in res.output and "per-position rate 2 (%)" in res.output
    assert "all checked metrics within 0%" in res.output
    assert "FAIL" not in res.output


def test_validate_out_of_tolerance_exits_1() -> None:
    args = ["validate", str(EXAMPLE_CONFIG), "--against", str(EXAMPLE_RESULT)]
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    assert "FAIL" in res.output and "off by more than 10%" in res.output
    assert "note: 1 failed request(s) of the result are not replayed" in res.output
    res = runner.invoke(app, [*args, "--metric", "completed", "--metric", "acceptance_length"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, [*args, "--json", "--metric", "mean_itl_ms"])
    assert res.exit_code == 1
    assert '"failures": [\n    "mean_itl_ms"\n  ]' in res.output


def test_validate_user_errors_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    res = runner.invoke(app, ["validate", str(EXAMPLE_CONFIG), "--against", str(bad)])
    assert res.exit_code == 2
    assert "error: " in res.output and "bad.json:1" in res.output
    res = runner.invoke(app, ["validate", str(EXAMPLE_CONFIG), "--against",
                              str(EXAMPLE_RESULT), "--metric", "mean_ttft_s"])
    assert res.exit_code == 2 and "unknown" in res.output
    res = runner.invoke(app, ["validate", str(EXAMPLE_CONFIG), "--against",
                              str(EXAMPLE_RESULT), "--mode", "closed"])
    assert res.exit_code == 2


def test_calibrate_writes_a_loadable_config(tmp_path: Path) -> None:
    out = tmp_path / "calibrated.yaml"
    res = runner.invoke(app, ["calibrate", str(EXAMPLE_CONFIG), "--against",
                              str(EXAMPLE_RESULT), "--held-out", str(EXAMPLE_RESULT),
                              "--param", "step_time.weights_floor_s=0.001:0.1",
                              "--max-evals", "6", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "calibrated parameters" in res.output and "step_time.weights_floor_s" in res.output
    assert "0.001 .. 0.1" in res.output
    assert "held-out" in res.output
    assert "RMS relative error on the fitted data" in res.output
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# calibrated by `pdsim calibrate` against ")
    fitted, start = load_config(out).step_time, load_config(EXAMPLE_CONFIG).step_time
    assert isinstance(fitted, SimpleStepTimeConfig) and isinstance(start, SimpleStepTimeConfig)
    assert fitted.weights_floor_s != start.weights_floor_s
    assert fitted.per_token_s == start.per_token_s  # not a named parameter: untouched


def test_calibrate_user_errors_exit_2() -> None:
    base = ["calibrate", str(EXAMPLE_CONFIG), "--against", str(EXAMPLE_RESULT),
            "--max-evals", "1"]
    for extra, message in ((["--param", "step_time.nope"], "no such config value"),
                           (["--param", "step_time.overhead_s=1"], "PATH=LOWER:UPPER"),
                           (["--method", "bfgs"], "--method"),
                           (["--metric", "mean_ttft"], "unknown"),
                           (["--max-requests", "0"], "--max-requests")):
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 2, (extra, res.output)
        assert message in res.output, (extra, res.output)
