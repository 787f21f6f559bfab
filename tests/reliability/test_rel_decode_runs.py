"""Decode runs are an optimisation, not a model: with them switched off (every decode
step its own SimPy event) every request record, every step logged and every decode
segment comes out the same.

A decode run plans pure-decode steps in one vectorized pass and is followed boundary by
boundary, ending wherever scheduling step by step could differ. Acceptance draws are
counter-based per request, so the run sees the draws the steps would see one by one; step
times are priced by the same arithmetic; only the order of float additions in the step end
times differs (a cumulative sum instead of ``now + dt`` step after step), hence the
tolerance on times.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from rel_support import examples, small_cfg
from test_rel_invariants import CASES, random_configs

import pdsim
from pdsim.config import Role, SimConfig
from pdsim.engine_config import EngineConfig
from pdsim.loader import load_config
from pdsim.simulation import Simulation

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))


def _step_by_step(cfg: SimConfig) -> Any:
    """``cfg`` with decode runs off (``engine.decode_runs: off``)."""
    return pdsim.simulate(cfg.model_copy(update={"engine": EngineConfig(decode_runs="off")}))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def assert_same_records(cfg: SimConfig, runs: list[Any] | None = None) -> int:
    """Run ``cfg`` with and without decode runs; the number of decode steps that ran
    inside runs (so a case can show it exercised them). ``runs`` collects the runs."""
    runs = [] if runs is None else runs
    assert cfg.engine.decode_runs == "auto"
    sim = Simulation(cfg)
    sim.hooks.run_planned.append(lambda inst, run: runs.append(run))
    fast = sim.run()
    slow = _step_by_step(cfg)
    assert len(fast.records) == len(slow.records)
    for a, b in zip(fast.records, slow.records, strict=True):
        diff = {k: (a[k], b[k]) for k in a if not _same(a[k], b[k])}
        assert not diff, f"request {a.get('request_id', '?')}: {diff}"
    # the step log too: what each step computed and the queues and blocks after it
    for fi, si in zip(fast.instances, slow.instances, strict=True):
        assert fi.step_log.shape == si.step_log.shape, fi.name
        np.testing.assert_allclose(fi.step_log[:, :2], si.step_log[:, :2], rtol=1e-9,
                                   err_msg=fi.name)
        np.testing.assert_array_equal(fi.step_log[:, 2:], si.step_log[:, 2:], err_msg=fi.name)
        assert math.isclose(fi.busy_s, si.busy_s, rel_tol=1e-9), fi.name
    assert fast.segments == slow.segments
    return sum(run.reached + 1 for run in runs)


@pytest.mark.parametrize("name", CONFIGS)
def test_shipped_configs_run_the_same_without_decode_runs(
        name: str) -> None:
    path = ROOT / "configs" / name
    raw = load_config(path)
    cap = ("workload.trace.max_requests=60" if raw.workload.trace is not None
           else "workload.num_requests=120")
    cfg = load_config(path, [cap])
    steps_in_runs = assert_same_records(cfg)
    # attention-DP engines step their ranks one step at a time: no decode runs there
    lone_decoders = any(p.group.attention_dp_size == 1 for p in raw.cluster.pools()
                        if p.role is not Role.PREFILL)
    if (raw.speculative.num_speculative_tokens or raw.cluster.mode == "colocated") and (
            lone_decoders):
        assert steps_in_runs > 0
    if not lone_decoders:
        assert steps_in_runs == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_reliability_cases_run_the_same_without_decode_runs(
        name: str) -> None:
    assert_same_records(small_cfg(CASES[name]))


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=random_configs())
def test_random_small_configs_run_the_same_without_decode_runs(
        data: dict[str, Any]) -> None:
    assert_same_records(load_config(data))


def test_runs_that_outgrow_their_join_room_run_the_same() -> None:
    """Rows joining a run beyond the columns it first allocated (they are grown)."""
    runs: list[Any] = []
    cfg = load_config(ROOT / "configs" / "mtp3.yaml",
                      ["workload.num_requests=150", "engine.decode_run_join_room=1"])
    assert assert_same_records(cfg, runs) > 0
    assert sum(run.columns_grown for run in runs) > 1


FOUND = Path(__file__).parent / "found"


@pytest.mark.parametrize("name", sorted(p.name for p in FOUND.glob("*.json")))
def test_configs_random_search_broke_run_the_same_and_keep_invariants(
        name: str) -> None:
    """Configs a deep random search (``PDSIM_REL_SCALE=10``) broke, kept as regressions.

    ``run_cut_by_fault.json``: a run admits a chunk and re-prices the mixed step, which
    pulls the run's end (no step may span a scheduled fault) back to the current
    boundary; the run must end there (it went on and finished two rows twice).
    ``same_instant_step_ends_*.json``: P's and D's steps end at the same instant (every
    step costs the floor); whether D saw the hand-over there depended on SimPy's event
    creation order, until step ends got their own place in the order (``StepEnd``).
    """
    import json

    from pdsim.invariants import run_checked

    cfg = load_config(json.loads((FOUND / name).read_text()))
    run_checked(cfg)
    assert_same_records(cfg)
