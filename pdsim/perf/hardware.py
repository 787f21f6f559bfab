"""Accelerator profiles: the peak figures the roofline model divides by.

A ``HardwareSpec`` is the data of a hardware profile (``pdsim/data/hardware/*.yaml``) or
an inline ``step_time.hardware`` mapping. All figures are per GPU and are vendor peaks;
the roofline model scales them by efficiency factors (``RooflineStepTimeConfig``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from pdsim._model import StrictModel, at_most
from pdsim.perf.kernels import KernelFit

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1)]

SCALE_OUT_COLLECTIVE_LATENCY_S = 46.5e-6
"""Small-message all-reduce over 16 Hopper GPUs in two 8-GPU nodes (CX-7 NDR 400 Gb/s, one
NIC per GPU, NCCL 2.21 NVLSTree): 46.3-47.8 us for 4 B to 512 B in nccl-tests, median
46.5 us (NVIDIA/nccl issue #1244, 2024-04-09, 2 x 8 H20). The in-node fit (Vidur's
8-GPU rings) is 27 us; the difference is the network round trips."""

Precision = Literal["bf16", "fp8", "fp4"]
"""Tensor-core input precisions a profile can give a dense peak for."""


class HardwareSpec(StrictModel):
    """One GPU's peaks.

    - ``dense_tflops``: dense (no 2:4 sparsity) tensor-core peak per precision, in
      TFLOP/s (1e12); ``bf16`` is required, ``fp8``/``fp4`` where the chip has them.
    - ``hbm_capacity_gib``: HBM capacity in GiB. Vendors' "80 GB" HBM figures are binary
      sizes (an 80 GB H100 reports 81,559 MiB), so the datasheet number is used as GiB.
    - ``hbm_bandwidth_gb_per_s``: peak HBM bandwidth, GB/s (1e9 bytes).
    - ``scale_up_bandwidth_gb_per_s``: NVLink / Infinity Fabric bandwidth per GPU and per
      direction (datasheets quote both directions added: 900 GB/s NVLink 4 is 450 here).
    - ``scale_up_domain_gpus``: GPUs reachable over that fabric (8 in an HGX board, 72 in
      an NVL72 rack); parallel groups larger than this use the scale-out network.
    - ``scale_out_bandwidth_gb_per_s``: network (InfiniBand / RoCE) bandwidth per GPU and
      per direction (a 400 Gb/s NIC per GPU is 50 GB/s).
    - ``scale_out_collective_latency_s``: the fixed time of one small collective whose
      group spans nodes (it replaces the in-node ``collective_latency_s`` when larger).
    - ``kernels``: the fitted kernel constants (``pdsim.perf.kernels``); the roofline's
      efficiency and latency defaults come from here. A spec without them uses
      ``DEFAULT_KERNELS`` (the H100 fit).
    - ``sources``: where each figure comes from, keyed by field name.
    """

    name: str
    """Profile name."""
    display_name: str = ""
    """Human-readable GPU name."""
    dense_tflops: dict[Precision, PositiveFloat]
    """Dense tensor-core peak per precision in TFLOP/s (bf16 required)."""
    hbm_capacity_gib: Annotated[PositiveFloat, at_most(
        2.0**20, "1 PiB per GPU; larger memories overflow the block count")]
    """HBM capacity in GiB."""
    hbm_bandwidth_gb_per_s: PositiveFloat
    """Peak HBM bandwidth in GB/s (1e9 bytes)."""
    scale_up_bandwidth_gb_per_s: PositiveFloat
    """NVLink-class bandwidth per GPU and direction, GB/s."""
    scale_up_domain_gpus: PositiveInt = 8
    """GPUs reachable over the scale-up fabric."""
    scale_out_bandwidth_gb_per_s: PositiveFloat
    """Network bandwidth per GPU and direction, GB/s."""
    scale_out_collective_latency_s: Annotated[float, Field(ge=0, le=1.0)] = \
        SCALE_OUT_COLLECTIVE_LATENCY_S
    """Fixed time of a small collective over more GPUs than one scale-up domain, seconds."""
    kernels: KernelFit | None = None
    """Fitted kernel constants; null: the default (H100) fit."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each figure comes from, keyed by field name."""
    notes: str = ""
    """Free text."""

    @model_validator(mode="after")
    def _check(self) -> HardwareSpec:
        if "bf16" not in self.dense_tflops:
            raise ValueError("dense_tflops needs a bf16 entry")
        return self

    def peak_flops(self, precision: str) -> float:
        """Dense peak in FLOP/s for ``precision``; bf16 when the chip lacks it (no FP4 on
        Hopper or CDNA 3: 4-bit weights are dequantised and multiplied in bf16)."""
        for key, tflops in self.dense_tflops.items():
            if key == precision:
                return float(tflops) * 1e12
        return float(self.dense_tflops["bf16"]) * 1e12

    @property
    def hbm_capacity_bytes(self) -> float:
        return self.hbm_capacity_gib * 2**30

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_gb_per_s * 1e9

    def collective_latency_s(self, group_gpus: int, in_domain_s: float) -> float:
        """Fixed time of one collective over ``group_gpus`` GPUs: ``in_domain_s`` (the
        fitted in-node latency) inside one scale-up domain, at least the scale-out latency
        across domains."""
        if group_gpus <= self.scale_up_domain_gpus:
            return in_domain_s
        return max(in_domain_s, self.scale_out_collective_latency_s)

    def link_bandwidth_bytes_per_s(self, group_gpus: int) -> float:
        """Per-direction bandwidth a collective over ``group_gpus`` GPUs runs at."""
        if group_gpus <= self.scale_up_domain_gpus:
            return self.scale_up_bandwidth_gb_per_s * 1e9
        return self.scale_out_bandwidth_gb_per_s * 1e9
