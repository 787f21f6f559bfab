"""``pdsim plan`` on the command line: the files it writes, and bad input as one
``error:`` line per problem with exit code 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from plan_support import DSV3_PLAN, LLAMA_HF, SMALL_PLAN, write_small
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.plan import enumerate_candidates, read_plan_config
from pdsim.plan.front import VALIDATION_ERROR

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> object:
    return CliRunner().invoke(app, ["plan", *args])


def test_plan_writes_table_csv_plot_report_and_front_files(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    cfg = write_small(tmp_path / "small.yaml", {**SMALL_PLAN, "hf_config": str(LLAMA_HF),
                                                "num_speculative_tokens": [2],
                                                "decode": {"max_num_seqs": [32]},
                                                "colocated": {"max_num_seqs": [32]}})
    out = tmp_path / "out"
    res = _run(str(cfg), "--out", str(out), "--workers", "1")
    assert res.exit_code == 0, res.output
    assert "Pareto front" in res.output and "chosen:" in res.output
    rows = list(csv.DictReader((out / "plan.csv").open()))
    assert len(rows) == 3 and {r["status"] for r in rows} == {"feasible"}
    doc = json.loads((out / "plan.json").read_text())
    assert doc["front"] and doc["chosen"]["index"] in [f["index"] for f in doc["front"]]
    assert doc["tie_threshold"] == VALIDATION_ERROR
    # every front point's lines imported back and simulated: same deployment, same figures
    assert set(doc["round_trip"]) == {str(f["index"]) for f in doc["front"]}
    assert all(v["ok"] and v["same_config"] for v in doc["round_trip"].values())
    assert (out / "plan.png").read_bytes()[:4] == b"\x89PNG"
    assert "Pareto front" in (out / "report.html").read_text()
    fronts = sorted((out / "front").iterdir())
    assert len(fronts) == len(doc["front"])
    for d in fronts:
        assert {p.name for p in d.iterdir()} == {"config.yaml", "serve.sh", "deployment.yaml"}
        # the written config reruns, and the deployment file imports back
        assert CliRunner().invoke(app, ["show-config", str(d / "config.yaml")]).exit_code == 0
        res = CliRunner().invoke(app, ["import-vllm", "--deployment",
                                       str(d / "deployment.yaml"), "--out",
                                       str(tmp_path / "imp" / d.name)])
        assert res.exit_code == 0, res.output
    # a rerun resumes from the cache: nothing simulated again
    again = _run(str(cfg), "--out", str(out), "--workers", "1", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["runs_simulated"] == 0


@pytest.mark.parametrize(("plan", "args", "where"), [
    ({**SMALL_PLAN, "modes": ["both"]}, [], "error: plan.modes.0"),
    ({**SMALL_PLAN, "bogus": 1}, [], "error: plan.bogus"),
    ({**SMALL_PLAN, "routers": ["nope"]}, [], "error: plan"),
    (SMALL_PLAN, ["--gpus", "0"], "error: gpus"),
    (SMALL_PLAN, ["--backend", "ray"], "error: --backend"),
    (SMALL_PLAN, ["--tol", "2"], "error: plan (flags).tol"),
    ({k: v for k, v in SMALL_PLAN.items() if k != "gpus"}, [], "error: --gpus"),
])
def test_bad_input_is_one_error_line(tmp_path: Path, plan: dict[str, object],
                                     args: list[str], where: str) -> None:
    cfg = write_small(tmp_path / "c.yaml", plan)
    res = _run(str(cfg), "--out", str(tmp_path / "o"), "--no-report", *args)
    assert res.exit_code == 2, res.output
    assert where in res.output and "Traceback" not in res.output


def test_plan_needs_a_roofline_step_time(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO / "configs" / "mtp3.yaml").read_text() + "slo: {tpot_s: 0.05}\n"
                   "plan: {gpus: 2}\n")
    res = _run(str(cfg), "--out", str(tmp_path / "o"), "--no-report")
    assert res.exit_code == 2 and "error: step_time.kind" in res.output


def test_shipped_plan_config_loads_and_its_space_is_what_the_docs_say() -> None:
    cfg, spec = read_plan_config(DSV3_PLAN)
    assert spec.gpus == 16 and cfg.step_time.kind == "roofline"
    cands = enumerate_candidates(cfg, spec, 16)
    from pdsim.plan.space import candidate_config

    fitting = []
    for c in cands:
        try:
            candidate_config(cfg, c)
            fitting.append(c)
        except Exception:  # layouts whose weights do not fit
            continue
    assert len(fitting) == 48  # docs/plan.md and the config's comment
    assert all(c.gpus == 16 for c in fitting)


def test_validation_error_is_the_docs_figure() -> None:
    text = (REPO / "docs" / "validation.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| holdout, absolute |"))
    assert f"{VALIDATION_ERROR:.1%}" == row.split("|")[4].strip()


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "plan").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_plan_config_loads_and_has_candidates(path: Path) -> None:
    cfg, spec = read_plan_config(path)
    assert spec.gpus is not None and spec.hf_config is not None
    assert Path(spec.hf_config).is_file()
    assert enumerate_candidates(cfg, spec, spec.gpus)


def test_workload_objective_runs_each_candidate_once_at_the_configs_rate(
        tmp_path: Path) -> None:
    cfg = write_small(tmp_path / "small.yaml")
    res = _run(str(cfg), "--out", str(tmp_path / "o"), "--objective", "workload",
               "--no-report", "--json", "--workers", "1")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = list(csv.DictReader((tmp_path / "o" / "plan.csv").open()))
    simulated = [r for r in rows if r["status"] != "pruned"]
    assert doc["objective"] == "workload" and doc["rounds"] == 1
    assert doc["runs_simulated"] + doc["runs_shared"] == len(simulated) + 1  # + baseline
    assert {r["rate_per_s"] for r in simulated if r["status"] == "feasible"} == {"8.0"}
