"""Published collective-kernel timings the constants of ``pdsim.perf.collectives`` and the
custom all-reduce fit of ``pdsim.perf.kernels`` are fitted to (figures only, with their
sources; ``tools/fit_collectives.py`` refits them, docs/step-time.md "Collectives from
placement"), and the fitted laws' errors on them.

- ``CUSTOM_ALLREDUCE_US``: SGLang PR #2904 (github.com/sgl-project/sglang/pull/2904,
  2025-01-15), "unit test performance in H100 (without cuda graph)", the custom
  all-reduce's latency in us at TP 2, 4, 8 for the message sizes ``ALLREDUCE_BYTES``.
- ``DEEPEP_LL_DISPATCH_US`` / ``DEEPEP_LL_COMBINE_US``: DeepEP's V1 low-latency kernels
  (github.com/deepseek-ai/DeepEP, docs/legacy.md at commit 0297fc8) on H800 (~160 GB/s
  NVLink, one CX7 400 Gb/s NIC per GPU), 128 tokens per rank, hidden 7168, top-8, FP8
  dispatch, BF16 combine, at EP ``DEEPEP_EP``.
"""

from __future__ import annotations

import numpy as np

ALLREDUCE_BYTES = (512, 4096, 32768, 262144, 524288, 1048576)
CUSTOM_ALLREDUCE_US = {2: (3.7, 3.9, 4.5, 7.9, 12.5, 19.9),
                       4: (4.8, 3.7, 4.8, 13.9, 20.2, 31.1),
                       8: (5.9, 5.7, 7.8, 16.7, 22.1, 33.8)}
H100_NVLINK_BYTES_PER_S = 450e9

DEEPEP_EP = (8, 16, 32, 64, 128, 256)
DEEPEP_LL_DISPATCH_US = (77, 118, 155, 173, 192, 194)
DEEPEP_LL_COMBINE_US = (114, 195, 273, 314, 369, 360)
DEEPEP_TOKENS, DEEPEP_TOP_K, DEEPEP_HIDDEN = 128, 8, 7168
H800_NVLINK_MEASURED_BYTES_PER_S = 160e9  # "~160 GB/s NVLink maximum bandwidth"
H800_NVLINK_NOMINAL_BYTES_PER_S = 200e9  # 400 GB/s, both directions added
NIC_BYTES_PER_S = 50e9  # 400 Gb/s
DISPATCH_BYTES_PER_CHANNEL = 1.0 + 4.0 / 128  # fp8 and one fp32 scale per 128 channels
COMBINE_BYTES_PER_CHANNEL = 2.0  # bf16


def custom_allreduce_errors(latency_s: float, efficiency: float) -> np.ndarray:
    """Relative errors (predicted / measured - 1) of the all-reduce law
    ``latency + b 2 (g-1)/g / (450 GB/s x efficiency)`` on the custom all-reduce table."""
    out = []
    for g, times in CUSTOM_ALLREDUCE_US.items():
        for b, t in zip(ALLREDUCE_BYTES, times, strict=True):
            pred = latency_s + b * 2.0 * (g - 1) / g / (H100_NVLINK_BYTES_PER_S * efficiency)
            out.append(pred / (t * 1e-6) - 1.0)
    return np.array(out)


def deepep_low_latency_s(per_channel_bytes: float, fixed_s: float, nvlink_efficiency: float,
                         rdma_efficiency: float) -> np.ndarray:
    """Predicted times at ``DEEPEP_EP`` of ``fixed + max(NVLink bytes / (nominal H800 NVLink
    x nvlink_efficiency), RDMA bytes / (NIC x rdma_efficiency))``: a GPU's copies to the 7
    other GPUs of its node over NVLink, the rest over RDMA."""
    ep = np.array(DEEPEP_EP, dtype=float)
    n = np.minimum(ep, 8.0)
    per_copy = DEEPEP_TOKENS * DEEPEP_TOP_K * DEEPEP_HIDDEN * per_channel_bytes
    intra = per_copy * (n - 1) / ep
    inter = per_copy * (ep - n) / ep
    out: np.ndarray = fixed_s + np.maximum(
        intra / (H800_NVLINK_NOMINAL_BYTES_PER_S * nvlink_efficiency),
        inter / (NIC_BYTES_PER_S * rdma_efficiency))
    return out


def deepep_errors(dispatch_fixed_s: float, combine_fixed_s: float, nvlink_efficiency: float,
                  rdma_efficiency: float) -> np.ndarray:
    """Relative errors of the law on the 12 low-latency timings (dispatch, then combine)."""
    d = deepep_low_latency_s(DISPATCH_BYTES_PER_CHANNEL, dispatch_fixed_s,
                             nvlink_efficiency, rdma_efficiency)
    c = deepep_low_latency_s(COMBINE_BYTES_PER_CHANNEL, combine_fixed_s,
                             nvlink_efficiency, rdma_efficiency)
    measured = np.array(DEEPEP_LL_DISPATCH_US + DEEPEP_LL_COMBINE_US, dtype=float) * 1e-6
    return np.concatenate([d, c]) / measured - 1.0
