"""Run rows through pdsim's public API and compare with the published figures."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pdsim
from validation.rows import Kind, Role, Row

# pdsim's figure for a row is one of these, read from a run's summary. Names carry units.
_METRICS: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "tpot_ms": lambda s: s["mean_tpot_s"] * 1e3,
    "tokens_per_s_per_user": lambda s: 1.0 / s["mean_tpot_s"],
    "ttft_ms": lambda s: s["mean_ttft_s"] * 1e3,
    "output_throughput_tok_s": lambda s: s["output_throughput_tok_s"],
    "input_throughput_tok_s": lambda s: s["total_input_tokens"] / s["duration_s"],
    "kv_transfer_ms": lambda s: s["mean_kv_transfer_s"] * 1e3,
    "kv_transfer_mb": lambda s: s["kv_bytes_transferred"] / s["completed"] / 1e6,
    "kv_effective_gb_per_s": lambda s: s["kv_bytes_transferred"] / s["kv_transfer_time_s"] / 1e9,
    "acceptance_length": lambda s: s["acceptance_length"],
}

METRIC_NAMES = tuple(_METRICS)

EXPLAIN_ABOVE_PCT = 30.0


def metric(name: str, summary: Mapping[str, Any]) -> float:
    """A named figure from a run summary (``ValueError`` for an unknown name)."""
    try:
        fn = _METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(_METRICS)}") from None
    return float(fn(summary))


@dataclass(frozen=True)
class RowResult:
    """pdsim's figure for a row against the published one."""

    row: Row
    pdsim_value: float
    run_values: dict[str, float]
    elapsed_s: float

    @property
    def published(self) -> float:
        return self.row.published.value

    @property
    def error_pct(self) -> float:
        """Signed relative error of pdsim's figure, in percent of the published one."""
        return (self.pdsim_value - self.published) / self.published * 100.0

    @property
    def passed(self) -> bool:
        return math.isfinite(self.error_pct) and abs(self.error_pct) <= self.row.tolerance_pct

    @property
    def needs_explanation(self) -> bool:
        """Rows more than 30% off must say why in their file."""
        return not (abs(self.error_pct) <= EXPLAIN_ABOVE_PCT)


RunCache = dict[str, Mapping[str, Any]]


def _summary(row: Row, run: str, cache: RunCache | None) -> Mapping[str, Any]:
    key = json.dumps([row.config, row.runs[run]], sort_keys=True)
    if cache is not None and key in cache:
        return cache[key]
    cfg = pdsim.load_config(row.config, overrides=row.runs[run])
    summary = pdsim.simulate(cfg).summary
    if cache is not None:
        cache[key] = summary
    return summary


def run_row(row: Row, cache: RunCache | None = None) -> RowResult:
    """Simulate every run the row's measure needs and read pdsim's figure.

    ``cache`` (keyed by config and overrides) lets rows that share a run simulate it once.
    """
    start = time.perf_counter()
    values: dict[str, float] = {}
    for name in row.measure.runs:
        values[name] = metric(row.measure.metric, _summary(row, name, cache))
    if row.measure.ratio is not None:
        num, den = row.measure.ratio
        value = values[num] / values[den]
    else:
        value = values[row.measure.runs[0]]
    return RowResult(row, value, values, time.perf_counter() - start)


def run_rows(rows: Iterable[Row]) -> list[RowResult]:
    """Every row, simulating each distinct run once."""
    cache: RunCache = {}
    return [run_row(r, cache) for r in rows]


@dataclass(frozen=True)
class GroupStats:
    """Median and worst |error| over a group of rows."""

    label: str
    count: int
    passed: int
    median_abs_error_pct: float
    worst_abs_error_pct: float
    worst_row: str


@dataclass(frozen=True)
class Summary:
    groups: list[GroupStats] = field(default_factory=list)


def _stats(label: str, results: list[RowResult]) -> GroupStats:
    if not results:
        return GroupStats(label, 0, 0, math.nan, math.nan, "-")
    errs = [abs(r.error_pct) for r in results]
    worst = max(results, key=lambda r: (abs(r.error_pct), r.row.id))
    return GroupStats(label, len(results), sum(r.passed for r in results),
                      statistics.median(errs), max(errs), worst.row.id)


def summarize(results: list[RowResult]) -> Summary:
    """Median and worst |error| by role and kind, and for every role x kind pair."""
    groups: list[GroupStats] = []
    for role in Role:
        for kind in Kind:
            sel = [r for r in results if r.row.role is role and r.row.kind is kind]
            groups.append(_stats(f"{role.value}, {kind.value}", sel))
        groups.append(_stats(f"{role.value}, all", [r for r in results if r.row.role is role]))
    for kind in Kind:
        groups.append(_stats(f"all, {kind.value}", [r for r in results if r.row.kind is kind]))
    groups.append(_stats("all rows", results))
    return Summary(groups)
