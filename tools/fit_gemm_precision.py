"""Fit each GPU's per-precision GEMM efficiencies to AIConfigurator's measured GEMMs.

Usage: python tools/fit_gemm_precision.py

Reads ``pdsim/data/kernels/aic_gemm_kernels.csv`` (made by ``tools/extract_aic_kernels.py``:
prefill-sized GEMMs, m 1,024-16,384 tokens by n, k 1,024-16,384, measured by
AIConfigurator on H100, H200 and B200 under SGLang's, TensorRT-LLM's and vLLM's kernels)
and fits, per GPU and precision over all backends' rows, the fraction of that precision's
dense peak a GEMM reaches (``compute_efficiency`` for bf16, ``fp8_compute_efficiency``,
``fp4_compute_efficiency``) in the kernel law of ``pdsim.perf.kernels.gemm_time_s`` (the
GPU's own ``gemm_half_tokens``, ``memory_efficiency`` and ``kernel_latency_s`` held), least
squares on log time. The bf16 fit is printed as a check on the Vidur fit the profiles
carry; the fp8 and fp4 values are the profiles'. vLLM's block-scaled fp8 rows are left
out: at the smaller shapes they are 3-30x slower than SGLang's and TensorRT-LLM's (and
than vLLM's own per-tensor fp8), a fallback kernel rather than what its DeepSeek path runs.
"""

from __future__ import annotations

import collections
import csv
import math
from pathlib import Path

from fit_kernels import pattern_search

from pdsim.perf.kernels import gemm_time_s
from pdsim.perf.profiles import load_hardware

CSV = Path(__file__).resolve().parent.parent / "pdsim" / "data" / "kernels" / "aic_gemm_kernels.csv"
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625}
FIELD = {"bf16": "compute_efficiency", "fp8": "fp8_compute_efficiency",
         "fp4": "fp4_compute_efficiency"}


def load_rows() -> list[dict[str, str]]:
    with CSV.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return [r for r in rows if not (r["backend"] == "vllm" and r["gemm_dtype"] == "fp8_block")]


def predict_s(row: dict[str, str], eff: float) -> float:
    hw = load_hardware(row["hardware"])
    fit = hw.kernels
    assert fit is not None
    prec = row["precision"]
    return gemm_time_s(float(row["m"]), float(row["n"]), float(row["k"]),
                       weight_bytes=WEIGHT_BYTES[prec], act_bytes=2.0,
                       peak_flops=hw.peak_flops(prec),
                       hbm_bytes_per_s=hw.hbm_bandwidth_bytes_per_s,
                       fit=fit.model_copy(update={"compute_efficiency": eff}))


def fit(rows: list[dict[str, str]]) -> float:
    meas = [float(r["time_us"]) * 1e-6 for r in rows]

    def loss(x: list[float]) -> float:
        return sum(math.log(predict_s(r, x[0]) / m) ** 2
                   for r, m in zip(rows, meas, strict=True))

    return pattern_search(loss, [0.5], [0.05], [1.0])[0]


def _stats(rows: list[dict[str, str]], eff: float) -> str:
    errs = sorted(abs(predict_s(r, eff) / (float(r["time_us"]) * 1e-6) - 1) for r in rows)
    return f"median {errs[len(errs) // 2] * 100:4.1f}%, worst {errs[-1] * 100:5.1f}%"


def main() -> int:
    groups: dict[tuple[str, str], list[dict[str, str]]] = collections.defaultdict(list)
    for r in load_rows():
        groups[(r["hardware"], r["precision"])].append(r)
    for (hw, prec), rows in sorted(groups.items()):
        kernels = load_hardware(hw).kernels
        assert kernels is not None
        current = kernels.compute_efficiency
        eff = fit(rows)
        print(f"{hw} {prec}: {FIELD[prec]} = {eff:.3f} ({len(rows)} GEMMs; at "
              f"{current:.3f}: {_stats(rows, current)}; fitted: {_stats(rows, eff)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
