"""Token-length distributions: vectorized draws of n lengths from one generator."""

from __future__ import annotations

import numpy as np

from pdsim.workload.config import (
    EmpiricalLength,
    FixedLength,
    LengthDist,
    LognormalLength,
    NormalLength,
    UniformLength,
)


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token counts (int64, each >= 1) drawn from ``dist`` with ``rng``.

    The draws for ``n`` requests are a prefix of the draws for more, so lengthening a run
    keeps its first requests' lengths.
    """
    if isinstance(dist, FixedLength):
        return np.full(n, dist.tokens, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low_tokens, dist.high_tokens + 1, size=n, dtype=np.int64)
    if isinstance(dist, NormalLength):
        x = rng.normal(dist.mean_tokens, dist.sigma_tokens, size=n)
        return _round_clip(x, dist.max_tokens)
    if isinstance(dist, LognormalLength):
        x = rng.lognormal(dist.log_mu, dist.log_sigma, size=n)
        return _round_clip(x, dist.max_tokens)
    if isinstance(dist, EmpiricalLength):
        return _empirical(dist, n, rng)
    raise TypeError(f"unknown length distribution {type(dist).__name__}")


def _round_clip(x: np.ndarray, max_tokens: int | None) -> np.ndarray:
    hi = np.inf if max_tokens is None else float(max_tokens)
    out: np.ndarray = np.clip(np.rint(x), 1.0, hi).astype(np.int64)
    return out


def _empirical(dist: EmpiricalLength, n: int, rng: np.random.Generator) -> np.ndarray:
    p = np.asarray(dist.probabilities, dtype=np.float64)
    idx = rng.choice(len(p), size=n, p=p)
    if dist.values is not None:
        return np.asarray(dist.values, dtype=np.int64)[idx]
    assert dist.bin_edges is not None
    edges = np.asarray(dist.bin_edges, dtype=np.int64)
    # Bin i holds the integers edges[i] <= x < edges[i + 1].
    return rng.integers(edges[idx], edges[idx + 1], dtype=np.int64)
