"""Rich tables for the terminal: a run's summary and a before/after comparison."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rich.table import Table

from pdsim.compare import Comparison
from pdsim.summary import format_change


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if abs(v) >= 1e5:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    return str(v)


def _times(v: Any, scale: float) -> Any:
    """``v * scale``; None (a value not defined for the run, as summary.json writes NaN)
    stays None."""
    return None if v is None else v * scale


def summary_table(summary: Mapping[str, Any], title: str = "pdsim summary") -> Table:
    """The headline metrics of one run (a live summary, or summary.json's read back)."""
    t = Table(title=title, show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("mean", justify="right")
    t.add_column("p50", justify="right")
    t.add_column("p90", justify="right")
    t.add_column("p99", justify="right")
    for key, label in (("ttft_s", "TTFT (ms)"), ("tpot_s", "TPOT (ms)"),
                       ("itl_s", "ITL (ms)"), ("e2e_s", "E2E (s)")):
        scale = 1.0 if key == "e2e_s" else 1e3
        t.add_row(label, *(_fmt(_times(summary[f"{s}_{key}"], scale))
                           for s in ("mean", "p50", "p90", "p99")))
    t2 = Table(show_header=False, box=None)
    t2.add_column("k")
    t2.add_column("v", justify="right")
    rows = [
        ("requests (finished / failed / rejected)",
         f"{summary['completed']} / {summary['failed']} / {summary['rejected']}"),
        ("duration (s)", _fmt(summary["duration_s"])),
        ("request throughput (req/s)", _fmt(summary["request_throughput_req_s"], 3)),
        ("output throughput (tok/s)", _fmt(summary["output_throughput_tok_s"], 1)),
        ("acceptance length", _fmt(summary["acceptance_length"], 3)),
        ("acceptance rate (%)", _fmt(summary["acceptance_rate"] * 100
                                     if summary["num_draft_tokens"] else None, 2)),
        ("per-position rates (%)", " ".join(f"{r * 100:.1f}"
                                            for r in summary["per_position_acceptance_rates"])
         or "-"),
        ("KV transferred (GB)", _fmt(summary["kv_bytes_transferred"] / 1e9, 3)),
        ("mean KV transfer (ms)", _fmt(_times(summary["mean_kv_transfer_s"], 1e3))),
        ("tokens recomputed on D (backoff)", str(summary["tokens_recomputed_on_d"])),
        ("preemptions", str(summary["preemptions"])),
    ]
    hit_rate = summary.get("prefix_cache_hit_rate")
    if hit_rate is not None and _finite(hit_rate):  # NaN: no instance caches prefixes
        rows.append(("prefix cache hit rate (%)", _fmt(hit_rate * 100, 1)))
    if "slo_attainment" in summary:
        rows.append(("SLO attainment (%)", _fmt(summary["slo_attainment"] * 100, 1)))
        rows.append(("goodput (req/s)", _fmt(summary["goodput_req_s"], 3)))
    if summary.get("failure_reasons"):
        rows.append(("failure reasons", ", ".join(f"{k}: {v}" for k, v in
                                                  summary["failure_reasons"].items())))
    for k, v in rows:
        t2.add_row(k, v)
    outer = Table.grid()
    outer.add_row(t)
    outer.add_row(t2)
    pools = pool_table(summary.get("instances") or {})
    if pools is not None:
        outer.add_row(pools)
    return outer


def pool_table(instances: Mapping[str, Mapping[str, Any]]) -> Table | None:
    """Per pool (``cluster.<role>`` given as a list or named): its instances and their
    mean busy fraction, KV usage and running requests. None when no instance has a pool."""
    by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for inst in instances.values():
        if inst.get("pool"):
            by_pool.setdefault((inst["role"], inst["pool"]), []).append(inst)
    if not by_pool:
        return None
    t = Table(title="pools (means over their instances)", header_style="bold")
    for col in ("pool", "role", "instances", "busy (%)", "KV usage (%)", "running"):
        t.add_column(col, justify="left" if col in ("pool", "role") else "right")
    for (role, pool), members in by_pool.items():
        def mean(key: str, members: list[Mapping[str, Any]] = members) -> float:
            return sum(float(m[key]) for m in members) / len(members)
        t.add_row(pool, role, str(len(members)), _fmt(mean("busy_fraction") * 100, 1),
                  _fmt(mean("mean_kv_usage") * 100, 2), _fmt(mean("mean_running"), 2))
    return t


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def comparison_table(cmp: Comparison, title: str = "P/D before vs after the fix") -> Table:
    """Side-by-side metrics of the variants, plus the after/before change."""
    names = list(cmp.variants)
    t = Table(title=title, header_style="bold")
    t.add_column("metric")
    for n in names:
        t.add_column(n.replace("_", " "), justify="right")
    has_pair = "pd_before_fix" in names and "pd_after_fix" in names
    if has_pair:
        t.add_column("after vs before", justify="right")
    for row in cmp.table():
        cells = [_fmt(row[n]) for n in names]
        if has_pair:  # from the stored values, by the rule the HTML report follows
            key = row["key"]
            b, a = (cmp.variants[n].summary.get(key) if key in cmp.variants[n].summary
                    else row[n] / 100.0 if _finite(row[n]) else None
                    for n in ("pd_before_fix", "pd_after_fix"))
            cells.append(format_change(key, b, a))
        t.add_row(row["metric"], *cells)
    return t
