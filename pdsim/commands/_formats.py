"""How the real-vs-simulated tables of ``pdsim validate`` and ``pdsim calibrate`` show
numbers."""

from __future__ import annotations

import math


def format_value(key: str, value: float) -> str:
    """A metric value in its display unit (ms latencies, tok/s, counts, %)."""
    if not math.isfinite(value):
        return "-"
    if key == "completed":
        return f"{value:.0f}"
    if key == "acceptance_length":
        return f"{value:.3f}"
    if key == "request_throughput":
        return f"{value:.3f}"
    return f"{value:.2f}" if abs(value) < 1e5 else f"{value:,.0f}"


def format_error(err: float) -> str:
    """A relative error as a signed percentage ("-" when undefined)."""
    if not math.isfinite(err):
        return "-"
    pct = round(err * 100, 2)
    return "0.00%" if pct == 0 else f"{pct:+.2f}%"  # float noise is no sign
