"""The measured kernel timings the kernel laws are fitted to, and their predictions.

``pdsim/data/kernels/vidur_kernels.csv`` holds Microsoft Vidur's public kernel profiles
(fp16 GEMMs of the attention and MLP projections and NCCL all-reduces on A100 and H100;
source commit in the file's header). ``tools/fit_kernels.py`` fits ``KernelFit`` to
them; tests check the shipped fits still reproduce them.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from typing import NamedTuple

from pdsim.perf.hardware import HardwareSpec
from pdsim.perf.kernels import KernelFit, allreduce_time_s, gemm_time_s

FP16_BYTES = 2.0


class KernelRow(NamedTuple):
    """One measured kernel: a GEMM (m, n, k) or an all-reduce of ``nbytes`` over ``tp``
    GPUs."""

    hardware: str
    model: str
    tp: int
    tokens: int
    op: str
    kind: str
    m: int
    n: int
    k: int
    nbytes: int
    time_us: float


@lru_cache(maxsize=1)
def _all_rows() -> tuple[KernelRow, ...]:
    text = (resources.files("pdsim").joinpath("data").joinpath("kernels")
            .joinpath("vidur_kernels.csv").read_text(encoding="utf-8"))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return tuple(
        KernelRow(r["hardware"], r["model"], int(r["tp"]), int(r["tokens"]), r["op"],
                  r["kind"], int(r["m"]), int(r["n"]), int(r["k"]), int(r["bytes"]),
                  float(r["time_us"]))
        for r in csv.DictReader(lines))


def kernel_rows(hardware: str | None = None, kind: str | None = None) -> list[KernelRow]:
    """The measured rows, optionally of one hardware profile and one kind."""
    return [r for r in _all_rows()
            if (hardware is None or r.hardware == hardware) and (kind is None or r.kind == kind)]


def predict_us(row: KernelRow, hw: HardwareSpec, fit: KernelFit) -> float:
    """The kernel law's time for ``row`` on ``hw`` with ``fit``, in microseconds."""
    bw = hw.hbm_bandwidth_bytes_per_s
    if row.kind == "gemm":
        t = gemm_time_s(row.m, row.n, row.k, weight_bytes=FP16_BYTES, act_bytes=FP16_BYTES,
                        peak_flops=hw.peak_flops("bf16"), hbm_bytes_per_s=bw, fit=fit)
    else:
        t = allreduce_time_s(row.nbytes, row.tp,
                             link_bytes_per_s=hw.link_bandwidth_bytes_per_s(row.tp), fit=fit)
    return t * 1e6


def relative_errors(rows: Iterable[KernelRow], hw: HardwareSpec,
                    fit: KernelFit) -> list[float]:
    """(predicted - measured) / measured for each row."""
    return [predict_us(r, hw, fit) / r.time_us - 1.0 for r in rows]
