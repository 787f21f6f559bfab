"""Fit each GPU's ``moe_pair_s`` to AIConfigurator's measured MoE layers.

Usage: python tools/fit_moe_kernels.py [--min-tokens N] [--by-backend]

Reads ``pdsim/data/kernels/aic_moe_kernels.csv`` (made by ``tools/extract_aic_kernels.py``:
one DeepSeek-V3 MoE layer, measured by AIConfigurator on H100, H200 and B200 under
SGLang's, TensorRT-LLM's and vLLM's kernels). For every row it prices the same layer with
pdsim's roofline (``deepseek-v3`` on the row's GPU, its expert dtype, experts sliced over
``moe_tp`` GPUs or sharded over ``moe_ep``) and fits, per GPU and over all three backends'
rows of at least ``--min-tokens`` tokens (default 1024: prefill-sized batches, where the
layer's fixed costs are small beside its work), the one ``moe_pair_s`` that minimises the
squared log error. Prints the value for each hardware profile's ``kernels`` section and
the median and worst |error| before (``moe_pair_s`` 0) and after, by backend and dtype.
``--by-backend`` fits one value per GPU and backend instead (each engine's own kernels).

``--fp8-decode`` fits each GPU's ``fp8_moe_efficiency`` per backend and backend version
instead: ``pdsim/data/kernels/aic_moe_decode_kernels.csv`` (block-scaled fp8 MoE layers of
DeepSeek-V3, Kimi-K2.5, Qwen3-235B-A22B and MiniMax-M2.5 at 64-512 tokens, experts sliced
over 1-8 GPUs, balanced routing) against pdsim's price of the same layer (the model profile
with balanced routing, the backend's kernel rule, the layer's kernels' fixed latencies
included), the factor on the experts' weight-read bandwidth minimising the squared log
error, at most 1.
"""

from __future__ import annotations

import argparse
import collections
import csv
import functools
import math
from pathlib import Path

from fit_kernels import pattern_search

from pdsim.perf.architecture import ModelArchitecture
from pdsim.perf.base import StepBatch
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.perf.hardware import HardwareSpec
from pdsim.perf.profiles import load_hardware, load_model_architecture
from pdsim.perf.roofline import FFN_KERNELS, RooflineStepTime
from pdsim.perf.routing import ExpertRouting

CSV = Path(__file__).resolve().parent.parent / "pdsim" / "data" / "kernels" / "aic_moe_kernels.csv"
DECODE_CSV = CSV.with_name("aic_moe_decode_kernels.csv")
MODEL = "deepseek-v3"


TOTAL_TOKEN_EP_BACKENDS = ("trtllm",)
"""Backends whose expert-parallel rows time ``tokens`` in all (every GPU holding every
token, as pdsim's EP = TP layout): TensorRT-LLM's reach about half of the fp8 peak there.
SGLang's and vLLM's expert-parallel rows are 3-9x slower at the same count, as if each of
the EP ranks brought ``tokens`` (their DP-attention collectors), so they are left out."""


def load_rows(min_tokens: int) -> list[dict[str, str]]:
    with CSV.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return [r for r in rows if int(r["tokens"]) >= min_tokens
            and (r["moe_ep"] == "1" or r["backend"] in TOTAL_TOKEN_EP_BACKENDS)]


@functools.cache
def _roomy(name: str) -> HardwareSpec:
    """The hardware profile with room for the whole model: an MoE layer's time does not
    read the capacity, and DeepSeek-V3 fp8 on 4 or 8 H100s would fail the weights check."""
    return load_hardware(name).model_copy(update={"hbm_capacity_gib": 1e4})


def moe_layer_s(row: dict[str, str], pair_s: float) -> float:
    """pdsim's seconds for the row's MoE layer: the step with the MoE terms less the step
    without, over the model's MoE layers."""
    tp = int(row["moe_tp"]) * int(row["moe_ep"])
    cfg = RooflineStepTimeConfig.model_validate({
        "kind": "roofline", "model": MODEL, "hardware": _roomy(row["hardware"]),
        "tensor_parallel_size": tp, "expert_parallel_size": int(row["moe_ep"]),
        "weight_dtype": row["expert_dtype"], "expert_weight_dtype": row["expert_dtype"],
        "moe_pair_s": pair_s})
    n = int(row["tokens"])
    return moe_terms_s(RooflineStepTime(cfg), StepBatch(n, n * (n + 1) / 2, 0, 0, 0))


def moe_terms_s(st: RooflineStepTime, batch: StepBatch) -> float:
    """Seconds of one MoE layer's terms in ``st``'s step over ``batch``: the step with the
    MoE terms less the step without, over the model's MoE layers."""
    full = st.step_time_s(batch)
    moe, st._target.moe = st._target.moe, ()
    bare = st.step_time_s(batch)
    st._target.moe = moe
    layers = sum(b.num_layers for b in st.arch.blocks if hasattr(b.ffn, "num_experts"))
    return (full - bare) / layers


def fit(rows: list[dict[str, str]]) -> float:
    """The pair cost minimising the squared log error (``fit_kernels.pattern_search``)."""
    meas = [float(r["time_us"]) * 1e-6 for r in rows]

    def loss(x: list[float]) -> float:
        return sum(math.log(moe_layer_s(r, x[0]) / m) ** 2
                   for r, m in zip(rows, meas, strict=True))

    return pattern_search(loss, [1e-8], [1e-10], [1e-6])[0]


def _errors(rows: list[dict[str, str]], c: float) -> list[float]:
    return [abs(moe_layer_s(r, c) / (float(r["time_us"]) * 1e-6) - 1) for r in rows]


def _stats(errs: list[float]) -> str:
    s = sorted(errs)
    return f"median {s[len(s) // 2] * 100:5.1f}%, worst {s[-1] * 100:6.1f}%"


@functools.cache
def _balanced(model: str) -> ModelArchitecture:
    """The model profile with balanced routing, as the decode tables were timed."""
    return load_model_architecture(model, "model").model_copy(
        update={"routing": ExpertRouting(load_cv=0.0)})


@functools.cache
def _decode_model(model: str, hardware: str, tp: int, backend: str,
                  eff: float) -> tuple[RooflineStepTime, float]:
    cfg = RooflineStepTimeConfig.model_validate({
        "kind": "roofline", "model": _balanced(model), "hardware": _roomy(hardware),
        "tensor_parallel_size": tp, "weight_dtype": "fp8", "expert_weight_dtype": "fp8",
        "kernel_rule": backend, "fp8_moe_efficiency": eff})
    return RooflineStepTime(cfg), cfg.kernel_latency_s


def decode_layer_s(row: dict[str, str], eff: float) -> float:
    """pdsim's seconds for a decode-table row's MoE layer at ``fp8_moe_efficiency`` eff:
    the MoE terms of a decode step of ``tokens`` requests plus the layer's kernels'
    latencies."""
    st, latency = _decode_model(row["model"], row["hardware"], int(row["moe_tp"]),
                                row["backend"], eff)
    n = int(row["tokens"])
    return moe_terms_s(st, StepBatch(0, 0.0, n, n, n)) + FFN_KERNELS["moe"] * latency


DecodeFit = tuple[float, list[float], list[float], float, float]


def fp8_decode_fits() -> dict[tuple[str, str, str], DecodeFit]:
    """Per (GPU, backend, version) of the decode table: (fitted fp8_moe_efficiency, |error|
    of each layer at 1, at the fit, the squared log error at 1, at the fit)."""
    with DECODE_CSV.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = collections.defaultdict(list)
    for r in rows:
        groups[(r["hardware"], r["backend"], r["version"])].append(r)
    out = {}
    for (hw, backend, version), g in sorted(groups.items()):
        meas = [float(r["time_us"]) * 1e-6 for r in g]

        def loss(x: list[float], g: list[dict[str, str]] = g,
                 meas: list[float] = meas) -> float:
            eff = min(1.0, max(0.05, round(x[0], 2)))
            return sum(math.log(decode_layer_s(r, eff) / m) ** 2
                       for r, m in zip(g, meas, strict=True))

        eff = min(1.0, round(pattern_search(loss, [0.8], [0.05], [1.0])[0], 2))

        def errs(e: float, g: list[dict[str, str]] = g,
                 meas: list[float] = meas) -> list[float]:
            return [abs(decode_layer_s(r, e) / m - 1) for r, m in zip(g, meas, strict=True)]

        out[(hw, backend, version)] = (eff, errs(1.0), errs(eff), loss([1.0]), loss([eff]))
    return out


def fit_fp8_decode() -> int:
    """Print each GPU's fp8_moe_efficiency per backend and version (``--fp8-decode``)."""
    for (hw, backend, version), (eff, before, after, _, _) in fp8_decode_fits().items():
        print(f"{hw} {backend} {version}: fp8_moe_efficiency = {eff:.2f} ({len(before)} "
              f"layers; before {_stats(before)}; after {_stats(after)})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-tokens", type=int, default=1024)
    ap.add_argument("--by-backend", action="store_true",
                    help="fit one value per GPU and backend")
    ap.add_argument("--fp8-decode", action="store_true",
                    help="fit fp8_moe_efficiency per GPU, backend and version")
    args = ap.parse_args()
    if args.fp8_decode:
        return fit_fp8_decode()
    by_hw: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for r in load_rows(args.min_tokens):
        by_hw[r["hardware"]].append(r)
    if args.by_backend:
        for hw, rows in sorted(by_hw.items()):
            by_backend: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
            for r in rows:
                by_backend[r["backend"]].append(r)
            for backend, g in sorted(by_backend.items()):
                c = fit(g)
                print(f"{hw} {backend}: moe_pair_s = {c:.3g} s ({len(g)} layers; before "
                      f"{_stats(_errors(g, 0.0))}; after {_stats(_errors(g, c))})")
        return 0
    for hw, rows in sorted(by_hw.items()):
        c = fit(rows)
        print(f"{hw}: moe_pair_s = {c:.3g} s ({len(rows)} layers of >= {args.min_tokens} "
              f"tokens; before {_stats(_errors(rows, 0.0))}; after {_stats(_errors(rows, c))})")
        groups: dict[tuple[str, str], list[dict[str, str]]] = collections.defaultdict(list)
        for r in rows:
            groups[(r["backend"], r["moe_dtype"])].append(r)
        for (backend, dtype), g in sorted(groups.items()):
            print(f"    {backend:7s} {dtype:10s} {len(g):3d} rows: before "
                  f"{_stats(_errors(g, 0.0))}; after {_stats(_errors(g, c))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
