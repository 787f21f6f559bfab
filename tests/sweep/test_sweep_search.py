"""Capacity search: the found rate meets the SLOs, a clearly higher one does not."""

from __future__ import annotations

import pytest
from sweep_support import small_config

from pdsim.errors import ConfigError
from pdsim.search import (
    best_pd_split,
    max_rate_meeting_slo,
    split_config,
    trial_config,
)
from pdsim.simulation import simulate

SLO = ["slo.ttft_s=0.3", "slo.tpot_s=0.02"]
N = 300


def _meets(cfg: object, rate: float, n: int = N) -> bool:
    return bool(simulate(trial_config(cfg, rate, n)).summary["slo_met"])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def found() -> tuple[object, float, float | None]:
    cfg = small_config(*SLO)
    res = max_rate_meeting_slo(cfg, tol=0.05, min_requests=N)
    assert res.rate_per_s is not None
    return cfg, res.rate_per_s, res.failing_rate_per_s


def test_found_rate_meets_and_double_does_not(found: tuple[object, float, float | None]
                                              ) -> None:
    cfg, rate, failing = found
    assert _meets(cfg, rate)
    assert not _meets(cfg, 2 * rate)
    assert failing is not None and rate < failing <= rate * 1.06
    assert not _meets(cfg, failing)


def test_given_bracket(found: tuple[object, float, float | None]) -> None:
    cfg, rate, _ = found
    res = max_rate_meeting_slo(cfg, lo=rate / 4, hi=rate * 4, tol=0.05,  # type: ignore[arg-type]
                               min_requests=N)
    assert res.rate_per_s is not None and _meets(cfg, res.rate_per_s)
    assert res.trials[0].rate_per_s == rate / 4 and res.trials[1].rate_per_s == rate * 4
    assert abs(res.rate_per_s - rate) <= 0.1 * rate


def test_short_runs_meet_slos_spuriously(found: tuple[object, float, float | None]) -> None:
    """Why trials have a request floor: a handful of requests passes at twice capacity."""
    _, rate, _ = found
    few = small_config(*SLO, "workload.num_requests=10")
    assert _meets(few, 2 * rate, n=1)


def test_unmeetable_slo_gives_no_rate() -> None:
    cfg = small_config("slo.tpot_s=0.0001")
    res = max_rate_meeting_slo(cfg, tol=0.1, min_requests=50)
    assert res.rate_per_s is None and res.summary is None
    assert res.failing_rate_per_s is not None and len(res.trials) > 1


def test_search_needs_slo_and_rate() -> None:
    with pytest.raises(ConfigError) as err:
        max_rate_meeting_slo(small_config())
    assert err.value.path == "slo"
    closed = small_config(*SLO, "workload.arrivals={kind: closed_loop, concurrency: 4}")
    with pytest.raises(ConfigError) as err:
        max_rate_meeting_slo(closed)
    assert err.value.path == "workload.arrivals"
    with pytest.raises(ConfigError):
        max_rate_meeting_slo(small_config(*SLO), lo=4, hi=2)


def test_trial_config_request_floor() -> None:
    cfg = small_config(*SLO)
    assert trial_config(cfg, 3.0, 1000).workload.num_requests == 1000
    assert trial_config(cfg, 3.0, 10).workload.num_requests == 120
    by_time = small_config(*SLO, "workload.num_requests=null", "workload.duration_s=100")
    t = trial_config(by_time, 5.0, 10)
    assert t.workload.num_requests == 500 and t.workload.duration_s is None


def test_best_pd_split_ranks_by_goodput_per_gpu() -> None:
    cfg = small_config(*SLO)
    splits = best_pd_split(cfg, gpu_budget=3, tol=0.1, min_requests=200)
    assert sorted((s.prefill_count, s.decode_count) for s in splits) == [(1, 2), (2, 1)]
    assert [s.goodput_per_gpu for s in splits] == sorted(
        (s.goodput_per_gpu for s in splits), reverse=True)
    for s in splits:
        assert s.gpus == 3 and s.rate_per_s is not None
        assert s.goodput_per_gpu == pytest.approx(s.goodput_req_s / 3)
        assert _meets(split_config(cfg, s.prefill_count, s.decode_count), s.rate_per_s, 200)


def test_best_pd_split_errors() -> None:
    cfg = small_config(*SLO)
    with pytest.raises(ConfigError) as err:
        best_pd_split(cfg, gpu_budget=3, gpus_per_instance=2)
    assert err.value.path == "gpu_budget"
    co = small_config(*SLO, "cluster.mode=colocated")
    with pytest.raises(ConfigError) as err:
        best_pd_split(co, gpu_budget=4)
    assert err.value.path == "cluster.mode"
