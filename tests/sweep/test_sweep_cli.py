"""``pdsim sweep`` and ``pdsim search`` on the command line."""

from __future__ import annotations

import concurrent.futures as cf
import json
import time
from pathlib import Path

import pytest
from sweep_support import MTP3, REPO, SMALL
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.sweep.backends import _collect

SETS = [x for s in SMALL for x in ("--set", s)]


def _run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_sweep_cli_with_sweep_file(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("base_overrides: [workload.num_requests=60]\n"
                 "points:\n  - {name: before, connector.prefill_backoff: 'off'}\n"
                 "  - {name: after}\n")
    out = tmp_path / "out"
    code, stdout, _ = _run("sweep", str(MTP3), "--out", str(out), "--sweep-file", str(f),
                           "--grid", "workload.arrivals.rate_per_s=2,4", *SETS,
                           "--workers", "1")
    assert code == 0, stdout
    assert "4 points: 4 simulated, 0 from the cache" in stdout
    rows = (out / "sweep.csv").read_text().splitlines()
    assert rows[0].startswith("point,point_id,name,connector.prefill_backoff,"
                              "workload.arrivals.rate_per_s,seed,num_requests,")
    assert [r.split(",")[2] for r in rows[1:]] == ["before", "before", "after", "after"]
    # --set applies after the sweep file's base overrides
    assert all(r.split(",")[6] == "120" for r in rows[1:])
    code, stdout, _ = _run("sweep", str(MTP3), "--out", str(out), "--sweep-file", str(f),
                           "--grid", "workload.arrivals.rate_per_s=2,4", *SETS, "--json")
    assert code == 0 and len(json.loads(stdout)) == 4


def test_sweep_cli_bad_key_is_a_user_error(tmp_path: Path) -> None:
    code, _, stderr = _run("sweep", str(MTP3), "--out", str(tmp_path),
                           "--grid", "workload.arrivals.rate_per_sec=1,2")
    assert code == 2
    assert stderr.startswith("error: workload.arrivals.rate_per_sec: unknown key")
    assert not (tmp_path / "points").exists()
    code, _, stderr = _run("sweep", str(MTP3), "--out", str(tmp_path), "--grid", "seed=1:0:1")
    assert code == 2 and "error:" in stderr
    code, _, stderr = _run("sweep", str(MTP3), "--out", str(tmp_path), "--backend", "ray")
    assert code == 2 and "unknown backend" in stderr


def test_search_cli(tmp_path: Path) -> None:
    code, stdout, _ = _run("search", str(MTP3), *SETS, "--set", "slo.ttft_s=0.3",
                           "--min-requests", "150", "--tol", "0.1", "--gpu-budget", "3",
                           "--json")
    assert code == 0, stdout
    doc = json.loads(stdout)
    assert doc["rate_per_s"] > 0 and doc["summary"]["slo_met"]
    assert len(doc["splits"]) == 2 and doc["trials"][0]["num_requests"] == 150
    code, stdout, _ = _run("search", str(MTP3), *SETS, "--set", "slo.ttft_s=0.3",
                           "--min-requests", "150", "--tol", "0.1")
    assert code == 0 and "highest rate meeting the SLOs" in stdout
    code, _, stderr = _run("search", str(MTP3))
    assert code == 2 and stderr.startswith("error: slo:")


@pytest.mark.parametrize(("config", "budget", "message"), [
    (REPO / "configs" / "hetero_pd.yaml", "32",
     "error: cluster.decode: a P:D split needs one decode group, not a list of 2 pools"),
    (MTP3, "1", "error: gpu_budget: 1 GPUs cannot hold one P"),
])
def test_search_refuses_a_split_it_cannot_make_before_searching(
        monkeypatch: pytest.MonkeyPatch, config: Path, budget: str, message: str) -> None:
    """--gpu-budget errors come before the rate search, not after minutes of it."""
    import pdsim.search

    def searched(*_a: object, **_k: object) -> None:
        raise AssertionError("the rate search ran before the split was refused")

    monkeypatch.setattr(pdsim.search, "max_rate_meeting_slo", searched)
    code, _, stderr = _run("search", str(config), "--set", "slo.ttft_s=0.5",
                           "--gpu-budget", budget)
    assert code == 2 and stderr.startswith(message), stderr


def test_collect_hands_over_finished_points_on_failure() -> None:
    """Pool backends: a failing point stops the sweep, but the points already running
    finish and are handed over (so they are cached), then the error is raised."""

    def work(i: int) -> list[tuple[str, bytes]]:
        if i == 0:
            raise ValueError("bad point")
        time.sleep(0.2)
        return [("summary.json", b"{}")]

    got: list[int] = []
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        futs = {pool.submit(work, i): i for i in range(6)}
        with pytest.raises(ValueError, match="bad point") as err:
            _collect(futs, lambda i, files: got.append(i),
                     cancel=lambda: [f.cancel() for f in futs])
    assert "in sweep point 0" in err.value.__notes__
    assert 1 in got and set(got) <= {1, 2, 3}
    assert any(f.cancelled() for f in futs)
