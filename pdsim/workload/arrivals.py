"""Arrival processes: vectorized arrival times from one generator."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pdsim.workload.config import (
    Arrivals,
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
)


def arrival_times(arrivals: Arrivals, num_requests: int | None, duration_s: float | None,
                  rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds (float64, ascending) of an open-loop process.

    The process starts at 0 and the first request arrives one gap later. It stops after
    ``num_requests`` arrivals or at ``duration_s`` (arrivals at or before it are kept),
    whichever comes first; at least one of them must be given. For a closed loop, returns
    ``num_requests`` NaNs (the engine decides when each request starts).
    """
    if num_requests is None and duration_s is None:
        raise ValueError("give num_requests or duration_s (or both)")
    if isinstance(arrivals, ClosedLoopArrivals):
        if num_requests is None:
            raise ValueError("closed_loop arrivals need num_requests")
        return np.full(num_requests, np.nan, dtype=np.float64)
    if isinstance(arrivals, ConstantArrivals):
        return _constant(arrivals.rate_per_s, num_requests, duration_s)
    draw: Callable[[int], np.ndarray]
    if isinstance(arrivals, PoissonArrivals):
        scale = 1.0 / arrivals.rate_per_s

        def draw(k: int) -> np.ndarray:
            return rng.exponential(scale, size=k)
    elif isinstance(arrivals, GammaArrivals):
        shape = arrivals.shape
        theta = 1.0 / (arrivals.rate_per_s * shape)  # as vLLM: mean gap 1 / rate

        def draw(k: int) -> np.ndarray:
            return rng.gamma(shape, theta, size=k)
    else:
        raise TypeError(f"unknown arrival process {type(arrivals).__name__}")
    return _renewal(draw, 1.0 / arrivals.rate_per_s, num_requests, duration_s)


def _constant(rate_per_s: float, num_requests: int | None,
              duration_s: float | None) -> np.ndarray:
    if num_requests is None:
        assert duration_s is not None
        num_requests = int(np.floor(duration_s * rate_per_s)) + 1
    # Multiply rather than accumulate, so request i arrives at exactly (i + 1) / rate.
    t = np.arange(1, num_requests + 1, dtype=np.float64) / rate_per_s
    return _cut(t, duration_s)


def _renewal(draw: Callable[[int], np.ndarray], mean_gap_s: float, num_requests: int | None,
             duration_s: float | None, block: int | None = None) -> np.ndarray:
    if num_requests is not None:
        return _cut(np.cumsum(draw(num_requests)), duration_s)
    assert duration_s is not None
    # Draw in blocks until the horizon is passed; consecutive blocks continue one stream.
    if block is None:
        block = int(duration_s / mean_gap_s * 1.1) + 64
    chunks: list[np.ndarray] = []
    now_s = 0.0
    while now_s <= duration_s:
        t = now_s + np.cumsum(draw(block))
        chunks.append(t)
        now_s = float(t[-1])
    return _cut(np.concatenate(chunks), duration_s)


def _cut(t: np.ndarray, duration_s: float | None) -> np.ndarray:
    if duration_s is None:
        return t
    return t[: int(np.searchsorted(t, duration_s, side="right"))]
