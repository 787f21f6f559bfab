"""The step log's storage (``pdsim.engine.step_log``, ``pdsim.facts.StepColumns``) keeps
exactly the per-step facts written, and a run that keeps per-step aggregates only
(``engine.record_steps: aggregates``) gives the same records and summary as one that
keeps every column."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_support import examples, small_cfg
from test_rel_invariants import CASES, random_configs

import pdsim
from pdsim.config import SimConfig
from pdsim.engine import step_log
from pdsim.engine.step_log import StepLog
from pdsim.facts import COUNT_COLUMNS, STEP_COLUMNS, StepColumns, StepLogNotKept
from pdsim.loader import load_config
from pdsim.results import summary_only
from pdsim.timeseries import instance_series

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))


@st.composite
def step_rows(draw: st.DrawFn) -> list[np.ndarray]:
    """Blocks of consecutive steps (a block of one is a single step): each starts at the
    previous end or after an idle gap, with whole-number counts."""
    blocks = []
    t = draw(st.floats(0.0, 10.0))
    for _ in range(draw(st.integers(0, 12))):
        m = draw(st.integers(1, 40))
        rows = np.empty((m, 8))
        for j in range(m):
            if draw(st.booleans()) and draw(st.booleans()):
                t += draw(st.floats(1e-9, 5.0))  # idle before this step
            rows[j, 0] = t
            t += draw(st.floats(1e-9, 1.0))
            rows[j, 1] = t
        # mostly small counts (16-bit columns), sometimes one that needs 32 bits
        top = draw(st.sampled_from([300, 300, 65535, 2**31 - 1]))
        counts = draw(st.lists(st.integers(0, top), min_size=6 * m, max_size=6 * m))
        rows[:, 2:] = np.reshape(counts, (m, 6))
        blocks.append(rows)
    return blocks


@settings(max_examples=examples(60), deadline=None)
@given(blocks=step_rows(), one_by_one=st.lists(st.booleans(), min_size=12, max_size=12),
       peek=st.integers(0, 12))
def test_columns_give_back_the_rows_written(blocks: list[np.ndarray], one_by_one: list[bool],
                                            peek: int) -> None:
    # tiny flushes and chunks so that a few dozen rows cross many of both
    with mock.patch.multiple(step_log, FLUSH_ROWS=5, FIRST_CHUNK_ROWS=3, MAX_CHUNK_ROWS=4):
        logs = {mode: StepLog(mode) for mode in COUNT_COLUMNS}
        early: dict[str, StepColumns] = {}
        for i, rows in enumerate(blocks):
            for mode, log in logs.items():
                if i == peek:  # the facts so far: later steps must not change them
                    early[mode] = log.columns()
                if one_by_one[i]:
                    for row in rows:
                        log.add(*row.tolist())
                else:
                    log.add_block(rows)
        written = np.concatenate(blocks) if blocks else np.empty((0, 8))
        for mode, log in logs.items():
            cols = log.columns()
            assert len(log) == len(cols) == len(written)
            assert cols.end_s.tobytes() == written[:, 1].tobytes()
            assert cols.start_s().tobytes() == written[:, 0].tobytes()
            assert cols.duration_s().tobytes() == (written[:, 1] - written[:, 0]).tobytes()
            for j, name in enumerate(STEP_COLUMNS[2:], start=2):
                if name in COUNT_COLUMNS[mode]:
                    assert cols.column(name).tolist() == written[:, j].astype(int).tolist()
                else:
                    with pytest.raises(StepLogNotKept, match="record_steps: full"):
                        cols.column(name)
            if mode == "full":
                assert cols.matrix().tobytes() == written.tobytes()
                assert StepColumns.from_matrix(written).matrix().tobytes() == written.tobytes()
            if mode in early:
                n = len(early[mode])
                assert early[mode].end_s.tobytes() == written[:n, 1].tobytes()
                assert early[mode].start_s().tobytes() == written[:n, 0].tobytes()


def test_counts_that_are_not_whole_numbers_are_refused() -> None:
    log = StepLog("full")
    log.add(0.0, 1.0, 0.5, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="prefill_tokens"):
        log.columns()


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, floats bit for bit."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def assert_same_run(cfg: SimConfig) -> None:
    """``cfg`` keeping every step column and keeping aggregates only: the same records,
    segments, step ends and summary; the aggregates run refuses the other columns."""
    full = pdsim.simulate(cfg.model_copy(update={
        "engine": cfg.engine.model_copy(update={"record_steps": "full"})}))
    lean_cfg = summary_only(cfg)
    assert lean_cfg.engine.record_steps == "aggregates"
    lean = pdsim.simulate(lean_cfg)
    assert _same(full.summary.as_dict(), lean.summary.as_dict())
    assert full.segments == lean.segments
    assert _same(list(full.records), list(lean.records))
    for f, g in zip(full.instances, lean.instances, strict=True):
        assert f.step_end_s.tobytes() == g.step_end_s.tobytes()
        assert f.steps.start_s().tobytes() == g.steps.start_s().tobytes()
        for name in COUNT_COLUMNS["aggregates"]:
            assert f.steps.column(name).tolist() == g.steps.column(name).tolist()
        if len(g.steps):
            with pytest.raises(StepLogNotKept):
                instance_series(g)


@pytest.mark.parametrize("name", CONFIGS)
def test_shipped_configs_summarize_the_same_from_aggregates(name: str) -> None:
    path = ROOT / "configs" / name
    raw = load_config(path)
    cap = ("workload.trace.max_requests=60" if raw.workload.trace is not None
           else "workload.num_requests=120")
    assert_same_run(load_config(path, [cap]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_reliability_cases_summarize_the_same_from_aggregates(name: str) -> None:
    assert_same_run(small_cfg(CASES[name]))


@settings(max_examples=examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=random_configs())
def test_random_configs_summarize_the_same_from_aggregates(data: dict[str, Any]) -> None:
    assert_same_run(load_config(data))


def test_a_config_that_chose_keeps_its_choice() -> None:
    cfg = small_cfg()
    assert cfg.engine.record_steps == "auto"
    full = cfg.model_copy(update={
        "engine": cfg.engine.model_copy(update={"record_steps": "full"})})
    assert summary_only(full) is full
    assert len(pdsim.simulate(cfg).instances[0].step_log)  # auto in simulate(): every column
