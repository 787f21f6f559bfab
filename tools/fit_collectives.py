"""Fit the collective constants of ``pdsim.perf.collectives`` (DeepEP low-latency
dispatch and combine) and of ``pdsim.perf.kernels`` (the custom all-reduce) to the
published kernel timings in ``pdsim.perf.collective_data`` (their sources are there), and
print the fitted values and their errors. Least squares on log time, by coarse-to-fine
grid search (numpy only).

Run: ``python tools/fit_collectives.py`` (about 20 s).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pdsim.perf import collective_data as D


def grid_min(f: Callable[[np.ndarray], float], ranges: Sequence[tuple[float, float]],
             rounds: int = 4, n_points: int = 25) -> np.ndarray:
    """Minimise ``f`` over a box by repeated grid refinement."""
    lo = np.array([r[0] for r in ranges], dtype=float)
    hi = np.array([r[1] for r in ranges], dtype=float)
    best: tuple[float, np.ndarray] | None = None
    for _ in range(rounds):
        axes = [np.linspace(a, b, n_points) for a, b in zip(lo, hi, strict=True)]
        for p in itertools.product(*axes):
            v = f(np.array(p))
            if best is None or v < best[0]:
                best = (v, np.array(p))
        assert best is not None
        step = (hi - lo) / (n_points - 1)
        lo = np.maximum(lo, best[1] - 2 * step)
        hi = best[1] + 2 * step
    assert best is not None
    return best[1]


def _loss(errors: np.ndarray) -> float:
    return float(np.sum(np.log1p(errors) ** 2))


def fit_custom_allreduce() -> None:
    p = grid_min(lambda p: _loss(D.custom_allreduce_errors(p[0] * 1e-6, p[1])),
                 [(1.0, 10.0), (0.02, 0.6)])
    err = np.abs(D.custom_allreduce_errors(p[0] * 1e-6, p[1]))
    print(f"custom all-reduce (H100, {err.size} timings): custom_allreduce_latency_s "
          f"{p[0]:.3g} us, custom_allreduce_efficiency {p[1]:.3g}; error median "
          f"{np.median(err):.1%}, worst {err.max():.1%}")


def fit_deepep() -> None:
    p = grid_min(lambda p: _loss(D.deepep_errors(p[0] * 1e-6, p[1] * 1e-6, p[2], p[3])),
                 [(0.0, 80.0), (0.0, 80.0), (0.2, 1.0), (0.3, 1.0)], rounds=6, n_points=11)
    err = np.abs(D.deepep_errors(p[0] * 1e-6, p[1] * 1e-6, p[2], p[3]))
    print(f"DeepEP low-latency (H800, {err.size} timings): dispatch fixed {p[0]:.3g} us, "
          f"combine fixed {p[1]:.3g} us, NVLink efficiency {p[2]:.3g} of the nominal "
          f"200 GB/s ({p[2] * D.H800_NVLINK_NOMINAL_BYTES_PER_S / 160e9:.3g} of the measured "
          f"160), RDMA efficiency {p[3]:.3g}; error median {np.median(err):.1%}, worst "
          f"{err.max():.1%}")


if __name__ == "__main__":
    fit_custom_allreduce()
    fit_deepep()
