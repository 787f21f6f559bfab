"""Calibration: fit config parameters so pdsim reproduces measured benchmark results.

The fit replays each result's requests (``replay_requests``, made once) and searches the
chosen parameters (dotted config paths, each searched as ``log(value / start)`` within
bounds) with ``scipy.optimize`` to minimise the sum of squared relative errors of chosen
metrics over all results. Every simulation uses the config's seed: common random numbers
make the objective a deterministic, piecewise-smooth function of the parameters (event
order only changes where a step boundary crosses an arrival), which a derivative-free
simplex or finite differences on a coarse step (``diff_step``, default 2 % in log space)
handle. The number of simulations is bounded by ``max_evals`` (each evaluation simulates
every fitted result once); when the budget runs out the best point seen is kept.

Default parameters:

- step time ``simple``: ``per_token_s`` (prefill-dominated, so TTFT), ``weights_floor_s``
  and ``overhead_s`` (decode steps, so TPOT and ITL; the two are nearly collinear on
  decode-only instances, the fit then splits their sum arbitrarily);
- step time ``roofline``: ``compute_efficiency``, ``attention_efficiency``,
  ``memory_efficiency``, ``moe_efficiency`` (and ``communication_efficiency`` with
  tensor or expert parallelism);
- with both P/D results (``results``, the config is disaggregated) and standalone results
  (``standalone``, the same instances colocated), also
  ``speculative.stale_kv.sensitivity_per_slot`` and ``residual_guess_accuracy``, fitted
  together with the acceptance figures: standalone serving has no stale MTP KV, so its
  acceptance pins the clean rates and the P/D gap is what the stale-KV model explains.

The ``measured`` step-time model has no default parameters (pass ``params``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pdsim.config import Role
from pdsim.errors import ConfigError, PdsimError
from pdsim.loader import config_from_dict
from pdsim.realdata.bench_result import BenchResult
from pdsim.realdata.calibration_params import (
    ROOFLINE_PARAMS,
    SIMPLE_PARAMS,
    STALE_KV_PARAMS,
    ParameterFit,
    check_root_step_time,
    default_bounds,
    default_params,
    resolve_params,
    with_values,
)
from pdsim.realdata.validate import (
    ReplayMode,
    ValidationReport,
    real_metrics,
    replay_requests,
    simulated_metrics,
    trim_result,
    validate,
)

if TYPE_CHECKING:
    from pdsim.config import SimConfig
    from pdsim.workload.base import RequestSpecs

Method = Literal["auto", "least_squares", "nelder_mead"]

TIMING_FIT_METRICS: tuple[str, ...] = (
    "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms",
    "mean_e2el_ms", "output_throughput")
ACCEPTANCE_FIT_METRICS: tuple[str, ...] = ("acceptance_length", "acceptance_rate")
_FAILED_RESIDUAL = 10.0  # a metric the simulation could not produce (nothing finished)


# --------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class Dataset:
    """A result to fit or check, the deployment it ran on, and its replayed requests."""

    result: BenchResult
    deployment: Literal["config", "standalone"]
    requests: RequestSpecs
    real: dict[str, float]


def standalone_variant(cfg: SimConfig) -> SimConfig:
    """The config's instances serving colocated (as ``pdsim compare --colocated`` runs):
    as many instances as P and D together, each configured like a decode instance."""
    if cfg.cluster.mode == "colocated":
        return cfg
    data = cfg.model_dump(mode="json")
    c = cfg.cluster
    co = c.single(Role.DECODE, "the standalone variant").model_dump(mode="json")
    co["count"] = c.count(Role.PREFILL) + c.count(Role.DECODE)
    data["cluster"]["mode"] = "colocated"
    data["cluster"]["colocated"] = co
    return config_from_dict(data)


@dataclass(frozen=True)
class DatasetErrors:
    """Error of one result under the initial and the calibrated config."""

    source: str
    role: Literal["fit", "held-out"]
    deployment: Literal["config", "standalone"]
    before: ValidationReport
    after: ValidationReport


@dataclass(frozen=True)
class CalibrationReport:
    """What ``calibrate`` did: parameters before and after, errors before and after.

    ``config`` is the calibrated config; ``metrics`` the metrics the objective used;
    ``evaluations`` the objective evaluations (each one simulation per fitted result);
    ``message`` why the optimiser stopped.
    """

    config: SimConfig
    initial_config: SimConfig
    parameters: tuple[ParameterFit, ...]
    metrics: tuple[str, ...]
    method: str
    evaluations: int
    max_evals: int
    message: str
    initial_cost: float
    final_cost: float
    datasets: tuple[DatasetErrors, ...] = field(default=())

    def fit_rms(self, when: Literal["before", "after"], role: str = "fit") -> float:
        """RMS relative error over the objective metrics of the datasets with ``role``."""
        errs: list[float] = []
        for d in self.datasets:
            if d.role != role:
                continue
            rep = d.before if when == "before" else d.after
            errs += [r.rel_error for r in rep.rows
                     if r.key in self.metrics and math.isfinite(r.rel_error)]
        return math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method, "evaluations": self.evaluations,
            "max_evals": self.max_evals, "message": self.message,
            "initial_cost": self.initial_cost, "final_cost": self.final_cost,
            "metrics": list(self.metrics),
            "parameters": [{"path": p.path, "initial": p.initial, "fitted": p.fitted,
                            "lower": p.lower, "upper": p.upper} for p in self.parameters],
            "datasets": [{"source": d.source, "role": d.role, "deployment": d.deployment,
                          "before": d.before.to_dict(), "after": d.after.to_dict()}
                         for d in self.datasets],
        }


# --------------------------------------------------------------------------- fitting


class _BudgetExhausted(Exception):
    """Raised inside the objective once ``max_evals`` simulations have run."""


class _Objective:
    """Residuals of a parameter vector (log of value / start), cached, budgeted, and
    remembering the best point evaluated."""

    def __init__(self, cfg: SimConfig, standalone: SimConfig | None,
                 params: list[tuple[str, float, float, float]],
                 datasets: list[Dataset], metrics: Sequence[str], max_evals: int) -> None:
        self.cfg = cfg
        self.standalone = standalone
        self.params = params
        self.datasets = datasets
        self.max_evals = max_evals
        self.evals = 0
        self.cache: dict[tuple[float, ...], np.ndarray] = {}
        self.best: tuple[float, np.ndarray] | None = None
        # (dataset index, metric, real value): only metrics the result has a value for
        self.terms = [(i, m, d.real[m]) for i, d in enumerate(datasets) for m in metrics
                      if math.isfinite(d.real.get(m, math.nan)) and d.real[m] != 0]
        if not self.terms:
            raise ConfigError("", f"none of the metrics {', '.join(metrics)} has a nonzero "
                                  "value in the results: nothing to fit")

    def values(self, z: np.ndarray) -> dict[str, float]:
        return {path: start * math.exp(float(zi))
                for (path, start, _, _), zi in zip(self.params, z, strict=True)}

    def configs(self, z: np.ndarray) -> tuple[SimConfig, SimConfig | None]:
        values = self.values(z)
        st = None if self.standalone is None else with_values(self.standalone, values)
        return with_values(self.cfg, values), st

    def residuals(self, z: np.ndarray) -> np.ndarray:
        from pdsim.simulation import simulate

        key = tuple(np.round(np.asarray(z, dtype=np.float64), 12))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        if self.evals >= self.max_evals:
            raise _BudgetExhausted
        self.evals += 1
        cfg, st = self.configs(np.asarray(z))
        sims: dict[int, dict[str, float]] = {}
        for i, d in enumerate(self.datasets):
            run_cfg = cfg if d.deployment == "config" else st
            assert run_cfg is not None
            sims[i] = simulated_metrics(simulate(run_cfg, d.requests))
        res = np.array([(sims[i].get(m, math.nan) - real) / abs(real)
                        for i, m, real in self.terms])
        res = np.where(np.isfinite(res), res, _FAILED_RESIDUAL)
        self.cache[key] = res
        cost = float(res @ res)
        if self.best is None or cost < self.best[0]:
            self.best = (cost, np.array(z, dtype=np.float64))
        return res

    def cost(self, z: np.ndarray) -> float:
        r = self.residuals(z)
        return float(r @ r)

    def jacobian(self, z: np.ndarray, step: float, upper: np.ndarray) -> np.ndarray:
        """Forward differences with an absolute step in log space (``step`` = 0.02 is a
        2 % change of the value), stepping inward at an upper bound. scipy's own steps
        are relative to ``z``, which starts at 0 here, and so far too small to see past
        the simulation's discrete event order."""
        z = np.asarray(z, dtype=np.float64)
        r0 = self.residuals(z)
        jac = np.empty((len(r0), len(z)))
        for i in range(len(z)):
            h = step if z[i] + step <= upper[i] else -step
            zi = z.copy()
            zi[i] += h
            jac[:, i] = (self.residuals(zi) - r0) / h
        return jac


def require_scipy() -> None:
    """The optimisers are scipy's, an optional dependency (the ``calibrate`` extra);
    ``PdsimError`` naming the extra when it is not installed."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise PdsimError("calibrate needs scipy, which the core install leaves out: "
                         "pip install 'pdsim[calibrate]'") from None


def _optimise(obj: _Objective, lower: np.ndarray, upper: np.ndarray, method: Method,
              diff_step: float, simplex_step: float) -> str:
    from scipy.optimize import least_squares, minimize

    n = len(lower)
    # strictly inside the bounds: least_squares needs it, and a start on a bound (an
    # efficiency of 1.0) can then still move inward
    z0 = np.clip(np.zeros(n), lower + 1e-9, upper - 1e-9)
    try:
        if method == "least_squares":
            sol = least_squares(obj.residuals, z0,
                                jac=lambda z: obj.jacobian(z, diff_step, upper),
                                bounds=(lower, upper), method="trf", x_scale=1.0,
                                xtol=1e-3, ftol=1e-4, max_nfev=obj.max_evals)
            return str(sol.message)
        if method == "nelder_mead":
            # each vertex moves one parameter, inward when the step would leave the range
            steps = np.where(z0 + simplex_step <= upper, simplex_step, -simplex_step)
            simplex = np.vstack([z0, z0 + np.diag(steps)])
            simplex = np.clip(simplex, lower, upper)
            sol = minimize(obj.cost, z0, method="Nelder-Mead",
                           bounds=list(zip(lower, upper, strict=True)),
                           options={"initial_simplex": simplex, "maxfev": obj.max_evals,
                                    "xatol": 1e-3, "fatol": 1e-8})
            return str(sol.message)
    except _BudgetExhausted:
        return f"stopped after max_evals = {obj.max_evals} evaluations (best point kept)"
    raise ValueError(f"method must be 'least_squares' or 'nelder_mead', not {method!r}")


def calibrate(
    cfg: SimConfig,
    results: Sequence[BenchResult],
    params: Sequence[str] | None = None,
    *,
    standalone: Sequence[BenchResult] = (),
    held_out: Sequence[BenchResult] = (),
    standalone_config: SimConfig | None = None,
    metrics: Sequence[str] | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    mode: ReplayMode = "auto",
    max_requests: int | None = None,
    max_evals: int = 60,
    method: Method = "auto",
    diff_step: float = 0.02,
    simplex_step: float = 0.25,
    seed: int | None = None,
) -> CalibrationReport:
    """Fit ``params`` of ``cfg`` to ``results`` (run on the deployment ``cfg`` describes)
    and ``standalone`` results (the same instances colocated, or ``standalone_config``).

    ``params``: dotted config paths (default ``default_params``; the stale-KV parameters
    join when both kinds of result are given). ``metrics``: metric keys of
    ``real_metrics`` to fit (default the timing metrics ``TIMING_FIT_METRICS``, plus
    ``ACCEPTANCE_FIT_METRICS`` and the per-position rates when a ``speculative.*``
    parameter is fitted). ``bounds``: per-path (lower, upper), overriding
    ``default_bounds``. ``max_requests`` replays only the first requests of each result
    (``trim_result``). ``max_evals`` bounds the objective evaluations. ``held_out``
    results are never fitted; they are reported before and after, as are the fitted ones.
    ``method``: ``least_squares`` (scipy's trf on the residuals, forward differences of
    ``diff_step`` in log space: few evaluations on the step-time factors, whose effect
    is smooth), ``nelder_mead`` (simplex of ``simplex_step`` in log space: slower but
    robust where the objective is rugged, as acceptance-driven parameters make it: one
    changed acceptance draw reshuffles every later one), or ``auto``: Nelder-Mead when
    a ``speculative.*`` parameter is fitted, else least squares. Least squares may not
    move a parameter whose effect is flat at its start (a roofline efficiency of a
    resource that is not the bottleneck there); Nelder-Mead steps past such stretches.

    The fit never writes files; ``report.config`` is the calibrated config.
    """
    if not results and not standalone:
        raise ValueError("calibrate needs at least one result")
    if max_evals < 1:
        raise ValueError(f"max_evals must be >= 1, got {max_evals}")
    require_scipy()
    if seed is not None:
        cfg = cfg.model_copy(update={"seed": seed})
        if standalone_config is not None:
            standalone_config = standalone_config.model_copy(update={"seed": seed})
    st_cfg: SimConfig | None = None
    if standalone:
        st_cfg = standalone_config or standalone_variant(cfg)
    stale_default = bool(results and standalone and cfg.cluster.mode == "disaggregated"
                         and cfg.speculative.enabled and cfg.use_multi_module_mtp)
    check_root_step_time(cfg)
    param_list = tuple(params) if params else default_params(cfg, stale_default)
    resolved = resolve_params(cfg, param_list, bounds or {})
    fits_spec = any(p.startswith("speculative.") for p in param_list)
    if method == "auto":
        method = "nelder_mead" if fits_spec else "least_squares"

    def dataset(r: BenchResult, where: Literal["config", "standalone"]) -> Dataset:
        if max_requests is not None:
            r = trim_result(r, max_requests)
        run_cfg = cfg if where == "config" else st_cfg
        assert run_cfg is not None
        return Dataset(r, where, replay_requests(run_cfg, r, mode), real_metrics(r))

    fit_sets = ([dataset(r, "config") for r in results]
                + [dataset(r, "standalone") for r in standalone])
    check_sets = [dataset(r, "config") for r in held_out]
    if metrics is None:
        chosen = list(TIMING_FIT_METRICS)
        if fits_spec:
            chosen += ACCEPTANCE_FIT_METRICS
            n_pos = max((sum(1 for k in d.real if k.startswith("acceptance_rate_pos"))
                         for d in fit_sets), default=0)
            chosen += [f"acceptance_rate_pos{i}" for i in range(n_pos)]
        metrics = tuple(chosen)
    metrics = tuple(metrics)

    obj = _Objective(cfg, st_cfg, resolved, fit_sets, metrics, max_evals)
    lower = np.array([math.log(lo / start) for _, start, lo, _ in resolved])
    upper = np.array([math.log(hi / start) for _, start, _, hi in resolved])
    z_start = np.zeros(len(resolved))
    initial_cost = obj.cost(z_start)
    message = _optimise(obj, lower, upper, method, diff_step, simplex_step)
    assert obj.best is not None
    final_cost, z_best = obj.best
    fitted = obj.values(z_best)
    new_cfg, new_st = obj.configs(z_best)
    start_cfg = with_values(cfg, obj.values(z_start))
    start_st = None if st_cfg is None else with_values(st_cfg, obj.values(z_start))

    errors = []
    for role, sets in (("fit", fit_sets), ("held-out", check_sets)):
        for d in sets:
            c0, c1 = (start_cfg, new_cfg) if d.deployment == "config" else (start_st, new_st)
            assert c0 is not None and c1 is not None
            errors.append(DatasetErrors(
                d.result.source, role, d.deployment,  # type: ignore[arg-type]
                validate(c0, d.result, requests=d.requests),
                validate(c1, d.result, requests=d.requests)))
    return CalibrationReport(
        config=new_cfg, initial_config=cfg,
        parameters=tuple(ParameterFit(path, start, fitted[path], lo, hi)
                         for path, start, lo, hi in resolved),
        metrics=metrics, method=method, evaluations=obj.evals, max_evals=max_evals,
        message=message, initial_cost=initial_cost, final_cost=final_cost,
        datasets=tuple(errors))


__all__ = [
    "ACCEPTANCE_FIT_METRICS",
    "ROOFLINE_PARAMS",
    "SIMPLE_PARAMS",
    "STALE_KV_PARAMS",
    "TIMING_FIT_METRICS",
    "CalibrationReport",
    "DatasetErrors",
    "ParameterFit",
    "calibrate",
    "default_bounds",
    "default_params",
    "standalone_variant",
    "with_values",
]
