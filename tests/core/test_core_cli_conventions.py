"""The conventions users expect of a command-line tool: ``--version``, ``py.typed``,
logging with ``-v``/``-q``, and progress as log lines (with an ETA) when stderr is not a
terminal."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import logging
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pdsim
from pdsim.cli import app
from pdsim.commands import _shared
from pdsim.commands._shared import LogProgress

ROOT = Path(__file__).resolve().parents[2]


def test_version_flag_prints_the_installed_version() -> None:
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0
    assert out.stdout.strip() == f"pdsim {pdsim.__version__}"
    assert pdsim.__version__ == importlib.metadata.version("pdsim")


def test_package_is_marked_typed_and_ships_the_marker() -> None:
    assert importlib.resources.files("pdsim").joinpath("py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in data["tool"]["setuptools"]["package-data"]["pdsim"]


@pytest.mark.parametrize(("flags", "level"), [([], logging.INFO), (["-v"], logging.DEBUG),
                                               (["-q"], logging.WARNING)])
def test_verbosity_flags_set_the_pdsim_log_level(flags: list[str], level: int) -> None:
    out = CliRunner().invoke(app, [*flags, "schema"])
    assert out.exit_code == 0
    assert logging.getLogger("pdsim").getEffectiveLevel() == level


def _records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pdsim"]


def test_log_progress_lines_are_periodic_with_an_eta(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    prog = LogProgress("work", interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="pdsim"):
        for t, done in [(1.0, 10), (5.0, 20), (10.0, 25), (12.0, 30), (20.0, 40), (30.0, 100)]:
            now[0] = t
            prog.update(done, 100)
        now[0] = 31.0
        prog.update(100, 100)
    lines = _records(caplog)
    assert lines == ["work: 25/100 (25%), elapsed 0:00:10, ETA 0:00:30",
                     "work: 40/100 (40%), elapsed 0:00:20, ETA 0:00:30",
                     "work: 100/100 (100%), elapsed 0:00:30"]


def test_log_progress_is_silent_for_quick_work(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    prog = LogProgress("quick", interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="pdsim"):
        for done in range(1, 11):
            now[0] = done * 0.5
            prog.update(done, 10)
    assert _records(caplog) == []


def test_run_piped_to_a_log_writes_progress_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shared, "PROGRESS_INTERVAL_S", 0.0)
    args = ["run", str(ROOT / "configs" / "mtp3.yaml"), "--set", "workload.num_requests=600"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.stderr.splitlines() if "simulating (requests): " in ln]
    assert len(lines) >= 2
    assert any("ETA" in ln for ln in lines)
    assert lines[-1].rstrip().endswith(tuple(f"elapsed 0:00:{s:02d}" for s in range(60)))
    assert "600/600 (100%)" in lines[-1]
    quiet = CliRunner().invoke(app, ["-q", *args])
    assert quiet.exit_code == 0
    assert "simulating" not in quiet.stderr


def test_verbose_adds_debug_lines_and_default_has_none() -> None:
    args = ["run", str(ROOT / "configs" / "mtp3.yaml"), "--set", "workload.num_requests=20"]
    loud = CliRunner().invoke(app, ["-v", *args])
    assert loud.exit_code == 0, loud.output
    debug = [ln for ln in loud.stderr.splitlines() if " DEBUG pdsim: " in ln]
    assert any("config " in ln and "seed 0" in ln for ln in debug)
    assert any("simulating (requests): 20/20 done in" in ln for ln in debug)
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0
    assert "DEBUG" not in plain.stderr


def test_compare_progress_is_per_variant_named_with_its_own_eta(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each variant gets its own progress line, named, whose elapsed time and ETA start
    at that variant: the second variant's ETA is not inflated by the first one's time."""
    import functools
    import re

    ticks = [0.0]

    def clock() -> float:  # one simulated second per progress update
        ticks[0] += 1.0
        return ticks[0]

    monkeypatch.setattr(_shared, "PROGRESS_INTERVAL_S", 0.0)
    monkeypatch.setattr(_shared, "LogProgress",
                        functools.partial(_shared.LogProgress, clock=clock))
    args = ["compare", str(ROOT / "configs" / "mtp3.yaml"), "--set",
            "workload.num_requests=300", "--colocated"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    finals = {}
    for name, i in (("pd_before_fix", 1), ("pd_after_fix", 2), ("colocated", 3)):
        lines = [ln for ln in out.stderr.splitlines()
                 if f"simulating {name} ({i}/3) (requests): " in ln]
        assert len(lines) >= 2, out.stderr
        assert "300/300 (100%)" in lines[-1]
        h, m, s = re.search(r"elapsed (\d+):(\d\d):(\d\d)", lines[-1]).groups()  # type: ignore[union-attr]
        finals[name] = int(h) * 3600 + int(m) * 60 + int(s)
    # one display carried through all three would end near 2x and 3x the first's time
    first = finals["pd_before_fix"]
    assert all(abs(v - first) <= 0.5 * first for v in finals.values()), finals
