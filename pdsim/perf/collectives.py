"""Collectives from placement: all-reduce and expert-parallel all-to-all, per GPU.

A collective's time is a fixed cost plus bytes over the link they cross. Which link a
phase crosses follows from where the group's GPUs sit: ``min(group, scale_up_domain_gpus)``
GPUs per node (an HGX board's 8, an NVL72 rack's 72), the rest over the scale-out network.
Every function here returns straight lines in the tokens of a step (seconds fixed, seconds
per token) so the roofline precomputes them once per instance and a step is float
arithmetic (docs/step-time.md, "Collectives from placement").

**All-reduce** of the hidden state after a TP-sliced sublayer. Inside one scale-up domain
an engine runs the faster of two kernels: a one-shot / two-shot all-reduce through peer
memory (vLLM's and SGLang's custom all-reduce, TensorRT-LLM's own; CUDA-graph capturable)
for small messages, NCCL's ring for large ones; the time is the lesser line. Across nodes
only NCCL runs, hierarchically: a ring inside each node over NVLink, then each GPU's
``1/n`` share over its own NIC between the ``N`` nodes.

**Expert-parallel dispatch and combine** around a MoE layer (DeepEP's kernels, which
SGLang and vLLM use for wide EP; TensorRT-LLM's own all-to-all is taken to cost the
same, a judgement). Each token is sent to its ``top_k`` experts: dispatch in the dispatch
dtype (fp8 with one fp32 scale per 128 channels, as DeepEP dispatches, or the activation
dtype), combine in the activation dtype. Copies to GPUs of the same node go over NVLink,
to other nodes over RDMA, both at once (the step waits for the slower). Decode steps use
the low-latency kernels (every copy sent on its own); steps with prefill the normal ones,
which send a token once per remote node and fan it out over NVLink there, so a model with
node-limited routing (DeepSeek-V3: at most 4 nodes per token) sends fewer bytes over
the network.
"""

from __future__ import annotations

from math import ceil

from pdsim.perf.hardware import HardwareSpec

# --- DeepEP (github.com/deepseek-ai/DeepEP, docs/legacy.md at commit 0297fc8: the V1
# tables, H800 with ~160 GB/s NVLink per direction and one CX7 400 Gb/s NIC per GPU,
# 128 tokens per rank, hidden 7168, top-8, FP8 dispatch, BF16 combine). Low-latency
# kernels, dispatch / combine latency at EP 8, 16, 32, 64, 128, 256: 77/114, 118/195,
# 155/273, 173/314, 192/369, 194/360 us (``pdsim.perf.collective_data``). Fitted by
# ``tools/fit_collectives.py`` (least squares on log time, 12 timings: median error 2.1%,
# worst 7.4%) to ``fixed + max(NVLink bytes / (NVLink x eff), RDMA bytes / (NIC x eff))``.
DEEPEP_DISPATCH_FIXED_S = 29.0e-6
"""Fixed time of one low-latency dispatch (DeepEP V1 fit)."""
DEEPEP_COMBINE_FIXED_S = 26.4e-6
"""Fixed time of one low-latency combine (DeepEP V1 fit)."""
DEEPEP_NVLINK_EFFICIENCY = 0.715
"""Fraction of the nominal per-direction NVLink bandwidth the all-to-all reaches: the fit's
0.894 of the ~160 GB/s DeepEP measures on H800, over H800's nominal 200 GB/s."""
DEEPEP_RDMA_EFFICIENCY = 0.873
"""Fraction of the NIC's per-direction bandwidth the all-to-all reaches (fit; 50 GB/s)."""
DEEPEP_HARDWARE = ("h100-sxm", "h200")
"""Profiles on the GPU DeepEP's tables were measured on (Hopper); others borrow them."""

FP8_SCALE_BYTES_PER_CHANNEL = 4.0 / 128
"""DeepEP's FP8 dispatch carries one fp32 scale per 128 channels."""
DISPATCH_BYTES = {"fp8": 1.0 + FP8_SCALE_BYTES_PER_CHANNEL, "bf16": 2.0}
"""Bytes per hidden channel of a dispatched token, per dispatch dtype."""

Line = tuple[float, float]  # (seconds fixed, seconds per token)


def gpus_per_node(group_gpus: int, hw: HardwareSpec) -> tuple[int, int]:
    """(GPUs of the group per node, nodes) for a group packed onto whole scale-up
    domains."""
    n = min(group_gpus, hw.scale_up_domain_gpus)
    return n, ceil(group_gpus / n)


def allreduce_lines(group_gpus: int, hw: HardwareSpec, bytes_per_token: float, *,
                    nccl_latency_s: float, nccl_efficiency: float,
                    custom_latency_s: float, custom_efficiency: float) -> tuple[Line, Line]:
    """(custom kernel, NCCL) lines of one all-reduce of ``bytes_per_token`` per token over
    ``group_gpus`` GPUs; the step pays the lesser. Across nodes both are NCCL's
    hierarchical all-reduce (no custom kernel spans nodes)."""
    if group_gpus <= 1:
        return (0.0, 0.0), (0.0, 0.0)
    n, nodes = gpus_per_node(group_gpus, hw)
    nvlink = hw.scale_up_bandwidth_gb_per_s * 1e9
    ring = 2.0 * (n - 1) / n
    if nodes == 1:
        custom = (custom_latency_s, bytes_per_token * ring / (nvlink * custom_efficiency))
        nccl = (nccl_latency_s, bytes_per_token * ring / (nvlink * nccl_efficiency))
        return custom, nccl
    nic = hw.scale_out_bandwidth_gb_per_s * 1e9
    per_token = (bytes_per_token * ring / (nvlink * nccl_efficiency)
                 + bytes_per_token / n * 2.0 * (nodes - 1) / nodes / (nic * nccl_efficiency))
    line = (hw.collective_latency_s(group_gpus, nccl_latency_s), per_token)
    return line, line


def distinct_nodes(top_k: int, nodes: int, max_nodes: int | None) -> float:
    """Expected nodes a token's ``top_k`` experts fall on (uniform over ``nodes``), at
    most ``max_nodes`` under node-limited routing."""
    d = nodes * (1.0 - (1.0 - 1.0 / nodes) ** top_k)
    return min(d, float(max_nodes)) if max_nodes else d


def alltoall_lines(ep: int, hw: HardwareSpec, *, top_k: int, hidden: int,
                   dispatch_bytes: float, combine_bytes: float,
                   max_nodes_per_token: int | None) -> tuple[Line, Line]:
    """(low-latency, normal) lines of one MoE layer's dispatch + combine per token a GPU
    sends, over ``ep`` GPUs."""
    if ep <= 1:
        return (0.0, 0.0), (0.0, 0.0)
    n, nodes = gpus_per_node(ep, hw)
    nvlink = hw.scale_up_bandwidth_gb_per_s * 1e9 * DEEPEP_NVLINK_EFFICIENCY
    nic = hw.scale_out_bandwidth_gb_per_s * 1e9 * DEEPEP_RDMA_EFFICIENCY
    fixed = DEEPEP_DISPATCH_FIXED_S + DEEPEP_COMBINE_FIXED_S
    per_copy = hidden * (dispatch_bytes + combine_bytes)
    # low latency: every one of the top_k copies on its own
    intra = top_k * (n - 1) / ep * per_copy
    inter = top_k * (ep - n) / ep * per_copy
    low_latency = (fixed, max(intra / nvlink, inter / nic))
    # normal: once per remote node, then fanned out over NVLink inside it
    remote = distinct_nodes(top_k, nodes, max_nodes_per_token) * (nodes - 1) / nodes
    normal = (fixed, max(intra / nvlink, remote * per_copy / nic))
    return low_latency, normal
