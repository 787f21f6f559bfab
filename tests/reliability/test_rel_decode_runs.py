"""Decode runs are an optimisation, not a model: with them switched off (every decode
step its own SimPy event) every request record comes out the same.

A decode run computes the pure-decode steps up to the next external event in one
vectorized pass. Acceptance draws are counter-based per request, so the run sees the
draws the steps would see one by one; step times are priced by the same arithmetic; only
the order of float additions in the step end times differs (a cumulative sum instead of
``now + dt`` step after step), hence the tolerance on times.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from rel_support import examples, small_cfg
from test_rel_invariants import CASES, random_configs

import pdsim
import pdsim.engine.instance as instance_module
from pdsim.config import SimConfig
from pdsim.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))


def _step_by_step(cfg: SimConfig, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        m.setattr(instance_module, "decode_run", lambda inst: 0.0)
        return pdsim.simulate(cfg)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def assert_same_records(cfg: SimConfig, monkeypatch: pytest.MonkeyPatch) -> int:
    """Run ``cfg`` with and without decode runs; the number of decode steps that ran
    inside runs (so a case can show it exercised them)."""
    counted: list[int] = []
    original = instance_module.decode_run

    def counting(inst: Any) -> float:
        before = len(inst.step_end_s)
        ahead: float = original(inst)
        counted.append(len(inst.step_end_s) - before)
        return ahead

    with monkeypatch.context() as m:
        m.setattr(instance_module, "decode_run", counting)
        fast = pdsim.simulate(cfg)
    slow = _step_by_step(cfg, monkeypatch)
    assert len(fast.records) == len(slow.records)
    for a, b in zip(fast.records, slow.records, strict=True):
        diff = {k: (a[k], b[k]) for k in a if not _same(a[k], b[k])}
        assert not diff, f"request {a.get('request_id', '?')}: {diff}"
    return sum(counted)


@pytest.mark.parametrize("name", CONFIGS)
def test_shipped_configs_run_the_same_without_decode_runs(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / "configs" / name
    raw = load_config(path)
    cap = ("workload.trace.max_requests=60" if raw.workload.trace is not None
           else "workload.num_requests=120")
    cfg = load_config(path, [cap])
    steps_in_runs = assert_same_records(cfg, monkeypatch)
    if raw.speculative.num_speculative_tokens or raw.cluster.mode == "colocated":
        assert steps_in_runs > 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_reliability_cases_run_the_same_without_decode_runs(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_same_records(small_cfg(CASES[name]), monkeypatch)


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=random_configs())
def test_random_small_configs_run_the_same_without_decode_runs(
        data: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert_same_records(load_config(data), monkeypatch)
