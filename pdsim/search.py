"""Capacity search: the highest request rate that meets the SLOs, and the best P:D split.

``max_rate_meeting_slo`` bisects ``workload.arrivals.rate_per_s``. A rate *meets the SLOs*
when its run's ``slo_met`` is true: every request finished and the config's
``slo.percentile`` of TTFT and of TPOT are within ``slo.ttft_s`` / ``slo.tpot_s``.

Run length matters. Above capacity the queue grows by about ``(1/mu - 1/lambda)`` seconds
per request, so a short overloaded run can still meet a TTFT target: with ``n`` requests a
rate ``lambda`` passes spuriously while ``0.9 n (1/mu - 1/lambda) < ttft_s``. Every trial
therefore runs at least ``min_requests`` requests (1000 by default: the found rate then
overshoots capacity by about ``ttft_s * mu / 900``, one to two percent for second-scale
TTFT targets); a config with more requests keeps its own count. Trials keep the config's
seed, so consecutive rates draw the same (rescaled) arrival gaps and the same lengths:
``slo_met`` is then close to monotone in the rate and bisection is sound.

``best_pd_split`` runs that search for every P:D split of a GPU budget (all instances
used, at least one of each) and ranks the splits by goodput per GPU at each split's own
highest SLO-meeting rate: the figure of merit for capacity planning is what a split can
sustain within the SLOs, not how it behaves at one arbitrary rate.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
from collections.abc import Callable, Generator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pdsim.config import Role, SimConfig
from pdsim.errors import ConfigError
from pdsim.loader import config_from_dict
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.summary import RunSummary
from pdsim.workload.config import ClosedLoopArrivals

DEFAULT_MIN_REQUESTS = 1000
DEFAULT_TOL = 0.02
MAX_BRACKET_STEPS = 16
MAX_TRIALS = 60


@dataclass(frozen=True)
class Trial:
    """One simulated rate: did it meet the SLOs, and the figures that decided it."""

    rate_per_s: float
    num_requests: int
    slo_met: bool
    slo_ttft_percentile_s: float
    slo_tpot_percentile_s: float
    slo_attainment: float
    goodput_req_s: float
    output_throughput_tok_s: float
    completed: int


@dataclass
class RateSearch:
    """The highest SLO-meeting rate found (None if even the lowest tried failed).

    ``failing_rate_per_s``: the lowest rate tried that failed (None if none failed);
    ``trials``: every rate simulated, in the order tried; ``summary``: the run at
    ``rate_per_s``.
    """

    rate_per_s: float | None
    failing_rate_per_s: float | None
    trials: list[Trial] = field(default_factory=list)
    summary: RunSummary | None = None


@dataclass(frozen=True)
class SplitResult:
    """One P:D split of the budget at its highest SLO-meeting rate."""

    prefill_count: int
    decode_count: int
    gpus: int
    rate_per_s: float | None
    goodput_req_s: float
    goodput_per_gpu: float
    output_throughput_tok_s: float
    slo_attainment: float
    num_trials: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ rate search


def check_searchable(cfg: SimConfig) -> None:
    """Raise ``ConfigError`` unless ``cfg`` has an SLO and an open-loop synthetic rate."""
    if cfg.slo.ttft_s is None and cfg.slo.tpot_s is None:
        raise ConfigError("slo", "the search needs an SLO: set slo.ttft_s and/or slo.tpot_s "
                                 "(and slo.percentile, 90 by default)")
    if cfg.workload.trace is not None:
        raise ConfigError("workload.trace", "the search varies workload.arrivals.rate_per_s; "
                                            "a trace replay brings its own arrival times")
    if isinstance(cfg.workload.arrivals, ClosedLoopArrivals):
        raise ConfigError("workload.arrivals", "closed_loop arrivals have no request rate to "
                                               "search; use poisson, gamma or constant")


def trial_config(cfg: SimConfig, rate_per_s: float,
                 min_requests: int = DEFAULT_MIN_REQUESTS) -> SimConfig:
    """``cfg`` at ``rate_per_s`` with at least ``min_requests`` requests (no duration cut).

    A config bounded by ``duration_s`` alone gets ``ceil(rate * duration_s)`` requests.
    """
    check_searchable(cfg)
    wl = cfg.workload
    n = wl.num_requests if wl.num_requests is not None else math.ceil(
        rate_per_s * (wl.duration_s or 0.0))
    data = cfg.model_dump(mode="json")
    data["workload"]["arrivals"]["rate_per_s"] = rate_per_s
    data["workload"]["num_requests"] = max(n, min_requests)
    data["workload"]["duration_s"] = None
    return config_from_dict(data)


def run_trial(cfg: SimConfig, rate_per_s: float,
              min_requests: int = DEFAULT_MIN_REQUESTS) -> tuple[Trial, RunSummary]:
    """Simulate ``cfg`` at ``rate_per_s``; the trial and the run's summary."""
    from pdsim.results import summary_only
    from pdsim.simulation import simulate

    tcfg = trial_config(cfg, rate_per_s, min_requests)
    s = simulate(summary_only(tcfg)).summary
    slo = s.slo
    assert slo is not None  # trial_config keeps cfg's SLO, which the search requires
    trial = Trial(rate_per_s=rate_per_s, num_requests=s.num_requests, slo_met=slo.met,
                  slo_ttft_percentile_s=slo.ttft_percentile_s,
                  slo_tpot_percentile_s=slo.tpot_percentile_s,
                  slo_attainment=slo.attainment, goodput_req_s=slo.goodput_req_s,
                  output_throughput_tok_s=s.output_throughput_tok_s,
                  completed=s.completed)
    return trial, s


def max_rate_meeting_slo(cfg: SimConfig, lo: float | None = None, hi: float | None = None,
                         tol: float = DEFAULT_TOL, min_requests: int = DEFAULT_MIN_REQUESTS,
                         on_trial: Callable[[Trial], None] | None = None) -> RateSearch:
    """The highest ``workload.arrivals.rate_per_s`` (req/s) whose run meets the SLOs.

    ``lo``/``hi``: a starting bracket (either may be omitted: the search starts at the
    config's rate and doubles or halves until the SLO result changes, at most
    ``MAX_BRACKET_STEPS`` times). Bisection stops when the bracket is within ``tol``
    (relative to its upper end). Raises ``ConfigError`` for a config without an SLO or
    without a rate (closed loop, trace replay).
    """
    check_searchable(cfg)
    if tol <= 0:
        raise ConfigError("tol", "must be positive")
    for name, v in (("lo", lo), ("hi", hi)):
        if v is not None and not v > 0:
            raise ConfigError(name, f"a rate must be positive (got {v})")
    if lo is not None and hi is not None and lo >= hi:
        raise ConfigError("lo", f"lo ({lo}) must be below hi ({hi})")
    tried: dict[float, tuple[Trial, RunSummary]] = {}
    order: list[Trial] = []

    def met(rate: float) -> bool:
        if rate not in tried:
            if len(order) >= MAX_TRIALS:
                raise ConfigError("tol", f"the search did not settle in {MAX_TRIALS} runs")
            tried[rate] = run_trial(cfg, rate, min_requests)
            order.append(tried[rate][0])
            if on_trial is not None:
                on_trial(tried[rate][0])
        return tried[rate][0].slo_met

    rate0 = float(cfg.workload.arrivals.rate_per_s)  # type: ignore[union-attr]
    search = bisect_rates(rate0, tol, lo, hi)
    verdict: bool | None = None
    try:
        while True:
            rate = search.send(verdict) if verdict is not None else next(search)
            verdict = met(rate)
    except StopIteration as stop:
        good, bad = stop.value
    return RateSearch(rate_per_s=good, failing_rate_per_s=bad, trials=order,
                      summary=tried[good][1] if good is not None else None)


RateBisection = Generator[float, bool, tuple[float | None, float | None]]


def bisect_rates(rate0: float, tol: float, lo: float | None = None,
                 hi: float | None = None) -> RateBisection:
    """The rate search as a generator: yields the next rate to try, is sent whether it met
    the SLOs, returns ``(highest meeting, lowest failing)`` (None where none was found).
    It tries ``lo`` and ``hi`` if given (a failing ``lo`` bounds the search), else
    ``rate0``; doubles until a rate fails or halves until one meets (at most
    ``MAX_BRACKET_STEPS`` each), then bisects to ``tol`` of the failing rate. The caller
    decides how to run each rate (``max_rate_meeting_slo`` one at a time, ``pdsim plan``
    many candidates' rates per round)."""
    good: float | None = None
    bad: float | None = None
    if lo is not None:
        good, bad = (lo, None) if (yield lo) else (None, lo)
    if hi is not None and bad is None:
        if (yield hi):
            good = hi
        else:
            bad = hi
    if good is None and bad is None:
        good, bad = (rate0, None) if (yield rate0) else (None, rate0)
    steps = 0
    while bad is None and steps < MAX_BRACKET_STEPS:  # grow until a rate fails
        assert good is not None
        r = good * 2.0
        steps += 1
        if (yield r):
            good = r
        else:
            bad = r
    steps = 0
    while good is None and steps < MAX_BRACKET_STEPS:  # shrink until a rate meets
        assert bad is not None
        r = bad / 2.0
        steps += 1
        if (yield r):
            good = r
        else:
            bad = r
    if good is not None and bad is not None:
        while bad - good > tol * bad:
            mid = (good + bad) / 2.0
            if (yield mid):
                good = mid
            else:
                bad = mid
    return good, bad


# ------------------------------------------------------------------ P:D split


def default_gpus_per_instance(cfg: SimConfig, role: Role | None = None) -> int:
    """GPUs one instance (of ``role``'s first pool, if given) occupies: its roofline step
    time's ``tensor_parallel_size``, else 1."""
    group = cfg.cluster.pools(role)[0].group if role is not None else None
    st = cfg.step_time_of(group)
    return st.tensor_parallel_size if isinstance(st, RooflineStepTimeConfig) else 1


def split_config(cfg: SimConfig, prefill_count: int, decode_count: int) -> SimConfig:
    """``cfg`` with ``prefill_count`` P and ``decode_count`` D instances, and its rate
    scaled by the change in instance count (the search's starting point)."""
    data = cfg.model_dump(mode="json")
    c = cfg.cluster
    old = c.count(Role.PREFILL) + c.count(Role.DECODE)
    for role, n in ((Role.PREFILL, prefill_count), (Role.DECODE, decode_count)):
        group = c.single(role, "a P:D split").model_dump(mode="json")
        data["cluster"][role.value] = {**group, "count": n}
    rate = data["workload"]["arrivals"]["rate_per_s"]
    data["workload"]["arrivals"]["rate_per_s"] = rate * (prefill_count + decode_count) / old
    return config_from_dict(data)


def _split_search(cfg_json: str, prefill_count: int, decode_count: int, gpus: int,
                  tol: float, min_requests: int) -> SplitResult:
    cfg = split_config(SimConfig.model_validate_json(cfg_json), prefill_count, decode_count)
    found = max_rate_meeting_slo(cfg, tol=tol, min_requests=min_requests)
    s: Mapping[str, Any] = found.summary or {}
    goodput = float(s.get("goodput_req_s", 0.0)) if found.rate_per_s is not None else 0.0
    return SplitResult(
        prefill_count=prefill_count, decode_count=decode_count, gpus=gpus,
        rate_per_s=found.rate_per_s, goodput_req_s=goodput, goodput_per_gpu=goodput / gpus,
        output_throughput_tok_s=float(s.get("output_throughput_tok_s", 0.0) or 0.0),
        slo_attainment=float(s.get("slo_attainment", 0.0) or 0.0),
        num_trials=len(found.trials))


def pd_splits(cfg: SimConfig, gpu_budget: int, gpus_per_instance: int | None = None
              ) -> tuple[int, int, list[tuple[int, int]]]:
    """GPUs per P and per D instance and the ``(P count, D count)`` splits
    ``best_pd_split`` searches; raises ``ConfigError`` naming the field when ``cfg`` or the
    budget allows none. Cheap: callers check it before any simulation runs."""
    check_searchable(cfg)
    if cfg.cluster.mode != "disaggregated":
        raise ConfigError("cluster.mode", "a P:D split needs a disaggregated cluster")
    c = cfg.cluster
    c.single(Role.PREFILL, "a P:D split")
    c.single(Role.DECODE, "a P:D split")
    if gpus_per_instance is not None:
        gp = gd = gpus_per_instance
    else:
        gp, gd = (default_gpus_per_instance(cfg, r) for r in (Role.PREFILL, Role.DECODE))
    if min(gp, gd) < 1:
        raise ConfigError("gpus_per_instance", "must be at least 1")
    # every split uses as many D as the GPUs P leaves hold
    splits = [(p, (gpu_budget - p * gp) // gd) for p in range(1, gpu_budget // gp + 1)]
    splits = [(p, d) for p, d in splits if d >= 1]
    if not splits:
        raise ConfigError("gpu_budget", f"{gpu_budget} GPUs cannot hold one P of {gp} and "
                                        f"one D of {gd} GPU(s); a P:D split needs both")
    return gp, gd, splits


def best_pd_split(cfg: SimConfig, gpu_budget: int, gpus_per_instance: int | None = None,
                  tol: float = DEFAULT_TOL, min_requests: int = DEFAULT_MIN_REQUESTS,
                  workers: int = 1, progress: Callable[[int, int], None] | None = None
                  ) -> list[SplitResult]:
    """Every P:D split of ``gpu_budget`` GPUs, best goodput per GPU first.

    Each split has p P instances and as many D as the rest of the budget holds (at least
    one of each); GPUs per instance: ``gpus_per_instance`` for both roles, by default each
    role's own (``default_gpus_per_instance``), so P and D on different parallelism split
    the budget by their own sizes. Each split is searched at its own highest SLO-meeting rate
    (``max_rate_meeting_slo``), its goodput divided by the GPUs it uses. Ties go to fewer
    prefill instances. ``workers`` > 1 searches splits in parallel processes.
    """
    gp, gd, splits = pd_splits(cfg, gpu_budget, gpus_per_instance)
    cfg_json = cfg.model_dump_json()
    jobs = [(cfg_json, p, d, p * gp + d * gd, tol, min_requests) for p, d in splits]
    results: list[SplitResult] = []
    if progress is not None:
        progress(0, len(jobs))
    if workers <= 1 or len(jobs) == 1:
        for job in jobs:
            results.append(_split_search(*job))
            if progress is not None:
                progress(len(results), len(jobs))
    else:
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as ex:
            for fut in cf.as_completed([ex.submit(_split_search, *job) for job in jobs]):
                results.append(fut.result())
                if progress is not None:
                    progress(len(results), len(jobs))
    return sorted(results, key=lambda r: (-r.goodput_per_gpu, r.prefill_count))


__all__ = [
    "RateSearch", "SplitResult", "Trial", "best_pd_split", "check_searchable",
    "default_gpus_per_instance", "max_rate_meeting_slo", "pd_splits", "run_trial",
    "split_config",
    "trial_config",
]
