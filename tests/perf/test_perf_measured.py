"""Measured step times: the CSV format, interpolation rules, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pdsim.config import Role
from pdsim.errors import InputFileError
from pdsim.loader import config_from_dict
from pdsim.perf.base import StepBatch
from pdsim.perf.build import build_step_time_model
from pdsim.perf.config import MeasuredStepTimeConfig
from pdsim.perf.measured import MeasuredStepTime, read_measurements

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "measured_step_times.csv"

GRID = """\
# a tiny hand-made grid
phase,batch_size,tokens,context_tokens,step_time_s,notes
decode,1,1,1000,0.010,
decode,10,10,1000,0.020,
decode,10,10,1000,0.022,repeat: averaged to 0.021
decode,1,1,3000,0.012,
decode,10,10,3000,0.030,
prefill,1,100,0,0.020,
prefill,1,1100,0,0.120,
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "steps.csv"
    p.write_text(text, encoding="utf-8")
    return str(p)


def measured(tmp_path: Path, text: str = GRID, **kw: Any) -> MeasuredStepTime:
    return MeasuredStepTime(MeasuredStepTimeConfig(csv_path=write(tmp_path, text), **kw))


def dec(batch: int, ctx: float) -> StepBatch:
    return StepBatch(0, 0.0, batch, batch, int(batch * ctx), 0)


def pre(chunk: int, before: int = 0) -> StepBatch:
    return StepBatch(chunk, chunk * (before + (chunk + 1) / 2), 0, 0, 0, 0)


def test_grid_points_and_interpolation(tmp_path: Path) -> None:
    m = measured(tmp_path)
    assert m.step_time_s(dec(1, 1000)) == pytest.approx(0.010)
    assert m.step_time_s(dec(10, 1000)) == pytest.approx(0.021)  # repeats averaged
    # halfway in tokens along the 1000-context curve
    assert m.step_time_s(StepBatch(0, 0.0, 5, 5, 5000, 0)) == pytest.approx(0.010 + 0.011 * 4 / 9)
    # halfway between the two contexts at 10 tokens: (0.021 + 0.030) / 2
    assert m.step_time_s(dec(10, 2000)) == pytest.approx(0.0255)
    assert m.step_time_s(pre(600)) == pytest.approx(0.070)


def test_extrapolation_rules(tmp_path: Path) -> None:
    lin = measured(tmp_path)
    # above the range: the last segment continues (0.011 s per 9 tokens at context 1000)
    assert lin.step_time_s(dec(19, 1000)) == pytest.approx(0.021 + 0.011)
    assert lin.step_time_s(pre(2100)) == pytest.approx(0.220)
    # in context: the last two contexts' difference continues
    assert lin.step_time_s(dec(1, 5000)) == pytest.approx(0.014)
    # below the range the edge holds
    assert lin.step_time_s(dec(1, 10)) == pytest.approx(0.010)
    assert lin.step_time_s(pre(10)) == pytest.approx(0.020)
    clamp = measured(tmp_path, extrapolation="clamp")
    assert clamp.step_time_s(dec(19, 1000)) == pytest.approx(0.021)
    assert clamp.step_time_s(dec(1, 5000)) == pytest.approx(0.012)


def test_mixed_steps_and_repairs(tmp_path: Path) -> None:
    m = measured(tmp_path, mixed_overlap_s=0.005, drafter_repair_token_s=0.001)
    mixed = StepBatch(600, 600 * 300.5, 1, 1, 1000, 3)
    assert m.step_time_s(mixed) == pytest.approx(0.070 + 0.010 - 0.005 + 0.003)


def test_example_file_is_usable() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert "SYNTHETIC" in text.splitlines()[0]
    points = read_measurements(EXAMPLE)
    assert points["prefill"] and points["decode"]
    cfg = config_from_dict({"step_time": {"kind": "measured", "csv_path": str(EXAMPLE)}})
    stm = build_step_time_model(cfg, Role.DECODE)
    times = [stm.step_time_s(dec(b, 2048)) for b in (1, 8, 64, 256)]
    assert times == sorted(times) and 1e-3 < times[0] < 0.1


@pytest.mark.parametrize("text,line,fragment", [
    ("phase,tokens,step_time_s\ndecode,1,0.01\n", 1, "missing column(s) batch_size"),
    ("phase,batch_size,tokens,context_tokens,step_time_s,gpu\n", 1, "unknown column(s) gpu"),
    ("# c\nphase,batch_size,tokens,context_tokens,step_time_s\nverify,1,1,0,0.01\n", 3,
     "phase 'verify'"),
    ("phase,batch_size,tokens,context_tokens,step_time_s\ndecode,1,one,0,0.01\n", 2,
     "not a number"),
    ("phase,batch_size,tokens,context_tokens,step_time_s\ndecode,1,1,0,-1\n", 2,
     "step_time_s must be > 0"),
    ("phase,batch_size,tokens,context_tokens,step_time_s\ndecode,1,1,0\n", 2, "4 fields"),
    ("phase,batch_size,tokens,context_tokens,step_time_s\ndecode,1,1,0,0.01\n", None,
     "no prefill rows"),
])
def test_malformed_files(tmp_path: Path, text: str, line: int | None, fragment: str) -> None:
    with pytest.raises(InputFileError) as err:
        read_measurements(write(tmp_path, text))
    assert err.value.line == line
    assert fragment in err.value.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such file"):
        read_measurements(tmp_path / "nope.csv")
