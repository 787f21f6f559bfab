"""The plan on a small space: the front is Pareto, pruning loses nothing, the backends
agree, the cache resumes, and the TPOT bound holds against the simulations."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from plan_support import small_config, small_spec

from pdsim.plan import Plan, plan
from pdsim.plan.front import dominates, pareto_front
from pdsim.plan.outputs import plan_csv
from pdsim.search import bisect_rates


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Plan]:
    out = tmp_path_factory.mktemp("plan-ref")
    return out, plan(small_config(), small_spec(), 2, out_dir=out, workers=1)


def _xy(p: object) -> tuple[float, float]:
    return (p.tok_s_per_gpu, p.tok_s_per_user)  # type: ignore[attr-defined]


def test_front_is_truly_pareto(reference: tuple[Path, Plan]) -> None:
    _, pl = reference
    feasible = [p for p in pl.points if p.status == "feasible"]
    assert len(feasible) >= 4 and pl.front
    front = [pl.points[i] for i in pl.front]
    for p in front:  # nothing dominates a front point
        assert not any(dominates(_xy(q), _xy(p)) for q in feasible), p.label
    for p in feasible:  # every other feasible point is dominated by a front point
        if not p.on_front:
            assert any(dominates(_xy(q), _xy(p)) for q in front), p.label
    chosen = pl.points[pl.chosen] if pl.chosen is not None else None
    assert chosen is not None and chosen.on_front
    assert chosen.tok_s_per_gpu == max(p.tok_s_per_gpu for p in feasible)
    # every feasible point met the SLOs at the rate it is judged by
    assert all(p.figures["slo_met"] for p in feasible)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12))
def test_pareto_front_against_brute_force(pts: list[tuple[int, int]]) -> None:
    front = set(pareto_front([(float(a), float(b)) for a, b in pts]))
    for i, p in enumerate(pts):
        beaten = any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts)
        assert (i in front) == (not beaten)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.01, 1000), st.floats(0.01, 1000), st.sampled_from([0.02, 0.05, 0.2]))
def test_bisection_brackets_the_threshold(threshold: float, rate0: float, tol: float) -> None:
    # within MAX_BRACKET_STEPS doublings or halvings of the start (as max_rate_meeting_slo)
    assume(2.0**-15 < threshold / rate0 < 2.0**15)
    gen = bisect_rates(rate0, tol)
    rate = next(gen)
    tried = 0
    while True:
        tried += 1
        try:
            rate = gen.send(rate <= threshold)
        except StopIteration as stop:
            good, bad = stop.value
            break
    assert good is not None and bad is not None
    assert good <= threshold < bad and bad - good <= tol * bad
    assert tried <= 2 * 16 + math.ceil(math.log2(1 / tol)) + 1


def test_pruning_never_drops_a_point_the_unpruned_search_keeps(tmp_path: Path) -> None:
    from pdsim.plan import enumerate_candidates
    from pdsim.plan.bounds import tpot_lower_bound_s
    from pdsim.plan.space import candidate_config

    spec = small_spec(modes=["colocated"], tol=0.3)
    cfg = small_config()
    # a TPOT target between the candidates' bounds: some are pruned, some are not
    bounds = sorted({tpot_lower_bound_s(candidate_config(cfg, c))
                     for c in enumerate_candidates(cfg, spec, 2)})
    assert len(bounds) >= 2
    target = (bounds[-2] + bounds[-1]) / 2
    cfg = small_config(tpot_s=target)
    # one cache: the unpruned search simulates only what the pruned one skipped
    pruned = plan(cfg, spec, 2, out_dir=tmp_path, workers=1, prune=True)
    unpruned = plan(cfg, spec, 2, out_dir=tmp_path, workers=1, prune=False)
    dropped = [p for p in pruned.points if p.status == "pruned"]
    assert dropped, "the target should prune something"
    assert any(p.status == "feasible" for p in pruned.points)
    for p in dropped:  # the unpruned search finds no SLO-meeting rate for any of them
        assert unpruned.points[p.index].status == "no_slo_rate", p.label
        assert unpruned.points[p.index].figures["mean_tpot_s"] > target
    assert [pruned.points[i].label for i in pruned.front] == \
        [unpruned.points[i].label for i in unpruned.front]
    for i in pruned.front:
        assert pruned.points[i].figures == unpruned.points[i].figures


def test_tpot_bound_holds_for_every_simulated_candidate(reference: tuple[Path, Plan]) -> None:
    _, pl = reference
    checked = 0
    for p in pl.points:
        if p.figures.get("mean_tpot_s"):
            assert p.figures["mean_tpot_s"] >= p.tpot_lower_bound_s > 0, p.label
            checked += 1
    assert checked == len(pl.points)


@pytest.fixture(scope="module")
def tiny() -> Plan:
    """Three candidates at a coarse tolerance: few rounds, so few process pools."""
    return plan(small_config(), _tiny_spec(), 2, workers=1)


def _tiny_spec() -> object:
    return small_spec(num_speculative_tokens=[2], tol=0.3, decode={"max_num_seqs": [32]},
                      colocated={"max_num_seqs": [32]})


def test_two_local_workers_give_the_same_plan(tiny: Plan, tmp_path: Path) -> None:
    two = plan(small_config(), _tiny_spec(), 2, out_dir=tmp_path, workers=2)  # type: ignore[arg-type]
    assert len(tiny.points) == 3 and plan_csv(two) == plan_csv(tiny)


def test_dask_gives_the_same_plan(tiny: Plan, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        via_dask = plan(small_config(), _tiny_spec(), 2, out_dir=tmp_path,  # type: ignore[arg-type]
                        backend="dask", address=cluster.scheduler_address)
    assert plan_csv(via_dask) == plan_csv(tiny)
    assert via_dask.runs_simulated == tiny.runs_simulated


def test_a_rerun_reads_every_run_from_the_cache(reference: tuple[Path, Plan]) -> None:
    out, pl = reference
    again = plan(small_config(), small_spec(), 2, out_dir=out, workers=1)
    assert again.runs_simulated == 0 and again.runs_cached == pl.runs_simulated > 0
    assert plan_csv(again) == plan_csv(pl)


def test_the_configs_own_deployment_is_judged_too(reference: tuple[Path, Plan]) -> None:
    _, pl = reference
    b = pl.baseline  # 2 x TP1 colocated, 2 drafts, 16 seqs: not in the space's seqs
    assert b is not None and b.gpus == 2 and b.status == "feasible"
    assert b.rate_per_s is not None and b.goodput_per_gpu > 0
