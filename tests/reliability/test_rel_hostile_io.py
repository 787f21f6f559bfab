"""Hostile inputs of reliability round 2 (issue 17), outside the config: output folders
and signals, CLI options, benchmark files, request specs, Prometheus scrapes. Each must end
in a clear error (exit 2, a located line, no traceback) or a correct result."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from rel_support import assert_cli_error as assert_error
from rel_support import small
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.loader import load_config
from pdsim.simulation import simulate

# ------------------------------------------------------------------ output folders


def test_out_that_is_a_file_under_a_file_or_uncreatable_is_refused_before_the_run(
        tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    cases = [(tmp_path / "afile", "exists and is not a folder"),
             (tmp_path / "afile" / "x", "is a file, so nothing can be written under it"),
             (Path("/proc/pdsim-cannot-be-here"), "cannot create the folder")]
    for out, phrase in cases:
        t0 = time.perf_counter()
        assert_error(["run", "configs/mtp3.yaml", "--out", str(out)], f"error: {out}:", phrase)
        assert time.perf_counter() - t0 < 3  # refused before simulating 300 requests


def test_sweep_out_under_a_file_is_refused_before_any_point(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    assert_error(["sweep", "configs/mtp3.yaml", "--grid", "seed=1,2", "--out",
                  str(tmp_path / "afile" / "x")], "is a file, so nothing can be written")
    assert (tmp_path / "afile").read_text() == "x"


def test_calibrate_out_that_is_a_folder_is_refused_before_the_fit(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    assert_error(["calibrate", "configs/mtp3.yaml", "--against",
                  "examples/real/bench_result.json", "--out", str(tmp_path)],
                 f"error: {tmp_path}: is a folder; give a file name")
    assert time.perf_counter() - t0 < 5


def _write_small_run(out: Path) -> None:
    from pdsim.writers import write_run

    write_run(simulate(load_config(small())), out)


def test_a_finished_folder_carries_a_manifest_readers_check(tmp_path: Path) -> None:
    from pdsim.run_folder import check_folder

    _write_small_run(tmp_path / "o")
    manifest = check_folder(tmp_path / "o")
    assert manifest["partial"] is False and manifest["seed"] == 7
    assert {"summary.json", "requests.csv", "config.resolved.yaml"} <= set(manifest["files"])
    (tmp_path / "o" / "requests.csv").write_text("id\n")  # another run's file
    assert_error(["plot", str(tmp_path / "o")], "requests.csv", "does not match manifest.json")


def test_an_interrupted_rerun_leaves_the_previous_result_readable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new files are written beside the old ones and swapped in only when complete."""
    import pdsim.writers as writers
    from pdsim.run_folder import check_folder

    _write_small_run(tmp_path / "o")
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "o").iterdir())

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(writers, "write_timeseries", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _write_small_run(tmp_path / "o")
    assert sorted((p.name, p.read_bytes()) for p in (tmp_path / "o").iterdir()) == before
    assert "summary.json" in check_folder(tmp_path / "o")["files"]


def test_sigterm_keeps_the_results_like_ctrl_c(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM arrives (from this process, deterministically) once 5 requests are done."""
    import json
    import os
    import signal

    from pdsim.simulation import Simulation

    original = Simulation.run

    def run_then_terminated(self: Simulation, progress: Any = None) -> Any:
        def tick(done: int, total: int) -> None:
            if done >= 5:
                os.kill(os.getpid(), signal.SIGTERM)

        return original(self, progress=tick)

    monkeypatch.setattr(Simulation, "run", run_then_terminated)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(small()))
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 128 + signal.SIGTERM, (res.exit_code, res.output)
    assert "PARTIAL" in res.stdout
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert summary["partial"] is True and manifest["partial"] is True
    assert signal.getsignal(signal.SIGTERM) is not None  # the old handler is back


# ------------------------------------------------------------------ CLI options, inputs


@pytest.mark.parametrize(("args", "option"), [
    (["--tp", "0"], "--tp"), (["--ep", "-1"], "--ep"), (["--block-size", "0"], "--block-size"),
    (["--spec", "-1"], "--spec"), (["--gpu-memory-utilization", "2"],
                                   "--gpu-memory-utilization"),
    (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization"),
])
def test_profile_options_out_of_range_are_named(args: list[str], option: str) -> None:
    assert_error(["profile", "deepseek-v3", "h200", *args], f"error: {option}: must be")


EXAMPLE_BENCH = Path("examples/real/bench_result.json")


@pytest.mark.parametrize(("field", "value", "phrase"), [
    ("input_lens", 0, "entry 0 is 0; token counts must be in 1..16,777,216"),
    ("input_lens", -5, "entry 0 is -5"),
    ("input_lens", 1e30, "entry 0 is 1e+30"),
    ("output_lens", -1, "entry 0 is -1; token counts must be in 0.."),
    ("max_concurrency", 0, "must be in 1..5,000,000 (got 0)"),
    ("max_concurrency", -3, "(got -3)"),
])
def test_validate_refuses_bench_files_with_impossible_values(
        tmp_path: Path, field: str, value: float, phrase: str) -> None:
    import json

    doc = json.loads(EXAMPLE_BENCH.read_text())
    if field == "max_concurrency":
        doc[field] = value
    else:
        doc[field] = [value, *doc[field][1:]]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(doc))
    assert_error(["validate", "configs/mtp3.yaml", "--against", str(bench)],
                 str(bench), f"field '{field}'", phrase)


def _specs(arrival: list[float], prompt: list[int] | None = None,
           output: list[int] | None = None) -> Any:
    import numpy as np

    from pdsim.workload import RequestSpecs

    n = len(arrival)
    return RequestSpecs(np.asarray(arrival, dtype=np.float64),
                        np.asarray(prompt or [100] * n, dtype=np.int64),
                        np.asarray(output or [10] * n, dtype=np.int64))


@pytest.mark.parametrize(("arrival", "prompt", "output", "phrase"), [
    ([0.0, float("nan"), 2.0], None, None, "request 1: arrival_s is nan"),
    ([0.0, -1.0, 2.0], None, None, "request 1: arrival_s is -1.0"),
    ([0.0, float("inf")], None, None, "arrival_s is inf"),
    ([0.0, 2.0, 1.0], None, None, "request 2 arrives at 1.0 s, before request 1"),
    ([0.0, 1.0], [100, 0], None, "request 1: prompt_tokens is 0"),
    ([0.0, 1.0], None, [-4, 10], "request 0: output_tokens is -4"),
])
def test_request_specs_are_checked_wherever_they_come_from(
        arrival: list[float], prompt: list[int] | None, output: list[int] | None,
        phrase: str) -> None:
    from pdsim.errors import RequestSpecsError

    with pytest.raises(RequestSpecsError, match=re.escape(phrase)):
        simulate(load_config(small()), _specs(arrival, prompt, output))


# ------------------------------------------------------------------ import-metrics


def _scrape(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]) -> str:
    lines = []
    for name, value in (("num_drafts", drafts), ("num_draft_tokens", draft_tokens),
                        ("num_accepted_tokens", accepted)):
        lines += [f"# TYPE vllm:spec_decode_{name} counter",
                  f'vllm:spec_decode_{name}_total{{engine="0"}} {value}.0']
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}}'
              f" {c}.0" for i, c in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("counts", "phrase"), [
    ((100, 300, 350, [100, 100, 100]), "num_accepted_tokens (350) exceeds"),
    ((100, 300, 150, [120, 20, 10]), "position 0 (120) exceeds vllm:spec_decode_num_drafts"),
    ((100, 300, 150, [50, 60, 40]), "position 1 (60) exceeds position 0"),
    ((100, 300, 150, [80, 50]), "2 positions in"),
])
def test_import_metrics_refuses_counters_no_run_produces(tmp_path: Path,
                                                         counts: tuple[Any, ...],
                                                         phrase: str) -> None:
    scrape = tmp_path / "m.txt"
    scrape.write_text(_scrape(*counts))
    text = assert_error(["import-metrics", str(scrape)], phrase)
    assert "speculative:" not in text  # no snippet printed


def test_import_metrics_snippets_load_in_pdsim(tmp_path: Path) -> None:
    scrape = tmp_path / "m.txt"
    scrape.write_text(_scrape(100, 300, 150, [80, 50, 20]))
    res = CliRunner().invoke(app, ["import-metrics", str(scrape)])
    assert res.exit_code == 0, res.output
    snippet = yaml.safe_load(res.stdout[res.stdout.index("# measured"):])
    data = small({"speculative": snippet["speculative"]})
    assert load_config(data).speculative.acceptance.rates == (0.8, 0.5, 0.2)  # type: ignore[union-attr]
