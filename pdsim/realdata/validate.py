"""Sim-to-real validation: replay a ``vllm bench serve`` result in pdsim and compare.

The result's requests (prompt and output lengths, in order) are replayed under the same
traffic (``bench_result_to_requests``): recorded send times when the result has
``start_times``, else vLLM's arrival process drawn from the ``arrivals`` stream of the
config's seed, or a closed loop at the recorded ``max_concurrency``. Both sides are then
measured with the same code: the simulated run is written as a bench result
(``bench_synthesis.run_bench_result``) and both go through ``summary_metrics``, so TTFT, TPOT,
ITL and E2E (mean, p50, p90, p99; ms), throughputs and acceptance share vLLM's
definitions, percentile interpolation included.

Relative error is ``(simulated - real) / |real|``; it is NaN when the real value is 0 or
unknown, or when the simulation has no value (e.g. no speculative decoding configured).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pdsim.errors import InputFileError
from pdsim.realdata.bench_metrics import summary_metrics
from pdsim.realdata.bench_replay import bench_result_to_requests
from pdsim.realdata.bench_result import BenchResult, bench_result_from_dict
from pdsim.realdata.bench_synthesis import run_bench_result
from pdsim.rng import RandomStreams

if TYPE_CHECKING:
    from pdsim.config import SimConfig
    from pdsim.results import Results
    from pdsim.workload.base import RequestSpecs

ReplayMode = Literal["auto", "rate", "concurrency"]

_LATENCY_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}
_STAT_LABELS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}

LATENCY_METRICS: tuple[str, ...] = tuple(
    f"{stat}_{m}_ms" for m in _LATENCY_LABELS for stat in _STAT_LABELS)
THROUGHPUT_METRICS: tuple[str, ...] = ("output_throughput", "request_throughput", "completed")
ACCEPTANCE_METRICS: tuple[str, ...] = ("acceptance_length", "acceptance_rate")


def metric_label(key: str) -> str:
    """How a metric key reads in a table: ``mean_ttft_ms`` -> ``TTFT mean (ms)``."""
    fixed = {
        "output_throughput": "output throughput (tok/s)",
        "request_throughput": "request throughput (req/s)",
        "completed": "completed requests",
        "acceptance_length": "acceptance length",
        "acceptance_rate": "acceptance rate (%)",
    }
    if key in fixed:
        return fixed[key]
    if key.startswith("acceptance_rate_pos"):
        return f"per-position rate {key.removeprefix('acceptance_rate_pos')} (%)"
    parts = key.split("_")
    if len(parts) == 3 and parts[2] == "ms" and parts[1] in _LATENCY_LABELS:
        return f"{_LATENCY_LABELS[parts[1]]} {_STAT_LABELS.get(parts[0], parts[0])} (ms)"
    return key


def relative_error(simulated: float, real: float) -> float:
    """``(simulated - real) / |real|``; NaN when either is unknown or the real value is 0."""
    if not (math.isfinite(simulated) and math.isfinite(real)) or real == 0:
        return math.nan
    return (simulated - real) / abs(real)


@dataclass(frozen=True)
class MetricRow:
    """One metric, real vs simulated, in the units its label states."""

    key: str
    real: float
    simulated: float

    @property
    def label(self) -> str:
        return metric_label(self.key)

    @property
    def rel_error(self) -> float:
        return relative_error(self.simulated, self.real)


@dataclass(frozen=True)
class ValidationReport:
    """A config replayed against one result: a row per metric, and notes on the replay.

    ``replay`` says how arrivals were made (``recorded``, ``poisson``/``gamma``/...
    drawn, ``closed loop``); ``simulation`` holds pdsim's full ``Results``.
    """

    source: str
    config_name: str
    mode: str
    replay: str
    num_requests: int
    rows: tuple[MetricRow, ...]
    notes: tuple[str, ...] = ()
    simulation: Results | None = field(default=None, repr=False, compare=False)

    def row(self, key: str) -> MetricRow:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    def checked(self, metrics: Iterable[str] | None = None) -> list[MetricRow]:
        """The rows ``metrics`` names (all rows when None); unknown names raise KeyError."""
        if metrics is None:
            return list(self.rows)
        return [self.row(k) for k in metrics]

    def failures(self, tolerance: float, metrics: Iterable[str] | None = None
                 ) -> list[MetricRow]:
        """Checked rows whose |relative error| exceeds ``tolerance`` (NaN errors never do)."""
        return [r for r in self.checked(metrics)
                if math.isfinite(r.rel_error) and abs(r.rel_error) > tolerance]

    def max_abs_error(self, metrics: Iterable[str] | None = None) -> float:
        """Largest finite |relative error| over the checked rows (NaN if none is finite)."""
        errs = [abs(r.rel_error) for r in self.checked(metrics) if math.isfinite(r.rel_error)]
        return max(errs) if errs else math.nan

    def rms_error(self, metrics: Iterable[str] | None = None) -> float:
        """Root mean square of the finite relative errors over the checked rows."""
        errs = [r.rel_error for r in self.checked(metrics) if math.isfinite(r.rel_error)]
        return math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "config": self.config_name, "mode": self.mode,
            "replay": self.replay, "num_requests": self.num_requests,
            "notes": list(self.notes),
            "rows": [{"metric": r.key, "label": r.label, "real": r.real,
                      "simulated": r.simulated, "rel_error": r.rel_error} for r in self.rows],
        }


# --------------------------------------------------------------------------- metrics


def _acceptance_metrics(length: float, rate: float, per_pos: Sequence[float]
                        ) -> dict[str, float]:
    out = {"acceptance_length": float(length), "acceptance_rate": float(rate) * 100.0}
    for i, r in enumerate(per_pos):
        out[f"acceptance_rate_pos{i}"] = float(r) * 100.0
    return out


def real_metrics(result: BenchResult) -> dict[str, float]:
    """A result's metrics by vLLM's definitions: ``summary_metrics`` (p90, p99), plus
    acceptance (length; rate and per-position rates in %) when it has spec-decode counts."""
    out = summary_metrics(result, percentiles=(90, 99))
    spec = result.spec_decode
    if spec is not None:
        out.update(_acceptance_metrics(spec.acceptance_length, spec.acceptance_rate,
                                       spec.per_position_rates))
    return out


def simulated_metrics(res: Results) -> dict[str, float]:
    """A pdsim run's metrics computed exactly as ``real_metrics`` computes a result's."""
    doc = run_bench_result(res)
    if not doc:  # nothing finished: no duration to divide by
        out = {k: math.nan for k in (*LATENCY_METRICS, *THROUGHPUT_METRICS)}
        out["completed"] = 0.0
    else:
        out = summary_metrics(bench_result_from_dict(doc, "<pdsim>"), percentiles=(90, 99))
    s = res.summary
    if s["num_drafts"]:
        out.update(_acceptance_metrics(s["acceptance_length"], s["acceptance_rate"],
                                       s["per_position_acceptance_rates"]))
    return out


def _rows(real: dict[str, float], sim: dict[str, float], acceptance: bool
          ) -> tuple[MetricRow, ...]:
    keys = [*LATENCY_METRICS, *THROUGHPUT_METRICS]
    if acceptance:
        n = sum(1 for k in real if k.startswith("acceptance_rate_pos"))
        keys += [*ACCEPTANCE_METRICS, *(f"acceptance_rate_pos{i}" for i in range(n))]
    return tuple(MetricRow(k, real.get(k, math.nan), sim.get(k, math.nan)) for k in keys)


# --------------------------------------------------------------------------- replay


def trim_result(result: BenchResult, max_requests: int) -> BenchResult:
    """The first ``max_requests`` requests of a result (submission order) as a result.

    Totals and ``duration_s`` are recomputed over the kept requests (from the first send
    to the last finish, which needs ``start_times`` and ``latencies``); spec-decode
    counts are whole-run figures and stay as they are. Under an open loop the kept
    requests see less load near the end than they did in the full run (later arrivals
    are gone), so a trimmed replay is an approximation.
    """
    if max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests}")
    n = result.num_requests
    if n is None:
        raise InputFileError(result.source, None, "no per-request data: rerun vllm bench "
                                                  "serve with --save-detailed")
    if n <= max_requests:
        return result
    if result.start_times_s is None or result.latencies_s is None:
        raise InputFileError(result.source, None, "cannot replay only part of this result: "
                                                  "it lacks start_times or latencies")
    k = max_requests
    ok = result.succeeded
    assert ok is not None and result.input_lens is not None and result.output_lens is not None
    keep = ok[:k]
    starts = result.start_times_s[:k]
    ends = starts + np.where(keep, result.latencies_s[:k], 0.0)
    duration = float(ends.max() - starts.min())
    if not duration > 0:
        raise InputFileError(result.source, None, "the first requests span no time")
    n_in = int(result.input_lens[:k][keep].sum())
    n_out = int(result.output_lens[:k][keep].sum())
    done = int(keep.sum())

    def cut(a: Any) -> Any:
        return None if a is None else a[:k]

    return replace(
        result, source=f"{result.source}[:{k}]", duration_s=duration, completed=done,
        failed=k - done, total_input_tokens=n_in, total_output_tokens=n_out,
        request_throughput=done / duration, output_throughput=n_out / duration,
        total_token_throughput=(n_in + n_out) / duration, num_prompts=k,
        latency_stats_ms={}, input_lens=cut(result.input_lens),
        output_lens=cut(result.output_lens), ttfts_s=cut(result.ttfts_s),
        itls_s=cut(result.itls_s), latencies_s=cut(result.latencies_s),
        start_times_s=cut(result.start_times_s), queue_times_s=cut(result.queue_times_s),
        errors=cut(result.errors))


def replay_requests(cfg: SimConfig, result: BenchResult, mode: ReplayMode = "auto"
                    ) -> RequestSpecs:
    """The result's requests as pdsim ``RequestSpecs``; drawn arrivals come from the
    ``arrivals`` stream of ``cfg.seed`` (so a replay is reproducible)."""
    rng = RandomStreams(cfg.seed).fresh("arrivals")
    return bench_result_to_requests(result, mode=mode, rng=rng)


def _notes(cfg: SimConfig, result: BenchResult, specs: RequestSpecs) -> list[str]:
    notes = []
    dropped = specs.origin.dropped_failed
    if dropped:
        notes.append(f"{dropped} failed request(s) of the result are not replayed")
    kind = specs.origin.arrivals
    if kind not in ("recorded", "closed loop"):
        notes.append(f"the result has no start_times: arrivals drawn ({kind}) from seed "
                     f"{cfg.seed}, not the recorded ones")
    spec = result.spec_decode
    n_cfg = cfg.speculative.num_speculative_tokens
    if spec is not None and not cfg.speculative.enabled:
        notes.append("the result has spec-decode counts but the config drafts nothing")
    elif spec is not None and spec.num_speculative_tokens not in (None, n_cfg):
        notes.append(f"the result drafted {spec.num_speculative_tokens} tokens per step; "
                     f"the config drafts {n_cfg}")
    elif spec is None and cfg.speculative.enabled:
        notes.append("the result has no spec-decode counts: acceptance not compared")
    return notes


def validate(cfg: SimConfig, result: BenchResult, mode: ReplayMode = "auto",
             seed: int | None = None, requests: RequestSpecs | None = None
             ) -> ValidationReport:
    """Simulate ``result``'s workload under ``cfg`` and compare the metrics.

    ``seed`` replaces the config's seed (acceptance draws, drawn arrivals). ``requests``
    skips the replay step (pass the specs ``replay_requests`` made, e.g. to reuse them).
    Raises ``InputFileError`` when the result cannot be replayed (no ``--save-detailed``
    data, no successful request).
    """
    from pdsim.simulation import simulate

    if seed is not None:
        cfg = cfg.model_copy(update={"seed": seed})
    specs = requests if requests is not None else replay_requests(cfg, result, mode)
    res = simulate(cfg, specs)
    real = real_metrics(result)
    sim = simulated_metrics(res)
    return ValidationReport(
        source=result.source, config_name=cfg.name, mode=specs.origin.replay_mode or mode,
        replay=specs.origin.arrivals, num_requests=len(specs),
        rows=_rows(real, sim, result.spec_decode is not None),
        notes=tuple(_notes(cfg, result, specs)), simulation=res)


__all__ = [
    "ACCEPTANCE_METRICS",
    "LATENCY_METRICS",
    "THROUGHPUT_METRICS",
    "MetricRow",
    "ValidationReport",
    "metric_label",
    "real_metrics",
    "relative_error",
    "replay_requests",
    "simulated_metrics",
    "trim_result",
    "validate",
]
