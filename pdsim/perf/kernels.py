"""Kernel-level cost laws the roofline is built from, fitted per hardware to measured data.

Each law prices one kernel from its shape; its constants are a hardware profile's
``kernels`` section (``KernelFit``), fitted by ``tools/fit_kernels.py`` to the kernel
timings in ``pdsim/data/kernels/vidur_kernels.csv`` (Microsoft Vidur's public profiling
data). See docs/step-time.md for the fitted values and their errors.

- GEMM of ``m`` tokens by an ``n x k`` weight:
  ``latency + max(2 n k (m + half_tokens) / (peak x compute_eff),
  (n k w + m (n + k) a) / (bandwidth x memory_eff))``. The compute term is the roofline
  at an efficiency ``compute_eff x m / (m + half_tokens)`` that rises with the tokens per
  GEMM (tile and wave quantisation of thin GEMMs), bounded by ``compute_eff``.
- elementwise kernel (norms, activations, residual adds) moving ``b`` bytes:
  ``latency + b / (bandwidth x memory_eff)``.
- all-reduce of ``b`` bytes over ``g`` GPUs (ring):
  ``collective_latency + b x 2 (g - 1) / g / (link x communication_eff)`` for NCCL, and
  the same law with ``custom_allreduce_latency_s`` / ``custom_allreduce_efficiency`` for
  the peer-memory all-reduce engines run on small messages inside one node (the step
  pays the lesser; ``pdsim.perf.collectives``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from pdsim._model import StrictModel

Efficiency = Annotated[float, Field(gt=0, le=1)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]

KernelEngine = Literal["trtllm", "sglang", "vllm"]
"""A serving engine whose own kernels a hardware profile may have a fit for."""
KernelRule = Literal["pdsim", "trtllm", "sglang", "vllm"]
"""Whose kernels a roofline prices (``step_time.kernel_rule``): pdsim, the fit over every
engine's measured kernels, or one engine's own where the profile has a fit for it."""

FP8_COMPUTE_EFFICIENCY = 0.493
"""The H100 fit of an fp8 GEMM's fraction of the fp8 peak (``tools/fit_gemm_precision.py``):
900 prefill-sized fp8 GEMMs (per-tensor and block-scaled) AIConfigurator measured on H100
SXM under SGLang, TensorRT-LLM and vLLM (``pdsim/data/kernels/aic_gemm_kernels.csv``);
median error 27.2% at the bf16 efficiency, 21.3% fitted."""
FP4_COMPUTE_EFFICIENCY = 0.337
"""An fp4 GEMM's fraction of the fp4 peak: the B200 fit (the only GPU with an fp4 table;
540 nvfp4 GEMMs, median error 46.6% at the bf16 efficiency, 21.2% fitted)."""

MOE_PAIR_S = 3.1e-8
"""The H100 fit of the per-pair MoE cost (``tools/fit_moe_kernels.py``): AIConfigurator's
measured DeepSeek-V3 MoE layers on H100 SXM (aiconfigurator-core 0.12.0 perf database,
``pdsim/data/kernels/aic_moe_kernels.csv``), 72 layers of 1,024-16,384 tokens under SGLang,
TensorRT-LLM and vLLM kernels, the fp8 GEMM efficiency fitted first; median error 36.8%
without it, 29.1% with it."""
MOE_PAIR_HIDDEN_SIZE = 7168
"""The hidden width the per-pair MoE costs were fitted at (DeepSeek-V3's). The work per
routed pair (permuting, quantising and combining one token's row) is a row of the hidden
width, so a model's pair cost is ``moe_pair_s x hidden_size / MOE_PAIR_HIDDEN_SIZE``: on
AIConfigurator's measured MoE layers of MiniMax-M2.5 (hidden 3,072) and Qwen3-235B-A22B
(4,096) the pair cost fitted per GPU and engine is a median 0.52 and 0.46 of DeepSeek-V3's
(the width ratios are 0.43 and 0.57; docs/step-time.md, "Per-pair handling of routed
tokens")."""
MOE_PAIR_S_BY_ENGINE: dict[KernelEngine, float] = {
    "trtllm": 6.67e-8, "sglang": 1.45e-8, "vllm": 2.1e-8}
"""The H100 fit per engine (``tools/fit_moe_kernels.py --by-backend``): 36 TensorRT-LLM, 18
SGLang and 18 vLLM layers of the same table; median error 6.2%, 8.4% and 6.5% against
29.1% for the one value over all three."""

FP8_MOE_EFFICIENCY_BY_ENGINE: dict[KernelEngine, dict[str, float]] = {
    "sglang": {"0.5.10": 0.87, "0.5.14": 1.0},
    "trtllm": {"1.3.0rc10": 0.85, "1.3.0rc20": 0.87},
    "vllm": {"0.24.0": 1.0}}
"""The H100 fit per engine and version of the share of the bandwidth a block-scaled fp8
MoE layer streams its weights at, at decode sizes (``tools/fit_moe_kernels.py
--fp8-decode``): AIConfigurator's measured fp8_block MoE layers of DeepSeek-V3, Kimi-K2.5,
Qwen3-235B-A22B and MiniMax-M2.5 at 64-512 tokens on H100 SXM
(``pdsim/data/kernels/aic_moe_decode_kernels.csv``; docs/step-time.md, "Block-scaled fp8
MoE layers at decode sizes")."""

CUSTOM_ALLREDUCE_LATENCY_S = 4.54e-6
CUSTOM_ALLREDUCE_EFFICIENCY = 0.124
"""The custom all-reduce fit on H100 (``tools/fit_collectives.py``): SGLang PR #2904
(github.com/sgl-project/sglang/pull/2904, 2025-01-15), its TensorRT-LLM-derived
custom all-reduce on 8 x H100 without CUDA graphs, 18 timings at TP 2, 4, 8 and 512 B to
1 MiB (5.9 us at 512 B, 16.7 us at 256 KiB, 33.8 us at 1 MiB over 8 GPUs); median error
16.8%, worst 28.6%."""


class KernelFit(StrictModel):
    """Fitted kernel constants of one GPU (the ``kernels`` section of a hardware profile).

    - ``compute_efficiency``: fraction of the dense peak a large GEMM reaches.
    - ``fp8_compute_efficiency``, ``fp4_compute_efficiency``: the same for fp8 and fp4
      GEMMs, of the chip's fp8 and fp4 peaks (low-precision GEMMs reach a smaller share of
      their peak: scaling, narrower tiles; fitted to AIConfigurator's measured GEMMs,
      tools/fit_gemm_precision.py); a chip without the precision runs at its bf16 peak and
      ``compute_efficiency``.
    - ``gemm_half_tokens``: tokens per GEMM (or per expert of a grouped GEMM) at which a
      GEMM reaches half of ``compute_efficiency``.
    - ``memory_efficiency``: fraction of HBM bandwidth a weight-streaming kernel reaches.
    - ``kernel_latency_s``: fixed time of one kernel (launch-to-end of an empty one).
    - ``collective_latency_s``, ``communication_efficiency``: one all-reduce's fixed time
      and the fraction of the per-direction link bandwidth its ring reaches.
    - ``custom_allreduce_latency_s``, ``custom_allreduce_efficiency``: the same for the
      one-shot / two-shot peer-memory all-reduce (vLLM, SGLang, TensorRT-LLM) engines run
      on small messages inside one node.
    - ``moe_pair_s``: seconds per routed (token, expert) pair a GPU handles in a grouped
      MoE layer beyond the roofline of its expert GEMMs: routing, permutation, activation
      quantisation, the grouped GEMM's per-row work on thin expert slices, the weighted
      combine (fitted to AIConfigurator's measured MoE layers, tools/fit_moe_kernels.py).
    - ``moe_pair_s_by_engine``: the same, fitted to one engine's measured layers alone
      (``tools/fit_moe_kernels.py --by-backend``): the engines run different grouped-MoE
      kernels (TensorRT-LLM's CUTLASS path on Hopper is 4-5x SGLang's per pair); a config
      picks one with ``step_time.kernel_rule`` (``for_rule``).
    - ``fp8_moe_efficiency``: the fraction of the HBM bandwidth (of ``memory_efficiency``'s)
      a grouped MoE layer of block-scaled fp8 experts streams its weights at, at decode
      sizes (1: as a dense GEMM's weight read).
    - ``fp8_moe_efficiency_by_engine``: the same fitted per engine and engine version to
      its measured decode-sized block-fp8 MoE layers (``tools/fit_moe_kernels.py
      --fp8-decode``): version -> efficiency; a config takes its engine's entry for the
      newest version not newer than ``step_time.kernel_version`` (``for_rule``).
    - ``fitted_to``: the data the values come from; ``transferred_from`` names another
      GPU's fit when this one has no public kernel data; ``borrowed`` lists each field
      whose value is another GPU's (``pdsim show-config`` prints them).
    """

    compute_efficiency: Efficiency
    """Fraction of the dense peak a large GEMM reaches."""
    fp8_compute_efficiency: Efficiency = FP8_COMPUTE_EFFICIENCY
    """Fraction of the fp8 dense peak a large fp8 GEMM reaches."""
    fp4_compute_efficiency: Efficiency = FP4_COMPUTE_EFFICIENCY
    """Fraction of the fp4 dense peak a large fp4 GEMM reaches."""
    gemm_half_tokens: NonNegFloat
    """Tokens per GEMM at which it reaches half of compute_efficiency."""
    memory_efficiency: Efficiency
    """Fraction of HBM bandwidth a weight-streaming kernel reaches."""
    kernel_latency_s: NonNegFloat
    """Fixed time of one kernel, in seconds."""
    collective_latency_s: NonNegFloat
    """Fixed time of one all-reduce, in seconds."""
    communication_efficiency: Efficiency
    """Fraction of per-direction link bandwidth an all-reduce ring reaches."""
    custom_allreduce_latency_s: NonNegFloat = CUSTOM_ALLREDUCE_LATENCY_S
    """Fixed time of one peer-memory (custom) all-reduce inside a node, in seconds."""
    custom_allreduce_efficiency: Efficiency = CUSTOM_ALLREDUCE_EFFICIENCY
    """Fraction of per-direction link bandwidth the custom all-reduce reaches."""
    moe_pair_s: NonNegFloat = MOE_PAIR_S
    """Seconds per routed (token, expert) pair a GPU handles in a grouped MoE layer, beyond
    the roofline of its expert GEMMs."""
    moe_pair_s_by_engine: dict[KernelEngine, NonNegFloat] = Field(default_factory=dict)
    """``moe_pair_s`` fitted to each engine's own measured MoE layers (empty: no per-engine
    data; every rule then takes ``moe_pair_s``)."""
    fp8_moe_efficiency: Efficiency = 1.0
    """Fraction of the weight-read bandwidth a block-scaled fp8 grouped MoE layer reaches
    at decode sizes (1: as a dense GEMM's)."""
    fp8_moe_efficiency_by_engine: dict[KernelEngine, dict[str, Efficiency]] = Field(
        default_factory=dict)
    """``fp8_moe_efficiency`` fitted to each engine's measured MoE layers, per engine
    version (empty: no per-engine data; every rule then takes ``fp8_moe_efficiency``)."""
    fitted_to: str = ""
    """The data the values are fitted to."""
    transferred_from: str = ""
    """Another GPU whose fit this one borrows, when it has no public kernel data."""
    borrowed: list[str] = Field(default_factory=list)
    """The fields whose values are another GPU's fit (transferred_from says whose)."""

    def for_rule(self, rule: str, version: str = "") -> KernelFit:
        """The constants a config of ``kernel_rule`` ``rule`` runs on: this fit, with the
        engine's own ``moe_pair_s`` where the profile has one for it, and its own
        ``fp8_moe_efficiency`` for ``version`` of the engine (``engine_version_entry``)."""
        update: dict[str, float] = {}
        engine = self.moe_pair_s_by_engine.get(rule)  # type: ignore[call-overload]
        if engine is not None and engine != self.moe_pair_s:
            update["moe_pair_s"] = engine
        by_version = self.fp8_moe_efficiency_by_engine.get(rule)  # type: ignore[call-overload]
        if by_version:
            eff = engine_version_entry(by_version, version)
            if eff != self.fp8_moe_efficiency:
                update["fp8_moe_efficiency"] = eff
        return self.model_copy(update=update) if update else self


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """A sortable key of an engine version such as ``0.19.0``, ``1.3.0rc20`` or
    ``0.5.6.post2`` (numeric parts compare as numbers, before any text part)."""
    parts = re.findall(r"\d+|[a-z]+", version.lower())
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def engine_version_entry(by_version: dict[str, float], version: str) -> float:
    """The entry of the newest version not newer than ``version``; the oldest entry when
    ``version`` predates them all; the newest when ``version`` is '' or not a release
    number (a nightly build)."""
    ordered = sorted(by_version, key=version_key)
    if not version or not re.match(r"\d", version):
        return by_version[ordered[-1]]
    key = version_key(version)
    older = [v for v in ordered if version_key(v) <= key]
    return by_version[older[-1] if older else ordered[0]]


DEFAULT_KERNELS = KernelFit(
    compute_efficiency=0.753, gemm_half_tokens=107.4, memory_efficiency=0.878,
    kernel_latency_s=4.53e-06, collective_latency_s=2.71e-05, communication_efficiency=0.759,
    moe_pair_s_by_engine=MOE_PAIR_S_BY_ENGINE,
    fp8_moe_efficiency_by_engine=FP8_MOE_EFFICIENCY_BY_ENGINE,
    fitted_to="the h100-sxm fit (pdsim/data/hardware/h100-sxm.yaml)")
"""Kernel constants of a hardware spec without a ``kernels`` section: the H100 fit."""


def gemm_efficiency(tokens: float, fit: KernelFit) -> float:
    """Fraction of the dense peak a GEMM over ``tokens`` rows reaches (in [0, 1))."""
    return fit.compute_efficiency * tokens / (tokens + fit.gemm_half_tokens)


def gemm_time_s(m: float, n: float, k: float, *, weight_bytes: float, act_bytes: float,
                peak_flops: float, hbm_bytes_per_s: float, fit: KernelFit) -> float:
    """Seconds of one ``m x k`` by ``k x n`` GEMM (see the module docstring)."""
    compute = 2.0 * n * k * (m + fit.gemm_half_tokens) / (peak_flops * fit.compute_efficiency)
    memory = ((n * k * weight_bytes + m * (n + k) * act_bytes)
              / (hbm_bytes_per_s * fit.memory_efficiency))
    return fit.kernel_latency_s + max(compute, memory)


def elementwise_time_s(nbytes: float, *, hbm_bytes_per_s: float, fit: KernelFit) -> float:
    """Seconds of one memory-bound elementwise kernel moving ``nbytes``."""
    return fit.kernel_latency_s + nbytes / (hbm_bytes_per_s * fit.memory_efficiency)


def allreduce_time_s(nbytes: float, gpus: int, *, link_bytes_per_s: float,
                     fit: KernelFit) -> float:
    """Seconds of one ring all-reduce of ``nbytes`` over ``gpus`` GPUs."""
    return fit.collective_latency_s + (nbytes * 2.0 * (gpus - 1) / gpus
                                       / (link_bytes_per_s * fit.communication_efficiency))
