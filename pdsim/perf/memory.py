"""GPU memory: how much KV cache an instance has once the weights are loaded.

vLLM's rule, simplified: each GPU may use ``gpu_memory_utilization`` of its HBM; the
weights (this GPU's shard), a runtime reserve (activations of the largest batch, CUDA
graphs, NCCL buffers: vLLM measures it by profiling, here it is a fixed
``runtime_reserve_gib``) and the recurrent states of Mamba-like layers come out of that;
the rest is KV cache. Blocks are counted per GPU with the per-GPU bytes per token (GQA
splits KV heads across tensor-parallel ranks, MLA replicates its latent), so parallelism
is taken into account. Weights that do not fit are a ``ConfigError``.
"""

from __future__ import annotations

import math

from pdsim.errors import ConfigError
from pdsim.perf.architecture import (
    ModelArchitecture,
)
from pdsim.perf.hardware import HardwareSpec
from pdsim.perf.sizes import (
    pool_block_bytes_per_token,
    state_bytes_per_request,
    weight_bytes,
)

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``gpu_memory_utilization``."""

DEFAULT_RUNTIME_RESERVE_GIB = 2.0
"""Per-GPU memory kept for activations, CUDA graphs and communication buffers."""

_TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64, 72)

GIB = float(2**30)


def _budget_bytes(hardware: HardwareSpec, gpu_memory_utilization: float,
                  runtime_reserve_gib: float) -> float:
    return hardware.hbm_capacity_bytes * gpu_memory_utilization - runtime_reserve_gib * GIB


def smallest_fitting_tensor_parallel_size(
        arch: ModelArchitecture, hardware: HardwareSpec,
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION, *,
        drafter_modules: int = 0,
        runtime_reserve_gib: float = DEFAULT_RUNTIME_RESERVE_GIB) -> int | None:
    """The smallest common TP size (1, 2, 4, ... 72) whose weight shard fits, or None."""
    budget = _budget_bytes(hardware, gpu_memory_utilization, runtime_reserve_gib)
    for tp in _TP_CANDIDATES:
        if weight_bytes(arch, tp, 1, drafter_modules) < budget:
            return tp
    return None


def kv_cache_bytes_per_gpu(arch: ModelArchitecture, hardware: HardwareSpec,
                           tensor_parallel_size: int = 1,
                           gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION, *,
                           expert_parallel_size: int = 1, drafter_modules: int = 0,
                           runtime_reserve_gib: float = DEFAULT_RUNTIME_RESERVE_GIB,
                           path: str = "step_time") -> int:
    """Bytes of one GPU left for KV cache (and recurrent states) after the weights.

    ``drafter_modules`` drafter modules are loaded beside the target. Raises
    ``ConfigError(path, ...)`` when the weight shard does not fit, with the numbers and
    the smallest tensor-parallel size that would.
    """
    tp = tensor_parallel_size
    budget = _budget_bytes(hardware, gpu_memory_utilization, runtime_reserve_gib)
    weights = weight_bytes(arch, tp, expert_parallel_size, drafter_modules)
    if weights >= budget:
        fit = smallest_fitting_tensor_parallel_size(
            arch, hardware, gpu_memory_utilization, drafter_modules=drafter_modules,
            runtime_reserve_gib=runtime_reserve_gib)
        hint = (f"tensor_parallel_size >= {fit} would fit" if fit is not None
                else "no tensor-parallel size up to 72 fits")
        raise ConfigError(path, (
            f"{arch.name} does not fit on {hardware.name}: its weights need "
            f"{weights / GIB:.1f} GiB per GPU (tensor_parallel_size={tp}, "
            f"weight_dtype={arch.weight_dtype}, {drafter_modules} drafter module(s)) but a "
            f"GPU offers {max(budget, 0.0) / GIB:.1f} GiB ({hardware.hbm_capacity_gib:g} GiB "
            f"x gpu_memory_utilization {gpu_memory_utilization:g} - "
            f"{runtime_reserve_gib:g} GiB runtime reserve); {hint}, or use a smaller "
            f"weight_dtype or a GPU with more memory"))
    return int(budget - weights)


def kv_cache_bytes_per_instance(arch: ModelArchitecture, hardware: HardwareSpec,
                                tensor_parallel_size: int = 1,
                                gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                                *, expert_parallel_size: int = 1, drafter_modules: int = 0,
                                runtime_reserve_gib: float = DEFAULT_RUNTIME_RESERVE_GIB,
                                path: str = "step_time") -> int:
    """KV-cache bytes of one instance: ``kv_cache_bytes_per_gpu`` x its TP GPUs.

    Only an upper bound on what holds distinct tokens: MLA replicates its KV on every
    rank. Count blocks with ``kv_blocks_per_instance``, which uses per-GPU bytes.
    """
    per_gpu = kv_cache_bytes_per_gpu(
        arch, hardware, tensor_parallel_size, gpu_memory_utilization,
        expert_parallel_size=expert_parallel_size, drafter_modules=drafter_modules,
        runtime_reserve_gib=runtime_reserve_gib, path=path)
    return per_gpu * tensor_parallel_size


def num_kv_blocks(kv_cache_bytes: float, block_size: int, kv_bytes_per_token: float) -> int:
    """Whole blocks of ``block_size`` tokens at ``kv_bytes_per_token`` that fit."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    blocks = kv_cache_bytes / (block_size * max(kv_bytes_per_token, 1.0))
    # an infinite quotient (memory beyond float range) is as many blocks as any bound
    return max(0, math.floor(blocks)) if math.isfinite(blocks) else 2**63


def kv_blocks_per_instance(arch: ModelArchitecture, hardware: HardwareSpec,
                           tensor_parallel_size: int, gpu_memory_utilization: float,
                           block_size: int, *, expert_parallel_size: int = 1,
                           drafter_modules: int = 0, max_num_seqs: int | None = None,
                           runtime_reserve_gib: float = DEFAULT_RUNTIME_RESERVE_GIB,
                           path: str = "step_time") -> int:
    """KV blocks of one instance (``scheduler.num_blocks``), derived from memory.

    Per GPU: memory left after weights, minus the recurrent states of ``max_num_seqs``
    requests (Mamba / linear attention), divided by ``block_size`` x the per-GPU KV bytes
    per token of the target's attention layers and the ``drafter_modules`` modules.
    Raises ``ConfigError(path, ...)`` when not even one block fits.
    """
    per_gpu = kv_cache_bytes_per_gpu(
        arch, hardware, tensor_parallel_size, gpu_memory_utilization,
        expert_parallel_size=expert_parallel_size, drafter_modules=drafter_modules,
        runtime_reserve_gib=runtime_reserve_gib, path=path)
    states = state_bytes_per_request(arch, tensor_parallel_size) * (max_num_seqs or 0)
    per_token = pool_block_bytes_per_token(arch, tensor_parallel_size, drafter_modules)
    blocks = num_kv_blocks(per_gpu - states, block_size, per_token)
    if blocks < 1:
        raise ConfigError(path, (
            f"{arch.name} on {hardware.name} leaves {per_gpu / GIB:.2f} GiB per GPU after "
            f"the weights, not enough for one KV block of {block_size} tokens "
            f"({block_size * per_token / GIB:.3f} GiB) beside the recurrent states of "
            f"{max_num_seqs or 0} requests; raise tensor_parallel_size or "
            f"gpu_memory_utilization"))
    return blocks


def kv_cache_gib_equivalent(blocks: int, block_size: int, kv_bytes_per_token: float) -> float:
    """The ``kv_cache_gib`` that gives ``blocks`` blocks under the root config's rule
    (``kv_cache_gib * 2**30 / (block_size * kv_bytes_per_token)``, whole-model bytes);
    half a block is added so the root config's floor lands on ``blocks`` exactly."""
    return (blocks + 0.5) * block_size * kv_bytes_per_token / GIB
