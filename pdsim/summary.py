"""A run's summary as typed data: what ``pdsim.results.summarize`` derives from the facts.

``RunSummary`` holds the metrics in groups (latency statistics, speculative-decoding
counters, SLOs, per-instance utilisation). Its JSON form (``summary.json``'s ``summary``
object, ``pdsim run --json``) is ``as_dict()``: flat keys with units in their names, in a
fixed order. The summary is also a read-only ``Mapping`` over those keys, so code that reads
a summary back from ``summary.json`` (a plain dict) and code that holds a live one read it
the same way.

Every time is in seconds, every rate per second; NaN means "not defined for this run" (no
finished request, no drafts, ...) and becomes ``null`` in JSON.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The percentiles every latency statistic reports (``p50_ttft_s`` ...).
PERCENTILES: tuple[int, ...] = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Mean, standard deviation and percentiles of one latency metric, in seconds."""

    mean_s: float
    std_s: float
    p50_s: float
    p90_s: float
    p99_s: float

    def as_dict(self, metric: str) -> dict[str, float]:
        """``mean_<metric>``, ``std_<metric>``, ``p50_<metric>`` ... (``metric`` ends in _s)."""
        return {f"mean_{metric}": self.mean_s, f"std_{metric}": self.std_s,
                f"p50_{metric}": self.p50_s, f"p90_{metric}": self.p90_s,
                f"p99_{metric}": self.p99_s}


@dataclass(frozen=True, slots=True)
class SpecDecodeSummary:
    """vLLM's speculative-decoding counters and the rates derived from them.

    ``acceptance_rate`` = accepted / draft tokens; ``acceptance_length`` = 1 + accepted /
    drafts; ``per_position_acceptance_rates[i]`` = accepted at position i / drafts.
    """

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: tuple[int, ...]
    acceptance_rate: float
    acceptance_length: float
    per_position_acceptance_rates: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class SloSummary:
    """How the run met ``config.slo`` (present only when a TTFT or TPOT target is set).

    ``attainment``: share of all requests that finished within both targets;
    ``ttft_percentile_s`` / ``tpot_percentile_s``: the run's TTFT and TPOT at the SLO's
    percentile; ``met``: every request finished and both percentiles are within target.
    """

    attainment: float
    goodput_req_s: float
    ttft_percentile_s: float
    tpot_percentile_s: float
    met: bool


@dataclass(frozen=True, slots=True)
class InstanceSummary:
    """One instance over the run; means are time-weighted over the run's horizon."""

    role: str
    steps: int
    busy_fraction: float
    mean_kv_usage: float
    mean_running: float
    preemptions: int
    pool: str = ""
    """The instance's pool ('' for a role's one unnamed group: then left out of
    ``as_dict``)."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role}
        if self.pool:
            out["pool"] = self.pool
        out.update({"steps": self.steps, "busy_fraction": self.busy_fraction,
                    "mean_kv_usage": self.mean_kv_usage, "mean_running": self.mean_running,
                    "preemptions": self.preemptions})
        return out


@dataclass(frozen=True, slots=True)
class RunSummary(Mapping[str, Any]):
    """The run's metrics. See ``docs/outputs.md`` for the glossary of every key."""

    # requests
    num_requests: int
    completed: int
    failed: int
    rejected: int
    in_flight: int
    failure_reasons: dict[str, int]
    # totals and throughput (over the first arrival to the last finish)
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput_req_s: float
    output_throughput_tok_s: float
    total_token_throughput_tok_s: float
    # latency of finished requests (ITL over every gap between output chunks)
    ttft: LatencyStats
    tpot: LatencyStats
    e2e: LatencyStats
    itl: LatencyStats
    spec_decode: SpecDecodeSummary
    # KV transfer and the backoff's cost
    kv_bytes_transferred: int
    kv_transfer_time_s: float
    mean_kv_transfer_s: float
    tokens_recomputed_on_d: int
    d_local_prefill_tokens: int
    preemptions: int
    slo: SloSummary | None
    instances: dict[str, InstanceSummary]
    # facts of the cluster rather than of the records
    kv_lease_expired: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    prefix_cache_hit_rate: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        """The summary's JSON form: flat keys, in ``summary.json``'s order."""
        sd = self.spec_decode
        out: dict[str, Any] = {
            "num_requests": self.num_requests,
            "completed": self.completed,
            "failed": self.failed,
            "rejected": self.rejected,
            "in_flight": self.in_flight,
            "failure_reasons": dict(self.failure_reasons),
            "duration_s": self.duration_s,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput_req_s": self.request_throughput_req_s,
            "output_throughput_tok_s": self.output_throughput_tok_s,
            "total_token_throughput_tok_s": self.total_token_throughput_tok_s,
            **self.ttft.as_dict("ttft_s"),
            **self.tpot.as_dict("tpot_s"),
            **self.e2e.as_dict("e2e_s"),
            **self.itl.as_dict("itl_s"),
            "num_drafts": sd.num_drafts,
            "num_draft_tokens": sd.num_draft_tokens,
            "num_accepted_tokens": sd.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(sd.num_accepted_tokens_per_pos),
            "acceptance_rate": sd.acceptance_rate,
            "acceptance_length": sd.acceptance_length,
            "per_position_acceptance_rates": list(sd.per_position_acceptance_rates),
            "kv_bytes_transferred": self.kv_bytes_transferred,
            "kv_transfer_time_s": self.kv_transfer_time_s,
            "mean_kv_transfer_s": self.mean_kv_transfer_s,
            "tokens_recomputed_on_d": self.tokens_recomputed_on_d,
            "d_local_prefill_tokens": self.d_local_prefill_tokens,
            "preemptions": self.preemptions,
        }
        if self.slo is not None:
            out.update({
                "slo_attainment": self.slo.attainment,
                "goodput_req_s": self.slo.goodput_req_s,
                "slo_ttft_percentile_s": self.slo.ttft_percentile_s,
                "slo_tpot_percentile_s": self.slo.tpot_percentile_s,
                "slo_met": self.slo.met,
            })
        out["instances"] = {name: inst.as_dict() for name, inst in self.instances.items()}
        out["kv_lease_expired"] = self.kv_lease_expired
        out["faults"] = dict(self.faults)
        out["prefix_cache_hit_rate"] = self.prefix_cache_hit_rate
        return out

    # A read-only Mapping over ``as_dict()``'s keys.

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

    def items(self) -> ItemsView[str, Any]:
        return self.as_dict().items()


# ------------------------------------------------------------------ display units

#: Summary keys that are fractions: shown in %, and a change between two runs in points.
FRACTION_KEYS: frozenset[str] = frozenset({
    "acceptance_rate", "slo_attainment", "prefix_cache_hit_rate", "busy_fraction",
    "mean_kv_usage"})


@dataclass(frozen=True, slots=True)
class Display:
    """How a summary value is shown in a table: ``label`` (with its unit), the factor
    from the stored value (SI: seconds, bytes, fractions) to the shown one, and whether a
    change between two runs is in points (a fraction) rather than in percent."""

    label: str
    scale: float
    points: bool = False


def display(key: str) -> Display:
    """The one rule every table follows (the CLI's, the HTML report's): latencies of a
    request step (TTFT, TPOT, ITL, a KV transfer) in ms, other times in s, fractions in %,
    bytes in GB, rates per second as their unit says."""
    if key in FRACTION_KEYS or key.startswith("per_position_"):
        return Display(f"{key} (%)", 100.0, points=True)
    for suffix, unit in (("_req_s", "req/s"), ("_tok_s", "tok/s")):
        if key.endswith(suffix):
            return Display(f"{key.removesuffix(suffix)} ({unit})", 1.0)
    if key.endswith("_s"):
        short = any(m in key for m in ("ttft", "tpot", "itl", "mean_kv_transfer"))
        return Display(f"{key.removesuffix('_s')} ({'ms' if short else 's'})",
                       1e3 if short else 1.0)
    if key.endswith("bytes_transferred"):
        return Display(f"{key} (GB)", 1e-9)
    return Display(key, 1.0)


def format_change(key: str, before: Any, after: Any) -> str:
    """``after`` against ``before`` (stored values of summary key ``key``): ``+1.4 pt``
    for a fraction (``display(key).points``), ``+3.0%`` otherwise, ``-`` when either is
    missing or not finite, or a relative change has no base (before is 0)."""
    import math

    nums = [float(x) for x in (before, after)
            if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)]
    if len(nums) < 2:
        return "-"
    b, a = nums
    if display(key).points:
        return f"{(a - b) * 100.0:+.1f} pt"
    if b == 0:
        return "-"
    return f"{(a / b - 1) * 100:+.1f}%"
