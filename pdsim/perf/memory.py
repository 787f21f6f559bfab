"""GPU memory: how much KV cache an instance has once the weights are loaded.

Four rules (``memory_rule``; docs/step-time.md, "Memory and KV blocks"): ``pdsim``
below; ``vllm`` (``gpu_memory_utilization`` of total memory less weights, the activation
peak of a profile run at ``max_num_batched_tokens`` and non-torch memory), ``sglang``
(``mem_fraction_static`` of total memory less weights, the fraction derived from the GPU's
capacity as SGLang derives it) and ``trtllm`` (``free_gpu_memory_fraction`` of the memory
still free after weights, the activation peak and the runtime).

The ``pdsim`` rule, vLLM's simplified: each GPU may use ``gpu_memory_utilization`` of its HBM; the
weights (this GPU's shard), a runtime reserve (activations of the largest batch, CUDA
graphs, NCCL buffers: vLLM measures it by profiling, here it is a fixed
``runtime_reserve_gib``) and the recurrent states of Mamba-like layers come out of that;
the rest is KV cache. Blocks are counted per GPU with the per-GPU bytes per token (GQA
splits KV heads across tensor-parallel ranks, MLA replicates its latent), so parallelism
is taken into account. Weights that do not fit are a ``ConfigError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pdsim.errors import ConfigError
from pdsim.perf.architecture import (
    DTYPE_BYTES,
    DenseFFN,
    ModelArchitecture,
    MoEFFN,
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
MIB = float(2**20)

MemoryRule = Literal["pdsim", "vllm", "sglang", "trtllm"]
MEMORY_RULES: tuple[str, ...] = ("pdsim", "vllm", "sglang", "trtllm")

NON_TORCH_GIB = 1.0
"""Per-GPU memory outside the weights, activations and KV in the ``vllm`` and ``trtllm``
rules (CUDA context, NCCL and communication buffers): a judgement from vLLM's start-up
memory lines (``non_torch_memory`` of 0.1-1.5 GiB per GPU); not fitted."""

DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9
"""TensorRT-LLM's ``KvCacheConfig.free_gpu_memory_fraction`` default."""


@dataclass(frozen=True)
class MemoryPlan:
    """How one GPU's memory is split under a rule: what the KV cache gets and why."""

    rule: str
    capacity: float
    weights: float
    activation: float
    other: float
    kv: float
    note: str


def activation_peak_bytes(arch: ModelArchitecture, tensor_parallel_size: int,
                          expert_parallel_size: int, tokens: int, seqs: int) -> float:
    """Per-GPU activation peak of a forward over ``tokens`` tokens (the engines' profile
    run at ``max_num_batched_tokens``): the widest layer's live tensors, the FFN's gate and
    up projections (``2 x intermediate / tp`` per token for a dense layer; for MoE ``top_k``
    expert slices, spread over ``expert_parallel_size`` GPUs when experts are sharded) and
    the residual stream and layer input (``4 x hidden``), at the activation dtype; plus
    the logits of ``seqs`` sequences in fp32 (the sampler's dummy run)."""
    tp, ep = tensor_parallel_size, expert_parallel_size
    width = 0.0
    for b in arch.blocks:
        f = b.ffn
        if isinstance(f, DenseFFN):
            width = max(width, 2 * f.intermediate_size / tp)
        elif isinstance(f, MoEFFN):
            routed = f.top_k * 2 * f.expert_intermediate_size / max(ep, tp)
            shared = f.num_shared_experts * 2 * (
                f.shared_expert_intermediate_size or f.expert_intermediate_size) / tp
            width = max(width, routed + shared)
    per_token = (width + 4 * arch.hidden_size) * DTYPE_BYTES[arch.activation_dtype]
    logits = seqs * arch.vocab_size / tp * 4.0
    return tokens * per_token + logits


def sglang_mem_fraction_static(hardware: HardwareSpec, tensor_parallel_size: int,
                               attention_dp_size: int = 1) -> float:
    """SGLang's default ``mem_fraction_static``, derived from the GPU's capacity as
    ``ServerArgs._handle_gpu_memory_settings`` does (sglang ``server_args.py`` 0.5.x, the
    rule as AIConfigurator documents it in ``sdk/backends/sglang_backend.py``): reserved
    = 512 MiB + 1.5 MiB per token of the capacity tier's chunked-prefill size (8,192 below
    160 GiB, 16,384 above) + tp/8 GiB + 2 MiB per CUDA-graph batch size (256 at TP < 4 or
    512 below 160 GiB; 512 above) + 3 MiB (and 1.5 MiB more past 300) per graph batch and
    attention-DP rank when DP > 1; at least 10 GiB on GPUs above 60 GiB; the fraction is
    (capacity - reserved) / capacity."""
    cap_mib = hardware.hbm_capacity_bytes / MIB
    tp, dp = tensor_parallel_size, attention_dp_size
    if cap_mib < 60 * 1024:
        chunk, graph_bs = 4096, (32 if tp < 4 else 160)
    elif cap_mib < 160 * 1024:
        chunk, graph_bs = 8192, (256 if tp < 4 else 512)
    else:
        chunk, graph_bs = 16384, 512
    reserved = 512 + 1.5 * chunk + tp / 8 * 1024 + 2 * graph_bs
    if dp > 1:
        reserved += 3 * graph_bs * dp + (1.5 * graph_bs * dp if graph_bs > 300 else 0.0)
    if cap_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((cap_mib - reserved) / cap_mib, 3)


def memory_plan(arch: ModelArchitecture, hardware: HardwareSpec, tensor_parallel_size: int,
                expert_parallel_size: int = 1, drafter_modules: int = 0, *,
                rule: str = "pdsim",
                gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                runtime_reserve_gib: float = DEFAULT_RUNTIME_RESERVE_GIB,
                mem_fraction_static: float | None = None,
                free_gpu_memory_fraction: float = DEFAULT_FREE_GPU_MEMORY_FRACTION,
                max_num_batched_tokens: int = 0, max_num_seqs: int = 0,
                attention_dp_size: int = 1) -> MemoryPlan:
    """One GPU's memory under ``rule``; ``kv`` may be negative (the weights do not fit)."""
    tp, ep = tensor_parallel_size, expert_parallel_size
    cap = hardware.hbm_capacity_bytes
    w = weight_bytes(arch, tp, ep, drafter_modules)
    if rule == "pdsim":
        other = runtime_reserve_gib * GIB
        return MemoryPlan(rule, cap, w, 0.0, other, cap * gpu_memory_utilization - other - w,
                          f"{hardware.hbm_capacity_gib:g} GiB x gpu_memory_utilization "
                          f"{gpu_memory_utilization:g} - {runtime_reserve_gib:g} GiB "
                          f"runtime reserve")
    act = activation_peak_bytes(arch, tp, ep, max_num_batched_tokens, max_num_seqs)
    if rule == "vllm":
        other = NON_TORCH_GIB * GIB
        return MemoryPlan(rule, cap, w, act, other,
                          cap * gpu_memory_utilization - w - act - other,
                          f"{hardware.hbm_capacity_gib:g} GiB x gpu_memory_utilization "
                          f"{gpu_memory_utilization:g} - activation peak at "
                          f"{max_num_batched_tokens:,} tokens - {NON_TORCH_GIB:g} GiB "
                          f"non-torch")
    if rule == "sglang":
        frac = (mem_fraction_static if mem_fraction_static is not None
                else sglang_mem_fraction_static(hardware, tp, attention_dp_size))
        return MemoryPlan(rule, cap, w, 0.0, cap * (1 - frac), cap * frac - w,
                          f"{hardware.hbm_capacity_gib:g} GiB x mem_fraction_static "
                          f"{frac:g}")
    if rule == "trtllm":
        other = NON_TORCH_GIB * GIB
        free = cap - w - act - other
        return MemoryPlan(rule, cap, w, act, other + (1 - free_gpu_memory_fraction) * max(
            free, 0.0), free_gpu_memory_fraction * free if free > 0 else free,
                          f"free_gpu_memory_fraction {free_gpu_memory_fraction:g} x "
                          f"({hardware.hbm_capacity_gib:g} GiB - activation peak at "
                          f"{max_num_batched_tokens:,} tokens - {NON_TORCH_GIB:g} GiB "
                          f"runtime)")
    raise ValueError(f"unknown memory rule {rule!r}")


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
                           path: str = "step_time", rule: str = "pdsim",
                           mem_fraction_static: float | None = None,
                           free_gpu_memory_fraction: float = DEFAULT_FREE_GPU_MEMORY_FRACTION,
                           max_num_batched_tokens: int = 0, max_num_seqs: int = 0,
                           attention_dp_size: int = 1) -> int:
    """Bytes of one GPU left for KV cache (and recurrent states) after the weights, under
    ``rule`` (``memory_plan``).

    ``drafter_modules`` drafter modules are loaded beside the target. Raises
    ``ConfigError(path, ...)`` when the weight shard does not fit, with the numbers and
    the smallest tensor-parallel size that would.
    """
    tp = tensor_parallel_size

    def plan_at(t: int) -> MemoryPlan:
        return memory_plan(arch, hardware, t, expert_parallel_size, drafter_modules,
                           rule=rule, gpu_memory_utilization=gpu_memory_utilization,
                           runtime_reserve_gib=runtime_reserve_gib,
                           mem_fraction_static=mem_fraction_static,
                           free_gpu_memory_fraction=free_gpu_memory_fraction,
                           max_num_batched_tokens=max_num_batched_tokens,
                           max_num_seqs=max_num_seqs, attention_dp_size=attention_dp_size)

    plan = plan_at(tp)
    if plan.kv <= 0:
        fit = next((t for t in _TP_CANDIDATES if plan_at(t).kv > 0), None)
        hint = (f"tensor_parallel_size >= {fit} would fit" if fit is not None
                else "no tensor-parallel size up to 72 fits")
        offered = plan.kv + plan.weights
        raise ConfigError(path, (
            f"{arch.name} does not fit on {hardware.name}: its weights need "
            f"{plan.weights / GIB:.1f} GiB per GPU (tensor_parallel_size={tp}, "
            f"weight_dtype={arch.weight_dtype}, {drafter_modules} drafter module(s)) but a "
            f"GPU offers {max(offered, 0.0) / GIB:.1f} GiB ({plan.note}"
            f"{'' if rule == 'pdsim' else ', memory_rule ' + rule}); {hint}, or use a "
            f"smaller weight_dtype or a GPU with more memory"))
    return int(plan.kv)


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
                           path: str = "step_time", rule: str = "pdsim",
                           mem_fraction_static: float | None = None,
                           free_gpu_memory_fraction: float = DEFAULT_FREE_GPU_MEMORY_FRACTION,
                           max_num_batched_tokens: int = 0, batch_seqs: int = 0,
                           attention_dp_size: int = 1) -> int:
    """KV blocks of one instance (``scheduler.num_blocks``), derived from memory.

    ``rule`` and the fields after it choose the memory rule (``memory_plan``);
    ``max_num_batched_tokens`` and ``batch_seqs`` size its activation peak.

    Per GPU: memory left after weights, minus the recurrent states of ``max_num_seqs``
    requests (Mamba / linear attention), divided by ``block_size`` x the per-GPU KV bytes
    per token of the target's attention layers and the ``drafter_modules`` modules.
    Raises ``ConfigError(path, ...)`` when not even one block fits.
    """
    per_gpu = kv_cache_bytes_per_gpu(
        arch, hardware, tensor_parallel_size, gpu_memory_utilization,
        expert_parallel_size=expert_parallel_size, drafter_modules=drafter_modules,
        runtime_reserve_gib=runtime_reserve_gib, path=path, rule=rule,
        mem_fraction_static=mem_fraction_static,
        free_gpu_memory_fraction=free_gpu_memory_fraction,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=batch_seqs,
        attention_dp_size=attention_dp_size)
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
