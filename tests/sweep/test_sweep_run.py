"""Sweeps run: identical tables whatever the backend and worker count; resume after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sweep_support import MTP3, REPO, SMALL, small_config

import pdsim.simulation
from pdsim.sweep import Sweep, expand_points, run_sweep

GRID: list[tuple[str, list[Any]]] = [("workload.arrivals.rate_per_s", [2.0, 6.0]),
                                     ("connector.prefill_backoff", ["off", "auto"])]


def _table(out: Path) -> tuple[bytes, bytes]:
    return (out / "sweep.csv").read_bytes(), (out / "sweep.parquet").read_bytes()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("ref")
    rows = run_sweep(small_config(), expand_points(GRID), out_dir=out, workers=1)
    return out, rows


def test_table_shape_and_point_files(reference: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = reference
    assert [r["point"] for r in rows] == [0, 1, 2, 3]
    assert [(r["workload.arrivals.rate_per_s"], r["connector.prefill_backoff"])
            for r in rows] == [(2.0, "off"), (2.0, "auto"), (6.0, "off"), (6.0, "auto")]
    assert all(r["completed"] == 120 for r in rows)
    # paired streams: the same requests at every point of one rate
    assert rows[0]["total_input_tokens"] == rows[1]["total_input_tokens"]
    # the backoff point recomputes N - 1 = 2 prompt tokens per request on D
    assert rows[0]["tokens_recomputed_on_d"] == 0
    assert rows[1]["tokens_recomputed_on_d"] == 2 * 120
    csv = (out / "sweep.csv").read_text().splitlines()
    assert len(csv) == 5 and csv[0].startswith(
        "point,point_id,workload.arrivals.rate_per_s,connector.prefill_backoff,seed,")
    for r in rows:
        pdir = out / "points" / r["point_id"]
        assert {"summary.json", "point.json", "requests.csv", "config.resolved.yaml"} <= {
            p.name for p in pdir.iterdir()}
        assert json.loads((pdir / "point.json").read_text())["params"]["connector."
                                                                      "prefill_backoff"] in (
            "off", "auto")


def test_in_memory_rows_match(reference: tuple[Path, list[dict[str, Any]]]) -> None:
    _, rows = reference
    mem = run_sweep(small_config(), expand_points(GRID), workers=1)
    assert json.dumps(mem) == json.dumps(rows)


def test_two_local_workers_give_identical_table(
        reference: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    out, _ = reference
    run_sweep(small_config(), expand_points(GRID), out_dir=tmp_path, workers=2)
    assert _table(tmp_path) == _table(out)


def test_dask_backend_gives_identical_table(
        reference: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    out, _ = reference
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        run_sweep(small_config(), expand_points(GRID), out_dir=tmp_path, backend="dask",
                  address=cluster.scheduler_address)
    assert _table(tmp_path) == _table(out)


class _Counter:
    """Counts simulate() calls; raises KeyboardInterrupt at call ``stop_at``."""

    def __init__(self, real: Any, stop_at: int | None = None) -> None:
        self.real, self.stop_at, self.calls = real, stop_at, 0

    def __call__(self, *a: Any, **k: Any) -> Any:
        self.calls += 1
        if self.stop_at is not None and self.calls == self.stop_at:
            raise KeyboardInterrupt
        return self.real(*a, **k)


def test_interrupted_sweep_resumes_missing_points_only(
        reference: tuple[Path, list[dict[str, Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = reference
    real = pdsim.simulation.simulate
    first = _Counter(real, stop_at=3)
    monkeypatch.setattr(pdsim.simulation, "simulate", first)
    sweep = Sweep(small_config(), expand_points(GRID))
    with pytest.raises(KeyboardInterrupt):
        sweep.run(tmp_path, workers=1)
    assert sweep.computed == [0, 1]
    assert not (tmp_path / "sweep.csv").exists()
    done = sorted(p.parent.name for p in (tmp_path / "points").glob("*/summary.json"))
    assert len(done) == 2
    # a point killed while writing its files (no summary.json) is not done
    half = tmp_path / "points" / sweep.points[2].point_id
    half.mkdir()
    (half / "requests.csv").write_text("partial")
    second = _Counter(real)
    monkeypatch.setattr(pdsim.simulation, "simulate", second)
    resumed = Sweep(small_config(), expand_points(GRID))
    resumed.run(tmp_path, workers=1)
    assert second.calls == 2
    assert resumed.computed == [2, 3] and resumed.cached == [0, 1]
    assert _table(tmp_path) == _table(out)
    # nothing left to do
    third = _Counter(real)
    monkeypatch.setattr(pdsim.simulation, "simulate", third)
    Sweep(small_config(), expand_points(GRID)).run(tmp_path, workers=1)
    assert third.calls == 0
    # a larger grid reuses the points it shares
    bigger = [("workload.arrivals.rate_per_s", [2.0, 6.0, 8.0]), GRID[1]]
    grown = Sweep(small_config(), expand_points(bigger))
    grown.run(tmp_path, workers=1)
    assert third.calls == 2 and grown.cached == [0, 1, 2, 3]


def test_force_recomputes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = small_config()
    run_sweep(cfg, [{}], out_dir=tmp_path, workers=1)
    counter = _Counter(pdsim.simulation.simulate)
    monkeypatch.setattr(pdsim.simulation, "simulate", counter)
    run_sweep(cfg, [{}], out_dir=tmp_path, workers=1, force=True)
    assert counter.calls == 1


def test_a_failing_point_keeps_the_others(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real = pdsim.simulation.simulate

    def flaky(cfg: Any, *a: Any, **k: Any) -> Any:
        if cfg.seed == 1:
            raise RuntimeError("engine bug")
        return real(cfg, *a, **k)

    monkeypatch.setattr(pdsim.simulation, "simulate", flaky)
    sweep = Sweep(small_config(), [{"seed": 0}, {"seed": 1}, {"seed": 2}])
    with pytest.raises(RuntimeError, match="engine bug") as err:
        sweep.run(tmp_path, workers=1)
    assert "sweep point 1" in "".join(getattr(err.value, "__notes__", []))
    assert sweep.computed == [0]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pdsim", *args]


def test_killed_cli_sweep_resumes(tmp_path: Path) -> None:
    """SIGKILL a real ``pdsim sweep`` after its first point; the rerun does the rest."""
    out = tmp_path / "out"
    args = ["sweep", str(MTP3), "--out", str(out), "--workers", "1", "--no-records",
            "--grid", "seed=0:5:1", *[x for s in SMALL for x in ("--set", s)],
            "--set", "workload.num_requests=400"]
    proc = subprocess.Popen(_cli(*args), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if any((out / "points").glob("*/summary.json")):
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    before = {p.parent.name for p in (out / "points").glob("*/summary.json")}
    assert before, "no point finished before the kill"
    done = subprocess.run(_cli(*args, "--json"), cwd=REPO, capture_output=True, text=True,
                          check=True)
    rows = json.loads(done.stdout)
    assert [r["seed"] for r in rows] == [0, 1, 2, 3, 4, 5]
    after = {p.parent.name for p in (out / "points").glob("*/summary.json")}
    assert before < after or len(before) == 6
    assert len(after) == 6
    # points finished before the kill were not recomputed
    summary_mtimes = {p.parent.name: p.stat().st_mtime_ns
                      for p in (out / "points").glob("*/summary.json")}
    rerun = subprocess.run(_cli(*args), cwd=REPO, capture_output=True, text=True, check=True)
    assert "0 simulated, 6 from the cache" in rerun.stdout
    assert summary_mtimes == {p.parent.name: p.stat().st_mtime_ns
                              for p in (out / "points").glob("*/summary.json")}


def test_dask_local_cluster_processes(reference: tuple[Path, list[dict[str, Any]]],
                                      tmp_path: Path) -> None:
    """No address: the backend starts (and closes) a LocalCluster of worker processes."""
    pytest.importorskip("distributed")
    out, _ = reference
    run_sweep(small_config(), expand_points(GRID), out_dir=tmp_path, backend="dask",
              workers=2)
    assert _table(tmp_path) == _table(out)
