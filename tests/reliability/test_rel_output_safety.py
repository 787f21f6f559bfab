"""Output safety: atomic files, and an interrupted run (Ctrl-C) that keeps what it
measured, marked partial, with no half-written file anywhere."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import simpy
from rel_support import small, write_yaml
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.output import write_atomic, write_json
from pdsim.simulation import Simulation


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_write_atomic_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    write_atomic(target, "old")
    write_json(target, {"a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2]}
    assert leftovers(target.parent) == []


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_failed_write_leaves_the_old_file_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    target = tmp_path / "summary.json"
    target.write_text("previous run\n")

    def fsync_fails(fd: int) -> None:  # the data is half on its way to the disk
        raise exc

    monkeypatch.setattr("pdsim.output.os.fsync", fsync_fails)
    with pytest.raises(type(exc)):
        write_atomic(target, "x" * 1_000_000)
    assert target.read_text() == "previous run\n"
    assert leftovers(tmp_path) == []


def test_interrupt_during_the_write_itself(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after half the bytes went out: the target never shows the half."""
    target = tmp_path / "requests.csv"
    real_fdopen = os.fdopen

    class HalfWriter(io.RawIOBase):
        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def write(self, b: Any) -> int:
            self.fh.write(bytes(b)[: len(b) // 2])
            self.fh.flush()
            raise KeyboardInterrupt

        def __enter__(self) -> HalfWriter:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

    monkeypatch.setattr("pdsim.output.os.fdopen",
                        lambda fd, mode: HalfWriter(real_fdopen(fd, mode)))
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "a,b\n" * 1000)
    assert not target.exists()
    assert leftovers(tmp_path) == []


def test_rename_failure_leaves_no_temporary(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def no_rename(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied", dst)

    monkeypatch.setattr("pdsim.output.os.replace", no_rename)
    with pytest.raises(PermissionError):
        write_atomic(tmp_path / "f.txt", "data")
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------- Ctrl-C in a run

def _interrupt_after(monkeypatch: pytest.MonkeyPatch, done: int) -> dict[str, int]:
    """Make ``Simulation.run`` raise KeyboardInterrupt inside its event loop once ``done``
    requests have ended (as a Ctrl-C would); returns what the run had measured then."""
    seen: dict[str, int] = {"finished": 0}
    original = Simulation.run
    original_finish = Simulation.finish

    # counted as they finish: pdsim run drops each request once its facts are recorded
    def finish(self: Simulation, req: Any, at_s: float | None = None) -> None:
        seen["finished"] += 1
        original_finish(self, req, at_s)

    def run(self: Simulation, progress: Any = None) -> Any:
        env = self.env

        def stepping(until: Any = None) -> None:
            while self.num_done < done:
                env.step()
            env.step()  # and one event more, wherever that leaves the engines
            raise KeyboardInterrupt

        env.run = stepping  # type: ignore[method-assign]
        return original(self, progress)

    monkeypatch.setattr(Simulation, "run", run)
    monkeypatch.setattr(Simulation, "finish", finish)
    return seen


def test_ctrl_c_saves_a_partial_summary(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write_yaml(tmp_path / "cfg.yaml", small({"workload": {"num_requests": 60}}))
    out = tmp_path / "out"
    seen = _interrupt_after(monkeypatch, 20)
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert "Traceback" not in res.output
    assert "PARTIAL" in res.stdout
    doc = json.loads((out / "summary.json").read_text())
    assert doc["partial"] is True
    s = doc["summary"]
    assert s["num_requests"] == 60
    assert 0 < s["completed"] == seen["finished"] < 60
    assert s["completed"] + s["failed"] + s["rejected"] + s["in_flight"] == 60
    assert s["in_flight"] > 0
    rows = list(csv.DictReader(io.StringIO((out / "requests.csv").read_text())))
    assert len(rows) == 60
    assert sum(r["status"] == "finished" for r in rows) == seen["finished"]
    assert leftovers(out) == []


def test_ctrl_c_before_anything_finished_still_writes(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write_yaml(tmp_path / "cfg.yaml", small())
    out = tmp_path / "out"
    _interrupt_after(monkeypatch, 0)
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out), "--json"])
    assert res.exit_code == 130
    assert json.loads((out / "summary.json").read_text())["partial"] is True
    assert json.loads(res.stdout)["completed"] == 0
    assert leftovers(out) == []


def test_complete_run_is_not_partial(tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "cfg.yaml", small())
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "summary.json").read_text())
    assert doc["partial"] is False and doc["summary"]["completed"] == 30
    assert leftovers(out) == []


def test_second_ctrl_c_while_writing_leaves_only_whole_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that lands while the partial results are being written: every file in
    --out is either absent or whole (the earlier files parse), no temporaries remain."""
    cfg = write_yaml(tmp_path / "cfg.yaml", small())
    out = tmp_path / "out"
    _interrupt_after(monkeypatch, 10)
    calls = {"n": 0}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real_fsync(fd)

    monkeypatch.setattr("pdsim.output.os.fsync", fsync)
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out)])
    assert res.exit_code != 0 and isinstance(res.exception, KeyboardInterrupt | SystemExit)
    assert leftovers(out) == []
    for f in out.iterdir():
        text = f.read_text()
        if f.suffix == ".json":
            json.loads(text)
        elif f.suffix == ".csv":
            assert text.endswith("\n")
    assert not (out / "summary.json").exists()  # written last, never reached


def test_simpy_interrupt_semantics_are_what_the_cli_relies_on() -> None:
    """KeyboardInterrupt raised inside ``env.step`` propagates out of ``env.run`` with the
    state as of the last processed event (the CLI then builds partial results)."""
    env = simpy.Environment()

    def proc() -> Any:
        yield env.timeout(1)
        raise KeyboardInterrupt

    env.process(proc())
    with pytest.raises(KeyboardInterrupt):
        env.run()
    assert env.now == 1
