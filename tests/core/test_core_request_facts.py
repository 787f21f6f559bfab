"""Requests' facts by column (``RequestFacts``): a run that drops each request once its
facts are recorded (``simulate``) gives the records, segments and summary of one that
keeps every request, finished or interrupted, with faults, retries and decode runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from core_support import make_config

import pdsim.simulation as simulation_module
from pdsim import Simulation
from pdsim.results import Results

CASES = {
    "pd": ("workload.num_requests=60", "workload.arrivals.rate_per_s=200"),
    "pd_outage_retry": (
        "workload.num_requests=60", "workload.arrivals.rate_per_s=200",
        "cluster.decode.count=2",
        "faults.instance_outages=[{instance: D0, start_s: 0.05, end_s: 0.15}]"),
    "colocated_closed_loop": (
        "cluster.mode=colocated", "cluster.colocated.count=2", "workload.num_requests=60",
        "workload.arrivals={kind: closed_loop, concurrency: 6}"),
    "transfer_failures": ("workload.num_requests=60", "workload.arrivals.rate_per_s=200",
                          "faults.kv_transfer_failure_probability=0.3"),
}


def _same(a: Results, b: Results) -> None:
    cols_a, cols_b = a.records.columns, b.records.columns  # type: ignore[attr-defined]
    assert list(cols_a) == list(cols_b)
    for key in cols_a:
        x, y = cols_a[key], cols_b[key]
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, key
            np.testing.assert_array_equal(x, y, err_msg=key)
        else:
            assert x == y, key
    assert a.segments == b.segments
    assert a.summary == b.summary


def _run(cfg: Any, keep: bool, stop_s: float | None) -> tuple[Simulation, Results]:
    sim = Simulation(cfg, keep_requests=keep)
    if stop_s is None:
        return sim, sim.run()
    sim.start()
    while not sim.done and sim.env.peek() < stop_s:
        sim.step()
    return sim, sim.results()


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("stop_s", [None, 0.12])
def test_dropping_requests_changes_no_fact(case: str, stop_s: float | None) -> None:
    cfg = make_config(*CASES[case])
    kept_sim, kept = _run(cfg, True, stop_s)
    dropped_sim, dropped = _run(cfg, False, stop_s)
    _same(kept, dropped)
    statuses = set(kept.records.columns["status"])  # type: ignore[attr-defined]
    if stop_s is None:
        assert statuses <= {"finished", "failed", "rejected"} and "finished" in statuses
        # the dropping run holds no request object at the end
        assert not dropped_sim.table.live and not dropped_sim.table.ended
    else:
        assert "in_flight" in statuses, "the run should be interrupted mid-way"
    assert len(kept_sim.requests) == cfg.workload.num_requests
    with pytest.raises(AttributeError, match="keep_requests"):
        dropped_sim.requests  # noqa: B018


@pytest.mark.parametrize("every", [1, 3])
def test_requests_finishing_inside_decode_runs_are_recorded_once_settled(
        monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    # long outputs at a high rate: requests finish inside decode runs, whose rows settle
    # only when the run commits; recording every ``every`` ended requests must wait
    cfg = make_config("cluster.mode=colocated", "workload.num_requests=40",
                      "workload.arrivals.rate_per_s=1000",
                      "workload.output_tokens={kind: fixed, tokens: 64}")
    kept = Simulation(cfg, keep_requests=True).run()
    monkeypatch.setattr(simulation_module, "RECORD_EVERY", every)
    recorded: list[tuple[int, int]] = []  # (request, its slot) when recorded
    sim = Simulation(cfg, keep_requests=False)
    record = sim.request_facts.record

    def watch(req: Any) -> None:
        recorded.append((req.id, req.slot))
        record(req)

    sim.request_facts.record = watch  # type: ignore[method-assign]
    res = sim.run()
    _same(kept, res)
    assert sorted(r for r, _ in recorded) == list(range(40))
    assert all(slot == -1 for _, slot in recorded)  # settled: out of its decode row
    cols = res.records.columns  # type: ignore[attr-defined]
    assert (cols["output_tokens"] == 64).all() and (cols["num_drafts"] > 0).all()
