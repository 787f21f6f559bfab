"""Fit the kernel cost laws of ``pdsim.perf.kernels`` to Vidur's kernel timings.

Usage: python tools/fit_kernels.py [HARDWARE ...]   (default: every hardware in the CSV)

Reads ``pdsim/data/kernels/vidur_kernels.csv`` (made by ``tools/extract_vidur_kernels.py``)
and, per hardware, fits by least squares on log(time):
- GEMM rows: ``compute_efficiency``, ``gemm_half_tokens``, ``memory_efficiency``,
  ``kernel_latency_s``;
- all-reduce rows: ``collective_latency_s``, ``communication_efficiency``.
Prints the values for the hardware profile's ``kernels`` section and the fit error
(median and worst |relative error|) per row kind.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence

from pdsim.perf.kernel_data import kernel_rows, predict_us, relative_errors
from pdsim.perf.kernels import KernelFit
from pdsim.perf.profiles import load_hardware


def pattern_search(loss: Callable[[list[float]], float], x0: list[float],
                    lo: Sequence[float], hi: Sequence[float]) -> list[float]:
    """Coordinate search in log space with a shrinking step: deterministic and enough for
    a handful of smooth parameters."""
    x, best = list(x0), loss(x0)
    step = 0.5
    while step > 1e-4:
        improved = False
        for i in range(len(x)):
            for sign in (1.0, -1.0):
                y = list(x)
                y[i] = min(hi[i], max(lo[i], x[i] * math.exp(sign * step)))
                val = loss(y)
                if val < best:
                    x, best, improved = y, val, True
        if not improved:
            step /= 2.0
    return x


def _fit(hw_name: str) -> KernelFit:
    hw = load_hardware(hw_name, "hardware")
    gemm = kernel_rows(hw_name, "gemm")
    coll = kernel_rows(hw_name, "collective")

    def fit_of(x: Sequence[float]) -> KernelFit:
        return KernelFit(compute_efficiency=min(1.0, x[0]), gemm_half_tokens=x[1],
                         memory_efficiency=min(1.0, x[2]), kernel_latency_s=x[3] * 1e-6,
                         collective_latency_s=x[4] * 1e-6,
                         communication_efficiency=min(1.0, x[5]))

    def log_loss(rows: object, x: Sequence[float]) -> float:
        f = fit_of(x)
        return sum(math.log(predict_us(r, hw, f) / r.time_us) ** 2
                   for r in rows)  # type: ignore[attr-defined]

    x = [0.7, 64.0, 0.85, 5.0, 20.0, 0.7]
    lo = [0.05, 0.0, 0.05, 0.0, 0.0, 0.05]
    hi = [1.0, 4096.0, 1.0, 100.0, 200.0, 1.0]
    g = pattern_search(lambda y: log_loss(gemm, [*y, *x[4:]]), x[:4], lo[:4], hi[:4])
    c = pattern_search(lambda y: log_loss(coll, [*g, *y]), x[4:], lo[4:], hi[4:])
    return fit_of([*g, *c])


def main(names: Sequence[str]) -> None:
    hardware = names or sorted({r.hardware for r in kernel_rows()})
    for name in hardware:
        fit = _fit(name)
        print(f"{name}:")
        print(f"  compute_efficiency: {fit.compute_efficiency:.3f}")
        print(f"  gemm_half_tokens: {fit.gemm_half_tokens:.1f}")
        print(f"  memory_efficiency: {fit.memory_efficiency:.3f}")
        print(f"  kernel_latency_s: {fit.kernel_latency_s:.3g}")
        print(f"  collective_latency_s: {fit.collective_latency_s:.3g}")
        print(f"  communication_efficiency: {fit.communication_efficiency:.3f}")
        hw = load_hardware(name, "hardware")
        for kind in ("gemm", "collective"):
            errs = sorted(abs(e) for e in relative_errors(kernel_rows(name, kind), hw, fit))
            print(f"  # {kind}: {len(errs)} rows, median |error| {errs[len(errs) // 2]:.1%}, "
                  f"worst {errs[-1]:.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
