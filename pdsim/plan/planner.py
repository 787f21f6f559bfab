"""``plan``: enumerate the candidates, prune what cannot win, simulate the rest, build the
front.

Each candidate is judged by full simulations of its config. With the ``goodput``
objective it gets a rate search like ``pdsim search``'s (``max_rate_meeting_slo``:
double or halve from the config's rate until the SLO result changes, then bisect to
``tol``), with the ``workload`` objective one run at the config's own rate. The searches
advance in *rounds*: every candidate still searching proposes its next rate, the round's
configs run together on a sweep backend (``pdsim.sweep``: a local process pool or Dask),
and each candidate reads its result and proposes the next. A candidate's rates depend only
on its own results, never on the order runs finished, so every backend and worker count
gives the same plan.

Reuse: a run is identified by its resolved config (``pdsim.sweep.point_id``), so
candidates whose trial configs coincide (the config's own deployment when it is also a
candidate; a rate two searches of one config both try) share one run, a router is never
varied where each role has one instance (``space``), and with a cache folder every run
finished in an earlier call is read back, not rerun: an interrupted plan resumes where it
stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdsim.config import SimConfig
from pdsim.errors import ConfigError
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.plan.bounds import layout_fits, tpot_lower_bound_s
from pdsim.plan.front import VALIDATION_ERROR, choose, pareto_front, tied
from pdsim.plan.space import (
    Candidate,
    candidate_config,
    config_gpus,
    enumerate_candidates,
)
from pdsim.plan.spec import PlanSpec
from pdsim.search import RateBisection, bisect_rates, check_searchable, trial_config

ProgressFn = Callable[[int, int], None]

KEEP = ("slo_met", "output_throughput_tok_s", "mean_tpot_s", "mean_ttft_s", "goodput_req_s",
        "slo_ttft_percentile_s", "slo_tpot_percentile_s", "slo_attainment",
        "request_throughput_req_s", "completed", "num_requests", "acceptance_length")


@dataclass
class PlanPoint:
    """One candidate and what became of it.

    ``status``: ``pruned`` (a bound says it cannot meet the SLOs or the simulator cannot
    run it; ``reason`` says which), ``no_slo_rate`` (simulated, no rate met the SLOs) or
    ``feasible``. ``figures``: the summary of the run it is judged by (its highest
    SLO-meeting rate, or the config's rate). ``provenance``: where the step-time values
    of its pools come from.
    """

    index: int
    candidate: Candidate
    status: str = "pending"
    reason: str = ""
    rate_per_s: float | None = None
    failing_rate_per_s: float | None = None
    runs: int = 0
    tpot_lower_bound_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    point_id: str = ""
    config: SimConfig | None = None
    provenance: dict[str, list[str]] = field(default_factory=dict)
    on_front: bool = False
    chosen: bool = False
    ties: list[int] = field(default_factory=list)
    name: str = ""
    """A label of its own (the baseline's); empty: the candidate's."""
    gpus_used: int = 0
    """GPUs when the candidate does not say (the baseline); 0: the candidate's."""

    @property
    def label(self) -> str:
        return self.name or self.candidate.label

    @property
    def gpus(self) -> int:
        return self.gpus_used or self.candidate.gpus

    @property
    def tok_s_per_gpu(self) -> float:
        return float(self.figures.get("output_throughput_tok_s") or 0.0) / self.gpus

    @property
    def tok_s_per_user(self) -> float:
        tpot = self.figures.get("mean_tpot_s")
        return 1.0 / tpot if tpot else 0.0

    @property
    def goodput_per_gpu(self) -> float:
        return float(self.figures.get("goodput_req_s") or 0.0) / self.gpus


@dataclass
class Plan:
    """Every candidate (``points``, in enumeration order), the front's indices (best
    tokens/s per GPU first), the chosen point, the config's own deployment judged the same
    way (``baseline``, when it uses the same GPUs), and how much work it took."""

    gpus: int
    spec: PlanSpec
    points: list[PlanPoint]
    front: list[int]
    chosen: int | None
    baseline: PlanPoint | None
    runs_simulated: int = 0
    runs_cached: int = 0
    runs_shared: int = 0
    rounds: int = 0

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.points:
            out[p.status] = out.get(p.status, 0) + 1
        return out


# ------------------------------------------------------------------ rate searches


def _remaining(lo: float | None, hi: float | None, tol: float) -> int:
    """Runs a search with this bracket still needs, about (for the ETA)."""
    if lo is None or hi is None:
        return 2 + max(1, math.ceil(math.log2(1.0 / tol)))
    gap = (hi - lo) / (tol * hi)
    return max(0, math.ceil(math.log2(gap))) if gap > 1 else 0


# ------------------------------------------------------------------ provenance


def provenance(cfg: SimConfig) -> dict[str, list[str]]:
    """Which step-time values of ``cfg``'s pools are fitted, which borrowed from another
    GPU's fit and which fitted to nothing."""
    fitted: list[str] = []
    borrowed: list[str] = []
    unfitted: list[str] = []
    for pool in cfg.cluster.pools():
        st = cfg.step_time_of(pool.group)
        if not isinstance(st, RooflineStepTimeConfig):
            continue
        text = st.parameter_provenance
        hw = st.kernels_from or "inline"
        if st.borrowed_fit:
            item = f"kernel constants of {hw} (borrowed: {st.borrowed_fit})"
            if item not in borrowed:
                borrowed.append(item)
        elif "fitted to" in text:
            item = f"kernel constants of {hw}"
            if item not in fitted:
                fitted.append(item)
        if "CPU costs fitted" in text and "CPU costs" not in fitted:
            fitted.append("CPU costs")
        if "attention_efficiency" not in unfitted:
            unfitted.append("attention_efficiency")
        if (st.expert_parallel_size > st.tensor_parallel_size
                and "attention-DP + EP costs" not in unfitted):
            unfitted.append("attention-DP + EP costs")
    return {"fitted": fitted, "borrowed": borrowed, "not_fitted": unfitted}


# ------------------------------------------------------------------ the plan


class _Runner:
    """Runs a round's configs on a sweep backend, reusing runs by config id."""

    def __init__(self, out_dir: str | Path | None, backend: str, workers: int | None,
                 address: str | None, force: bool) -> None:
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.backend = backend
        self.workers = workers
        self.address = address
        self.force = force
        self.memo: dict[str, dict[str, Any]] = {}
        self.simulated = 0
        self.cached = 0
        self.shared = 0

    def run(self, configs: Mapping[int, SimConfig],
            on_done: Callable[[int], None]) -> dict[int, tuple[str, dict[str, Any]]]:
        from pdsim.sweep import Sweep, point_id

        ids = {k: point_id(c) for k, c in configs.items()}
        todo: dict[str, SimConfig] = {}
        for k, c in configs.items():
            if ids[k] in self.memo or ids[k] in todo:
                self.shared += 1
            else:
                todo[ids[k]] = c
        if todo:
            order = list(todo)
            base = todo[order[0]]
            # each point replaces whole sections of the first: its resolved config is its own
            points = [{key: c.model_dump(mode="json")[key] for key in
                       ("cluster", "step_time", "speculative", "router", "workload",
                        "connector")} for c in (todo[i] for i in order)]
            sweep = Sweep(base, points)
            done = [0]

            def progress(n: int, total: int) -> None:
                while done[0] < n:
                    done[0] += 1
                    on_done(1)

            rows = sweep.run(self.out_dir / "cache" if self.out_dir is not None else None,
                             backend=self.backend,  # type: ignore[arg-type]
                             workers=self.workers, address=self.address,
                             progress=progress, force=self.force, run_files=False)
            for pt, row in zip(sweep.points, rows, strict=True):
                # the sections replaced are all a candidate changes: same config, same id
                assert pt.point_id == order[pt.index], "a plan run resolved to another config"
                self.memo[order[pt.index]] = {k: row.get(k) for k in KEEP}
            self.cached += len(sweep.cached)
            self.simulated += len(sweep.computed)
            self.force = False  # forced once: a rate tried again later is this run's
        return {k: (ids[k], self.memo[ids[k]]) for k in configs}


def _prune(cfg: SimConfig, cand: Candidate, spec: PlanSpec, fits: dict[Any, str | None],
           prune: bool) -> tuple[SimConfig | None, str, float]:
    """The candidate's config, or why it cannot run / cannot meet the SLOs."""
    st = cfg.step_time
    assert isinstance(st, RooflineStepTimeConfig)
    modules = 1 if cand.num_speculative_tokens else 0
    for _, choice in cand.roles:
        key = (choice.layout, modules)
        if key not in fits:
            fits[key] = layout_fits(st, choice.layout, modules)
        if fits[key] is not None:
            return None, f"does not fit: {fits[key]}", 0.0
    try:
        c = candidate_config(cfg, cand)
    except ConfigError as exc:
        return None, f"the simulator refuses it: {exc}", 0.0
    lb = tpot_lower_bound_s(c)
    if prune and cfg.slo.tpot_s is not None and lb > cfg.slo.tpot_s:
        return c, (f"TPOT lower bound {lb * 1e3:.2f} ms exceeds the SLO's "
                   f"{cfg.slo.tpot_s * 1e3:g} ms"), lb
    return c, "", lb


def plan(cfg: SimConfig, spec: PlanSpec, gpus: int, out_dir: str | Path | None = None,
         backend: str = "local", workers: int | None = 1, address: str | None = None,
         progress: ProgressFn | None = None, force: bool = False, prune: bool = True) -> Plan:
    """Search ``spec``'s space for ``gpus`` GPUs under ``cfg``'s model, workload and SLOs.

    ``out_dir``: cache runs under ``out_dir/cache`` (a rerun reads them back); None keeps
    them in memory. ``backend``/``workers``/``address``: the sweep backend. ``prune``:
    False simulates candidates the TPOT bound would skip (for checking the bound; weights
    that do not fit are never simulated, the simulator cannot run them). ``progress``:
    called with (runs done, runs expected); the expected count grows and shrinks as the
    searches narrow.
    """
    if spec.objective == "goodput":
        check_searchable(cfg)
    elif cfg.slo.ttft_s is None and cfg.slo.tpot_s is None:
        raise ConfigError("slo", "the plan needs an SLO: set slo.ttft_s and/or slo.tpot_s")
    if gpus < 1:
        raise ConfigError("gpus", "must be at least 1")
    cands = enumerate_candidates(cfg, spec, gpus)
    if not cands:
        raise ConfigError("gpus", f"no candidate uses exactly {gpus} GPUs (layouts of the "
                                  f"model need more, or do not divide the budget)")
    points = [PlanPoint(i, c) for i, c in enumerate(cands)]
    fits: dict[Any, str | None] = {}
    configs: dict[int, SimConfig] = {}
    for p in points:
        c, reason, lb = _prune(cfg, p.candidate, spec, fits, prune)
        p.tpot_lower_bound_s = lb
        if reason:
            p.status, p.reason = "pruned", reason
            continue
        assert c is not None
        configs[p.index] = c
        p.provenance = provenance(c)
    runner = _Runner(out_dir, backend, workers, address, force)
    baseline = _baseline(cfg, gpus)
    rounds = _search(cfg, spec, points, configs, runner, progress, baseline)
    feasible = [p for p in points if p.status == "feasible"]
    xy = [(p.tok_s_per_gpu, p.tok_s_per_user) for p in feasible]
    front_local = pareto_front(xy)
    best = choose(xy, front_local)
    front_local.sort(key=lambda i: (-xy[i][0], -xy[i][1], i))
    front = [feasible[i].index for i in front_local]
    for i in front_local:
        feasible[i].on_front = True
        feasible[i].ties = [feasible[j].index for j in front_local
                            if j != i and tied(xy[i], xy[j], VALIDATION_ERROR)]
    chosen = feasible[best].index if best is not None else None
    if chosen is not None:
        points[chosen].chosen = True
    return Plan(gpus=gpus, spec=spec, points=points, front=front, chosen=chosen,
                baseline=baseline, runs_simulated=runner.simulated,
                runs_cached=runner.cached, runs_shared=runner.shared, rounds=rounds)


def _baseline(cfg: SimConfig, gpus: int) -> PlanPoint | None:
    """The config's own deployment as a candidate-like point, when it uses ``gpus``."""
    if config_gpus(cfg) != gpus:
        return None
    cand = Candidate(mode=cfg.cluster.mode, num_speculative_tokens=(
        cfg.speculative.num_speculative_tokens if cfg.speculative.enabled else 0),
        router=cfg.router.policy)
    p = PlanPoint(-1, cand, name=f"the config as written ({cfg.name})", gpus_used=gpus)
    p.provenance = provenance(cfg)
    return p


def _search(cfg: SimConfig, spec: PlanSpec, points: list[PlanPoint],
            configs: dict[int, SimConfig], runner: _Runner, progress: ProgressFn | None,
            baseline: PlanPoint | None) -> int:
    goodput = spec.objective == "goodput"
    rate0 = float(getattr(cfg.workload.arrivals, "rate_per_s", 0.0) or 0.0)
    searches: dict[int, RateBisection] = {}
    asked: dict[int, float] = {}
    brackets: dict[int, tuple[float | None, float | None]] = {}
    last: dict[int, tuple[float, str, dict[str, Any]]] = {}
    # the baseline (index -1) runs the same search on the config as written
    base_cfg = {-1: cfg} if baseline is not None else {}
    all_cfgs = {**configs, **base_cfg}
    for k in all_cfgs:
        if goodput:
            searches[k] = bisect_rates(rate0, spec.tol)
            asked[k] = next(searches[k])
        else:
            asked[k] = rate0
        brackets[k] = (None, None)
    best: dict[int, tuple[float, str, dict[str, Any]]] = {}
    done = [0]

    def expected() -> int:
        if not goodput:
            return len(all_cfgs)
        return done[0] + sum(_remaining(*brackets[k], spec.tol) for k in asked)

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], max(done[0], expected()))

    if progress is not None:
        progress(0, expected())
    rounds = 0
    runs: dict[int, int] = {}
    while asked:
        rounds += 1
        trial = {k: (trial_config(all_cfgs[k], r, spec.min_requests) if goodput
                     else all_cfgs[k]) for k, r in asked.items()}
        results = runner.run(trial, tick)
        nxt: dict[int, float] = {}
        for k, r in asked.items():
            pid, fig = results[k]
            runs[k] = runs.get(k, 0) + 1
            met = bool(fig.get("slo_met"))
            last[k] = (r, pid, fig)
            lo, hi = brackets[k]
            brackets[k] = (r, hi) if met else (lo, r)
            if met:
                best[k] = (r, pid, fig)
            if not goodput:
                continue
            try:
                nxt[k] = searches[k].send(met)
            except StopIteration as stop:
                brackets[k] = stop.value
        asked = nxt
    for k in all_cfgs:
        p = baseline if k == -1 else points[k]
        assert p is not None
        p.runs = runs.get(k, 0)
        p.rate_per_s, p.failing_rate_per_s = brackets[k] if goodput else (
            (rate0, None) if k in best else (None, rate0))
        chosen = best.get(k)
        if chosen is None:
            p.status = "no_slo_rate"
            p.reason = "no rate tried meets the SLOs" if goodput else \
                "misses the SLOs at the config's rate"
            p.figures = dict(last[k][2])
            continue
        r, pid, fig = chosen
        p.status, p.figures, p.point_id = "feasible", dict(fig), pid
        p.config = trial_config(all_cfgs[k], r, spec.min_requests) if goodput else all_cfgs[k]
    return rounds


__all__ = ["Plan", "PlanPoint", "plan", "provenance"]
